//! Wires the pipeline together: objects -> model -> plan per bridge -> one reconciler per
//! bridge, a Northbound writer, and an observer; the one-shot forms used by `--once`,
//! `vipflow verify` and `vipflow check` are in `oneshot.rs`.
//!
//! Shutting down leaves every flow in place: a restarting agent must not interrupt traffic.

use crate::config::{BridgeConfig, Config};
#[cfg(test)]
use crate::model::Model;
use crate::model::{Objects, Problem};

mod advertising;
mod cluster;
pub mod fence;
pub mod members;
mod observer;
mod oneshot;
mod planner_task;
mod report;
use crate::model::Loaded;
use crate::reconcile::bridge::{self, BridgeSettings, BridgeStatus, DesiredFlows};
use crate::reconcile::northbound as nb;
use crate::source::file;
use crate::status::StatusDoc;
pub use cluster::{Cluster, ClusterOptions, run_cluster, start_cluster};
use observer::observe_agent;
pub use oneshot::{
    Drift, OneShotBgp, OneShotFrrK8s, OneShotPlan, SyncReport, check, frr_is_frr_k8s, objects_path,
    plan_allocations, plan_once, pool_ranges, sync_frr_once, sync_once, sync_plan, verify,
    verify_frr, verify_northbound,
};
pub use planner_task::ORDER_WAIT;
use planner_task::{Arrivals, PlannerTask};
pub use report::Planned;
use report::{PlanInfo, report};
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
    #[error(transparent)]
    Members(#[from] members::MembersError),
    #[error("the node's FRR: {0}")]
    Frr(crate::reconcile::frr::FrrError),
    #[error("the plan has no Northbound rows although a Northbound database is set")]
    NoRows,
    #[error("Northbound database {remotes}: {source}")]
    Northbound {
        remotes: String,
        source: Box<ovsdb::Error>,
    },
}

/// The model without the EndpointSlices (empty; their problems are in), with every problem:
/// the independent oracle the tests check [`report_problems`] against.
#[cfg(test)]
pub fn build_model_without_slices(cfg: &Config, loaded: &Loaded) -> (Model, Vec<Problem>) {
    let model = Model::build_without_slices(
        &loaded.objects,
        &crate::model::ModelOptions::from_config(cfg),
    );
    with_problems(cfg, loaded, model)
}

/// Every problem of `loaded` the planner's `services` know of: the source's, the Services',
/// Nodes' and EndpointSlices', this node's.
pub fn report_problems(
    cfg: &Config,
    loaded: &Loaded,
    services: &crate::plan::service_report::ServiceReport,
) -> Vec<Problem> {
    let mut found = services.problems();
    crate::model::slice_problems(&loaded.objects.endpoint_slices, &mut found);
    found.sort();
    found.dedup();
    with_source_and_node(cfg, loaded, found)
}

/// `model` with every problem of `loaded`: the source's, the model's, this node's.
#[cfg(test)]
fn with_problems(cfg: &Config, loaded: &Loaded, model: Model) -> (Model, Vec<Problem>) {
    let problems = with_source_and_node(cfg, loaded, model.problems.iter().cloned());
    (model, problems)
}

/// The objects' problems `found` between the source's and this node's.
fn with_source_and_node(
    cfg: &Config,
    loaded: &Loaded,
    found: impl IntoIterator<Item = Problem>,
) -> Vec<Problem> {
    let mut problems = loaded.problems.clone();
    problems.extend(found);
    if let Err(p) = crate::model::node_gateway_router_mac(&loaded.objects.nodes, &cfg.node_name) {
        problems.push(p);
    }
    problems
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
        healthy_after: retry::HEALTHY_AFTER,
        connect_retry: Duration::from_millis(50),
        audit_interval: (cfg.flow_audit_ms > 0).then(|| Duration::from_millis(cfg.flow_audit_ms)),
        silent: None,
    }
}

pub fn nb_settings(cfg: &Config, remotes: &str) -> nb::NbSettings {
    nb::NbSettings {
        remotes: remotes.to_string(),
        backoff_min: nb::BACKOFF_MIN,
        backoff_max: nb::BACKOFF_MAX,
        shared_backoff: None,
        leading: None,
        request_timeout: Duration::from_millis(cfg.nb_timeout_ms.max(1)),
        templates: cfg.northbound.node_rows.templates(),
        settle: None,
    }
}

