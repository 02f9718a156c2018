//! The allocation loop in memory: Services and pools in, status writes and statements out.

use super::*;
use crate::ipam::pool::PoolSpec;
use crate::ipam::service::{self, CONDITION};
use crate::model::ServiceKey;
use k8s_openapi::api::core::v1::Service;
use serde_json::json;
use std::collections::HashMap;
use std::net::IpAddr;

fn svc(name: &str, status_ips: &[&str], record: Option<&StatusWrite>) -> (ServiceKey, SeenService) {
    let mut v = json!({
        "metadata": {"name": name, "namespace": "ns",
                     "creationTimestamp": format!("2026-11-26T00:00:{:02}Z", name.len())},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
    });
    if !status_ips.is_empty() {
        let ingress: Vec<_> = status_ips
            .iter()
            .map(|ip| json!({"ip": ip, "ipMode": "VIP"}))
            .collect();
        v["status"] = json!({"loadBalancer": {"ingress": ingress}});
        if let Some(w) = record {
            v["status"]["conditions"] = json!([{"type": CONDITION, "status": "True",
                "reason": "Allocated", "message": serde_json::to_string(&w.record).unwrap(),
                "lastTransitionTime": "2026-11-26T00:00:00Z"}]);
        }
    }
    let s: Service = serde_json::from_value(v).unwrap();
    let seen = match service::read(&s, None) {
        Ok(Some(a)) => SeenService::Ask(Box::new(a)),
        Ok(None) => unreachable!("a LoadBalancer"),
        Err(e) => SeenService::Bad {
            error: e,
            current: service::status_ips(&s),
            created: None,
        },
    };
    (ServiceKey::new("ns", name), seen)
}

fn ips(w: &StatusWrite) -> Vec<String> {
    w.ips.iter().map(IpAddr::to_string).collect()
}

fn pools() -> Vec<PoolSpec> {
    vec![PoolSpec::new("p", &["10.0.0.0/30"])]
}

#[test]
fn start_reserves_statuses_then_allocates_and_writes_only_what_changes() {
    // "old" holds .2 from another allocator (no record); "new" has nothing.
    let (mut a, writes) = Allocations::start(
        pools(),
        HashMap::new(),
        vec![svc("old", &["10.0.0.2"], None), svc("new", &[], None)],
    );
    // Both are written: "new" gets the lowest free address, "old" keeps .2 and gets its record.
    assert_eq!(writes.len(), 2);
    let new = writes.iter().find(|w| &*w.service.name == "new").unwrap();
    let old = writes.iter().find(|w| &*w.service.name == "old").unwrap();
    assert_eq!(ips(new), ["10.0.0.0"]);
    assert_eq!(ips(old), ["10.0.0.2"]);
    for w in &writes {
        a.written(&w.service, true);
    }
    // The watch brings the written statuses back: nothing more to write.
    let back_new = svc("new", &["10.0.0.0"], Some(new));
    assert_eq!(a.service(back_new.0, Some(back_new.1)), None);
    // A restart from those statuses writes nothing and moves nothing.
    let (b, again) = Allocations::start(
        pools(),
        HashMap::new(),
        vec![
            svc("old", &["10.0.0.2"], Some(old)),
            svc("new", &["10.0.0.0"], Some(new)),
        ],
    );
    assert!(again.is_empty(), "{again:?}");
    assert_eq!(
        b.allocator().held(&ServiceKey::new("ns", "old")),
        ["10.0.0.2".parse::<IpAddr>().unwrap()]
    );
    let said = b.statements();
    assert!(
        said.iter().all(|e| !e.warning && e.reason == "IPAllocated"),
        "{said:?}"
    );
}

