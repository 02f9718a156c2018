//! MetalLB's `L2Advertisement`s through the planner, in memory: which node answers ARP for
//! each VIP of a few object sets, and which nodes may.

use super::*;
use crate::announce::placement::Eligible;
use crate::config::BridgeConfig;
use crate::model::ModelOptions;
use crate::plan::eligibility::Eligibility;
use crate::plan::flows::FlowKey;
use crate::plan::planner::Planner;
use crate::plan::service_index::ServiceIndex;

const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an address")
}

/// The VIPs of pool `blue` (192.0.2.0/28), of pool `green` (198.51.100.0/28, labelled
/// `tier: green`), and outside every pool.
fn blue() -> Vec<IpAddr> {
    (1..=6).map(|i| ip(&format!("192.0.2.{i}"))).collect()
}
fn green() -> Vec<IpAddr> {
    (1..=6).map(|i| ip(&format!("198.51.100.{i}"))).collect()
}
fn outside() -> Vec<IpAddr> {
    (1..=6).map(|i| ip(&format!("203.0.113.{i}"))).collect()
}

/// Nodes n1 and n2 in zone a, n3 in zone b, n4 in zone c (each with its hostname label); the pools blue (a `VipPool`, with
/// `blue_nodes` as its nodeSelectors) and green (MetalLB's `IPAddressPool`); a Cluster
/// Service with every VIP above; and `ads`, YAML list items.
fn objects_with(blue_nodes: &str, ads: &str) -> Objects {
    let mut y = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for (n, zone) in NODES.iter().zip(["a", "a", "b", "c"]) {
        y.push_str(&format!(
            "- {{apiVersion: v1, kind: Node, metadata: {{name: {n}, labels: {{zone: {zone}, kubernetes.io/hostname: {n}}}}}}}\n"
        ));
    }
    let vips: Vec<String> = blue()
        .into_iter()
        .chain(green())
        .chain(outside())
        .map(|v| v.to_string())
        .collect();
    y.push_str(&format!(
        "- {{apiVersion: vipflow.io/v1alpha1, kind: VipPool, metadata: {{name: blue}}, spec: {{addresses: [192.0.2.0/28]{blue_nodes}}}}}
- {{apiVersion: metallb.io/v1beta1, kind: IPAddressPool, metadata: {{name: green, namespace: metallb-system, labels: {{tier: green}}}}, spec: {{addresses: [198.51.100.0-198.51.100.15]}}}}
- apiVersion: v1
  kind: Service
  metadata: {{name: web, namespace: shop}}
  spec: {{externalIPs: [{}], ports: [{{port: 80, protocol: TCP}}]}}
{ads}",
        vips.join(", ")
    ));
    let loaded = crate::decode::parse(&y).expect("objects");
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    loaded.objects
}

fn objects(ads: &str) -> Objects {
    objects_with("", ads)
}

/// An `L2Advertisement` named `name` with `spec` (flow-style YAML).
fn ad(name: &str, spec: &str) -> String {
    format!(
        "- {{apiVersion: metallb.io/v1beta1, kind: L2Advertisement, metadata: {{name: {name}, namespace: metallb-system}}, spec: {spec}}}\n"
    )
}

/// One announcing planner per node.
fn planners() -> Vec<Planner> {
    let bridge = BridgeConfig {
        announce: true,
        ..BridgeConfig::default()
    };
    NODES
        .iter()
        .map(|n| {
            Planner::new(
                ModelOptions::default(),
                std::slice::from_ref(&bridge),
                0x7f1f,
                None,
            )
            .announcing_as(n)
        })
        .collect()
}

/// Which nodes answer ARP for each VIP after `planners` take `objects` (every VIP listed,
/// with no node when none answers).
fn answers(planners: &mut [Planner], objects: &Objects) -> BTreeMap<IpAddr, Vec<&'static str>> {
    let mut out: BTreeMap<IpAddr, Vec<&'static str>> = blue()
        .into_iter()
        .chain(green())
        .chain(outside())
        .map(|v| (v, Vec::new()))
        .collect();
    for (p, node) in planners.iter_mut().zip(NODES) {
        let plans = p.update(objects);
        for k in plans.bridges[0].flows.iter() {
            if let FlowKey::ArpAnswer(v) = k {
                out.entry(IpAddr::V4(*v)).or_default().push(node);
            }
        }
    }
    out
}

