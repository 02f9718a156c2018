//! Keeps vipflow's OVN Northbound `Load_Balancer` rows equal to the plan.
//!
//! - **Observed state** is a monitor cache of Load_Balancer, Load_Balancer_Group,
//!   Logical_Switch and Logical_Router, kept current by the `ovsdb` client (which follows the
//!   cluster leader and resumes the monitor after a reconnect).
//! - **Ownership**: a row is ours when its `external_ids` carry `vipflow.io/owner` and
//!   `vipflow.io/scope`; it is identified by (owner, protocol, scope). Rows without them are
//!   never read into the diff, so never touched.
//! - **Writes**: the diff of cache and plan, as one transaction per changed Service (the
//!   first sync after connecting batches everything into one). Rows that are ours but no longer
//!   planned (orphans) and extra copies of a row (duplicates) are deleted.
//! - **No duplicates, ever**: each insert is preceded in its transaction by a `wait` that fails
//!   if a row with the same identity already exists. A transaction whose outcome is unknown
//!   (connection lost after sending) is never blindly resent: the next diff is computed from the
//!   cache, which by then shows whether it committed, and the guard covers the race.
//! - Load balancers are attached through weak references (switch/router/group
//!   `load_balancer` columns), so deleting a row detaches it everywhere.

use crate::model::{Protocol, ServiceKey};
use crate::plan::exclude::{LogicalSwitchIpam, OURS_KEY, plan_ovn};
use crate::plan::northbound::{Attach, LbKey, LbRow, OWNER_KEY, SCOPE_KEY, Scope};
use ovsdb::txn::WaitUntil;
use ovsdb::{
    Atom, Cache, Client, ClientOptions, Condition, MonitorSpec, Mutation, Mutator, Operation, Row,
    Transaction, Uuid, Value,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

pub const DB: &str = "OVN_Northbound";
const LB: &str = "Load_Balancer";
const GROUP: &str = "Load_Balancer_Group";
const SWITCH: &str = "Logical_Switch";
const ROUTER: &str = "Logical_Router";

/// What the NB reconciler is asked to make true.
#[derive(Debug, Clone, Default)]
pub struct Desired {
    pub generation: u64,
    pub rows: Vec<LbRow>,
    /// Every VIP: kept out of the IPAM of the logical switches whose subnet holds it.
    pub vips: BTreeSet<std::net::IpAddr>,
    /// Whether to manage `other_config:exclude_ips` at all.
    pub exclude_ips: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub connected: bool,
    pub applied_generation: Option<u64>,
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
            &["name", "load_balancer", "other_config", "external_ids"],
        )
        .columns(ROUTER, &["name", "load_balancer"])
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

/// A switch, router or group: its uuid and the load balancers it holds.
#[derive(Debug, Clone, Default)]
struct Holder {
    uuid: Uuid,
    lbs: BTreeSet<Uuid>,
}

/// The part of the cache the diff needs.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub lbs: Vec<ObservedLb>,
    /// Logical switches' IPAM settings: uuid, raw values, full other_config and external_ids.
    pub ipam: Vec<SwitchIpam>,
    groups: BTreeMap<String, Holder>,
    switches: BTreeMap<String, Holder>,
    routers: BTreeMap<String, Holder>,
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
    let scope = match ext.get(SCOPE_KEY)?.as_str() {
        "cluster" => Scope::Cluster,
        s => Scope::Node(s.strip_prefix("node/")?.to_owned()),
    };
    Some(LbKey {
        owner: ServiceKey::new(ns, name),
        protocol: parse_protocol(protocol)?,
        scope,
    })
}

impl Observed {
    /// Our rows grouped by identity (more than one under a key: duplicates).
    pub fn by_key(&self) -> BTreeMap<&LbKey, Vec<&ObservedLb>> {
        let mut m: BTreeMap<&LbKey, Vec<&ObservedLb>> = BTreeMap::new();
        for o in &self.lbs {
            m.entry(&o.key).or_default().push(o);
        }
        m
    }