#[test]
fn exhaustion_is_said_then_allocation_follows_a_release() {
    let (mut a, writes) = Allocations::start(
        vec![PoolSpec::new("p", &["10.0.0.0/31"])],
        HashMap::new(),
        vec![
            svc("a", &[], None),
            svc("b", &[], None),
            svc("c", &[], None),
        ],
    );
    assert_eq!(writes.len(), 2);
    for w in &writes {
        a.written(&w.service, true);
    }
    let c = ServiceKey::new("ns", "c");
    let warn: Vec<_> = a.statements().into_iter().filter(|e| e.warning).collect();
    assert_eq!(warn.len(), 1);
    assert_eq!(warn[0].service, c);
    assert_eq!(warn[0].reason, "PoolExhausted");
    // "a" goes; a retry gives "c" its address.
    a.service(ServiceKey::new("ns", "a"), None);
    let retried = a.retry();
    assert_eq!(retried.len(), 1);
    assert_eq!(retried[0].service, c);
    assert_eq!(ips(&retried[0]), ["10.0.0.0"]);
    assert!(a.statements().iter().all(|e| !e.warning));
}

#[test]
fn a_failed_write_is_taken_back_and_retried() {
    let (mut a, writes) = Allocations::start(pools(), HashMap::new(), vec![svc("a", &[], None)]);
    assert_eq!(ips(&writes[0]), ["10.0.0.0"]);
    a.written(&writes[0].service, false);
    assert!(a.allocator().held(&writes[0].service).is_empty());
    // Meanwhile another Service takes the lowest address; "a" gets the next on retry.
    let (k, s) = svc("b", &[], None);
    let w = a.service(k.clone(), Some(s)).unwrap();
    assert_eq!(ips(&w), ["10.0.0.0"]);
    a.written(&k, true);
    let retried = a.retry();
    assert_eq!(retried.len(), 1);
    assert_eq!(ips(&retried[0]), ["10.0.0.1"]);
}

#[test]
fn pool_status_is_handed_out_when_it_changes() {
    let (mut a, writes) = Allocations::start(pools(), HashMap::new(), vec![svc("a", &[], None)]);
    a.written(&writes[0].service, true);
    let (k, back) = svc("a", &["10.0.0.0"], Some(&writes[0]));
    assert_eq!(a.service(k, Some(back)), None);
    let first = a.pool_statuses().changed;
    assert_eq!(first.len(), 1);
    assert_eq!(
        (first[0].1.assigned_ipv4, first[0].1.available_ipv4),
        (1, 3)
    );
    assert_eq!(a.pool_statuses(), PoolStatuses::default(), "unchanged");
    // The pool goes: "a" keeps its address and says so; the pool's status is no longer given.
    assert!(a.pools(vec![]).is_empty());
    assert_eq!(a.pool_statuses().gone, ["p"]);
    let said = a.statements();
    assert!(
        said.iter().any(|e| e.note.contains("in no pool now; kept")),
        "{said:?}"
    );
}

#[test]
fn a_bad_request_is_said_and_holds_what_it_had() {
    let (mut a, writes) = Allocations::start(pools(), HashMap::new(), vec![svc("a", &[], None)]);
    a.written(&writes[0].service, true);
    let key = writes[0].service.clone();
    let bad: Service = serde_json::from_value(json!({
        "metadata": {"name": "a", "namespace": "ns",
                     "annotations": {"vipflow.io/load-balancer-ips": "nope"}},
        "spec": {"type": "LoadBalancer"},
        "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.0"}]}},
    }))
    .unwrap();
    let e = service::read(&bad, None).unwrap_err();
    let seen = SeenService::Bad {
        error: e,
        current: service::status_ips(&bad),
        created: None,
    };
    assert_eq!(a.service(key.clone(), Some(seen)), None);
    assert_eq!(a.allocator().held(&key).len(), 1);
    assert!(
        a.statements()
            .iter()
            .any(|e| e.warning && e.reason == "BadRequest")
    );
}

