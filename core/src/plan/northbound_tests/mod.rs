//! Unit tests of the Northbound plan: each rule of the module doc on literal rows.

use super::*;
use crate::decode;
use crate::model::{Model, ModelOptions};
use crate::plan::str_map::StrMap;

fn model(yaml: &str) -> Model {
    let loaded = decode::parse(yaml).expect("fixture parses");
    Model::build(&loaded.objects, &ModelOptions::default())
}

const NODES: &str = r#"
- apiVersion: v1
  kind: Node
  metadata: {name: node-a}
  status: {addresses: [{type: InternalIP, address: 192.168.10.11}]}
- apiVersion: v1
  kind: Node
  metadata: {name: node-b}
  status: {addresses: [{type: InternalIP, address: 192.168.10.12}]}"#;

fn svc(extra_meta: &str, etp: &str, ports: &str) -> String {
    format!(
        r#"
- apiVersion: v1
  kind: Service
  metadata: {{name: web, namespace: shop{extra_meta}}}
  spec:
    type: ClusterIP
    externalIPs: [172.18.0.100, "fd00:18::100"]
    externalTrafficPolicy: {etp}
    ports: {ports}"#
    )
}

/// A slice: (address, node, ready, serving, terminating).
fn slice(family: &str, eps: &[(&str, &str, bool, bool, bool)]) -> String {
    let eps: String = eps
        .iter()
        .map(|(a, n, r, s, t)| {
            format!("\n  - addresses: [\"{a}\"]\n    nodeName: {n}\n    conditions: {{ready: {r}, serving: {s}, terminating: {t}}}")
        })
        .collect();
    format!(
        r#"
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata:
    name: web-{family}
    namespace: shop
    labels: {{kubernetes.io/service-name: web}}
  addressType: {family}
  ports: [{{name: http, port: 8080, protocol: TCP}}, {{name: dns, port: 5353, protocol: UDP}}]
  endpoints:{eps}"#
    )
}

const PORTS: &str = "[{name: http, port: 80, protocol: TCP, targetPort: http}, {name: dns, port: 53, protocol: UDP, targetPort: dns}]";

fn list(items: &[String]) -> String {
    format!("apiVersion: v1\nkind: List\nitems:{}\n", items.concat())
}

fn rows(yaml: &str, cfg: &NorthboundConfig) -> BTreeMap<String, LbRow> {
    plan(&model(yaml), cfg)
        .into_iter()
        .map(|r| (r.name.clone(), r))
        .collect()
}

fn m(pairs: &[(&str, &str)]) -> StrMap {
    pairs.iter().copied().collect()
}

#[test]
fn cluster_rows_one_per_protocol_with_ready_backends_of_the_vips_family() {
    let y = list(&[
        NODES.into(),
        svc("", "Cluster", PORTS),
        slice(
            "IPv4",
            &[
                ("10.244.2.7", "node-b", true, true, false),
                ("10.244.1.5", "node-a", true, true, false),
                ("10.244.1.6", "node-a", false, false, false),
            ],
        ),
        slice("IPv6", &[("fd00:244::5", "node-a", true, true, false)]),
    ]);
    let r = rows(&y, &NorthboundConfig::default());
    assert_eq!(
        r.keys().collect::<Vec<_>>(),
        ["vipflow/shop/web/tcp", "vipflow/shop/web/udp"]
    );
    let tcp = &r["vipflow/shop/web/tcp"];
    // Sorted backends, the targetPort resolved by name, not-ready left out, IPv6 in brackets.
    assert_eq!(
        tcp.vips,
        m(&[
            ("172.18.0.100:80", "10.244.1.5:8080,10.244.2.7:8080"),
            ("[fd00:18::100]:80", "[fd00:244::5]:8080")
        ])
    );
    assert_eq!(
        &r["vipflow/shop/web/udp"].vips["172.18.0.100:53"],
        "10.244.1.5:5353,10.244.2.7:5353"
    );
    assert_eq!(tcp.options, m(&[("reject", "true")]));
    assert_eq!(
        tcp.external_ids,
        m(&[
            (MANAGED_KEY, "true"),
            (OWNER_KEY, "shop/web"),
            (SCOPE_KEY, "cluster")
        ])
    );
    assert_eq!(tcp.key.protocol, Protocol::Tcp);
    assert!(tcp.ip_port_mappings.is_empty());
}

