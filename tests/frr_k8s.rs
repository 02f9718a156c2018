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
use vipflow::agent::{self, ClusterOptions};
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
    for n in nodes {
        kube.apply(json!({"apiVersion": API, "kind": "FRRNodeState", "metadata": {"name": n}}));
    }
}

fn config(sb: &Sandbox, node: &str) -> Config {
    let mut c = Config {
        node_name: node.into(),
        ovs_rundir: sb.path().to_path_buf(),
        ..Config::default()
    };
    c.lease.namespace = Some("default".into());
    c.lease.duration_seconds = 2;
    c
}

fn cluster_options(kube: &KubeServer, identity: &str) -> ClusterOptions {
    ClusterOptions {
        kubeconfig: Some(kube.kubeconfig_path().to_path_buf()),
        identity: identity.into(),
        namespace: "default".into(),
        events_per_second: 50.0,
        events_burst: 50,
        nb_backoff: None,
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_writes_the_planned_objects_and_a_node_object_only_for_local_vips() {
    let kube = KubeServer::start().await;
    serve(&kube, &["n1"]);
    kube.apply_yaml(OBJECTS);
    let sb = Sandbox::openflow_only();
    let cluster = agent::start_cluster(config(&sb, "n1"), cluster_options(&kube, "agent-n1"))
        .await
        .expect("the agent starts");
    eventually_async("the shared objects and n1's own", 20, || {
        written(&kube).len() == 3
    })
    .await;
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
    let cluster = agent::start_cluster(config(&sb, "node-000"), cluster_options(&kube, "agent-0"))
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
