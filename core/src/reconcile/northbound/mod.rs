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
//!   `SETTLE_WAIT` later), and every Service checked against its snapshot at once. Later,
//!   only the Services the planner reports as changed, and those whose rows the monitor saw
//!   change, are diffed; a skipped plan generation, a failure or a switch/router/group
//!   appearing or going means a full diff. Rows that are ours but no longer planned (orphans)
//!   and extra copies of a row (duplicates) are deleted.
//! - **One writer at a time, no duplicates**: a session first writes a fresh token into
//!   `NB_Global` `external_ids:vipflow.io/writer` (`take_over`), then reads. Every
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
use crate::plan::node_template::NodeRows;
use crate::plan::northbound::{GroupPlan, LbRow};
use crate::plan::row_table::{NbDelta, RowIndex};
use ovsdb::MonitorSpec;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

mod diff;
mod faults;
pub mod group;
mod lb_row;
mod observed;
mod session;
pub mod template_vars;

pub use diff::{Change, describe_drift, diff_exclude};
pub use faults::{
    FenceAction, TokenHolder, WarnEvery, after_fence_failure, is_fence_failure, token_holder,
};
pub use lb_row::lb_summary;
pub use observed::Holder;
pub use observed::{LbDigest, Observed, ObservedLb, SwitchIpam, Touched};
pub use session::{Session, fenced, new_token, warn_failed};

pub const DB: &str = "OVN_Northbound";
pub const LB: &str = "Load_Balancer";
pub const GROUP: &str = "Load_Balancer_Group";
pub const SWITCH: &str = "Logical_Switch";
pub const ROUTER: &str = "Logical_Router";
pub const CHASSIS_VARS: &str = "Chassis_Template_Var";

pub const NB_GLOBAL: &str = "NB_Global";

/// Services per transaction in a batched sync. ovsdb-server's cost per row grows with the
/// size of a transaction: 10,000 inserts take it about 250 ms as one transaction and about
/// 120 ms as 100 transactions of 100, sent back to back.
pub const BATCH_OWNERS: usize = 100;

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

/// The writer's subscription: our tables and the columns we read (with `templates`, the
/// chassis's template variables too). Load_Balancer rows come whole in every change and are not
/// kept in the cache ([`ovsdb::monitor::TableSelect::whole_rows`]): each is made into what
/// [`Observed`] keeps of it as it is decoded (`lb_row::lb_summary`: owner, scope, protocol,
/// the digest), and a second copy of tens of thousands of rows would cost more than everything
/// else the writer holds. A session is therefore current only once the monitor's queued events are
/// absorbed (`absorb_queued`), not from the cache alone.
pub fn monitor_spec(templates: bool) -> MonitorSpec {
    let summary = ovsdb::monitor::Projection(lb_row::lb_summary);
    tables_spec(templates).whole_rows_projected(LB, &lb_row::COLUMNS, summary)
}

/// [`monitor_spec`] with the Load_Balancer rows kept in the cache: for one-shot reads that look
/// at the rows themselves (`vipflow verify` says what differs) and build their state from the
/// cache alone.
pub fn snapshot_spec(templates: bool) -> MonitorSpec {
    tables_spec(templates).columns(LB, &lb_row::COLUMNS)
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

/// What [`NodeRows::Auto`] is for a database of `schema`.
pub fn node_rows_for(schema: &ovsdb::DatabaseSchema) -> NodeRows {
    if schema.table(CHASSIS_VARS).is_ok() {
        NodeRows::Template
    } else {
        NodeRows::PerNode
    }
}