/// The nodes that answer for any of `vips`, each of which has exactly one.
fn owners(
    answers: &BTreeMap<IpAddr, Vec<&'static str>>,
    vips: &[IpAddr],
) -> BTreeSet<&'static str> {
    for v in vips {
        assert_eq!(answers[v].len(), 1, "{v}: {answers:?}");
    }
    vips.iter()
        .flat_map(|v| answers[v].iter().copied())
        .collect()
}

fn unanswered(answers: &BTreeMap<IpAddr, Vec<&'static str>>, vips: &[IpAddr]) -> bool {
    vips.iter().all(|v| answers[v].is_empty())
}

/// The nodes the L2 announcer's eligibility allows for `vip` (`None`: any node).
fn eligible(objects: &Objects, vip: &str) -> Option<BTreeSet<String>> {
    let mut services = ServiceIndex::new(ModelOptions::default(), &[], 0x7f1f);
    services.update(objects);
    let mut e = Eligibility::for_l2();
    e.update(objects, &services);
    match e.of(ip(vip)) {
        Eligible::Any => None,
        Eligible::Nodes(n) => Some(n.iter().map(|n| n.to_string()).collect()),
    }
}

fn set(names: &[&str]) -> Option<BTreeSet<String>> {
    Some(names.iter().map(|n| n.to_string()).collect())
}

#[test]
fn without_l2_advertisements_every_vip_is_announced_as_before() {
    let o = objects("");
    let mut p = planners();
    let a = answers(&mut p, &o);
    let all: Vec<IpAddr> = a.keys().copied().collect();
    assert_eq!(owners(&a, &all).len(), 4, "spread over every node: {a:?}");
    assert!(p[0].l2_withheld("n1").is_empty());
    assert_eq!(eligible(&o, "198.51.100.1"), None);
}

#[test]
fn one_advertisement_of_pool_blue_leaves_green_unannounced_and_vips_outside_pools_as_they_were() {
    let o = objects(&ad("blue-only", "{ipAddressPools: [blue]}"));
    let mut p = planners();
    let a = answers(&mut p, &o);
    owners(&a, &blue());
    assert!(unanswered(&a, &green()), "{a:?}");
    owners(&a, &outside());
    assert_eq!(eligible(&o, "198.51.100.1"), set(&[]));
    assert_eq!(eligible(&o, "192.0.2.1"), None);
    assert_eq!(eligible(&o, "203.0.113.1"), None);

    // What `vipflow plan` and `vipflow status` say of it.
    let why: Vec<(IpAddr, String)> = p[0]
        .l2_withheld("n1")
        .into_iter()
        .map(|(v, r)| (v, r.to_string()))
        .collect();
    let want: Vec<(IpAddr, String)> = green()
        .into_iter()
        .map(|v| (v, "no L2Advertisement selects its pool green".to_string()))
        .collect();
    assert_eq!(why, want);
    let state = p[0].update(&o).announce.expect("announcing");
    let unadvertised: Vec<(IpAddr, String)> = state
        .unadvertised
        .iter()
        .map(|(v, pool)| (*v, pool.to_string()))
        .collect();
    assert_eq!(
        unadvertised,
        green()
            .into_iter()
            .map(|v| (v, "green".to_string()))
            .collect::<Vec<_>>()
    );
}

#[test]
fn an_advertisements_node_selectors_narrow_who_announces_its_pool() {
    let o = objects(&ad(
        "blue-zone-a",
        "{ipAddressPools: [blue], nodeSelectors: [{matchLabels: {zone: a}}]}",
    ));
    let mut p = planners();
    let a = answers(&mut p, &o);
    assert_eq!(owners(&a, &blue()), BTreeSet::from(["n1", "n2"]), "{a:?}");
    assert!(unanswered(&a, &green()), "{a:?}");
    owners(&a, &outside());
    assert_eq!(eligible(&o, "192.0.2.3"), set(&["n1", "n2"]));
    // n3 is told why it answers for neither pool.
    let why = p[2].l2_withheld("n3");
    assert_eq!(why.len(), 12);
    assert_eq!(
        why[0],
        (
            ip("192.0.2.1"),
            L2Reason::NodeNotSelected {
                pool: "blue".into()
            }
        )
    );
    assert!(
        p[0].l2_withheld("n1")
            .iter()
            .all(|(v, _)| green().contains(v))
    );
}

