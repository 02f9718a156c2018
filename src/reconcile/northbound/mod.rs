//! Keeps vipflow's OVN Northbound `Load_Balancer` rows equal to the plan.
//!
//! - **Observed state** is kept from a monitor of Load_Balancer, Load_Balancer_Group,
//!   Logical_Switch and Logical_Router (the `ovsdb` client follows the cluster leader and
//!   resumes the monitor after a reconnect). [`Observed`](vipflow_core::reconcile::northbound::Observed) is built once from the cache, then
//!   kept current from the monitor's events: each event updates one row and names the Services
//!   it concerns, so nothing is re-read in proportion to the database.
//! - **Ownership**: a row is ours when its `external_ids` carry `vipflow.io/owner` and
//!   `vipflow.io/scope`; it is identified by (owner, protocol, scope). Rows without them are
//!   never read into the diff, so never touched.
//! - **Writes**: the diff of observed and planned rows, as one transaction per changed Service.
//!   The first sync after connecting is batched: transactions of 100 Services sent back to
//!   back (ovsdb-server's cost per row grows with a transaction's size), and when large, with
//!   the monitor cancelled meanwhile (otherwise the server builds the whole update before it
//!   replies) and taken again after, once the bridges' first syncs are done (at most
//!   [`SETTLE_WAIT`] later), and every Service checked against its snapshot at once. Later,
//!   only the Services the planner reports as changed, and those whose rows the monitor saw
//!   change, are diffed; a skipped plan generation, a failure or a switch/router/group
//!   appearing or going means a full diff. Rows that are ours but no longer planned (orphans)
//!   and extra copies of a row (duplicates) are deleted.
//! - **One writer at a time, no duplicates**: a session first writes a fresh token into
//!   `NB_Global` `external_ids:vipflow.io/writer` ([`take_over`]), then reads. Every
//!   transaction starts with a `wait` that fails unless the token is still there, so a writer
//!   that was replaced (an old Lease holder, a session before a reconnect) cannot write any
//!   more, and what it did write is in the new session's snapshot. The fence is in the
//!   database, so it holds across a RAFT leader change, unlike OVSDB locks, which are per
//!   server. Per-Service transactions also guard each insert with a `wait` on its identity,
//!   in case the cache has not yet shown one of our own writes. A transaction whose outcome is
//!   unknown (connection lost after sending) is never resent: the next session reads first.
//! - Load balancers are attached through weak references (switch/router/group
//!   `load_balancer` columns), so deleting a row detaches it everywhere.
//! - vipflow's own Load_Balancer_Group, when the plan has one, is created before the first
//!   diff that needs it and attached to every node's router and switch (`group.rs`).

use ovsdb::ClientOptions;
use retry::{Backoff, Policy, SharedBackoff};
use std::time::Duration;
use tokio::sync::watch;

mod ensure;
mod oneshot;
mod task;
pub use ensure::take_over;
pub use oneshot::{Exclude, SCHEMA_WAIT, drift, resolve_node_rows, sync_once, unexcluded};
pub use task::{absorb_queued, run, send, write_plan, write_plan_reporting};
// The writer's input and output, and the one-shot commands' diff and drift, are the core's.
pub use vipflow_core::reconcile::northbound::{DesiredRows, NorthboundStatus, node_rows_for};

/// How long one connection attempt keeps trying the remotes before the writer reports it
/// (and `agent --once` gives up): a wrong remote shows at once, not after the client's
/// request timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// While the database stays unreachable, the same WARN at most this often.
pub const UNREACHABLE_WARN_EVERY: Duration = Duration::from_secs(60);

/// The writer's reconnect waits ([`retry`]'s rule: doubling after every session that was not
/// useful for 10 s, whatever ended it, reset only by one that was). With these a database that
/// fails every session right after it starts sees at most 10 connections in 20 s.
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// A backoff for every dial of one Northbound database: the start's read of its schema
/// ([`resolve_node_rows`]) and the writer ([`NbSettings::shared_backoff`]) go by one.
pub fn peer_backoff() -> SharedBackoff {
    SharedBackoff::new(Backoff::new(Policy::new(BACKOFF_MIN, BACKOFF_MAX)))
}

/// `o` with the writer's connect timeout.
fn nb_options(mut o: ClientOptions, request_timeout: Duration) -> ClientOptions {
    o.connect_timeout = Some(CONNECT_TIMEOUT);
    o.connect.request_timeout = Some(request_timeout);
    o
}

#[derive(Debug, Clone)]
pub struct NbSettings {
    /// `unix:PATH` or `tcp:a:6641,tcp:b:6641,...` (as `ovn-nbctl --db`).
    pub remotes: String,
    /// The reconnect waits ([`BACKOFF_MIN`], [`BACKOFF_MAX`]), when the backoff is the
    /// writer's own.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// The backoff the writer's client shares with other dialers of this database in this
    /// process ([`peer_backoff`]); `None`: its own, from `backoff_min` and `backoff_max`.
    pub shared_backoff: Option<SharedBackoff>,
    /// The Lease gate (cluster mode): a writer token that disappeared is taken back only
    /// while this is true. `None`: always the writer.
    pub leading: Option<watch::Receiver<bool>>,
    /// A request (transaction, monitor, token read) unanswered this long ends the session
    /// with a WARN; the writer connects again.
    pub request_timeout: Duration,
    /// Template rows are in use: `Chassis_Template_Var` is monitored (an OVN before 22.12
    /// has no such table, and a monitor of it would fail).
    pub templates: bool,
    /// After a batched first sync, the monitor is taken again once this is true (the
    /// bridges' first syncs are done), at most [`SETTLE_WAIT`] later: the snapshot's text and
    /// rows and the bridges' full syncs are each a few MiB for a moment, and need not add up.
    /// Until then the writer has no monitor; it writes nothing meanwhile, and the snapshot it
    /// takes then holds whatever anyone wrote. `None`: at once.
    pub settle: Option<watch::Receiver<bool>>,
}

/// The longest a batched first sync's monitor waits for [`NbSettings::settle`].
pub const SETTLE_WAIT: Duration = Duration::from_secs(5);
