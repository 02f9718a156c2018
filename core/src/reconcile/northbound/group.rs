//! vipflow's own Load_Balancer_Group ([`GroupPlan`]): created when missing, attached to every
//! node's router and switch through their `load_balancer_group` column, detached from those
//! no longer planned (a node gone). Cluster rows join it as they would a configured group.
//!
//! The group must exist before rows can join it, and rows are diffed against a snapshot: so
//! The agent's `ensure` creates it in a transaction of its own before the diff and records it as
//! observed at once (the monitor shows it a moment later, unchanged).
//!
//! Load_Balancer_Group has no `external_ids` (OVN NB schema 7.0): the group is vipflow's by
//! its name, which the schema's index keeps unique.

use super::observed::Holder;
use super::{Change, DB, Observed, ROUTER, SWITCH};
use crate::plan::northbound::GroupPlan;
use ovsdb::{Atom, Condition, Mutation, Mutator, Transaction, Uuid, Value};
use std::collections::{BTreeMap, BTreeSet};

/// One attachment to make or undo.
struct AttachStep {
    table: &'static str,
    uuid: Uuid,
    name: String,
    mutator: Mutator,
}

/// What differs between where the group is and where it should be, and the targets that do
/// not exist. Nothing when the group itself does not exist ([`ensure`] deals with that).
fn steps(observed: &Observed, g: &GroupPlan) -> (Option<Uuid>, Vec<AttachStep>, Vec<String>) {
    let Some(own) = observed.groups.get(&g.name) else {
        return (None, Vec::new(), Vec::new());
    };
    let mut steps = Vec::new();
    let mut problems = Vec::new();
    let tables: [(&'static str, &BTreeMap<String, Holder>, &BTreeSet<String>); 2] = [
        (ROUTER, &observed.routers, &g.routers),
        (SWITCH, &observed.switches, &g.switches),
    ];
    for (table, holders, targets) in tables {
        for t in targets {
            match holders.get(t) {
                None => problems.push(format!(
                    "{table} {t} does not exist; Load_Balancer_Group {} cannot be attached to it",
                    g.name
                )),
                Some(h) if !h.groups.contains(&own.uuid) => steps.push(AttachStep {
                    table,
                    uuid: h.uuid,
                    name: t.clone(),
                    mutator: Mutator::Insert,
                }),
                Some(_) => {}
            }
        }
        for (name, h) in holders {
            if h.groups.contains(&own.uuid) && !targets.contains(name) {
                steps.push(AttachStep {
                    table,
                    uuid: h.uuid,
                    name: name.clone(),
                    mutator: Mutator::Delete,
                });
            }
        }
    }
    (Some(own.uuid), steps, problems)
}

/// The transaction attaching the group where it is missing and detaching it where it is no
/// longer planned, and the targets that do not exist. Set mutations: sending one twice (the
/// cache not yet showing the first) changes nothing.
pub fn diff(observed: &Observed, g: &GroupPlan) -> (Option<Change>, Vec<String>) {
    let (Some(own), steps, problems) = steps(observed, g) else {
        return (None, Vec::new());
    };
    if steps.is_empty() {
        return (None, problems);
    }
    let mut txn = Transaction::new(DB);
    for s in &steps {
        txn.mutate(
            s.table,
            vec![Condition::uuid(s.uuid)],
            vec![Mutation::new(
                "load_balancer_group",
                s.mutator,
                Value::set([Atom::Uuid(own)]),
            )],
        );
    }
    txn.comment(&format!("vipflow: attach Load_Balancer_Group {}", g.name));
    let ops = txn.ops.len();
    let change = Change {
        owners: BTreeSet::new(),
        txn: Some(txn),
        ops,
    };
    (Some(change), problems)
}

/// Drift lines for `vipflow verify`: the group missing, not attached where planned, attached
/// where not planned; `!` lines for targets that do not exist.
pub fn describe(observed: &Observed, g: &GroupPlan) -> Vec<String> {
    let (own, steps, problems) = steps(observed, g);
    if own.is_none() {
        return vec![format!("+ Load_Balancer_Group {}: missing", g.name)];
    }
    let mut out: Vec<String> = steps
        .iter()
        .map(|s| match s.mutator {
            Mutator::Insert => format!(
                "~ Load_Balancer_Group {}: not attached to {} {}",
                g.name, s.table, s.name
            ),
            _ => format!(
                "~ Load_Balancer_Group {}: attached to {} {}, which is not a node's",
                g.name, s.table, s.name
            ),
        })
        .collect();
    out.extend(problems.into_iter().map(|p| format!("! {p}")));
    out
}