/// True once every bridge reconciler has applied a plan (at once without bridges): when the
/// Northbound writer takes its monitor again after a batched first sync
/// ([`nb::NbSettings::settle`]).
fn bridges_synced(
    status: &[(String, watch::Receiver<BridgeStatus>)],
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(status.is_empty());
    let mut each: Vec<_> = status.iter().map(|(_, s)| s.clone()).collect();
    tasks.push(tokio::spawn(async move {
        for s in &mut each {
            if s.wait_for(|s| s.applied_generation.is_some())
                .await
                .is_err()
            {
                return;
            }
        }
        let _ = tx.send(true);
    }));
    rx
}

/// How far the agent's shutdown went, as far as announcing goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StopPhase {
    #[default]
    Running,
    /// Stopping: the others take this node's VIPs; it keeps answering for those it has, takes
    /// nothing and announces nothing.
    HandingOver,
    /// The hand-over is over: this node's answers go.
    Withdraw,
}

/// Optional parts of a running agent.
#[derive(Default, Clone)]
pub struct AgentOptions {
    /// Leadership for the Northbound writer; `None`: write whenever a database is configured.
    pub leader: Option<watch::Receiver<bool>>,
    /// Where Kubernetes Events go; `None`: no events (file source).
    pub events: Option<crate::event_sink::EventSink>,
    /// Where this node's records of who announces what go (cluster mode, announcing).
    pub records: Option<crate::record_writer::RecordWriter>,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The allocator's pools, for the status document (`--allocate-ips`).
    pub pools: Option<watch::Receiver<Arc<Vec<crate::status::PoolDoc>>>>,
    /// The membership's view, when it runs ([`members::start`]).
    pub members: Option<watch::Receiver<crate::membership_task::LiveMembers>>,
    /// Where the planner tells the membership who takes this node's VIPs if it goes.
    pub successors: Option<Arc<watch::Sender<crate::membership_task::Successors>>>,
    /// Where the planner puts this node's claims for the membership.
    pub claims: Option<watch::Sender<crate::membership_task::OwnClaims>>,
    /// The Northbound database's backoff when something dialled it before the agent started
    /// (the read of its schema, [`nb::resolve_node_rows`]); `None`: the writer's own.
    pub nb_backoff: Option<retry::SharedBackoff>,
    /// frr-k8s mode (`bgp.frr-k8s` on, cluster mode): the client the `FRRConfiguration`s are
    /// written with.
    pub frr_k8s: Option<kube::Client>,
    /// Leadership of the cluster-wide work (frr-k8s's shared objects); `None`: do it whenever
    /// there is some.
    pub cluster_leader: Option<watch::Receiver<bool>>,
}

/// Handles on a running agent, for the CLI and for tests.
pub struct Running {
    /// One status channel per configured bridge, in config order.
    pub status: Vec<(String, watch::Receiver<BridgeStatus>)>,
    /// The Northbound writer's status, when one is configured.
    pub nb_status: Option<watch::Receiver<nb::NorthboundStatus>>,
    /// The generation of the latest plan handed to the reconcilers.
    pub generation: watch::Receiver<u64>,
    /// The latest plan's generation and the objects it was made from: which generation holds a
    /// given snapshot of the source.
    pub planned: watch::Receiver<Option<Arc<Planned>>>,
    /// True once every bridge (and the Northbound writer, when this agent is it) has applied
    /// a plan: the readiness probe.
    pub ready: watch::Receiver<bool>,
    /// The agent's state (`/status`, `vipflow status`); `None` before the first plan.
    pub status_doc: watch::Receiver<Option<StatusDoc>>,
    leader: Option<watch::Receiver<bool>>,
    /// The node's FRR task, when this node speaks BGP.
    pub frr_status: Option<watch::Receiver<crate::reconcile::frr::FrrStatus>>,
    stop: watch::Sender<StopPhase>,
    silent: watch::Sender<bool>,
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

    /// The agent stops: no node announcement goes out from now on (a schedule under way ends),
    /// and the planner takes no VIP more ([`StopPhase::HandingOver`]).
    pub fn begin_stop(&self) {
        self.silent.send_replace(true);
        self.stop.send_replace(StopPhase::HandingOver);
    }

    /// The hand-over is over: remove this node's answers, and wait (up to `within`) until
    /// the bridges hold that. False when they did not confirm in time.
    pub async fn withdraw(&mut self, within: Duration) -> bool {
        let before = *self.generation.borrow();
        self.silent.send_replace(true);
        self.stop.send_replace(StopPhase::Withdraw);
        let withdrawn = async {
            let g = self.generation.wait_for(|g| *g > before).await.map(|g| *g);
            if let Ok(g) = g {
                self.wait_applied(g).await;
            }
        };
        tokio::time::timeout(within, withdrawn).await.is_ok()
    }

