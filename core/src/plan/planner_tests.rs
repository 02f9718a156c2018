//! The planner with announcing bridges: each VIP's answer (ARP for IPv4, the two ND flows for
//! IPv6) is planned on exactly one of the nodes, and moves with the Nodes' readiness; the
//! bypass stays on every node.

use super::*;
use crate::plan::flows::FlowKey;
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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
    crate::decode::parse(&s).expect("objects").objects
}

fn planner(node: &str, announce: bool) -> Planner {
    let bridge = BridgeConfig {
        announce,
        ..BridgeConfig::default()
    };
    Planner::new(ModelOptions::default(), &[bridge], 0x7f1f, None).announcing_as(node)
}

/// The VIPs answered among `keys`; an IPv6 VIP counts only with both of its ND flows.
fn answers<'a>(keys: impl IntoIterator<Item = &'a FlowKey>) -> BTreeSet<IpAddr> {
    let keys: BTreeSet<&FlowKey> = keys.into_iter().collect();
    keys.iter()
        .filter_map(|k| match k {
            FlowKey::ArpAnswer(v) => Some(IpAddr::V4(*v)),
            FlowKey::NdAnswer(v) if keys.contains(&FlowKey::NdAdvert(*v)) => Some(IpAddr::V6(*v)),
            _ => None,
        })
        .collect()
}

fn is_answer(k: &FlowKey) -> bool {
    matches!(
        k,
        FlowKey::ArpAnswer(_) | FlowKey::NdAnswer(_) | FlowKey::NdAdvert(_)
    )
}

#[test]
fn every_vip_is_answered_on_one_node_and_moves_when_its_node_is_not_ready() {
    let all_ready = objects(["True", "True", "True"]);
    let mut nodes: Vec<Planner> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| planner(n, true))
        .collect();
    let mut owned: Vec<BTreeSet<IpAddr>> = Vec::new();
    for p in &mut nodes {
        let plans = p.update(&all_ready);
        let b = &plans.bridges[0];
        let mine = answers(&b.flows);
        // The first plan's delta names every answer it planned.
        assert_eq!(answers(&b.delta.touched), mine);
        // The bypass of every VIP is on every node (dropping what it does not answer).
        for i in 0..12u8 {
            let v6 = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, u16::from(i));
            assert!(
                b.flows
                    .contains(&FlowKey::Arp(Ipv4Addr::new(198, 51, 100, i)))
            );
            assert!(b.flows.contains(&FlowKey::Nd(v6)));
        }
        // Nothing else answers: every answer key belongs to a whole answer.
        let keys = b.flows.iter().filter(|k| is_answer(k)).count();
        let v6 = mine.iter().filter(|v| v.is_ipv6()).count();
        assert_eq!(keys, mine.len() + v6);
        owned.push(mine);
    }
    let total: usize = owned.iter().map(|o| o.len()).sum();
    let union: BTreeSet<IpAddr> = owned.iter().flatten().copied().collect();
    assert_eq!((total, union.len()), (24, 24), "{owned:?}");

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
            plans.bridges[0].delta.touched.iter().all(is_answer),
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

/// Three Ready Nodes and `local`: an externalTrafficPolicy Local Service on 198.51.100.50 whose
/// ready endpoints are on `ready_on` (and one endpoint on n1 that is not ready).
fn local_objects(ready_on: &[&str]) -> Objects {
    let mut s = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for n in ["n1", "n2", "n3"] {
        s.push_str(&format!(
            "- {{apiVersion: v1, kind: Node, metadata: {{name: {n}}}}}\n"
        ));
    }
    s.push_str(
        "- apiVersion: v1
  kind: Service
  metadata: {name: local, namespace: shop}
  spec:
    externalIPs: [198.51.100.50]
    externalTrafficPolicy: Local
    ports: [{port: 80, protocol: TCP, targetPort: 8080}]
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: local-1, namespace: shop, labels: {kubernetes.io/service-name: local}}
  addressType: IPv4
  ports: [{port: 8080, protocol: TCP}]
  endpoints:
  - {addresses: [10.0.1.9], nodeName: n1, conditions: {ready: false}}
",
    );
    for (i, n) in ready_on.iter().enumerate() {
        s.push_str(&format!(
            "  - {{addresses: [10.0.2.{i}], nodeName: {n}, conditions: {{ready: true}}}}\n"
        ));
    }
    crate::decode::parse(&s).expect("objects").objects
}

