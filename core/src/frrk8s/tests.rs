//! frr-k8s mode's objects through the planner: what the elected agent and a node's agent
//! write, golden; which nodes share an object; what the gate keeps; sizes at 10,000 VIPs; and
//! what frr-k8s would make of them, rendered, against the direct mode's configuration.

use super::build::restricted;
use super::objects::FrrConfiguration;
use super::render::render;
use super::shared::local_configuration;
use crate::model::{ModelOptions, Objects};
use crate::plan::planner::Planner;
use ipnet::IpNet;
use std::collections::{BTreeMap, BTreeSet};

const NS: &str = "frr-k8s-system";

/// Nodes n1, n2 (rack r2), n3 (excluded from load balancers); peers `tor` (every node, BFD)
/// and `r2` (rack r2 only); pool blue (v4 and v6) advertised with a community to every peer;
/// `web` (Cluster) and `api` (Local, endpoint on n1).
fn objects(extra: &str) -> Objects {
    let y = format!(
        "apiVersion: v1
kind: List
items:
- {{apiVersion: v1, kind: Node, metadata: {{name: n1, labels: {{kubernetes.io/hostname: n1}}}}, status: {{addresses: [{{type: InternalIP, address: 192.168.10.11}}]}}}}
- {{apiVersion: v1, kind: Node, metadata: {{name: n2, labels: {{kubernetes.io/hostname: n2, rack: r2}}}}}}
- {{apiVersion: v1, kind: Node, metadata: {{name: n3, labels: {{node.kubernetes.io/exclude-from-external-load-balancers: ''}}}}}}
- {{apiVersion: vipflow.io/v1alpha1, kind: BGPPeer, metadata: {{name: tor}}, spec: {{myASN: 64513, peerASN: 64512, peerAddress: 10.9.0.1, bfdProfile: fast, holdTime: 9s}}}}
- {{apiVersion: vipflow.io/v1alpha1, kind: BGPPeer, metadata: {{name: r2}}, spec: {{myASN: 64513, peerASN: 64514, peerAddress: 10.8.0.1, disableMP: true, nodeSelectors: [{{matchLabels: {{rack: r2}}}}]}}}}
- {{apiVersion: vipflow.io/v1alpha1, kind: BFDProfile, metadata: {{name: fast}}, spec: {{receiveInterval: 100, transmitInterval: 100, detectMultiplier: 3}}}}
- {{apiVersion: vipflow.io/v1alpha1, kind: VipPool, metadata: {{name: blue}}, spec: {{addresses: [198.51.100.0/24, '2001:db8:100::/64']}}}}
- {{apiVersion: vipflow.io/v1alpha1, kind: BGPAdvertisement, metadata: {{name: all}}, spec: {{communities: ['64512:7']}}}}
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
  endpoints: [{{addresses: [10.0.0.9], nodeName: n1, conditions: {{ready: true}}}}]
{extra}"
    );
    let loaded = crate::decode::parse(&y).expect("objects");
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    loaded.objects
}

/// What node `node`'s planner hands on in frr-k8s mode: the shared objects, the node's own
/// object (every Local VIP the plan wants), and the direct mode's prefixes.
fn planned(
    node: &str,
    o: &Objects,
) -> (
    BTreeMap<String, FrrConfiguration>,
    Option<FrrConfiguration>,
    BTreeSet<IpNet>,
) {
    let mut p = Planner::new(ModelOptions::default(), &[], 0x7f1f, None).advertising_as(node);
    p.write_frr_k8s_pools(Some(NS));
    let plans = p.update(o);
    let bgp = plans.bgp.expect("the planner advertises");
    let (own, problems) = local_configuration(o, node, &bgp.local, NS);
    assert!(problems.is_empty(), "{problems:?}");
    (
        plans
            .frr_k8s_pools
            .expect("shared objects")
            .as_ref()
            .clone(),
        own,
        bgp.prefixes.as_ref().clone(),
    )
}

