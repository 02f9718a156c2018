//! Cluster mode: the Kubernetes source, an elected Northbound writer, membership, IP
//! allocation, Events and the HTTP endpoint, wired around [`super::start_with`].

use super::{AgentError, AgentOptions, Running, members, serve_http, shutdown_signal, start_with};
use crate::config::Config;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

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
    /// See [`AgentOptions::nb_backoff`].
    pub nb_backoff: Option<retry::SharedBackoff>,
}

/// A running cluster-mode agent.
pub struct Cluster {
    pub running: Running,
    pub election: Option<crate::leader::Election>,
    /// The election of the cluster-wide work (frr-k8s's shared objects, MetalLB's Events).
    pub cluster_election: Option<crate::leader::Election>,
    pub metrics: Arc<crate::metrics::Metrics>,
    source: tokio::task::JoinHandle<()>,
    ipam: Option<tokio::task::JoinHandle<()>>,
    metallb_events: Option<tokio::task::JoinHandle<()>>,
    members: Option<members::Members>,
    http: Option<tokio::task::JoinHandle<()>>,
}

impl Cluster {
    /// Graceful stop: hand the Northbound over at once (release the Lease) rather than after
    /// it expires; flows and rows stay in place.
    pub async fn shutdown(mut self) {
        // From here on this node announces nothing, whatever happens meanwhile.
        let before = *self.running.generation.borrow();
        self.running.begin_stop();
        if let Some(m) = self.members.take() {
            m.leave(&mut self.running).await;
        } else {
            self.running.leave_bgp(before).await;
        }
        if let Some(e) = self.election {
            e.release().await;
        }
        if let Some(e) = self.cluster_election {
            e.release().await;
        }
        self.source.abort();
        if let Some(t) = self.ipam {
            t.abort();
        }
        if let Some(t) = self.metallb_events {
            t.abort();
        }
        self.running.stop();
        if let Some(h) = self.http {
            h.abort();
        }
    }
}