    /// After [`Running::begin_stop`]: when the plan that takes the stop has this node's BGP
    /// routes going out in graceful shutdown (the Node is cordoned: it is going away), let
    /// the routers move off it for the hand-over time, then withdraw them and wait until FRR
    /// took that. Otherwise (a restart in place) nothing: FRR keeps the routes for the next
    /// agent.
    pub async fn leave_bgp(&mut self, before: u64) {
        let graceful = {
            let planned = tokio::time::timeout(
                Duration::from_secs(2),
                self.planned
                    .wait_for(|p| p.as_ref().is_some_and(|p| p.generation > before)),
            )
            .await;
            matches!(&planned, Ok(Ok(p)) if p.as_ref().and_then(|p| p.bgp.as_ref()).is_some_and(|b| b.graceful_shutdown))
        };
        if !graceful {
            return;
        }
        tracing::info!(
            hold = ?crate::membership_task::HANDOVER,
            "this node is cordoned: its BGP routes go out less preferred, then go, before the agent stops"
        );
        tokio::time::sleep(crate::membership_task::HANDOVER).await;
        if !self.withdraw(Duration::from_secs(10)).await {
            tracing::warn!("FRR may still advertise this node's routes");
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
    objects: watch::Receiver<Arc<Loaded>>,
    opts: AgentOptions,
) -> Running {
    let mut tasks = Vec::new();
    let mut senders = Vec::new();
    let mut status = Vec::new();
    let (stop_tx, stop_rx) = watch::channel(StopPhase::Running);
    let (silent_tx, silent_rx) = watch::channel(false);
    for b in &cfg.bridges {
        let (dtx, drx) = watch::channel(Arc::new(DesiredFlows::default()));
        let (stx, srx) = watch::channel(BridgeStatus::default());
        let s = BridgeSettings {
            silent: Some(silent_rx.clone()),
            ..settings(&cfg, b)
        };
        tasks.push(tokio::spawn(bridge::run(s, drx, stx)));
        senders.push(dtx);
        status.push((b.name.clone(), srx));
    }
    let mut nb_tx = None;
    let mut nb_status = None;
    if let Some(remotes) = cfg.nb_remote.clone() {
        let (dtx, drx) = watch::channel(Arc::new(nb::DesiredRows::default()));
        let (stx, srx) = watch::channel(nb::NorthboundStatus::default());
        let settle = bridges_synced(&status, &mut tasks);
        tasks.push(tokio::spawn(nb_writer(
            nb::NbSettings {
                settle: Some(settle),
                shared_backoff: opts.nb_backoff.clone(),
                ..nb_settings(&cfg, &remotes)
            },
            drx,
            stx,
            opts.leader.clone(),
        )));
        nb_tx = Some(dtx);
        nb_status = Some(srx);
    }
    let mut frr_status = None;
    let frr_k8s = match (cfg.bgp.frr_k8s, opts.frr_k8s.clone()) {
        (crate::config::FrrK8sMode::On, Some(client)) => Some(client),
        (crate::config::FrrK8sMode::On, None) => {
            tracing::warn!("frr-k8s mode needs the Kubernetes API (cluster mode): no BGP");
            None
        }
        _ => None,
    };
    let bgp_on = frr_k8s.is_some() || cfg.bgp.frr_socket_dir.is_some();
    let advertising = bgp_on.then(|| {
        let (stx, srx) = watch::channel(crate::reconcile::frr::FrrStatus::default());
        let gate = advertising::GateInputs {
            bridges: status.iter().map(|(_, rx)| rx.clone()).collect(),
            programmed: cfg
                .bridges
                .first()
                .map(|b| bridge::BrIntFlows::new(&settings(&cfg, b))),
            frr: srx.clone(),
        };
        let (a, inputs) = advertising::Advertising::start(&cfg.node_name, gate, &mut tasks);
        frr_status = Some(srx);
        match (&frr_k8s, &cfg.bgp.frr_socket_dir) {
            (Some(client), _) => {
                let namespace = cfg.bgp.frr_k8s_namespace.clone();
                let (otx, orx) = watch::channel(None);
                let (ptx, prx) = watch::channel(None);
                tasks.push(tokio::spawn(crate::reconcile::frrk8s::run_node(
                    client.clone(),
                    namespace.clone(),
                    cfg.node_name.clone(),
                    orx,
                    inputs.wanted,
                    stx,
                )));
                tasks.push(tokio::spawn(crate::reconcile::frrk8s::run_pools(
                    client.clone(),
                    namespace.clone(),
                    prx,
                    opts.cluster_leader.clone(),
                    opts.metrics.frr_k8s_writes.clone(),
                )));
                a.through_frr_k8s(advertising::FrrK8sOutputs {
                    namespace,
                    object: otx,
                    pools: ptx,
                })
            }
            (None, dir) => {
                let dir = dir.clone().unwrap_or_default();
                let vtysh =
                    crate::reconcile::frr::Vtysh::new(dir).with_program(cfg.bgp.vtysh.clone());
                tasks.push(tokio::spawn(crate::reconcile::frr::run(vtysh, inputs, stx)));
                a
            }
        }
    });
    let (gtx, grx) = watch::channel(0u64);
    let (announce_tx, announce_rx) = watch::channel(None);
    let (ptx, prx) = watch::channel::<Option<Arc<PlanInfo>>>(None);
    let (rtx, rrx) = watch::channel::<Option<Arc<Planned>>>(None);
    let planned_rx = rrx.clone();
    let received: Arrivals = Arc::default();
    let (ready_tx, ready) = watch::channel(false);
    let with_events = opts.events.is_some();
    tasks.push(tokio::spawn(report(
        cfg.clone(),
        with_events,
        rrx,
        ptx,
        ready.clone(),
    )));
    tasks.push(tokio::spawn(
        PlannerTask {
            cfg: cfg.clone(),
            objects,
            received: Arc::clone(&received),
            bridges: senders,
            northbound: nb_tx,
            reports: rtx,
            generation: gtx,
            nb_status: nb_status.clone(),
            bridge_status: status.iter().map(|(_, rx)| rx.clone()).collect(),
            leader: opts.leader.clone(),
            cluster_leader: opts.cluster_leader.clone(),
            members: opts.members.clone(),
            successors: opts.successors.clone(),
            claims: opts.claims.clone(),
            stop: stop_rx,
            announce: announce_tx,
            metrics: opts.metrics.clone(),
            fence: fence::FenceTargets::of(&cfg).map(fence::FenceKeeper::start),
            advertising,
        }
        .run(),
    ));
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
        announce_rx,
        frr_status.clone(),
    )));
    Running {
        status,
        nb_status,
        frr_status,
        generation: grx,
        planned: planned_rx,
        ready,
        status_doc,
        leader: opts.leader,
        stop: stop_tx,
        silent: silent_tx,
        tasks,
    }
}

