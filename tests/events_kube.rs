//! The allocator's Events against the Kubernetes API test server (real HTTP, events.k8s.io/v1
//! with label selectors): what the rate limit holds back goes out by itself, and a leader
//! change or a restart does not say a decision again.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::kube_server::KubeServer;
use tokio::sync::watch;
use vipflow::event_sink::{EventSink, SinkConfig, SinkKind};
use vipflow::ipam_task::{IpamOutputs, IpamSettings, run_with};
use vipflow::metrics::Metrics;

/// A hang guard, not a target.
const LIMIT: Duration = Duration::from_secs(60);
/// The defaults of `--event-rate` and `--event-burst`.
const RATE: f64 = 5.0;
const BURST: u32 = 20;

async fn server() -> KubeServer {
    let srv = KubeServer::start().await;
    srv.register_resource("vipflow.io/v1alpha1", "vippools", "VipPool", false);
    srv.enable_crd("vipflow.io/v1alpha1", "vippools");
    srv.apply_yaml(
        "apiVersion: vipflow.io/v1alpha1\nkind: VipPool\nmetadata: {name: p}\nspec: {addresses: [10.0.0.0/24]}\n",
    );
    srv
}

fn service(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"type": "LoadBalancer", "selector": {"app": name},
                 "ports": [{"port": 80, "protocol": "TCP"}]},
    })
}

/// The allocator with its own Event sink, as the elected agent runs it.
async fn allocator(
    srv: &KubeServer,
    leader: Option<watch::Receiver<bool>>,
    metrics: Option<Arc<Metrics>>,
) -> tokio::task::JoinHandle<()> {
    let client = srv.client().await;
    let sink = EventSink::start(
        client.clone(),
        SinkConfig {
            kind: SinkKind::Allocator,
            instance: "test".into(),
            per_second: RATE,
            burst: BURST,
        },
        metrics.as_deref(),
    );
    // From here on, what the request log shows is this allocator's (see `running`).
    srv.clear_request_log();
    tokio::spawn(run_with(
        client,
        IpamSettings {
            retry_every: Duration::from_millis(100),
            pool_status_every: Duration::from_millis(100),
            ..Default::default()
        },
        leader,
        IpamOutputs {
            events: Some(sink),
            metrics,
            pools: None,
        },
    ))
}

/// The allocator last started has listed everything and runs its loop (it writes the pool's
/// status).
async fn running(srv: &KubeServer) {
    tokio::time::timeout(
        LIMIT,
        srv.wait_for_request(|r| r.resource == "vippools/status"),
    )
    .await
    .expect("the allocator runs");
}

/// The notes of each Service's IPAllocated Events.
fn allocated(srv: &KubeServer) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in srv.list("events.k8s.io/v1", "Event") {
        if e["reason"] != "IPAllocated" {
            continue;
        }
        let name = e["regarding"]["name"].as_str().unwrap_or_default();
        let note = e["note"].as_str().unwrap_or_default();
        out.entry(name.to_string()).or_default().push(note.into());
    }
    out
}

/// Wait until every one of `names` has an IPAllocated Event (and `more` holds).
async fn all_said(srv: &KubeServer, names: &[String], more: impl Fn(&KubeServer) -> bool) {
    let ok = tokio::time::timeout(
        LIMIT,
        srv.wait_until(|s| {
            let said = allocated(s);
            names.iter().all(|n| said.contains_key(n)) && more(s)
        }),
    )
    .await;
    let said = allocated(srv);
    let missing: Vec<&String> = names.iter().filter(|n| !said.contains_key(*n)).collect();
    assert!(ok.is_ok(), "no IPAllocated Event for {missing:?}");
}