#[test]
fn serving_terminating_endpoints_stand_in_when_none_is_ready_and_none_means_reject() {
    let y = list(&[
        svc("", "Cluster", PORTS),
        slice(
            "IPv4",
            &[
                ("10.244.1.5", "node-a", false, true, true),
                ("10.244.1.6", "node-a", false, false, true),
            ],
        ),
    ]);
    let r = rows(&y, &NorthboundConfig::default());
    assert_eq!(
        &r["vipflow/shop/web/tcp"].vips["172.18.0.100:80"], "10.244.1.5:8080",
        "serving while terminating, as kube-proxy"
    );
    let y = list(&[
        svc("", "Cluster", PORTS),
        slice("IPv4", &[("10.244.1.6", "node-a", false, false, true)]),
    ]);
    let r = rows(&y, &NorthboundConfig::default());
    assert_eq!(
        &r["vipflow/shop/web/tcp"].vips["172.18.0.100:80"], "",
        "no backend: empty, and reject=true resets"
    );
    assert_eq!(&r["vipflow/shop/web/tcp"].options["reject"], "true");
}

#[test]
fn etp_local_gives_node_rows_on_routers_with_only_local_endpoints_and_a_switch_row_with_all() {
    let y = list(&[
        NODES.into(),
        svc("", "Local", PORTS),
        slice(
            "IPv4",
            &[
                ("10.244.1.5", "node-a", true, true, false),
                ("10.244.3.9", "node-c", true, true, false),
            ],
        ),
    ]);
    let cfg = NorthboundConfig {
        node_router: Some("GR_{node}".into()),
        node_switch: Some("{node}".into()),
        switches: vec!["join".into()],
        lb_group: Some("clusterLBGroup".into()),
        routers: vec!["lr0".into()],
        ..Default::default()
    };
    let r = rows(&y, &cfg);
    assert_eq!(
        r.keys().collect::<Vec<_>>(),
        [
            "vipflow/shop/web/tcp/node-a",
            "vipflow/shop/web/tcp/node-b",
            "vipflow/shop/web/tcp/switches",
            "vipflow/shop/web/udp/node-a",
            "vipflow/shop/web/udp/node-b",
            "vipflow/shop/web/udp/switches",
        ],
        "no cluster row for a Local Service"
    );
    let a = &r["vipflow/shop/web/tcp/node-a"];
    let b = &r["vipflow/shop/web/tcp/node-b"];
    assert_eq!(&a.vips["172.18.0.100:80"], "10.244.1.5:8080");
    assert_eq!(&b.vips["172.18.0.100:80"], "");
    assert_eq!(
        a.options,
        m(&[
            ("neighbor_responder", "none"),
            ("reject", "true"),
            ("skip_snat", "true")
        ])
    );
    assert_eq!(a.key.scope, Scope::Node("node-a".into()));
    assert_eq!(&a.external_ids[SCOPE_KEY], "node/node-a");
    // The node's gateway router only: its pods' traffic must not be limited to local endpoints.
    assert_eq!(
        a.attach,
        Attach {
            routers: BTreeSet::from(["GR_node-a".to_string()]),
            ..Attach::default()
        }
    );
    // Pod traffic: every endpoint (a remote one too), on every node switch (through vipflow's
    // switches group) and the configured ones, and on no router.
    let sw = &r["vipflow/shop/web/tcp/switches"];
    assert_eq!(sw.key.scope, Scope::Switches);
    assert_eq!(
        sw.external_ids,
        m(&[
            (MANAGED_KEY, "true"),
            (OWNER_KEY, "shop/web"),
            (SCOPE_KEY, "switches")
        ])
    );
    assert_eq!(
        &sw.vips["172.18.0.100:80"],
        "10.244.1.5:8080,10.244.3.9:8080"
    );
    assert_eq!(
        sw.attach,
        Attach {
            group: Some(OWN_SWITCHES_GROUP.into()),
            switches: BTreeSet::from(["join".into()]),
            ..Attach::default()
        }
    );
    let nodes = BTreeSet::from(["node-a".to_string(), "node-b".to_string()]);
    let switches_group = own_groups(&cfg, &nodes)
        .into_iter()
        .find(|g| g.name == OWN_SWITCHES_GROUP)
        .expect("the switches group");
    assert_eq!(switches_group.switches, nodes);
    assert!(switches_group.routers.is_empty());
    assert_eq!(
        sw.options,
        m(&[("reject", "true")]),
        "no skip_snat (not node-local), no neighbor_responder (no router)"
    );
}