/// The Northbound writer, running only while this agent leads (or always, without election).
async fn nb_writer(
    settings: nb::NbSettings,
    desired: watch::Receiver<Arc<nb::DesiredRows>>,
    status: watch::Sender<nb::NorthboundStatus>,
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

/// Run until interrupted, re-reading the objects file every `poll`. `nb_backoff`: see
/// [`AgentOptions::nb_backoff`].
pub async fn run(
    cfg: Config,
    poll: Duration,
    nb_backoff: Option<retry::SharedBackoff>,
) -> Result<(), AgentError> {
    let path = cfg.objects.clone().ok_or(AgentError::NoObjects)?;
    let (rx, watcher) = file::watch_bounded(path, poll, cfg.objects_max_bytes)?;
    let members = members::start(&cfg, rx.clone())?;
    let opts = AgentOptions {
        members: members.as_ref().map(|m| m.live.clone()),
        successors: members.as_ref().map(|m| m.successors.clone()),
        claims: members.as_ref().map(|m| m.claims.clone()),
        nb_backoff,
        ..AgentOptions::default()
    };
    let http = serve_http(&cfg, &opts.metrics).await?;
    let mut running = start_with(cfg, rx, opts);
    let http = http.map(|h| h(running.ready.clone(), running.status_doc.clone()));
    shutdown_signal().await;
    tracing::info!("shutting down; flows stay in place");
    // From here on this node announces nothing, whatever happens meanwhile.
    let before = *running.generation.borrow();
    running.begin_stop();
    if let Some(m) = members {
        m.leave(&mut running).await;
    } else {
        running.leave_bgp(before).await;
    }
    watcher.abort();
    running.stop();
    if let Some(h) = http {
        h.abort();
    }
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
