//! Tests of [`super`] through the planner: which prefixes each node advertises after a
//! snapshot, for externalTrafficPolicy Cluster and Local, drains, the exclusion label and the
//! advertisements' terms.

use crate::model::{ModelOptions, Objects};
use crate::plan::planner::Planner;
use ipnet::IpNet;
use std::collections::BTreeSet;

/// Nodes n1 and n2 (n2 with `n2_meta` in its metadata), a BGP pool, `advertisement`'s spec,
/// `web` (Cluster, 198.51.100.10 and 2001:db8:100::10) and `api` (Local, 198.51.100.11) with
/// its one endpoint on `api_on`.
fn objects(advertisement: &str, api_on: &str, n2_meta: &str) -> Objects {
    let y = format!(
        "apiVersion: v1
kind: List
items:
- {{apiVersion: v1, kind: Node, metadata: {{name: n1}}}}
- {{apiVersion: v1, kind: Node, metadata: {{name: n2{n2_meta}}}}}
- apiVersion: vipflow.io/v1alpha1
  kind: VipPool
  metadata: {{name: bgp}}
  spec: {{addresses: [198.51.100.0/24, '2001:db8:100::/64']}}
- apiVersion: vipflow.io/v1alpha1
  kind: BGPAdvertisement
  metadata: {{name: all}}
  spec: {advertisement}
- apiVersion: v1
  kind: Service
  metadata: {{name: web, namespace: shop}}
  spec: {{externalIPs: [198.51.100.10, '2001:db8:100::10'], ports: [{{port: 80, protocol: TCP}}]}}
- apiVersion: v1
  kind: Service
  metadata: {{name: api, namespace: shop}}
  spec: {{externalIPs: [198.51.100.11], externalTrafficPolicy: Local, ports: [{{port: 443, protocol: TCP, targetPort: 8443}}]}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{name: api-1, namespace: shop, labels: {{kubernetes.io/service-name: api}}}}
  addressType: IPv4
  ports: [{{port: 8443, protocol: TCP}}]
  endpoints: [{{addresses: [10.0.0.9], nodeName: {api_on}, conditions: {{ready: true}}}}]
"
    );
    let loaded = crate::decode::parse(&y).expect("objects");
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    loaded.objects
}

fn advertised(node: &str, objects: &Objects) -> BTreeSet<IpNet> {
    let mut p = Planner::new(ModelOptions::default(), &[], 0x7f1f, None).advertising_as(node);
    let plans = p.update(objects);
    plans
        .bgp
        .expect("the planner advertises")
        .prefixes
        .as_ref()
        .clone()
}

fn nets(v: &[&str]) -> BTreeSet<IpNet> {
    v.iter().map(|s| s.parse().expect("a prefix")).collect()
}

#[test]
fn cluster_vips_go_out_from_every_node_and_a_local_one_only_from_its_endpoints_node() {
    let o = objects("{}", "n2", "");
    assert_eq!(
        advertised("n1", &o),
        nets(&["198.51.100.10/32", "2001:db8:100::10/128"])
    );
    assert_eq!(
        advertised("n2", &o),
        nets(&[
            "198.51.100.10/32",
            "198.51.100.11/32",
            "2001:db8:100::10/128"
        ])
    );
}

#[test]
fn a_local_vip_without_an_endpoint_anywhere_goes_out_from_no_node() {
    let o = objects("{}", "gone", "");
    for node in ["n1", "n2"] {
        assert!(
            !advertised(node, &o).contains(&"198.51.100.11/32".parse().expect("a prefix")),
            "{node}"
        );
    }
}

#[test]
fn a_draining_or_excluded_node_advertises_nothing() {
    let drained = objects("{}", "n2", ", annotations: {vipflow.io/drain: 'true'}");
    assert!(advertised("n2", &drained).is_empty());
    assert!(!advertised("n1", &drained).is_empty(), "the others go on");
    let excluded = objects(
        "{}",
        "n2",
        ", labels: {node.kubernetes.io/exclude-from-external-load-balancers: ''}",
    );
    assert!(advertised("n2", &excluded).is_empty());
}

#[test]
fn a_draining_node_keeps_its_routes_while_its_drain_hold_lasts_then_advertises_nothing() {
    use crate::plan::bgp_node::BgpReason;
    let drained = objects("{}", "n2", ", annotations: {vipflow.io/drain: 'true'}");
    let mut p = Planner::new(ModelOptions::default(), &[], 0x7f1f, None).advertising_as("n2");
    p.hold_while_draining(true);
    let held = p.update(&drained).bgp.expect("the planner advertises");
    assert_eq!(
        *held.prefixes,
        nets(&[
            "198.51.100.10/32",
            "198.51.100.11/32",
            "2001:db8:100::10/128"
        ])
    );
    assert!(
        held.vips
            .values()
            .all(|r| *r == BgpReason::DrainingGracefully),
        "{:?}",
        held.vips
    );
    p.hold_while_draining(false);
    let after = p.update(&drained).bgp.expect("the planner advertises");
    assert!(after.prefixes.is_empty());
    assert!(after.vips.values().all(|r| *r == BgpReason::NodeDraining));
    // The hold keeps nothing for a node that is not draining: it advertises as ever.
    let plain = objects("{}", "n2", "");
    p.hold_while_draining(true);
    let normal = p.update(&plain).bgp.expect("the planner advertises");
    assert!(normal.vips.values().all(|r| *r == BgpReason::Advertised));
}

