//! Unit tests for the model rules (DESIGN.md "Which VIPs"). Fixtures are `kubectl get -o yaml`
//! shaped text, parsed by the file source.

use super::*;
use crate::source::file::parse;
use proptest::prelude::*;

/// Parse fixture text; the fixtures themselves must be clean.
fn load(yaml: &str) -> Objects {
    let l = parse(yaml).expect("fixture parses");
    assert!(l.problems.is_empty(), "fixture problems: {:?}", l.problems);
    l.objects
}

fn build(yaml: &str) -> Model {
    Model::build(&load(yaml), &ModelOptions::default())
}

fn build_class(yaml: &str, class: &str) -> Model {
    Model::build(
        &load(yaml),
        &ModelOptions {
            load_balancer_class: Some(class.into()),
        },
    )
}

/// Every VIP:port/proto as `ns/name VIP:port/proto`.
fn vip_ports(m: &Model) -> Vec<String> {
    m.vip_ports()
        .map(|(k, vp)| format!("{k} {}", SocketLike(vp)))
        .collect()
}

fn problems(m: &Model) -> Vec<String> {
    m.problems.iter().map(ToString::to_string).collect()
}

fn service<'a>(m: &'a Model, ns: &str, name: &str) -> &'a Service {
    &m.services[&ServiceKey::new(ns, name)]
}

// ---- which VIPs -----------------------------------------------------------------------------

#[test]
fn external_ips_are_taken_for_every_service_type() {
    let m = build(
        r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: a, namespace: ns}
  spec:
    type: ClusterIP
    clusterIP: 10.96.0.1
    externalIPs: [192.0.2.1]
    ports: [{port: 80}]
- apiVersion: v1
  kind: Service
  metadata: {name: b, namespace: ns}
  spec:
    type: NodePort
    clusterIP: 10.96.0.2
    externalIPs: [192.0.2.2]
    ports: [{port: 80, nodePort: 30080}]
- apiVersion: v1
  kind: Service
  metadata: {name: c, namespace: ns}
  spec:
    type: LoadBalancer
    clusterIP: 10.96.0.3
    externalIPs: [192.0.2.3]
    ports: [{port: 80, nodePort: 30081}]
- apiVersion: v1
  kind: Service
  metadata: {name: d, namespace: ns}
  spec:
    clusterIP: None
    externalIPs: [192.0.2.4]
    ports: [{port: 80}]
"#,
    );
    assert_eq!(
        vip_ports(&m),
        [
            "ns/a 192.0.2.1:80/tcp",
            "ns/b 192.0.2.2:80/tcp",
            "ns/c 192.0.2.3:80/tcp",
            "ns/d 192.0.2.4:80/tcp",
        ]
    );
    assert!(m.problems.is_empty(), "{:?}", m.problems);
}

#[test]
fn load_balancer_ingress_ips_are_taken() {
    let m = build(
        r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  type: LoadBalancer
  ports: [{name: http, port: 80, targetPort: 8080}]
status:
  loadBalancer:
    ingress:
    - ip: 172.18.0.100
    - ip: 172.18.0.101
      ipMode: VIP
"#,
    );
    assert_eq!(
        vip_ports(&m),
        [
            "shop/web 172.18.0.100:80/tcp",
            "shop/web 172.18.0.101:80/tcp"
        ]
    );
    assert_eq!(
        service(&m, "shop", "web").vip_ports[0].target,
        TargetPort::Number(8080)
    );
}

#[test]
fn ingress_of_a_service_that_is_not_a_load_balancer_is_ignored() {
    // A stale status left behind after the type changed from LoadBalancer.
    let m = build(
        r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  type: ClusterIP
  ports: [{port: 80}]
status:
  loadBalancer:
    ingress: [{ip: 172.18.0.100}]
"#,
    );
    assert!(vip_ports(&m).is_empty());
}

