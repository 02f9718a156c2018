//! The planner with announcing bridges: each IPv4 VIP's ARP answer is planned on exactly one
//! of the nodes, and moves with the Nodes' readiness; the bypass stays on every node.

use super::*;
use crate::plan::flows::FlowKey;
use std::collections::BTreeSet;
use std::net::Ipv4Addr;

fn objects(ready: [&str; 3]) -> Objects {
    let mut s = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for (i, r) in ready.iter().enumerate() {
        s.push_str(&format!(
            "- apiVersion: v1
  kind: Node
  metadata: {{name: n{}}}
  status: {{conditions: [{{type: Ready, status: '{r}'}}]}}
",
            i + 1
        ));
    }
    for i in 0..12 {
        s.push_str(&format!(
            "- apiVersion: v1
  kind: Service
  metadata: {{name: s{i}, namespace: shop}}
  spec:
    externalIPs: [198.51.100.{i}, '2001:db8::{i:x}']
    ports: [{{port: 80, protocol: TCP}}]
"
        ));
    }
    crate::source::file::parse(&s).expect("objects").objects
}

fn planner(node: &str, announce: bool) -> Planner {
    let bridge = BridgeConfig {
        announce,
        ..BridgeConfig::default()
    };
    Planner::new(ModelOptions::default(), &[bridge], 0x7f1f, None).announcing_as(node)
}

/// The VIPs of the ARP answers among `keys`.
fn answers<'a>(keys: impl IntoIterator<Item = &'a FlowKey>) -> BTreeSet<Ipv4Addr> {
    keys.into_iter()
        .filter_map(|k| match k {
            FlowKey::ArpAnswer(v) => Some(*v),
            _ => None,
        })
        .collect()
}

#[test]
fn every_vip_is_answered_on_one_node_and_moves_when_its_node_is_not_ready() {
    let all_ready = objects(["True", "True", "True"]);
    let mut nodes: Vec<Planner> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| planner(n, true))
        .collect();
    let mut owned: Vec<BTreeSet<Ipv4Addr>> = Vec::new();
    for p in &mut nodes {
        let plans = p.update(&all_ready);
        let b = &plans.bridges[0];
        let mine = answers(&b.flows);
        // The first plan's delta names every answer it planned.
        assert_eq!(answers(&b.delta.touched), mine);
        // The bypass of every IPv4 VIP is on every node (dropping what it does not answer).
        for i in 0..12u8 {
            assert!(
                b.flows
                    .contains(&FlowKey::Arp(Ipv4Addr::new(198, 51, 100, i)))
            );
        }
        owned.push(mine);
    }
    let total: usize = owned.iter().map(|o| o.len()).sum();
    let union: BTreeSet<Ipv4Addr> = owned.iter().flatten().copied().collect();
    assert_eq!((total, union.len()), (12, 12), "{owned:?}");

    // n1 is not Ready: its answers go, and n2 and n3 take exactly those, each in its delta.
    let n1_down = objects(["False", "True", "True"]);
    let p1 = nodes[0].update(&n1_down);
    assert!(answers(&p1.bridges[0].flows).is_empty());
    assert_eq!(answers(&p1.bridges[0].delta.touched), owned[0]);
    let mut taken = BTreeSet::new();
    for (i, p) in nodes.iter_mut().enumerate().skip(1) {
        let plans = p.update(&n1_down);
        let now = answers(&plans.bridges[0].flows);
        assert!(now.is_superset(&owned[i]), "n{} kept its own", i + 1);
        taken.extend(now.difference(&owned[i]).copied());
        // Only answers moved: the delta names nothing else.
        assert!(
            plans.bridges[0]
                .delta
                .touched
                .iter()
                .all(|k| matches!(k, FlowKey::ArpAnswer(_))),
            "{:?}",
            plans.bridges[0].delta
        );
    }
    assert_eq!(taken, owned[0]);
}

#[test]
fn a_bridge_that_does_not_announce_plans_no_answers() {
    let mut p = planner("n1", false);
    let plans = p.update(&objects(["True", "True", "True"]));
    assert!(answers(&plans.bridges[0].flows).is_empty());
}
