//! Template rows for externalTrafficPolicy Local, beside per-node rows.

use super::*;
use crate::plan::node_template::NodeRows;

#[test]
fn etp_local_in_template_mode_is_one_template_row_for_ipv4_with_a_variable_per_chassis_and_node_rows_for_ipv6()
 {
    let y = list(&[
        NODES.into(),
        svc("", "Local", PORTS),
        slice("IPv4", &[("10.244.1.5", "node-a", true, true, false)]),
        slice("IPv6", &[("fd00:244:1::5", "node-a", true, true, false)]),
    ]);
    let cfg = NorthboundConfig {
        node_router: Some("GR_{node}".into()),
        node_switch: Some("{node}".into()),
        node_rows: NodeRows::Template,
        ..Default::default()
    };
    let r = rows(&y, &cfg);
    assert_eq!(
        r.keys().collect::<Vec<_>>(),
        [
            "vipflow/shop/web/tcp/node-a",
            "vipflow/shop/web/tcp/node-b",
            "vipflow/shop/web/tcp/switches",
            "vipflow/shop/web/tcp/template",
            "vipflow/shop/web/udp/node-a",
            "vipflow/shop/web/udp/node-b",
            "vipflow/shop/web/udp/switches",
            "vipflow/shop/web/udp/template",
        ]
    );
    // The IPv6 VIP cannot be a template VIP: it stays in the per-node rows, alone.
    let a = &r["vipflow/shop/web/tcp/node-a"];
    assert_eq!(a.vips, m(&[("[fd00:18::100]:80", "[fd00:244:1::5]:8080")]));
    assert!(a.template_vars.is_empty());
    // The IPv4 VIP: one row on every node's router, its backends a variable.
    let t = &r["vipflow/shop/web/tcp/template"];
    let var = node_template::backends_var(
        &ServiceKey::new("shop", "web"),
        "172.18.0.100".parse().unwrap(),
        80,
        Protocol::Tcp,
    );
    // And the VIP alone, without backends: the reject where the variable has no value.
    assert_eq!(
        t.vips,
        m(&[
            ("172.18.0.100", ""),
            ("172.18.0.100:80", &format!("^{var}"))
        ])
    );
    assert_eq!(
        t.options,
        m(&[
            ("address-family", "ipv4"),
            ("neighbor_responder", "none"),
            ("reject", "true"),
            ("skip_snat", "true"),
            ("template", "true"),
        ])
    );
    assert_eq!(&t.external_ids[SCOPE_KEY], "template");
    assert_eq!(Scope::parse("template"), Some(Scope::Template));
    // Every node's router, through vipflow's routers group (routers only).
    assert_eq!(
        t.attach,
        Attach {
            group: Some(OWN_ROUTERS_GROUP.into()),
            ..Attach::default()
        }
    );
    let nodes = BTreeSet::from(["node-a".to_string(), "node-b".to_string()]);
    let groups = own_groups(&cfg, &nodes);
    let routers = groups
        .iter()
        .find(|g| g.name == OWN_ROUTERS_GROUP)
        .expect("the routers group");
    assert_eq!(
        routers.routers,
        BTreeSet::from(["GR_node-a".to_string(), "GR_node-b".to_string()])
    );
    assert!(routers.switches.is_empty());
    // Each chassis with endpoints gets its own; node-b has none and no value (its router
    // rejects the VIP's connections by the VIP's key without a port, as a per-node row
    // without backends does).
    assert_eq!(
        t.template_vars,
        [TemplateVar {
            chassis: "node-a".into(),
            name: var,
            value: "10.244.1.5:8080".into()
        }]
    );
    // `vipflow plan` shows each chassis's value.
    let text = t.to_string();
    assert!(
        text.contains(&format!(
            "^{} on chassis node-a: 10.244.1.5:8080",
            t.template_vars[0].name
        )),
        "{text}"
    );
    assert!(text.contains("(no backends: reject)"), "{text}");
    // Per-node mode is as it was: no template row, no variables.
    let per_node = rows(
        &y,
        &NorthboundConfig {
            node_rows: NodeRows::PerNode,
            ..cfg.clone()
        },
    );
    assert!(
        per_node
            .values()
            .all(|r| r.template_vars.is_empty() && r.key.scope != Scope::Template)
    );
    assert_eq!(
        &per_node["vipflow/shop/web/tcp/node-a"].vips["172.18.0.100:80"],
        "10.244.1.5:8080"
    );
}