/// Which of the three nodes answer for the Local VIP, each planning the same objects.
fn owners_of_local(nodes: &mut [Planner], objects: &Objects) -> Vec<usize> {
    let key = FlowKey::ArpAnswer(Ipv4Addr::new(198, 51, 100, 50));
    let mut owners = Vec::new();
    for (i, p) in nodes.iter_mut().enumerate() {
        if p.update(objects).bridges[0].flows.contains(&key) {
            owners.push(i + 1);
        }
    }
    owners
}

#[test]
fn an_etp_local_vip_is_announced_only_by_a_node_with_a_ready_local_endpoint() {
    let mut nodes: Vec<Planner> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| planner(n, true))
        .collect();
    // Only n3 has a ready endpoint: n3 answers, whatever the hash prefers.
    assert_eq!(owners_of_local(&mut nodes, &local_objects(&["n3"])), [3]);
    // The endpoint moves to n2: so does the answer.
    assert_eq!(owners_of_local(&mut nodes, &local_objects(&["n2"])), [2]);
    // Endpoints on two nodes: one of them answers.
    let both = owners_of_local(&mut nodes, &local_objects(&["n2", "n3"]));
    assert!(both == [2] || both == [3], "{both:?}");
    // No ready endpoint anywhere (n1's is not ready): nobody could serve it, nobody answers.
    assert_eq!(
        owners_of_local(&mut nodes, &local_objects(&[])),
        Vec::<usize>::new()
    );
}

/// Three Ready Nodes, those in `edge` labelled `edge: "true"`; a pool whose nodeSelectors pick
/// the edge nodes; and `web`, a Cluster Service on 198.51.100.60 in it.
fn pool_objects(edge: &[&str]) -> Objects {
    let mut s = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for n in ["n1", "n2", "n3"] {
        let edge = edge.contains(&n);
        let labels = if edge { ", labels: {edge: 'true'}" } else { "" };
        s.push_str(&format!(
            "- {{apiVersion: v1, kind: Node, metadata: {{name: {n}{labels}}}}}\n"
        ));
    }
    s.push_str(
        "- apiVersion: vipflow.io/v1alpha1
  kind: VipPool
  metadata: {name: edge}
  spec:
    addresses: [198.51.100.48/28]
    nodeSelectors: [{matchLabels: {edge: 'true'}}]
- apiVersion: v1
  kind: Service
  metadata: {name: web, namespace: shop}
  spec:
    externalIPs: [198.51.100.60]
    ports: [{port: 80, protocol: TCP}]
",
    );
    crate::decode::parse(&s).expect("objects").objects
}

#[test]
fn a_vip_in_a_pool_with_node_selectors_is_announced_only_by_a_selected_node() {
    let key = FlowKey::ArpAnswer(Ipv4Addr::new(198, 51, 100, 60));
    let mut nodes: Vec<Planner> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| planner(n, true))
        .collect();
    let mut owners = |objects: &Objects| -> Vec<usize> {
        let mut o = Vec::new();
        for (i, p) in nodes.iter_mut().enumerate() {
            if p.update(objects).bridges[0].flows.contains(&key) {
                o.push(i + 1);
            }
        }
        o
    };
    // Only n2 is selected, then only n3: the VIP follows the labels.
    assert_eq!(owners(&pool_objects(&["n2"])), [2]);
    assert_eq!(owners(&pool_objects(&["n3"])), [3]);
    // Both: one of the two announces, never n1.
    let two = owners(&pool_objects(&["n2", "n3"]));
    assert!(two == [2] || two == [3], "{two:?}");
    // None selected: nobody may announce it.
    assert_eq!(owners(&pool_objects(&[])), Vec::<usize>::new());
}
