//! Tests for the model rules: invalid input is skipped for the smallest unit.

use super::test_support::*;
use super::*;

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
