//! Tests for the model rules: which VIPs a Service has.

use super::test_support::*;
use super::*;

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
