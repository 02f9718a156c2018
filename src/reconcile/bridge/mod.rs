//! Keeps one bridge's flows equal to the plan.
//!
//! - **Identity**: a flow is identified by (table, priority, normalized match), as OpenFlow
//!   itself does; its cookie and instructions are its content. Only flows under vipflow's
//!   cookie prefix are ever read, replaced or deleted (deletes are strict and carry the exact
//!   cookie), so foreign flows are never touched.
//! - **Ports**: the uplink and patch port are named in the config or found in the node's OVS
//!   database, and their numbers taken from it and checked against PORT_DESC
//!   ([`vipflow_core::reconcile::bridge::ports`]); PORT_STATUS and a monitor of the database both trigger a new
//!   resolution.
//! - **Memory**: the plan is a persistent set of flow keys shared with the planner; a flow is
//!   made from its key ([`crate::plan::flows::FlowMaker`]) whenever it is written or compared,
//!   and what is applied keeps only a hashed slot -> key index (`applied.rs`). Reads are handed
//!   on one flow at a time and writes encoded one message at a time, so even a full sync of
//!   tens of thousands of flows never holds them in typed form.
//! - **Full sync** (after connecting, and whenever a port number or the bridge MAC changes):
//!   read our flows with one flow-stats request filtered by cookie/mask, diff, apply the
//!   difference in one ONF bundle.
//! - **Incremental** (a new plan while connected): only the keys that changed are made,
//!   resolved and compared with what was applied, no read needed, and just that is bundled;
//!   two plans are compared without visiting what they share.
//! - A bundle the switch rejects is retried without the flows it named (each reported), so one
//!   bad flow never holds back the rest; on any connection loss the reconciler reconnects with
//!   the project's backoff ([`retry`]: doubling from 100 ms to 5 s, reset only after a session
//!   that stayed up 10 s) and does a full sync.

mod conn;
mod garp;
mod programmed;
pub use programmed::BrIntFlows;
pub use task::PROGRAMMED_WAIT;
mod task;

pub use conn::{apply_bundle, apply_each, read_flows};
pub use task::run;
// The reconciler's input and output, and what the one-shot commands resolve, are the core's.
pub use vipflow_core::reconcile::bridge::{
    BridgeStatus, DesiredFlows, FlowBody, FlowId, FlowSet, Heard, Ports, Roles, diff, resolve_plan,
};

use crate::config::BridgeConfig;
use openflow::Config as OfConfig;
use std::time::Duration;

/// How one bridge's reconciler runs: where the switch is, what is vipflow's, and its timers.
#[derive(Debug, Clone)]
pub struct BridgeSettings {
    pub bridge: BridgeConfig,
    /// OpenFlow target (unix:PATH or tcp:HOST:PORT).
    pub target: String,
    pub cookie_base: u64,
    pub cookie_mask: u64,
    /// The node's OVS database (`unix:PATH`, `tcp:HOST:PORT`); `None`: ports by OpenFlow name
    /// only.
    pub ovs_db: Option<String>,
    pub openflow: OfConfig,
    /// The reconnect waits: from `backoff_min`, doubling to `backoff_max` ([`retry`]'s rule).
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// A session that lasted this long was healthy: the next wait is the shortest again. Any
    /// session that ended sooner (a switch that drops every session right after the
    /// handshake, or answers nothing) doubles the wait, so the switch is not hammered.
    pub healthy_after: Duration,
    /// How often to try again while nothing accepts a connection at all (the switch's socket
    /// is missing or refuses): such a try opens no session and costs the switch nothing, and
    /// the flows return this soon after ovs-vswitchd is back.
    pub connect_retry: Duration,
    /// How often vipflow's flows are read back and compared with what it wrote (`None`: never).
    pub audit_interval: Option<Duration>,
    /// True once the agent stops: no announcement goes out any more, and one under way ends.
    pub silent: Option<tokio::sync::watch::Receiver<bool>>,
}
