//! Faults injected during churn, one test each, printing the time to restore: measured from the
//! moment the peer is back (or the fix is written) until the invariant holds again, read with
//! ovs-ofctl / ovn-nbctl. Bounds asserted here are generous (about 10x the targets: 1 s for
//! OpenFlow, 2 s for the Northbound database); the printed figures are the claim.

use crate::common::{Agent, write_objects};
use crate::invariant::{Baseline, converged, violations};
use crate::proxy::CutProxy;
use crate::world::{Rng, World, seed};
use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use testkit::{Sandbox, our_cookie};
use vipflow::config::Config;

const OPENFLOW_BOUND: Duration = Duration::from_secs(10);
const NB_BOUND: Duration = Duration::from_secs(20);

/// A churned world and its current objects-file text.
struct Churn {
    rng: Rng,
    world: World,
    text: String,
}

impl Churn {
    fn new(test: &str, services: usize) -> Churn {
        let mut rng = Rng::new(seed(test));
        let world = World::new(&mut rng, services, services * 2);
        let text = world.file_text();
        Churn { rng, world, text }
    }

    /// 50 more operations; the new text.
    fn round(&mut self) -> String {
        for _ in 0..50 {
            self.world.step(&mut self.rng);
        }
        self.text = self.world.file_text();
        self.text.clone()
    }
}

fn edit(c: &mut Config) {
    c.node_name = "node-0".into();
}

