//! Keeps one bridge's flows equal to the plan.
//!
//! - **Identity**: a flow is identified by (table, priority, normalized match), as OpenFlow
//!   itself does; its cookie and instructions are its content. Only flows under vipflow's
//!   cookie prefix are ever read, replaced or deleted (deletes are strict and carry the exact
//!   cookie), so foreign flows are never touched.
//! - **Ports**: the uplink and patch port are named in the config or found in the node's OVS
//!   database, and their numbers taken from it and checked against PORT_DESC
//!   ([`crate::reconcile::bridge::ports`]); PORT_STATUS and a monitor of the database both trigger a new
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

mod applied;
mod heard;
pub mod ports;
mod state;

pub use applied::{Applied, DeltaPlan, FlowOp, FullSync, Making};
pub use heard::Heard;
pub use state::{
    BridgeProblem, BridgeStatus, DesiredFlows, FlowBody, FlowId, FlowSet, Ports, Roles, diff,
    resolve_plan,
};