fn yaml(objects: &[&FrrConfiguration]) -> String {
    objects
        .iter()
        .map(|o| serde_yaml_ng::to_string(o).expect("YAML"))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// The objects for the snapshot above, as written: one shared object per group of nodes that
/// advertise alike (n1 peers with tor, n2 with tor and r2; n3 is excluded), and n1's own object
/// for its Local VIP, with the BFD profile, the timers and the community; `r2` carries one
/// family (disableMP), so it lists IPv4 prefixes only.
#[test]
fn the_objects_are_as_golden() {
    let o = objects("");
    let (shared, own, _) = planned("n1", &o);
    let mut all: Vec<&FrrConfiguration> = shared.values().collect();
    let own = own.expect("n1 has a Local VIP");
    all.push(&own);
    let text = yaml(&all);
    let path = format!(
        "{}/../tests/fixtures/frrk8s/objects.golden.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    if std::env::var_os("VIPFLOW_BLESS").is_some() {
        std::fs::write(&path, &text).expect("written");
    }
    let golden = std::fs::read_to_string(&path).expect("the golden file");
    assert_eq!(
        text, golden,
        "the objects differ from {path}; VIPFLOW_BLESS=1 rewrites it"
    );
    assert_eq!(shared.len(), 2, "{}", text);
    // n2 and n1 plan the same shared objects (any agent may lead).
    assert_eq!(planned("n2", &o).0, shared);
    // n2 has no Local VIP: no object of its own.
    assert!(planned("n2", &o).1.is_none());
}

/// A node that cannot carry traffic is in no shared object: draining, excluded, not Ready.
#[test]
fn only_nodes_that_may_carry_traffic_are_selected() {
    let o = objects(
        "- {apiVersion: v1, kind: Node, metadata: {name: n4, annotations: {vipflow.io/drain: 'true'}}}\n\
         - {apiVersion: v1, kind: Node, metadata: {name: n5}, status: {conditions: [{type: Ready, status: 'False'}]}}\n\
         - {apiVersion: v1, kind: Node, metadata: {name: n6}}\n",
    );
    let (shared, _, _) = planned("n1", &o);
    let selected: BTreeSet<String> = shared
        .values()
        .flat_map(|c| {
            c.spec
                .node_selector
                .match_expressions
                .iter()
                .flatten()
                .flat_map(|e| e.values.clone().unwrap_or_default())
        })
        .collect();
    assert_eq!(
        selected,
        ["n1", "n2", "n6"].map(String::from).into(),
        "{shared:#?}"
    );
}

/// The gate's cut: what was not let through leaves the router and every neighbor's lists;
/// nothing left, no object.
#[test]
fn the_node_object_keeps_what_the_gate_let_through() {
    let o = objects("");
    let own = planned("n1", &o).1.expect("an object");
    assert!(restricted(&own, &BTreeSet::new()).is_none());
    let kept = restricted(
        &own,
        &["198.51.100.11/32".parse().expect("a prefix")].into(),
    )
    .expect("an object");
    assert_eq!(kept, own, "its one prefix is let through");
}

/// What frr-k8s merges from the objects that select n1 and n2, rendered by vipflow's own
/// translation, originates what the direct mode originates, and sends each neighbor what
/// the direct mode's filters send it.
#[test]
fn the_objects_merged_give_each_node_the_direct_modes_routes() {
    let o = objects("");
    for node in ["n1", "n2"] {
        let (shared, own, direct) = planned(node, &o);
        let mut all: Vec<FrrConfiguration> = shared.into_values().collect();
        all.extend(own);
        let labels = o
            .nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(node))
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default();
        let r = render(&all, &labels)
            .expect("renders")
            .expect("a configuration");
        assert_eq!(r.networks, direct, "{node}");
        assert_eq!(r.asn, 64513);
        // tor takes both families, r2 (disableMP, an IPv4 address) IPv4 only.
        let v4: BTreeSet<IpNet> = direct
            .iter()
            .filter(|p| p.addr().is_ipv4())
            .copied()
            .collect();
        assert_eq!(r.sent["10.9.0.1"], direct, "{node}");
        if node == "n2" {
            assert_eq!(r.sent["10.8.0.1"], v4);
        } else {
            assert!(!r.sent.contains_key("10.8.0.1"));
        }
        assert!(
            r.config.contains("set community 64512:7 additive"),
            "{}",
            r.config
        );
        assert!(
            r.config.contains("neighbor 10.9.0.1 bfd profile fast"),
            "{}",
            r.config
        );
    }
}

