//! What an objects file can make the agent spend: the `vipflow agent` process on hostile
//! files, its peak memory (VmHWM) and CPU read from /proc. A file nested 100,000 levels is
//! refused in linear time, a file over `objects-max-bytes` is not read, a bad file is not
//! re-read until it changes, SIGTERM is answered while a big file is being parsed, and a valid
//! 56 MiB file costs no more than its objects do.
//!
//! `VIPFLOW_BIN=target/release/vipflow cargo test --test file_bounds -- --nocapture` runs the
//! same checks against the release build and prints its figures.

mod common;

use common::{kubectl_dump, write_objects};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use testkit::Sandbox;

/// The share of one core `pid` used over the next `over`.
fn cpu_share(pid: u32, over: Duration) -> f64 {
    let (c0, t0) = (cpu_ticks(pid), Instant::now());
    std::thread::sleep(over);
    (cpu_ticks(pid) - c0) as f64 / 100.0 / t0.elapsed().as_secs_f64()
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
}

struct Agent {
    child: Child,
    log: std::path::PathBuf,
}

impl Agent {
    fn start(sb: &Sandbox, objects: &Path) -> Agent {
        let log = sb.path().join("agent.log");
        let f = std::fs::File::create(&log).unwrap();
        let bin =
            std::env::var_os("VIPFLOW_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_vipflow").into());
        let child = Command::new(bin)
            .args([
                "agent",
                "--node-name",
                "node-a",
                "--poll-interval-ms",
                "20",
                "--objects",
            ])
            .arg(objects)
            .arg("--ovs-rundir")
            .arg(sb.path())
            .env("VIPFLOW_LOG", "info")
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap();
        Agent { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_log(&self, needle: &str, limit: Duration) -> Duration {
        let start = Instant::now();
        while start.elapsed() < limit {
            if self.log().contains(needle) {
                return start.elapsed();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("no {needle:?} within {limit:?}:\n{}", self.log());
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn good() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/services.yaml"))
        .unwrap()
}

#[test]
fn a_file_nested_100000_levels_is_refused_at_once_and_a_fix_is_taken() {
    let sb = Sandbox::openflow_only();
    let objects = sb.path().join("objects.yaml");
    write_objects(&objects, &good());
    let agent = Agent::start(&sb, &objects);
    agent.wait_log("synced", Duration::from_secs(20));
    let deep = format!(
        "{{\"kind\": \"List\", \"items\": {}{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let start = Instant::now();
    write_objects(&objects, &deep);
    let refused = agent.wait_log("nested more than 64 levels", Duration::from_secs(20));
    // The fixed file is taken right after.
    let mut fixed = good();
    fixed.push_str("\n# fixed\n");
    write_objects(&objects, &fixed);
    let n = agent.log().matches("objects loaded").count();
    let t = Instant::now();
    while agent.log().matches("objects loaded").count() == n {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "fixed file not taken:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let peak = testkit::proc_status_kib(agent.pid(), "VmHWM:");
    println!(
        "100,000-deep JSON: refused {refused:?} after it was written; the fixed file taken {:?} later; agent peak {} MiB",
        t.elapsed(),
        peak / 1024
    );
    assert!(start.elapsed() < Duration::from_secs(20));
    assert!(peak < 256 * 1024, "peak {peak} KiB");
}

#[test]
fn a_file_over_the_size_limit_is_not_read_and_a_bad_file_is_not_read_again() {
    let sb = Sandbox::openflow_only();
    let objects = sb.path().join("objects.yaml");
    write_objects(&objects, &good());
    let agent = Agent::start(&sb, &objects);
    agent.wait_log("synced", Duration::from_secs(20));

    // 200 MB of garbage: over the 64 MiB limit, refused without being read.
    let garbage = "\u{1}not yaml [ at all\n".repeat(200_000_000 / 19);
    write_objects(&objects, &garbage);
    let took = agent.wait_log("over the limit", Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(2500));
    let cpu = cpu_share(agent.pid(), Duration::from_secs(2));
    let peak = testkit::proc_status_kib(agent.pid(), "VmHWM:");
    println!(
        "200 MB garbage: refused {took:?} after it was written; then {:.1}% CPU; agent peak {} MiB",
        cpu * 100.0,
        peak / 1024
    );
    assert_eq!(
        agent.log().matches("over the limit").count(),
        1,
        "said once"
    );
    assert!(
        cpu < 0.05,
        "{:.1}% CPU on an unchanged bad file",
        cpu * 100.0
    );
    assert!(peak < 256 * 1024, "peak {peak} KiB");

    // 30 MB that does not parse, under the limit: parsed once, then left alone.
    let bad = format!(
        "kind: List\nitems:\n{}",
        "- {a: [1, 2\n".repeat(30_000_000 / 13)
    );
    // Its flow mappings never close, so it nests past the limit on line 35: refused there,
    // in time for the first lines, not for 30 MB of items.
    write_objects(&objects, &bad);
    let refused = agent.wait_log("does not parse", Duration::from_secs(5));
    assert!(
        agent.log().contains("line 35: nested more than 64 levels"),
        "refused where it breaks:\n{}",
        agent.log()
    );
    std::thread::sleep(Duration::from_millis(2500));
    let cpu = cpu_share(agent.pid(), Duration::from_secs(2));
    let peak = testkit::proc_status_kib(agent.pid(), "VmHWM:");
    println!(
        "30 MB unparsable: refused {refused:?} after it was written; then {:.1}% CPU; agent peak {} MiB",
        cpu * 100.0,
        peak / 1024
    );
    assert!(
        cpu < 0.05,
        "{:.1}% CPU on an unchanged bad file",
        cpu * 100.0
    );
}

#[test]
fn sigterm_is_answered_while_a_big_file_is_parsed() {
    let sb = Sandbox::openflow_only();
    let objects = sb.path().join("objects.yaml");
    write_objects(&objects, &good());
    let mut agent = Agent::start(&sb, &objects);
    agent.wait_log("synced", Duration::from_secs(20));
    // 60 MB of one big List of ConfigMaps (unknown kind: parsed, then skipped).
    let item = "- {apiVersion: v1, kind: ConfigMap, metadata: {name: x, namespace: y}, data: {k: vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv}}\n";
    let big = format!(
        "apiVersion: v1\nkind: List\nitems:\n{}",
        item.repeat(60_000_000 / item.len())
    );
    write_objects(&objects, &big);
    // Into the parse: the second read of the settle check is done.
    std::thread::sleep(Duration::from_millis(400));
    let start = Instant::now();
    let _ = Command::new("kill")
        .args(["-TERM", &agent.pid().to_string()])
        .status();
    while agent.child.try_wait().ok().flatten().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    println!(
        "SIGTERM during a 60 MB parse: exited in {:?}",
        start.elapsed()
    );
    assert!(start.elapsed() < Duration::from_secs(5));
}

/// The agent's peak memory after it has taken `yaml` (replacing a small file) and synced
/// br-ex, with the time from the write to the sync and the number of flows.
fn peak_after(yaml: &str) -> (u64, Duration, usize) {
    let sb = Sandbox::openflow_only();
    let objects = sb.path().join("objects.yaml");
    write_objects(&objects, &good());
    let agent = Agent::start(&sb, &objects);
    agent.wait_log("synced", Duration::from_secs(20));
    let synced = agent.log().matches("synced").count();
    let start = Instant::now();
    write_objects(&objects, yaml);
    agent.wait_log("objects loaded", Duration::from_secs(600));
    while agent.log().matches("synced").count() == synced {
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = start.elapsed();
    let flows = common::expect::ofctl_ours(&sb, "br-ex").len();
    (testkit::proc_status_kib(agent.pid(), "VmHWM:"), took, flows)
}

#[test]
fn a_valid_50_mb_file_costs_the_agent_little_beyond_its_objects() {
    // The same 10,000 Services and EndpointSlices twice: as `kubectl create` leaves them, and
    // as `kubectl apply` does, each with its last-applied configuration (a 56 MiB file). What
    // the second costs beyond the first is what the file's size costs.
    let services = 10_000;
    let slim = kubectl_dump(services, false);
    let (slim_mib, (slim_peak, _, flows)) = (mib(&slim), peak_after(&slim));
    drop(slim);
    let big = kubectl_dump(services, true);
    let (big_mib, (big_peak, took, big_flows)) = (mib(&big), peak_after(&big));
    drop(big);
    assert_eq!(flows, big_flows, "the same objects");
    let extra = big_peak.saturating_sub(slim_peak) as f64 / 1024.0;
    println!(
        "{services} Services, {flows} flows: agent peak {} MiB from a {slim_mib:.1} MiB file, {} MiB from a {big_mib:.1} MiB file (synced {took:?} after it was written): {extra:.0} MiB for {:.1} MiB more file, {:.2}x",
        slim_peak / 1024,
        big_peak / 1024,
        big_mib - slim_mib,
        extra / (big_mib - slim_mib)
    );
    assert!(big_mib > 50.0, "{big_mib:.1} MiB");
    // The file is held once while it is parsed and its items one at a time: its bytes cost
    // about their own size, where a whole parse tree cost many times it.
    assert!(
        extra < 2.0 * (big_mib - slim_mib),
        "{extra:.0} MiB for {:.1} MiB of file",
        big_mib - slim_mib
    );
}

fn mib(s: &str) -> f64 {
    s.len() as f64 / f64::from(1 << 20)
}
