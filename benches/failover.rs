//! Unplanned failover of an announced VIP, measured with real packets (issue 14): three testbed
//! nodes announce a VIP with the membership on; in each trial the owner's uplink is cut at the
//! wire while the client probes the VIP over UDP every 10 ms, and the trial prints when a
//! surviving node found the owner gone (its log), when the new owner sent its first gratuitous
//! ARP (its log), and when the first probe sent after the cut was answered (the outage). The
//! owner's uplink is then put back and the bed heals before the next trial.
//!
//! Run: `cargo bench --bench failover` (optionally `-- TRIALS`, default 20). Needs root.

#[path = "../tests/announce_bed/mod.rs"]
mod announce_bed;
mod support;
use support::percentile_f64;

use announce_bed::{AnnounceBed, Prober};

use std::path::PathBuf;

fn main() {
    let trials: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20);
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_vipflow"));
    let Some(bed) = AnnounceBed::start(&bin) else {
        eprintln!("SKIPPED: needs root and network namespaces");
        return;
    };
    let prober = Prober::start(bed.client_udp());
    println!(
        "unplanned failover: owner's uplink cut, client probing every 10 ms; 3 nodes, membership probe 200 ms, suspicion 400 ms"
    );
    println!(
        "{:>5} {:>6} {:>6} {:>12} {:>12} {:>12} {:>12}",
        "trial", "owner", "next", "detected ms", "GARP ms", "outage ms", "healed ms"
    );
    let (mut det, mut garp, mut out, mut heal) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    for n in 1..=trials {
        let t = bed.trial(&prober);
        println!(
            "{:>5} {:>6} {:>6} {:>12} {:>12} {:>12} {:>12}",
            n,
            t.owner,
            t.next,
            f(t.detect_ms),
            f(t.garp_ms),
            f(t.outage_ms),
            f(t.heal_ms)
        );
        det.extend(t.detect_ms);
        garp.extend(t.garp_ms);
        out.extend(t.outage_ms);
        heal.extend(t.heal_ms);
    }
    let row = |name: &str, v: &[f64]| {
        println!(
            "{name:<52} p50 {:>6.0} ms   p99 {:>6.0} ms   ({} of {trials} trials)",
            percentile_f64(v, 50.0),
            percentile_f64(v, 99.0),
            v.len()
        );
    };
    println!();
    row("detected", &det);
    row("first GARP", &garp);
    row("outage (first answer)", &out);
    row("healed (one answer again, after the uplink is back)", &heal);
    let p99 = percentile_f64(&out, 99.0) / 1000.0;
    println!();
    println!("outage p99 beside what users get today (issue 14's anchors):");
    for (name, secs) in [
        ("MetalLB L2, defaults (5-8 s)", 5.0),
        ("kube-vip, tuned (about 5 s)", 5.0),
        ("Cilium L2 announcements, default Lease (10-20 s)", 10.0),
        ("Antrea e2e allowance (15 s)", 15.0),
    ] {
        println!(
            "  {name:<50} {:>6.1}x faster (vipflow {p99:.2} s vs {secs:.0} s, the anchor's low end)",
            secs / p99
        );
    }
    println!("target: p99 <= 1 s");
}
