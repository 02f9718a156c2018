//! The allocator's decisions, one rule at a time, and a property test over random histories.

use super::*;
use crate::ipam::pool::{Family, PoolProblem, PoolSpec};
use crate::ipam::request::*;
use crate::model::{Protocol, ServiceKey};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn req(name: &str) -> AllocRequest {
    AllocRequest {
        ports: [(Protocol::Tcp, 80)].into_iter().collect(),
        selector: format!("app={name}"),
        ..AllocRequest::holding(ServiceKey::new("ns", name))
    }
}

fn pool(name: &str, addrs: &[&str]) -> PoolSpec {
    PoolSpec::new(name, addrs)
}

fn ips(a: &Result<Assigned, AllocError>) -> Vec<String> {
    a.as_ref()
        .map(|a| a.ips.iter().map(|i| i.to_string()).collect())
        .unwrap_or_default()
}

#[test]
fn auto_assign_takes_the_lowest_free_address_of_the_best_pool() {
    let mut low = pool("z-low", &["10.0.2.0/30"]);
    low.allocation.priority = Some(1);
    let mut off = pool("a-off", &["10.0.3.0/30"]);
    off.auto_assign = false;
    let mut a = Allocator::new(vec![pool("a-none", &["10.0.1.0/30"]), low, off]);
    // The pool with a priority first, whatever its name; then the rest by name.
    assert_eq!(ips(&a.assign(&req("s1"))), ["10.0.2.0"]);
    for n in ["s2", "s3", "s4"] {
        a.assign(&req(n)).unwrap();
    }
    assert_eq!(ips(&a.assign(&req("s5"))), ["10.0.1.0"]);
    // A freed address is the lowest again.
    a.release(&ServiceKey::new("ns", "s2"));
    assert_eq!(ips(&a.assign(&req("s6"))), ["10.0.2.1"]);
    // Deciding again changes nothing.
    assert_eq!(ips(&a.assign(&req("s6"))), ["10.0.2.1"]);
    let again = a.assign(&req("s6")).unwrap();
    assert!(again.new.is_empty() && again.released.is_empty());
}

#[test]
fn avoid_buggy_ips_skips_dot_0_and_dot_255() {
    let mut p = pool("p", &["10.0.0.255-10.0.1.1"]);
    p.avoid_buggy_ips = true;
    let mut a = Allocator::new(vec![p]);
    assert_eq!(
        a.usage("p", Family::V4),
        Usage {
            assigned: 0,
            available: 1
        }
    );
    assert_eq!(ips(&a.assign(&req("s1"))), ["10.0.1.1"]);
    let mut r = req("s2");
    r.requested_ips = vec![ip("10.0.1.0")];
    assert!(matches!(
        a.assign(&r),
        Err(AllocError::RequestedAvoided { .. })
    ));
    assert!(matches!(
        a.assign(&req("s3")),
        Err(AllocError::Exhausted { .. })
    ));
}

#[test]
fn a_requested_address_is_granted_when_free_and_in_a_pool() {
    let mut a = Allocator::new(vec![pool("p", &["10.0.0.0/28"])]);
    let mut r = req("s1");
    r.requested_ips = vec![ip("10.0.0.9")];
    assert_eq!(ips(&a.assign(&r)), ["10.0.0.9"]);
    let mut other = req("s2");
    other.requested_ips = vec![ip("10.0.0.9")];
    let e = a.assign(&other).unwrap_err();
    assert_eq!(e.reason(), "RequestedIPInUse");
    assert!(e.to_string().contains("ns/s1"), "{e}");
    other.requested_ips = vec![ip("192.0.2.1")];
    assert_eq!(
        a.assign(&other),
        Err(AllocError::RequestedNotInPool {
            ip: ip("192.0.2.1")
        })
    );
    // Failed decisions left s2 with nothing, and s1 as it was.
    assert!(a.held(&other.service).is_empty());
    // Asking for another address moves the Service, and frees the old one.
    r.requested_ips = vec![ip("10.0.0.3")];
    let moved = a.assign(&r).unwrap();
    assert_eq!(moved.released, [ip("10.0.0.9")]);
    assert_eq!(a.holders(ip("10.0.0.9")).count(), 0);
    // An address of a requested family the Service does not use.
    r.requested_ips = vec![ip("fd00::1")];
    assert_eq!(a.assign(&r).unwrap_err().reason(), "BadRequest");
    assert_eq!(a.held(&r.service), [ip("10.0.0.3")]);
}

