//! frr-k8s mode at scale, in memory (the planner as the elected agent runs it): what one
//! externalTrafficPolicy Cluster VIP change costs in API writes, bytes written and the leader's
//! planning time, beside per-node objects as MetalLB's speaker writes them in its frr-k8s mode
//! (one `metallb-<node>` object per node, its prefixes listed in the router and again in each
//! neighbor's allowed list), computed in the same run from the same snapshot.
//!
//! Run: `cargo bench --bench frr_k8s` (optionally `-- NODES VIPS`, default 2000 10000).

mod support;
use support::{ms, percentile};

use std::sync::Arc;
use std::time::{Duration, Instant};
use vipflow::frrk8s::objects::{ALLOW_ALL, FrrConfiguration};
use vipflow::model::{ModelOptions, Objects};
use vipflow::plan::planner::{FrrK8sPools, Planner};

const NS: &str = "frr-k8s-system";
const CHANGES: usize = 50;

fn vip(i: usize) -> String {
    format!("10.64.{}.{}", i / 250, i % 250 + 1)
}

fn service(i: usize) -> String {
    format!(
        "- {{apiVersion: v1, kind: Service, metadata: {{name: c{i}, namespace: s}}, spec: {{externalIPs: [{}], ports: [{{port: 80, protocol: TCP}}]}}}}\n",
        vip(i)
    )
}

fn parse(text: &str) -> Objects {
    let loaded = vipflow::decode::parse(&format!("apiVersion: v1\nkind: List\nitems:\n{text}"))
        .expect("objects");
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    loaded.objects
}

fn size(o: &FrrConfiguration) -> usize {
    serde_json::to_vec(o).map_or(0, |v| v.len())
}

fn main() {
    let args = support::numbers();
    let nodes = args.first().copied().unwrap_or(2000);
    let vips = args.get(1).copied().unwrap_or(10_000);
    let mut text = String::new();
    for i in 0..nodes {
        text.push_str(&format!(
            "- {{apiVersion: v1, kind: Node, metadata: {{name: node-{i:04}, labels: {{kubernetes.io/hostname: node-{i:04}}}}}}}\n"
        ));
    }
    text.push_str(
        "- {apiVersion: vipflow.io/v1alpha1, kind: BGPPeer, metadata: {name: tor}, spec: {myASN: 64513, peerASN: 64512, peerAddress: 10.9.0.1}}\n\
         - {apiVersion: vipflow.io/v1alpha1, kind: VipPool, metadata: {name: big}, spec: {addresses: [10.64.0.0/16]}}\n\
         - {apiVersion: vipflow.io/v1alpha1, kind: BGPAdvertisement, metadata: {name: all}, spec: {communities: ['64512:7']}}\n",
    );
    for i in 0..vips {
        text.push_str(&service(i));
    }
    let base = parse(&text);
    // The same snapshots for both planners: one more Service each time.
    let mut snapshots = Vec::new();
    let mut current = base.clone();
    for c in 0..CHANGES {
        let extra = parse(&service(vips + c));
        current
            .services
            .extend(extra.services.iter().map(Arc::clone));
        snapshots.push(current.clone());
    }
    println!(
        "frr-k8s mode: one externalTrafficPolicy Cluster VIP more, {CHANGES} times, at {nodes} nodes and {vips} VIPs (one peer, one community)"
    );
    // Each change's planning time, its writes and bytes, and the last shared objects.
    type Run = (Vec<Duration>, Vec<(usize, usize)>, Option<FrrK8sPools>);
    let run = |leading: bool| -> Run {
        let mut p =
            Planner::new(ModelOptions::default(), &[], 0x7f1f, None).advertising_as("node-0000");
        p.write_frr_k8s_pools(leading.then_some(NS));
        let mut last = p.update(&base).frr_k8s_pools;
        let mut times = Vec::new();
        let mut writes = Vec::new();
        for s in &snapshots {
            let t = Instant::now();
            let plans = p.update(s);
            times.push(t.elapsed());
            if let (Some(before), Some(now)) = (&last, &plans.frr_k8s_pools) {
                let changed: Vec<&FrrConfiguration> = now
                    .iter()
                    .filter(|(n, o)| before.get(*n) != Some(*o))
                    .map(|(_, o)| o)
                    .collect();
                let gone = before.keys().filter(|n| !now.contains_key(*n)).count();
                writes.push((changed.len() + gone, changed.iter().map(|o| size(o)).sum()));
            }
            last = plans.frr_k8s_pools;
        }
        (times, writes, last)
    };
    let (plain, _, _) = run(false);
    let (leading, writes, last) = run(true);
    let shared = last.expect("shared objects");
    // MetalLB's speakers: every node's own object, every prefix listed twice, rewritten by
    // every node for every change.
    let one = shared.values().next().expect("an object").clone();
    let mut metallb = one.clone();
    for r in &mut metallb.spec.bgp.routers {
        let all = r.prefixes.clone();
        for n in &mut r.neighbors {
            if n.to_advertise.allowed.mode.as_deref() == Some(ALLOW_ALL) {
                n.to_advertise.allowed.mode = None;
                n.to_advertise.allowed.prefixes.clone_from(&all);
            }
        }
    }
    metallb.spec.node_selector = Default::default();
    let metallb_bytes = size(&metallb);
    let p = |v: &[Duration], q: f64| ms(percentile(v, q));
    let writes_p = |q: f64| {
        let mut w: Vec<usize> = writes.iter().map(|(n, _)| *n).collect();
        w.sort_unstable();
        w[((q / 100.0) * w.len() as f64).ceil() as usize - 1]
    };
    let bytes_p50 = {
        let mut b: Vec<usize> = writes.iter().map(|(_, b)| *b).collect();
        b.sort_unstable();
        b[b.len() / 2]
    };
    println!();
    println!(
        "| per Cluster VIP change | vipflow (shared objects) | per-node objects (MetalLB's frr-k8s mode) | ratio |"
    );
    println!("|---|---|---|---|");
    println!(
        "| API writes, p50 / max | {} / {} | {nodes} | {:.0}× fewer |",
        writes_p(50.0),
        writes_p(100.0),
        nodes as f64 / writes_p(50.0).max(1) as f64
    );
    println!(
        "| bytes written, p50 | {:.0} KB | {:.1} MB ({nodes} × {:.0} KB) | {:.0}× fewer |",
        bytes_p50 as f64 / 1e3,
        (nodes * metallb_bytes) as f64 / 1e6,
        metallb_bytes as f64 / 1e3,
        (nodes * metallb_bytes) as f64 / bytes_p50.max(1) as f64
    );
    println!(
        "| leader's planning, p50 / p99 (ms) | {:.1} / {:.1} (not leading: {:.1} / {:.1}) | – | |",
        p(&leading, 50.0),
        p(&leading, 99.0),
        p(&plain, 50.0),
        p(&plain, 99.0)
    );
    println!();
    println!(
        "{} shared object(s), {} KB in all; one node's object as MetalLB writes it: {:.0} KB",
        shared.len(),
        shared.values().map(size).sum::<usize>() / 1000,
        metallb_bytes as f64 / 1e3
    );
}
