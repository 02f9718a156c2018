//! The NB writer's session (`reconcile::northbound::Session`, the sans-IO core of the run
//! loop) driven step by step against a real OVN NB ovsdb-server: what it diffs after monitor
//! events and plan deltas, and how its insert guards behave when another writer races it.

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use ovsdb::{Client, ClientOptions, Monitor};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use testkit::{COOKIE_PREFIX, Options, Sandbox};
use vipflow::model::{KeptService, KeptSlice, ModelOptions, Objects, ServiceKey};
use vipflow::plan::northbound::NorthboundConfig;
use vipflow::plan::planner::Planner;
use vipflow::reconcile::northbound::{
    DesiredRows, absorb_queued, peer_backoff, resolve_node_rows, send, take_over, write_plan,
    write_plan_reporting,
};
use vipflow_core::reconcile::northbound::{
    BATCH_OWNERS, Change, DB, Observed, Session, monitor_spec, new_token,
};

fn nb() -> Sandbox {
    let sb = Sandbox::with_options(Options {
        ovn: true,
        bridges: false,
    });
    // Nothing here needs the southbound side; northd would only add load.
    sb.kill("ovn-northd");
    sb
}

fn service(i: usize) -> Arc<KeptService> {
    Arc::new(
        serde_json::from_value::<core::Service>(serde_json::json!({
            "metadata": {"name": format!("svc-{i}"), "namespace": "t"},
            "spec": {"type": "ClusterIP", "externalIPs": [format!("198.18.{}.{}", i / 250, i % 250 + 1)],
                     "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]},
        }))
        .unwrap()
        .into(),
    )
}

fn slice(i: usize, backend: u8) -> Arc<KeptSlice> {
    Arc::new(
        serde_json::from_value::<discovery::EndpointSlice>(serde_json::json!({
            "metadata": {"name": format!("svc-{i}-x"), "namespace": "t",
                         "labels": {"kubernetes.io/service-name": format!("svc-{i}")}},
            "addressType": "IPv4",
            "ports": [{"port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [format!("10.{}.{}.{backend}", i / 250, i % 250)]}],
        }))
        .unwrap()
        .into(),
    )
}

fn objects(n: usize) -> Objects {
    Objects {
        services: (0..n).map(service).collect(),
        endpoint_slices: (0..n).map(|i| slice(i, 1)).collect(),
        ..Default::default()
    }
}

/// The agent's planner, with rows and no bridges.
fn planner() -> Planner {
    Planner::new(
        ModelOptions::default(),
        &[],
        COOKIE_PREFIX,
        Some(NorthboundConfig::default()),
    )
}

/// What the agent's planner task hands the writer for a snapshot (`agent::start_with`).
fn hand_over(planner: &mut Planner, objs: &Objects) -> DesiredRows {
    let plans = planner.update(objs);
    let rows = plans.northbound.as_ref().expect("a planner with rows");
    DesiredRows::from_rows(plans.generation, rows, true)
}

fn options(sb: &Sandbox) -> ClientOptions {
    ClientOptions::new(&format!("unix:{}", sb.nb_sock().display()), DB).unwrap()
}

/// A writer session as the run loop starts one: take over, then read.
async fn connect(sb: &Sandbox) -> (Client, Option<Monitor>, Session) {
    let client = Client::connect(options(sb)).await.unwrap();
    let token = new_token();
    take_over(&client, &token).await.unwrap();
    let mut monitor = client.monitor(monitor_spec(false)).await.unwrap();
    let mut session = Session::new(Observed::from_cache(&monitor.cache()), Some(token));
    absorb_queued(&mut session, &mut monitor, None);
    (client, Some(monitor), session)
}

/// Send the changes as the run loop does (`send`: a large first sync with the monitor
/// cancelled, then taken again).
async fn write(
    client: &Client,
    monitor: &mut Option<Monitor>,
    session: &mut Session,
    plan: &DesiredRows,
    changes: Vec<Change>,
) -> Result<(), ovsdb::Error> {
    let m = monitor.take().expect("a monitor");
    let sent = send(session, client, m, plan, changes).await;
    *monitor = sent.monitor;
    sent.result
}

/// The monitor, which `write` always gives back here.
fn m(monitor: &mut Option<Monitor>) -> &mut Monitor {
    monitor.as_mut().expect("a monitor")
}

/// Absorb monitor events until the session holds `n` rows of ours.
async fn absorb_until(monitor: &mut Monitor, session: &mut Session, n: usize) {
    absorb_queued(session, monitor, None);
    while session.observed().len() != n {
        let ev = tokio::time::timeout(Duration::from_secs(10), monitor.next_event())
            .await
            .expect("a monitor update within 10 s")
            .expect("monitor open");
        absorb_queued(session, monitor, Some(ev));
    }
}

/// Our rows' names, each once, failing on a duplicate.
fn our_names(sb: &Sandbox) -> BTreeSet<String> {
    let out = sb.nbctl(&[
        "--bare",
        "--columns=name",
        "find",
        "Load_Balancer",
        "external_ids:\"vipflow.io/managed\"=true",
    ]);
    let mut names = BTreeSet::new();
    for l in out.lines().filter(|l| !l.trim().is_empty()) {
        assert!(names.insert(l.trim().to_string()), "duplicate row {l}");
    }
    names
}

fn owners(changes: &[Change]) -> BTreeSet<ServiceKey> {
    changes
        .iter()
        .flat_map(|c| c.owners.iter().cloned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_lost_the_token_writes_nothing_and_the_next_one_duplicates_nothing() {
    let sb = nb();
    // Enough for the first sync to be several transactions, written with the monitor off.
    let objs = objects(300);
    let mut planner = planner();
    let plan = hand_over(&mut planner, &objs);
    let (client, mut monitor, mut session) = connect(&sb).await;

    // Another writer takes over (as a new Lease holder would) and writes svc-7's row.
    sb.nbctl(&[
        "set",
        "NB_Global",
        ".",
        "external_ids:vipflow.io/writer=other",
    ]);
    sb.nbctl(&[
        "create",
        "Load_Balancer",
        "name=\"vipflow/t/svc-7/tcp\"",
        "protocol=tcp",
        "vips={\"198.18.0.8:80\"=\"10.0.7.1:8080\"}",
        "external_ids={\"vipflow.io/managed\"=true,\"vipflow.io/owner\"=\"t/svc-7\",\"vipflow.io/scope\"=cluster}",
    ]);
    // And someone else's row arrives too.
    sb.nbctl(&["lb-add", "foreign", "192.0.2.1:80", "10.9.9.9:80"]);

    // The first session's snapshot predates both; its batch is fenced off whole.
    let changes = session.changes(&plan);
    assert_eq!(changes.len(), 3, "300 Services: 3 transactions");
    // A full first batch: written with the monitor cancelled.
    assert!(changes[0].owners.len() >= BATCH_OWNERS);
    let err = write(&client, &mut monitor, &mut session, &plan, changes)
        .await
        .expect_err("the fence stops a writer whose token was replaced");
    assert!(err.to_string().contains("wait"), "{err}");
    assert_eq!(our_names(&sb).len(), 1, "nothing of the batch committed");

    // A new session takes over and reads after: it updates svc-7's row, adds the rest.
    drop((monitor, client));
    let (client, mut monitor, mut session) = connect(&sb).await;
    assert_eq!(session.observed().len(), 1);
    // As the run loop writes: batches streamed out while the rest is diffed.
    let sent = write_plan(&mut session, &client, monitor.take().unwrap(), &plan).await;
    monitor = sent.monitor;
    sent.result.unwrap();
    assert_eq!(sent.transactions, 3);
    // Written with the monitor cancelled; the new monitor's snapshot holds every row.
    assert_eq!(session.observed().len(), 300);
    assert_eq!(our_names(&sb).len(), 300);
    let foreign = sb.nbctl(&[
        "--bare",
        "--columns=vips",
        "find",
        "Load_Balancer",
        "name=foreign",
    ]);
    assert!(
        foreign.contains("10.9.9.9:80"),
        "foreign row intact: {foreign}"
    );
    absorb_until(m(&mut monitor), &mut session, 300).await;
    assert!(session.changes(&plan).is_empty(), "in sync");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batched_first_sync_takes_its_monitor_again_once_settled() {
    let sb = nb();
    let objs = objects(300);
    let mut planner = planner();
    let plan = hand_over(&mut planner, &objs);
    let (client, mut monitor, mut session) = connect(&sb).await;
    let (settled, settle) = tokio::sync::watch::channel(false);
    let (commits, mut committed) = tokio::sync::mpsc::unbounded_channel();
    let sent = {
        let mut on_commit = |_: &Session, n: u64| {
            let _ = commits.send(n);
        };
        let write = write_plan_reporting(
            &mut session,
            &client,
            monitor.take().unwrap(),
            &plan,
            &mut on_commit,
            Some(&settle),
        );
        tokio::pin!(write);
        // The rows are committed (and said to be), but the monitor waits while the bridges are
        // not synced.
        tokio::select! {
            _ = &mut write => panic!("returned before the bridges synced"),
            n = committed.recv() => assert_eq!(n, Some(3), "three transactions of 100"),
            _ = tokio::time::sleep(Duration::from_secs(30)) => panic!("not committed"),
        }
        assert_eq!(our_names(&sb).len(), 300);
        assert!(
            tokio::time::timeout(Duration::from_millis(300), &mut write)
                .await
                .is_err(),
            "the monitor was taken again before the bridges synced"
        );
        settled.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(10), write)
            .await
            .expect("taken again once settled")
    };
    sent.result.unwrap();
    assert!(sent.monitor.is_some());
    assert_eq!(session.observed().len(), 300, "the new monitor's snapshot");
    assert!(session.whole_diff_due(), "a whole check follows");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_first_sync_only_changed_services_are_diffed() {
    let sb = nb();
    let mut objs = objects(20);
    let mut planner = planner();
    let plan = hand_over(&mut planner, &objs);
    let (client, mut monitor, mut session) = connect(&sb).await;
    let changes = session.changes(&plan);
    write(&client, &mut monitor, &mut session, &plan, changes)
        .await
        .unwrap();
    absorb_until(m(&mut monitor), &mut session, 20).await;
    // The echo of our own write: nothing to do.
    assert!(session.changes(&plan).is_empty());

    // A plan delta: one Service's endpoints changed -> one transaction for it alone.
    objs.endpoint_slices[3] = slice(3, 2);
    let plan = hand_over(&mut planner, &objs);
    let changes = session.changes(&plan);
    assert_eq!(
        owners(&changes),
        BTreeSet::from([ServiceKey::new("t", "svc-3")])
    );
    assert_eq!(changes.len(), 1);
    write(&client, &mut monitor, &mut session, &plan, changes)
        .await
        .unwrap();

    // Someone edits one of our rows: the monitor event names its Service, which is repaired.
    sb.nbctl(&[
        "set",
        "Load_Balancer",
        "vipflow/t/svc-5/tcp",
        "vips={\"198.18.0.6:80\"=\"10.6.6.6:1\"}",
    ]);
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(10), m(&mut monitor).next_event())
            .await
            .unwrap()
            .unwrap();
        absorb_queued(&mut session, m(&mut monitor), Some(ev));
        let changes = session.changes(&plan);
        if changes.is_empty() {
            // Our own echo; the edit is still to come.
            continue;
        }
        assert_eq!(
            owners(&changes),
            BTreeSet::from([ServiceKey::new("t", "svc-5")])
        );
        write(&client, &mut monitor, &mut session, &plan, changes)
            .await
            .unwrap();
        break;
    }
    let vips = sb.nbctl(&[
        "--bare",
        "--columns=vips",
        "find",
        "Load_Balancer",
        "name=\"vipflow/t/svc-5/tcp\"",
    ]);
    assert!(vips.contains("10.0.5.1:8080"), "repaired: {vips}");

    // A plan generation the writer never saw (its delta is lost): everything is diffed.
    objs.endpoint_slices[8] = slice(8, 3);
    let _missed = hand_over(&mut planner, &objs);
    objs.endpoint_slices[9] = slice(9, 3);
    let plan = hand_over(&mut planner, &objs);
    assert_eq!(
        plan.delta.as_ref().unwrap().touched,
        vec![ServiceKey::new("t", "svc-9")]
    );
    // As the run loop does before each diff. ovsdb-server sends a transaction's update before
    // its reply, so the echo of the repair is already queued: svc-5 needs nothing more.
    absorb_queued(&mut session, m(&mut monitor), None);
    let changes = session.changes(&plan);
    assert_eq!(
        owners(&changes),
        BTreeSet::from([ServiceKey::new("t", "svc-8"), ServiceKey::new("t", "svc-9")]),
        "a skipped generation means a full diff"
    );
    write(&client, &mut monitor, &mut session, &plan, changes)
        .await
        .unwrap();
    absorb_until(m(&mut monitor), &mut session, 20).await;
    assert_eq!(our_names(&sb).len(), 20);
}

/// `--node-rows auto` against a real database: templates where the schema has
/// Chassis_Template_Var; a database that cannot be reached gives per-node rows (and the
/// explicit modes are kept as they are).
#[tokio::test]
async fn auto_node_rows_are_read_from_the_database() {
    use vipflow::plan::node_template::NodeRows;
    let sb = nb();
    let remote = format!("unix:{}", sb.nb_sock().display());
    assert_eq!(
        resolve_node_rows(&remote, NodeRows::Auto, &peer_backoff()).await,
        NodeRows::Template
    );
    assert_eq!(
        resolve_node_rows(&remote, NodeRows::PerNode, &peer_backoff()).await,
        NodeRows::PerNode
    );
    let gone = format!("unix:{}", sb.path().join("no-such.sock").display());
    let t = std::time::Instant::now();
    assert_eq!(
        resolve_node_rows(&gone, NodeRows::Auto, &peer_backoff()).await,
        NodeRows::PerNode
    );
    assert!(
        t.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(
        resolve_node_rows(&gone, NodeRows::Template, &peer_backoff()).await,
        NodeRows::Template
    );
}
