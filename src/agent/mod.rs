//! Wires the pipeline together: objects -> model -> plan per bridge -> one reconciler per
//! bridge. Also the one-shot forms used by `--once` and `vipflow verify`.
//!
//! Shutting down leaves every flow in place: a restarting agent must not interrupt traffic.

use crate::config::{BridgeConfig, Config};
use crate::model::{Model, ModelOptions, Objects, Problem};

pub mod status;
use crate::plan::flows::{PlanInput, PlannedFlow, plan};
use crate::plan::northbound::{self as nbplan, LbRow};
use crate::plan::order;
use crate::plan::planner::{BridgeFlows, Planner};
use crate::reconcile::bridge::{self, BridgeSettings, Desired, FlowSet, Ports, Status};
use crate::reconcile::northbound as nb;
use crate::source::file::{self, Loaded};
use status::{BridgeDoc, NorthboundDoc, StatusDoc, VipDoc};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    File(#[from] file::FileError),
    #[error("bridge {bridge}: {source}")]
    OpenFlow {
        bridge: String,
        source: openflow::ConnError,
    },
    #[error("bridge {bridge}: {reason}")]
    Ports { bridge: String, reason: String },
    #[error("no objects file: give --objects or set objects in the config file")]
    NoObjects,
    #[error(transparent)]
    Kube(crate::source::kube::KubeSourceError),
    #[error("HTTP endpoint {addr}: {source}")]
    Http {
        addr: String,
        source: std::io::Error,
    },
    #[error("Northbound database {remotes}: {source}")]
    Northbound {
        remotes: String,
        source: Box<ovsdb::Error>,
    },
}

/// The plan for every configured bridge.
pub fn plan_bridges(cfg: &Config, model: &Model) -> Vec<(BridgeConfig, Vec<PlannedFlow>)> {
    cfg.bridges
        .iter()
        .map(|b| {
            (
                b.clone(),
                plan(
                    model,
                    &PlanInput {
                        bridge: b,
                        cookie_prefix: cfg.cookie_prefix,
                    },
                ),
            )
        })
        .collect()
}

pub fn model_options(cfg: &Config) -> ModelOptions {
    ModelOptions {
        load_balancer_class: cfg.load_balancer_class.clone(),
    }
}

/// The model and every problem found on the way (file and model).
pub fn build_model(cfg: &Config, loaded: &Loaded) -> (Model, Vec<Problem>) {
    let model = Model::build(&loaded.objects, &model_options(cfg));
    let mut problems = loaded.problems.clone();
    problems.extend(model.problems.iter().cloned());
    if let Err(p) = crate::model::node_gateway_router_mac(&loaded.objects.nodes, &cfg.node_name) {
        problems.push(p);
    }
    (model, problems)
}

/// This node's OVN gateway router MAC from its Node object, when it has a readable one.
pub fn router_mac(cfg: &Config, objects: &Objects) -> Option<openflow::oxm::MacAddr> {
    crate::model::node_gateway_router_mac(&objects.nodes, &cfg.node_name)
        .ok()
        .flatten()
}

pub fn settings(cfg: &Config, b: &BridgeConfig) -> BridgeSettings {
    BridgeSettings {
        bridge: b.clone(),
        target: b.target(&cfg.ovs_rundir),
        cookie_base: cfg.cookie_base(),
        cookie_mask: cfg.cookie_mask(),
        ovs_db: Some(cfg.ovs_db()),
        openflow: openflow::Config {
            request_timeout: Duration::from_millis(cfg.openflow_timeout_ms.max(1)),
            ..openflow::Config::default()
        },
        backoff_min: Duration::from_millis(100),
        backoff_max: Duration::from_secs(5),
        connect_retry: Duration::from_millis(50),
        healthy_after: Duration::from_secs(10),
        audit_interval: (cfg.flow_audit_ms > 0).then(|| Duration::from_millis(cfg.flow_audit_ms)),
    }
}

/// The desired Northbound rows.
pub fn plan_northbound(cfg: &Config, model: &Model) -> Vec<LbRow> {
    nbplan::plan(model, &cfg.northbound)
}

/// vipflow's own Load_Balancer_Group for `model`'s nodes, when cluster rows join it.
pub fn plan_northbound_group(cfg: &Config, model: &Model) -> Option<nbplan::GroupPlan> {
    nbplan::own_group(&cfg.northbound, &model.nodes.keys().cloned().collect())
}

pub fn nb_settings(cfg: &Config, remotes: &str) -> nb::NbSettings {
    nb::NbSettings {
        remotes: remotes.to_string(),
        backoff_min: Duration::from_millis(100),
        backoff_max: Duration::from_secs(5),
        leading: None,
        request_timeout: Duration::from_millis(cfg.nb_timeout_ms.max(1)),
    }
}