#[test]
fn a_requested_pool_is_used_even_without_auto_assign_but_its_rules_hold() {
    let mut manual = pool("manual", &["10.0.5.0/30"]);
    manual.auto_assign = false;
    manual.allocation.namespaces = vec!["ns".into()];
    let mut a = Allocator::new(vec![
        pool("auto", &["10.0.4.0/30"]),
        manual,
        pool("clash", &["10.0.4.2-10.0.4.9"]),
    ]);
    let mut r = req("s1");
    r.requested_pool = Some("manual".into());
    assert_eq!(ips(&a.assign(&r)), ["10.0.5.0"]);
    // Its namespace rule holds for Services that name it too.
    let mut elsewhere = req("s2");
    elsewhere.service = ServiceKey::new("other", "s2");
    elsewhere.requested_pool = Some("manual".into());
    assert_eq!(a.assign(&elsewhere).unwrap_err().reason(), "PoolNotUsable");
    r.requested_pool = Some("nope".into());
    assert_eq!(a.assign(&r), Err(AllocError::UnknownPool("nope".into())));
    // "clash" overlaps "auto" (before it by name) and cannot be used; it says why.
    r.requested_pool = Some("clash".into());
    let e = a.assign(&r).unwrap_err();
    assert!(matches!(
        e,
        AllocError::PoolUnusable {
            problem: PoolProblem::Overlap { .. },
            ..
        }
    ));
    assert!(e.to_string().contains("overlaps pool `auto`"), "{e}");
    // Still in "manual": a failed request for another pool moves nothing.
    assert_eq!(a.held(&r.service), [ip("10.0.5.0")]);
    // Without a pool named it keeps its address, though "manual" does not auto-assign.
    r.requested_pool = None;
    assert_eq!(ips(&a.assign(&r)), ["10.0.5.0"]);
}

#[test]
fn sharing_needs_one_key_disjoint_ports_and_equal_selectors_for_local() {
    let mut a = Allocator::new(vec![pool("p", &["10.0.0.0/28"])]);
    let mut web = req("web");
    web.sharing_key = Some("k".into());
    let mut dns = req("dns");
    dns.sharing_key = Some("k".into());
    dns.ports = [(Protocol::Udp, 53)].into_iter().collect();
    let first = a.assign(&web).unwrap().ips;
    assert_eq!(
        a.assign(&dns).unwrap().ips,
        first,
        "same key, other ports: shared"
    );
    let mut clash = req("clash");
    clash.sharing_key = Some("k".into());
    clash.requested_ips = first.clone();
    let e = a.assign(&clash).unwrap_err();
    assert!(
        matches!(
            e,
            AllocError::RequestedInUse {
                why: ShareRefusal::PortOverlap(Protocol::Tcp, 80),
                ..
            }
        ),
        "{e}"
    );
    // Without the request it gets an address of its own.
    clash.requested_ips.clear();
    assert_ne!(a.assign(&clash).unwrap().ips, first);
    let mut local = req("local");
    local.sharing_key = Some("k".into());
    local.ports = [(Protocol::Tcp, 8443)].into_iter().collect();
    local.local = true;
    local.requested_ips = first.clone();
    assert!(matches!(
        a.assign(&local),
        Err(AllocError::RequestedInUse {
            why: ShareRefusal::SelectorDiffers,
            ..
        })
    ));
    let mut nokey = req("nokey");
    nokey.ports = [(Protocol::Tcp, 9)].into_iter().collect();
    nokey.requested_ips = first.clone();
    assert!(matches!(
        a.assign(&nokey),
        Err(AllocError::RequestedInUse {
            why: ShareRefusal::NoSharingKey,
            ..
        })
    ));
    // The address goes back to the pool only when its last holder goes.
    a.release(&web.service);
    assert_eq!(a.holders(first[0]).count(), 1);
    a.release(&dns.service);
    assert_eq!(a.holders(first[0]).count(), 0);
    // A sharer whose ports come to overlap asked for that: it moves, the other stays.
    let mut x = req("x");
    x.sharing_key = Some("j".into());
    let mut y = req("y");
    y.sharing_key = Some("j".into());
    y.ports = [(Protocol::Tcp, 81)].into_iter().collect();
    let shared = a.assign(&x).unwrap().ips;
    assert_eq!(a.assign(&y).unwrap().ips, shared);
    y.ports = [(Protocol::Tcp, 80)].into_iter().collect();
    let moved = a.assign(&y).unwrap();
    assert_eq!(moved.released, shared);
    assert_ne!(moved.ips, shared);
    assert_eq!(a.held(&x.service), shared.as_slice());
    assert_eq!(a.holders(shared[0]).count(), 1);
}