#[test]
fn an_agent_stopping_on_a_cordoned_node_shuts_down_gracefully_then_withdraws_and_elsewhere_keeps_all()
 {
    use crate::plan::bgp_node::BgpReason;
    let cordoned = objects("{}", "n2", "}, spec: {unschedulable: true");
    let all = nets(&[
        "198.51.100.10/32",
        "198.51.100.11/32",
        "2001:db8:100::10/128",
    ]);
    let mut p = Planner::new(ModelOptions::default(), &[], 0x7f1f, None).advertising_as("n2");
    let running = p.update(&cordoned).bgp.expect("the planner advertises");
    assert_eq!(*running.prefixes, all, "cordoned alone changes nothing");
    assert!(!running.graceful_shutdown);
    p.stop_announcing();
    let handing_over = p.update(&cordoned).bgp.expect("the planner advertises");
    assert_eq!(*handing_over.prefixes, all);
    assert!(handing_over.graceful_shutdown);
    assert!(
        handing_over
            .vips
            .values()
            .all(|r| *r == BgpReason::DrainingGracefully)
    );
    p.withdraw();
    let gone = p.update(&cordoned).bgp.expect("the planner advertises");
    assert!(gone.prefixes.is_empty());
    assert!(gone.vips.values().all(|r| *r == BgpReason::NodeLeaving));
    // An agent stopping on a Node that is not cordoned restarts in place: FRR keeps it all.
    let plain = objects("{}", "n2", "");
    let mut p = Planner::new(ModelOptions::default(), &[], 0x7f1f, None).advertising_as("n2");
    p.stop_announcing();
    p.withdraw();
    let kept = p.update(&plain).bgp.expect("the planner advertises");
    assert_eq!(*kept.prefixes, all);
    assert!(!kept.graceful_shutdown);
}

#[test]
fn a_node_that_is_not_ready_advertises_nothing() {
    let o = objects(
        "{}",
        "n2",
        "}, status: {conditions: [{type: Ready, status: 'False'}]",
    );
    assert!(advertised("n2", &o).is_empty());
}

#[test]
fn cluster_vips_aggregate_as_the_advertisement_says_and_local_ones_stay_host_routes() {
    let o = objects("{aggregationLength: 24, aggregationLengthV6: 64}", "n2", "");
    assert_eq!(
        advertised("n2", &o),
        nets(&["198.51.100.0/24", "198.51.100.11/32", "2001:db8:100::/64"])
    );
}

#[test]
fn an_advertisement_that_selects_another_pool_advertises_nothing_here() {
    let o = objects("{ipAddressPools: [other]}", "n2", "");
    assert!(advertised("n1", &o).is_empty());
    assert!(advertised("n2", &o).is_empty());
}

#[test]
fn an_unchanged_set_is_handed_on_as_the_same_arc() {
    let o = objects("{}", "n2", "");
    let mut p = Planner::new(ModelOptions::default(), &[], 0x7f1f, None).advertising_as("n1");
    let first = p.update(&o).bgp.expect("advertising");
    let second = p.update(&o).bgp.expect("advertising");
    assert!(std::sync::Arc::ptr_eq(&first.prefixes, &second.prefixes));
    assert!(std::sync::Arc::ptr_eq(&first.vips, &second.vips));
}

#[test]
fn each_vip_of_a_bgp_pool_says_why_it_is_or_is_not_advertised() {
    use super::BgpReason;
    use std::collections::BTreeMap;
    let ip = |s: &str| s.parse::<std::net::IpAddr>().expect("an address");
    let reasons = |node: &str, o: &Objects| -> BTreeMap<std::net::IpAddr, BgpReason> {
        let mut p = Planner::new(ModelOptions::default(), &[], 0x7f1f, None).advertising_as(node);
        p.update(o).bgp.expect("advertising").vips.as_ref().clone()
    };
    let o = objects("{}", "n2", "");
    assert_eq!(
        reasons("n1", &o),
        BTreeMap::from([
            (ip("198.51.100.10"), BgpReason::Advertised),
            (ip("2001:db8:100::10"), BgpReason::Advertised),
            (ip("198.51.100.11"), BgpReason::NoLocalEndpoint),
        ])
    );
    assert_eq!(
        reasons("n2", &o)[&ip("198.51.100.11")],
        BgpReason::Advertised
    );
    let selected = objects("{nodeSelectors: [{matchLabels: {rack: r2}}]}", "n1", "");
    assert!(
        reasons("n1", &selected)
            .values()
            .all(|r| *r == BgpReason::NotSelected)
    );
    let draining = objects("{}", "n2", ", annotations: {vipflow.io/drain: 'true'}");
    assert!(
        reasons("n2", &draining)
            .values()
            .all(|r| *r == BgpReason::NodeDraining),
        "{:?}",
        reasons("n2", &draining)
    );
    let excluded = objects(
        "{}",
        "n2",
        ", labels: {node.kubernetes.io/exclude-from-external-load-balancers: ''}",
    );
    assert!(
        reasons("n2", &excluded)
            .values()
            .all(|r| *r == BgpReason::NodeExcluded)
    );
}