/// Optional parts of a running agent.
#[derive(Default, Clone)]
pub struct AgentOptions {
    /// Leadership for the Northbound writer; `None`: write whenever a database is configured.
    pub leader: Option<watch::Receiver<bool>>,
    /// Where Kubernetes Events go; `None`: no events (file source).
    pub events: Option<crate::events::EventSink>,
    pub metrics: Arc<crate::metrics::Metrics>,
}

/// What the planner produced for one generation, for the observer.
struct PlanInfo {
    generation: u64,
    model: Model,
    problems: Vec<Problem>,
    /// Kube-OVN findings: VIP and what is wrong.
    not_excluded: Vec<(std::net::IpAddr, String)>,
}

/// Handles on a running agent, for the CLI and for tests.
pub struct Running {
    /// One status channel per configured bridge, in config order.
    pub status: Vec<(String, watch::Receiver<Status>)>,
    /// The Northbound writer's status, when one is configured.
    pub nb_status: Option<watch::Receiver<nb::Status>>,
    /// The generation of the latest plan handed to the reconcilers.
    pub generation: watch::Receiver<u64>,
    /// The latest plan's generation and the objects it was made from: which generation holds a
    /// given snapshot of the source.
    pub planned: watch::Receiver<Option<(u64, Arc<Loaded>)>>,
    /// True once every bridge (and the Northbound writer, when this agent is it) has applied
    /// a plan: the readiness probe.
    pub ready: watch::Receiver<bool>,
    /// The agent's state (`/status`, `vipflow status`); `None` before the first plan.
    pub status_doc: watch::Receiver<Option<StatusDoc>>,
    leader: Option<watch::Receiver<bool>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Wait until every bridge, and the Northbound writer if this agent is it, has applied
    /// plan `generation` (or a later one).
    pub async fn wait_applied(&mut self, generation: u64) {
        for (_, st) in &mut self.status {
            let _ = st
                .wait_for(|s| s.applied_generation.is_some_and(|g| g >= generation))
                .await;
        }
        let writing = self.leader.as_ref().is_none_or(|l| *l.borrow());
        if let (Some(st), true) = (&mut self.nb_status, writing) {
            let _ = st
                .wait_for(|s| s.applied_generation.is_some_and(|g| g >= generation))
                .await;
        }
    }

    pub fn stop(self) {
        for t in self.tasks {
            t.abort();
        }
    }
}

/// Start the agent on an objects stream: plans on every change, reconcilers per bridge.
pub fn start(cfg: Config, objects: watch::Receiver<Arc<Loaded>>) -> Running {
    start_with(cfg, objects, AgentOptions::default())
}

