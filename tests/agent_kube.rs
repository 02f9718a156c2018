//! The agent in cluster mode, end to end: the Kubernetes API test server (real HTTP, list and
//! watch, an unmodified kube::Client) on one side, a real ovs-vswitchd and OVN NB on the other.

use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use testkit::{Sandbox, eventually_async, our_cookie};

mod common;
use testkit::kube_server::KubeServer;
use vipflow::agent::{self, ClusterOptions};
use vipflow::config::Config;

const NODES: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: node-a}
status:
  addresses: [{type: InternalIP, address: 192.168.10.11}, {type: Hostname, address: node-a}]
---
apiVersion: v1
kind: Node
metadata: {name: node-b}
status:
  addresses: [{type: InternalIP, address: 192.168.10.12}]
"#;

fn service(ingress: Option<&str>) -> Value {
    let mut s = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "shop", "creationTimestamp": "2026-01-10T08:00:00Z"},
        "spec": {
            "type": "LoadBalancer", "clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20"],
            "externalTrafficPolicy": "Cluster",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]
        },
        "status": {"loadBalancer": {}}
    });
    if let Some(ip) = ingress {
        s["status"]["loadBalancer"] = json!({"ingress": [{"ip": ip, "ipMode": "VIP"}]});
    }
    s
}

fn slice(endpoints: &[(&str, &str)]) -> Value {
    let eps: Vec<Value> = endpoints
        .iter()
        .map(|(ip, node)| json!({"addresses": [ip], "nodeName": node, "conditions": {"ready": true, "serving": true, "terminating": false}}))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-abc12", "namespace": "shop", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": eps
    })
}

fn flows(sb: &Sandbox) -> Vec<String> {
    let ours = our_cookie();
    sb.ofctl(&["--no-stats", "dump-flows", "br-ex"])
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| l.starts_with(&ours))
        .collect()
}

/// vips of our Load_Balancer rows: name -> vips map as ovn-nbctl prints it.
fn lb_vips(sb: &Sandbox) -> Vec<(String, String)> {
    let out = sb.nbctl(&[
        "--format=csv",
        "--no-headings",
        "--columns=name,vips",
        "find",
        "Load_Balancer",
        "external_ids:\"vipflow.io/owner\"!=\"\"",
    ]);
    out.lines()
        .filter_map(|l| {
            l.split_once(',').map(|(a, b)| {
                (
                    a.trim_matches('"').to_string(),
                    b.trim_matches('"').to_string(),
                )
            })
        })
        .collect()
}