#[test]
fn ingress_with_ip_mode_proxy_is_skipped() {
    let m = build(
        r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  type: LoadBalancer
  ports: [{port: 80}]
status:
  loadBalancer:
    ingress:
    - {ip: 172.18.0.100, ipMode: Proxy}
    - {ip: 172.18.0.101, ipMode: VIP}
"#,
    );
    assert_eq!(vip_ports(&m), ["shop/web 172.18.0.101:80/tcp"]);
    assert!(m.problems.is_empty(), "{:?}", m.problems);
}

#[test]
fn hostname_only_ingress_is_ignored_silently() {
    let m = build(
        r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  type: LoadBalancer
  ports: [{port: 80}]
status:
  loadBalancer:
    ingress:
    - hostname: lb-123.elb.example.com
    - {hostname: lb-456.elb.example.com, ip: 172.18.0.7}
"#,
    );
    assert_eq!(vip_ports(&m), ["shop/web 172.18.0.7:80/tcp"]);
    assert!(m.problems.is_empty(), "{:?}", m.problems);
}

const CLASSES: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: mine, namespace: ns}
  spec:
    type: LoadBalancer
    loadBalancerClass: example.com/vip
    ports: [{port: 80}]
  status: {loadBalancer: {ingress: [{ip: 198.51.100.1}]}}
- apiVersion: v1
  kind: Service
  metadata: {name: other, namespace: ns}
  spec:
    type: LoadBalancer
    loadBalancerClass: other.io/lb
    externalIPs: [198.51.100.20]
    ports: [{port: 80}]
  status: {loadBalancer: {ingress: [{ip: 198.51.100.2}]}}
- apiVersion: v1
  kind: Service
  metadata: {name: unclassed, namespace: ns}
  spec:
    type: LoadBalancer
    externalIPs: [198.51.100.30]
    ports: [{port: 80}]
  status: {loadBalancer: {ingress: [{ip: 198.51.100.3}]}}
"#;

#[test]
fn load_balancer_class_filter_applies_to_ingress_only() {
    let m = build_class(CLASSES, "example.com/vip");
    assert_eq!(
        vip_ports(&m),
        [
            "ns/mine 198.51.100.1:80/tcp",
            "ns/other 198.51.100.20:80/tcp",
            "ns/unclassed 198.51.100.30:80/tcp",
        ]
    );
    assert!(m.problems.is_empty(), "{:?}", m.problems);
}

#[test]
fn without_a_class_filter_every_ingress_is_taken() {
    let m = build(CLASSES);
    assert_eq!(m.vips().len(), 5);
}

#[test]
fn ipv4_and_ipv6_dual_stack() {
    let m = build(
        r#"
apiVersion: v1
kind: Service
metadata: {name: dns, namespace: infra}
spec:
  type: LoadBalancer
  ipFamilyPolicy: RequireDualStack
  ipFamilies: [IPv4, IPv6]
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10, "fd00:96::a"]
  externalIPs: [172.18.0.53, "fd00:18::53"]
  ports: [{port: 53, protocol: UDP}]
status:
  loadBalancer:
    ingress: [{ip: 172.18.0.54}, {ip: "2001:db8::54"}]
"#,
    );
    assert_eq!(
        vip_ports(&m),
        [
            "infra/dns 172.18.0.53:53/udp",
            "infra/dns 172.18.0.54:53/udp",
            "infra/dns [2001:db8::54]:53/udp",
            "infra/dns [fd00:18::53]:53/udp",
        ]
    );
}

// ---- invalid input is skipped for the smallest unit -----------------------------------------

#[test]
fn an_invalid_ip_is_skipped_and_the_other_vips_kept() {
    let m = build(
        r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  type: LoadBalancer
  externalIPs: [192.0.2.1, not-an-ip, 192.0.2.300]
  ports: [{port: 80}]
status:
  loadBalancer:
    ingress: [{ip: "fd00::zz"}, {ip: 192.0.2.2}]
"#,
    );
    assert_eq!(
        vip_ports(&m),
        ["shop/web 192.0.2.1:80/tcp", "shop/web 192.0.2.2:80/tcp"]
    );
    assert_eq!(
        problems(&m),
        [
            "Service shop/web: 192.0.2.300: not an IP address; skipped",
            "Service shop/web: fd00::zz: not an IP address; skipped",
            "Service shop/web: not-an-ip: not an IP address; skipped",
        ]
    );
}

