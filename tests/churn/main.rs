//! Churn: a seeded random sequence of Service / EndpointSlice / Node operations, through the
//! objects file and through the Kubernetes API test server, on a real ovs-vswitchd and OVN NB.
//! After every quiet point the invariant holds ([`invariant`]): flows on br-ex == plan, vipflow's
//! Load_Balancer rows == plan, `exclude_ips` == plan, nothing foreign touched. The seed is
//! printed first; `CHURN_SEED=<n>` replays a run.

#[path = "../common/mod.rs"]
mod common;
mod faults;
mod invariant;
mod proxy;
mod world;

use common::Agent;
use invariant::{Baseline, converged, violations};
use std::time::{Duration, Instant};
use testkit::Sandbox;
use testkit::kube_server::KubeServer;
use vipflow::agent::{self, ClusterOptions};
use vipflow::config::Config;
use world::{Rng, World, seed};

/// Ops between two quiet points.
const BATCH: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_churn_keeps_flows_rows_and_exclude_ips_equal_to_the_plan() {
    let mut rng = Rng::new(seed("file churn"));
    let sb = Sandbox::start();
    let base = Baseline::prepare(&sb, true);
    let mut world = World::new(&mut rng, 60, 150);
    let text = world.file_text();
    let mut h = Agent::start(sb, true, |c| c.node_name = "node-0".into(), &text).await;
    let bad = violations(&h.sb, &h.cfg, &text, &base, true);
    assert!(bad.is_empty(), "after the first sync: {bad:#?}");

    let start = Instant::now();
    let (mut ops, mut checks) = (0, 1);
    for round in 0..100 {
        for _ in 0..BATCH {
            world.step(&mut rng);
            ops += 1;
        }
        let text = world.file_text();
        h.update(&text).await;
        let bad = violations(&h.sb, &h.cfg, &text, &base, true);
        assert!(bad.is_empty(), "after round {round} ({ops} ops): {bad:#?}");
        checks += 1;
    }
    println!(
        "file churn: {ops} operations, invariant checked {checks} times, {:.1} s",
        start.elapsed().as_secs_f64()
    );
    assert!(checks >= 100);
}

fn cluster_config(sb: &Sandbox) -> Config {
    let mut c = Config {
        node_name: "node-0".into(),
        ovs_rundir: sb.path().to_path_buf(),
        nb_remote: Some(format!("unix:{}", sb.nb_sock().display())),
        ..Config::default()
    };
    c.lease.namespace = Some("default".into());
    c.lease.duration_seconds = 2;
    c
}

/// Apply to the API server what changed between two renderings of the world: one API call per
/// object created, changed or deleted.
fn push(
    kube: &KubeServer,
    old: &std::collections::BTreeMap<(String, String, String, String), serde_json::Value>,
    new: &std::collections::BTreeMap<(String, String, String, String), serde_json::Value>,
) -> usize {
    let mut calls = 0;
    for (k, v) in new {
        if old.get(k) != Some(v) {
            kube.apply(v.clone());
            calls += 1;
        }
    }
    for (api, kind, ns, name) in old.keys().filter(|k| !new.contains_key(*k)) {
        kube.delete(api, kind, ns, name);
        calls += 1;
    }
    calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_churn_keeps_flows_rows_and_exclude_ips_equal_to_the_plan() {
    let mut rng = Rng::new(seed("API server churn"));
    let kube = KubeServer::start().await;
    let sb = Sandbox::start();
    let base = Baseline::prepare(&sb, true);
    let mut world = World::new(&mut rng, 40, 100);
    let mut objects = world.objects();
    push(&kube, &Default::default(), &objects);
    let cfg = cluster_config(&sb);
    let opts = ClusterOptions {
        kubeconfig: Some(kube.kubeconfig_path().to_path_buf()),
        identity: "churn".into(),
        namespace: "default".into(),
        events_per_second: 50.0,
        events_burst: 50,
        nb_backoff: None,
    };
    let cluster = agent::start_cluster(cfg.clone(), opts).await.unwrap();
    let text = world.file_text();
    if let Err(bad) = converged(&sb, &cfg, &text, &base, true, Duration::from_secs(30)).await {
        panic!("after the first sync: {bad:#?}");
    }

    let start = Instant::now();
    let (mut ops, mut calls, mut checks) = (0, 0, 1);
    let mut slowest = Duration::ZERO;
    for round in 0..20 {
        for _ in 0..BATCH {
            world.step(&mut rng);
            ops += 1;
        }
        let next = world.objects();
        calls += push(&kube, &objects, &next);
        objects = next;
        let text = world.file_text();
        match converged(&sb, &cfg, &text, &base, true, Duration::from_secs(20)).await {
            Ok(t) => slowest = slowest.max(t),
            Err(bad) => panic!("after round {round} ({ops} ops): {bad:#?}"),
        }
        checks += 1;
    }
    println!(
        "API server churn: {ops} operations as {calls} API calls, invariant checked {checks} times, \
         slowest convergence {slowest:?}, {:.1} s",
        start.elapsed().as_secs_f64()
    );
    cluster.shutdown().await;
}
