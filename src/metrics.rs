//! Prometheus metrics and the agent's HTTP endpoint (`/metrics`, `/healthz`, `/readyz`,
//! `/status`).
//!
//! Metrics are updated by one observer task from the reconcilers' status channels, so the
//! reconcilers themselves stay free of metrics code.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use tokio::sync::watch;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetLabel {
    /// `bridge/<name>`, `northbound` or `frr` (the node's BGP speaker).
    pub target: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerLabel {
    /// `openflow/<bridge>`, `ovsdb/northbound`, `kubernetes`.
    pub peer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventsLabel {
    /// Whose Events: `node` (this node's VIPs) or `allocator` (the elected allocator's).
    pub sink: String,
    /// `published`, `deferred`, `dropped`, `failed`.
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabel {
    pub pool: String,
    /// `IPv4` or `IPv6`.
    pub family: String,
    /// `assigned` or `available`.
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BgpSessionLabel {
    pub peer: String,
    /// FRR's name of the address family (`ipv4Unicast`).
    pub family: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BfdLabel {
    pub peer: String,
}

fn latency_histogram() -> Histogram {
    // 0.5 ms .. ~16 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

pub struct Metrics {
    registry: Registry,
    pub flows: Family<TargetLabel, Gauge>,
    pub nb_rows: Gauge,
    pub vips: Gauge,
    pub problems: Gauge,
    pub sync_seconds: Family<TargetLabel, Histogram, fn() -> Histogram>,
    pub event_to_dataplane_seconds: Family<TargetLabel, Histogram, fn() -> Histogram>,
    pub connected: Family<PeerLabel, Gauge>,
    pub errors: Family<KindLabel, Counter>,
    pub leader: Gauge,
    pub events: Family<EventsLabel, Gauge>,
    pub pool_addresses: Family<PoolLabel, Gauge>,
    pub announced_vips: Gauge,
    pub announce_takeovers: Counter,
    pub announce_takeover_seconds: Family<TargetLabel, Histogram, fn() -> Histogram>,
    pub live_nodes: Gauge,
    pub announce_records: Family<KindLabel, Counter>,
    pub bgp_session_up: Family<BgpSessionLabel, Gauge>,
    pub bfd_up: Family<BfdLabel, Gauge>,
    pub bgp_advertised_prefixes: Gauge,
    pub frr_k8s_writes: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("vipflow");
        let m = Metrics {
            flows: Family::default(),
            nb_rows: Gauge::default(),
            vips: Gauge::default(),
            problems: Gauge::default(),
            sync_seconds: Family::new_with_constructor(latency_histogram),
            event_to_dataplane_seconds: Family::new_with_constructor(latency_histogram),
            connected: Family::default(),
            errors: Family::default(),
            leader: Gauge::default(),
            events: Family::default(),
            pool_addresses: Family::default(),
            announced_vips: Gauge::default(),
            announce_takeovers: Counter::default(),
            announce_takeover_seconds: Family::new_with_constructor(latency_histogram),
            live_nodes: Gauge::default(),
            announce_records: Family::default(),
            bgp_session_up: Family::default(),
            bfd_up: Family::default(),
            bgp_advertised_prefixes: Gauge::default(),
            frr_k8s_writes: Counter::default(),
            registry: Registry::default(),
        };
        registry.register(
            "flows",
            "Flows of vipflow's on each bridge after the last sync",
            m.flows.clone(),
        );
        registry.register(
            "northbound_rows",
            "Load_Balancer rows vipflow keeps in the Northbound database",
            m.nb_rows.clone(),
        );
        registry.register("vips", "VIPs in the current plan", m.vips.clone());
        registry.register(
            "problems",
            "Input problems (VIPs or ports skipped) in the current plan",
            m.problems.clone(),
        );
        registry.register(
            "sync_duration_seconds",
            "Time of one sync (diff and write) per target",
            m.sync_seconds.clone(),
        );
        registry.register(
            "event_to_dataplane_seconds",
            "From a change of the objects to the switch, the database or the node's FRR \
             (target frr: its prefixes, after the bridges carry them) having it",
            m.event_to_dataplane_seconds.clone(),
        );
        registry.register(
            "peer_connected",
            "1 while the connection to a peer is up",
            m.connected.clone(),
        );
        registry.register("errors", "Errors by kind", m.errors.clone());
        registry.register(
            "leader",
            "1 while this agent is the Northbound writer",
            m.leader.clone(),
        );
        registry.register(
            "kube_events",
            "Kubernetes Events on Services by sink (node, allocator): published; deferred (held \
             back by the rate limit at least once, published later); dropped (stopped holding \
             before their turn); failed (writes refused or timed out, tried again)",
            m.events.clone(),
        );
        registry.register(
            "pool_addresses",
            "Addresses of each VipPool by family, assigned and available (elected agent)",
            m.pool_addresses.clone(),
        );
        registry.register(
            "announced_vips",
            "VIPs this node answers ARP or neighbor solicitations for (announce)",
            m.announced_vips.clone(),
        );
        registry.register(
            "announce_takeovers",
            "VIPs this node took over from another node or took first (announce)",
            m.announce_takeovers.clone(),
        );
        registry.register(
            "announce_takeover_seconds",
            "From the news that made this node take VIPs (a node found dead by the membership, \
             a Node no longer Ready) reaching the planner to the answer flows on the bridge, \
             when the first gratuitous ARP or unsolicited advertisement goes out (announce)",
            m.announce_takeover_seconds.clone(),
        );
        registry.register(
            "live_nodes",
            "Nodes that may announce, as this node sees them (announce)",
            m.live_nodes.clone(),
        );
        registry.register(
            "announce_records",
            "Writes of the vipflow.io/Announced condition on Services by this node: written, \
             removed, failed (tried again) (announce, cluster mode)",
            m.announce_records.clone(),
        );
        registry.register(
            "bgp_session_up",
            "1 while the node's FRR has its BGP session with the peer Established in the family \
             (bgp)",
            m.bgp_session_up.clone(),
        );
        registry.register(
            "bfd_up",
            "1 while the node's FRR has its BFD session with the peer up (bgp)",
            m.bfd_up.clone(),
        );
        registry.register(
            "bgp_advertised_prefixes",
            "Prefixes the node's FRR originates (bgp)",
            m.bgp_advertised_prefixes.clone(),
        );
        registry.register(
            "frr_k8s_writes",
            "Writes (applies and deletes) of the shared FRRConfiguration objects by this agent while it leads (frr-k8s mode)",
            m.frr_k8s_writes.clone(),
        );
        Metrics { registry, ..m }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    pub fn target(t: &str) -> TargetLabel {
        TargetLabel {
            target: t.to_string(),
        }
    }

    pub fn peer(p: &str) -> PeerLabel {
        PeerLabel {
            peer: p.to_string(),
        }
    }

    pub fn error(&self, kind: &str) {
        self.errors
            .get_or_create(&KindLabel {
                kind: kind.to_string(),
            })
            .inc();
    }
}

/// Shared state of the HTTP endpoint.
#[derive(Clone)]
pub struct Http {
    pub metrics: Arc<Metrics>,
    pub ready: watch::Receiver<bool>,
    /// The agent's status as JSON (for `vipflow status`).
    pub status: watch::Receiver<Option<crate::status::StatusDoc>>,
}

/// Serve until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener, state: Http) -> std::io::Result<()> {
    use axum::http::StatusCode;
    use axum::routing::get;
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(
                |axum::extract::State(s): axum::extract::State<Http>| async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        s.metrics.encode(),
                    )
                },
            ),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(
                |axum::extract::State(s): axum::extract::State<Http>| async move {
                    if *s.ready.borrow() {
                        (StatusCode::OK, "ready\n")
                    } else {
                        (
                            StatusCode::SERVICE_UNAVAILABLE,
                            "not ready: first sync not complete\n",
                        )
                    }
                },
            ),
        )
        .route(
            "/status",
            get(
                |axum::extract::State(s): axum::extract::State<Http>| async move {
                    axum::Json(s.status.borrow().clone())
                },
            ),
        )
        .with_state(state);
    axum::serve(listener, app).await
}