#[test]
fn etp_local_without_switches_has_no_switch_row_and_without_a_node_router_rows_attach_nowhere() {
    let y = list(&[
        NODES.into(),
        svc("", "Local", PORTS),
        slice("IPv4", &[("10.244.1.5", "node-a", true, true, false)]),
    ]);
    let r = rows(
        &y,
        &NorthboundConfig {
            node_router: Some("GR_{node}".into()),
            ..Default::default()
        },
    );
    assert!(!r.contains_key("vipflow/shop/web/tcp/switches"));
    assert!(r.contains_key("vipflow/shop/web/tcp/node-a"));
    // Switches only: the switch row serves pods; node rows have no router to go to, which the
    // writer reports (a row attached nowhere) rather than putting local-only rows on switches.
    let r = rows(
        &y,
        &NorthboundConfig {
            node_switch: Some("{node}".into()),
            ..Default::default()
        },
    );
    assert!(r["vipflow/shop/web/tcp/node-a"].attach.is_nowhere());
    // Every node's switch, through vipflow's switches group.
    assert_eq!(
        r["vipflow/shop/web/tcp/switches"].attach.group.as_deref(),
        Some(OWN_SWITCHES_GROUP)
    );
    let cfg = NorthboundConfig {
        node_switch: Some("{node}".into()),
        ..Default::default()
    };
    let nodes = BTreeSet::from(["node-a".to_string(), "node-b".to_string()]);
    let g = own_groups(&cfg, &nodes)
        .into_iter()
        .find(|g| g.name == OWN_SWITCHES_GROUP)
        .expect("the switches group");
    assert_eq!(g.switches, nodes);
    assert!(g.routers.is_empty());
}

#[test]
fn cluster_rows_join_vipflows_own_group_when_only_node_templates_say_where_traffic_lands() {
    let y = list(&[
        NODES.into(),
        svc("", "Cluster", PORTS),
        slice("IPv4", &[("10.244.1.5", "node-a", true, true, false)]),
    ]);
    let cfg = NorthboundConfig {
        node_router: Some("GR_{node}".into()),
        ..Default::default()
    };
    assert!(cfg.attaches_cluster_rows());
    let r = rows(&y, &cfg);
    let tcp = &r["vipflow/shop/web/tcp"];
    assert_eq!(tcp.attach.group.as_deref(), Some(OWN_GROUP));
    assert_eq!(&tcp.options["neighbor_responder"], "none");
    let nodes = model(&y).nodes.keys().cloned().collect();
    assert_eq!(
        own_group(&cfg, &nodes),
        Some(GroupPlan {
            name: OWN_GROUP.into(),
            routers: BTreeSet::from(["GR_node-a".into(), "GR_node-b".into()]),
            switches: BTreeSet::new(),
        })
    );
    let both = NorthboundConfig {
        node_switch: Some("{node}".into()),
        switches: vec!["join".into()],
        ..cfg.clone()
    };
    let g = own_group(&both, &nodes).unwrap();
    assert_eq!(
        g.switches,
        BTreeSet::from(["node-a".into(), "node-b".into()])
    );
    let r = rows(&y, &both);
    assert_eq!(
        r["vipflow/shop/web/tcp"].attach,
        Attach {
            group: Some(OWN_GROUP.into()),
            switches: BTreeSet::from(["join".into()]),
            routers: BTreeSet::new(),
        }
    );
    // A configured group is used as it is (OVN-Kubernetes attaches its own everywhere).
    let theirs = NorthboundConfig {
        lb_group: Some("clusterLBGroup".into()),
        ..cfg
    };
    assert_eq!(own_group(&theirs, &nodes), None);
    assert_eq!(
        rows(&y, &theirs)["vipflow/shop/web/tcp"]
            .attach
            .group
            .as_deref(),
        Some("clusterLBGroup")
    );
    // No node template: no own group; nothing configured at all attaches nowhere (refused by
    // the config's validation when Northbound writing is on).
    let none = NorthboundConfig::default();
    assert_eq!(own_group(&none, &nodes), None);
    assert!(!none.attaches_cluster_rows());
    assert!(rows(&y, &none)["vipflow/shop/web/tcp"].attach.is_nowhere());
    assert!(
        NorthboundConfig {
            routers: vec!["lr0".into()],
            ..none
        }
        .attaches_cluster_rows()
    );
}