/// At 10,000 Cluster VIPs (and 10,000 Local ones on one node), every object stays far under
/// etcd's 1.5 MiB request limit: `mode: all` lists the prefixes once, and the community list
/// once more.
#[test]
fn objects_at_ten_thousand_vips_stay_far_under_etcds_limit() {
    let mut extra = String::new();
    extra.push_str("- {apiVersion: vipflow.io/v1alpha1, kind: VipPool, metadata: {name: big}, spec: {addresses: [10.64.0.0/16]}}\n");
    extra.push_str("- {apiVersion: vipflow.io/v1alpha1, kind: VipPool, metadata: {name: bigl}, spec: {addresses: [10.65.0.0/16]}}\n");
    let mut services = String::new();
    for i in 0..10_000u32 {
        let (a, b) = (i / 250, i % 250 + 1);
        services.push_str(&format!(
            "- {{apiVersion: v1, kind: Service, metadata: {{name: c{i}, namespace: s}}, spec: {{externalIPs: [10.64.{a}.{b}], ports: [{{port: 80, protocol: TCP}}]}}}}\n\
             - {{apiVersion: v1, kind: Service, metadata: {{name: l{i}, namespace: s}}, spec: {{externalIPs: [10.65.{a}.{b}], externalTrafficPolicy: Local, ports: [{{port: 80, protocol: TCP}}]}}}}\n\
             - {{apiVersion: discovery.k8s.io/v1, kind: EndpointSlice, metadata: {{name: l{i}-1, namespace: s, labels: {{kubernetes.io/service-name: l{i}}}}}, addressType: IPv4, ports: [{{port: 80, protocol: TCP}}], endpoints: [{{addresses: [10.0.0.9], nodeName: n1, conditions: {{ready: true}}}}]}}\n"
        ));
    }
    extra.push_str(&services);
    let o = objects(&extra);
    let (shared, own, _) = planned("n1", &o);
    let limit = 1536 * 1024;
    let size = |c: &FrrConfiguration| serde_json::to_vec(c).expect("JSON").len();
    let big: Vec<(&String, usize)> = shared
        .iter()
        .filter(|(n, _)| n.starts_with("vipflow-big-"))
        .map(|(n, c)| (n, size(c)))
        .collect();
    let own = own.expect("n1's Local VIPs");
    let own_size = size(&own);
    for (n, s) in &big {
        println!(
            "{n}: {s} bytes (10,000 Cluster VIPs), {:.1}% of etcd's limit",
            *s as f64 * 100.0 / limit as f64
        );
        assert!(*s < limit / 2, "{n}: {s} bytes");
    }
    println!(
        "vipflow-node-n1: {own_size} bytes (10,000 Local VIPs), {:.1}% of etcd's limit",
        own_size as f64 * 100.0 / limit as f64
    );
    assert!(own_size < limit / 2);
    assert_eq!(big.len(), 2, "one object per group of nodes");
    let prefixes = |c: &FrrConfiguration| c.spec.bgp.routers[0].prefixes.len();
    assert!(
        shared
            .iter()
            .filter(|(n, _)| n.starts_with("vipflow-big-"))
            .all(|(_, c)| prefixes(c) == 10_000)
    );
    assert_eq!(prefixes(&own), 10_001, "its 10,000 and api's");
}

