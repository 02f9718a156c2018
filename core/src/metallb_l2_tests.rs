//! MetalLB's documented L2 examples (tests/fixtures/metallb/l2.yaml, l2-preferred.yaml) read
//! through the objects file: each `L2Advertisement` is read, what vipflow does not carry out
//! (`interfaces`, `serviceSelectors`, `preferredNodeSelectors`) is said, and the L2 announcer's
//! eligibility follows what is read.

use super::*;
use crate::announce::placement::Eligible;
use crate::model::ModelOptions;
use crate::plan::eligibility::Eligibility;
use crate::plan::service_index::ServiceIndex;

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/../tests/fixtures/metallb/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Each problem as `object: kind: reason`.
fn problems(loaded: &Loaded) -> Vec<String> {
    loaded
        .problems
        .iter()
        .map(|p| format!("{}: {:?}: {}", p.subject, p.kind, p.reason))
        .collect()
}

#[test]
fn the_l2_examples_are_read_and_interfaces_and_service_selectors_are_said() {
    let loaded = crate::decode::parse(&fixture("l2.yaml")).expect("the objects parse");
    let o = &loaded.objects;
    let names: Vec<&str> = o
        .l2_advertisements
        .iter()
        .filter_map(|a| a.metadata.name.as_deref())
        .collect();
    // Every advertisement but the two with serviceSelectors, in the file's order.
    assert_eq!(
        names,
        [
            "example",
            "example-first-pool",
            "example-node-a-b",
            "example-node-c",
            "example-interfaces",
            "example-node-a-eth3",
            "example-advertisement9",
            "example-advertisement10",
        ]
    );
    let by_name = |n: &str| {
        o.l2_advertisements
            .iter()
            .find(|a| a.metadata.name.as_deref() == Some(n))
            .map(|a| &a.spec)
    };
    // No spec at all: every pool from every node.
    assert_eq!(by_name("example"), Some(&L2AdvertisementSpec::default()));
    let a_b = by_name("example-node-a-b").expect("example-node-a-b");
    assert_eq!(a_b.ip_address_pools, ["first-pool"]);
    assert_eq!(a_b.node_selectors.len(), 2);
    assert!(
        o.l2_advertisements
            .iter()
            .all(|a| a.api_version.as_deref() == Some(V1BETA1))
    );

    let said = problems(&loaded);
    let mut want: Vec<String> = [
        ("example-interfaces", "eth0, eth1"),
        ("example-node-a-eth3", "eth3"),
        ("example-advertisement9", "eno1"),
        ("example-advertisement10", "ens18"),
    ]
    .iter()
    .map(|(name, interfaces)| {
        format!(
            "L2Advertisement metallb-system/{name}: Unsupported: interfaces ({interfaces}) is not supported: vipflow answers ARP/ND in the switch of each announcing bridge, on the port a request came in by; the advertisement is used without it"
        )
    })
    .collect();
    for name in ["frontend-services", "backend-services"] {
        want.push(format!(
            "L2Advertisement metallb-system/{name}: UnsupportedObject: serviceSelectors is not supported: the advertisement would cover every Service of its pools; skipped"
        ));
    }
    assert_eq!(said, want);

    let became = became(o);
    assert!(
        became.contains(
            &"L2Advertisement metallb-system/example -> L2 announcement of every pool from every node"
                .to_string()
        ),
        "{became:#?}"
    );
    assert!(
        became.contains(&"L2Advertisement metallb-system/example-node-a-b -> L2 announcement of pool first-pool from the nodes one of its 2 nodeSelectors matches".to_string()),
        "{became:#?}"
    );
}