#[test]
fn scopes_read_back_from_their_external_ids_value() {
    for s in [
        Scope::Cluster,
        Scope::Switches,
        Scope::Node("node-a".into()),
        Scope::Node("switches".into()),
    ] {
        assert_eq!(Scope::parse(&s.to_string()), Some(s));
    }
    assert_eq!(Scope::parse("zone/a"), None);
}

#[test]
fn prefer_local_uses_local_endpoints_else_all_and_no_skip_snat() {
    let ann = ", annotations: {vipflow.io/prefer-local: \"true\"}";
    let y = list(&[
        NODES.into(),
        svc(ann, "Cluster", PORTS),
        slice(
            "IPv4",
            &[
                ("10.244.1.5", "node-a", true, true, false),
                ("10.244.3.9", "node-c", true, true, false),
            ],
        ),
    ]);
    let templates = NorthboundConfig {
        node_router: Some("GR_{node}".into()),
        node_switch: Some("{node}".into()),
        ..Default::default()
    };
    let r = rows(&y, &templates);
    assert_eq!(
        &r["vipflow/shop/web/tcp/node-a"].vips["172.18.0.100:80"],
        "10.244.1.5:8080"
    );
    // Router and switch of the node: both carry only that node's traffic.
    assert_eq!(
        r["vipflow/shop/web/tcp/node-a"].attach,
        Attach {
            group: None,
            switches: BTreeSet::from(["node-a".into()]),
            routers: BTreeSet::from(["GR_node-a".into()]),
        }
    );
    assert_eq!(
        &r["vipflow/shop/web/tcp/node-b"].vips["172.18.0.100:80"],
        "10.244.1.5:8080,10.244.3.9:8080"
    );
    assert!(
        !r["vipflow/shop/web/tcp/node-b"]
            .options
            .contains_key("skip_snat")
    );
    // The flag does the same for every Service.
    let y = list(&[
        NODES.into(),
        svc("", "Cluster", PORTS),
        slice("IPv4", &[("10.244.1.5", "node-a", true, true, false)]),
    ]);
    let r = rows(
        &y,
        &NorthboundConfig {
            prefer_local: true,
            ..templates
        },
    );
    assert!(
        r.contains_key("vipflow/shop/web/tcp/node-a")
            && r.contains_key("vipflow/shop/web/tcp/node-b")
    );
    // No node template: per-node rows would be attached nowhere; one cluster row instead.
    let r = rows(
        &y,
        &NorthboundConfig {
            prefer_local: true,
            lb_group: Some("clusterLBGroup".into()),
            ..Default::default()
        },
    );
    assert_eq!(
        r.keys().collect::<Vec<_>>(),
        ["vipflow/shop/web/tcp", "vipflow/shop/web/udp"]
    );
}

