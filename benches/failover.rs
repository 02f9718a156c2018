//! Unplanned failover of an announced VIP, measured with real packets as a user meets it:
//! three testbed nodes announce a VIP with the membership on, a client on the MAC-learning wire
//! probes it over UDP every 10 ms. Two scenarios, `TRIALS` each: the owner's uplink cut at the
//! wire, and the owner's agent and ovs-vswitchd SIGKILLed at once. Each trial prints when a
//! surviving node found the owner gone (its log: the successor's watch, or SWIM), when the new
//! owner sent its first gratuitous ARP (its log), and when the first probe sent after the fault
//! was answered (the outage); the owner is then brought back and the bed heals. Last, the
//! false-positive run: the non-owners' agents are stopped for 150 ms in turn, twice a second,
//! for `PAUSE_SECS`, and nothing may move.
//!
//! Run: `cargo bench --bench failover` (optionally `-- TRIALS PAUSE_SECS`, default 20 and 300).
//! Needs root.

#[path = "../tests/announce_bed/mod.rs"]
mod announce_bed;
mod support;
use support::percentile_f64;

use announce_bed::{AnnounceBed, Fault, Prober};

use std::path::PathBuf;
use std::time::Duration;

/// The budget: detection, the answer flow and the gratuitous ARP, at p99.
const BUDGET_MS: f64 = 300.0;

fn main() {
    let args = support::numbers();
    let trials = args.first().copied().unwrap_or(20);
    let pause_secs = args.get(1).map_or(300, |n| *n as u64);
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_vipflow"));
    let Some(mut bed) = AnnounceBed::start(&bin) else {
        eprintln!("SKIPPED: needs root and network namespaces");
        return;
    };
    let prober = Prober::start(bed.client_udp());
    println!(
        "unplanned failover, client probing every 10 ms on a MAC-learning wire; 3 nodes, heartbeat 20 ms, miss 100 ms, confirmed through the others; SWIM behind it (probe 200 ms, suspicion 400 ms)"
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at start: {}", load.trim());
    let mut summary = Vec::new();
    for (fault, name) in [
        (Fault::Cut, "owner cut from the wire"),
        (Fault::Kill, "owner's agent and ovs-vswitchd SIGKILLed"),
    ] {
        println!();
        println!("{name}:");
        println!(
            "{:>5} {:>6} {:>6} {:>12} {:>9} {:>10} {:>12} {:>10}",
            "trial", "owner", "next", "detected ms", "by", "GARP ms", "answered ms", "healed ms"
        );
        let (mut det, mut garp, mut out) = (Vec::new(), Vec::new(), Vec::new());
        let mut by_watch = 0;
        let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
        for n in 1..=trials {
            let t = bed.trial(&prober, fault);
            let by = match (t.detected_by, t.by_watch) {
                (Some(n), true) => format!("node{n} w"),
                (Some(n), false) => format!("node{n} s"),
                (None, _) => "-".into(),
            };
            println!(
                "{:>5} {:>6} {:>6} {:>12} {:>9} {:>10} {:>12} {:>10}",
                n,
                t.owner,
                t.next,
                f(t.detect_ms),
                by,
                f(t.garp_ms),
                f(t.outage_ms),
                f(t.heal_ms)
            );
            det.extend(t.detect_ms);
            garp.extend(t.garp_ms);
            out.extend(t.outage_ms);
            by_watch += usize::from(t.by_watch);
        }
        println!("  (by: w = the successor's watch confirmed it, s = SWIM's suspicion ran out)");
        let row = |what: &str, v: &[f64]| {
            println!(
                "  {what:<28} p50 {:>6.0} ms   p99 {:>6.0} ms   ({} of {trials} trials)",
                percentile_f64(v, 50.0),
                percentile_f64(v, 99.0),
                v.len()
            );
        };
        row("detected", &det);
        row("first GARP", &garp);
        row("first answered probe", &out);
        println!("  found by the watch in {by_watch} of {trials} trials");
        summary.push((name, det, garp, out));
    }

    println!();
    println!(
        "outage beside what users get elsewhere (their defaults; ratio = their time / vipflow's):"
    );
    let anchors = [
        ("MetalLB L2 (5-8 s)", 5.0, 8.0),
        ("kube-vip (about 5 s)", 5.0, 5.0),
        ("Cilium L2 announcements (10-20 s)", 10.0, 20.0),
        ("frr-k8s BFD defaults (0.9 s)", 0.9, 0.9),
    ];
    for (name, _, _, out) in &summary {
        let (p50, p99) = (
            percentile_f64(out, 50.0) / 1e3,
            percentile_f64(out, 99.0) / 1e3,
        );
        println!("  {name}: p50 {:.3} s, p99 {:.3} s", p50, p99);
        for (anchor, lo, hi) in anchors {
            let r = |x: f64| {
                if lo == hi {
                    format!("{:.1}x", lo / x)
                } else {
                    format!("{:.1}-{:.1}x", lo / x, hi / x)
                }
            };
            println!("    {anchor:<36} p50 {:>11}   p99 {:>11}", r(p50), r(p99));
        }
    }
    println!(
        "budget: detection + flow + GARP <= {BUDGET_MS:.0} ms at p99: {}",
        summary
            .iter()
            .map(|(n, _, g, _)| format!("{n}: {:.0} ms", percentile_f64(g, 99.0)))
            .collect::<Vec<_>>()
            .join(", ")
    );

    if pause_secs > 0 {
        bed.settled(&prober);
        let others = bed.watchers_only();
        let since = std::time::SystemTime::now();
        let (owners, pauses) = bed.pause_agents(
            &others,
            Duration::from_millis(150),
            Duration::from_millis(500),
            Duration::from_secs(pause_secs),
        );
        let checks = bed.log_lines_after(since, "watch: no heartbeat").len();
        let cleared = bed
            .log_lines_after(since, "watch: the owner is alive")
            .len();
        let downs = bed.log_lines_after(since, "membership: node down").len();
        println!();
        println!(
            "false positives: the agent of node{} (a successor that owns nothing) SIGSTOPped for 150 ms twice a second, {pause_secs} s ({pauses} pauses)",
            others
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(", node")
        );
        println!(
            "  VIP moves: {}   nodes declared down: {downs}   watch checks: {checks} (cleared by others: {cleared})",
            owners.len() - 1
        );
        // The successor's link loses the owner's datagrams for 300 ms every 2 s, for the same
        // time: it misses heartbeats, asks, and is told the owner lives.
        let owner = bed.settled(&prober);
        let since = std::time::SystemTime::now();
        let times = (pause_secs / 2) as usize;
        bed.lose_from(
            others[0],
            owner,
            Duration::from_millis(300),
            Duration::from_millis(1700),
            times,
        );
        let checks = bed.log_lines_after(since, "watch: no heartbeat").len();
        let cleared = bed
            .log_lines_after(since, "watch: the owner is alive")
            .len();
        let downs = bed.log_lines_after(since, "membership: node down").len();
        let moved = bed.answering() != [owner];
        println!(
            "false positives: node{}'s link loses node{owner}'s datagrams for 300 ms every 2 s, {} s ({times} times)",
            others[0],
            times * 2
        );
        println!(
            "  VIP moved: {moved}   nodes declared down: {downs}   watch checks: {checks} (cleared by others: {cleared})"
        );
    }
}
