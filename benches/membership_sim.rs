//! The membership and the placement at scale: thousands of nodes running the real membership
//! core ([`vipflow::membership::MemberSet`]: foca's SWIM and the successors' watch, with
//! vipflow's sealed datagrams) on a simulated network in virtual time, and the placement of
//! 10,000 VIPs over them; each node's VIPs' successors watch it, as the agent sets them.
//! Printed as a table: time to find a failed node (the successors that take its VIPs, the
//! first node, every node), placement recomputation when a node dies, datagrams per second per
//! node, and false positives with 1% of the datagrams lost (and with one node's link at 5 %).
//!
//! Run: `cargo bench --bench membership_sim` (optionally `-- NODES VIPS [PERIOD_MS RTT_MS
//! SUSPECT_MS GOSSIP_MS]`, defaults 2000, 10000 and the agent's membership defaults). Virtual time: the figures do not depend on this machine's speed, except the
//! placement's, which is measured in wall time.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;
use vipflow::announce::placement::{Eligible, NodeName, Placement};
use vipflow::membership::MembershipSettings;
use vipflow::membership::sim::{SimNetwork, sim_node};
use vipflow::membership::watch::WatchFinding;

mod support;
use support::percentile_f64;

/// Nodes cut, one after the other, for the detection figures.
const FAILURES: usize = 10;