/// The Kube-OVN dialect's prefer-local: one cluster row with `prefer_local_backend` and each
/// backend's address mapped to its Pod's logical switch port as Kube-OVN's controller writes it
/// (`<pod>.<namespace>:<check IP>`, an IPv6 address in brackets), which Kube-OVN's northd
/// reads to find the chassis each backend runs on. A backend with no Pod behind it has no
/// entry, as in Kube-OVN.
#[test]
fn kube_ovn_dialect_is_one_cluster_row_with_prefer_local_backend_and_ip_port_mappings() {
    let targets = |y: String, pods: &[(&str, &str)]| {
        pods.iter().fold(y, |y, (ip, pod)| {
            y.replace(
                &format!("addresses: [\"{ip}\"]"),
                &format!("addresses: [\"{ip}\"]\n    targetRef: {{kind: Pod, name: {pod}, namespace: shop}}"),
            )
        })
    };
    let y = list(&[
        NODES.into(),
        svc("", "Cluster", PORTS),
        targets(
            slice(
                "IPv4",
                &[
                    ("10.244.1.5", "node-a", true, true, false),
                    ("10.244.2.7", "node-b", true, true, false),
                    ("10.244.3.9", "node-b", true, true, false),
                ],
            ),
            &[("10.244.1.5", "web-a"), ("10.244.2.7", "web-b")],
        ),
        targets(
            slice("IPv6", &[("fd00:244::5", "node-a", true, true, false)]),
            &[("fd00:244::5", "web-a")],
        ),
    ]);
    let cfg = NorthboundConfig {
        kube_ovn: true,
        prefer_local: true,
        lb_group: Some("clusterLBGroup".into()),
        ..Default::default()
    };
    let r = rows(&y, &cfg);
    assert_eq!(
        r.keys().collect::<Vec<_>>(),
        ["vipflow/shop/web/tcp", "vipflow/shop/web/udp"],
        "no per-node rows"
    );
    let tcp = &r["vipflow/shop/web/tcp"];
    assert_eq!(
        tcp.options,
        m(&[
            ("neighbor_responder", "none"),
            ("prefer_local_backend", "true"),
            ("reject", "true")
        ])
    );
    assert_eq!(
        tcp.ip_port_mappings,
        m(&[
            ("10.244.1.5", "web-a.shop:0.0.0.0"),
            ("10.244.2.7", "web-b.shop:0.0.0.0"),
            ("[fd00:244::5]", "web-a.shop:0.0.0.0"),
        ])
    );
    assert_eq!(
        &tcp.vips["172.18.0.100:80"],
        "10.244.1.5:8080,10.244.2.7:8080,10.244.3.9:8080"
    );
    assert_eq!(tcp.attach.group.as_deref(), Some("clusterLBGroup"));
    // Without prefer-local the dialect adds nothing.
    let r = rows(
        &y,
        &NorthboundConfig {
            kube_ovn: true,
            ..Default::default()
        },
    );
    assert!(r["vipflow/shop/web/tcp"].ip_port_mappings.is_empty());
    assert!(
        !r["vipflow/shop/web/tcp"]
            .options
            .contains_key("prefer_local_backend")
    );
}

#[test]
fn options_follow_the_attachment_and_config() {
    let y = list(&[svc("", "Cluster", PORTS)]);
    let switches = rows(
        &y,
        &NorthboundConfig {
            switches: vec!["sw0".into()],
            ..Default::default()
        },
    );
    assert!(
        !switches["vipflow/shop/web/tcp"]
            .options
            .contains_key("neighbor_responder"),
        "switch-only: OVN answers no ARP there anyway"
    );
    let routers = rows(
        &y,
        &NorthboundConfig {
            routers: vec!["lr0".into()],
            hairpin_snat_ip: Some("169.254.0.5".into()),
            ..Default::default()
        },
    );
    let o = &routers["vipflow/shop/web/tcp"].options;
    assert_eq!(&o["neighbor_responder"], "none");
    assert_eq!(&o["hairpin_snat_ip"], "169.254.0.5");
}

/// Template rows ([`super::node_template`]).
mod template;
