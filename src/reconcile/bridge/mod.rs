//! Keeps one bridge's flows equal to the plan.
//!
//! - **Identity**: a flow is identified by (table, priority, normalized match), as OpenFlow
//!   itself does; its cookie and instructions are its content. Only flows under vipflow's
//!   cookie prefix are ever read, replaced or deleted (deletes are strict and carry the exact
//!   cookie), so foreign flows are never touched.
//! - **Ports**: the uplink and patch port are named in the config or found in the node's OVS
//!   database, and their numbers taken from it and checked against PORT_DESC
//!   ([`crate::plan::ports`]); PORT_STATUS and a monitor of the database both trigger a new
//!   resolution.
//! - **Full sync** (after connecting, and whenever a port number or the bridge MAC changes):
//!   read our flows with one flow-stats request filtered by cookie/mask, diff, apply the
//!   difference in one ONF bundle.
//! - **Incremental** (a new plan while connected): diff the last applied set against the new
//!   one, no read needed, and bundle just the delta.
//! - A bundle the switch rejects is retried without the flows it named (each reported), so one
//!   bad flow never holds back the rest; on any connection loss the reconciler reconnects with
//!   exponential backoff and does a full sync.

mod state;
mod task;

pub use state::*;
pub use task::{apply_bundle, read_flows, run};

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
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// How often to try again while the switch accepts no connection at all (its socket is
    /// missing or refuses). Such a try costs one failed connect, so it is short: flows return
    /// this soon after ovs-vswitchd is back, however long it was gone.
    pub connect_retry: Duration,
    /// A session that lasted this long was healthy: the next one starts with the shortest
    /// wait. One that failed sooner (a peer that drops every session right after the
    /// handshake) waits the current backoff, which doubles, so it is not hammered.
    pub healthy_after: Duration,
    /// How often vipflow's flows are read back and compared with what it wrote (`None`: never).
    pub audit_interval: Option<Duration>,
}