#[test]
fn at_two_thousand_nodes_a_local_service_is_two_rows_in_template_mode_and_two_thousand_and_one_per_node()
 {
    let nodes: String = (0..2000)
        .map(|i| format!("\n- {{apiVersion: v1, kind: Node, metadata: {{name: n{i}}}}}"))
        .collect();
    let y = format!(
        "apiVersion: v1\nkind: List\nitems:{nodes}{}{}\n",
        r#"
- apiVersion: v1
  kind: Service
  metadata: {name: web, namespace: shop}
  spec:
    externalIPs: [172.18.0.100]
    externalTrafficPolicy: Local
    ports: [{port: 80, protocol: TCP, targetPort: 8080}]
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: web-1, namespace: shop, labels: {kubernetes.io/service-name: web}}
  addressType: IPv4
  ports: [{port: 8080, protocol: TCP}]
  endpoints: [{addresses: [10.244.1.5], nodeName: n7, conditions: {ready: true}}]"#,
        ""
    );
    let cfg = NorthboundConfig {
        node_router: Some("GR_{node}".into()),
        node_switch: Some("{node}".into()),
        ..Default::default()
    };
    let per_node = plan(&model(&y), &cfg);
    let templated = plan(
        &model(&y),
        &NorthboundConfig {
            node_rows: NodeRows::Template,
            ..cfg
        },
    );
    assert_eq!((per_node.len(), templated.len()), (2001, 2));
    // The template row carries one value instead: on the node with the endpoint.
    let t = templated
        .iter()
        .find(|r| r.key.scope == Scope::Template)
        .unwrap();
    assert_eq!(t.template_vars.len(), 1);
    let v = &t.template_vars[0];
    assert_eq!(
        (v.chassis.as_str(), v.value.as_str()),
        ("n7", "10.244.1.5:8080")
    );
}

#[test]
fn template_values_go_to_the_chassis_the_node_annotation_names() {
    let nodes = r#"
- apiVersion: v1
  kind: Node
  metadata: {name: node-a, annotations: {k8s.ovn.org/node-chassis-id: 8f2c6e0e-aaaa-4bbb-8ccc-000000000001}}
- apiVersion: v1
  kind: Node
  metadata: {name: node-b}"#;
    let y = list(&[
        nodes.into(),
        svc("", "Local", PORTS),
        slice(
            "IPv4",
            &[
                ("10.244.1.5", "node-a", true, true, false),
                ("10.244.2.5", "node-b", true, true, false),
            ],
        ),
    ]);
    let cfg = NorthboundConfig {
        node_router: Some("GR_{node}".into()),
        node_rows: NodeRows::Template,
        ..Default::default()
    };
    let r = rows(&y, &cfg);
    let t = &r["vipflow/shop/web/tcp/template"];
    let chassis: Vec<(&str, &str)> = t
        .template_vars
        .iter()
        .map(|v| (v.chassis.as_str(), v.value.as_str()))
        .collect();
    // OVN-Kubernetes names chassis by system-id; a Node without the annotation by its name.
    assert_eq!(
        chassis,
        [
            ("8f2c6e0e-aaaa-4bbb-8ccc-000000000001", "10.244.1.5:8080"),
            ("node-b", "10.244.2.5:8080"),
        ]
    );
    assert_eq!(t.attach.group.as_deref(), Some(OWN_ROUTERS_GROUP));
}

/// prefer-local cannot be a template row: a chassis without local endpoints would need every
/// endpoint as its value, so the values would cost O(Services x nodes) again and one endpoint
/// change would rewrite them on every chassis. It keeps its per-node rows, the same ones in
/// both modes, whether asked for by annotation or for every Service. (A Local Service is Local
/// whatever prefer-local says, and so gets template rows.)
#[test]
fn prefer_local_keeps_the_same_per_node_rows_in_template_mode() {
    let slices = [
        slice("IPv4", &[("10.244.1.5", "node-a", true, true, false)]),
        slice("IPv6", &[("fd00:244:1::5", "node-a", true, true, false)]),
    ];
    let by_annotation = svc(
        ", annotations: {vipflow.io/prefer-local: \"true\"}",
        "Cluster",
        PORTS,
    );
    for (service, everywhere) in [(by_annotation, false), (svc("", "Cluster", PORTS), true)] {
        let mut items = vec![NODES.to_string(), service];
        items.extend(slices.iter().cloned());
        let y = list(&items);
        let cfg = |node_rows| NorthboundConfig {
            node_router: Some("GR_{node}".into()),
            node_switch: Some("{node}".into()),
            prefer_local: everywhere,
            node_rows,
            ..Default::default()
        };
        let per_node = rows(&y, &cfg(NodeRows::PerNode));
        let template = rows(&y, &cfg(NodeRows::Template));
        assert!(
            per_node.keys().any(|k| k.ends_with("/node-b")),
            "{per_node:?}"
        );
        assert_eq!(template, per_node);
        assert!(template.values().all(|r| r.template_vars.is_empty()));
    }
}