use common::{cluster_config as config, cluster_options};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_lifecycle_reaches_flows_and_rows_and_survives_410() {
    let kube = KubeServer::start().await;
    kube.apply_yaml(NODES);
    kube.apply(slice(&[("10.244.1.5", "node-a")]));
    kube.apply(service(None));
    let sb = Sandbox::start();
    let opts = cluster_options(&kube, "agent-a");
    let cluster = agent::start_cluster(config(&sb, "node-a", Some(&sb)), opts)
        .await
        .unwrap();
    let mut ready = cluster.running.ready.clone();
    tokio::time::timeout(Duration::from_secs(20), ready.wait_for(|r| *r))
        .await
        .expect("ready")
        .unwrap();
    // A LoadBalancer without an ingress IP yet: no VIP anywhere.
    assert!(flows(&sb).is_empty());

    // The load balancer implementation sets the ingress IP: flows and the row appear.
    kube.apply(service(Some("172.18.0.100")));
    eventually_async("ARP bypass for the new VIP", 15, || {
        flows(&sb)
            .iter()
            .any(|f| f.contains("arp_tpa=172.18.0.100"))
    })
    .await;
    eventually_async("LB row", 15, || {
        lb_vips(&sb)
            .iter()
            .any(|(_, v)| v.contains("10.244.1.5:8080"))
    })
    .await;

    // Scale the endpoints: the backends follow.
    kube.apply(slice(&[("10.244.1.5", "node-a"), ("10.244.2.7", "node-b")]));
    eventually_async("two backends", 15, || {
        lb_vips(&sb)
            .iter()
            .any(|(_, v)| v.contains("10.244.1.5:8080,10.244.2.7:8080"))
    })
    .await;

    // Events on the Service, from this node.
    eventually_async("VipProgrammed event", 15, || {
        kube.events().iter().any(|e| {
            e["reason"] == "VipProgrammed"
                && e["regarding"]["name"] == "web"
                && e["note"]
                    .as_str()
                    .is_some_and(|n| n.contains("172.18.0.100") && n.contains("node-a"))
        })
    })
    .await;

    // The API server forgets history: every watch gets 410 and must relist, and a change made
    // meanwhile still arrives.
    kube.clear_request_log();
    kube.compact();
    kube.expire_watches();
    let mut api = service(Some("172.18.0.100"));
    api["metadata"]["name"] = json!("api");
    api["status"]["loadBalancer"]["ingress"][0]["ip"] = json!("172.18.0.101");
    kube.apply(api);
    eventually_async("flows for a Service created across the 410", 20, || {
        flows(&sb)
            .iter()
            .any(|f| f.contains("arp_tpa=172.18.0.101"))
    })
    .await;
    let relisted: BTreeSet<String> = kube
        .request_log()
        .iter()
        .filter(|r| r.is_list() && !r.is_watch())
        .map(|r| r.path.clone())
        .collect();
    assert!(
        relisted.iter().any(|p| p.ends_with("/services")),
        "services relisted after 410: {relisted:?}"
    );

    // Delete both Services: every flow and row of ours goes.
    kube.delete("v1", "Service", "shop", "web");
    kube.delete("v1", "Service", "shop", "api");
    eventually_async("flows gone", 15, || flows(&sb).is_empty()).await;
    eventually_async("rows gone", 15, || lb_vips(&sb).is_empty()).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_objects_are_skipped_with_a_warning_event_and_the_rest_applied() {
    let kube = KubeServer::start().await;
    kube.apply_yaml(NODES);
    let mut bad = service(Some("172.18.0.100"));
    bad["spec"]["externalIPs"] = json!(["not-an-ip", "192.168.10.11"]);
    kube.apply(bad);
    let sb = Sandbox::openflow_only();
    let opts = cluster_options(&kube, "agent-a");
    let cluster = agent::start_cluster(config(&sb, "node-a", None), opts)
        .await
        .unwrap();
    eventually_async("the good VIP programmed", 15, || {
        flows(&sb)
            .iter()
            .any(|f| f.contains("arp_tpa=172.18.0.100"))
    })
    .await;
    eventually_async("warnings for the bad VIPs", 15, || {
        let ev = kube.events();
        let warn = |s: &str| {
            ev.iter().any(|e| {
                e["type"] == "Warning"
                    && e["reason"] == "VipSkipped"
                    && e["note"].as_str().is_some_and(|n| n.contains(s))
            })
        };
        warn("not-an-ip") && warn("is a node address")
    })
    .await;
    // Everything there is to say has been said: two warnings and VipProgrammed.
    eventually_async("VipProgrammed too", 15, || {
        kube.events().iter().any(|e| e["reason"] == "VipProgrammed")
    })
    .await;
    let before = kube.events().len();
    assert_eq!(before, 3, "{:?}", kube.events());
    // The same statements again on several re-plans: no new events.
    for i in 0..3 {
        let mut touched = service(Some("172.18.0.100"));
        touched["spec"]["externalIPs"] = json!(["not-an-ip", "192.168.10.11"]);
        touched["metadata"]["labels"] = json!({"touched": format!("{i}")});
        kube.apply(touched);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        kube.events().len(),
        before,
        "no event storm on unchanged statements"
    );
    // Each Event names the node's sink that said it.
    for e in kube.events() {
        assert_eq!(
            e["metadata"]["labels"]["vipflow.io/said-by"], "node-a",
            "{e}"
        );
    }
    // A restarted agent learns what its node said, and says nothing again.
    cluster.shutdown().await;
    kube.clear_request_log();
    let cluster = agent::start_cluster(
        config(&sb, "node-a", None),
        cluster_options(&kube, "agent-a"),
    )
    .await
    .unwrap();
    let listed = tokio::time::timeout(
        Duration::from_secs(15),
        kube.wait_for_request(|r| {
            r.is_list()
                && r.resource == "events"
                && r.path.starts_with("/apis/events.k8s.io/")
                && r.param("labelSelector").as_deref() == Some("vipflow.io/said-by=node-a")
        }),
    )
    .await;
    assert!(listed.is_ok(), "{:#?}", kube.request_log());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(kube.events().len(), before, "{:#?}", kube.events());
    cluster.shutdown().await;
}

/// A `vipflow agent` process in cluster mode.
struct AgentProc {
    child: Child,
    http: String,
    identity: String,
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn spawn_agent(
    kube: &KubeServer,
    sb: &Sandbox,
    node: &str,
    nb: &Sandbox,
    identity: &str,
) -> AgentProc {
    let http = format!("127.0.0.1:{}", free_port());
    let log = std::fs::File::create(sb.path().join(format!("{identity}.log"))).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_vipflow"))
        .arg("agent")
        .args(["--kubeconfig", &kube.kubeconfig_path().to_string_lossy()])
        .args(["--node-name", node, "--identity", identity])
        .args(["--ovs-rundir", &sb.path().to_string_lossy()])
        .args(["--nb-remote", &format!("unix:{}", nb.nb_sock().display())])
        // Where VIP traffic lands: cluster rows go into vipflow's group, attached there.
        .args(["--node-router", "GR_{node}"])
        .args([
            "--http-addr",
            &http,
            "--lease-namespace",
            "default",
            "--lease-duration",
            "2",
        ])
        .env_remove("OVN_NB_DB")
        .env_remove("VIPFLOW_OBJECTS")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    AgentProc {
        child,
        http,
        identity: identity.into(),
    }
}

fn http_get(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}

fn status(a: &AgentProc) -> Option<Value> {
    serde_json::from_str(&http_get(&a.http, "/status")?).ok()
}

fn holder(kube: &KubeServer) -> Option<String> {
    kube.leases()
        .iter()
        .find(|l| l["metadata"]["name"] == "vipflow-northbound")
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(String::from))
}

/// One sample's value from Prometheus text.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (k, v) = l.rsplit_once(' ')?;
        (k == name).then(|| v.parse().ok())?
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_one_writer_and_the_other_takes_over_when_it_dies() {
    let kube = KubeServer::start().await;
    kube.apply_yaml(NODES);
    kube.apply(slice(&[("10.244.1.5", "node-a")]));
    kube.apply(service(Some("172.18.0.100")));
    let sa = Sandbox::start();
    let sbx = Sandbox::openflow_only();
    let a = spawn_agent(&kube, &sa, "node-a", &sa, "agent-a");
    let b = spawn_agent(&kube, &sbx, "node-b", &sa, "agent-b");

    // Both program their own node's bridge; one holds the Lease and writes the rows.
    eventually_async("both bridges programmed", 20, || {
        flows(&sa).iter().any(|f| f.contains("172.18.0.100"))
            && flows(&sbx).iter().any(|f| f.contains("172.18.0.100"))
    })
    .await;
    eventually_async("a lease holder", 20, || holder(&kube).is_some()).await;
    eventually_async("rows written", 20, || {
        lb_vips(&sa)
            .iter()
            .any(|(_, v)| v.contains("10.244.1.5:8080"))
    })
    .await;
    let leader_id = holder(&kube).unwrap();
    let (leader, follower) = if leader_id == a.identity {
        (a, b)
    } else {
        (b, a)
    };
    eventually_async("both report their role", 10, || {
        let (l, f) = (status(&leader), status(&follower));
        l.is_some_and(|s| s["northbound"]["writer"] == true)
            && f.is_some_and(|s| s["northbound"]["writer"] == false)
    })
    .await;
    let f = status(&follower).unwrap();
    assert_eq!(
        f["northbound"]["transactions"], 0,
        "the follower never wrote a row: {f}"
    );
    // The same document, typed, and as `vipflow status` prints it.
    let doc: vipflow::status::StatusDoc = serde_json::from_value(f.clone()).unwrap();
    assert_eq!(doc.northbound.as_ref().map(|n| n.writer), Some(false));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vipflow"))
        .args(["status", "--http-addr", &follower.http])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("northbound writer: another agent"), "{text}");
    assert!(text.contains("172.18.0.100"), "{text}");

    // /metrics of the leader, scraped and parsed.
    let m = http_get(&leader.http, "/metrics").unwrap();
    assert_eq!(metric(&m, "vipflow_leader"), Some(1.0), "{m}");
    assert!(
        metric(&m, "vipflow_flows{target=\"bridge/br-ex\"}").is_some_and(|v| v >= 4.0),
        "{m}"
    );
    assert_eq!(metric(&m, "vipflow_northbound_rows"), Some(1.0), "{m}");
    assert_eq!(
        metric(&m, "vipflow_peer_connected{peer=\"ovsdb/northbound\"}"),
        Some(1.0),
        "{m}"
    );
    assert!(
        metric(
            &m,
            "vipflow_sync_duration_seconds_count{target=\"northbound\"}"
        )
        .is_some_and(|v| v >= 1.0),
        "{m}"
    );
    assert_eq!(
        http_get(&follower.http, "/readyz").as_deref(),
        Some("ready\n")
    );
    let fm = http_get(&follower.http, "/metrics").unwrap();
    assert_eq!(metric(&fm, "vipflow_leader"), Some(0.0), "{fm}");

    // The leader dies without a word: the follower takes over within the Lease duration (2 s).
    let mut leader = leader;
    let _ = leader.child.kill();
    let killed = Instant::now();
    let _ = leader.child.wait();
    let follower_id = follower.identity.clone();
    eventually_async("the follower holds the lease", 10, || {
        holder(&kube).as_deref() == Some(follower_id.as_str())
    })
    .await;
    let took = killed.elapsed();
    assert!(
        took <= Duration::from_millis(2300),
        "takeover took {took:?} (lease duration 2 s)"
    );

    // ... and converges: a change made now reaches the rows through the new writer.
    kube.apply(slice(&[("10.244.1.5", "node-a"), ("10.244.2.7", "node-b")]));
    eventually_async("new writer applies the change", 20, || {
        lb_vips(&sa)
            .iter()
            .any(|(_, v)| v.contains("10.244.1.5:8080,10.244.2.7:8080"))
    })
    .await;
    assert_eq!(lb_vips(&sa).len(), 1, "no duplicate rows");
    drop(follower);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_hands_the_lease_over_at_once() {
    let kube = KubeServer::start().await;
    kube.apply_yaml(NODES);
    kube.apply(service(Some("172.18.0.100")));
    let sa = Sandbox::start();
    let mut opts = ClusterOptions {
        events_per_second: 5.0,
        events_burst: 5,
        ..cluster_options(&kube, "agent-a")
    };
    let mut long = config(&sa, "node-a", Some(&sa));
    long.lease.duration_seconds = 30;
    let a = agent::start_cluster(long.clone(), opts.clone())
        .await
        .unwrap();
    eventually_async("a holds the lease", 10, || {
        holder(&kube).as_deref() == Some("agent-a")
    })
    .await;
    opts.identity = "agent-b".into();
    let b = agent::start_cluster(long, opts).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(holder(&kube).as_deref(), Some("agent-a"));
    let t = Instant::now();
    a.shutdown().await;
    eventually_async("b takes over", 10, || {
        holder(&kube).as_deref() == Some("agent-b")
    })
    .await;
    // Far sooner than the 30 s the Lease would take to expire.
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "handover took {:?}",
        t.elapsed()
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeovn_subnet_warning_and_bursts_coalesced_into_few_plans() {
    let kube = KubeServer::start().await;
    kube.enable_crd("kubeovn.io/v1", "subnets");
    kube.apply_yaml(NODES);
    kube.apply_yaml(
        r#"
apiVersion: kubeovn.io/v1
kind: Subnet
metadata: {name: ovn-default}
spec:
  cidrBlock: 172.18.0.0/16
  gateway: 172.18.0.1
  excludeIps: ["172.18.0.1"]
  protocol: IPv4
"#,
    );
    kube.apply(service(Some("172.18.0.100")));
    let sb = Sandbox::openflow_only();
    let opts = cluster_options(&kube, "agent-a");
    let cluster = agent::start_cluster(config(&sb, "node-a", None), opts)
        .await
        .unwrap();
    eventually_async("VipNotExcluded warning on the Service", 15, || {
        kube.events().iter().any(|e| {
            e["reason"] == "VipNotExcluded"
                && e["regarding"]["name"] == "web"
                && e["note"]
                    .as_str()
                    .is_some_and(|n| n.contains("ovn-default") && n.contains("172.18.0.100"))
        })
    })
    .await;

    // A burst of 100 new Services: all programmed, in a handful of plans, not 100.
    let before = *cluster.running.generation.borrow();
    for i in 0..100 {
        let mut s = service(Some(&format!("172.20.0.{}", i + 1)));
        s["metadata"]["name"] = json!(format!("burst-{i}"));
        kube.apply(s);
    }
    eventually_async("all 100 VIPs programmed", 20, || {
        flows(&sb)
            .iter()
            .filter(|f| f.contains("arp_tpa=172.20.0."))
            .count()
            == 100
    })
    .await;
    let plans = *cluster.running.generation.borrow() - before;
    assert!(plans <= 10, "100 changes were planned {plans} times");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_elected_agent_allocates_an_address_programs_it_and_shows_the_pool() {
    let kube = KubeServer::start().await;
    kube.register_resource("vipflow.io/v1alpha1", "vippools", "VipPool", false);
    kube.enable_crd("vipflow.io/v1alpha1", "vippools");
    kube.apply_yaml(NODES);
    kube.apply_yaml(
        "apiVersion: vipflow.io/v1alpha1\nkind: VipPool\nmetadata: {name: lab}\nspec: {addresses: [172.18.0.200-172.18.0.203]}\n",
    );
    kube.apply(slice(&[("10.244.1.5", "node-a")]));
    kube.apply(service(None));
    let sb = Sandbox::start();
    let opts = cluster_options(&kube, "agent-a");
    let mut cfg = config(&sb, "node-a", Some(&sb));
    cfg.allocate_ips = true;
    let cluster = agent::start_cluster(cfg, opts).await.unwrap();
    // The Service had no address: the elected agent gives it one, then programs it.
    eventually_async("an address in the Service's status", 20, || {
        kube.get("v1", "Service", "shop", "web")
            .is_some_and(|s| s["status"]["loadBalancer"]["ingress"][0]["ip"] == "172.18.0.200")
    })
    .await;
    eventually_async("ARP bypass for the allocated address", 20, || {
        flows(&sb)
            .iter()
            .any(|f| f.contains("arp_tpa=172.18.0.200"))
    })
    .await;
    eventually_async("LB row", 20, || {
        lb_vips(&sb)
            .iter()
            .any(|(_, v)| v.contains("172.18.0.200:80") && v.contains("10.244.1.5:8080"))
    })
    .await;
    // /status shows the pool and its usage.
    let mut doc = cluster.running.status_doc.clone();
    let shown = tokio::time::timeout(
        Duration::from_secs(20),
        doc.wait_for(|d| {
            d.as_ref().is_some_and(|d| {
                d.pools
                    .iter()
                    .any(|p| p.name == "lab" && p.status.assigned_ipv4 == 1)
            })
        }),
    )
    .await;
    assert!(shown.is_ok(), "{:?}", cluster.running.status_doc.borrow());
    let text = cluster
        .running
        .status_doc
        .borrow()
        .as_ref()
        .unwrap()
        .to_string();
    assert!(
        text.contains("lab              IPv4 1 assigned 3 available"),
        "{text}"
    );
    cluster.shutdown().await;
}

/// With `announce`, the node that takes a VIP says so on its Service (VipAnnounced), and answers
/// ARP for it; a node that is not Ready takes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_that_takes_a_vip_tells_its_service_with_an_event() {
    let kube = KubeServer::start().await;
    // node-b is not Ready: node-a announces every VIP.
    kube.apply_yaml(NODES);
    kube.apply(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-b"},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.10.12"}],
                   "conditions": [{"type": "Ready", "status": "False"}]}
    }));
    kube.apply(slice(&[("10.244.1.5", "node-a")]));
    kube.apply(service(Some("172.18.0.100")));
    let sb = Sandbox::start();
    let mut cfg = config(&sb, "node-a", None);
    for b in &mut cfg.bridges {
        b.announce = true;
    }
    let cluster = agent::start_cluster(cfg, cluster_options(&kube, "agent-a"))
        .await
        .unwrap();
    eventually_async("the ARP answer on br-ex", 15, || {
        flows(&sb)
            .iter()
            .any(|f| f.contains("arp_tpa=172.18.0.100") && f.contains("IN_PORT"))
    })
    .await;
    eventually_async("VipAnnounced event", 15, || {
        kube.events().iter().any(|e| {
            e["reason"] == "VipAnnounced"
                && e["type"] == "Normal"
                && e["regarding"]["name"] == "web"
                && e["note"]
                    .as_str()
                    .is_some_and(|n| n.contains("172.18.0.100") && n.contains("node node-a"))
        })
    })
    .await;
    cluster.shutdown().await;
}