/// The docs' "Limiting the set of nodes": with the advertisements that name first-pool and
/// nodes (NodeA, NodeB) and none for every pool, first-pool's VIPs go to NodeA or NodeB only;
/// with the docs' first advertisement (every pool) too, to any node.
#[test]
fn the_node_limited_example_lets_only_node_a_or_node_b_announce_first_pool() {
    let nodes = "apiVersion: v1\nkind: List\nitems:\n\
        - {apiVersion: v1, kind: Node, metadata: {name: node-a, labels: {kubernetes.io/hostname: NodeA}}}\n\
        - {apiVersion: v1, kind: Node, metadata: {name: node-b, labels: {kubernetes.io/hostname: NodeB}}}\n\
        - {apiVersion: v1, kind: Node, metadata: {name: node-c, labels: {kubernetes.io/hostname: NodeC}}}\n\
        - {apiVersion: v1, kind: Service, metadata: {name: web, namespace: shop}, spec: {externalIPs: [192.168.1.241], ports: [{port: 80, protocol: TCP}]}}\n";
    let extra = crate::decode::parse(nodes).expect("objects").objects;
    let mut o = crate::decode::parse(&fixture("l2.yaml"))
        .expect("the objects parse")
        .objects;
    o.nodes = extra.nodes;
    o.services = extra.services;
    let eligible = |o: &crate::model::Objects| {
        let mut services = ServiceIndex::new(ModelOptions::default(), &[], 0x7f1f);
        services.update(o);
        let mut e = Eligibility::for_l2();
        e.update(o, &services);
        e.of("192.168.1.241".parse().expect("an address"))
    };
    assert_eq!(eligible(&o), Eligible::Any);
    o.l2_advertisements.retain(|a| {
        !matches!(
            a.metadata.name.as_deref(),
            Some("example" | "example-first-pool" | "example-advertisement9")
        )
    });
    assert_eq!(
        eligible(&o),
        Eligible::Nodes(std::sync::Arc::new(
            ["node-a", "node-b"].into_iter().map(Into::into).collect()
        ))
    );
}

#[test]
fn preferred_node_selectors_are_said_and_ignored() {
    let loaded = crate::decode::parse(&fixture("l2-preferred.yaml")).expect("the objects parse");
    assert_eq!(loaded.objects.l2_advertisements.len(), 3);
    let said = problems(&loaded);
    assert_eq!(said.len(), 3, "{said:#?}");
    assert!(
        said.iter().all(|p| p.contains(
            "Unsupported: preferredNodeSelectors (in no MetalLB release yet) is not supported: ignored"
        )),
        "{said:#?}"
    );
}

#[test]
fn unknown_fields_and_bad_selectors_are_said_as_for_the_other_kinds() {
    let loaded = crate::decode::parse(
        "apiVersion: v1\nkind: List\nitems:\n\
         - {apiVersion: metallb.io/v1beta1, kind: L2Advertisement, metadata: {name: odd, namespace: metallb-system}, spec: {ipAddressPools: [blue], nodeSelector: {x: y}, nodeSelectors: [{matchExpressions: [{key: zone, operator: Near}]}]}}\n\
         - {apiVersion: metallb.io/v1beta1, kind: L2Advertisement, metadata: {name: bad, namespace: metallb-system}, spec: {ipAddressPools: blue}}\n\
         - {apiVersion: metallb.io/v1beta1, kind: L2Advertisement, metadata: {name: odd, namespace: other}}\n",
    )
    .expect("the objects parse");
    let said = problems(&loaded);
    assert_eq!(loaded.objects.l2_advertisements.len(), 1, "{said:#?}");
    assert!(
        said.contains(
            &"L2Advertisement metallb-system/odd: UnknownField: unknown field spec.nodeSelector ignored"
                .to_string()
        ),
        "{said:#?}"
    );
    assert!(
        said.iter().any(|p| p.starts_with(
            "L2Advertisement metallb-system/odd: Invalid: nodeSelectors[0]: unknown selector operator `Near`"
        )),
        "{said:#?}"
    );
    assert!(
        said.iter()
            .any(|p| p.starts_with("L2Advertisement metallb-system/bad: Invalid: invalid:")),
        "{said:#?}"
    );
    assert!(
        said.iter().any(|p| p.starts_with(
            "L2Advertisement other/odd: Duplicate: L2Advertisement metallb-system/odd has the same name and is used; skipped"
        )),
        "{said:#?}"
    );
}