/// Start in a cluster: the Kubernetes source, an elected Northbound writer, Events, HTTP.
pub async fn start_cluster(
    mut cfg: Config,
    cluster: ClusterOptions,
) -> Result<Cluster, AgentError> {
    use crate::config::FrrK8sMode;
    use crate::source::kube as ksrc;
    let client = ksrc::client(cluster.kubeconfig.as_deref())
        .await
        .map_err(AgentError::Kube)?;
    let frr_k8s = match cfg.bgp.frr_k8s {
        FrrK8sMode::On => true,
        FrrK8sMode::Off => false,
        FrrK8sMode::Auto => frr_k8s_runs_here(&client, &cfg.node_name).await,
    };
    cfg.bgp.frr_k8s = if frr_k8s {
        FrrK8sMode::On
    } else {
        FrrK8sMode::Off
    };
    if frr_k8s {
        tracing::info!(
            namespace = %cfg.bgp.frr_k8s_namespace,
            "advertising through frr-k8s: FRRConfiguration objects, not the node's FRR"
        );
        if cfg.bgp.frr_socket_dir.is_some() {
            tracing::warn!("frr-k8s owns this node's FRR: --frr-socket-dir is not used");
        }
    }
    let writer_possible = cfg.nb_remote.is_some();
    let announcing = crate::announce::Announcing::of(&cfg);
    let source_cfg = ksrc::KubeSourceConfig {
        node_name: cfg.node_name.clone(),
        // Placing VIPs needs every Node, as the Northbound writer's templates do.
        all_nodes: writer_possible || announcing.any() || frr_k8s,
        ..Default::default()
    };
    let (rx, source) = ksrc::start(client.clone(), source_cfg);
    let members = members::start(&cfg, rx.clone())?;
    let elect = |name: &str| {
        let ns = cfg
            .lease
            .namespace
            .clone()
            .unwrap_or_else(|| cluster.namespace.clone());
        crate::leader::start(
            client.clone(),
            crate::leader::LeaderConfig::new(
                &ns,
                name,
                &cluster.identity,
                Duration::from_secs(cfg.lease.duration_seconds.max(1)),
            ),
        )
    };
    // The Northbound writer (and the allocator): only agents that could write take part.
    let election = ((writer_possible || cfg.allocate_ips) && cfg.lease.enabled)
        .then(|| elect(&cfg.lease.name));
    // The cluster-wide work on a Lease of its own: frr-k8s's shared objects, MetalLB's Events.
    let metallb = metallb_served(&client).await;
    let cluster_election =
        ((frr_k8s || metallb) && cfg.lease.enabled).then(|| elect(&cfg.lease.cluster_name));
    let metrics = Arc::new(crate::metrics::Metrics::new());
    let sink = |kind, client: &kube::Client| {
        crate::event_sink::EventSink::start(
            client.clone(),
            crate::event_sink::SinkConfig {
                kind,
                instance: cfg.node_name.clone(),
                per_second: cluster.events_per_second,
                burst: cluster.events_burst,
            },
            Some(&metrics),
        )
    };
    let events = sink(crate::event_sink::SinkKind::Node, &client);
    // Who announces each VIP, on its Service: written by the announcing nodes, paced as the
    // Events are.
    let records = announcing.any().then(|| {
        crate::record_writer::RecordWriter::start(
            client.clone(),
            cluster.events_per_second,
            cluster.events_burst,
            Some(&metrics),
        )
    });
    let (pools_tx, pools_rx) = watch::channel(Arc::new(Vec::new()));
    let ipam = cfg.allocate_ips.then(|| {
        // Its own Event sink: its statements are a set of their own (the sink publishes what
        // is new in the set it is given), said by `allocator` whichever agent leads.
        let sink = sink(crate::event_sink::SinkKind::Allocator, &client);
        tokio::spawn(crate::ipam_task::run_with(
            client.clone(),
            crate::ipam_task::IpamSettings {
                class: cfg.load_balancer_class.clone(),
                instance: cfg.node_name.clone(),
                ..Default::default()
            },
            election.as_ref().map(|e| e.is_leader.clone()),
            crate::ipam_task::IpamOutputs {
                events: Some(sink),
                metrics: Some(metrics.clone()),
                pools: Some(pools_tx),
            },
        ))
    });
    // Said by the elected agent (by every agent where election is off).
    let metallb_events = metallb.then(|| {
        tokio::spawn(crate::metallb_events::run(
            client.clone(),
            cfg.node_name.clone(),
            cluster_election.as_ref().map(|e| e.is_leader.clone()),
        ))
    });
    let opts = AgentOptions {
        leader: election.as_ref().map(|e| e.is_leader.clone()),
        events: Some(events),
        records,
        metrics: metrics.clone(),
        pools: cfg.allocate_ips.then_some(pools_rx),
        members: members.as_ref().map(|m| m.live.clone()),
        successors: members.as_ref().map(|m| m.successors.clone()),
        claims: members.as_ref().map(|m| m.claims.clone()),
        nb_backoff: cluster.nb_backoff.clone(),
        frr_k8s: frr_k8s.then(|| client.clone()),
        cluster_leader: cluster_election.as_ref().map(|e| e.is_leader.clone()),
    };
    let http = serve_http(&cfg, &opts.metrics).await?;
    let running = start_with(cfg, rx, opts);
    let http = http.map(|h| h(running.ready.clone(), running.status_doc.clone()));
    Ok(Cluster {
        running,
        election,
        cluster_election,
        metrics,
        source,
        ipam,
        metallb_events,
        members,
        http,
    })
}

/// Whether any of MetalLB's kinds is served (its CRDs are installed).
async fn metallb_served(client: &kube::Client) -> bool {
    for (api, kind, plural) in crate::source::kube::metallb_kinds() {
        let resource = crate::source::kube::custom_resource(api, kind, plural);
        if crate::source::kube::served(client, &resource).await {
            return true;
        }
    }
    false
}

/// Whether frr-k8s runs on node `node`: its `FRRNodeState` (which frr-k8s keeps for each node
/// it runs on) exists. No CRD, no object, or an error reading it: no.
async fn frr_k8s_runs_here(client: &kube::Client, node: &str) -> bool {
    use crate::frrk8s::objects::{API_VERSION, NODE_STATE_KIND, NODE_STATE_PLURAL};
    let resource =
        crate::source::kube::custom_resource(API_VERSION, NODE_STATE_KIND, NODE_STATE_PLURAL);
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(client.clone(), &resource);
    match api.get_opt(node).await {
        Ok(found) => found.is_some(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot tell whether frr-k8s runs on this node; driving no frr-k8s");
            false
        }
    }
}

/// Run in a cluster until SIGINT/SIGTERM.
pub async fn run_cluster(cfg: Config, cluster: ClusterOptions) -> Result<(), AgentError> {
    let c = start_cluster(cfg, cluster).await?;
    shutdown_signal().await;
    tracing::info!("shutting down; flows stay in place");
    c.shutdown().await;
    Ok(())
}
