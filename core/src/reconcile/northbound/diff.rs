//! The transactions that make the database hold the plan: per Service, for a batched first
//! sync, for exclude_ips; and the same comparison as text, for `vipflow verify`.

use crate::keys::EXCLUDE_IPS_KEY;
use crate::model::ServiceKey;
use crate::plan::exclude::LogicalSwitchIpam;
use crate::plan::northbound::Attach;
use crate::plan::northbound::LbKey;
use crate::plan::northbound::LbRow;
use crate::plan::northbound::unattached;
use crate::plan::row_table::RowIndex;
use crate::reconcile::northbound::BATCH_OWNERS;
use crate::reconcile::northbound::DB;
use crate::reconcile::northbound::GROUP;
use crate::reconcile::northbound::LB;
use crate::reconcile::northbound::ROUTER;
use crate::reconcile::northbound::SWITCH;
use crate::reconcile::northbound::index_rows;
use crate::reconcile::northbound::lb_row;
use crate::reconcile::northbound::lb_row::identity;
use crate::reconcile::northbound::lb_row::insert_columns;
use crate::reconcile::northbound::lb_row::lb_columns;
use crate::reconcile::northbound::lb_row::map_of;
use crate::reconcile::northbound::lb_row::same_content;
use crate::reconcile::northbound::lb_row::smap;
use crate::reconcile::northbound::observed::Holder;
use crate::reconcile::northbound::observed::Observed;
use crate::reconcile::northbound::template_vars;
use ovsdb::Atom;
use ovsdb::Cache;
use ovsdb::Condition;
use ovsdb::Mutation;
use ovsdb::Mutator;
use ovsdb::Row;
use ovsdb::Transaction;
use ovsdb::Uuid;
use ovsdb::Value;
use ovsdb::txn::WaitUntil;
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::net::IpAddr;
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
pub struct AttachOps {
    pub add: BTreeMap<(&'static str, Uuid), Vec<Atom>>,
    pub remove: BTreeMap<(&'static str, Uuid), Vec<Atom>>,
}

impl AttachOps {
    pub fn is_empty(&self) -> bool {
        self.add.is_empty() && self.remove.is_empty()
    }

    pub fn size(&self) -> usize {
        self.add
            .values()
            .chain(self.remove.values())
            .map(Vec::len)
            .sum()
    }
}

/// A transaction being built: its body, the identities its inserts create, its attachments.
pub struct Pending {
    pub owners: BTreeSet<ServiceKey>,
    pub body: Transaction,
    pub inserted: Vec<LbKey>,
    pub attach: AttachOps,
}

impl Pending {
    pub fn new() -> Self {
        Pending {
            owners: BTreeSet::new(),
            body: Transaction::new(DB),
            inserted: Vec::new(),
            attach: AttachOps::default(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.body.ops.is_empty() && self.attach.is_empty()
    }

    /// The finished transaction: guards first, then the body and the attachments. A guard
    /// (`guarded`) makes each insert fail if a row of that identity exists: it covers a diff
    /// made from a cache that has not yet shown one of our own writes. Guards go first because
    /// ovsdb-server checks a `wait` by scanning the table: placed after inserts, each would
    /// scan those too.
    pub fn finish(self, guarded: bool, comment: &str) -> Change {
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
pub fn diff_owner(
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
    let had = observed.vars_of(owner);
    if !had.is_empty() || want.values().any(|d| !d.template_vars.is_empty()) {
        let want: Vec<&LbRow> = want.values().copied().collect();
        template_vars::diff(observed, &want, &had, p, problems);
    }
}

/// The transactions that turn `observed` into `desired` for the Services in `owners` (all of
/// them, planned or observed, with `None`): one per changed Service, or with `batch` one per
/// [`BATCH_OWNERS`] changed Services, to be sent back to back. Batches are made from one
/// snapshot and touch each identity once, so they need no per-row guard (the writer fence of
/// [`send`] still applies). Returns attachment problems (missing targets).
pub fn diff(
    observed: &Observed,
    desired: &RowIndex,
    owners: Option<&BTreeSet<ServiceKey>>,
    batch: bool,
    sink: &mut dyn FnMut(Change),
) -> Vec<String> {
    let all: Vec<ServiceKey>;
    let mut owners: Box<dyn Iterator<Item = &ServiceKey>> = match owners {
        Some(o) => Box::new(o.iter()),
        None => {
            all = all_owners(observed, desired);
            Box::new(all.iter())
        }
    };
    let mut problems = Vec::new();
    while diff_some(observed, desired, &mut owners, batch, &mut problems, sink) {}
    problems.sort();
    problems.dedup();
    problems
}

/// Every Service planned or observed, in order.
pub fn all_owners(observed: &Observed, desired: &RowIndex) -> Vec<ServiceKey> {
    let mut all: Vec<ServiceKey> = desired
        .keys()
        .chain(observed.by_owner.keys())
        .cloned()
        .collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// [`diff`] for the next of `owners`: with `batch`, up to one full batch, returning whether
/// owners are left (a first sync is diffed a batch at a time, so that only the batches on
/// the wire are in memory); without, all of them. Problems are appended unsorted.
pub fn diff_some(
    observed: &Observed,
    desired: &RowIndex,
    owners: &mut dyn Iterator<Item = &ServiceKey>,
    batch: bool,
    problems: &mut Vec<String>,
    sink: &mut dyn FnMut(Change),
) -> bool {
    let mut batched = Pending::new();
    for owner in owners {
        let want = desired.get(owner).map(|v| v.as_slice()).unwrap_or(&[]);
        if batch {
            let before = batched.body.ops.len() + batched.attach.size();
            diff_owner(observed, owner, want, &mut batched, problems);
            let after = batched.body.ops.len() + batched.attach.size();
            if after != before {
                batched.owners.insert(owner.clone());
                if batched.owners.len() >= BATCH_OWNERS {
                    sink(batched.finish(false, "vipflow: sync"));
                    return true;
                }
            }
        } else {
            let mut p = Pending::new();
            diff_owner(observed, owner, want, &mut p, problems);
            if !p.is_empty() {
                p.owners.insert(owner.clone());
                sink(p.finish(true, &format!("vipflow: Service {owner}")));
            }
        }
    }
    if batch && !batched.is_empty() {
        sink(batched.finish(false, "vipflow: sync"));
    }
    false
}

/// Transactions that keep every VIP and pool range out of the IPAM of the switches whose
/// subnet holds it:
/// one per changed switch (or one in all with `batch`), each guarded by a `wait` on the
/// switch's maps as observed, so a concurrent edit by someone else aborts it and the next diff
/// starts from their text. Also returns the problems found in switches' settings.
pub fn diff_exclude(
    observed: &Observed,
    vips: &BTreeSet<IpAddr>,
    pools: &[(std::net::Ipv4Addr, std::net::Ipv4Addr)],
    batch: bool,
) -> (Vec<Change>, Vec<String>) {
    let switches: Vec<LogicalSwitchIpam> = observed.ipam.iter().map(|s| s.ipam.clone()).collect();
    let plan = crate::plan::exclude::plan_ovn_with_pools(vips, pools, &switches);
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
            Some(v) => ext.insert(EXCLUDE_IPS_KEY.into(), v.clone()),
            None => ext.remove(EXCLUDE_IPS_KEY),
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
pub fn attach_targets(
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

pub fn emit_attach(txn: &mut Transaction, ops: AttachOps) {
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

/// Human-readable drift: rows missing, different, duplicated or orphaned, and attachments;
/// `!` lines: attachment targets that do not exist and Services whose rows are attached
/// nowhere.
pub fn describe_drift(observed: &Observed, cache: &Cache, rows: &[LbRow]) -> Vec<String> {
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
                    let have = cache.row(LB, &o.uuid);
                    out.push(format!(
                        "~ {}: differs (vips {:?}, want {:?})",
                        d.name,
                        map_of(have.and_then(|r| r.get(lb_row::VIPS))),
                        d.vips
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
                let name = cache
                    .row(LB, &o.uuid)
                    .and_then(|r| lb_row::str_of(r.get(lb_row::NAME)))
                    .unwrap_or_default();
                out.push(format!(
                    "- {name}: orphan ({} {})",
                    o.key.owner, o.key.scope
                ));
            }
        }
    }
    problems.sort();
    problems.dedup();
    out.extend(problems.into_iter().map(|p| format!("! {p}")));
    out
}
