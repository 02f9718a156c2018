//! Wires the pipeline together: objects -> model -> plan per bridge -> one reconciler per
//! bridge. Also the one-shot forms used by `--once` and `vipflow verify`.
//!
//! Shutting down leaves every flow in place: a restarting agent must not interrupt traffic.

use crate::config::{BridgeConfig, Config};
use crate::model::{Model, ModelOptions, Objects, Problem};
use crate::plan::flows::{PlanInput, PlannedFlow, plan};
use crate::plan::northbound::{self as nbplan, LbRow};
use crate::reconcile::bridge::{self, BridgeSettings, Desired, FlowSet, Ports, Status};
use crate::reconcile::northbound as nb;
use crate::source::file::{self, Loaded};
use std::collections::BTreeSet;
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
    #[error("no objects file: give --objects or set objects in the config file")]
    NoObjects,
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
    (model, problems)
}

pub fn settings(cfg: &Config, b: &BridgeConfig) -> BridgeSettings {
    BridgeSettings {
        bridge: b.clone(),
        target: b.target(&cfg.ovs_rundir),
        cookie_base: cfg.cookie_base(),
        cookie_mask: cfg.cookie_mask(),
        openflow: openflow::Config::default(),
        backoff_min: Duration::from_millis(100),
        backoff_max: Duration::from_secs(5),
    }
}

/// The desired Northbound rows.
pub fn plan_northbound(cfg: &Config, model: &Model) -> Vec<LbRow> {
    nbplan::plan(model, &cfg.northbound)
}

pub fn nb_settings(remotes: &str) -> nb::NbSettings {
    nb::NbSettings {
        remotes: remotes.to_string(),
        backoff_min: Duration::from_millis(100),
        backoff_max: Duration::from_secs(5),
    }
}

/// Handles on a running agent, for the CLI and for tests.
pub struct Running {
    /// One status channel per configured bridge, in config order.
    pub status: Vec<(String, watch::Receiver<Status>)>,
    /// The Northbound writer's status, when one runs.
    pub nb_status: Option<watch::Receiver<nb::Status>>,
    /// The generation of the latest plan handed to the reconcilers.
    pub generation: watch::Receiver<u64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Wait until every bridge has applied plan `generation` (or a later one).
    pub async fn wait_applied(&mut self, generation: u64) {
        for (_, st) in &mut self.status {
            let _ = st
                .wait_for(|s| s.applied_generation.is_some_and(|g| g >= generation))
                .await;
        }
        if let Some(st) = &mut self.nb_status {
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
pub fn start(cfg: Config, mut objects: watch::Receiver<Arc<Loaded>>) -> Running {
    let mut tasks = Vec::new();
    let mut senders = Vec::new();
    let mut status = Vec::new();
    for b in &cfg.bridges {
        let (dtx, drx) = watch::channel(Arc::new(Desired {
            generation: 0,
            flows: Vec::new(),
        }));
        let (stx, srx) = watch::channel(Status::default());
        tasks.push(tokio::spawn(bridge::run(settings(&cfg, b), drx, stx)));
        senders.push(dtx);
        status.push((b.name.clone(), srx));
    }
    let nb = cfg.nb_remote.as_ref().map(|remotes| {
        let (dtx, drx) = watch::channel(Arc::new(nb::Desired::default()));
        let (stx, srx) = watch::channel(nb::Status::default());
        tasks.push(tokio::spawn(nb::run(nb_settings(remotes), drx, stx)));
        (dtx, srx)
    });
    let (nb_tx, nb_status) = match nb {
        Some((tx, rx)) => (Some(tx), Some(rx)),
        None => (None, None),
    };
    let (gtx, grx) = watch::channel(0u64);
    tasks.push(tokio::spawn(async move {
        let mut generation = 0u64;
        let mut reported: BTreeSet<String> = BTreeSet::new();
        loop {
            let loaded = objects.borrow_and_update().clone();
            let (model, problems) = build_model(&cfg, &loaded);
            // Report each problem once while it lasts, not on every re-plan.
            let now: BTreeSet<String> = problems.iter().map(|p| p.to_string()).collect();
            for p in now.difference(&reported) {
                tracing::warn!(problem = %p, "skipped");
            }
            reported = now;
            generation += 1;
            for ((_, flows), tx) in plan_bridges(&cfg, &model).into_iter().zip(&senders) {
                let _ = tx.send(Arc::new(Desired { generation, flows }));
            }
            if let Some(tx) = &nb_tx {
                let _ = tx.send(Arc::new(nb::Desired {
                    generation,
                    rows: plan_northbound(&cfg, &model),
                    vips: model.vips().into_keys().collect(),
                    exclude_ips: cfg.northbound.exclude_ips,
                }));
            }
            let _ = gtx.send(generation);
            if objects.changed().await.is_err() {
                return;
            }
        }
    }));
    Running {
        status,
        nb_status,
        generation: grx,
        tasks,
    }
}

/// Run until interrupted, re-reading the objects file every `poll`.
pub async fn run(cfg: Config, poll: Duration) -> Result<(), AgentError> {
    let path = cfg.objects.clone().ok_or(AgentError::NoObjects)?;
    let (rx, watcher) = file::watch(path, poll)?;
    let running = start(cfg, rx);
    shutdown_signal().await;
    tracing::info!("shutting down; flows stay in place");
    watcher.abort();
    running.stop();
    Ok(())
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

/// Connect to a bridge, learn its ports and read our flows.
async fn observe(
    cfg: &Config,
    b: &BridgeConfig,
) -> Result<(openflow::Connection, Ports, FlowSet), AgentError> {
    let s = settings(cfg, b);
    let err = |source| AgentError::OpenFlow {
        bridge: b.name.clone(),
        source,
    };
    let (conn, _events) = openflow::Connection::connect(&s.target, s.openflow.clone())
        .await
        .map_err(err)?;
    let ports = Ports::from_desc(&conn.port_desc().await.map_err(err)?);
    let flows = bridge::read_flows(&conn, s.cookie_base, s.cookie_mask)
        .await
        .map_err(err)?;
    Ok((conn, ports, flows))
}

/// One full sync of every bridge to `objects` (`vipflow agent --once`).
pub async fn sync_once(cfg: &Config, objects: &Objects) -> Result<Vec<SyncReport>, AgentError> {
    let model = Model::build(objects, &model_options(cfg));
    let mut reports = Vec::new();
    for (b, flows) in plan_bridges(cfg, &model) {
        let (conn, ports, observed) = observe(cfg, &b).await?;
        let (want, mut skipped) = bridge::resolve_plan(&flows, &b, &ports);
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
            nb::sync_once(remotes, &rows, exclude)
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
    nb::drift(remotes, &rows, exclude)
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
    let mut out = Vec::new();
    for (b, flows) in plan_bridges(cfg, &model) {
        let (conn, ports, observed) = observe(cfg, &b).await?;
        conn.close();
        let (want, skipped) = bridge::resolve_plan(&flows, &b, &ports);
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
    use crate::plan::exclude::{KubeOvnSubnet, check_kubeovn};
    let model = Model::build(objects, &model_options(cfg));
    let vips: BTreeSet<std::net::IpAddr> = model.vips().into_keys().collect();
    let subnets: Vec<KubeOvnSubnet> = objects
        .subnets
        .iter()
        .map(|s| KubeOvnSubnet {
            name: s.metadata.name.clone().unwrap_or_default(),
            cidr_block: s.spec.cidr_block.clone(),
            exclude_ips: s.spec.exclude_ips.clone(),
            gateway: s.spec.gateway.clone(),
        })
        .collect();
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