    pub fn from_cache(cache: &Cache) -> Observed {
        let mut o = Observed::default();
        if let Some(t) = cache.table(LB) {
            for (uuid, row) in t {
                let external_ids = map_of(row.get("external_ids"));
                let protocol = str_of(row.get("protocol"));
                // Not ours (or ours but unreadable): left alone.
                let Some(key) = parse_key(&external_ids, protocol.as_deref()) else {
                    continue;
                };
                o.lbs.push(ObservedLb {
                    uuid: *uuid,
                    key,
                    name: str_of(row.get("name")).unwrap_or_default(),
                    vips: map_of(row.get("vips")),
                    options: map_of(row.get("options")),
                    external_ids,
                    ip_port_mappings: map_of(row.get("ip_port_mappings")),
                });
            }
        }
        let holders = |table: &str| -> BTreeMap<String, Holder> {
            let mut m = BTreeMap::new();
            for (uuid, row) in cache.table(table).into_iter().flatten() {
                if let Some(name) = str_of(row.get("name")) {
                    m.insert(
                        name,
                        Holder {
                            uuid: *uuid,
                            lbs: uuids_of(row.get("load_balancer")),
                        },
                    );
                }
            }
            m
        };
        for (uuid, row) in cache.table(SWITCH).into_iter().flatten() {
            let other_config = map_of(row.get("other_config"));
            let external_ids = map_of(row.get("external_ids"));
            o.ipam.push(SwitchIpam {
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
        o.groups = holders(GROUP);
        o.switches = holders(SWITCH);
        o.routers = holders(ROUTER);
        o
    }
}

fn smap(m: &BTreeMap<String, String>) -> Value {
    Value::map(m.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

fn lb_columns(d: &LbRow) -> Row {
    Row::from([
        ("name".to_string(), Value::Atom(Atom::string(&d.name))),
        (
            "protocol".to_string(),
            Value::set([d.key.protocol.as_str()]),
        ),
        ("vips".to_string(), smap(&d.vips)),
        ("options".to_string(), smap(&d.options)),
        ("external_ids".to_string(), smap(&d.external_ids)),
        ("ip_port_mappings".to_string(), smap(&d.ip_port_mappings)),
    ])
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

/// One Service's (or the initial sync's) changes.
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

/// The transactions that turn `observed` into `desired`: one per changed Service, or a single
/// one when `batch` is set. Also returns attachment problems (missing targets).
pub fn diff(observed: &Observed, desired: &[LbRow], batch: bool) -> (Vec<Change>, Vec<String>) {
    let mut problems = Vec::new();
    let by_key = observed.by_key();
    let want: BTreeMap<&LbKey, &LbRow> = desired.iter().map(|d| (&d.key, d)).collect();

    // Group work by owner so each Service's change is one transaction. Grouped once up
    // front: filtering all keys per owner made a sync quadratic in the number of Services.
    let mut owners: BTreeMap<&ServiceKey, BTreeSet<&LbKey>> = BTreeMap::new();
    for k in want.keys().chain(by_key.keys()) {
        owners.entry(&k.owner).or_default().insert(*k);
    }

    let mut changes = Vec::new();
    let mut batch_txn = Transaction::new(DB);
    let mut batch_change = Change::default();
    let mut batch_attach = AttachOps::default();
    for (owner, keys) in owners {
        let mut txn = Transaction::new(DB);
        let mut attach = AttachOps::default();
        let (txn_ref, attach_ref) = if batch {
            (&mut batch_txn, &mut batch_attach)
        } else {
            (&mut txn, &mut attach)
        };
        let before = txn_ref.ops.len();
        let before_attach = attach_ref.add.values().map(Vec::len).sum::<usize>()
            + attach_ref.remove.values().map(Vec::len).sum::<usize>();
        for key in keys {
            let obs = by_key.get(key).map(Vec::as_slice).unwrap_or(&[]);
            match (want.get(key), obs.split_first()) {
                (Some(d), None) => {
                    txn_ref.wait(
                        LB,
                        identity(key),
                        &["name"],
                        WaitUntil::Equal,
                        vec![],
                        Some(0),
                    );
                    let named = txn_ref.insert(LB, lb_columns(d));
                    attach_targets(observed, &d.attach, None, named, attach_ref, &mut problems);
                }
                (Some(d), Some((first, dups))) => {
                    if !same_content(first, d) {
                        txn_ref.update(LB, vec![Condition::uuid(first.uuid)], lb_columns(d));
                    }
                    for dup in dups {
                        txn_ref.delete(LB, vec![Condition::uuid(dup.uuid)]);
                    }
                    attach_targets(
                        observed,
                        &d.attach,
                        Some(first.uuid),
                        Atom::Uuid(first.uuid),
                        attach_ref,
                        &mut problems,
                    );
                }
                (None, _) => {
                    for o in obs {
                        txn_ref.delete(LB, vec![Condition::uuid(o.uuid)]);
                    }
                }
            }
        }
        let after_attach = attach_ref.add.values().map(Vec::len).sum::<usize>()
            + attach_ref.remove.values().map(Vec::len).sum::<usize>();
        let changed = txn_ref.ops.len() > before || after_attach > before_attach;
        if changed {
            if batch {
                batch_change.owners.insert(owner.clone());
            } else {
                emit_attach(&mut txn, attach);
                txn.comment(&format!("vipflow: Service {owner}"));
                let ops = txn.ops.len();
                changes.push(Change {
                    owners: BTreeSet::from([owner.clone()]),
                    txn: Some(txn),
                    ops,
                });
            }
        }
    }
    if batch && !batch_change.owners.is_empty() {
        // Guards first: ovsdb-server checks each `wait` by scanning the table, so a guard
        // after earlier inserts of the batch also scans those (quadratic: 8 s for 10,000 rows
        // from empty). Same meaning: nothing else in the batch creates a guarded identity.
        let (waits, rest): (Vec<Operation>, Vec<Operation>) = std::mem::take(&mut batch_txn.ops)
            .into_iter()
            .partition(|op| matches!(op, Operation::Wait { .. }));
        batch_txn.ops = waits;
        batch_txn.ops.extend(rest);
        emit_attach(&mut batch_txn, batch_attach);
        batch_txn.comment(&format!(
            "vipflow: sync of {} Services",
            batch_change.owners.len()
        ));
        batch_change.ops = batch_txn.ops.len();
        batch_change.txn = Some(batch_txn);
        changes.push(batch_change);
    }
    problems.sort();
    problems.dedup();
    (changes, problems)
}

/// Transactions that keep every VIP out of the IPAM of the switches whose subnet holds it:
/// one per changed switch (or one in all with `batch`), each guarded by a `wait` on the
/// switch's maps as observed, so a concurrent edit by someone else aborts it and the next diff
/// starts from their text. Also returns the problems found in switches' settings.
pub fn diff_exclude(
    observed: &Observed,
    vips: &BTreeSet<std::net::IpAddr>,
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

/// Run the NB reconciler until `desired`'s sender is dropped.
pub async fn run(
    settings: NbSettings,
    mut desired: watch::Receiver<Arc<Desired>>,
    status: watch::Sender<Status>,
) {
    let mut backoff = settings.backoff_min;
    loop {
        let opts = match ClientOptions::new(&settings.remotes, DB) {
            Ok(o) => o,
            Err(e) => {
                tracing::error!(remotes = %settings.remotes, error = %e, "bad Northbound remote; not writing rows");
                status.send_modify(|s| s.last_error = Some(e.to_string()));
                return;
            }
        };
        let client = match Client::connect(opts).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(remotes = %settings.remotes, error = %e, retry_in = ?backoff, "cannot connect to the Northbound database");
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
        let mut monitor = match client.monitor(monitor_spec()).await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "cannot monitor the Northbound database");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(settings.backoff_max);
                continue;
            }
        };
        backoff = settings.backoff_min;
        tracing::info!(remotes = %settings.remotes, "Northbound connected");
        let mut first = true;
        loop {
            let plan = desired.borrow_and_update().clone();
            if plan.generation == 0 {
                // No plan yet (the placeholder): writing it would delete every row of ours.
                tokio::select! {
                    r = desired.changed() => if r.is_err() { return },
                    ev = monitor.next_event() => if ev.is_none() { break },
                }
                continue;
            }
            let started = std::time::Instant::now();
            let observed = Observed::from_cache(&monitor.cache());
            let (mut changes, mut problems) = diff(&observed, &plan.rows, first);
            if plan.exclude_ips {
                let (c, p) = diff_exclude(&observed, &plan.vips, first);
                changes.extend(c);
                problems.extend(p);
            }
            let mut failed = None;
            let mut sent = 0u64;
            for c in changes {
                let Some(txn) = c.txn else { continue };
                match client.transact(&txn).await {
                    Ok(_) => sent += 1,
                    Err(e) => {
                        if e.outcome_unknown() {
                            // Never resend blindly: the cache will tell what happened.
                            tracing::warn!(error = %e, services = c.owners.len(), "transaction outcome unknown; re-reading before any retry");
                        } else {
                            tracing::warn!(error = %e, services = c.owners.len(), "transaction failed; will retry");
                        }
                        failed = Some(e.to_string());
                        break;
                    }
                }
            }
            let ok = failed.is_none();
            if ok {
                first = false;
                backoff = settings.backoff_min;
                if sent > 0 {
                    tracing::info!(
                        generation = plan.generation,
                        transactions = sent,
                        rows = plan.rows.len(),
                        "Northbound synced"
                    );
                }
            }
            for p in &problems {
                tracing::debug!(problem = %p, "attachment");
            }
            status.send_modify(|s| {
                s.connected = true;
                s.transactions += sent;
                if sent > 0 {
                    s.syncs += 1;
                    s.last_sync = started.elapsed();
                }
                s.problems = problems;
                if ok {
                    s.applied_generation = Some(plan.generation);
                    s.rows = plan.rows.len();
                    s.last_error = None;
                } else {
                    s.last_error = failed.clone();
                }
            });
            // Wait for a new plan, a change in the database, or (after a failure) the backoff.
            let retry = async {
                if ok {
                    std::future::pending::<()>().await
                } else {
                    tokio::time::sleep(backoff).await
                }
            };
            tokio::select! {
                r = desired.changed() => if r.is_err() { return },
                ev = monitor.next_event() => if ev.is_none() { break },
                _ = retry => { backoff = (backoff * 2).min(settings.backoff_max); }
            }
            // Coalesce a burst (our own transaction's echo, a churn of updates) into one diff.
            tokio::time::sleep(Duration::from_millis(5)).await;
            while monitor.try_event().is_some() {}
        }
    }
}

/// Connect, read the current rows (one monitor snapshot), and close.
async fn snapshot(remotes: &str) -> Result<(Client, ovsdb::Monitor, Observed), ovsdb::Error> {
    let client = Client::connect(ClientOptions::new(remotes, DB)?).await?;
    let monitor = client.monitor(monitor_spec()).await?;
    let observed = Observed::from_cache(&monitor.cache());
    Ok((client, monitor, observed))
}

/// One batched sync (`vipflow agent --once`): returns the number of operations written and
/// the attachment problems.
pub async fn sync_once(
    remotes: &str,
    rows: &[LbRow],
    exclude_vips: Option<&BTreeSet<std::net::IpAddr>>,
) -> Result<(usize, Vec<String>), ovsdb::Error> {
    let (client, _monitor, observed) = snapshot(remotes).await?;
    let (mut changes, mut problems) = diff(&observed, rows, true);
    if let Some(vips) = exclude_vips {
        let (c, p) = diff_exclude(&observed, vips, true);
        changes.extend(c);
        problems.extend(p);
    }
    let mut ops = 0;
    for c in changes {
        if let Some(txn) = c.txn {
            client.transact(&txn).await?;
            ops += c.ops;
        }
    }
    Ok((ops, problems))
}

/// Differences between the database and the plan, one line each (`vipflow verify`).
pub async fn drift(
    remotes: &str,
    rows: &[LbRow],
    exclude_vips: Option<&BTreeSet<std::net::IpAddr>>,
) -> Result<Vec<String>, ovsdb::Error> {
    let (_client, _monitor, observed) = snapshot(remotes).await?;
    let mut lines = describe_drift(&observed, rows);
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
    vips: &BTreeSet<std::net::IpAddr>,
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

/// Human-readable drift: rows missing, different, duplicated or orphaned, and attachments.
pub fn describe_drift(observed: &Observed, rows: &[LbRow]) -> Vec<String> {
    let mut out = Vec::new();
    let by_key = observed.by_key();
    for d in rows {
        match by_key.get(&d.key).map(Vec::as_slice) {
            None | Some([]) => out.push(format!("+ {}: missing", d.name)),
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
                let mut problems = Vec::new();
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
    out
}
