//! Both announcers through the one contract, on a cluster in memory: each node runs its own
//! announcer on the same view, and what they announce together is the spread.

use crate::announce::placement::{Eligible, NodeName, choose};
use crate::announce::{
    Announcer, Announcing, BgpAnnouncer, L2Announcer, L2Emits, Spread, l2::announcement,
};
use crate::config::{BridgeConfig, Config};
use crate::plan::flows::FlowKey;
use ipnet::IpNet;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an address")
}

fn names(n: &[&str]) -> BTreeSet<NodeName> {
    n.iter().map(|n| Arc::from(*n)).collect()
}

fn only(n: &[&str]) -> Eligible {
    Eligible::Nodes(Arc::new(names(n)))
}

/// One bridge, `br-ex`, that announces.
fn announcing() -> Announcing {
    Announcing::of(&Config {
        bridges: vec![BridgeConfig {
            announce: true,
            ..Default::default()
        }],
        ..Default::default()
    })
}

/// Every node of [`NODES`] with its L2 announcer.
fn l2_cluster() -> Vec<(NodeName, L2Announcer)> {
    NODES
        .iter()
        .map(|n| (Arc::from(*n), L2Announcer::new(n, &announcing())))
        .collect()
}

/// Every node of [`NODES`] with its BGP announcer, its dataplane carrying every VIP of `vips`.
fn bgp_cluster(vips: &BTreeMap<IpAddr, Eligible>) -> Vec<(NodeName, BgpAnnouncer)> {
    NODES
        .iter()
        .map(|n| {
            let mut a = BgpAnnouncer::new(n);
            a.carry(vips.keys().copied().collect());
            (Arc::from(*n), a)
        })
        .collect()
}

/// Update every node's announcer with the same view; the nodes that announce each VIP.
fn who_announces<A: Announcer>(
    cluster: &mut [(NodeName, A)],
    vips: &BTreeMap<IpAddr, Eligible>,
    live: &BTreeSet<NodeName>,
) -> BTreeMap<IpAddr, BTreeSet<NodeName>> {
    let mut out: BTreeMap<IpAddr, BTreeSet<NodeName>> = BTreeMap::new();
    for (node, a) in cluster.iter_mut() {
        a.update(vips, live);
        for vip in a.here() {
            out.entry(vip).or_default().insert(node.clone());
        }
    }
    out
}

fn any(vips: &[&str]) -> BTreeMap<IpAddr, Eligible> {
    vips.iter().map(|v| (ip(v), Eligible::Any)).collect()
}

#[test]
fn l2_puts_each_vip_on_one_node_and_bgp_on_every_eligible_node() {
    let vips = any(&["192.0.2.1", "192.0.2.2", "192.0.2.3", "2001:db8::1"]);
    let live = names(&NODES);
    let mut l2 = l2_cluster();
    let mut bgp = bgp_cluster(&vips);
    assert_eq!(l2[0].1.spread(), Spread::OneOwner);
    assert_eq!(bgp[0].1.spread(), Spread::EveryEligible);

    let by_l2 = who_announces(&mut l2, &vips, &live);
    let by_bgp = who_announces(&mut bgp, &vips, &live);
    for vip in vips.keys() {
        // The best-scoring live node, the same one on every node.
        let owner = choose(*vip, &live).expect("a live node");
        assert_eq!(by_l2.get(vip), Some(&BTreeSet::from([owner])), "{vip}");
        assert_eq!(by_bgp.get(vip), Some(&live), "{vip}");
    }
}

#[test]
fn a_local_vip_goes_only_to_nodes_with_an_endpoint_and_without_one_to_none() {
    let mut vips = BTreeMap::new();
    // externalTrafficPolicy Local: the nodes with a ready endpoint.
    vips.insert(ip("192.0.2.10"), only(&["node-b", "node-c"]));
    vips.insert(ip("2001:db8::10"), only(&["node-a"]));
    // Local with no ready endpoint anywhere.
    vips.insert(ip("192.0.2.11"), only(&[]));
    let live = names(&NODES);

    let by_l2 = who_announces(&mut l2_cluster(), &vips, &live);
    let on_b_or_c = by_l2.get(&ip("192.0.2.10")).expect("announced");
    assert_eq!(on_b_or_c.len(), 1);
    assert!(names(&["node-b", "node-c"]).is_superset(on_b_or_c));
    assert_eq!(by_l2.get(&ip("2001:db8::10")), Some(&names(&["node-a"])));
    assert_eq!(by_l2.get(&ip("192.0.2.11")), None);

    let by_bgp = who_announces(&mut bgp_cluster(&vips), &vips, &live);
    assert_eq!(
        by_bgp.get(&ip("192.0.2.10")),
        Some(&names(&["node-b", "node-c"]))
    );
    assert_eq!(by_bgp.get(&ip("2001:db8::10")), Some(&names(&["node-a"])));
    assert_eq!(by_bgp.get(&ip("192.0.2.11")), None);
}