#[test]
fn a_holder_that_takes_or_changes_a_sharing_key_can_be_joined_on_the_new_one() {
    let mut a = Allocator::new(vec![pool("p", &["10.0.0.0/30"])]);
    let mut web = req("web");
    let first = a.assign(&web).unwrap().ips;
    // It takes a sharing key later, keeping its address: a Service with that key and other
    // ports then shares it.
    web.sharing_key = Some("k".into());
    assert_eq!(a.assign(&web).unwrap().ips, first);
    let mut dns = req("dns");
    dns.sharing_key = Some("k".into());
    dns.ports = [(Protocol::Udp, 53)].into();
    assert_eq!(a.assign(&dns).unwrap().ips, first);
    // Alone again, it changes its key: the new key finds the address, the old one no longer.
    a.release(&dns.service);
    web.sharing_key = Some("j".into());
    assert_eq!(a.assign(&web).unwrap().ips, first);
    let mut on_j = req("on-j");
    on_j.sharing_key = Some("j".into());
    on_j.ports = [(Protocol::Tcp, 8080)].into();
    assert_eq!(a.assign(&on_j).unwrap().ips, first);
    let mut on_k = req("on-k");
    on_k.sharing_key = Some("k".into());
    on_k.ports = [(Protocol::Tcp, 9)].into();
    assert_ne!(a.assign(&on_k).unwrap().ips, first);
}

#[test]
fn dual_stack_require_and_prefer() {
    let mut a = Allocator::new(vec![pool("v4", &["10.0.0.0/30"])]);
    let mut req_dual = req("r");
    req_dual.policy = StackPolicy::RequireDualStack;
    assert_eq!(a.assign(&req_dual), Err(AllocError::NoPool(Family::V6)));
    assert!(a.held(&req_dual.service).is_empty(), "nothing half-taken");
    let mut prefer = req("p");
    prefer.policy = StackPolicy::PreferDualStack;
    let got = a.assign(&prefer).unwrap();
    assert_eq!(got.ips, [ip("10.0.0.0")]);
    assert_eq!(got.partial, Some(AllocError::NoPool(Family::V6)));
    // A v6 pool appears: Require is met, and Prefer gains its second family, keeping the first.
    a.set_pools(vec![
        pool("v4", &["10.0.0.0/30"]),
        pool("v6", &["fd00::10-fd00::1f"]),
    ]);
    assert_eq!(ips(&a.assign(&req_dual)), ["10.0.0.1", "fd00::10"]);
    assert_eq!(ips(&a.assign(&prefer)), ["10.0.0.0", "fd00::11"]);
    // IPv6 first when the Service lists it first.
    let mut v6 = req("six");
    v6.families = vec![Family::V6, Family::V4];
    v6.policy = StackPolicy::RequireDualStack;
    assert_eq!(ips(&a.assign(&v6)), ["fd00::12", "10.0.0.2"]);
    // Back to one family: the other address is released.
    v6.policy = StackPolicy::SingleStack;
    let single = a.assign(&v6).unwrap();
    assert_eq!(single.released, [ip("10.0.0.2")]);
}

#[test]
fn exhaustion_then_an_address_frees() {
    let mut a = Allocator::new(vec![pool("p", &["10.0.0.0/31"])]);
    a.assign(&req("a")).unwrap();
    a.assign(&req("b")).unwrap();
    let e = a.assign(&req("c")).unwrap_err();
    assert_eq!(e.reason(), "PoolExhausted");
    assert_eq!(e.to_string(), "no free IPv4 address in `p`");
    a.release(&ServiceKey::new("ns", "a"));
    assert_eq!(ips(&a.assign(&req("c"))), ["10.0.0.0"]);
}

