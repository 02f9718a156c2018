//! The agent's sync paths against a real ovs-vswitchd, side by side with ovs-ofctl, same run.
//!
//! Run: `cargo bench --bench agent_sync` (optionally `-- 10000 50000` for the sizes of part (a);
//! part (b) runs at the largest size).
//!
//! The flows are the agent's own: LoadBalancer Services built as Kubernetes objects, each with
//! one ingress VIP and three TCP ports, which the default br-ex plan (shared gateway) turns into
//! 10 flows (ARP bypass, PMTU, fragments in and back, and a steer + return flow per port).
//!
//! (a) Full sync from empty, timed from "objects known" to "committed", on the agent's own path:
//!     the planner's first update, the applied state (each flow made and resolved only when a
//!     port role or the bridge MAC is unknown, to find what cannot be written), PORT_DESC and
//!     the read of our flows by cookie compared flow by flow as they arrive, one bundle encoded
//!     one message at a time. vs `ovs-ofctl -O OpenFlow13 --bundle add-flows` of
//!     the same flows, written to a file beforehand. Table emptied before each run, sides
//!     alternate, median of RUNS.
//! (b) With the full set installed, one Service added then removed, CHANGES times: each change
//!     as the agent does it: the planner's update on the new snapshot (only the span of the
//!     list that differs looked at), the touched flows made, resolved and compared with the
//!     last applied state (no switch read), a bundle of the delta. vs `ovs-ofctl --bundle replace-flows` of the full
//!     set plus/minus that Service (it dumps, diffs and rewrites the whole table: the
//!     OVN-Kubernetes approach).
//! (c) The planner alone, one Service added/removed, at 100, 1,000 and 10,000 Services, side by
//!     side: one change should cost the same whatever the size.
//!
//! After every run the switch is checked to hold exactly the expected flows (all of them after
//! part (a) runs, the count after each change in part (b)), so no figure comes from a run that
//! silently installed nothing.

mod support;
use support::k8s::{Port, lb_service};
use support::{median, ms, percentile};

use k8s_openapi::api::core::v1::Service;
use openflow::multipart::{MultipartReplyBody, MultipartRequestBody};
use openflow::{Connection, FlowMod, FlowStatsRequest, Message};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use testkit::Sandbox;
use tokio::runtime::Runtime;
use vipflow::config::{BridgeConfig, Config};
use vipflow::model::{KeptService, Model, ModelOptions, Objects};
use vipflow::plan::flows::{PlanInput, plan};
use vipflow::plan::planner::Planner;
use vipflow::reconcile::bridge::{
    FlowSet, Ports, Roles, apply_bundle, apply_each, read_flows, resolve_plan,
};
use vipflow_core::reconcile::bridge::{Applied, FullSync, Making};

/// Runs per side for the medians of (a) and of the replace-flows side of (b).
const RUNS: usize = 5;
/// Incremental changes timed in (b): half adds, half removes.
const CHANGES: usize = 200;
/// Service ports per VIP; with the ARP, PMTU and two fragment flows: 4 + 2 * PORTS flows per
/// Service.
const PORTS: [i32; 3] = [80, 443, 8080];
const FLOWS_PER_SERVICE: usize = 4 + 2 * PORTS.len();
/// Index of the first Service used for (b)'s changes, beyond any base set.
const EXTRA_BASE: u32 = 100_000;

/// A LoadBalancer Service with one ingress VIP taken from 198.18.0.0/15 (benchmarking range).
fn service(i: u32) -> KeptService {
    k8s_service(i).into()
}

/// The same as the API server would send it: one named TCP port per entry of `PORTS`.
fn k8s_service(i: u32) -> Service {
    let ports: Vec<Port<'_>> = PORTS
        .iter()
        .map(|&p| Port {
            name: Some(format!("p{p}")),
            port: p,
            target: None,
            protocol: "TCP",
        })
        .collect();
    lb_service(i, &ports, None)
}

fn objects(services: u32) -> Objects {
    Objects {
        services: (0..services)
            .map(|i| std::sync::Arc::new(service(i)))
            .collect(),
        ..Default::default()
    }
}

struct Bench {
    rt: Runtime,
    sb: Sandbox,
    conn: Connection,
    cfg: Config,
    bridge: BridgeConfig,
}