#[test]
fn when_a_node_dies_l2_moves_its_vips_to_one_other_and_keeps_them_there_bgp_drops_only_it() {
    let vips = any(&[
        "192.0.2.1",
        "192.0.2.2",
        "192.0.2.3",
        "192.0.2.4",
        "2001:db8::1",
    ]);
    let all = names(&NODES);
    let mut l2 = l2_cluster();
    let before = who_announces(&mut l2, &vips, &all);
    // A VIP of node-a's, and the others' VIPs, which stay where they are.
    let dead: NodeName = Arc::from("node-a");
    let (moved, kept): (Vec<_>, Vec<_>) = before
        .iter()
        .map(|(v, n)| (*v, n.iter().next().cloned().expect("an owner")))
        .partition(|(_, n)| *n == dead);
    assert!(!moved.is_empty(), "node-a owns none of {before:?}");

    let without_a = names(&["node-b", "node-c"]);
    let mut emits: BTreeMap<NodeName, L2Emits> = BTreeMap::new();
    for (node, a) in l2.iter_mut().filter(|(n, _)| *n != dead) {
        emits.insert(node.clone(), a.update(&vips, &without_a));
    }
    for (vip, _) in &moved {
        let to = choose(*vip, &without_a).expect("a live node");
        assert!(l2.iter().any(|(n, a)| *n == to && a.here().contains(vip)));
        // The new owner, and it alone, announces the takeover.
        for (n, e) in &emits {
            assert_eq!(e.takeovers.contains(vip), *n == to, "{vip} on {n}");
        }
    }
    for (vip, owner) in &kept {
        assert!(l2.iter().any(|(n, a)| n == owner && a.here().contains(vip)));
    }
    // node-a comes back: the others give it nothing back (node-a itself learns the owners
    // from their claims, which the membership carries).
    let (a, survivors) = l2.split_at_mut(1);
    assert_eq!(a[0].0, dead);
    let after = who_announces(survivors, &vips, &all);
    for (vip, _) in &moved {
        let to = choose(*vip, &without_a).expect("a live node");
        assert_eq!(after.get(vip), Some(&BTreeSet::from([to])), "{vip}");
    }

    let mut bgp = bgp_cluster(&vips);
    let by_bgp = who_announces(&mut bgp, &vips, &without_a);
    assert!(by_bgp.values().all(|n| *n == without_a), "{by_bgp:?}");
    let back = who_announces(&mut bgp, &vips, &all);
    assert!(back.values().all(|n| *n == all), "{back:?}");
}

#[test]
fn l2_emits_answer_flows_on_each_announcing_bridge_and_a_takeover_once() {
    let cfg = Config {
        node_name: "node-a".into(),
        bridges: ["br-a", "br-ex", "br-b"]
            .iter()
            .map(|name| BridgeConfig {
                name: (*name).into(),
                announce: *name != "br-ex",
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let mut a = L2Announcer::new(&cfg.node_name, &Announcing::of(&cfg));
    let vips = any(&["192.0.2.1", "2001:db8::1"]);
    let live = names(&["node-a"]);
    let e = a.update(&vips, &live);
    let keys = vec![
        FlowKey::ArpAnswer("192.0.2.1".parse().expect("v4")),
        FlowKey::NdAnswer("2001:db8::1".parse().expect("v6")),
        FlowKey::NdAdvert("2001:db8::1".parse().expect("v6")),
    ];
    assert_eq!(
        e.answers,
        [
            ("br-a".to_string(), keys.clone()),
            ("br-b".to_string(), keys)
        ]
    );
    assert_eq!(e.takeovers, [ip("192.0.2.1"), ip("2001:db8::1")]);
    // Nothing changed: the same answers, no takeover to tell.
    let again = a.update(&vips, &live);
    assert_eq!(again.answers, e.answers);
    assert!(again.takeovers.is_empty());
    // What a takeover sends: a gratuitous ARP (ethertype 0x0806) or an unsolicited NA
    // (0x86dd) from the bridge's MAC.
    let mac = [0x0a, 0x58, 0xac, 0x12, 0x00, 0x11];
    let garp = announcement(ip("192.0.2.1"), mac, None);
    assert_eq!((&garp[6..12], &garp[12..14]), (&mac[..], &[0x08, 0x06][..]));
    let na = announcement(ip("2001:db8::1"), mac, None);
    assert_eq!((&na[6..12], &na[12..14]), (&mac[..], &[0x86, 0xdd][..]));
}

#[test]
fn bgp_emits_host_prefixes_only_for_what_the_node_carries_and_none_when_excluded() {
    let vips = any(&["192.0.2.1", "192.0.2.2", "2001:db8::1"]);
    let live = names(&NODES);
    let mut a = BgpAnnouncer::new("node-a");
    assert!(
        a.update(&vips, &live).is_empty(),
        "its dataplane carries none yet"
    );
    a.carry([ip("192.0.2.1"), ip("2001:db8::1")].into());
    let nets: BTreeSet<IpNet> = ["192.0.2.1/32", "2001:db8::1/128"]
        .iter()
        .map(|s| s.parse().expect("a prefix"))
        .collect();
    assert_eq!(a.update(&vips, &live), nets);
    assert_eq!(a.here(), [ip("192.0.2.1"), ip("2001:db8::1")]);
    a.exclude(true);
    assert!(a.update(&vips, &live).is_empty());
    assert!(a.here().is_empty());
    a.exclude(false);
    assert!(a.update(&vips, &names(&["node-b"])).is_empty(), "not live");
}