#[test]
fn a_restart_keeps_every_address_and_reserves_before_allocating() {
    let pools = vec![pool("p", &["10.0.0.0/29"])];
    let mut a = Allocator::new(pools.clone());
    let mut statuses = BTreeMap::new();
    for n in ["a", "b", "c", "d"] {
        statuses.insert(n, a.assign(&req(n)).unwrap().ips);
    }
    // "a" and "c" go; then a restart, with a new Service listed before the others.
    a.release(&ServiceKey::new("ns", "a"));
    statuses.remove("a");
    statuses.remove("c");
    let mut b = Allocator::new(pools);
    for (n, ips) in &statuses {
        let r = req(n);
        let t = Terms::of(&r);
        assert!(b.reserve_all([(&r, ips.as_slice(), Some(&t))]).is_empty());
    }
    assert_eq!(ips(&b.assign(&req("0new"))), ["10.0.0.0"]);
    for (n, before) in &statuses {
        assert_eq!(
            &b.assign(&req(n)).unwrap().ips,
            before,
            "{n} kept its address"
        );
    }
    assert_eq!(ips(&b.assign(&req("1new"))), ["10.0.0.2"]);
}

#[test]
fn a_pool_that_shrinks_or_goes_keeps_its_addresses_and_says_so() {
    let mut a = Allocator::new(vec![
        pool("p", &["10.0.0.0/30"]),
        pool("q", &["10.0.1.0/30"]),
    ]);
    let kept = a.assign(&req("s")).unwrap().ips;
    assert_eq!(kept, [ip("10.0.0.0")]);
    a.set_pools(vec![
        pool("p", &["10.0.0.2/31"]),
        pool("q", &["10.0.1.0/30"]),
    ]);
    assert_eq!(a.assign(&req("s")).unwrap().ips, kept);
    assert_eq!(
        a.outside_pools(),
        [(ServiceKey::new("ns", "s"), ip("10.0.0.0"))]
    );
    // Nobody else gets it, by request or otherwise.
    let mut r = req("t");
    r.requested_ips = kept.clone();
    assert!(a.assign(&r).is_err());
    a.set_pools(vec![pool("q", &["10.0.1.0/30"])]);
    assert_eq!(a.assign(&req("s")).unwrap().ips, kept);
    // The pool comes back with the address: it is still taken.
    a.set_pools(vec![pool("p", &["10.0.0.0/30"])]);
    assert!(a.outside_pools().is_empty());
    assert_eq!(ips(&a.assign(&req("u"))), ["10.0.0.1"]);
    assert_eq!(
        a.usage("p", Family::V4),
        Usage {
            assigned: 2,
            available: 2
        }
    );
}

#[test]
fn a_conflicting_status_at_a_start_is_reported_and_the_later_or_changed_one_loses() {
    let pools = vec![pool("p", &["10.0.0.0/30"])];
    let one = [ip("10.0.0.1")];
    // Two statuses with one address, both written for their present terms (a hand edit):
    // the one listed first (the older) keeps it.
    let (first, second) = (req("first"), req("second"));
    let mut a = Allocator::new(pools.clone());
    let (t1, t2) = (Terms::of(&first), Terms::of(&second));
    let c = a.reserve_all([
        (&first, &one[..], Some(&t1)),
        (&second, &one[..], Some(&t2)),
    ]);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].0, second.service);
    assert_eq!(c[0].1.holder, first.service);
    assert_eq!(c[0].1.why, ShareRefusal::NoSharingKey);
    // The loser gets another address.
    assert_eq!(ips(&a.assign(&second)), ["10.0.0.0"]);
    // Two sharers; the older dropped its sharing key while no instance led. Both keep the
    // address on the terms their statuses were written for; nobody may join on the older
    // one's new terms, and its next decision moves it (it asked), not the newer one.
    let mut older = req("older");
    let mut newer = req("newer");
    newer.sharing_key = Some("k".into());
    newer.ports = [(Protocol::Tcp, 443)].into();
    older.sharing_key = Some("k".into());
    let written = Terms::of(&older);
    older.sharing_key = None;
    let newer_terms = Terms::of(&newer);
    let mut a = Allocator::new(pools);
    let c = a.reserve_all([
        (&older, &one[..], Some(&written)),
        (&newer, &one[..], Some(&newer_terms)),
    ]);
    assert!(c.is_empty());
    assert_eq!(ips(&a.assign(&newer)), ["10.0.0.1"]);
    let moved = a.assign(&older).unwrap();
    assert_eq!(moved.released, one);
    assert_eq!(a.holders(one[0]).collect::<Vec<_>>(), [&newer.service]);
}

mod histories;