fn metric(text: &str, line: &str) -> Option<i64> {
    text.lines()
        .find_map(|l| l.strip_prefix(line))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_of_a_burst_gets_its_event_as_the_rate_allows() {
    let srv = server().await;
    let metrics = Arc::new(Metrics::new());
    let task = allocator(&srv, None, Some(metrics.clone())).await;
    running(&srv).await;
    let names: Vec<String> = (0..100).map(|i| format!("s{i:03}")).collect();
    let created = Instant::now();
    for n in &names {
        srv.apply(service(n));
    }
    all_said(&srv, &names, |_| true).await;
    let last = created.elapsed();
    println!(
        "100 Services at --event-rate 5 --event-burst 20: the last IPAllocated Event {last:?} after they were created"
    );
    // The burst at once, the other 80 at 5 a second: 16 s, and 2 s to spare.
    let bound = Duration::from_secs_f64(f64::from(100 - BURST) / RATE + 2.0);
    assert!(last <= bound, "{last:?} > {bound:?}");
    // Once each, marked with the sink that said it and the statement.
    for (n, notes) in allocated(&srv) {
        assert_eq!(notes.len(), 1, "{n}: {notes:?}");
    }
    let ev = srv
        .list("events.k8s.io/v1", "Event")
        .into_iter()
        .find(|e| e["reason"] == "IPAllocated")
        .unwrap_or_default();
    assert_eq!(ev["metadata"]["labels"]["vipflow.io/said-by"], "allocator");
    assert!(
        ev["metadata"]["annotations"]["vipflow.io/statement"]
            .as_str()
            .is_some_and(|d| d.len() == 16 && u64::from_str_radix(d, 16).is_ok()),
        "{ev}"
    );
    assert_eq!(ev["reportingController"], "vipflow");
    assert_eq!(ev["reportingInstance"], "test");
    let count = |kind: &str| {
        metric(
            &metrics.encode(),
            &format!(r#"vipflow_kube_events{{sink="allocator",kind="{kind}"}}"#),
        )
    };
    // The sink counts a write once its answer is back, just after the Event is stored.
    let ok = tokio::time::timeout(LIMIT, async {
        while count("published") != Some(100) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let text = metrics.encode();
    assert!(ok.is_ok(), "{text}");
    assert_eq!(count("dropped"), Some(0), "{text}");
    assert_eq!(count("failed"), Some(0), "{text}");
    let deferred = count("deferred").unwrap_or_default();
    assert!((60..=80).contains(&deferred), "{deferred} deferred\n{text}");
    println!("published 100, deferred {deferred}, dropped 0, failed 0");
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_change_and_a_restart_do_not_say_a_decision_again() {
    let srv = server().await;
    let (lead_a, rx_a) = watch::channel(true);
    let a = allocator(&srv, Some(rx_a), None).await;
    running(&srv).await;
    let names: Vec<String> = (0..30).map(|i| format!("s{i:03}")).collect();
    for n in &names {
        srv.apply(service(n));
    }
    // The burst is said; the rest waits for the rate when leadership moves.
    let ok = tokio::time::timeout(LIMIT, srv.wait_until(|s| allocated(s).len() >= 20)).await;
    assert!(ok.is_ok(), "{:?}", allocated(&srv));
    lead_a.send(false).unwrap();
    // As a Lease's handover does, the next leader starts a little after the last stopped.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = allocated(&srv).len();
    let (_lead_b, rx_b) = watch::channel(true);
    let b = allocator(&srv, Some(rx_b), None).await;
    all_said(&srv, &names, |_| true).await;
    println!(
        "IPAllocated Events: {before} said by the first leader, {} by the next",
        names.len() - before
    );
    // Time for anything said twice to arrive.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (n, notes) in allocated(&srv) {
        assert_eq!(
            notes.len(),
            1,
            "{n} said twice across the leader change: {notes:?}"
        );
    }
    // A restart.
    b.abort();
    a.abort();
    let c = allocator(&srv, None, None).await;
    running(&srv).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (n, notes) in allocated(&srv) {
        assert_eq!(notes.len(), 1, "{n} said again after a restart: {notes:?}");
    }
    // A decision that changes is said.
    let mut moved = service("s007");
    moved["metadata"]["annotations"] = json!({"vipflow.io/load-balancer-ips": "10.0.0.200"});
    srv.apply(moved);
    let ok = tokio::time::timeout(
        LIMIT,
        srv.wait_until(|s| allocated(s).get("s007").is_some_and(|n| n.len() == 2)),
    )
    .await;
    assert!(ok.is_ok(), "{:?}", allocated(&srv).get("s007"));
    let said = allocated(&srv);
    assert!(
        said["s007"]
            .iter()
            .any(|n| n.contains("10.0.0.200 (pool p)")),
        "{:?}",
        said["s007"]
    );
    for (n, notes) in said.iter().filter(|(n, _)| *n != "s007") {
        assert_eq!(notes.len(), 1, "{n}: {notes:?}");
    }
    c.abort();
}