/// Start with leader election, events and metrics.
pub fn start_with(
    cfg: Config,
    mut objects: watch::Receiver<Arc<Loaded>>,
    opts: AgentOptions,
) -> Running {
    let mut tasks = Vec::new();
    let mut senders = Vec::new();
    let mut status = Vec::new();
    for b in &cfg.bridges {
        let (dtx, drx) = watch::channel(Arc::new(Desired::default()));
        let (stx, srx) = watch::channel(Status::default());
        tasks.push(tokio::spawn(bridge::run(settings(&cfg, b), drx, stx)));
        senders.push(dtx);
        status.push((b.name.clone(), srx));
    }
    let mut nb_tx = None;
    let mut nb_status = None;
    if let Some(remotes) = cfg.nb_remote.clone() {
        let (dtx, drx) = watch::channel(Arc::new(nb::Desired::default()));
        let (stx, srx) = watch::channel(nb::Status::default());
        tasks.push(tokio::spawn(nb_writer(
            nb_settings(&cfg, &remotes),
            drx,
            stx,
            opts.leader.clone(),
        )));
        nb_tx = Some(dtx);
        nb_status = Some(srx);
    }
    let (gtx, grx) = watch::channel(0u64);
    let (ptx, prx) = watch::channel::<Option<Arc<PlanInfo>>>(None);
    let (rtx, rrx) = watch::channel::<Option<(u64, Arc<Loaded>)>>(None);
    let planned_rx = rrx.clone();
    let received: Received = Arc::default();
    tasks.push(tokio::spawn(report(cfg.clone(), rrx, ptx)));
    let planner_cfg = cfg.clone();
    let stamps = Arc::clone(&received);
    let nb_status_rx = nb_status.clone();
    let bridge_status_rx: Vec<watch::Receiver<Status>> =
        status.iter().map(|(_, rx)| rx.clone()).collect();
    let leader = opts.leader.clone();
    tasks.push(tokio::spawn(async move {
        let cfg = planner_cfg;
        let mut planner = Some(Planner::for_config(&cfg));
        // Handovers to the Northbound writer: up to two per plan (see plan::order).
        let mut nb_step = 0u64;
        loop {
            let received = std::time::Instant::now();
            let loaded = objects.borrow_and_update().clone();
            if !loaded.complete {
                // The source has not listed everything yet: a partial world would delete what
                // is programmed. Wait for the first complete snapshot.
                if objects.changed().await.is_err() {
                    return;
                }
                continue;
            }
            // Off the async workers: a first snapshot of many Services takes a while, and the
            // reconcilers, the observer and shutdown must not wait behind it.
            let Some(mut p) = planner.take() else { return };
            let objs = Arc::clone(&loaded);
            let plans = match tokio::task::spawn_blocking(move || {
                let plans = p.update(&objs.objects);
                (p, plans)
            })
            .await
            {
                Ok((p, plans)) => {
                    planner = Some(p);
                    plans
                }
                Err(e) => {
                    tracing::error!(error = %e, "the planner failed; no more plans");
                    return;
                }
            };
            let generation = plans.generation;
            {
                let mut s = stamps.lock().unwrap_or_else(|p| p.into_inner());
                s.insert(generation, received);
                while s.len() > 64 {
                    s.pop_first();
                }
            }
            let router_mac = router_mac(&cfg, &loaded.objects);
            let send_flows = |bridges: Vec<BridgeFlows>| {
                for (b, tx) in bridges.into_iter().zip(&senders) {
                    let _ = tx.send(Arc::new(Desired {
                        generation,
                        flows: b.flows,
                        delta: Some(b.delta),
                        router_mac,
                    }));
                }
            };
            let nb_plan = match (&nb_tx, plans.northbound) {
                (Some(tx), Some(rows)) => {
                    let next =
                        nb::Desired::from_rows(generation, &rows, cfg.northbound.exclude_ips);
                    Some((tx, next, rows.make_first, rows.previous_vips))
                }
                _ => None,
            };
            // The full model for problems, Events and status: built at its own pace.
            let _ = rtx.send(Some((generation, loaded)));
            let _ = gtx.send(generation);
            // Flows and rows, make before break (plan::order): rows that serve the old plan and
            // the new one, then the flows, then the new rows.
            match nb_plan {
                None => send_flows(plans.bridges),
                Some((tx, next, None, _)) => {
                    nb_step += 1;
                    let _ = tx.send(Arc::new(nb::Desired {
                        step: nb_step,
                        ..next
                    }));
                    wait_rows(&nb_status_rx, &leader, nb_step).await;
                    send_flows(plans.bridges);
                }
                Some((tx, next, Some(make), previous_vips)) => {
                    nb_step += 1;
                    let _ = tx.send(Arc::new(nb::Desired {
                        row_count: order::row_count(&make),
                        rows: make,
                        vips: previous_vips.union(next.vips.clone()),
                        step: nb_step,
                        complete: false,
                        ..next.clone()
                    }));
                    wait_rows(&nb_status_rx, &leader, nb_step).await;
                    send_flows(plans.bridges);
                    wait_flows(&bridge_status_rx, generation).await;
                    nb_step += 1;
                    let _ = tx.send(Arc::new(nb::Desired {
                        step: nb_step,
                        ..next
                    }));
                }
            }
            if objects.changed().await.is_err() {
                return;
            }
        }
    }));
    let (ready_tx, ready) = watch::channel(false);
    let (json_tx, status_doc) = watch::channel(None);
    tasks.push(tokio::spawn(observe_agent(
        cfg.clone(),
        status.clone(),
        nb_status.clone(),
        opts.clone(),
        prx,
        received,
        ready_tx,
        json_tx,
    )));
    Running {
        status,
        nb_status,
        generation: grx,
        planned: planned_rx,
        ready,
        status_doc,
        leader: opts.leader,
        tasks,
    }
}

/// How long the planner waits for the other side of a make-before-break step (plan::order)
/// before it goes on anyway: a database or switch that does not answer must not hold every
/// later change back.
pub const ORDER_WAIT: Duration = Duration::from_secs(5);

/// Wait until the Northbound writer committed handover `step`, when this agent writes and the
/// writer is connected (a writer that is not, or another agent's, confirms nothing).
async fn wait_rows(
    nb_status: &Option<watch::Receiver<nb::Status>>,
    leader: &Option<watch::Receiver<bool>>,
    step: u64,
) {
    let Some(rx) = nb_status else { return };
    if leader.as_ref().is_some_and(|l| !*l.borrow()) {
        return;
    }
    let mut rx = rx.clone();
    let done = rx.wait_for(|s| !s.connected || s.applied_step.is_some_and(|a| a >= step));
    if tokio::time::timeout(ORDER_WAIT, done).await.is_err() {
        tracing::warn!(step, wait = ?ORDER_WAIT, "Northbound rows not confirmed in time; writing the flows anyway");
    }
}

/// Wait until every connected bridge applied `generation`.
async fn wait_flows(bridges: &[watch::Receiver<Status>], generation: u64) {
    for rx in bridges {
        let mut rx = rx.clone();
        let done =
            rx.wait_for(|s| !s.connected || s.applied_generation.is_some_and(|g| g >= generation));
        if tokio::time::timeout(ORDER_WAIT, done).await.is_err() {
            tracing::warn!(generation, wait = ?ORDER_WAIT, "flows not confirmed in time; removing the rows anyway");
        }
    }
}