fn main() {
    let args = support::numbers();
    let nodes = args.first().copied().unwrap_or(2000);
    let vips = args.get(1).copied().unwrap_or(10_000);
    let d = MembershipSettings::default();
    let ms = |i: usize, dflt: std::time::Duration| {
        args.get(i)
            .map_or(dflt, |v| std::time::Duration::from_millis(*v as u64))
    };
    let settings = MembershipSettings {
        cluster_size: u32::try_from(nodes).unwrap_or(u32::MAX),
        probe_period: ms(2, d.probe_period),
        probe_rtt: ms(3, d.probe_rtt),
        suspect_to_down_after: ms(4, d.suspect_to_down_after),
        gossip_every: ms(5, d.gossip_every),
        ..d
    };
    println!(
        "membership at {nodes} nodes (virtual time, 1 ms latency), placement of {vips} VIPs; probe {:?}, probe rtt {:?}, suspicion {:?}, gossip every {:?}",
        settings.probe_period,
        settings.probe_rtt,
        settings.suspect_to_down_after,
        settings.gossip_every
    );

    // The placement first: who owns each VIP, and who takes it next (the successor, which
    // watches the owner).
    let names: BTreeSet<NodeName> = (0..nodes)
        .map(|i| Arc::from(sim_node(i).as_str()))
        .collect();
    let vip_set: BTreeMap<IpAddr, Eligible> = (0..vips)
        .map(|i| {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            (IpAddr::V4(Ipv4Addr::from(0x0a80_0000 + i)), Eligible::Any)
        })
        .collect();
    let mut p = Placement::default();
    let t = Instant::now();
    p.set_vips(vip_set.clone());
    p.set_live(names.clone());
    let initial = t.elapsed();
    let index = |n: &NodeName| -> usize { n[4..].parse().unwrap_or(0) };
    let mut watchers: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); nodes];
    for v in vip_set.keys() {
        if let (Some(o), Some(s)) = (p.owner(*v), p.successor(*v)) {
            watchers[index(o)].insert(index(&s));
        }
    }
    let per_node: Vec<f64> = watchers.iter().map(|w| w.len() as f64).collect();

    // A formed cluster (joining thousands of nodes one by one is not what is measured here,
    // and in one process it costs each node's work times the number of nodes).
    let wall = Instant::now();
    let mut net = SimNetwork::formed(nodes, &settings, 1, 0.0, 1);
    for (i, w) in watchers.iter().enumerate() {
        net.set_watchers(i, w.iter().copied());
    }
    net.run_until(5_000);
    let whole = (0..nodes).all(|i| net.live(i).len() == nodes);
    println!(
        "  a formed cluster of {nodes} nodes, whole after 5 s: {whole} (simulated in {:.1} s)",
        wall.elapsed().as_secs_f64()
    );

    // Steady traffic.
    let before: u64 = net.sent.iter().sum();
    let t0 = net.now_ms();
    net.run_until(t0 + 10_000);
    let sent: u64 = net.sent.iter().sum::<u64>() - before;
    let pps = sent as f64 / nodes as f64 / 10.0;

    // Failures: ten nodes cut one after the other.
    let mut first = Vec::new();
    let mut all = Vec::new();
    let mut successors = Vec::new();
    let mut missed = 0;
    for k in 0..FAILURES {
        let dead = 1 + k * (nodes - 1) / FAILURES;
        let name = sim_node(dead);
        // At a different point of the heartbeats' 20 ms each time.
        net.run_until(net.now_ms() + 1 + (k as u64 * 7) % 20);
        let cut_at = net.now_ms();
        let seen_before = net.downs.len();
        net.cut(dead);
        net.run_until(cut_at + 3_000);
        // Each of its VIPs' successor (the new owner): when it declared or learned the death.
        for s in &watchers[dead] {
            let t = net.downs[seen_before..]
                .iter()
                .find(|(_, obs, n)| obs == s && *n == name)
                .map_or(f64::INFINITY, |(t, _, _)| (*t - cut_at) as f64);
            successors.push(t);
        }
        let times: Vec<f64> = {
            let mut per: BTreeMap<usize, u64> = BTreeMap::new();
            for (t, obs, n) in &net.downs[seen_before..] {
                if *n == name {
                    per.entry(*obs).or_insert(*t - cut_at);
                }
            }
            per.values().map(|t| *t as f64).collect()
        };
        if times.len() + 1 < nodes - k {
            missed += 1;
        }
        if let Some(f) = times.iter().copied().reduce(f64::min) {
            first.push(f);
        }
        if let Some(l) = times.iter().copied().reduce(f64::max) {
            all.push(l);
        }
    }

    // Placement: a node's death among `nodes`, `vips` VIPs.
    let mut death_us = Vec::new();
    let mut moved = Vec::new();
    let mut live = names.clone();
    for k in 0..20 {
        let gone: NodeName = Arc::from(sim_node(k * 97 % nodes).as_str());
        live.remove(&gone);
        let t = Instant::now();
        let m = p.set_live(live.clone());
        death_us.push(t.elapsed().as_secs_f64() * 1e6);
        moved.push(m.len() as f64);
        live.insert(gone);
        p.set_live(live.clone());
    }

    // False positives: 1% loss, nobody fails, 60 s; node 2's link loses 5 % more (it watches
    // some owners, and its successors watch it).
    let mut lossy = SimNetwork::formed(nodes, &settings, 1, 0.01, 2);
    for (i, w) in watchers.iter().enumerate() {
        lossy.set_watchers(i, w.iter().copied());
    }
    lossy.set_link_loss(2, 0.05);
    lossy.run_until(5_000);
    let lossy_whole = (0..nodes).all(|i| lossy.live(i).len() == nodes);
    let from = lossy.downs.len();
    let events_from = lossy.watch_events.len();
    let t0 = lossy.now_ms();
    lossy.run_until(t0 + 60_000);
    let false_downs = &lossy.downs[from..];
    let falsely: BTreeSet<&String> = false_downs.iter().map(|(_, _, n)| n).collect();
    let watch_events = &lossy.watch_events[events_from..];
    let checks = watch_events
        .iter()
        .filter(|(_, _, e)| matches!(e, WatchFinding::Checking { .. }))
        .count();
    let confirmed = watch_events
        .iter()
        .filter(|(_, _, e)| matches!(e, WatchFinding::Confirmed { .. }))
        .count();

    println!();
    println!("{:<58} {:>14}", "figure", "value");
    let row = |name: &str, v: String| println!("{name:<58} {v:>14}");
    row(
        "successors of a failed node's VIPs, per node",
        format!(
            "{:.1} (max {:.0})",
            per_node.iter().sum::<f64>() / nodes as f64,
            per_node.iter().copied().fold(0.0, f64::max)
        ),
    );
    row(
        "failed node known to each new owner, p50 / p99 (ms)",
        format!(
            "{:.0} / {:.0}",
            percentile_f64(&successors, 50.0),
            percentile_f64(&successors, 99.0)
        ),
    );
    row(
        "failed node found by the first node, p50 / p99 (ms)",
        format!(
            "{:.0} / {:.0}",
            percentile_f64(&first, 50.0),
            percentile_f64(&first, 99.0)
        ),
    );
    row(
        "failed node known to every node, p50 / p99 (ms)",
        format!(
            "{:.0} / {:.0}",
            percentile_f64(&all, 50.0),
            percentile_f64(&all, 99.0)
        ),
    );
    row(
        &format!("failures some node never learned of (of {FAILURES})"),
        format!("{missed}"),
    );
    row(
        "placement of all VIPs, first time (ms)",
        format!("{:.1}", initial.as_secs_f64() * 1e3),
    );
    row(
        "placement after a node dies, p50 / p99 (us)",
        format!(
            "{:.0} / {:.0}",
            percentile_f64(&death_us, 50.0),
            percentile_f64(&death_us, 99.0)
        ),
    );
    row(
        "VIPs moved by a node's death, p50",
        format!("{:.0}", percentile_f64(&moved, 50.0)),
    );
    row("datagrams sent per node per second", format!("{pps:.1}"));
    row("1% loss: whole after 5 s", format!("{lossy_whole}"));
    row(
        "1% loss (node2 6 %), 60 s, nobody fails: false downs (events / nodes)",
        format!("{} / {}", false_downs.len(), falsely.len()),
    );
    row(
        "  false positives per node-hour",
        format!("{:.4}", falsely.len() as f64 / (nodes as f64 / 60.0)),
    );
    row(
        "  watch: checks / confirmed downs",
        format!("{checks} / {confirmed}"),
    );
    println!(
        "(simulated in {:.0} s of wall time)",
        wall.elapsed().as_secs_f64()
    );
}
