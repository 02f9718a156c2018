//! Install N ARP-bypass flows in one bundle: vipflow's `openflow` crate vs
//! `ovs-ofctl -O OpenFlow13 --bundle add-flows`, against the same real ovs-vswitchd, same run.
//!
//! Run: `cargo bench -p openflow --bench bundle_install` (optionally `-- 10000 50000 100000`).
//! Each side is timed from "the desired flows are known" to "the switch committed them":
//! vipflow builds, encodes and sends its messages; ovs-ofctl starts, parses its flow file,
//! encodes and sends. The flow table is emptied before every run; each figure is the median of
//! several alternating runs.

#[path = "../tests/common/mod.rs"]
mod common;

use common::*;
use openflow::{Config, Connection, Message};
use std::io::Write;
use std::time::{Duration, Instant};
use testkit::Sandbox;

const RUNS: usize = 5;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn clear(sb: &Sandbox) {
    sb.ofctl(&["del-flows", "br-ex"]);
}

fn main() {
    let sizes: Vec<u32> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect::<Vec<_>>();
    let sizes = if sizes.is_empty() {
        vec![10_000, 50_000]
    } else {
        sizes
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let sb = Sandbox::openflow_only();
    let target = format!("unix:{}", sb.mgmt_sock("br-ex").display());
    let (conn, _events) = rt
        .block_on(Connection::connect(&target, Config::default()))
        .expect("connect");

    println!("bundle install of N ARP-bypass flows into a real ovs-vswitchd (median of {RUNS})");
    println!(
        "{:>8}  {:>12}  {:>12}  {:>8}",
        "N", "vipflow", "ovs-ofctl", "ratio"
    );
    for &n in &sizes {
        let file = sb.path().join(format!("flows-{n}.txt"));
        let mut f = std::fs::File::create(&file).expect("flow file");
        for i in 0..n {
            writeln!(f, "{}", arp_bypass_text(i)).expect("write flow file");
        }
        drop(f);
        let file = file.to_string_lossy().into_owned();

        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for _ in 0..RUNS {
            clear(&sb);
            let t = Instant::now();
            let msgs: Vec<Message> = (0..n).map(|i| Message::FlowMod(arp_bypass(i))).collect();
            rt.block_on(conn.bundle(&msgs)).expect("bundle");
            ours.push(t.elapsed());
            check_count(&rt, &conn, n);

            clear(&sb);
            let t = Instant::now();
            sb.ofctl(&["--bundle", "add-flows", "br-ex", &file]);
            theirs.push(t.elapsed());
            check_count(&rt, &conn, n);
        }
        let (o, t) = (median(ours), median(theirs));
        println!(
            "{:>8}  {:>9.1} ms  {:>9.1} ms  {:>7.2}x",
            n,
            o.as_secs_f64() * 1e3,
            t.as_secs_f64() * 1e3,
            o.as_secs_f64() / t.as_secs_f64()
        );
    }
}

/// Both sides must really have installed the flows, or the figures mean nothing.
fn check_count(rt: &tokio::runtime::Runtime, conn: &Connection, n: u32) {
    let req = openflow::FlowStatsRequest::by_cookie(COOKIE_PREFIX, COOKIE_MASK);
    let got = rt.block_on(conn.flow_stats(req)).expect("flow stats").len();
    assert_eq!(got, n as usize, "flows installed");
}
