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
//!   replies) and taken again after. Later, only the Services the planner reports as changed,
//!   and those whose rows the monitor saw change, are diffed; a skipped plan generation, a
//!   failure or a switch/router/group appearing or going means a full diff. Rows that are ours
//!   but no longer planned (orphans) and extra copies of a row (duplicates) are deleted.
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
//!   diff that needs it and attached to every node's router and switch ([`group`]).

use crate::model::{Protocol, ServiceKey};
use crate::plan::exclude::{LogicalSwitchIpam, OURS_KEY, plan_ovn};
use crate::plan::northbound::{
    Attach, GroupPlan, LbKey, LbRow, OWNER_KEY, SCOPE_KEY, Scope, unattached,
};
use crate::plan::row_table::{NbDelta, RowIndex};
use ovsdb::txn::WaitUntil;
use ovsdb::{
    Atom, Cache, Client, ClientOptions, Condition, Event, MonitorSpec, Mutation, Mutator, OpResult,
    Operation, Row, Transaction, Uuid, Value,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

mod faults;
mod group;

pub use faults::{
    FenceAction, TokenHolder, WarnEvery, after_fence_failure, is_fence_failure, token_holder,
};

pub const DB: &str = "OVN_Northbound";
const LB: &str = "Load_Balancer";
const GROUP: &str = "Load_Balancer_Group";
const SWITCH: &str = "Logical_Switch";
const ROUTER: &str = "Logical_Router";

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

/// `o` with the writer's connect timeout.
fn nb_options(mut o: ClientOptions, request_timeout: Duration) -> ClientOptions {
    o.connect_timeout = Some(CONNECT_TIMEOUT);
    o.connect.request_timeout = Some(request_timeout);
    o
}

/// What the NB reconciler is asked to make true.
#[derive(Debug, Clone, Default)]
pub struct Desired {
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
    /// Whether to manage `other_config:exclude_ips` at all.
    pub exclude_ips: bool,
    /// vipflow's own Load_Balancer_Group and where it goes, when cluster rows join it.
    pub group: Option<Arc<GroupPlan>>,
}

impl Desired {
    /// The planner's rows for plan `generation`: the planner task's hand-over.
    pub fn from_rows(
        generation: u64,
        planned: &crate::plan::planner::NorthboundRows,
        exclude_ips: bool,
    ) -> Desired {
        Desired {
            generation,
            step: generation,
            complete: true,
            rows: planned.rows.clone(),
            row_count: planned.row_count,
            delta: Some(planned.delta.clone()),
            vips: planned.vips.clone(),
            exclude_ips,
            group: planned.group.clone(),
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
pub struct Status {
    pub connected: bool,
    /// The plan generation whose own rows the database holds.
    pub applied_generation: Option<u64>,
    /// The last handover written (see [`Desired::step`]).
    pub applied_step: Option<u64>,
    /// Our rows in the database after the last sync.
    pub rows: usize,
    /// Attachments that could not be made (switch, router or group missing).
    pub problems: Vec<String>,
    pub last_error: Option<String>,
    pub transactions: u64,
    /// Syncs that wrote something, and how long the last one took.
    pub syncs: u64,
    pub last_sync: Duration,
}

#[derive(Debug, Clone)]
pub struct NbSettings {
    /// `unix:PATH` or `tcp:a:6641,tcp:b:6641,...` (as `ovn-nbctl --db`).
    pub remotes: String,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// The Lease gate (cluster mode): a writer token that disappeared is taken back only
    /// while this is true. `None`: always the writer.
    pub leading: Option<watch::Receiver<bool>>,
    /// A request (transaction, monitor, token read) unanswered this long ends the session
    /// with a WARN; the writer connects again.
    pub request_timeout: Duration,
}

/// The monitor subscription: our tables and the columns we read.
pub fn monitor_spec() -> MonitorSpec {
    MonitorSpec::new()
        .columns(
            LB,
            &[
                "name",
                "protocol",
                "vips",
                "options",
                "external_ids",
                "ip_port_mappings",
            ],
        )
        .columns(GROUP, &["name", "load_balancer"])
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

/// One of our rows as the database has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedLb {
    pub uuid: Uuid,
    pub key: LbKey,
    pub name: String,
    pub vips: BTreeMap<String, String>,
    pub options: BTreeMap<String, String>,
    pub external_ids: BTreeMap<String, String>,
    pub ip_port_mappings: BTreeMap<String, String>,
}

/// A logical switch's IPAM columns as observed.
#[derive(Debug, Clone)]
pub struct SwitchIpam {
    pub uuid: Uuid,
    pub ipam: LogicalSwitchIpam,
    pub other_config: BTreeMap<String, String>,
    pub external_ids: BTreeMap<String, String>,
}

/// A switch, router or group: its uuid, the load balancers and (switch, router) the groups it
/// holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Holder {
    uuid: Uuid,
    lbs: BTreeSet<Uuid>,
    groups: BTreeSet<Uuid>,
}

/// What the diff needs of the database: our rows, indexed by Service, and the switches,
/// routers and groups.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    lbs: HashMap<Uuid, ObservedLb>,
    by_owner: HashMap<ServiceKey, BTreeSet<Uuid>>,
    /// Logical switches' IPAM settings: uuid, raw values, full other_config and external_ids.
    pub ipam: Vec<SwitchIpam>,
    groups: BTreeMap<String, Holder>,
    switches: BTreeMap<String, Holder>,
    routers: BTreeMap<String, Holder>,
}

/// What monitor events changed, for the next diff.
#[derive(Debug, Clone, Default)]
pub struct Touched {
    /// Services whose rows changed in the database.
    pub owners: BTreeSet<ServiceKey>,
    /// A switch, router or group changed: re-read them ([`Observed::refresh_holders`]).
    pub holders: bool,
}

fn str_of(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::Atom(a) => a.as_str().map(str::to_owned),
        Value::Set(s) if s.len() == 1 => {
            s.iter().next().and_then(|a| a.as_str()).map(str::to_owned)
        }
        _ => None,
    }
}

fn map_of(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_map)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.as_str()?.to_owned(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

fn uuids_of(v: Option<&Value>) -> BTreeSet<Uuid> {
    v.map(|v| v.to_set().iter().filter_map(Atom::as_uuid).collect())
        .unwrap_or_default()
}

fn parse_protocol(s: Option<&str>) -> Option<Protocol> {
    match s.unwrap_or("tcp") {
        "tcp" => Some(Protocol::Tcp),
        "udp" => Some(Protocol::Udp),
        "sctp" => Some(Protocol::Sctp),
        _ => None,
    }
}

fn parse_key(ext: &BTreeMap<String, String>, protocol: Option<&str>) -> Option<LbKey> {
    let (ns, name) = ext.get(OWNER_KEY)?.split_once('/')?;
    let scope = Scope::parse(ext.get(SCOPE_KEY)?)?;
    Some(LbKey {
        owner: ServiceKey::new(ns, name),
        protocol: parse_protocol(protocol)?,
        scope,
    })
}

/// One of our rows from its columns; `None` if it is not ours (or ours but unreadable: left
/// alone).
fn read_lb(uuid: Uuid, row: &Row) -> Option<ObservedLb> {
    let external_ids = map_of(row.get("external_ids"));
    let protocol = str_of(row.get("protocol"));
    let key = parse_key(&external_ids, protocol.as_deref())?;
    Some(ObservedLb {
        uuid,
        key,
        name: str_of(row.get("name")).unwrap_or_default(),
        vips: map_of(row.get("vips")),
        options: map_of(row.get("options")),
        external_ids,
        ip_port_mappings: map_of(row.get("ip_port_mappings")),
    })
}

fn holders_of(cache: &Cache, table: &str) -> BTreeMap<String, Holder> {
    let mut m = BTreeMap::new();
    for (uuid, row) in cache.table(table).into_iter().flatten() {
        if let Some(name) = str_of(row.get("name")) {
            m.insert(
                name,
                Holder {
                    uuid: *uuid,
                    lbs: uuids_of(row.get("load_balancer")),
                    groups: uuids_of(row.get("load_balancer_group")),
                },
            );
        }
    }
    m
}

impl Observed {
    pub fn from_cache(cache: &Cache) -> Observed {
        let mut o = Observed::default();
        for (uuid, row) in cache.table(LB).into_iter().flatten() {
            o.put_lb(*uuid, row);
        }
        o.read_holders(cache);
        o
    }

    /// Our rows, in no particular order.
    pub fn lbs(&self) -> impl Iterator<Item = &ObservedLb> {
        self.lbs.values()
    }

    /// The number of our rows.
    pub fn len(&self) -> usize {
        self.lbs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lbs.is_empty()
    }

    /// Our rows grouped by identity, each group by uuid (more than one: duplicates).
    pub fn by_key(&self) -> BTreeMap<&LbKey, Vec<&ObservedLb>> {
        let mut m: BTreeMap<&LbKey, Vec<&ObservedLb>> = BTreeMap::new();
        for o in self.lbs.values() {
            m.entry(&o.key).or_default().push(o);
        }
        for v in m.values_mut() {
            v.sort_by_key(|o| o.uuid);
        }
        m
    }

    /// One Service's rows grouped by identity, each group by uuid.
    fn rows_of(&self, owner: &ServiceKey) -> BTreeMap<&LbKey, Vec<&ObservedLb>> {
        let mut m: BTreeMap<&LbKey, Vec<&ObservedLb>> = BTreeMap::new();
        for u in self.by_owner.get(owner).into_iter().flatten() {
            if let Some(o) = self.lbs.get(u) {
                m.entry(&o.key).or_default().push(o);
            }
        }
        m
    }

    /// Record a Load_Balancer row; returns its Service if it is ours.
    fn put_lb(&mut self, uuid: Uuid, row: &Row) -> Option<ServiceKey> {
        let o = read_lb(uuid, row)?;
        let owner = o.key.owner.clone();
        self.by_owner.entry(owner.clone()).or_default().insert(uuid);
        self.lbs.insert(uuid, o);
        Some(owner)
    }

    /// Forget a Load_Balancer row; returns its Service if it was ours.
    fn remove_lb(&mut self, uuid: &Uuid) -> Option<ServiceKey> {
        let o = self.lbs.remove(uuid)?;
        if let Some(set) = self.by_owner.get_mut(&o.key.owner) {
            set.remove(uuid);
            if set.is_empty() {
                self.by_owner.remove(&o.key.owner);
            }
        }
        Some(o.key.owner)
    }

    /// Apply one monitor event. Events carry whole rows, so applying one twice, or one the
    /// cache already held when this was built, changes nothing.
    pub fn apply(&mut self, ev: &Event, touched: &mut Touched) {
        match ev {
            Event::Insert { table, uuid, new }
            | Event::Modify {
                table, uuid, new, ..
            } if table == LB => {
                // The same row again (a new monitor's snapshot replayed): nothing to diff.
                if let (Some(have), Some(now)) = (self.lbs.get(uuid), read_lb(*uuid, new))
                    && *have == now
                {
                    return;
                }
                touched.owners.extend(self.remove_lb(uuid));
                touched.owners.extend(self.put_lb(*uuid, new));
            }
            Event::Delete { table, uuid, .. } if table == LB => {
                touched.owners.extend(self.remove_lb(uuid));
            }
            _ => touched.holders = true,
        }
    }

    fn read_holders(&mut self, cache: &Cache) {
        self.ipam.clear();
        for (uuid, row) in cache.table(SWITCH).into_iter().flatten() {
            let other_config = map_of(row.get("other_config"));
            let external_ids = map_of(row.get("external_ids"));
            self.ipam.push(SwitchIpam {
                uuid: *uuid,
                ipam: LogicalSwitchIpam {
                    name: str_of(row.get("name")).unwrap_or_default(),
                    subnet: other_config.get("subnet").cloned(),
                    exclude_ips: other_config.get("exclude_ips").cloned(),
                    ours: external_ids.get(OURS_KEY).cloned(),
                },
                other_config,
                external_ids,
            });
        }
        self.groups = holders_of(cache, GROUP);
        self.switches = holders_of(cache, SWITCH);
        self.routers = holders_of(cache, ROUTER);
    }

    /// Re-read switches, routers and groups (few, next to load balancers). The Services whose
    /// rows were attached or detached are added to `touched`; returns true when a target came,
    /// went or was renamed, which can change any row's attachments.
    pub fn refresh_holders(&mut self, cache: &Cache, touched: &mut Touched) -> bool {
        let before = [
            std::mem::take(&mut self.groups),
            std::mem::take(&mut self.switches),
            std::mem::take(&mut self.routers),
        ];
        self.read_holders(cache);
        let after = [&self.groups, &self.switches, &self.routers];
        let mut targets_changed = false;
        for (old, new) in before.iter().zip(after) {
            let same_targets = old.len() == new.len()
                && old
                    .iter()
                    .zip(new.iter())
                    .all(|((an, a), (bn, b))| an == bn && a.uuid == b.uuid);
            if !same_targets {
                targets_changed = true;
                continue;
            }
            for (name, h) in new {
                let Some(o) = old.get(name) else { continue };
                for u in o.lbs.symmetric_difference(&h.lbs) {
                    if let Some(l) = self.lbs.get(u) {
                        touched.owners.insert(l.key.owner.clone());
                    }
                }
            }
        }
        targets_changed
    }
}

fn smap(m: &BTreeMap<String, String>) -> Value {
    Value::map(m.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

fn lb_columns(d: &LbRow) -> Row {
    let mut row = insert_columns(d);
    // An update must clear mappings that are no longer planned.
    row.insert("ip_port_mappings".to_string(), smap(&d.ip_port_mappings));
    row
}

/// The columns of a new row: those holding their default (empty) value are left out, which
/// is less for the server to parse and store.
fn insert_columns(d: &LbRow) -> Row {
    let mut row = Row::from([
        ("name".to_string(), Value::Atom(Atom::string(&d.name))),
        (
            "protocol".to_string(),
            Value::set([d.key.protocol.as_str()]),
        ),
        ("vips".to_string(), smap(&d.vips)),
        ("options".to_string(), smap(&d.options)),
        ("external_ids".to_string(), smap(&d.external_ids)),
    ]);
    if !d.ip_port_mappings.is_empty() {
        row.insert("ip_port_mappings".to_string(), smap(&d.ip_port_mappings));
    }
    row
}

fn same_content(o: &ObservedLb, d: &LbRow) -> bool {
    o.name == d.name
        && o.vips == d.vips
        && o.options == d.options
        && o.external_ids == d.external_ids
        && o.ip_port_mappings == d.ip_port_mappings
}

/// Conditions selecting the rows with `key`'s identity.
fn identity(key: &LbKey) -> Vec<Condition> {
    vec![
        Condition::includes(
            "external_ids",
            Value::map([
                (OWNER_KEY, key.owner.to_string()),
                (SCOPE_KEY, key.scope.to_string()),
            ]),
        ),
        Condition::eq("protocol", Value::set([key.protocol.as_str()])),
    ]
}

/// One Service's (or a batched sync's) changes.
#[derive(Debug, Default)]
pub struct Change {
    /// Services concerned, for logs.
    pub owners: BTreeSet<ServiceKey>,
    pub txn: Option<Transaction>,
    pub ops: usize,
}

/// Per attachment target (table, its uuid): row refs to add and uuids to remove.
#[derive(Default)]
struct AttachOps {
    add: BTreeMap<(&'static str, Uuid), Vec<Atom>>,
    remove: BTreeMap<(&'static str, Uuid), Vec<Atom>>,
}

impl AttachOps {
    fn is_empty(&self) -> bool {
        self.add.is_empty() && self.remove.is_empty()
    }

    fn size(&self) -> usize {
        self.add
            .values()
            .chain(self.remove.values())
            .map(Vec::len)
            .sum()
    }
}

/// A transaction being built: its body, the identities its inserts create, its attachments.
struct Pending {
    owners: BTreeSet<ServiceKey>,
    body: Transaction,
    inserted: Vec<LbKey>,
    attach: AttachOps,
}

impl Pending {
    fn new() -> Self {
        Pending {
            owners: BTreeSet::new(),
            body: Transaction::new(DB),
            inserted: Vec::new(),
            attach: AttachOps::default(),
        }
    }

    fn is_empty(&self) -> bool {
        self.body.ops.is_empty() && self.attach.is_empty()
    }

    /// The finished transaction: guards first, then the body and the attachments. A guard
    /// (`guarded`) makes each insert fail if a row of that identity exists: it covers a diff
    /// made from a cache that has not yet shown one of our own writes. Guards go first because
    /// ovsdb-server checks a `wait` by scanning the table: placed after inserts, each would
    /// scan those too.
    fn finish(self, guarded: bool, comment: &str) -> Change {
        let mut txn = Transaction::new(DB);
        if guarded {
            for key in &self.inserted {
                txn.wait(
                    LB,
                    identity(key),
                    &["name"],
                    WaitUntil::Equal,
                    vec![],
                    Some(0),
                );
            }
        }
        txn.ops.extend(self.body.ops);
        emit_attach(&mut txn, self.attach);
        txn.comment(comment);
        Change {
            owners: self.owners,
            ops: txn.ops.len(),
            txn: Some(txn),
        }
    }
}

/// Add one Service's work to `p`: insert what is missing, update what differs, delete
/// duplicates and orphans, fix attachments.
fn diff_owner(
    observed: &Observed,
    owner: &ServiceKey,
    want: &[LbRow],
    p: &mut Pending,
    problems: &mut Vec<String>,
) {
    problems.extend(unattached(owner, want));
    let obs = observed.rows_of(owner);
    let want: BTreeMap<&LbKey, &LbRow> = want.iter().map(|d| (&d.key, d)).collect();
    let keys: BTreeSet<&LbKey> = want.keys().chain(obs.keys()).copied().collect();
    for key in keys {
        let rows = obs.get(key).map(Vec::as_slice).unwrap_or(&[]);
        match (want.get(key), rows.split_first()) {
            (Some(d), None) => {
                p.inserted.push(key.clone());
                let named = p.body.insert(LB, insert_columns(d));
                attach_targets(observed, &d.attach, None, named, &mut p.attach, problems);
            }
            (Some(d), Some((first, dups))) => {
                if !same_content(first, d) {
                    p.body
                        .update(LB, vec![Condition::uuid(first.uuid)], lb_columns(d));
                }
                for dup in dups {
                    p.body.delete(LB, vec![Condition::uuid(dup.uuid)]);
                }
                attach_targets(
                    observed,
                    &d.attach,
                    Some(first.uuid),
                    Atom::Uuid(first.uuid),
                    &mut p.attach,
                    problems,
                );
            }
            (None, _) => {
                for o in rows {
                    p.body.delete(LB, vec![Condition::uuid(o.uuid)]);
                }
            }
        }
    }
}

/// The transactions that turn `observed` into `desired` for the Services in `owners` (all of
/// them, planned or observed, with `None`): one per changed Service, or with `batch` one per
/// [`BATCH_OWNERS`] changed Services, to be sent back to back. Batches are made from one
/// snapshot and touch each identity once, so they need no per-row guard (the writer fence of
/// [`send`] still applies). Each transaction goes to `sink` as soon as it is complete, so a
/// batch can be on the wire while the rest is diffed. Returns attachment problems (missing
/// targets).
fn diff(
    observed: &Observed,
    desired: &RowIndex,
    owners: Option<&BTreeSet<ServiceKey>>,
    batch: bool,
    sink: &mut dyn FnMut(Change),
) -> Vec<String> {
    let all: BTreeSet<ServiceKey>;
    let owners = match owners {
        Some(o) => o,
        None => {
            all = desired
                .keys()
                .chain(observed.by_owner.keys())
                .cloned()
                .collect();
            &all
        }
    };
    let mut problems = Vec::new();
    let mut batched = Pending::new();
    for owner in owners {
        let want = desired.get(owner).map(|v| v.as_slice()).unwrap_or(&[]);
        if batch {
            let before = batched.body.ops.len() + batched.attach.size();
            diff_owner(observed, owner, want, &mut batched, &mut problems);
            let after = batched.body.ops.len() + batched.attach.size();
            if after != before {
                batched.owners.insert(owner.clone());
                if batched.owners.len() >= BATCH_OWNERS {
                    let full = std::mem::replace(&mut batched, Pending::new());
                    sink(full.finish(false, "vipflow: sync"));
                }
            }
        } else {
            let mut p = Pending::new();
            diff_owner(observed, owner, want, &mut p, &mut problems);
            if !p.is_empty() {
                p.owners.insert(owner.clone());
                sink(p.finish(true, &format!("vipflow: Service {owner}")));
            }
        }
    }
    if batch && !batched.is_empty() {
        sink(batched.finish(false, "vipflow: sync"));
    }
    problems.sort();
    problems.dedup();
    problems
}

/// Transactions that keep every VIP out of the IPAM of the switches whose subnet holds it:
/// one per changed switch (or one in all with `batch`), each guarded by a `wait` on the
/// switch's maps as observed, so a concurrent edit by someone else aborts it and the next diff
/// starts from their text. Also returns the problems found in switches' settings.
pub fn diff_exclude(
    observed: &Observed,
    vips: &BTreeSet<IpAddr>,
    batch: bool,
) -> (Vec<Change>, Vec<String>) {
    let switches: Vec<LogicalSwitchIpam> = observed.ipam.iter().map(|s| s.ipam.clone()).collect();
    let plan = plan_ovn(vips, &switches);
    let mut problems: Vec<String> = plan.problems.iter().map(|p| p.to_string()).collect();
    let mut changes = Vec::new();
    let mut batch_txn = Transaction::new(DB);
    for ch in plan.changes {
        let mut same_name = observed.ipam.iter().filter(|s| s.ipam.name == ch.name);
        let (Some(sw), None) = (same_name.next(), same_name.next()) else {
            problems.push(format!(
                "Logical_Switch {}: name is not unique; exclude_ips left alone",
                ch.name
            ));
            continue;
        };
        let mut other = sw.other_config.clone();
        match &ch.exclude_ips {
            Some(t) => other.insert("exclude_ips".into(), t.clone()),
            None => other.remove("exclude_ips"),
        };
        let mut ext = sw.external_ids.clone();
        match &ch.ours_value {
            Some(v) => ext.insert(OURS_KEY.into(), v.clone()),
            None => ext.remove(OURS_KEY),
        };
        let mut one = Transaction::new(DB);
        let txn = if batch { &mut batch_txn } else { &mut one };
        let observed_row = Row::from([
            ("other_config".to_string(), smap(&sw.other_config)),
            ("external_ids".to_string(), smap(&sw.external_ids)),
        ]);
        txn.wait(
            SWITCH,
            vec![Condition::uuid(sw.uuid)],
            &["other_config", "external_ids"],
            WaitUntil::Equal,
            vec![observed_row],
            Some(0),
        );
        txn.update(
            SWITCH,
            vec![Condition::uuid(sw.uuid)],
            Row::from([
                ("other_config".to_string(), smap(&other)),
                ("external_ids".to_string(), smap(&ext)),
            ]),
        );
        if !batch {
            one.comment(&format!("vipflow: exclude_ips of {}", ch.name));
            let ops = one.ops.len();
            changes.push(Change {
                owners: BTreeSet::new(),
                txn: Some(one),
                ops,
            });
        }
    }
    if batch && !batch_txn.ops.is_empty() {
        batch_txn.comment("vipflow: exclude_ips");
        let ops = batch_txn.ops.len();
        changes.push(Change {
            owners: BTreeSet::new(),
            txn: Some(batch_txn),
            ops,
        });
    }
    (changes, problems)
}

/// Record the attachment work for one row: add it where it should be and is not, remove it
/// where it is but should not be (only for existing rows).
fn attach_targets(
    observed: &Observed,
    want: &Attach,
    existing: Option<Uuid>,
    row: Atom,
    ops: &mut AttachOps,
    problems: &mut Vec<String>,
) {
    let tables: [(&'static str, &BTreeMap<String, Holder>, BTreeSet<String>); 3] = [
        (
            GROUP,
            &observed.groups,
            want.group.iter().cloned().collect(),
        ),
        (SWITCH, &observed.switches, want.switches.clone()),
        (ROUTER, &observed.routers, want.routers.clone()),
    ];
    for (table, holders, targets) in tables {
        for t in &targets {
            match holders.get(t) {
                None => problems.push(format!(
                    "{table} {t} does not exist; load balancers cannot be attached to it"
                )),
                Some(h) => {
                    if existing.is_none_or(|u| !h.lbs.contains(&u)) {
                        ops.add
                            .entry((table, h.uuid))
                            .or_default()
                            .push(row.clone());
                    }
                }
            }
        }
        if let Some(u) = existing {
            for (name, h) in holders {
                if h.lbs.contains(&u) && !targets.contains(name) {
                    ops.remove
                        .entry((table, h.uuid))
                        .or_default()
                        .push(Atom::Uuid(u));
                }
            }
        }
    }
}

fn emit_attach(txn: &mut Transaction, ops: AttachOps) {
    for ((table, uuid), rows) in ops.add {
        txn.mutate(
            table,
            vec![Condition::uuid(uuid)],
            vec![Mutation::new(
                "load_balancer",
                Mutator::Insert,
                Value::Set(rows.into_iter().collect()),
            )],
        );
    }
    for ((table, uuid), rows) in ops.remove {
        txn.mutate(
            table,
            vec![Condition::uuid(uuid)],
            vec![Mutation::new(
                "load_balancer",
                Mutator::Delete,
                Value::Set(rows.into_iter().collect()),
            )],
        );
    }
}

/// The writer fence: the transaction fails unless `token` is still the writer token in
/// `NB_Global`. Put first in every transaction of a session.
fn fence(token: &str) -> Operation {
    let mut t = Transaction::new(DB);
    t.wait(
        NB_GLOBAL,
        vec![Condition::includes(
            "external_ids",
            Value::map([(WRITER_KEY, token)]),
        )],
        &["_uuid"],
        WaitUntil::NotEqual,
        vec![],
        Some(0),
    );
    t.ops.remove(0)
}

/// Make `token` the writer token (creating `NB_Global` if missing, as `ovn-nbctl init` does).
/// From the commit on, every transaction fenced with an earlier token fails; so a snapshot
/// taken after this call holds everything an earlier writer will ever have written.
pub async fn take_over(client: &Client, token: &str) -> Result<(), ovsdb::Error> {
    let mut txn = Transaction::new(DB);
    txn.mutate(
        NB_GLOBAL,
        vec![],
        vec![Mutation::new(
            "external_ids",
            Mutator::Delete,
            Value::set([WRITER_KEY]),
        )],
    );
    txn.mutate(
        NB_GLOBAL,
        vec![],
        vec![Mutation::new(
            "external_ids",
            Mutator::Insert,
            Value::map([(WRITER_KEY, token)]),
        )],
    );
    txn.comment("vipflow: Northbound writer");
    let r = client.transact(&txn).await?;
    if matches!(r.first(), Some(OpResult::Count(n)) if *n > 0) {
        return Ok(());
    }
    // No NB_Global row yet: create it, unless someone else just did.
    let mut txn = Transaction::new(DB);
    txn.wait(
        NB_GLOBAL,
        vec![],
        &["_uuid"],
        WaitUntil::Equal,
        vec![],
        Some(0),
    );
    txn.insert(
        NB_GLOBAL,
        Row::from([(
            "external_ids".to_string(),
            Value::map([(WRITER_KEY, token)]),
        )]),
    );
    txn.comment("vipflow: Northbound writer");
    client.transact(&txn).await.map(|_| ())
}

/// A fresh writer token for a session.
pub fn new_token() -> String {
    Uuid::new_v4().to_string()
}

/// The reconciler's state for one connection, sans I/O: [`run`] feeds it monitor events and
/// plans and sends the transactions it returns (the benchmark drives it the same way).
pub struct Session {
    observed: Observed,
    /// Changes seen by the monitor and not yet diffed.
    touched: Touched,
    /// The handover whose rows the database is known to hold.
    applied: Option<u64>,
    /// The first sync of the connection: everything, batched.
    first: bool,
    /// The next diff covers every Service (after a failure, a skipped generation, or a
    /// switch/router/group appearing or going).
    full: bool,
    /// `exclude_ips` must be re-diffed (a switch changed, or the first sync).
    exclude_due: bool,
    /// This session's writer token ([`take_over`]); `None`: no fence (tests of the diff).
    token: Option<String>,
    attach_problems: Vec<String>,
    exclude_problems: Vec<String>,
    group_problems: Vec<String>,
}

impl Session {
    /// Start from the monitor's first snapshot, taken after [`take_over`] with `token`.
    pub fn new(observed: Observed, token: Option<String>) -> Self {
        Session {
            observed,
            touched: Touched::default(),
            applied: None,
            first: true,
            full: true,
            exclude_due: true,
            token,
            attach_problems: Vec::new(),
            exclude_problems: Vec::new(),
            group_problems: Vec::new(),
        }
    }

    /// Start over from a new monitor's snapshot (after [`send`] resubscribed): the next diff
    /// covers everything, and finds nothing to do unless someone else wrote meanwhile.
    pub fn resubscribed(&mut self, observed: Observed) {
        self.observed = observed;
        self.touched = Touched::default();
        self.full = true;
        self.exclude_due = true;
    }

    /// What the database holds, as far as the events applied so far tell.
    pub fn observed(&self) -> &Observed {
        &self.observed
    }

    /// Apply `first_event` and every event queued, and re-read switches, routers and groups if
    /// one changed.
    pub fn absorb(&mut self, monitor: &mut ovsdb::Monitor, first_event: Option<Event>) {
        if let Some(ev) = first_event {
            self.observed.apply(&ev, &mut self.touched);
        }
        while let Some(ev) = monitor.try_event() {
            self.observed.apply(&ev, &mut self.touched);
        }
        if self.touched.holders {
            self.touched.holders = false;
            if self
                .observed
                .refresh_holders(&monitor.cache(), &mut self.touched)
            {
                self.full = true;
            }
            self.exclude_due = true;
        }
    }

    /// The transactions that bring the database to `plan`, given what changed since the last
    /// sync.
    pub fn changes(&mut self, plan: &Desired) -> Vec<Change> {
        let mut changes = Vec::new();
        self.changes_into(plan, &mut |c| changes.push(c));
        changes
    }

    /// [`Session::changes`], each handed to `sink` as soon as it is complete.
    fn changes_into(&mut self, plan: &Desired, sink: &mut dyn FnMut(Change)) {
        let new_plan = self.applied != Some(plan.step);
        let follows = self.applied.is_some_and(|g| g + 1 == plan.step);
        let delta = plan.delta.as_ref().filter(|_| follows);
        let whole = self.full || self.first || (new_plan && delta.is_none());
        let owners = if whole {
            self.touched.owners.clear();
            None
        } else {
            let mut o = std::mem::take(&mut self.touched.owners);
            if new_plan && let Some(d) = delta {
                o.extend(d.touched.iter().cloned());
            }
            Some(o)
        };
        if owners.as_ref().is_none_or(|o| !o.is_empty()) {
            let p = diff(
                &self.observed,
                &plan.rows,
                owners.as_ref(),
                self.first,
                sink,
            );
            if whole {
                self.attach_problems = p;
            } else {
                self.attach_problems.extend(p);
                self.attach_problems.sort();
                self.attach_problems.dedup();
            }
        }
        // A few targets (one per node): checked on every pass, like a holder event would.
        if let Some(g) = &plan.group {
            let (c, p) = group::diff(&self.observed, g);
            c.into_iter().for_each(&mut *sink);
            self.group_problems = p;
        }
        let vips_changed = new_plan && delta.is_none_or(|d| d.vips);
        if plan.exclude_ips && (whole || self.exclude_due || vips_changed) {
            let vips: BTreeSet<IpAddr> = plan.vips.iter().copied().collect();
            let (c, p) = diff_exclude(&self.observed, &vips, self.first);
            c.into_iter().for_each(&mut *sink);
            self.exclude_problems = p;
        }
    }

    /// Record the outcome of writing `plan`'s changes.
    pub fn done(&mut self, plan: &Desired, result: &Result<(), ovsdb::Error>) {
        match result {
            Ok(()) => {
                self.applied = Some(plan.step);
                self.first = false;
                self.full = false;
                self.exclude_due = false;
            }
            Err(_) => {
                // Start over from everything observed: the owners taken for this diff are not
                // remembered one by one.
                self.full = true;
                self.exclude_due = true;
            }
        }
    }

    /// Attachment and `exclude_ips` problems found by the last diffs.
    pub fn problems(&self) -> Vec<String> {
        let mut p = self.attach_problems.clone();
        p.extend(self.group_problems.iter().cloned());
        p.extend(self.exclude_problems.iter().cloned());
        p
    }
}

/// What [`send`] or [`write_plan`] did.
pub struct Sent {
    /// The monitor to go on with; `None`: it could not be renewed (reconnect).
    pub monitor: Option<ovsdb::Monitor>,
    pub transactions: u64,
    pub result: Result<(), ovsdb::Error>,
    /// When the last reply came, before any resubscription.
    pub written: std::time::Instant,
}

/// `txn` with the writer fence of `token` first.
fn fenced(mut txn: Transaction, token: Option<&str>) -> Transaction {
    if let Some(t) = token {
        txn.ops.insert(0, fence(t));
    }
    txn
}

fn warn_failed(e: &ovsdb::Error, services: usize) {
    if e.outcome_unknown() {
        // Never resend blindly: the next diff starts from what the monitor shows.
        tracing::warn!(error = %e, services, "transaction outcome unknown; re-reading before any retry");
    } else {
        tracing::warn!(error = %e, services, "transaction failed; will retry");
    }
}

/// Write `changes` and tell the session the outcome. A first sync's batches go out pipelined,
/// as [`write_plan`] sends them; later changes one after the other, stopping at the first
/// failure.
pub async fn send(
    session: &mut Session,
    client: &Client,
    monitor: ovsdb::Monitor,
    plan: &Desired,
    changes: Vec<Change>,
) -> Sent {
    if session.first {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        for c in changes {
            let _ = tx.send(c);
        }
        drop(tx);
        let out = stream_batches(client.clone(), monitor, session.token.clone(), rx).await;
        return finish_batches(session, client, plan, out).await;
    }
    let token = session.token.clone();
    let mut sent = 0u64;
    let mut result = Ok(());
    for c in changes {
        let Some(txn) = c.txn else { continue };
        match client.transact(&fenced(txn, token.as_deref())).await {
            Ok(_) => sent += 1,
            Err(e) => {
                warn_failed(&e, c.owners.len());
                result = Err(e);
                break;
            }
        }
    }
    let written = std::time::Instant::now();
    session.done(plan, &result);
    Sent {
        monitor: Some(monitor),
        transactions: sent,
        result,
        written,
    }
}

/// Diff `plan` and write the changes ([`Session::changes`] + [`send`]). A first sync is
/// streamed: each batch goes on the wire as soon as it is diffed, so the server commits one
/// while the next is built.
pub async fn write_plan(
    session: &mut Session,
    client: &Client,
    monitor: ovsdb::Monitor,
    plan: &Desired,
) -> Sent {
    if let Err(e) = group::ensure(session, client, plan).await {
        tracing::warn!(error = %e, "cannot create vipflow's Load_Balancer_Group; will retry");
        let result = Err(e);
        session.done(plan, &result);
        return Sent {
            monitor: Some(monitor),
            transactions: 0,
            result,
            written: std::time::Instant::now(),
        };
    }
    if !session.first {
        let changes = session.changes(plan);
        return send(session, client, monitor, plan, changes).await;
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let writer = tokio::spawn(stream_batches(
        client.clone(),
        monitor,
        session.token.clone(),
        rx,
    ));
    session.changes_into(plan, &mut |c| {
        let _ = tx.send(c);
    });
    drop(tx);
    let out = writer.await.unwrap_or_else(|e| {
        tracing::error!(error = %e, "Northbound batch writer failed");
        Batches {
            monitor: None,
            transactions: 0,
            result: Err(ovsdb::Error::Shutdown),
            written: std::time::Instant::now(),
        }
    });
    finish_batches(session, client, plan, out).await
}

/// The monitor as the batch writer leaves it.
enum Monitored {
    Open(ovsdb::Monitor),
    Cancelled,
}

/// What the batch writer did; `monitor` is `None` when cancelling it failed.
struct Batches {
    monitor: Option<Monitored>,
    transactions: u64,
    result: Result<(), ovsdb::Error>,
    written: std::time::Instant,
}

/// Write the batches of a first sync as they come, pipelined, each fenced with `token`.
///
/// When the first batch is a full one (a large sync), the monitor is cancelled before it is
/// sent: while any monitor covers the table, ovsdb-server builds the whole update of the
/// inserted rows before it replies (3 MB and some 140 ms of its CPU for 10,000 rows). The
/// caller takes the monitor again after ([`finish_batches`]).
async fn stream_batches(
    client: Client,
    monitor: ovsdb::Monitor,
    token: Option<String>,
    mut changes: tokio::sync::mpsc::UnboundedReceiver<Change>,
) -> Batches {
    use futures::StreamExt;
    let mut monitor = Some(Monitored::Open(monitor));
    let mut inflight = futures::stream::FuturesUnordered::new();
    let mut first = true;
    let mut open = true;
    let mut sent = 0u64;
    let mut result = Ok(());
    loop {
        tokio::select! {
            c = changes.recv(), if open => {
                let Some(c) = c else {
                    open = false;
                    continue;
                };
                if std::mem::take(&mut first)
                    && c.owners.len() >= BATCH_OWNERS
                    && let Some(Monitored::Open(m)) = monitor.take()
                {
                    if let Err(e) = client.monitor_cancel(m).await {
                        return Batches {
                            monitor: None,
                            transactions: 0,
                            result: Err(e),
                            written: std::time::Instant::now(),
                        };
                    }
                    monitor = Some(Monitored::Cancelled);
                }
                let Some(txn) = c.txn else { continue };
                let txn = fenced(txn, token.as_deref());
                let client = client.clone();
                let services = c.owners.len();
                inflight.push(async move { (services, client.transact(&txn).await) });
            }
            Some((services, r)) = inflight.next(), if !inflight.is_empty() => match r {
                Ok(_) => sent += 1,
                Err(e) => {
                    warn_failed(&e, services);
                    if result.is_ok() {
                        result = Err(e);
                    }
                }
            },
            else => break,
        }
    }
    Batches {
        monitor,
        transactions: sent,
        result,
        written: std::time::Instant::now(),
    }
}

/// Tell the session how a first sync went and take the monitor again if it was cancelled: its
/// snapshot, built after the commit, replaces the observed state, and the next diff checks
/// everything against it.
async fn finish_batches(
    session: &mut Session,
    client: &Client,
    plan: &Desired,
    out: Batches,
) -> Sent {
    session.done(plan, &out.result);
    let monitor = match out.monitor {
        Some(Monitored::Open(m)) => Some(m),
        Some(Monitored::Cancelled) => match client.monitor(monitor_spec()).await {
            Ok(m) => {
                session.resubscribed(Observed::from_cache(&m.cache()));
                Some(m)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot monitor the Northbound database again");
                None
            }
        },
        None => None,
    };
    Sent {
        monitor,
        transactions: out.transactions,
        result: out.result,
        written: out.written,
    }
}

/// Run the NB reconciler until `desired`'s sender is dropped.
pub async fn run(
    settings: NbSettings,
    mut desired: watch::Receiver<Arc<Desired>>,
    status: watch::Sender<Status>,
) {
    let mut backoff = settings.backoff_min;
    let mut unreachable_warn = WarnEvery::new(UNREACHABLE_WARN_EVERY);
    'connect: loop {
        let opts = match ClientOptions::new(&settings.remotes, DB)
            .map(|o| nb_options(o, settings.request_timeout))
        {
            Ok(o) => o,
            Err(e) => {
                tracing::error!(remotes = %settings.remotes, error = %e, "bad Northbound remote; not writing rows");
                status.send_modify(|s| s.last_error = Some(e.to_string()));
                return;
            }
        };
        let client = match Client::connect(opts).await {
            Ok(c) => {
                unreachable_warn.reset();
                c
            }
            Err(e) => {
                if unreachable_warn.due(std::time::Instant::now()) {
                    tracing::warn!(remotes = %settings.remotes, error = %e, retry_in = ?backoff, "cannot connect to the Northbound database");
                } else {
                    tracing::debug!(remotes = %settings.remotes, error = %e, retry_in = ?backoff, "cannot connect to the Northbound database");
                }
                status.send_modify(|s| {
                    s.connected = false;
                    s.last_error = Some(e.to_string());
                });
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    r = desired.changed() => if r.is_err() { return },
                }
                backoff = (backoff * 2).min(settings.backoff_max);
                continue;
            }
        };
        // One writer token per pass: a token that disappeared is taken back on the same
        // connection (see `after_fence_failure`).
        'session: loop {
            // Become the writer first, then read: everything an earlier writer committed is in
            // the snapshot, and anything it still sends fails its fence.
            let token = new_token();
            if let Err(e) = take_over(&client, &token).await {
                tracing::warn!(error = %e, "cannot take over as Northbound writer");
                status.send_modify(|s| s.last_error = Some(e.to_string()));
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(settings.backoff_max);
                continue 'connect;
            }
            let mut monitor = match client.monitor(monitor_spec()).await {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot monitor the Northbound database");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(settings.backoff_max);
                    continue 'connect;
                }
            };
            backoff = settings.backoff_min;
            tracing::info!(remotes = %settings.remotes, "Northbound connected");
            // Events already queued are in the cache too; applying them again changes nothing.
            let mut s = Session::new(Observed::from_cache(&monitor.cache()), Some(token.clone()));
            let mut event = None;
            loop {
                s.absorb(&mut monitor, event.take());
                let plan = desired.borrow_and_update().clone();
                if plan.generation == 0 {
                    // No plan yet (the placeholder): writing it would delete every row of ours.
                    tokio::select! {
                        r = desired.changed() => if r.is_err() { return },
                        ev = monitor.next_event() => match ev {
                            None => continue 'connect,
                            Some(ev) => event = Some(ev),
                        },
                    }
                    continue;
                }
                let started = std::time::Instant::now();
                let Sent {
                    monitor: m,
                    transactions: sent,
                    result,
                    ..
                } = write_plan(&mut s, &client, monitor, &plan).await;
                let Some(m) = m else { continue 'connect };
                monitor = m;
                if let Err(e) = &result
                    && is_fence_failure(e)
                    && fence_lost(&client, &token, settings.leading.as_ref()).await
                        == FenceAction::TakeOver
                {
                    // The old monitor's snapshot belongs to the old token: read again after.
                    let _ = client.monitor_cancel(monitor).await;
                    continue 'session;
                }
                let ok = result.is_ok();
                if ok {
                    backoff = settings.backoff_min;
                    if sent > 0 {
                        tracing::info!(
                            generation = plan.generation,
                            transactions = sent,
                            rows = plan.row_count,
                            "Northbound synced"
                        );
                    }
                }
                let problems = s.problems();
                let failed = result.err().map(|e| e.to_string());
                status.send_if_modified(|st| {
                    let before = st.clone();
                    st.connected = true;
                    st.transactions += sent;
                    if sent > 0 {
                        st.syncs += 1;
                        st.last_sync = started.elapsed();
                    }
                    st.problems = problems;
                    if ok {
                        st.applied_step = Some(plan.step);
                        if plan.complete {
                            st.applied_generation = Some(plan.generation);
                        }
                        st.rows = plan.row_count;
                        st.last_error = None;
                    } else {
                        st.last_error = failed;
                    }
                    *st != before
                });
                // Wait for a new plan, a change in the database, or (after a failure) the
                // backoff.
                let retry = async {
                    if ok {
                        std::future::pending::<()>().await
                    } else {
                        tokio::time::sleep(backoff).await
                    }
                };
                tokio::select! {
                    r = desired.changed() => if r.is_err() { return },
                    ev = monitor.next_event() => match ev {
                        None => continue 'connect,
                        Some(ev) => event = Some(ev),
                    },
                    _ = retry => { backoff = (backoff * 2).min(settings.backoff_max); }
                }
            }
        }
    }
}

/// After this session's fence failed: who holds the token now, and what to do about it.
async fn fence_lost(
    client: &Client,
    token: &str,
    leading: Option<&watch::Receiver<bool>>,
) -> FenceAction {
    let mut txn = Transaction::new(DB);
    txn.select(NB_GLOBAL, vec![], Some(&["external_ids"]));
    let holder = match client.transact(&txn).await {
        Ok(r) => match r.into_iter().next() {
            Some(OpResult::Rows(rows)) => token_holder(&rows, token),
            _ => TokenHolder::Us,
        },
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the Northbound writer token");
            return FenceAction::Retry;
        }
    };
    let leading = leading.is_none_or(|l| *l.borrow());
    let action = after_fence_failure(&holder, leading);
    match (&holder, action) {
        (_, FenceAction::TakeOver) => {
            tracing::warn!(
                "Northbound writer token gone (database replaced or key removed); taking over again"
            );
        }
        (TokenHolder::Other(t), _) => {
            tracing::warn!(holder = %t, "another writer holds the Northbound database; not writing");
        }
        (TokenHolder::Nobody, _) => {
            tracing::warn!(
                "Northbound writer token gone, but this agent no longer leads; not taking it back"
            );
        }
        _ => {}
    }
    action
}

/// Connect, read the current rows (one monitor snapshot), and close.
async fn snapshot(remotes: &str) -> Result<(Client, ovsdb::Monitor, Observed), ovsdb::Error> {
    let client = Client::connect(nb_options(
        ClientOptions::new(remotes, DB)?,
        Duration::from_millis(crate::config::DEFAULT_NB_TIMEOUT_MS),
    ))
    .await?;
    let monitor = client.monitor(monitor_spec()).await?;
    let observed = Observed::from_cache(&monitor.cache());
    Ok((client, monitor, observed))
}

/// One batched sync (`vipflow agent --once`): returns the number of operations written and
/// the attachment problems.
pub async fn sync_once(
    remotes: &str,
    rows: &[LbRow],
    group: Option<GroupPlan>,
    exclude_vips: Option<&BTreeSet<IpAddr>>,
) -> Result<(usize, Vec<String>), ovsdb::Error> {
    // A writer for this moment: take over (a running writer resumes on its next connection),
    // read, write the difference as a batch.
    let client = Client::connect(nb_options(
        ClientOptions::new(remotes, DB)?,
        Duration::from_millis(crate::config::DEFAULT_NB_TIMEOUT_MS),
    ))
    .await?;
    let token = new_token();
    take_over(&client, &token).await?;
    let monitor = client.monitor(monitor_spec()).await?;
    let mut session = Session::new(Observed::from_cache(&monitor.cache()), Some(token));
    let plan = Desired {
        generation: 1,
        step: 1,
        complete: true,
        rows: index_rows(rows.iter().cloned()),
        row_count: rows.len(),
        delta: None,
        vips: exclude_vips.into_iter().flatten().copied().collect(),
        exclude_ips: exclude_vips.is_some(),
        group: group.map(Arc::new),
    };
    group::ensure(&mut session, &client, &plan).await?;
    let changes = session.changes(&plan);
    let ops = changes.iter().map(|c| c.ops).sum();
    send(&mut session, &client, monitor, &plan, changes)
        .await
        .result?;
    Ok((ops, session.problems()))
}

/// Differences between the database and the plan, one line each (`vipflow verify`).
pub async fn drift(
    remotes: &str,
    rows: &[LbRow],
    group: Option<&GroupPlan>,
    exclude_vips: Option<&BTreeSet<IpAddr>>,
) -> Result<Vec<String>, ovsdb::Error> {
    let (_client, _monitor, observed) = snapshot(remotes).await?;
    let mut lines = describe_drift(&observed, rows);
    if let Some(g) = group {
        lines.extend(group::describe(&observed, g));
    }
    if let Some(vips) = exclude_vips {
        let switches: Vec<LogicalSwitchIpam> =
            observed.ipam.iter().map(|s| s.ipam.clone()).collect();
        for ch in plan_ovn(vips, &switches).changes {
            lines.push(format!(
                "~ Logical_Switch {}: other_config:exclude_ips should be {:?}",
                ch.name,
                ch.exclude_ips.unwrap_or_default()
            ));
        }
    }
    Ok(lines)
}

/// VIPs inside a logical switch's `other_config:subnet` that its current `exclude_ips` does
/// not cover (`vipflow check`).
pub async fn unexcluded(
    remotes: &str,
    vips: &BTreeSet<IpAddr>,
) -> Result<Vec<String>, ovsdb::Error> {
    use crate::plan::exclude::{RangeSet, parse_ovn_subnet};
    let (_client, _monitor, observed) = snapshot(remotes).await?;
    let mut out = Vec::new();
    for sw in &observed.ipam {
        let Some(Ok(net)) = sw.ipam.subnet.as_deref().map(parse_ovn_subnet) else {
            continue;
        };
        let (covered, _) = RangeSet::from_ovn_text(sw.ipam.exclude_ips.as_deref().unwrap_or(""));
        for vip in vips {
            if let std::net::IpAddr::V4(v4) = vip
                && net.contains(v4)
                && !covered.contains(*vip)
            {
                out.push(format!(
                    "Logical_Switch {}: VIP {vip} is in subnet {net} but not in exclude_ips",
                    sw.ipam.name
                ));
            }
        }
    }
    Ok(out)
}

/// Human-readable drift: rows missing, different, duplicated or orphaned, and attachments;
/// `!` lines: attachment targets that do not exist and Services whose rows are attached
/// nowhere.
pub fn describe_drift(observed: &Observed, rows: &[LbRow]) -> Vec<String> {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for (owner, rows) in index_rows(rows.iter().cloned()) {
        problems.extend(unattached(&owner, &rows));
    }
    let by_key = observed.by_key();
    for d in rows {
        match by_key.get(&d.key).map(Vec::as_slice) {
            None | Some([]) => {
                out.push(format!("+ {}: missing", d.name));
                attach_targets(
                    observed,
                    &d.attach,
                    None,
                    Atom::Uuid(Uuid::nil()),
                    &mut AttachOps::default(),
                    &mut problems,
                );
            }
            Some([o, rest @ ..]) => {
                if !same_content(o, d) {
                    out.push(format!(
                        "~ {}: differs (vips {:?}, want {:?})",
                        d.name, o.vips, d.vips
                    ));
                }
                if !rest.is_empty() {
                    out.push(format!("- {}: {} duplicate rows", d.name, rest.len()));
                }
                let mut ops = AttachOps::default();
                attach_targets(
                    observed,
                    &d.attach,
                    Some(o.uuid),
                    Atom::Uuid(o.uuid),
                    &mut ops,
                    &mut problems,
                );
                if !ops.add.is_empty() || !ops.remove.is_empty() {
                    out.push(format!("~ {}: attachments differ", d.name));
                }
            }
        }
    }
    let want: BTreeSet<&LbKey> = rows.iter().map(|d| &d.key).collect();
    for (k, os) in &by_key {
        if !want.contains(k) {
            for o in os {
                out.push(format!(
                    "- {}: orphan ({} {})",
                    o.name, o.key.owner, o.key.scope
                ));
            }
        }
    }
    problems.sort();
    problems.dedup();
    out.extend(problems.into_iter().map(|p| format!("! {p}")));
    out
}
