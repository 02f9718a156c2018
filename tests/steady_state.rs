//! A steady state is quiet: an announcing agent whose objects do not change writes no flow,
//! repairs nothing and announces nothing after its first sync, through the read-back of its
//! flows (at most every 30 s beside the switch's flow monitor), in every bridge mode.

mod common;

use common::LoggedAgent;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testkit::Sandbox;

/// The agent on a sandbox with `extra` bridge settings, watched for `watch` after its first
/// sync: the log lines that say it wrote, repaired or announced, counted.
fn quiet(extra: &[&str], watch: Duration) -> (String, usize, usize, usize) {
    let sb = Sandbox::openflow_only();
    let objects = sb.path().join("objects.yaml");
    common::write_objects(&objects, &common::base_yaml());
    let log = sb.path().join("agent.log");
    let f = std::fs::File::create(&log).expect("agent log");
    let child = Command::new(env!("CARGO_BIN_EXE_vipflow"))
        .args(["agent", "--announce", "--node-name", "node-a", "--objects"])
        .arg(&objects)
        .arg("--ovs-rundir")
        .arg(sb.path())
        .args(extra)
        .env("VIPFLOW_LOG", "info")
        .stdin(Stdio::null())
        .stdout(f.try_clone().expect("log"))
        .stderr(f)
        .spawn()
        .expect("start the agent");
    let agent = LoggedAgent::new(child, log);
    let start = Instant::now();
    while !agent.log().contains("synced") {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no first sync:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    let count = |l: &str, what: &str| l.matches(what).count();
    let before = agent.log();
    std::thread::sleep(watch);
    let after = agent.log();
    let new = |what: &str| count(&after, what) - count(&before, what);
    (
        after.clone(),
        new("synced"),
        new("changed by someone else"),
        new("announced:"),
    )
}

#[test]
fn an_unchanged_announcing_agent_writes_repairs_and_announces_nothing() {
    // Past the read-back's 30 s beside a flow monitor.
    let watch = Duration::from_secs(35);
    let modes: [(&str, &[&str]); 4] = [
        ("gateway", &[]),
        ("gateway, VLAN 100", &["--vlan", "100"]),
        (
            "underlay",
            &["--profile", "underlay", "--router-mac", "0a:58:0a:f4:00:01"],
        ),
        (
            "underlay, VLAN 100",
            &[
                "--profile",
                "underlay",
                "--router-mac",
                "0a:58:0a:f4:00:01",
                "--vlan",
                "100",
            ],
        ),
    ];
    let results: Vec<_> = std::thread::scope(|s| {
        let runs: Vec<_> = modes
            .iter()
            .map(|(name, extra)| s.spawn(move || (*name, quiet(extra, watch))))
            .collect();
        runs.into_iter()
            .map(|r| r.join().expect("a mode panicked"))
            .collect()
    });
    let mut fails = Vec::new();
    for (name, (log, writes, repairs, announced)) in &results {
        println!(
            "{name}: over {watch:?} of steady state: {writes} syncs, {repairs} repairs, {announced} announcements"
        );
        if writes + repairs + announced > 0 {
            fails.push(format!("{name}:\n{log}"));
        }
    }
    assert!(fails.is_empty(), "{}", fails.join("\n"));
}
