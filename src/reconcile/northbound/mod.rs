//! Keeps vipflow's OVN Northbound `Load_Balancer` rows equal to the plan.
//!
//! - **Observed state** is kept from a monitor of Load_Balancer, Load_Balancer_Group,
//!   Logical_Switch and Logical_Router (the `ovsdb` client follows the cluster leader and
//!   resumes the monitor after a reconnect). [`Observed`] is built once from the cache, then
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

use crate::model::ServiceKey;
use crate::plan::northbound::{GroupPlan, LbRow};
use crate::plan::row_table::{NbDelta, RowIndex};
use ovsdb::{ClientOptions, MonitorSpec};
use retry::{Backoff, Policy, SharedBackoff};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

mod diff;
mod faults;
mod group;
mod lb_row;
mod observed;
mod oneshot;
mod session;
mod task;
mod template_vars;
pub use diff::{Change, describe_drift, diff_exclude};
pub use lb_row::lb_summary;
pub use observed::{LbDigest, Observed, ObservedLb, SwitchIpam, Touched};
pub use oneshot::{
    Exclude, SCHEMA_WAIT, drift, node_rows_for, resolve_node_rows, sync_once, unexcluded,
};
pub use session::{Sent, Session, new_token, take_over};
pub use task::{absorb_queued, run, send, write_plan, write_plan_reporting};

pub use faults::{
    FenceAction, TokenHolder, WarnEvery, after_fence_failure, is_fence_failure, token_holder,
};

pub const DB: &str = "OVN_Northbound";
const LB: &str = "Load_Balancer";
const GROUP: &str = "Load_Balancer_Group";
const SWITCH: &str = "Logical_Switch";
const ROUTER: &str = "Logical_Router";
const CHASSIS_VARS: &str = "Chassis_Template_Var";

const NB_GLOBAL: &str = "NB_Global";

/// `NB_Global` `external_ids` key holding the token of the writer session allowed to write.
pub const WRITER_KEY: &str = "vipflow.io/writer";

/// Services per transaction in a batched sync. ovsdb-server's cost per row grows with the
/// size of a transaction: 10,000 inserts take it about 250 ms as one transaction and about
/// 120 ms as 100 transactions of 100, sent back to back.
pub const BATCH_OWNERS: usize = 100;

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

/// What the NB reconciler is asked to make true.
#[derive(Debug, Clone, Default)]
pub struct DesiredRows {
    /// The plan generation these rows belong to.
    pub generation: u64,
    /// This handover's number: a plan may be handed over twice (make before break, see
    /// `plan::order`), so the writer follows handovers, not generations.
    pub step: u64,
    /// Whether these are the plan's own rows; `false` for the first of two handovers, which
    /// also keeps what the previous plan had.
    pub complete: bool,
    /// Every Service's rows.
    pub rows: RowIndex,
    /// The number of rows in `rows`.
    pub row_count: usize,
    /// What changed since handover `step - 1`. A reconciler that applied that handover diffs
    /// only these Services; otherwise (or with `None`) it diffs everything.
    pub delta: Option<NbDelta>,
    /// Every VIP: kept out of the IPAM of the logical switches whose subnet holds it.
    pub vips: imbl::OrdSet<IpAddr>,
    /// Every IPv4 address pool range (inclusive): kept out of that IPAM too.
    pub pool_ranges: Arc<Vec<(std::net::Ipv4Addr, std::net::Ipv4Addr)>>,
    /// Whether to manage `other_config:exclude_ips` at all.
    pub exclude_ips: bool,
    /// vipflow's own Load_Balancer_Groups and where they go (cluster rows', template rows').
    pub groups: Arc<Vec<GroupPlan>>,
    /// With template rows: the chassis that must have a `Chassis_Template_Var` row (one per
    /// node).
    pub template_chassis: Option<Arc<BTreeSet<String>>>,
}

impl DesiredRows {
    /// The planner's rows for plan `generation`: the planner task's hand-over.
    pub fn from_rows(
        generation: u64,
        planned: &crate::plan::planner::NorthboundRows,
        exclude_ips: bool,
    ) -> DesiredRows {
        DesiredRows {
            generation,
            step: generation,
            complete: true,
            rows: planned.rows.clone(),
            row_count: planned.row_count,
            delta: Some(planned.delta.clone()),
            vips: planned.vips.clone(),
            pool_ranges: Arc::default(),
            exclude_ips,
            groups: planned.groups.clone(),
            template_chassis: planned.template_chassis.clone(),
        }
    }
}

/// Rows grouped by Service, as the planner hands them over.
pub fn index_rows(rows: impl IntoIterator<Item = LbRow>) -> RowIndex {
    let mut by: BTreeMap<ServiceKey, Vec<LbRow>> = BTreeMap::new();
    for r in rows {
        by.entry(r.key.owner.clone()).or_default().push(r);
    }
    by.into_iter()
        .map(|(k, mut v)| {
            v.sort_by(|a, b| a.key.cmp(&b.key));
            (k, Arc::new(v))
        })
        .collect()
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NorthboundStatus {
    pub connected: bool,
    /// The plan generation whose own rows the database holds.
    pub applied_generation: Option<u64>,
    /// The last handover written (see [`DesiredRows::step`]).
    pub applied_step: Option<u64>,
    /// Our rows in the database after the last sync.
    pub rows: usize,
    /// Attachments that could not be made (switch, router or group missing).
    pub problems: Vec<String>,
    pub last_error: Option<crate::reconcile::error::ReconcileError>,
    pub transactions: u64,
    /// Syncs that wrote something, and how long the last one took.
    pub syncs: u64,
    pub last_sync: Duration,
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

/// The Load_Balancer columns the writer reads.
const LB_COLUMNS: [&str; 6] = [
    "name",
    "protocol",
    "vips",
    "options",
    "external_ids",
    "ip_port_mappings",
];

/// The writer's subscription: our tables and the columns we read (with `templates`, the
/// chassis's template variables too). Load_Balancer rows come whole in every change and are not
/// kept in the cache ([`ovsdb::monitor::TableSelect::whole_rows`]): each is made into what
/// [`Observed`] keeps of it as it is decoded (`lb_row::lb_summary`: owner, scope, protocol,
/// the digest), and a second copy of tens of thousands of rows would cost more than everything
/// else the writer holds. A session is therefore current only once the monitor's queued events are
/// absorbed ([`absorb_queued`]), not from the cache alone.
pub fn monitor_spec(templates: bool) -> MonitorSpec {
    let summary = ovsdb::monitor::Projection(lb_row::lb_summary);
    tables_spec(templates).whole_rows_projected(LB, &LB_COLUMNS, summary)
}

/// [`monitor_spec`] with the Load_Balancer rows kept in the cache: for one-shot reads that look
/// at the rows themselves (`vipflow verify` says what differs) and build their state from the
/// cache alone.
pub fn snapshot_spec(templates: bool) -> MonitorSpec {
    tables_spec(templates).columns(LB, &LB_COLUMNS)
}

/// Every table but Load_Balancer.
fn tables_spec(templates: bool) -> MonitorSpec {
    let spec = MonitorSpec::new();
    let spec = if templates {
        spec.columns(CHASSIS_VARS, &["chassis", "variables"])
    } else {
        spec
    };
    spec.columns(GROUP, &["name", "load_balancer"])
        .columns(
            SWITCH,
            &[
                "name",
                "load_balancer",
                "load_balancer_group",
                "other_config",
                "external_ids",
            ],
        )
        .columns(ROUTER, &["name", "load_balancer", "load_balancer_group"])
}