/// When each recent plan generation's objects arrived.
type Received = Arc<std::sync::Mutex<BTreeMap<u64, std::time::Instant>>>;

/// Build the full model of the latest snapshot, for problems, Events and the status document.
/// Off the planning path: a burst of snapshots is reported once, for the latest.
async fn report(
    cfg: Config,
    mut snapshots: watch::Receiver<Option<(u64, Arc<Loaded>)>>,
    plans: watch::Sender<Option<Arc<PlanInfo>>>,
) {
    let mut reported: BTreeSet<String> = BTreeSet::new();
    while snapshots.changed().await.is_ok() {
        let Some((generation, loaded)) = snapshots.borrow_and_update().clone() else {
            continue;
        };
        let (model, problems) = build_model(&cfg, &loaded);
        // Report each problem once while it lasts, not on every re-plan.
        let now: BTreeSet<String> = problems.iter().map(|p| p.to_string()).collect();
        for p in now.difference(&reported) {
            tracing::warn!(problem = %p, "skipped");
        }
        reported = now;
        let vips: BTreeSet<std::net::IpAddr> = model.vips().into_keys().collect();
        let not_excluded = kubeovn_findings(&loaded.objects, &vips);
        let _ = plans.send(Some(Arc::new(PlanInfo {
            generation,
            model,
            problems,
            not_excluded,
        })));
    }
}

/// The Northbound writer, running only while this agent leads (or always, without election).
async fn nb_writer(
    settings: nb::NbSettings,
    desired: watch::Receiver<Arc<nb::Desired>>,
    status: watch::Sender<nb::Status>,
    leader: Option<watch::Receiver<bool>>,
) {
    let Some(mut leader) = leader else {
        nb::run(settings, desired, status).await;
        return;
    };
    loop {
        if leader.wait_for(|l| *l).await.is_err() {
            return;
        }
        tracing::info!("leading: writing Northbound rows");
        let task = tokio::spawn(nb::run(
            nb::NbSettings {
                leading: Some(leader.clone()),
                ..settings.clone()
            },
            desired.clone(),
            status.clone(),
        ));
        let lost = leader.wait_for(|l| !*l).await;
        // Stop writing at once: another agent may be about to take over.
        task.abort();
        status.send_modify(|s| {
            s.connected = false;
            s.applied_generation = None;
        });
        tracing::info!("not leading: Northbound writer stopped");
        if lost.is_err() {
            return;
        }
    }
}

/// The objects' Kube-OVN Subnets, as the excludeIps check takes them.
fn kubeovn_subnets(objects: &Objects) -> Vec<crate::plan::exclude::KubeOvnSubnet> {
    objects
        .subnets
        .iter()
        .map(|s| crate::plan::exclude::KubeOvnSubnet {
            name: s.metadata.name.clone().unwrap_or_default(),
            cidr_block: s.spec.cidr_block.clone(),
            exclude_ips: s.spec.exclude_ips.clone(),
            gateway: s.spec.gateway.clone(),
        })
        .collect()
}

/// Kube-OVN Subnets that would hand a VIP to a pod.
fn kubeovn_findings(
    objects: &Objects,
    vips: &BTreeSet<std::net::IpAddr>,
) -> Vec<(std::net::IpAddr, String)> {
    use crate::plan::exclude::check_kubeovn;
    let subnets = kubeovn_subnets(objects);
    check_kubeovn(vips, &subnets)
        .into_iter()
        .filter_map(|f| Some((f.vip?, f.to_string())))
        .collect()
}

