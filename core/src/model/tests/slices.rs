//! Tests for the model rules: EndpointSlices and the gateway router MAC.

use super::test_support::*;
use super::*;
use crate::keys::L3_GATEWAY_CONFIG_ANNOTATION;

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
fn a_model_without_slices_has_the_same_services_and_problems() {
    let text = list(&[
        slice("web-1", WEB, "IPv4", "\n    - {addresses: [10.244.1.5]}"),
        slice(
            "web-fqdn",
            WEB,
            "FQDN",
            "\n    - {addresses: [backend.example.com]}",
        ),
        slice(
            "custom",
            "{app: web}",
            "IPv4",
            "\n    - {addresses: [10.244.1.6]}",
        ),
    ]);
    let objects = load(&text);
    let whole = Model::build(&objects, &ModelOptions::default());
    let lean = Model::build_without_slices(&objects, &ModelOptions::default());
    assert_eq!(whole.endpoint_slices.len(), 1);
    assert!(lean.endpoint_slices.is_empty());
    assert_eq!(problems(&lean), problems(&whole));
    assert_eq!(problems(&lean).len(), 1);
    assert_eq!(
        Model {
            endpoint_slices: BTreeMap::new(),
            ..whole
        },
        lean
    );
    let example = load(include_str!("../../../../examples/services.yaml"));
    let whole = Model::build(&example, &ModelOptions::default());
    let lean = Model::build_without_slices(&example, &ModelOptions::default());
    assert!(!whole.endpoint_slices.is_empty());
    assert_eq!(
        Model {
            endpoint_slices: BTreeMap::new(),
            ..whole
        },
        lean
    );
}

#[test]
fn the_example_objects_file_builds_cleanly() {
    let m = build(include_str!("../../../../examples/services.yaml"));
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