#[test]
fn unspecified_loopback_and_multicast_vips_are_skipped() {
    let m = build(
        r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  externalIPs: [0.0.0.0, 127.0.0.1, 224.0.0.1, "::", "::1", "ff02::1", 192.0.2.1]
  ports: [{port: 80}]
"#,
    );
    assert_eq!(vip_ports(&m), ["shop/web 192.0.2.1:80/tcp"]);
    assert_eq!(m.problems.len(), 6, "{:?}", m.problems);
    assert!(
        m.problems
            .iter()
            .all(|p| p.reason == "not a usable unicast address; skipped")
    );
}

/// One Service with a good port 80 and one bad port; returns (vip_ports, problems).
fn with_bad_port(bad_port: &str) -> (Vec<String>, Vec<String>) {
    let m = build(&format!(
        r#"
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: shop}}
spec:
  externalIPs: [192.0.2.1]
  ports:
  - {{name: http, port: 80}}
  - {bad_port}
"#
    ));
    (vip_ports(&m), problems(&m))
}

#[test]
fn port_zero_is_skipped_for_that_port_only() {
    let (vps, probs) = with_bad_port("{name: bad, port: 0}");
    assert_eq!(vps, ["shop/web 192.0.2.1:80/tcp"]);
    assert_eq!(
        probs,
        ["Service shop/web: port bad: 0 is not a valid port; skipped"]
    );
}

#[test]
fn port_above_65535_is_skipped_for_that_port_only() {
    let (vps, probs) = with_bad_port("{name: big, port: 65536}");
    assert_eq!(vps, ["shop/web 192.0.2.1:80/tcp"]);
    assert_eq!(
        probs,
        ["Service shop/web: port big: 65536 is not a valid port; skipped"]
    );
}

#[test]
fn negative_port_is_skipped_for_that_port_only() {
    let (vps, probs) = with_bad_port("{port: -1}");
    assert_eq!(vps, ["shop/web 192.0.2.1:80/tcp"]);
    assert_eq!(
        probs,
        ["Service shop/web: port -1: -1 is not a valid port; skipped"]
    );
}