async fn must_converge(
    h: &Agent,
    text: &str,
    base: &Baseline,
    nb: bool,
    limit: Duration,
    what: &str,
) -> Duration {
    match converged(&h.sb, &h.cfg, text, base, nb, limit).await {
        Ok(t) => t,
        Err(bad) => panic!("{what}: not restored within {limit:?}: {bad:#?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ovs_vswitchd_killed_during_churn_flows_return_after_short_and_long_outages() {
    let mut c = Churn::new("ovs-vswitchd outage", 40);
    let sb = Sandbox::openflow_only();
    let base = Baseline::prepare(&sb, false);
    let mut h = Agent::start(sb, false, edit, &c.text).await;
    for (label, outage) in [("short", Duration::ZERO), ("long", Duration::from_secs(4))] {
        for _ in 0..3 {
            let t = c.round();
            h.update(&t).await;
        }
        h.sb.kill("ovs-vswitchd");
        let down = Instant::now();
        // The objects keep changing while the switch is gone.
        loop {
            write_objects(&h.objects, &c.round());
            tokio::time::sleep(Duration::from_millis(250)).await;
            if down.elapsed() >= outage {
                break;
            }
        }
        h.sb.restart_vswitchd();
        let back = Instant::now();
        base.restore_foreign_flows(&h.sb);
        must_converge(&h, &c.text, &base, false, OPENFLOW_BOUND, label).await;
        println!(
            "ovs-vswitchd {label} outage ({:?}): flows == plan {:?} after br-ex.mgmt was back",
            back - down,
            back.elapsed()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn northbound_restarted_during_churn_on_the_same_and_a_fresh_database() {
    let mut c = Churn::new("NB restart", 40);
    let sb = Sandbox::start();
    let mut base = Baseline::prepare(&sb, true);
    let mut h = Agent::start(sb, true, edit, &c.text).await;
    for fresh in [false, true] {
        for _ in 0..3 {
            let t = c.round();
            h.update(&t).await;
        }
        // A change written while the server restarts.
        write_objects(&h.objects, &c.round());
        h.sb.restart_nb(fresh);
        let back = Instant::now();
        if fresh {
            base.restore_northbound(&h.sb);
        }
        must_converge(&h, &c.text, &base, true, NB_BOUND, "NB restart").await;
        let label = if fresh { "a fresh" } else { "the same" };
        println!(
            "NB ovsdb-server restarted on {label} database: rows == plan {:?} after it accepted again",
            back.elapsed()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openflow_connection_cut_mid_bundle_leaves_the_old_flows_whole() {
    let mut c = Churn::new("cut mid-bundle", 40);
    let sb = Sandbox::openflow_only();
    let base = Baseline::prepare(&sb, false);
    let proxy = CutProxy::start(&sb.path().join("relay.mgmt"), &sb.mgmt_sock("br-ex"));
    let target = format!("unix:{}", proxy.path.display());
    let mut h = Agent::start(
        sb,
        false,
        |cfg| {
            edit(cfg);
            cfg.bridges[0].target = Some(target);
        },
        &c.text,
    )
    .await;
    let mut cuts = 0;
    for _ in 0..20 {
        let old = c.text.clone();
        proxy.arm(3, Duration::from_millis(1500));
        write_objects(&h.objects, &c.round());
        let t0 = Instant::now();
        while !proxy.was_cut() && t0.elapsed() < Duration::from_secs(3) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if !proxy.was_cut() {
            // The change needed fewer than 3 flow mods: it went through whole.
            proxy.arm(0, Duration::ZERO);
            must_converge(&h, &c.text, &base, false, OPENFLOW_BOUND, "small change").await;
            continue;
        }
        // While the switch is away, what it holds is the old plan, whole: the bundle was
        // discarded, not half-applied.
        // (A check that ended after the switch was back proves nothing: the agent may have
        // written the new plan by then.)
        let away = || proxy.rebound().is_none_or(|t| t < t0);
        let mut checked = 0;
        while checked < 3 && away() {
            let bad = violations(&h.sb, &h.cfg, &old, &base, false);
            if away() {
                assert!(bad.is_empty(), "after a cut mid-bundle: {bad:#?}");
                checked += 1;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(checked > 0, "no check while the switch was away");
        while proxy.rebound().is_none_or(|t| t < t0) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let back = proxy.rebound().unwrap_or_else(Instant::now);
        must_converge(&h, &c.text, &base, false, OPENFLOW_BOUND, "after the cut").await;
        println!(
            "cut mid-bundle: old flows whole while away; new plan on the bridge {:?} after the switch was back",
            back.elapsed()
        );
        cuts += 1;
        if cuts == 3 {
            break;
        }
        let t = c.round();
        h.update(&t).await;
    }
    assert_eq!(cuts, 3, "three bundles cut");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_uplink_deleted_and_recreated_during_churn_takes_the_flows_along() {
    let mut c = Churn::new("uplink recreated", 40);
    let sb = Sandbox::openflow_only();
    let mut base = Baseline::prepare(&sb, false);
    let mut h = Agent::start(sb, false, edit, &c.text).await;
    for ofport in [7u32, 9] {
        for _ in 0..2 {
            let t = c.round();
            h.update(&t).await;
        }
        h.sb.vsctl(&["del-port", "br-ex", "eth0"]);
        write_objects(&h.objects, &c.round());
        tokio::time::sleep(Duration::from_millis(300)).await;
        h.sb.add_dummy_port("eth0", ofport);
        let back = Instant::now();
        base.resolved.uplink = ofport;
        must_converge(
            &h,
            &c.text,
            &base,
            false,
            OPENFLOW_BOUND,
            "uplink recreated",
        )
        .await;
        println!(
            "uplink deleted and recreated as port {ofport}: flows follow {:?} after it was back",
            back.elapsed()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_objects_file_made_garbage_empty_or_truncated_loses_nothing_and_the_fix_is_taken() {
    let mut c = Churn::new("bad objects file", 40);
    let sb = Sandbox::start();
    let base = Baseline::prepare(&sb, true);
    let mut h = Agent::start(sb, true, edit, &c.text).await;
    for bad in ["garbage", "empty", "truncated"] {
        let t = c.round();
        h.update(&t).await;
        let good = c.text.clone();
        let text = match bad {
            "garbage" => "\u{1}\u{2}not: [yaml".repeat(100),
            "empty" => String::new(),
            _ => good[..good.len() / 2].to_string(),
        };
        // Written in place, as a shell redirection does.
        std::fs::write(&h.objects, &text).unwrap();
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let v = violations(&h.sb, &h.cfg, &good, &base, true);
            assert!(v.is_empty(), "with a {bad} file: {v:#?}");
        }
        let fixed = c.round();
        std::fs::write(&h.objects, &fixed).unwrap();
        let took = must_converge(&h, &fixed, &base, true, NB_BOUND, bad).await;
        println!(
            "objects file {bad} for 1 s: nothing lost; the fixed file applied {took:?} after it was written"
        );
    }
}

/// vipflow's flows on br-ex, each (without its counters) with its age in seconds: a flow
/// deleted and added again starts over at zero, one left alone keeps aging.
fn flow_ages(sb: &Sandbox) -> BTreeMap<String, f64> {
    let ours = our_cookie();
    sb.ofctl(&["dump-flows", "br-ex"])
        .lines()
        .filter(|l| l.trim_start().starts_with(&ours))
        .filter_map(|l| {
            let mut age = None;
            let key: Vec<&str> = l
                .trim()
                .split(", ")
                .filter(|f| {
                    if let Some(d) = f.strip_prefix("duration=") {
                        age = d.trim_end_matches('s').parse().ok();
                        return false;
                    }
                    !["n_packets=", "n_bytes=", "idle_age=", "hard_age="]
                        .iter()
                        .any(|p| f.starts_with(p))
                })
                .collect();
            Some((key.join(", "), age?))
        })
        .collect()
}

/// The agent as operators run it, a `vipflow agent` process (SIGKILLed on drop).
struct AgentProc(Option<Child>);

impl AgentProc {
    fn start(sb: &Sandbox, objects: &std::path::Path) -> AgentProc {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(sb.path().join("vipflow.log"))
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_vipflow"))
            .arg("agent")
            .arg("--objects")
            .arg(objects)
            .args(["--node-name", "node-0"])
            .arg("--ovs-rundir")
            .arg(sb.path())
            .arg("--nb-remote")
            .arg(format!("unix:{}", sb.nb_sock().display()))
            .args(["--poll-interval-ms", "20"])
            .args(["--nb-switch", "pods"])
            .env("VIPFLOW_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        AgentProc(Some(child))
    }

    fn signal(&mut self, sig: &str) -> Duration {
        let start = Instant::now();
        let Some(mut c) = self.0.take() else {
            return Duration::ZERO;
        };
        let _ = Command::new("kill")
            .args([sig, &c.id().to_string()])
            .status();
        while start.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(_)) = c.try_wait() {
                return start.elapsed();
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = c.kill();
        let _ = c.wait();
        panic!("the agent did not exit within 20 s of {sig}");
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// UUID of each of vipflow's rows, by name: a row deleted and created again gets a new one.
fn row_uuids(sb: &Sandbox) -> BTreeMap<String, String> {
    sb.nbctl(&[
        "--format=csv",
        "--no-headings",
        "--columns=name,_uuid",
        "find",
        "Load_Balancer",
        "external_ids:\"vipflow.io/owner\"!=\"\"",
    ])
    .lines()
    .filter_map(|l| {
        let (n, u) = l.split_once(',')?;
        Some((n.trim_matches('"').to_string(), u.to_string()))
    })
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_or_stopped_and_restarted_deletes_nothing_still_desired() {
    let mut c = Churn::new("agent restart", 40);
    let sb = Sandbox::start();
    let base = Baseline::prepare(&sb, true);
    let objects = sb.path().join("objects.json");
    write_objects(&objects, &c.text);
    let mut cfg = Config {
        node_name: "node-0".into(),
        ovs_rundir: sb.path().to_path_buf(),
        objects: Some(objects.clone()),
        nb_remote: Some(format!("unix:{}", sb.nb_sock().display())),
        ..Config::default()
    };
    cfg.northbound.switches = vec!["pods".into()];
    // The binary decides `--node-rows auto` from the database; the checker plans the same.
    cfg.northbound.node_rows = vipflow::reconcile::northbound::resolve_node_rows(
        &format!("unix:{}", sb.nb_sock().display()),
        cfg.northbound.node_rows,
        &vipflow::reconcile::northbound::peer_backoff(),
    )
    .await;
    let mut agent = AgentProc::start(&sb, &objects);
    let h = Probe { sb, cfg };
    h.converge(&c.text, &base, "first sync").await;
    for (label, sig) in [("SIGKILL", "-KILL"), ("SIGTERM", "-TERM")] {
        for _ in 0..3 {
            write_objects(&objects, &c.round());
            h.converge(&c.text, &base, "churn").await;
        }
        let rows_before = row_uuids(&h.sb);
        let ages_before = flow_ages(&h.sb);
        let dumped = Instant::now();
        let exited = agent.signal(sig);
        // What the agent left behind is still the plan: stopping withdraws nothing.
        let v = violations(&h.sb, &h.cfg, &c.text, &base, true);
        assert!(v.is_empty(), "after {label}: {v:#?}");
        // A change while it is down, then the agent again.
        write_objects(&objects, &c.round());
        agent = AgentProc::start(&h.sb, &objects);
        let took = h.converge(&c.text, &base, label).await;
        // Every flow there before and still wanted aged on: none was deleted and added again.
        let between = dumped.elapsed().as_secs_f64();
        let ages_after = flow_ages(&h.sb);
        let kept: Vec<_> = ages_before
            .keys()
            .filter(|k| ages_after.contains_key(*k))
            .collect();
        let renewed: Vec<_> = kept
            .iter()
            .filter(|k| ages_after[**k] + 0.05 < ages_before[**k] + between)
            .collect();
        assert!(
            renewed.is_empty(),
            "{label}: still-desired flows deleted and added again: {renewed:?}"
        );
        assert!(
            kept.len() > 100,
            "most flows outlive one round: {}",
            kept.len()
        );
        let rows_after = row_uuids(&h.sb);
        let recreated: Vec<_> = rows_before
            .iter()
            .filter(|(n, u)| rows_after.get(*n).is_some_and(|a| a != *u))
            .map(|(n, _)| n)
            .collect();
        assert!(
            recreated.is_empty(),
            "{label}: rows deleted and created again: {recreated:?}"
        );
        println!(
            "{label}: exited in {exited:?}; restarted agent converged in {took:?}; {} still-desired \
             flows kept (none re-added), {} rows kept by UUID",
            kept.len(),
            rows_before.len(),
        );
    }
}

/// The live bridge and database of a test whose agent is a separate process.
struct Probe {
    sb: Sandbox,
    cfg: Config,
}

impl Probe {
    async fn converge(&self, text: &str, base: &Baseline, what: &str) -> Duration {
        match converged(&self.sb, &self.cfg, text, base, true, NB_BOUND).await {
            Ok(t) => t,
            Err(bad) => panic!(
                "{what}: {bad:#?}\nagent log:\n{}",
                std::fs::read_to_string(self.sb.path().join("vipflow.log")).unwrap_or_default()
            ),
        }
    }
}