/// Where one agent sync spent its time.
#[derive(Default, Clone, Copy)]
struct Split {
    /// The planner's update: the bridge's flow keys.
    plan: Duration,
    /// Full sync: the applied state (flows made only when a port role is unknown).
    /// Incremental: the touched flows made, resolved, compared with what was applied and
    /// encoded.
    resolve: Duration,
    /// PORT_DESC and the read of our flows, each compared with the plan as it arrives (full
    /// sync only).
    read: Duration,
    /// The bundle, until the commit is acknowledged.
    bundle: Duration,
}

impl Split {
    /// Pure CPU, no switch: plan + resolve.
    fn compute(&self) -> Duration {
        self.plan + self.resolve
    }

    fn total(&self) -> Duration {
        self.compute() + self.read + self.bundle
    }
}

impl Bench {
    fn new() -> Bench {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let sb = Sandbox::openflow_only();
        let target = format!("unix:{}", sb.mgmt_sock("br-ex").display());
        let (conn, _events) = rt
            .block_on(Connection::connect(&target, openflow::Config::default()))
            .expect("connect to br-ex");
        let cfg = Config::default();
        // The sandbox's ports by name: resolved from PORT_DESC, as the timed path has it.
        let bridge = BridgeConfig {
            uplink: Some("eth0".into()),
            patch: Some("patch-ex-to-int".into()),
            ..cfg.bridges[0].clone()
        };
        Bench {
            rt,
            sb,
            conn,
            cfg,
            bridge,
        }
    }