#[test]
fn a_service_whose_request_cannot_be_read_keeps_its_address_at_a_start() {
    // "bad" holds 10.0.0.0 in its status but its request cannot be read; "new" comes after.
    let bad: Service = serde_json::from_value(json!({
        "metadata": {"name": "bad", "namespace": "ns"},
        "spec": {"type": "LoadBalancer", "ipFamilyPolicy": "Sideways"},
        "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.0"}]}},
    }))
    .unwrap();
    let seen = SeenService::Bad {
        error: service::read(&bad, None).unwrap_err(),
        current: service::status_ips(&bad),
        created: None,
    };
    let (a, writes) = Allocations::start(
        pools(),
        HashMap::new(),
        vec![(ServiceKey::new("ns", "bad"), seen), svc("new", &[], None)],
    );
    assert_eq!(writes.len(), 1);
    assert_eq!(
        ips(&writes[0]),
        ["10.0.0.1"],
        "the bad one's address is not handed out"
    );
    assert_eq!(
        a.allocator().held(&ServiceKey::new("ns", "bad")),
        ["10.0.0.0".parse::<IpAddr>().unwrap()]
    );
}

#[test]
fn a_requested_pool_deleted_under_a_service_leaves_it_its_address_and_says_kept() {
    let both = vec![
        PoolSpec::new("p", &["10.0.0.0/30"]),
        PoolSpec::new("b", &["10.0.1.0/30"]),
    ];
    let asking = |status: &[&str], record: Option<&StatusWrite>| {
        let (key, _) = svc("a", &[], None);
        let mut v = json!({
            "metadata": {"name": "a", "namespace": "ns",
                         "annotations": {"service.antrea.io/external-ip-pool": "b"}},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
        });
        if let Some(w) = record {
            v["status"] = json!({"loadBalancer": {"ingress": status.iter()
                    .map(|ip| json!({"ip": ip, "ipMode": "VIP"})).collect::<Vec<_>>()},
                "conditions": [{"type": CONDITION, "status": "True", "reason": "Allocated",
                    "message": serde_json::to_string(&w.record).unwrap(),
                    "lastTransitionTime": "2026-11-26T00:00:00Z"}]});
        }
        let s: Service = serde_json::from_value(v).unwrap();
        (
            key,
            SeenService::Ask(Box::new(service::read(&s, None).unwrap().unwrap())),
        )
    };
    let (k, s) = asking(&[], None);
    let (mut a, writes) = Allocations::start(both.clone(), HashMap::new(), vec![(k, s)]);
    assert_eq!(ips(&writes[0]), ["10.0.1.0"], "from the pool it names");
    a.written(&writes[0].service, true);
    let (k, back) = asking(&["10.0.1.0"], Some(&writes[0]));
    assert_eq!(a.service(k.clone(), Some(back)), None);

    // Pool b goes: nothing is written, the address stays, and the Event says so.
    let only_p = vec![PoolSpec::new("p", &["10.0.0.0/30"])];
    assert!(a.pools(only_p.clone()).is_empty());
    assert_eq!(
        a.allocator().held(&k),
        ["10.0.1.0".parse::<IpAddr>().unwrap()]
    );
    let said = a.statements();
    assert!(
        said.iter().any(|e| !e.warning
            && e.reason == "IPAllocated"
            && e.note.contains("10.0.1.0 (in no pool now; kept)")),
        "{said:?}"
    );
    assert!(said.iter().all(|e| !e.warning), "no Warning: {said:?}");

    // A restart (a leader change) without pool b decides the same, and writes nothing.
    let (k, back) = asking(&["10.0.1.0"], Some(&writes[0]));
    let (b, again) = Allocations::start(only_p, HashMap::new(), vec![(k.clone(), back)]);
    assert!(again.is_empty(), "{again:?}");
    assert_eq!(b.statements(), said);

    // Asking for another address in the missing pool is still refused for what it names.
    let mut ask = match asking(&["10.0.1.0"], Some(&writes[0])).1 {
        SeenService::Ask(a) => a,
        SeenService::Bad { .. } => unreachable!(),
    };
    ask.request.requested_ips = vec!["10.0.1.1".parse().unwrap()];
    assert_eq!(b.allocator().held(&k).len(), 1);
    let mut b = b;
    assert_eq!(b.service(k.clone(), Some(SeenService::Ask(ask))), None);
    assert!(
        b.statements()
            .iter()
            .any(|e| e.warning && e.reason == "PoolNotUsable"),
        "{:?}",
        b.statements()
    );
    assert_eq!(
        b.allocator().held(&k),
        ["10.0.1.0".parse::<IpAddr>().unwrap()]
    );
}
