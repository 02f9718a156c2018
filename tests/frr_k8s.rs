//! frr-k8s mode against the Kubernetes API test server (real HTTP, an unmodified
//! kube::Client), with a real ovs-vswitchd for the node's bridge: the agent finds frr-k8s on
//! its node (its `FRRNodeState`), writes the `FRRConfiguration`s the plan makes (golden, the
//! same file the core's test checks), writes a pool's shared object once per Cluster VIP
//! change however many nodes advertise it, and keeps a node's own object for its Local VIPs
//! only.

use serde_json::{Value, json};
use std::time::Duration;
use testkit::bgp_objects::BgpObjects;
use testkit::kube_server::KubeServer;
use testkit::{Sandbox, eventually_async};
use vipflow::agent;

mod common;
use vipflow::config::Config;

const NS: &str = "frr-k8s-system";
const API: &str = "frrk8s.metallb.io/v1beta1";

/// The objects of the core's golden test (`core/src/frrk8s/tests.rs`).
const OBJECTS: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {kubernetes.io/hostname: n1}}
status: {addresses: [{type: InternalIP, address: 192.168.10.11}]}
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {kubernetes.io/hostname: n2, rack: r2}}
---
apiVersion: v1
kind: Node
metadata: {name: n3, labels: {node.kubernetes.io/exclude-from-external-load-balancers: ''}}
---
apiVersion: vipflow.io/v1alpha1
kind: BGPPeer
metadata: {name: tor}
spec: {myASN: 64513, peerASN: 64512, peerAddress: 10.9.0.1, bfdProfile: fast, holdTime: 9s}
---
apiVersion: vipflow.io/v1alpha1
kind: BGPPeer
metadata: {name: r2}
spec: {myASN: 64513, peerASN: 64514, peerAddress: 10.8.0.1, disableMP: true, nodeSelectors: [{matchLabels: {rack: r2}}]}
---
apiVersion: vipflow.io/v1alpha1
kind: BFDProfile
metadata: {name: fast}
spec: {receiveInterval: 100, transmitInterval: 100, detectMultiplier: 3}
---
apiVersion: vipflow.io/v1alpha1
kind: VipPool
metadata: {name: blue}
spec: {addresses: [198.51.100.0/24, '2001:db8:100::/64']}
---
apiVersion: vipflow.io/v1alpha1
kind: BGPAdvertisement
metadata: {name: all}
spec: {communities: ['64512:7']}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {externalIPs: [198.51.100.10, '2001:db8:100::10'], ports: [{port: 80, protocol: TCP}]}
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: shop}
spec: {externalIPs: [198.51.100.11], externalTrafficPolicy: Local, ports: [{port: 443, protocol: TCP, targetPort: 8443}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: api-1, namespace: shop, labels: {kubernetes.io/service-name: api}}
addressType: IPv4
ports: [{port: 8443, protocol: TCP}]
endpoints: [{addresses: [10.0.0.9], nodeName: n1, conditions: {ready: true}}]
"#;

/// The API server serves vipflow's kinds and frr-k8s's, and frr-k8s runs on `nodes`.
fn serve(kube: &KubeServer, nodes: &[&str]) {
    BgpObjects::serve_kinds(kube);
    kube.register_resource(API, "frrconfigurations", "FRRConfiguration", true);
    kube.enable_crd(API, "frrconfigurations");
    kube.register_resource(API, "frrnodestates", "FRRNodeState", false);
    kube.enable_crd(API, "frrnodestates");
    kube.register_resource(API, "bgpsessionstates", "BGPSessionState", true);
    kube.enable_crd(API, "bgpsessionstates");
    for n in nodes {
        kube.apply(json!({"apiVersion": API, "kind": "FRRNodeState", "metadata": {"name": n}}));
    }
}

fn config(sb: &Sandbox, node: &str) -> Config {
    common::cluster_config(sb, node, None)
}

/// vipflow's FRRConfigurations on the server, by name, as written (the server's own metadata
/// taken off).
fn written(kube: &KubeServer) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = kube
        .list(API, "FRRConfiguration")
        .into_iter()
        .map(|mut o| {
            let m = &o["metadata"];
            let kept =
                json!({"name": m["name"], "namespace": m["namespace"], "labels": m["labels"]});
            o["metadata"] = kept;
            if let Some(map) = o.as_object_mut() {
                map.remove("status");
            }
            (
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                o,
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn prefixes(o: &Value) -> Vec<String> {
    o["spec"]["bgp"]["routers"][0]["prefixes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| p.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Writes (applies, creates, updates, deletes) of FRRConfigurations since the log was cleared,
/// by object name.
fn writes(kube: &KubeServer) -> Vec<String> {
    kube.request_log()
        .into_iter()
        .filter(|r| r.resource == "frrconfigurations")
        .filter(|r| matches!(r.verb.as_str(), "create" | "update" | "patch" | "delete"))
        .map(|r| r.path.rsplit('/').next().unwrap_or_default().to_string())
        .collect()
}

fn service(name: &str, vip: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"externalIPs": [vip], "ports": [{"port": 80, "protocol": "TCP"}]}
    })
}

/// [`OBJECTS`] on an API server where frr-k8s runs on n1, and n1's agent once it wrote the
/// shared objects and its own.
async fn n1_writing() -> (KubeServer, Sandbox, agent::Cluster) {
    let kube = KubeServer::start().await;
    serve(&kube, &["n1"]);
    kube.apply_yaml(OBJECTS);
    let sb = Sandbox::openflow_only();
    let cluster = agent::start_cluster(
        config(&sb, "n1"),
        common::cluster_options(&kube, "agent-n1"),
    )
    .await
    .expect("the agent starts");
    eventually_async("the shared objects and n1's own", 20, || {
        written(&kube).len() == 3
    })
    .await;
    (kube, sb, cluster)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_writes_the_planned_objects_and_a_node_object_only_for_local_vips() {
    let (kube, _sb, cluster) = n1_writing().await;
    assert!(
        written(&kube)
            .iter()
            .all(|(_, o)| o["metadata"]["namespace"] == NS),
        "in frr-k8s's namespace"
    );
    // What the server holds is the core's golden file, object for object.
    let text: String = written(&kube)
        .iter()
        .map(|(_, o)| {
            let typed: vipflow::frrk8s::objects::FrrConfiguration =
                serde_json::from_value(o.clone()).expect("an FRRConfiguration");
            serde_yaml_ng::to_string(&typed).expect("YAML")
        })
        .collect::<Vec<_>>()
        .join("---\n");
    let golden = std::fs::read_to_string(format!(
        "{}/tests/fixtures/frrk8s/objects.golden.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("the golden file");
    assert_eq!(text, golden);

    // A Cluster VIP: each shared object (two groups: n1's peers, n2's) written once; n1's own
    // object untouched.
    kube.clear_request_log();
    kube.apply(service("web2", "198.51.100.12"));
    eventually_async("the new VIP in both shared objects", 20, || {
        let w = written(&kube);
        w.iter()
            .filter(|(n, _)| n.starts_with("vipflow-blue-"))
            .all(|(_, o)| prefixes(o).contains(&"198.51.100.12/32".to_string()))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let w = writes(&kube);
    assert_eq!(w.len(), 2, "one write per shared object: {w:?}");
    assert!(w.iter().all(|n| n.starts_with("vipflow-blue-")), "{w:?}");

    // What frr-k8s says of n1 is n1's status: its sessions (not another node's), and a
    // configuration it could not merge.
    let session = |node: &str, peer: &str, bgp: &str, bfd: &str| {
        json!({
            "apiVersion": API, "kind": "BGPSessionState",
            "metadata": {"name": format!("{node}-{}", peer.replace('.', "")), "namespace": NS,
                         "labels": {"frrk8s.metallb.io/node": node, "frrk8s.metallb.io/peer": peer}},
            "status": {"bgpStatus": bgp, "bfdStatus": bfd, "node": node, "peer": peer}
        })
    };
    kube.apply(session("n1", "10.9.0.1", "Established", "Up"));
    kube.apply(session("n2", "10.8.0.1", "Active", "N/A"));
    let doc = |c: &agent::Cluster| c.running.status_doc.borrow().clone().and_then(|d| d.bgp);
    eventually_async("n1's session in its status", 20, || {
        doc(&cluster).is_some_and(|b| {
            b.sessions.len() == 1
                && b.sessions[0].peer.to_string() == "10.9.0.1"
                && b.sessions[0].state == "Established"
                && b.sessions[0].bfd.as_deref() == Some("up")
        })
    })
    .await;
    kube.apply(json!({
        "apiVersion": API, "kind": "FRRNodeState", "metadata": {"name": "n1"},
        "status": {"lastConversionResult": "failed: multiple asns specified for 10.9.0.1", "lastReloadResult": "success"}
    }));
    eventually_async("frr-k8s's failure in n1's status", 20, || {
        doc(&cluster).is_some_and(|b| {
            b.last_error
                .as_deref()
                .is_some_and(|e| e.contains("cannot merge") && e.contains("multiple asns"))
        })
    })
    .await;
    kube.apply(json!({
        "apiVersion": API, "kind": "FRRNodeState", "metadata": {"name": "n1"},
        "status": {"lastConversionResult": "success", "lastReloadResult": "success"}
    }));
    eventually_async("the failure gone", 20, || {
        doc(&cluster).is_some_and(|b| b.last_error.is_none())
    })
    .await;

    // The Local VIP's Service goes: n1's object goes with it, the shared ones stay.
    kube.clear_request_log();
    kube.delete("v1", "Service", "shop", "api");
    eventually_async("n1's object deleted", 20, || {
        !written(&kube).iter().any(|(n, _)| n == "vipflow-node-n1")
    })
    .await;
    assert_eq!(written(&kube).len(), 2);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(writes(&kube), vec!["vipflow-node-n1".to_string()]);
    // The status says what this node advertises through frr-k8s.
    let frr = cluster.running.frr_status.clone().expect("an FRR status");
    assert!(
        frr.borrow().originated.is_empty(),
        "{:?}",
        frr.borrow().originated
    );
    cluster.shutdown().await;
}

/// vipflow's objects deleted by someone else (a user, a GitOps tool pruning what it does not
/// know) come back as they were, each written once, with nothing in the plan changed: a shared
/// object by the elected agent, the node's own by its agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_someone_else_deletes_are_written_again() {
    let (kube, _sb, cluster) = n1_writing().await;
    // The agent done with its start: no write for a second.
    let mut quiet = 0;
    while quiet < 10 {
        kube.clear_request_log();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let w = writes(&kube);
        if !w.is_empty() {
            println!("still starting: wrote {w:?}");
        }
        quiet = if w.is_empty() { quiet + 1 } else { 0 };
    }
    let before = written(&kube);
    let shared = before
        .iter()
        .map(|(n, _)| n.clone())
        .find(|n| n.starts_with("vipflow-blue-"))
        .expect("a shared object");
    for name in [shared.as_str(), "vipflow-node-n1"] {
        kube.clear_request_log();
        let started = std::time::Instant::now();
        assert!(
            kube.delete(API, "FRRConfiguration", NS, name).is_some(),
            "{name} deleted"
        );
        eventually_async(&format!("{name} written again"), 20, || {
            written(&kube) == before
        })
        .await;
        let took = started.elapsed();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let w = writes(&kube);
        println!("{name} deleted: written again after {took:?}; writes {w:?}");
        // The agent's one write (the test deletes through the server's control side).
        assert_eq!(w, vec![name.to_string()], "{w:?}");
    }
    assert_eq!(written(&kube), before);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_vip_change_is_one_write_at_a_hundred_nodes() {
    let kube = KubeServer::start().await;
    serve(&kube, &["node-000"]);
    let mut yaml = String::new();
    for i in 0..100 {
        yaml.push_str(&format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: node-{i:03}, labels: {{kubernetes.io/hostname: node-{i:03}}}}}\n---\n"
        ));
    }
    yaml.push_str(
        "apiVersion: vipflow.io/v1alpha1\nkind: BGPPeer\nmetadata: {name: tor}\nspec: {myASN: 64513, peerASN: 64512, peerAddress: 10.9.0.1}\n---\n\
         apiVersion: vipflow.io/v1alpha1\nkind: VipPool\nmetadata: {name: blue}\nspec: {addresses: [198.51.100.0/24]}\n---\n\
         apiVersion: vipflow.io/v1alpha1\nkind: BGPAdvertisement\nmetadata: {name: all}\nspec: {}\n",
    );
    kube.apply_yaml(&yaml);
    kube.apply(service("s0", "198.51.100.10"));
    let sb = Sandbox::openflow_only();
    let cluster = agent::start_cluster(
        config(&sb, "node-000"),
        common::cluster_options(&kube, "agent-0"),
    )
    .await
    .expect("the agent starts");
    eventually_async("the pool's shared object", 20, || written(&kube).len() == 1).await;
    let (_, shared) = written(&kube).remove(0);
    let selected = shared["spec"]["nodeSelector"]["matchExpressions"][0]["values"]
        .as_array()
        .map_or(0, |v| v.len());
    assert_eq!(selected, 100, "every node in one object");
    for i in 1..=10 {
        kube.clear_request_log();
        let vip = format!("198.51.100.{}", 10 + i);
        kube.apply(service(&format!("s{i}"), &vip));
        let want = format!("{vip}/32");
        eventually_async("the VIP in the shared object", 20, || {
            written(&kube)
                .first()
                .is_some_and(|(_, o)| prefixes(o).contains(&want))
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let w = writes(&kube);
        println!("VIP {i}: {} write(s) at 100 nodes: {w:?}", w.len());
        assert_eq!(w.len(), 1, "{w:?}");
    }
    assert_eq!(written(&kube).len(), 1, "no per-node object: no Local VIP");
    cluster.shutdown().await;
}

/// The routers' view: each prefix they hold from the node, with its communities and large
/// communities.
fn routes(router: &testkit::frr::Frr) -> std::collections::BTreeMap<String, (String, String)> {
    let mut out = std::collections::BTreeMap::new();
    for family in ["ipv4", "ipv6"] {
        let Ok(text) = router.vtysh(&[&format!("show bgp {family} unicast json")]) else {
            continue;
        };
        let v: Value = serde_json::from_str(&text).unwrap_or_default();
        for prefix in v["routes"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
        {
            let held = router.route_communities(family, prefix).unwrap_or_default();
            out.insert(prefix.clone(), held);
        }
    }
    out
}

/// Routers a (every family) and b (IPv4 only) peering with a node whose FRR is given
/// `config` and `networks`; returns what each router holds once it holds `want_a` and
/// `want_b` prefixes (and nothing more arrived for a moment).
async fn routers_see(
    tag: &str,
    config: &str,
    networks: &std::collections::BTreeSet<ipnet::IpNet>,
    want: (usize, usize),
) -> Option<[std::collections::BTreeMap<String, (String, String)>; 2]> {
    use testkit::frr::{Frr, link};
    let router = |asn: u32, id: &str, node: &str| {
        format!(
            "frr defaults datacenter\n!\nrouter bgp {asn}\n bgp router-id {id}\n no bgp ebgp-requires-policy\n no bgp default ipv4-unicast\n neighbor {node} remote-as 64513\n address-family ipv4 unicast\n  neighbor {node} activate\n exit-address-family\n address-family ipv6 unicast\n  neighbor {node} activate\n exit-address-family\nexit\n"
        )
    };
    let a = Frr::start(
        &format!("vf-ka-{tag}"),
        &router(64512, "10.9.0.1", "10.9.0.2"),
    )?;
    let b = Frr::start(
        &format!("vf-kb-{tag}"),
        &router(64514, "10.8.0.1", "10.8.0.2"),
    )
    .expect("router b");
    let node = Frr::start(&format!("vf-kn-{tag}"), "").expect("the node's FRR");
    link(&a, "10.9.0.1/24", &node, "10.9.0.2/24", &format!("{tag}a"));
    link(&b, "10.8.0.1/24", &node, "10.8.0.2/24", &format!("{tag}b"));
    let vtysh = vipflow::reconcile::frr::Vtysh::new(node.path());
    let batch = vipflow::bgp::frr_config::config_batch(None, Some(config)).expect("a batch");
    vtysh
        .apply(&batch)
        .await
        .unwrap_or_else(|e| panic!("FRR refused a line of\n{batch}\n{e}"));
    let asn = vipflow::bgp::frr_config::bgp_asn(config).expect("an AS");
    vtysh
        .apply_bgpd(
            &vipflow::plan::bgp::frr_batch(asn, &Default::default(), networks).expect("networks"),
        )
        .await
        .expect("FRR takes the networks");
    let start = std::time::Instant::now();
    loop {
        let seen = [routes(&a), routes(&b)];
        if (seen[0].len(), seen[1].len()) == want {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let again = [routes(&a), routes(&b)];
            if again == seen {
                return Some(seen);
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the routers never held {want:?} routes: {seen:?}\n{}",
            node.vtysh(&["show running-config"]).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The objects frr-k8s mode writes for a node, merged and rendered by vipflow's own FRR
/// translation and loaded into a real FRR, give two routers exactly what the direct mode's
/// configuration gives them: the same prefixes to each (an advertisement naming its peer,
/// one router taking IPv4 only) with the same communities.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_objects_rendered_into_frr_give_the_routers_what_the_direct_mode_gives() {
    let objects = vipflow::decode::parse(
        "apiVersion: v1\nkind: List\nitems:\n\
         - {apiVersion: v1, kind: Node, metadata: {name: n1, labels: {kubernetes.io/hostname: n1, rack: r2}}, status: {addresses: [{type: InternalIP, address: 10.9.0.2}]}}\n\
         - {apiVersion: v1, kind: Node, metadata: {name: n2, labels: {kubernetes.io/hostname: n2}}}\n\
         - {apiVersion: vipflow.io/v1alpha1, kind: BGPPeer, metadata: {name: tor}, spec: {myASN: 64513, peerASN: 64512, peerAddress: 10.9.0.1}}\n\
         - {apiVersion: vipflow.io/v1alpha1, kind: BGPPeer, metadata: {name: r2}, spec: {myASN: 64513, peerASN: 64514, peerAddress: 10.8.0.1, disableMP: true, nodeSelectors: [{matchLabels: {rack: r2}}]}}\n\
         - {apiVersion: vipflow.io/v1alpha1, kind: VipPool, metadata: {name: blue}, spec: {addresses: [198.51.100.0/24, '2001:db8:100::/64']}}\n\
         - {apiVersion: vipflow.io/v1alpha1, kind: VipPool, metadata: {name: green}, spec: {addresses: [203.0.113.0/24]}}\n\
         - {apiVersion: vipflow.io/v1alpha1, kind: BGPAdvertisement, metadata: {name: tagged}, spec: {ipAddressPools: [blue], communities: ['64512:7', 'large:64512:1:2'], peers: [tor]}}\n\
         - {apiVersion: vipflow.io/v1alpha1, kind: BGPAdvertisement, metadata: {name: plain}, spec: {ipAddressPools: [green]}}\n\
         - {apiVersion: v1, kind: Service, metadata: {name: web, namespace: s}, spec: {externalIPs: [198.51.100.20, '2001:db8:100::20'], ports: [{port: 80, protocol: TCP}]}}\n\
         - {apiVersion: v1, kind: Service, metadata: {name: green, namespace: s}, spec: {externalIPs: [203.0.113.20], ports: [{port: 80, protocol: TCP}]}}\n\
         - {apiVersion: v1, kind: Service, metadata: {name: api, namespace: s}, spec: {externalIPs: [203.0.113.21], externalTrafficPolicy: Local, ports: [{port: 80, protocol: TCP}]}}\n\
         - {apiVersion: discovery.k8s.io/v1, kind: EndpointSlice, metadata: {name: api-1, namespace: s, labels: {kubernetes.io/service-name: api}}, addressType: IPv4, ports: [{port: 80, protocol: TCP}], endpoints: [{addresses: [10.0.0.9], nodeName: n1, conditions: {ready: true}}]}\n",
    )
    .expect("objects");
    assert!(objects.problems.is_empty(), "{:?}", objects.problems);
    let o = &objects.objects;
    let mut planner = vipflow::plan::planner::Planner::new(
        vipflow::model::ModelOptions::default(),
        &[],
        0x7f1f,
        None,
    )
    .advertising_as("n1");
    planner.write_frr_k8s_pools(Some(NS));
    let plans = planner.update(o);
    let bgp = plans.bgp.expect("BGP");
    // The direct mode: the node's configuration and its networks.
    let (direct, problems) = vipflow::bgp::frr_config::for_node(o, "n1");
    assert!(problems.is_empty(), "{problems:?}");
    let direct = direct.expect("a configuration");
    // frr-k8s mode: the shared objects and n1's own, merged and rendered.
    let (own, problems) = vipflow::frrk8s::shared::local_configuration(o, "n1", &bgp.local, NS);
    assert!(problems.is_empty(), "{problems:?}");
    let mut written: Vec<_> = plans
        .frr_k8s_pools
        .expect("shared objects")
        .values()
        .cloned()
        .collect();
    written.extend(own);
    let labels = o.nodes[0].metadata.labels.clone().unwrap_or_default();
    let rendered = vipflow::frrk8s::render::render(&written, &labels)
        .expect("renders")
        .expect("a configuration");
    assert_eq!(rendered.networks, *bgp.prefixes);
    let tag = format!("{}", std::process::id() % 10_000);
    // a: web's two routes (tagged), green's two; b: green's two (IPv4, blue not to b).
    let want = (4, 2);
    let Some(direct_seen) = routers_see(&format!("d{tag}"), &direct, &bgp.prefixes, want).await
    else {
        eprintln!("SKIPPED: needs root, network namespaces and FRR");
        return;
    };
    let frr_k8s_seen = routers_see(
        &format!("k{tag}"),
        &rendered.config,
        &rendered.networks,
        want,
    )
    .await
    .expect("FRR runs");
    println!("direct mode: {direct_seen:?}\nfrr-k8s mode: {frr_k8s_seen:?}");
    assert_eq!(frr_k8s_seen, direct_seen);
    let tagged = ("64512:7".to_string(), "64512:1:2".to_string());
    assert_eq!(direct_seen[0].get("198.51.100.20/32"), Some(&tagged));
    assert_eq!(direct_seen[0].get("2001:db8:100::20/128"), Some(&tagged));
    assert_eq!(
        direct_seen[1].keys().cloned().collect::<Vec<_>>(),
        ["203.0.113.20/32", "203.0.113.21/32"]
    );
}

/// Two agents: only the one that leads writes the shared objects (the other writes none, nor
/// plans them); when it stops, the other takes over and writes the next change, and n1's own
/// object stays n1's agent's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_writes_the_shared_objects_and_the_next_leader_takes_over() {
    let kube = KubeServer::start().await;
    serve(&kube, &["n1", "n2"]);
    kube.apply_yaml(OBJECTS);
    let (sa, sb) = (Sandbox::openflow_only(), Sandbox::openflow_only());
    let a = agent::start_cluster(
        config(&sa, "n1"),
        common::cluster_options(&kube, "agent-n1"),
    )
    .await
    .expect("n1's agent");
    let b = agent::start_cluster(
        config(&sb, "n2"),
        common::cluster_options(&kube, "agent-n2"),
    )
    .await
    .expect("n2's agent");
    eventually_async("the shared objects and n1's own", 20, || {
        written(&kube).len() == 3
    })
    .await;
    let holder = || {
        kube.leases()
            .first()
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(String::from))
    };
    eventually_async("a leader", 20, || holder().is_some()).await;
    let (leader, other) = if holder().as_deref() == Some("agent-n1") {
        (a, b)
    } else {
        (b, a)
    };
    let writes_of = |c: &agent::Cluster| c.metrics.frr_k8s_writes.get();
    assert_eq!(
        writes_of(&leader),
        2,
        "the leader wrote both shared objects"
    );
    assert_eq!(writes_of(&other), 0, "the other wrote none");
    let before = written(&kube);
    leader.shutdown().await;
    kube.apply(service("web2", "198.51.100.12"));
    eventually_async("the new leader writes the change", 30, || {
        written(&kube)
            .iter()
            .filter(|(n, _)| n.starts_with("vipflow-blue-"))
            .all(|(_, o)| prefixes(o).contains(&"198.51.100.12/32".to_string()))
    })
    .await;
    assert_eq!(
        writes_of(&other),
        2,
        "it rewrote only what changed: the two shared objects"
    );
    let after = written(&kube);
    assert_eq!(
        after.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        before.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        "the same objects"
    );
    other.shutdown().await;
}

/// `vipflow plan --frr-k8s on` prints the objects the agents write (the golden file, the node's
/// own with every Local VIP the plan wants), as the running agents write them.
#[test]
fn plan_prints_the_objects_the_agents_write() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("objects.yaml");
    std::fs::write(&path, OBJECTS).expect("written");
    let path = path.to_str().expect("a path");
    let text = common::vipflow_ok([
        "plan",
        "--frr-k8s",
        "on",
        "--node-name",
        "n1",
        "--objects",
        path,
    ]);
    let objects: String = text
        .lines()
        .skip_while(|l| !l.starts_with("# bgp through frr-k8s: the shared"))
        .filter_map(|l| l.strip_prefix("#   "))
        .take_while(|l| {
            !l.contains(": advertised")
                && !l.contains(": no ready")
                && !l.contains("node selectors")
        })
        .collect::<Vec<_>>()
        .join("\n");
    let golden = std::fs::read_to_string(format!(
        "{}/tests/fixtures/frrk8s/objects.golden.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("the golden file");
    assert_eq!(
        objects.trim_start_matches("---\n"),
        golden.trim_end(),
        "{text}"
    );
    assert!(text.contains("#   198.51.100.11: advertised"), "{text}");
}

/// With `--frr-k8s on`, `vipflow verify` and `vipflow agent --once` leave the node's FRR alone,
/// as the agent does outside cluster mode (frr-k8s's FRR advertises what the objects say, and
/// only the agents in cluster mode write those): `verify` says FRR is not compared and finds
/// the bridge in sync after `--once`, and FRR's running configuration is what it was. The
/// same commands without the flag (the direct mode) do find FRR's drift.
#[test]
fn verify_and_once_leave_frr_k8s_s_frr_alone() {
    let Some(frr) = testkit::frr::Frr::start(
        &format!("vf-k1-{}", std::process::id()),
        "router bgp 64513\n bgp router-id 10.9.0.2\n address-family ipv4 unicast\n  network 203.0.113.9/32\n exit-address-family\nexit\n",
    ) else {
        return;
    };
    let sb = Sandbox::openflow_only();
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("objects.yaml");
    std::fs::write(&path, OBJECTS).expect("written");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "--node-name".to_string(),
            "n1".into(),
            "--objects".into(),
            path.display().to_string(),
            "--ovs-rundir".into(),
            sb.path().display().to_string(),
            "--frr-socket-dir".into(),
            frr.path().display().to_string(),
        ];
        args.splice(0..0, extra.iter().map(|s| s.to_string()));
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_vipflow"))
            .args(&args)
            .output()
            .expect("vipflow runs");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let config = || {
        frr.vtysh(&["show running-config"])
            .expect("FRR's configuration")
    };
    let before = config();
    let (ok, once) = run(&["agent", "--once", "--frr-k8s", "on"]);
    assert!(ok, "{once}");
    assert!(once.contains("frr-k8s mode"), "{once}");
    let (ok, verify) = run(&["verify", "--frr-k8s", "on"]);
    assert!(ok, "{verify}");
    assert!(verify.contains("frr: not compared"), "{verify}");
    assert!(verify.contains("br-ex: in sync"), "{verify}");
    assert!(!verify.contains("frr: drift"), "{verify}");
    assert_eq!(config(), before, "FRR's running configuration");

    let (ok, direct) = run(&["verify", "--frr-k8s", "off"]);
    assert!(!ok, "{direct}");
    assert!(direct.contains("- network 203.0.113.9/32"), "{direct}");
}