    fn plan_input(&self) -> PlanInput<'_> {
        PlanInput {
            bridge: &self.bridge,
            cookie_prefix: self.cfg.cookie_prefix,
        }
    }

    fn ports(&self) -> Ports {
        Ports::from_desc(&self.rt.block_on(self.conn.port_desc()).expect("PORT_DESC"))
    }

    /// The resolved flows for `objs`, untimed: for flow files and checks.
    fn resolved(&self, objs: &Objects) -> FlowSet {
        let model = Model::build(objs, &ModelOptions::default());
        let flows = plan(&model, &self.plan_input());
        let (set, skipped) = resolve_plan(&flows, &Roles::of(&self.bridge, &self.ports(), None));
        assert!(skipped.is_empty(), "flows skipped: {skipped:?}");
        set
    }

    /// What a starting agent does, timed: its own full-sync path.
    fn full_sync(&self, objs: &Objects) -> Split {
        let mut s = Split::default();
        let t = Instant::now();
        let mut planner = self.planner();
        let plan = planner.update(objs).bridges.remove(0);
        s.plan = t.elapsed();

        let t = Instant::now();
        let ports = self.ports();
        let making = Making {
            maker: plan.maker,
            roles: Roles::of(&self.bridge, &ports, None),
        };
        s.read = t.elapsed();
        let t = Instant::now();
        let target = Applied::from_plan(&plan.flows, making, 1);
        s.resolve = t.elapsed();
        assert!(
            target.skipped_list().is_empty(),
            "{:?}",
            target.skipped_list()
        );

        let t = Instant::now();
        let mut sync = FullSync::new(&target);
        self.rt
            .block_on(self.conn.flow_stats_each(
                FlowStatsRequest::by_cookie(self.cfg.cookie_base(), self.cfg.cookie_mask()),
                |f| sync.observe(f),
            ))
            .expect("read flows");
        let ops = sync.finish();
        s.read += t.elapsed();

        let t = Instant::now();
        let rejected = self
            .rt
            .block_on(apply_each(&self.conn, ops.len(), |i| {
                target.message(&ops[i])
            }))
            .expect("bundle");
        s.bundle = t.elapsed();
        assert!(rejected.is_empty(), "rejected: {rejected:?}");
        s
    }

    fn planner(&self) -> Planner {
        Planner::new(
            ModelOptions::default(),
            std::slice::from_ref(&self.bridge),
            self.cfg.cookie_prefix,
            None,
        )
    }

    /// One change while connected, as the agent does it: the incremental planner takes the new
    /// snapshot (only changed objects are re-validated), the reconciler resolves and diffs the
    /// touched flows against what it applied, and bundles the delta. Returns the split and the
    /// message count.
    fn incremental(
        &self,
        objs: &Objects,
        ports: &Ports,
        planner: &mut Planner,
        applied: &mut Applied,
        generation: u64,
    ) -> (Split, usize) {
        let mut s = Split::default();
        let t = Instant::now();
        let plan = planner.update(objs).bridges.remove(0);
        s.plan = t.elapsed();
        let t = Instant::now();
        let making = Making {
            maker: plan.maker,
            roles: Roles::of(&self.bridge, ports, None),
        };
        let d = applied.delta(&plan.flows, making, plan.delta.touched.iter().copied());
        let msgs: Vec<Message> = (0..d.ops.len())
            .filter_map(|i| d.message(i, applied))
            .collect();
        s.resolve = t.elapsed();
        let n = msgs.len();
        self.bundle(msgs, &mut s);
        applied.commit(d, &[], generation);
        (s, n)
    }

    fn bundle(&self, msgs: Vec<Message>, s: &mut Split) {
        let t = Instant::now();
        let rejected = self
            .rt
            .block_on(apply_bundle(&self.conn, msgs))
            .expect("bundle");
        s.bundle = t.elapsed();
        assert!(rejected.is_empty(), "rejected: {rejected:?}");
    }

    fn clear(&self) {
        self.sb.ofctl(&["del-flows", "br-ex"]);
    }

    /// The switch must hold exactly `want` (ours), or the run's figure means nothing.
    fn check_exact(&self, want: &FlowSet, who: &str) {
        let got = self
            .rt
            .block_on(read_flows(
                &self.conn,
                self.cfg.cookie_base(),
                self.cfg.cookie_mask(),
            ))
            .expect("read flows");
        assert_eq!(got.len(), want.len(), "{who}: flow count");
        assert!(got == *want, "{who}: flows differ from the plan");
    }

    /// Number of our flows on the switch (one aggregate request: cheap at 50k).
    fn count(&self) -> usize {
        let req = FlowStatsRequest::by_cookie(self.cfg.cookie_base(), self.cfg.cookie_mask());
        let reply = self
            .rt
            .block_on(self.conn.multipart(MultipartRequestBody::Aggregate(req)))
            .expect("aggregate stats");
        match reply.body {
            MultipartReplyBody::Aggregate(a) => a.flow_count as usize,
            other => panic!("aggregate answered with {other:?}"),
        }
    }

    fn write_flow_file(&self, name: &str, set: &FlowSet) -> PathBuf {
        let path = self.sb.path().join(name);
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).expect("flow file"));
        for ((table, prio, m), body) in set {
            let fm = FlowMod::add(
                *table,
                *prio,
                body.cookie,
                m.clone(),
                body.instructions.clone(),
            );
            writeln!(f, "{fm}").expect("write flow file");
        }
        f.flush().expect("flush flow file");
        path
    }

    fn ofctl_timed(&self, verb: &str, file: &Path) -> Duration {
        let file = file.to_string_lossy();
        let t = Instant::now();
        self.sb.ofctl(&["--bundle", verb, "br-ex", &file]);
        t.elapsed()
    }
}