#[test]
fn unknown_protocol_is_skipped_for_that_port_only() {
    let (vps, probs) = with_bad_port("{name: q, port: 443, protocol: QUIC}");
    assert_eq!(vps, ["shop/web 192.0.2.1:80/tcp"]);
    assert_eq!(
        probs,
        [r#"Service shop/web: port q: unknown protocol "QUIC"; skipped"#]
    );
}

#[test]
fn protocol_names_are_case_sensitive_as_in_kubernetes() {
    let (vps, probs) = with_bad_port("{name: q, port: 443, protocol: tcp}");
    assert_eq!(vps, ["shop/web 192.0.2.1:80/tcp"]);
    assert_eq!(probs.len(), 1, "{probs:?}");
}

#[test]
fn target_port_zero_is_skipped_for_that_port_only() {
    let (vps, probs) = with_bad_port("{name: t, port: 443, targetPort: 0}");
    assert_eq!(vps, ["shop/web 192.0.2.1:80/tcp"]);
    assert_eq!(
        probs,
        ["Service shop/web: port t: targetPort 0 is not a valid port; skipped"]
    );
    let (vps, probs) = with_bad_port(r#"{name: t, port: 443, targetPort: "0"}"#);
    assert_eq!(vps, ["shop/web 192.0.2.1:80/tcp"]);
    assert_eq!(
        probs,
        ["Service shop/web: port t: targetPort 0 is not a valid port; skipped"]
    );
}

#[test]
fn target_port_above_65535_is_skipped_for_that_port_only() {
    let (vps, probs) = with_bad_port("{name: t, port: 443, targetPort: 70000}");
    assert_eq!(vps, ["shop/web 192.0.2.1:80/tcp"]);
    assert_eq!(
        probs,
        ["Service shop/web: port t: targetPort 70000 is not a valid port; skipped"]
    );
}

#[test]
fn a_port_listed_twice_for_one_protocol_is_used_once() {
    let m = build(
        r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  externalIPs: [192.0.2.1]
  ports:
  - {name: a, port: 80, targetPort: 8080}
  - {name: b, port: 80, targetPort: 9090}
"#,
    );
    let s = service(&m, "shop", "web");
    assert_eq!(s.vip_ports.len(), 1);
    assert_eq!(s.vip_ports[0].target, TargetPort::Number(8080));
    assert_eq!(
        problems(&m),
        ["Service shop/web: port 80/tcp listed twice; the first one is used"]
    );
}

#[test]
fn vips_without_any_valid_port_are_reported() {
    let m = build(
        r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  externalIPs: [192.0.2.1]
  ports: [{port: 0}]
"#,
    );
    assert!(vip_ports(&m).is_empty());
    assert!(
        problems(&m)
            .contains(&"Service shop/web: has VIPs but no valid port; nothing to program".into()),
        "{:?}",
        m.problems
    );
}

#[test]
fn protocol_defaults_to_tcp_and_target_port_to_port() {
    let m = build(
        r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  externalIPs: [192.0.2.1]
  ports: [{port: 80}]
"#,
    );
    let vp = &service(&m, "shop", "web").vip_ports[0];
    assert_eq!(vp.protocol, Protocol::Tcp);
    assert_eq!(vp.target, TargetPort::Number(80));
    assert_eq!(vp.port_name, None);
}

#[test]
fn named_target_port_is_kept_by_name() {
    let m = build(
        r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  externalIPs: [192.0.2.1]
  ports: [{name: https, port: 443, targetPort: https-alt}]
"#,
    );
    let vp = &service(&m, "shop", "web").vip_ports[0];
    assert_eq!(vp.target, TargetPort::Name("https-alt".into()));
    assert_eq!(vp.port_name.as_deref(), Some("https"));
}

#[test]
fn same_port_on_tcp_and_udp_are_both_kept() {
    let m = build(
        r#"
apiVersion: v1
kind: Service
metadata: {name: dns, namespace: infra}
spec:
  externalIPs: [172.18.0.53]
  ports:
  - {name: dns-udp, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
  - {name: dns-sctp, port: 53, protocol: SCTP}
"#,
    );
    assert_eq!(
        vip_ports(&m),
        [
            "infra/dns 172.18.0.53:53/tcp",
            "infra/dns 172.18.0.53:53/udp",
            "infra/dns 172.18.0.53:53/sctp",
        ]
    );
    assert!(m.problems.is_empty(), "{:?}", m.problems);
}

#[test]
fn a_vip_equal_to_a_node_address_is_skipped() {
    let m = build(
        r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: node-a}
  status:
    addresses:
    - {type: InternalIP, address: 192.168.10.11}
    - {type: InternalIP, address: "fd00:10::11"}
    - {type: Hostname, address: node-a}
- apiVersion: v1
  kind: Service
  metadata: {name: web, namespace: shop}
  spec:
    externalIPs: [192.168.10.11, "fd00:10::11", 192.0.2.1]
    ports: [{port: 80}]
"#,
    );
    assert_eq!(vip_ports(&m), ["shop/web 192.0.2.1:80/tcp"]);
    assert_eq!(
        problems(&m),
        [
            "Service shop/web: 192.168.10.11: is a node address; skipped",
            "Service shop/web: fd00:10::11: is a node address; skipped",
        ]
    );
}

#[test]
fn a_vip_equal_to_a_cluster_ip_is_skipped() {
    // Another Service's cluster IP (v4 in clusterIP, v6 only in clusterIPs), and its own.
    let m = build(
        r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: api, namespace: default}
  spec:
    clusterIP: 10.96.0.1
    clusterIPs: [10.96.0.1, "fd00:96::1"]
    ports: [{port: 443}]
- apiVersion: v1
  kind: Service
  metadata: {name: web, namespace: shop}
  spec:
    clusterIP: 10.96.0.20
    externalIPs: [10.96.0.1, "fd00:96::1", 10.96.0.20, 192.0.2.1]
    ports: [{port: 80}]
"#,
    );
    assert_eq!(vip_ports(&m), ["shop/web 192.0.2.1:80/tcp"]);
    assert_eq!(
        problems(&m),
        [
            "Service shop/web: 10.96.0.1: is a cluster IP; skipped",
            "Service shop/web: 10.96.0.20: is a cluster IP; skipped",
            "Service shop/web: fd00:96::1: is a cluster IP; skipped",
        ]
    );
}

#[test]
fn a_vip_listed_twice_in_one_service_is_taken_once() {
    let m = build(
        r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  type: LoadBalancer
  externalIPs: [192.0.2.1, 192.0.2.1]
  ports: [{port: 80}]
status:
  loadBalancer:
    ingress: [{ip: 192.0.2.1}, {ip: 192.0.2.1}]
"#,
    );
    assert_eq!(vip_ports(&m), ["shop/web 192.0.2.1:80/tcp"]);
    assert!(m.problems.is_empty(), "{:?}", m.problems);
}

#[test]
fn a_service_listed_twice_is_reported_and_the_first_kept() {
    let m = build(
        r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  externalIPs: [192.0.2.1]
  ports: [{port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  externalIPs: [192.0.2.2]
  ports: [{port: 8080}]
"#,
    );
    assert_eq!(vip_ports(&m), ["shop/web 192.0.2.1:80/tcp"]);
    assert_eq!(
        problems(&m),
        ["Service shop/web: listed twice; the first one is used"]
    );
}

#[test]
fn a_missing_namespace_means_default() {
    let m = build(
        r#"
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  externalIPs: [192.0.2.1]
  ports: [{port: 80}]
"#,
    );
    assert_eq!(vip_ports(&m), ["default/web 192.0.2.1:80/tcp"]);
}

#[test]
fn a_service_without_name_or_spec_is_not_a_crash() {
    let m = build(
        r#"
apiVersion: v1
kind: Service
metadata: {namespace: shop}
spec:
  externalIPs: [192.0.2.1]
  ports: [{port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: bare, namespace: shop}
"#,
    );
    assert!(m.services.is_empty());
    assert_eq!(problems(&m), ["Service: no metadata.name"]);
}

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

fn list(items: &[String]) -> String {
    format!("apiVersion: v1\nkind: List\nitems:\n{}", items.concat())
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

// ---- EndpointSlices -------------------------------------------------------------------------

fn slice(name: &str, labels: &str, address_type: &str, endpoints: &str) -> String {
    format!(
        r#"
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata:
    name: {name}
    namespace: shop
    labels: {labels}
  addressType: {address_type}
  ports: [{{name: http, port: 8080, protocol: TCP}}]
  endpoints:{endpoints}
"#
    )
}

const WEB: &str = "{kubernetes.io/service-name: web}";

fn endpoints(m: &Model) -> Vec<Endpoint> {
    m.endpoint_slices[&ServiceKey::new("shop", "web")]
        .iter()
        .flat_map(|s| s.endpoints.clone())
        .collect()
}

#[test]
fn endpoint_conditions_default_as_kubernetes_defines_them() {
    // nil ready -> true; nil serving -> true; nil terminating -> false.
    let m = build(&list(&[slice(
        "web-1",
        WEB,
        "IPv4",
        r#"
    - addresses: [10.244.1.5]
      nodeName: node-a
    - addresses: [10.244.1.6]
      conditions: {}
    - addresses: [10.244.1.7]
      conditions: {ready: false}
    - addresses: [10.244.1.8]
      conditions: {ready: false, serving: true, terminating: true}
    - addresses: [10.244.1.9]
      conditions: {ready: false, serving: false, terminating: true}
"#,
    )]));
    let conds: Vec<(String, bool, bool, bool)> = endpoints(&m)
        .iter()
        .map(|e| {
            (
                e.addresses[0].to_string(),
                e.ready,
                e.serving,
                e.terminating,
            )
        })
        .collect();
    let c = |a: &str, r, s, t| (a.to_string(), r, s, t);
    assert_eq!(
        conds,
        [
            c("10.244.1.5", true, true, false),
            c("10.244.1.6", true, true, false),
            c("10.244.1.7", false, true, false),
            c("10.244.1.8", false, true, true),
            c("10.244.1.9", false, false, true),
        ]
    );
    assert!(m.problems.is_empty(), "{:?}", m.problems);
}

#[test]
fn endpoint_node_name_and_ports_are_kept() {
    let m = build(&list(&[slice(
        "web-1",
        WEB,
        "IPv4",
        r#"
    - {addresses: [10.244.1.5], nodeName: node-a}
    - {addresses: [10.244.2.7]}
"#,
    )]));
    let eps = endpoints(&m);
    assert_eq!(eps[0].node.as_deref(), Some("node-a"));
    assert_eq!(eps[1].node, None);
    let s = &m.endpoint_slices[&ServiceKey::new("shop", "web")][0];
    assert_eq!(
        s.ports,
        [EndpointPort {
            name: Some("http".into()),
            port: 8080,
            protocol: Protocol::Tcp
        }]
    );
}

#[test]
fn fqdn_endpoint_addresses_are_skipped_with_a_problem() {
    let m = build(&list(&[slice(
        "web-fqdn",
        WEB,
        "FQDN",
        r#"
    - {addresses: [backend.example.com]}
"#,
    )]));
    assert!(endpoints(&m).is_empty());
    assert_eq!(
        problems(&m),
        [r#"EndpointSlice shop/web-fqdn: address "backend.example.com" is not an IP; skipped"#]
    );
}

#[test]
fn slices_without_the_service_name_label_are_ignored() {
    let m = build(&list(&[
        slice(
            "custom",
            "{app: web}",
            "IPv4",
            "\n    - {addresses: [10.244.1.5]}",
        ),
        slice("web-1", WEB, "IPv4", "\n    - {addresses: [10.244.1.6]}"),
    ]));
    assert_eq!(m.endpoint_slices.len(), 1);
    assert_eq!(endpoints(&m).len(), 1);
    assert!(m.problems.is_empty(), "{:?}", m.problems);
}

#[test]
fn slices_of_one_service_are_grouped_and_sorted_by_name() {
    let m = build(&list(&[
        slice("web-b", WEB, "IPv4", "\n    - {addresses: [10.244.1.6]}"),
        slice("web-a", WEB, "IPv4", "\n    - {addresses: [10.244.1.5]}"),
    ]));
    let names: Vec<&str> = m.endpoint_slices[&ServiceKey::new("shop", "web")]
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(names, ["web-a", "web-b"]);
}

#[test]
fn slice_ports_that_are_invalid_are_skipped_with_a_problem() {
    let m = build(
        r#"
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: shop
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports:
- {name: http, port: 8080}
- {name: zero, port: 0}
- {name: quic, port: 443, protocol: QUIC}
endpoints: []
"#,
    );
    let s = &m.endpoint_slices[&ServiceKey::new("shop", "web")][0];
    assert_eq!(s.ports.len(), 1);
    assert_eq!(s.ports[0].protocol, Protocol::Tcp);
    assert_eq!(m.problems.len(), 2, "{:?}", m.problems);
}

#[test]
fn the_example_objects_file_builds_cleanly() {
    let m = build(include_str!("../../examples/services.yaml"));
    assert!(m.problems.is_empty(), "{:?}", m.problems);
    assert_eq!(
        vip_ports(&m),
        [
            "infra/dns 172.18.0.53:53/tcp",
            "infra/dns 172.18.0.53:53/udp",
            "infra/dns [fd00:18::53]:53/tcp",
            "infra/dns [fd00:18::53]:53/udp",
            "shop/web 172.18.0.100:80/tcp",
            "shop/web 172.18.0.100:443/tcp",
        ]
    );
}

#[test]
fn an_all_digit_target_port_out_of_range_is_a_problem_not_a_name() {
    let m = Model::build(
        &load(
            r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  externalIPs: [172.18.0.100]
  ports: [{name: a, port: 80, targetPort: "70000"}, {name: b, port: 81, targetPort: "http"}]
"#,
        ),
        &ModelOptions::default(),
    );
    let s = &m.services[&ServiceKey::new("shop", "web")];
    assert_eq!(s.vip_ports.len(), 1, "{:?}", s.vip_ports);
    assert_eq!(s.vip_ports[0].target, TargetPort::Name("http".into()));
    assert!(
        m.problems
            .iter()
            .any(|p| p.reason.contains("targetPort 70000 is not a valid port")),
        "{:?}",
        m.problems
    );
}

#[test]
fn link_local_and_broadcast_vips_are_skipped() {
    let m = Model::build(
        &load(
            r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  externalIPs: [169.254.1.1, 255.255.255.255, "fe80::1", 172.18.0.100]
  ports: [{port: 80}]
"#,
        ),
        &ModelOptions::default(),
    );
    let vips: Vec<String> = m.vips().keys().map(|v| v.to_string()).collect();
    assert_eq!(vips, ["172.18.0.100"]);
    assert_eq!(
        m.problems
            .iter()
            .filter(|p| p.reason.contains("not a usable unicast address"))
            .count(),
        3
    );
}

// ---- OVN-Kubernetes' gateway router MAC --------------------------------------------------------

fn node_with(annotation: Option<&str>) -> Arc<core::Node> {
    let mut v = serde_json::json!({"metadata": {"name": "node-a"}});
    if let Some(a) = annotation {
        v["metadata"]["annotations"] = serde_json::json!({ L3_GATEWAY_CONFIG_ANNOTATION: a });
    }
    Arc::new(serde_json::from_value(v).unwrap())
}

#[test]
fn gateway_router_mac_from_the_l3_gateway_config_annotation() {
    // As ovnkube-node writes it.
    let shared = r#"{"default":{"mode":"shared","interface-id":"br-ex_node-a","mac-address":"02:f8:4a:00:00:20","ip-addresses":["192.168.4.191/24"],"ip-address":"192.168.4.191/24","next-hops":["192.168.4.1"],"next-hop":"192.168.4.1","node-port-enable":"true","vlan-id":"0"}}"#;
    assert_eq!(
        gateway_router_mac(&node_with(Some(shared))),
        Ok(Some([0x02, 0xf8, 0x4a, 0, 0, 0x20]))
    );
    assert_eq!(gateway_router_mac(&node_with(None)), Ok(None));
    assert_eq!(
        gateway_router_mac(&node_with(Some(r#"{"default":{"mode":""}}"#))),
        Ok(None),
        "gateway disabled"
    );
    for bad in [
        "not json",
        r#"{"other":{"mode":"shared"}}"#,
        r#"{"default":{"mode":"shared"}}"#,
        r#"{"default":{"mode":"shared","mac-address":"zz"}}"#,
        r#"{"default":"shared"}"#,
    ] {
        assert!(gateway_router_mac(&node_with(Some(bad))).is_err(), "{bad}");
    }
    // Only this node's annotation counts; a bad one is a problem of that Node.
    let nodes = vec![node_with(Some("{"))];
    assert_eq!(node_gateway_router_mac(&nodes, "node-b"), Ok(None));
    let p = node_gateway_router_mac(&nodes, "node-a").unwrap_err();
    assert_eq!(p.subject, Subject::Node("node-a".into()));
    assert!(
        p.reason
            .starts_with("annotation k8s.ovn.org/l3-gateway-config: not JSON"),
        "{p}"
    );
}