/// The message of the Service's `vipflow.io/Announced` condition, if it has one.
fn announced_record(kube: &KubeServer, name: &str) -> Option<String> {
    let svc = kube.get("v1", "Service", "shop", name)?;
    let conds = svc["status"]["conditions"].as_array()?.clone();
    conds
        .iter()
        .find(|c| c["type"] == "vipflow.io/Announced")
        .and_then(|c| c["message"].as_str().map(String::from))
}

/// Status writes on Service `name` that went through.
fn status_writes(kube: &KubeServer, name: &str) -> usize {
    let path = format!("/api/v1/namespaces/shop/services/{name}/status");
    kube.request_log()
        .iter()
        .filter(|r| r.verb == "patch" && r.path == path && r.status < 300)
        .count()
}

/// The VipAnnounced Events on Service `web`, by note.
fn announced_events(kube: &KubeServer) -> Vec<String> {
    kube.events()
        .iter()
        .filter(|e| e["reason"] == "VipAnnounced" && e["regarding"]["name"] == "web")
        .filter_map(|e| e["note"].as_str().map(String::from))
        .collect()
}

fn announcing(sb: &Sandbox, node: &str) -> Config {
    let mut cfg = config(sb, node, None);
    for b in &mut cfg.bridges {
        b.announce = true;
    }
    cfg
}