fn main() {
    let sizes = support::numbers();
    let sizes = if sizes.is_empty() {
        vec![10_000, 50_000]
    } else {
        sizes
    };
    let b = Bench::new();

    println!(
        "vipflow agent sync vs ovs-ofctl on a real ovs-vswitchd (dummy datapath), same run\n\
         flows: LoadBalancer Services, 1 VIP x {} TCP ports = {FLOWS_PER_SERVICE} flows each \
         (default br-ex plan, shared gateway)\n",
        PORTS.len()
    );

    // (a) Full sync from empty.
    println!("(a) full sync from empty vs `ovs-ofctl --bundle add-flows` (median of {RUNS})");
    println!(
        "    vipflow = plan (the planner's first update) + index (the applied state; flows made \
         here only when a port role is unknown) + read (PORT_DESC, our flows by cookie, each compared as it arrives) + bundle \
         (each column its own median)"
    );
    println!(
        "{:>7}  {:>9}  {:>8}  {:>8}  {:>8}  {:>8}  {:>9}  {:>6}  {:>7}",
        "flows", "vipflow", "plan", "index", "read", "bundle", "ovs-ofctl", "ratio", "target"
    );
    for &n in &sizes {
        let services = u32::try_from(n.div_ceil(FLOWS_PER_SERVICE)).expect("size fits u32");
        let objs = objects(services);
        let want = b.resolved(&objs);
        let file = b.write_flow_file(&format!("full-{n}.txt"), &want);

        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for run in 0..RUNS {
            // Alternate which side goes first, so neither always meets a freshly emptied,
            // just-revalidated switch.
            for side in [run % 2, 1 - run % 2] {
                b.clear();
                assert_eq!(b.count(), 0, "table not empty before the run");
                if side == 0 {
                    ours.push(b.full_sync(&objs));
                    b.check_exact(&want, "vipflow full sync");
                } else {
                    theirs.push(b.ofctl_timed("add-flows", &file));
                    b.check_exact(&want, "ovs-ofctl add-flows");
                }
            }
        }
        let pick = |f: fn(&Split) -> Duration| median(&ours.iter().map(f).collect::<Vec<_>>());
        let (o, t) = (pick(Split::total), median(&theirs));
        println!(
            "{:>7}  {:>6.1} ms  {:>5.1} ms  {:>5.1} ms  {:>5.1} ms  {:>5.1} ms  {:>6.1} ms  \
             {:>5.2}x  {:>7}",
            want.len(),
            ms(o),
            ms(pick(|s| s.plan)),
            ms(pick(|s| s.resolve)),
            ms(pick(|s| s.read)),
            ms(pick(|s| s.bundle)),
            ms(t),
            o.as_secs_f64() / t.as_secs_f64(),
            "<= 0.70x"
        );
    }

    // (b) One Service added/removed at the largest size.
    let n = *sizes.iter().max().expect("a size");
    let services = u32::try_from(n.div_ceil(FLOWS_PER_SERVICE)).expect("size fits u32");
    let mut objs = objects(services);
    println!(
        "\n(b) one Service ({FLOWS_PER_SERVICE} flows) added/removed with {} flows installed",
        b.resolved(&objs).len()
    );
    println!(
        "    vipflow: {CHANGES} changes (adds and removes alternate), each = incremental planner \
         update on the snapshot of all {services}+1 Services (only the span that differs looked \
         at) + the touched flows made, resolved and compared with what was applied (no switch \
         read) + bundle of the delta"
    );
    println!(
        "    ovs-ofctl: `--bundle replace-flows` of the full set +/- that Service, median of \
         {} (adds and removes)",
        2 * RUNS
    );

    // Start from the base set installed by the agent itself.
    b.clear();
    b.full_sync(&objs);
    let installed = b.resolved(&objs);
    let ports = b.ports();
    let mut planner = b.planner();
    let first = planner.update(&objs).bridges.remove(0);
    let mut applied = Applied::from_plan(
        &first.flows,
        Making {
            maker: first.maker,
            roles: Roles::of(&b.bridge, &ports, None),
        },
        1,
    );
    assert!(
        applied.to_flow_set() == installed,
        "the incremental planner's base equals the full plan"
    );
    let base_len = applied.len();

    let mut changes: Vec<Split> = Vec::with_capacity(CHANGES);
    for k in 0..CHANGES {
        // A different Service each time: nothing cached from an earlier identical change.
        let adding = k % 2 == 0;
        if adding {
            objs.services
                .push(std::sync::Arc::new(service(EXTRA_BASE + (k / 2) as u32)));
        } else {
            objs.services.pop();
        }
        let (split, msgs) = b.incremental(&objs, &ports, &mut planner, &mut applied, k as u64 + 2);
        changes.push(split);
        assert_eq!(msgs, FLOWS_PER_SERVICE, "change {k}: messages in the delta");
        let expect = base_len + if adding { FLOWS_PER_SERVICE } else { 0 };
        assert_eq!(b.count(), expect, "change {k}: flows on the switch");
    }
    b.check_exact(&applied.to_flow_set(), "vipflow after the changes");

    // replace-flows: files for the base set and the base set plus one Service.
    let base_set = applied.to_flow_set();
    objs.services
        .push(std::sync::Arc::new(service(EXTRA_BASE + CHANGES as u32)));
    let plus_set = b.resolved(&objs);
    objs.services.pop();
    let base_file = b.write_flow_file(&format!("replace-{n}-base.txt"), &base_set);
    let plus_file = b.write_flow_file(&format!("replace-{n}-plus.txt"), &plus_set);
    let mut replace = Vec::new();
    for _ in 0..RUNS {
        replace.push(b.ofctl_timed("replace-flows", &plus_file));
        b.check_exact(&plus_set, "ovs-ofctl replace-flows (add)");
        replace.push(b.ofctl_timed("replace-flows", &base_file));
        b.check_exact(&base_set, "ovs-ofctl replace-flows (remove)");
    }

    let col = |f: fn(&Split) -> Duration| changes.iter().map(f).collect::<Vec<_>>();
    let total = col(Split::total);
    println!(
        "{:>14}  {:>9}  {:>9}  {:>9}",
        "per change", "p50", "p99", "max"
    );
    for (name, v) in [
        ("vipflow", total.clone()),
        ("  compute", col(Split::compute)),
        ("    plan (incremental)", col(|s| s.plan)),
        ("    resolve+diff (touched)", col(|s| s.resolve)),
        ("  switch", col(|s| s.bundle)),
    ] {
        println!(
            "{:>14}  {:>6.2} ms  {:>6.2} ms  {:>6.2} ms",
            name,
            ms(median(&v)),
            ms(percentile(&v, 99.0)),
            ms(percentile(&v, 100.0))
        );
    }
    println!(
        "{:>14}  {:>6.1} ms  {:>9}  {:>6.1} ms",
        "ovs-ofctl",
        ms(median(&replace)),
        "",
        ms(percentile(&replace, 100.0))
    );
    let ratio = median(&replace).as_secs_f64() / median(&total).as_secs_f64();
    let p99 = percentile(&total, 99.0);
    println!(
        "\n    ovs-ofctl median / vipflow p50: {ratio:.0}x faster (target >= 100x); \
         vipflow p99 {:.2} ms (target < 10 ms): {}",
        ms(p99),
        if ratio >= 100.0 && p99 < Duration::from_millis(10) {
            "met"
        } else {
            "NOT met"
        }
    );
    // What the switch side alone costs; the rest is the planner and the delta.
    let switch = col(|s| s.bundle);
    println!(
        "    switch part alone: {:.0}x faster than ovs-ofctl, p99 {:.2} ms; planning p99 {:.3} ms \
         (target <= 0.5 ms), whole change p99 {:.2} ms (target <= 5 ms)",
        median(&replace).as_secs_f64() / median(&switch).as_secs_f64(),
        ms(percentile(&switch, 99.0)),
        ms(percentile(&col(|s| s.plan), 99.0)),
        ms(p99),
    );

    // (c) Planning alone, side by side across sizes: one change should cost the same at any
    // size (target: p99 <= 0.5 ms).
    println!(
        "\n(c) planning one Service added/removed ({CHANGES} changes), the planner alone, by size"
    );
    println!(
        "{:>8}  {:>8}  {:>9}  {:>9}  {:>9}",
        "Services", "flows", "p50", "p99", "target"
    );
    for services in [100u32, 1_000, 10_000] {
        let mut objs = objects(services);
        let mut planner = b.planner();
        planner.update(&objs);
        let mut times = Vec::with_capacity(CHANGES);
        for k in 0..CHANGES {
            if k % 2 == 0 {
                objs.services
                    .push(std::sync::Arc::new(service(EXTRA_BASE + (k / 2) as u32)));
            } else {
                objs.services.pop();
            }
            let t = Instant::now();
            let plans = planner.update(&objs);
            times.push(t.elapsed());
            assert_eq!(
                plans.bridges[0].delta.touched.len(),
                FLOWS_PER_SERVICE,
                "change {k}: one Service's flows touched"
            );
        }
        println!(
            "{:>8}  {:>8}  {:>6.1} us  {:>6.1} us  {:>9}",
            services,
            services as usize * FLOWS_PER_SERVICE,
            ms(median(&times)) * 1e3,
            ms(percentile(&times, 99.0)) * 1e3,
            "<= 500 us"
        );
    }
}
