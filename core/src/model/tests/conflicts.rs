//! Tests for the model rules: conflicts, traffic policy, nodes.

use super::test_support::*;
use super::*;
use proptest::prelude::*;

// ---- conflicts ------------------------------------------------------------------------------

fn svc(ns: &str, name: &str, created: Option<&str>, vip: &str, ports: &str) -> String {
    let created = created
        .map(|c| format!("\n    creationTimestamp: \"{c}\""))
        .unwrap_or_default();
    format!(
        r#"
- apiVersion: v1
  kind: Service
  metadata:
    name: {name}
    namespace: {ns}{created}
  spec:
    externalIPs: ["{vip}"]
    ports: {ports}
"#
    )
}

#[test]
fn conflict_the_oldest_service_wins_and_the_loser_is_told_who_won() {
    let m = build(&list(&[
        svc(
            "a",
            "new",
            Some("2026-02-01T00:00:00Z"),
            "192.0.2.1",
            "[{port: 80}]",
        ),
        svc(
            "z",
            "old",
            Some("2026-01-01T00:00:00Z"),
            "192.0.2.1",
            "[{port: 80}]",
        ),
    ]));
    assert_eq!(vip_ports(&m), ["z/old 192.0.2.1:80/tcp"]);
    assert_eq!(
        problems(&m),
        ["Service a/new: 192.0.2.1:80/tcp: also claimed by the older Service z/old; conflict lost"]
    );
}

#[test]
fn conflict_with_equal_timestamps_is_decided_by_namespace_then_name() {
    let t = Some("2026-01-01T00:00:00Z");
    let m = build(&list(&[
        svc("b", "a", t, "192.0.2.1", "[{port: 80}]"),
        svc("a", "z", t, "192.0.2.1", "[{port: 80}]"),
        svc("a", "y", t, "192.0.2.1", "[{port: 80}]"),
    ]));
    assert_eq!(vip_ports(&m), ["a/y 192.0.2.1:80/tcp"]);
    assert_eq!(m.problems.len(), 2, "{:?}", m.problems);
    assert!(
        m.problems
            .iter()
            .all(|p| p.reason.contains("older Service a/y"))
    );
}

#[test]
fn conflict_a_service_without_timestamp_loses_to_a_dated_one() {
    let m = build(&list(&[
        svc("a", "undated", None, "192.0.2.1", "[{port: 80}]"),
        svc(
            "z",
            "dated",
            Some("2026-01-01T00:00:00Z"),
            "192.0.2.1",
            "[{port: 80}]",
        ),
    ]));
    assert_eq!(vip_ports(&m), ["z/dated 192.0.2.1:80/tcp"]);
}

#[test]
fn conflict_compares_times_not_strings() {
    // 08:00:00.5 is later than 08:00:00, though ".5Z" sorts before "Z" as text.
    let m = build(&list(&[
        svc(
            "a",
            "fraction",
            Some("2026-01-10T08:00:00.5Z"),
            "192.0.2.1",
            "[{port: 80}]",
        ),
        svc(
            "b",
            "whole",
            Some("2026-01-10T08:00:00Z"),
            "192.0.2.1",
            "[{port: 80}]",
        ),
    ]));
    assert_eq!(vip_ports(&m), ["b/whole 192.0.2.1:80/tcp"]);
}

#[test]
fn conflict_honours_timestamp_offsets() {
    // 08:30:00+01:00 is 07:30:00Z: older than 08:00:00Z.
    let m = build(&list(&[
        svc(
            "a",
            "utc",
            Some("2026-01-10T08:00:00Z"),
            "192.0.2.1",
            "[{port: 80}]",
        ),
        svc(
            "b",
            "offset",
            Some("2026-01-10T08:30:00+01:00"),
            "192.0.2.1",
            "[{port: 80}]",
        ),
    ]));
    assert_eq!(vip_ports(&m), ["b/offset 192.0.2.1:80/tcp"]);
}

#[test]
fn conflict_costs_the_loser_only_the_contested_ports() {
    let m = build(&list(&[
        svc(
            "shop",
            "old",
            Some("2026-01-01T00:00:00Z"),
            "192.0.2.1",
            "[{port: 80}]",
        ),
        svc(
            "shop",
            "new",
            Some("2026-02-01T00:00:00Z"),
            "192.0.2.1",
            "[{port: 80}, {port: 443}, {port: 80, protocol: UDP}]",
        ),
    ]));
    assert_eq!(
        vip_ports(&m),
        [
            "shop/new 192.0.2.1:80/udp",
            "shop/new 192.0.2.1:443/tcp",
            "shop/old 192.0.2.1:80/tcp",
        ]
    );
    assert_eq!(m.problems.len(), 1, "{:?}", m.problems);
    // The VIP is served by both Services.
    assert_eq!(m.vips()[&"192.0.2.1".parse::<IpAddr>().unwrap()].len(), 2);
}