#[test]
fn two_advertisements_of_one_pool_add_their_nodes_up() {
    let ads = ad(
        "green-by-label-zone-b",
        "{ipAddressPoolSelectors: [{matchLabels: {tier: green}}], nodeSelectors: [{matchLabels: {zone: b}}]}",
    ) + &ad(
        "green-by-name-zone-c",
        "{ipAddressPools: [green], nodeSelectors: [{matchExpressions: [{key: zone, operator: In, values: [c]}]}]}",
    );
    let o = objects(&ads);
    assert_eq!(eligible(&o, "198.51.100.2"), set(&["n3", "n4"]));
    let mut p = planners();
    let a = answers(&mut p, &o);
    assert_eq!(owners(&a, &green()), BTreeSet::from(["n3", "n4"]), "{a:?}");
    assert!(unanswered(&a, &blue()), "{a:?}");
    // One more without node selectors: every node.
    let o = objects(&(ads + &ad("green-everywhere", "{ipAddressPools: [green]}")));
    assert_eq!(eligible(&o, "198.51.100.2"), None);
    // An advertisement without a spec selects every pool from every node (MetalLB's docs).
    let o = objects(
        "- {apiVersion: metallb.io/v1beta1, kind: L2Advertisement, metadata: {name: all, namespace: metallb-system}}\n",
    );
    assert_eq!(eligible(&o, "198.51.100.2"), None);
    assert_eq!(eligible(&o, "192.0.2.2"), None);
}

#[test]
fn advertisements_come_on_top_of_the_pools_own_node_selectors_and_bgp_leaves_them_out() {
    // blue's own nodeSelectors admit zone a (n1, n2), the advertisement n2 and n3: n2 alone.
    let o = objects_with(
        ", nodeSelectors: [{matchLabels: {zone: a}}]",
        &ad(
            "blue-n2-n3",
            "{ipAddressPools: [blue], nodeSelectors: [{matchLabels: {kubernetes.io/hostname: n2}}, {matchLabels: {kubernetes.io/hostname: n3}}]}",
        ),
    );
    assert_eq!(eligible(&o, "192.0.2.1"), set(&["n2"]));
    let mut p = planners();
    let a = answers(&mut p, &o);
    assert_eq!(owners(&a, &blue()), BTreeSet::from(["n2"]), "{a:?}");
    // One that admits only zone b: no node is left.
    let o = objects_with(
        ", nodeSelectors: [{matchLabels: {zone: a}}]",
        &ad(
            "blue-b",
            "{ipAddressPools: [blue], nodeSelectors: [{matchLabels: {zone: b}}]}",
        ),
    );
    assert_eq!(eligible(&o, "192.0.2.1"), set(&[]));
    // BGP's eligibility does not read L2Advertisements.
    let mut services = ServiceIndex::new(ModelOptions::default(), &[], 0x7f1f);
    services.update(&o);
    let mut bgp = Eligibility::default();
    bgp.update(&o, &services);
    assert_eq!(bgp.of(ip("198.51.100.1")), Eligible::Any);
    assert!(bgp.l2_reason(ip("198.51.100.1"), "n1").is_none());
}

#[test]
fn an_advertisement_added_or_removed_moves_the_answers_at_once() {
    let mut p = planners();
    let none = objects("");
    let a = answers(&mut p, &none);
    owners(&a, &green());
    // Only the advertisements change: green's VIPs are given up, blue's stay where they were.
    let blue_only = objects(&ad("blue-only", "{ipAddressPools: [blue]}"));
    let b = answers(&mut p, &blue_only);
    assert!(unanswered(&b, &green()), "{b:?}");
    for v in blue().iter().chain(&outside()) {
        assert_eq!(a[v], b[v], "{v} stays with its owner");
    }
    // Gone again: green is announced, as before.
    let c = answers(&mut p, &none);
    owners(&c, &green());
    let state = p[0].update(&none).announce.expect("announcing");
    assert!(state.unadvertised.is_empty());
    // The same snapshot again changes nothing.
    let again = answers(&mut p, &none);
    assert_eq!(again, c);
}