/// Two announcing nodes: the owner of a VIP names itself on its Service once its answer is on
/// the switch; when the VIP moves, the new owner's record replaces it and names where it came
/// from, and its one Event says from which node to which; a restart writes and says nothing
/// again; a VIP no longer announced leaves no record behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_announcing_node_is_named_on_the_service_and_a_move_names_both_nodes() {
    const VIP: &str = "172.18.0.100";
    let kube = KubeServer::start().await;
    kube.apply_yaml(NODES);
    kube.apply(slice(&[("10.244.1.5", "node-a")]));
    kube.apply(service(Some(VIP)));
    // The owner is the best-scoring live node, as every agent computes it.
    let names = [
        vipflow::announce::placement::NodeName::from("node-a"),
        vipflow::announce::placement::NodeName::from("node-b"),
    ];
    let owner = vipflow::announce::placement::choose(VIP.parse().unwrap(), &names)
        .unwrap()
        .to_string();
    let other = if owner == "node-a" {
        "node-b"
    } else {
        "node-a"
    }
    .to_string();
    let sb: std::collections::BTreeMap<String, Sandbox> = [
        ("node-a".to_string(), Sandbox::openflow_only()),
        ("node-b".to_string(), Sandbox::openflow_only()),
    ]
    .into();
    let answers = |node: &str| {
        flows(&sb[node])
            .iter()
            .any(|f| f.contains(&format!("arp_tpa={VIP}")) && f.contains("IN_PORT"))
    };
    let start = |node: String| {
        let cfg = announcing(&sb[&node], &node);
        let opts = cluster_options(&kube, &format!("agent-{node}"));
        async move { agent::start_cluster(cfg, opts).await.unwrap() }
    };
    let began = Instant::now();
    let mut agents = std::collections::BTreeMap::new();
    for node in ["node-a", "node-b"] {
        agents.insert(node.to_string(), start(node.to_string()).await);
    }

    // The owner names itself, after its answer is on its switch.
    let first = format!("{VIP} by {owner}");
    eventually_async("the owner's record", 20, || {
        announced_record(&kube, "web").as_deref() == Some(first.as_str())
    })
    .await;
    let recorded_after = began.elapsed();
    assert!(
        answers(&owner),
        "recorded before the answer flow was on the switch"
    );
    assert!(!answers(&other));
    eventually_async("the owner's VipAnnounced", 15, || {
        announced_events(&kube)
            .iter()
            .any(|n| n.contains(VIP) && n.contains(&format!("by node {owner}")))
    })
    .await;
    // Written once: the other node owes nothing, and new plans (the record's own change among
    // them) write nothing more.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(status_writes(&kube, "web"), 1);

    // The owner's Node goes NotReady: the VIP moves, and the new owner's record says from where.
    let moved_at = Instant::now();
    kube.apply(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": owner},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.10.11"}],
                   "conditions": [{"type": "Ready", "status": "False"}]}
    }));
    let moved = format!("{VIP} by {other} (from {owner})");
    eventually_async("the new owner's record", 20, || {
        announced_record(&kube, "web").as_deref() == Some(moved.as_str())
    })
    .await;
    let move_recorded_after = moved_at.elapsed();
    assert!(
        answers(&other),
        "recorded before the new answer was on the switch"
    );
    let said_move = format!("VIPs {VIP} (from node {owner}) announced by node {other}");
    eventually_async("the move's VipAnnounced", 15, || {
        announced_events(&kube)
            .iter()
            .any(|n| n.contains(&said_move))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(status_writes(&kube, "web"), 2, "one write for the move");
    let events = announced_events(&kube);
    assert_eq!(
        events.iter().filter(|n| n.contains("from node")).count(),
        1,
        "the move said once: {events:#?}"
    );

    // The new owner restarts: the record already says what it would, and its Event was said.
    let restarted_at = Instant::now();
    if let Some(c) = agents.remove(&other) {
        c.shutdown().await;
    }
    let c = start(other.clone()).await;
    let mut ready = c.running.ready.clone();
    tokio::time::timeout(Duration::from_secs(20), ready.wait_for(|r| *r))
        .await
        .expect("ready after the restart")
        .unwrap();
    let mut doc = c.running.status_doc.clone();
    tokio::time::timeout(
        Duration::from_secs(20),
        doc.wait_for(|d| {
            d.as_ref()
                .and_then(|d| d.announce.as_ref())
                .is_some_and(|a| a.here.iter().any(|v| v.to_string() == VIP))
        }),
    )
    .await
    .expect("announcing again after the restart")
    .unwrap();
    agents.insert(other.clone(), c);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(status_writes(&kube, "web"), 2, "the restart wrote a record");
    assert_eq!(announced_events(&kube), events, "the restart said it again");
    let restart_checked_after = restarted_at.elapsed();

    // The VIP leaves the Service: no node announces it, and its record goes.
    let client = kube.client().await;
    let api: kube::Api<k8s_openapi::api::core::v1::Service> = kube::Api::namespaced(client, "shop");
    api.patch_status(
        "web",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"status": {"loadBalancer": {"ingress": null}}})),
    )
    .await
    .unwrap();
    let removed_at = Instant::now();
    eventually_async("the record removed", 20, || {
        kube.get("v1", "Service", "shop", "web")
            .is_some_and(|s| announced_record(&kube, "web").is_none() && s["status"].is_object())
    })
    .await;
    let removed_after = removed_at.elapsed();
    eventually_async("no answer left", 15, || {
        !answers("node-a") && !answers("node-b")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes = status_writes(&kube, "web");
    // Ours (3) and the test's own ingress change (1).
    assert_eq!(writes, 4, "one write to remove it");
    eprintln!(
        "announce record figures: first record {recorded_after:?} after the agents started; \
         moved record {move_recorded_after:?} after the owner's Node went NotReady; restart \
         checked for {restart_checked_after:?} with no write; record removed {removed_after:?} \
         after the VIP left; status writes on the Service: {} by the agents",
        writes - 1
    );
    for (_, c) in agents {
        c.shutdown().await;
    }
}