/// A random set of Services with overlapping claims: (ns, name, created, vips, ports).
fn arb_services() -> impl Strategy<Value = Vec<String>> {
    let one = (
        0..3usize,
        0..4usize,
        proptest::option::of(0..3usize),
        proptest::sample::subsequence(vec!["192.0.2.1", "192.0.2.2", "2001:db8::1"], 1..=3),
        proptest::sample::subsequence(
            vec!["{port: 80}", "{port: 80, protocol: UDP}", "{port: 443}"],
            1..=3,
        ),
    );
    proptest::collection::vec(one, 1..8).prop_map(|v| {
        let mut seen = BTreeSet::new();
        v.into_iter()
            .filter(|(ns, name, ..)| seen.insert((*ns, *name)))
            .map(|(ns, name, created, vips, ports)| {
                let created = created
                    .map(|c| format!("\n    creationTimestamp: \"2026-01-0{}T00:00:00Z\"", c + 1))
                    .unwrap_or_default();
                format!(
                    r#"
- apiVersion: v1
  kind: Service
  metadata:
    name: s{name}
    namespace: ns{ns}{created}
  spec:
    externalIPs: ["{}"]
    ports: [{}]
"#,
                    vips.join("\", \""),
                    ports.join(", ")
                )
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn conflict_resolution_does_not_depend_on_input_order(
        (items, shuffled) in arb_services()
            .prop_flat_map(|v| (Just(v.clone()), Just(v).prop_shuffle()))
    ) {
        let a = build(&list(&items));
        let b = build(&list(&shuffled));
        prop_assert_eq!(&a, &b);
        // Each VIP:port/proto has exactly one owner.
        let mut owners = BTreeSet::new();
        for (_, vp) in a.vip_ports() {
            prop_assert!(owners.insert((vp.vip, vp.port, vp.protocol)));
        }
    }
}

// ---- traffic policy -------------------------------------------------------------------------

#[test]
fn external_traffic_policy_local() {
    let m = build(&list(&[r#"
- apiVersion: v1
  kind: Service
  metadata: {name: local, namespace: ns}
  spec:
    type: LoadBalancer
    externalTrafficPolicy: Local
    healthCheckNodePort: 31234
    ports: [{port: 80}]
    externalIPs: [192.0.2.1]
- apiVersion: v1
  kind: Service
  metadata: {name: cluster, namespace: ns}
  spec:
    externalTrafficPolicy: Cluster
    ports: [{port: 80}]
    externalIPs: [192.0.2.2]
- apiVersion: v1
  kind: Service
  metadata: {name: unset, namespace: ns}
  spec:
    ports: [{port: 80}]
    externalIPs: [192.0.2.3]
"#
    .to_string()]));
    assert_eq!(
        service(&m, "ns", "local").traffic_policy,
        TrafficPolicy::Local
    );
    assert_eq!(
        service(&m, "ns", "cluster").traffic_policy,
        TrafficPolicy::Cluster
    );
    assert_eq!(
        service(&m, "ns", "unset").traffic_policy,
        TrafficPolicy::Cluster
    );
}

#[test]
fn prefer_local_annotation() {
    let item = |name: &str, annotation: &str| {
        format!(
            r#"
- apiVersion: v1
  kind: Service
  metadata:
    name: {name}
    namespace: ns
    annotations: {annotation}
  spec:
    ports: [{{port: 80}}]
    externalIPs: [192.0.2.1]
"#
        )
    };
    let m = build(&list(&[
        item("on", r#"{vipflow.io/prefer-local: "true"}"#),
        item("upper", r#"{vipflow.io/prefer-local: "True"}"#),
        item("off", r#"{vipflow.io/prefer-local: "false"}"#),
        item("junk", r#"{vipflow.io/prefer-local: "yes"}"#),
        item("other", r#"{example.com/prefer-local: "true"}"#),
    ]));
    let pl = |n: &str| service(&m, "ns", n).prefer_local;
    assert!(pl("on"));
    assert!(pl("upper"));
    assert!(!pl("off"));
    assert!(!pl("junk"));
    assert!(!pl("other"));
    // Only the value that is neither true nor false is reported.
    let reported: Vec<String> = m
        .problems
        .iter()
        .filter(|p| p.reason.contains("prefer-local"))
        .map(|p| p.to_string())
        .collect();
    assert_eq!(
        reported,
        vec![
            "Service ns/junk: annotation vipflow.io/prefer-local=\"yes\" is neither \"true\" nor \"false\"; prefer-local stays off"
                .to_string()
        ]
    );
}

// ---- nodes ----------------------------------------------------------------------------------

#[test]
fn node_addresses_of_dns_types_are_not_problems() {
    let m = build(
        r#"
apiVersion: v1
kind: Node
metadata: {name: ip-10-0-0-1.ec2.internal}
status:
  addresses:
  - {type: InternalIP, address: 10.0.0.1}
  - {type: ExternalIP, address: 203.0.113.1}
  - {type: InternalDNS, address: ip-10-0-0-1.ec2.internal}
  - {type: ExternalDNS, address: ec2-203-0-113-1.compute.amazonaws.com}
  - {type: Hostname, address: ip-10-0-0-1.ec2.internal}
"#,
    );
    assert!(m.problems.is_empty(), "{:?}", m.problems);
    assert_eq!(
        m.nodes["ip-10-0-0-1.ec2.internal"].addresses,
        [
            "10.0.0.1".parse::<IpAddr>().unwrap(),
            "203.0.113.1".parse().unwrap()
        ]
    );
}

#[test]
fn a_node_ip_address_that_does_not_parse_is_a_problem() {
    let m = build(
        r#"
apiVersion: v1
kind: Node
metadata: {name: node-a}
status:
  addresses:
  - {type: InternalIP, address: 10.0.0.300}
  - {type: InternalIP, address: 10.0.0.3}
"#,
    );
    assert_eq!(
        problems(&m),
        [r#"Node node-a: address "10.0.0.300" is not an IP"#]
    );
    assert_eq!(m.nodes["node-a"].addresses.len(), 1);
}