/// Follow the reconcilers: metrics, readiness, the status document, Events.
#[allow(clippy::too_many_arguments)]
async fn observe_agent(
    cfg: Config,
    mut bridges: Vec<(String, watch::Receiver<Status>)>,
    mut nb_status: Option<watch::Receiver<nb::Status>>,
    opts: AgentOptions,
    mut plans: watch::Receiver<Option<Arc<PlanInfo>>>,
    received: Received,
    ready: watch::Sender<bool>,
    json: watch::Sender<Option<StatusDoc>>,
) {
    use crate::metrics::Metrics;
    let m = &opts.metrics;
    let mut leader = opts.leader.clone();
    let mut seen_syncs: Vec<u64> = vec![0; bridges.len()];
    let mut seen_applied: Vec<Option<u64>> = vec![None; bridges.len()];
    let mut seen_errors: Vec<Option<String>> = vec![None; bridges.len() + 1];
    let mut nb_syncs = 0u64;
    let mut nb_applied = None;
    // The VipProgrammed statements of the last plan every bridge applied.
    let mut programmed: BTreeSet<crate::events::ServiceEvent> = BTreeSet::new();
    loop {
        let plan = plans.borrow_and_update().clone();
        let arrived = |g: Option<u64>| {
            let r = received.lock().unwrap_or_else(|p| p.into_inner());
            g.and_then(|g| r.get(&g).copied())
        };
        if let Some(p) = &plan {
            m.vips
                .set(i64::try_from(p.model.vips().len()).unwrap_or(i64::MAX));
            m.problems
                .set(i64::try_from(p.problems.len()).unwrap_or(i64::MAX));
        }
        let is_leader = leader.as_ref().is_none_or(|l| *l.borrow());
        m.leader.set(i64::from(leader.is_some() && is_leader));
        let mut all_applied = !bridges.is_empty() || nb_status.is_some();
        let mut min_applied: Option<u64> = None;
        let mut bridge_docs = Vec::new();
        for (i, (name, st)) in bridges.iter_mut().enumerate() {
            let s = st.borrow_and_update().clone();
            let target = Metrics::target(&format!("bridge/{name}"));
            m.flows
                .get_or_create(&target)
                .set(i64::try_from(s.flows).unwrap_or(i64::MAX));
            m.connected
                .get_or_create(&Metrics::peer(&format!("openflow/{name}")))
                .set(i64::from(s.connected));
            if s.syncs > seen_syncs[i] {
                seen_syncs[i] = s.syncs;
                m.sync_seconds
                    .get_or_create(&target)
                    .observe(s.last_sync.as_secs_f64());
            }
            if s.applied_generation != seen_applied[i] {
                seen_applied[i] = s.applied_generation;
                if let Some(t) = arrived(s.applied_generation) {
                    m.event_to_dataplane_seconds
                        .get_or_create(&target)
                        .observe(t.elapsed().as_secs_f64());
                }
            }
            if s.last_error != seen_errors[i] {
                if s.last_error.is_some() {
                    m.error(if s.connected {
                        "openflow_write"
                    } else {
                        "openflow_connect"
                    });
                }
                seen_errors[i] = s.last_error.clone();
            }
            all_applied &= s.applied_generation.is_some();
            min_applied = Some(
                min_applied.map_or(s.applied_generation.unwrap_or(0), |x: u64| {
                    x.min(s.applied_generation.unwrap_or(0))
                }),
            );
            bridge_docs.push(BridgeDoc {
                name: name.clone(),
                connected: s.connected,
                flows: s.flows,
                applied_generation: s.applied_generation,
                skipped: s.skipped.clone(),
                last_error: s.last_error.clone(),
                full_syncs: s.full_syncs,
                problems: s.problems.iter().map(ToString::to_string).collect(),
            });
        }
        let mut nb_doc = None;
        if let Some(st) = &mut nb_status {
            let s = st.borrow_and_update().clone();
            let target = Metrics::target("northbound");
            m.nb_rows.set(i64::try_from(s.rows).unwrap_or(i64::MAX));
            m.connected
                .get_or_create(&Metrics::peer("ovsdb/northbound"))
                .set(i64::from(s.connected));
            if s.syncs > nb_syncs {
                nb_syncs = s.syncs;
                m.sync_seconds
                    .get_or_create(&target)
                    .observe(s.last_sync.as_secs_f64());
            }
            if s.applied_generation != nb_applied {
                nb_applied = s.applied_generation;
                if let Some(t) = arrived(s.applied_generation) {
                    m.event_to_dataplane_seconds
                        .get_or_create(&target)
                        .observe(t.elapsed().as_secs_f64());
                }
            }
            let last = seen_errors.len() - 1;
            if s.last_error != seen_errors[last] {
                if s.last_error.is_some() {
                    m.error("northbound");
                }
                seen_errors[last] = s.last_error.clone();
            }
            if is_leader {
                all_applied &= s.applied_generation.is_some();
            }
            nb_doc = Some(NorthboundDoc {
                writer: is_leader,
                connected: s.connected,
                rows: s.rows,
                applied_generation: s.applied_generation,
                problems: s.problems.clone(),
                last_error: s.last_error.clone(),
                transactions: s.transactions,
            });
        }
        if let Some(ev) = &opts.events {
            use std::sync::atomic::Ordering::Relaxed;
            for (kind, c) in [
                ("published", &ev.counters.published),
                ("dropped", &ev.counters.dropped),
                ("failed", &ev.counters.failed),
            ] {
                m.events
                    .get_or_create(&crate::metrics::KindLabel { kind: kind.into() })
                    .set(i64::try_from(c.load(Relaxed)).unwrap_or(i64::MAX));
            }
        }
        ready.send_if_modified(|r| {
            let changed = *r != all_applied;
            *r = all_applied;
            changed
        });
        if let Some(p) = &plan {
            let applied_here = min_applied.is_some_and(|g| g >= p.generation);
            if let Some(ev) = &opts.events {
                let st =
                    crate::events::statements(&p.model, &p.problems, &cfg.node_name, applied_here);
                let mut st = crate::events::hold_programmed(st, applied_here, &mut programmed);
                st.extend(crate::events::not_excluded(&p.model, &p.not_excluded));
                ev.update(st);
            }
            let vips: Vec<VipDoc> = p
                .model
                .vips()
                .into_iter()
                .map(|(vip, svcs)| {
                    let ports: Vec<String> = p
                        .model
                        .vip_ports()
                        .filter(|(_, vp)| vp.vip == vip)
                        .map(|(_, vp)| format!("{}/{}", vp.port, vp.protocol))
                        .collect();
                    VipDoc {
                        vip: vip.to_string(),
                        services: svcs.iter().map(ToString::to_string).collect(),
                        ports,
                    }
                })
                .collect();
            let _ = json.send(Some(StatusDoc {
                node: cfg.node_name.clone(),
                generation: p.generation,
                ready: all_applied,
                leader: leader.as_ref().map(|_| is_leader),
                vips,
                problems: p.problems.iter().map(ToString::to_string).collect(),
                bridges: bridge_docs,
                northbound: nb_doc,
            }));
        }
        // Wait for any change.
        // (select_all panics on an empty list.)
        let has_bridges = !bridges.is_empty();
        let bridge_changed = async {
            if has_bridges {
                let _ = futures::future::select_all(
                    bridges.iter_mut().map(|(_, st)| Box::pin(st.changed())),
                )
                .await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        let nb_changed = async {
            match &mut nb_status {
                Some(st) => st.changed().await,
                None => std::future::pending().await,
            }
        };
        let leader_changed = async {
            match &mut leader {
                Some(l) => l.changed().await,
                None => std::future::pending().await,
            }
        };
        let plans_changed = plans.changed();
        tokio::select! {
            r = plans_changed => if r.is_err() { return },
            _ = bridge_changed => {}
            _ = nb_changed => {}
            _ = leader_changed => {}
            // Counters of events move without a channel: refresh now and then.
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
    }
}

/// Run until interrupted, re-reading the objects file every `poll`.
pub async fn run(cfg: Config, poll: Duration) -> Result<(), AgentError> {
    let path = cfg.objects.clone().ok_or(AgentError::NoObjects)?;
    let (rx, watcher) = file::watch_bounded(path, poll, cfg.objects_max_bytes)?;
    let opts = AgentOptions::default();
    let http = serve_http(&cfg, &opts.metrics).await?;
    let running = start_with(cfg, rx, opts);
    let http = http.map(|h| h(running.ready.clone(), running.status_doc.clone()));
    shutdown_signal().await;
    tracing::info!("shutting down; flows stay in place");
    watcher.abort();
    running.stop();
    if let Some(h) = http {
        h.abort();
    }
    Ok(())
}

/// Settings of the cluster mode that come from the environment or flags.
#[derive(Debug, Clone, Default)]
pub struct ClusterOptions {
    pub kubeconfig: Option<PathBuf>,
    /// This agent's identity for the Lease (pod name, else node name).
    pub identity: String,
    /// Default Lease namespace (the pod's namespace).
    pub namespace: String,
    pub events_per_second: f64,
    pub events_burst: u32,
}

/// A running cluster-mode agent.
pub struct Cluster {
    pub running: Running,
    pub election: Option<crate::leader::Election>,
    pub metrics: Arc<crate::metrics::Metrics>,
    source: tokio::task::JoinHandle<()>,
    http: Option<tokio::task::JoinHandle<()>>,
}

impl Cluster {
    /// Graceful stop: hand the Northbound over at once (release the Lease) rather than after
    /// it expires; flows and rows stay in place.
    pub async fn shutdown(self) {
        if let Some(e) = self.election {
            e.release().await;
        }
        self.source.abort();
        self.running.stop();
        if let Some(h) = self.http {
            h.abort();
        }
    }
}

/// Start in a cluster: the Kubernetes source, an elected Northbound writer, Events, HTTP.
pub async fn start_cluster(cfg: Config, cluster: ClusterOptions) -> Result<Cluster, AgentError> {
    use crate::source::kube as ksrc;
    let client = ksrc::client(cluster.kubeconfig.as_deref())
        .await
        .map_err(AgentError::Kube)?;
    let writer_possible = cfg.nb_remote.is_some();
    let source_cfg = ksrc::KubeSourceConfig {
        node_name: cfg.node_name.clone(),
        all_nodes: writer_possible,
        ..Default::default()
    };
    let (rx, source) = ksrc::start(client.clone(), source_cfg);
    let election = (writer_possible && cfg.lease.enabled).then(|| {
        let ns = cfg
            .lease
            .namespace
            .clone()
            .unwrap_or_else(|| cluster.namespace.clone());
        crate::leader::start(
            client.clone(),
            crate::leader::LeaderConfig::new(
                &ns,
                &cfg.lease.name,
                &cluster.identity,
                Duration::from_secs(cfg.lease.duration_seconds.max(1)),
            ),
        )
    });
    let events = crate::events::EventSink::start(
        client,
        "vipflow",
        &cfg.node_name,
        cluster.events_per_second,
        cluster.events_burst,
    );
    let metrics = Arc::new(crate::metrics::Metrics::new());
    let opts = AgentOptions {
        leader: election.as_ref().map(|e| e.is_leader.clone()),
        events: Some(events),
        metrics: metrics.clone(),
    };
    let http = serve_http(&cfg, &opts.metrics).await?;
    let running = start_with(cfg, rx, opts);
    let http = http.map(|h| h(running.ready.clone(), running.status_doc.clone()));
    Ok(Cluster {
        running,
        election,
        metrics,
        source,
        http,
    })
}

/// Run in a cluster until SIGINT/SIGTERM.
pub async fn run_cluster(cfg: Config, cluster: ClusterOptions) -> Result<(), AgentError> {
    let c = start_cluster(cfg, cluster).await?;
    shutdown_signal().await;
    tracing::info!("shutting down; flows stay in place");
    c.shutdown().await;
    Ok(())
}

type HttpStarter = Box<
    dyn FnOnce(
            watch::Receiver<bool>,
            watch::Receiver<Option<StatusDoc>>,
        ) -> tokio::task::JoinHandle<()>
        + Send,
>;

/// Bind the HTTP endpoint now (so a bad address fails at start), serve once the agent runs.
async fn serve_http(
    cfg: &Config,
    metrics: &Arc<crate::metrics::Metrics>,
) -> Result<Option<HttpStarter>, AgentError> {
    let Some(addr) = cfg.http_addr.clone() else {
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| AgentError::Http {
            addr: addr.clone(),
            source: e,
        })?;
    tracing::info!(addr = %addr, "serving /metrics /healthz /readyz /status");
    let metrics = metrics.clone();
    Ok(Some(Box::new(move |ready, status| {
        tokio::spawn(async move {
            let state = crate::metrics::Http {
                metrics,
                ready,
                status,
            };
            if let Err(e) = crate::metrics::serve(listener, state).await {
                tracing::error!(error = %e, "HTTP endpoint stopped");
            }
        })
    })))
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Result of one sync of one bridge.
#[derive(Debug, Clone)]
pub struct SyncReport {
    pub bridge: String,
    pub changes: usize,
    pub flows: usize,
    pub skipped: Vec<String>,
}

/// Connect to a bridge, learn its ports (PORT_DESC and the OVS database, `db`) and read our
/// flows.
async fn observe(
    cfg: &Config,
    b: &BridgeConfig,
    db: &crate::plan::ports::OvsDb,
) -> Result<(openflow::Connection, Ports, FlowSet), AgentError> {
    let s = settings(cfg, b);
    let err = |source| AgentError::OpenFlow {
        bridge: b.name.clone(),
        source,
    };
    let (conn, _events) = openflow::Connection::connect(&s.target, s.openflow.clone())
        .await
        .map_err(err)?;
    let mut ports = Ports::from_desc(&conn.port_desc().await.map_err(err)?);
    ports.db = db.clone();
    let flows = bridge::read_flows(&conn, s.cookie_base, s.cookie_mask)
        .await
        .map_err(err)?;
    Ok((conn, ports, flows))
}

/// The roles of a bridge for a one-shot command. A port that cannot be found or is not on the
/// bridge is an error (the other problems are logged): one sync must not pass for a success
/// with no flows.
fn one_shot_roles(
    b: &BridgeConfig,
    ports: &Ports,
    router_mac: Option<openflow::oxm::MacAddr>,
) -> Result<bridge::Roles, AgentError> {
    let roles = bridge::Roles::of(b, ports, router_mac);
    if let Some(e) = [&roles.uplink, &roles.patch]
        .into_iter()
        .filter_map(|r| r.as_ref().err())
        .find(|e| e.is_problem())
    {
        return Err(AgentError::Ports {
            bridge: b.name.clone(),
            reason: e.to_string(),
        });
    }
    for p in roles.problems(b, ports) {
        tracing::warn!(bridge = %b.name, problem = %p, "bridge problem");
    }
    Ok(roles)
}

/// One full sync of every bridge to `objects` (`vipflow agent --once`).
pub async fn sync_once(cfg: &Config, objects: &Objects) -> Result<Vec<SyncReport>, AgentError> {
    let model = Model::build(objects, &model_options(cfg));
    let db = crate::reconcile::ovs::read(&cfg.ovs_db()).await;
    let router_mac = router_mac(cfg, objects);
    let mut reports = Vec::new();
    for (b, flows) in plan_bridges(cfg, &model) {
        let (conn, ports, observed) = observe(cfg, &b, &db).await?;
        let roles = one_shot_roles(&b, &ports, router_mac)?;
        let (want, mut skipped) = bridge::resolve_plan(&flows, &roles);
        let msgs = bridge::diff(&observed, &want);
        let changes = msgs.len();
        let rejected =
            bridge::apply_bundle(&conn, msgs)
                .await
                .map_err(|source| AgentError::OpenFlow {
                    bridge: b.name.clone(),
                    source,
                })?;
        skipped.extend(rejected);
        reports.push(SyncReport {
            bridge: b.name.clone(),
            changes,
            flows: want.len(),
            skipped,
        });
        conn.close();
    }
    if let Some(remotes) = &cfg.nb_remote {
        let rows = plan_northbound(cfg, &model);
        let vips: BTreeSet<std::net::IpAddr> = model.vips().into_keys().collect();
        let exclude = cfg.northbound.exclude_ips.then_some(&vips);
        let (changes, skipped) =
            nb::sync_once(remotes, &rows, plan_northbound_group(cfg, &model), exclude)
                .await
                .map_err(|source| AgentError::Northbound {
                    remotes: remotes.clone(),
                    source: Box::new(source),
                })?;
        reports.push(SyncReport {
            bridge: "northbound".into(),
            changes,
            flows: rows.len(),
            skipped,
        });
    }
    Ok(reports)
}

/// Northbound drift lines (empty when in sync); `None` when no NB database is configured.
pub async fn verify_northbound(
    cfg: &Config,
    objects: &Objects,
) -> Result<Option<Vec<String>>, AgentError> {
    let Some(remotes) = &cfg.nb_remote else {
        return Ok(None);
    };
    let model = Model::build(objects, &model_options(cfg));
    let rows = plan_northbound(cfg, &model);
    let vips: BTreeSet<std::net::IpAddr> = model.vips().into_keys().collect();
    let exclude = cfg.northbound.exclude_ips.then_some(&vips);
    let group = plan_northbound_group(cfg, &model);
    nb::drift(remotes, &rows, group.as_ref(), exclude)
        .await
        .map(Some)
        .map_err(|source| AgentError::Northbound {
            remotes: remotes.clone(),
            source: Box::new(source),
        })
}

/// Differences between a bridge's flows and the plan.
#[derive(Debug, Clone, Default)]
pub struct Drift {
    pub bridge: String,
    /// Planned but absent (or different) on the switch, as ovs-ofctl flow text.
    pub missing: Vec<String>,
    /// Ours on the switch but not planned (or different).
    pub extra: Vec<String>,
    pub skipped: Vec<String>,
}

impl Drift {
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty() && self.extra.is_empty()
    }
}

/// Compare every bridge with the plan (`vipflow verify`).
pub async fn verify(cfg: &Config, objects: &Objects) -> Result<Vec<Drift>, AgentError> {
    let model = Model::build(objects, &model_options(cfg));
    let db = crate::reconcile::ovs::read(&cfg.ovs_db()).await;
    let router_mac = router_mac(cfg, objects);
    let mut out = Vec::new();
    for (b, flows) in plan_bridges(cfg, &model) {
        let (conn, ports, observed) = observe(cfg, &b, &db).await?;
        conn.close();
        let roles = one_shot_roles(&b, &ports, router_mac)?;
        let (want, skipped) = bridge::resolve_plan(&flows, &roles);
        let text = |((t, p, m), body): (&bridge::FlowId, &bridge::FlowBody)| {
            openflow::FlowMod::add(*t, *p, body.cookie, m.clone(), body.instructions.clone())
                .to_string()
        };
        let missing = want
            .iter()
            .filter(|(id, body)| observed.get(*id) != Some(*body))
            .map(text)
            .collect();
        let extra = observed
            .iter()
            .filter(|(id, body)| want.get(*id) != Some(*body))
            .map(text)
            .collect();
        out.push(Drift {
            bridge: b.name.clone(),
            missing,
            extra,
            skipped,
        });
    }
    Ok(out)
}

/// The objects path from the config, or an error.
pub fn objects_path(cfg: &Config) -> Result<PathBuf, AgentError> {
    cfg.objects.clone().ok_or(AgentError::NoObjects)
}

/// Every VIP that IPAM could hand to a pod (`vipflow check`): VIPs inside a Kube-OVN Subnet's
/// CIDR and not in its excludeIps, and (with a Northbound database) VIPs inside a logical
/// switch's subnet and not in its exclude_ips.
pub async fn check(cfg: &Config, objects: &Objects) -> Result<Vec<String>, AgentError> {
    use crate::plan::exclude::check_kubeovn;
    let model = Model::build(objects, &model_options(cfg));
    let vips: BTreeSet<std::net::IpAddr> = model.vips().into_keys().collect();
    let subnets = kubeovn_subnets(objects);
    let mut out: Vec<String> = check_kubeovn(&vips, &subnets)
        .iter()
        .map(|f| f.to_string())
        .collect();
    if let Some(remotes) = &cfg.nb_remote {
        let nb = nb::unexcluded(remotes, &vips)
            .await
            .map_err(|source| AgentError::Northbound {
                remotes: remotes.clone(),
                source: Box::new(source),
            })?;
        out.extend(nb);
    }
    Ok(out)
}