/// Many peers and communities repeat every prefix in every neighbor's lists: at 10,000 VIPs
/// such an object would near etcd's limit, so it goes out in shards, each well under it, each
/// prefix in exactly one, a VIP that comes changing one shard, and the shards merged giving
/// the node the same routes as the direct mode.
#[test]
fn a_large_object_goes_out_in_shards_each_under_the_limit() {
    let mut extra = String::new();
    for (i, peer) in ["10.7.0.1", "10.7.0.2", "10.7.0.3", "10.7.0.4"]
        .iter()
        .enumerate()
    {
        extra.push_str(&format!("- {{apiVersion: vipflow.io/v1alpha1, kind: BGPPeer, metadata: {{name: p{i}}}, spec: {{myASN: 64513, peerASN: 64512, peerAddress: {peer}}}}}\n"));
    }
    extra.push_str("- {apiVersion: vipflow.io/v1alpha1, kind: VipPool, metadata: {name: big}, spec: {addresses: [10.64.0.0/16]}}\n");
    extra.push_str("- {apiVersion: vipflow.io/v1alpha1, kind: BGPAdvertisement, metadata: {name: tagged}, spec: {ipAddressPools: [big], communities: ['64512:1', '64512:2', 'large:64512:3:4'], localPref: 200}}\n");
    let services = |n: u32| -> String {
        (0..n)
            .map(|i| {
                let (a, b) = (i / 250, i % 250 + 1);
                format!("- {{apiVersion: v1, kind: Service, metadata: {{name: c{i}, namespace: s}}, spec: {{externalIPs: [10.64.{a}.{b}], ports: [{{port: 80, protocol: TCP}}]}}}}\n")
            })
            .collect()
    };
    let o = objects(&format!("{extra}{}", services(10_000)));
    let (shared, own, direct) = planned("n1", &o);
    // n1's group (n2 peers with r2 too: a group of its own, sharded alike).
    let group = shared
        .keys()
        .find(|n| n.starts_with("vipflow-big-"))
        .and_then(|n| n.rsplit_once('-'))
        .map(|(g, _)| g.to_string())
        .expect("a shard");
    let shards: BTreeMap<&String, &FrrConfiguration> = shared
        .iter()
        .filter(|(n, _)| n.starts_with(&format!("{group}-")))
        .collect();
    assert!(shards.len() > 1, "{:?}", shards.keys());
    let limit = super::shared::SHARD_BYTES;
    let mut all = BTreeSet::new();
    for (n, c) in &shards {
        let size = serde_json::to_vec(c).expect("JSON").len();
        println!(
            "{n}: {size} bytes, {} prefixes",
            c.spec.bgp.routers[0].prefixes.len()
        );
        assert!(size < limit, "{n}: {size}");
        for p in &c.spec.bgp.routers[0].prefixes {
            assert!(all.insert(p.clone()), "{p} in two shards");
        }
    }
    assert_eq!(all.len(), 10_000);
    // One more VIP: one shard changes.
    let o2 = objects(&format!("{extra}{}", services(10_001)));
    let (shared2, _, _) = planned("n1", &o2);
    let changed = shared2
        .iter()
        .filter(|(n, c)| shared.get(*n) != Some(*c))
        .count();
    assert_eq!(changed, 2, "one shard of each group");
    // Merged, the shards give n1 the direct mode's routes.
    let labels = o.nodes[0].metadata.labels.clone().unwrap_or_default();
    let mut written: Vec<FrrConfiguration> = shared.into_values().collect();
    written.extend(own);
    let r = render(&written, &labels)
        .expect("renders")
        .expect("a configuration");
    let differ: Vec<_> = r.networks.symmetric_difference(&direct).collect();
    assert!(differ.is_empty(), "differ by {differ:?}");
}
