//! The variables of vipflow's template rows ([`crate::plan::node_template`]), kept in each
//! chassis's `Chassis_Template_Var` row.
//!
//! A chassis's row is shared: OVN-Kubernetes keeps its NodePort variables there too. vipflow
//! reads and writes only the keys with its prefix (`vf_`), by mutating the `variables` map
//! (delete then insert of its own keys), never by replacing it. A Service's variables change
//! in the same transaction as its rows, so the row and the values it names come and go
//! together. The schema keeps one row per chassis: a missing one is created before the diffs
//! (`ensure`), in a transaction of its own, as vipflow's group is.

use super::diff::Pending;
use super::{CHASSIS_VARS, Change, DB, Observed, RowIndex};
use crate::plan::node_template::VAR_PREFIX;
use crate::plan::northbound::LbRow;
use crate::reconcile::northbound::lb_row::{map_of, str_of};
use ovsdb::{Atom, Condition, Mutation, Mutator, Row, Transaction, Uuid, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One chassis's row: its uuid and vipflow's variables in it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChassisVars {
    pub uuid: Uuid,
    pub vars: BTreeMap<String, String>,
}

/// The chassis's name and vipflow's variables of a `Chassis_Template_Var` row.
pub fn read(uuid: Uuid, row: &Row) -> Option<(String, ChassisVars)> {
    let chassis = str_of(row.get("chassis"))?;
    let mut vars = map_of(row.get("variables"));
    vars.retain(|k, _| k.starts_with(VAR_PREFIX));
    Some((chassis, ChassisVars { uuid, vars }))
}

/// The variables a template row's VIPs name (`^vf_…` backends).
pub fn named_in<'a>(vips: impl Iterator<Item = (&'a str, &'a str)>) -> Vec<String> {
    let mut names: Vec<String> = vips
        .flat_map(|(_, backends)| backends.split(','))
        .filter_map(|b| b.strip_prefix('^'))
        .filter(|n| n.starts_with(VAR_PREFIX))
        .map(str::to_owned)
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// One line per variable of vipflow's whose value on a chassis differs from what `rows` plan
/// (`vipflow verify`): `+` planned and absent, `~` another value, `-` set and not planned.
pub fn describe(observed: &Observed, rows: &[LbRow]) -> Vec<String> {
    let desired: BTreeMap<(&str, &str), &str> = rows
        .iter()
        .flat_map(|r| &r.template_vars)
        .map(|v| ((v.chassis.as_str(), v.name.as_str()), v.value.as_str()))
        .collect();
    let mut have: BTreeMap<(&str, &str), &str> = BTreeMap::new();
    for (name, chassis) in observed.chassis.variables() {
        for c in chassis {
            if let Some(v) = observed.chassis.get(c).and_then(|cv| cv.vars.get(name)) {
                have.insert((c.as_str(), name.as_str()), v.as_str());
            }
        }
    }
    let mut out = Vec::new();
    for (&(c, n), &want) in &desired {
        match have.get(&(c, n)) {
            None => out.push(format!(
                "+ Chassis_Template_Var {c}: {n} missing (want {want:?})"
            )),
            Some(&is) if is != want => out.push(format!(
                "~ Chassis_Template_Var {c}: {n} is {is:?}, want {want:?}"
            )),
            Some(_) => {}
        }
    }
    for (&(c, n), &is) in &have {
        if !desired.contains_key(&(c, n)) {
            out.push(format!(
                "- Chassis_Template_Var {c}: {n} is {is:?}, not planned"
            ));
        }
    }
    out
}

/// One chassis row's changes: keys to delete, then pairs to insert.
type RowOps<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>);

/// Add to `p` what makes one Service's variables as `want` plans them: `had` names the
/// variables its rows in the database use (some may no longer be planned). A chassis
/// without a row is a problem (it is created before the diff; it went meanwhile).
pub fn diff(
    observed: &Observed,
    want: &[&LbRow],
    had: &BTreeSet<&str>,
    p: &mut Pending,
    problems: &mut Vec<String>,
) {
    let desired: BTreeMap<(&str, &str), &str> = want
        .iter()
        .flat_map(|r| &r.template_vars)
        .map(|v| ((v.chassis.as_str(), v.name.as_str()), v.value.as_str()))
        .collect();
    let names: BTreeSet<&str> = had
        .iter()
        .copied()
        .chain(desired.keys().map(|(_, n)| *n))
        .collect();
    let mut ops: BTreeMap<&str, RowOps<'_>> = BTreeMap::new();
    let chassis: BTreeSet<&str> = names
        .iter()
        .flat_map(|n| observed.chassis.holding(n))
        .map(String::as_str)
        .chain(desired.keys().map(|(c, _)| *c))
        .collect();
    for c in chassis {
        let have = observed.chassis.get(c).map(|cv| &cv.vars);
        for n in &names {
            let was = have.and_then(|h| h.get(*n)).map(String::as_str);
            let now = desired.get(&(c, *n)).copied();
            if was == now {
                continue;
            }
            let e = ops.entry(c).or_default();
            if was.is_some() {
                e.0.push(n);
            }
            if let Some(v) = now {
                e.1.push((n, v));
            }
        }
    }
    for (c, (delete, insert)) in ops {
        let Some(cv) = observed.chassis.get(c) else {
            problems.push(format!(
                "no Chassis_Template_Var row for chassis {c}: its template values wait"
            ));
            continue;
        };
        let mut mutations = Vec::with_capacity(2);
        if !delete.is_empty() {
            mutations.push(delete_vars(&delete));
        }
        if !insert.is_empty() {
            mutations.push(Mutation::new(
                "variables",
                Mutator::Insert,
                Value::map(insert),
            ));
        }
        p.body
            .mutate(CHASSIS_VARS, vec![Condition::uuid(cv.uuid)], mutations);
    }
}

/// The mutation that deletes variables `names` from a chassis row.
fn delete_vars(names: &[&str]) -> Mutation {
    Mutation::new(
        "variables",
        Mutator::Delete,
        Value::Set(names.iter().map(|n| Atom::string(*n)).collect()),
    )
}

/// After a full diff: delete vipflow's variables that no planned row names (left by rows
/// deleted outside vipflow, or by a writer stopped between versions), one mutation per
/// chassis row holding any.
pub fn sweep(observed: &Observed, rows: &RowIndex) -> Option<Change> {
    // No variable of vipflow's anywhere (per-node rows): nothing to read the plan for.
    observed.chassis.variables().next()?;
    let planned: BTreeSet<&str> = rows
        .values()
        .flat_map(|v| v.iter())
        .flat_map(|r| &r.template_vars)
        .map(|v| v.name.as_str())
        .collect();
    let mut per_chassis: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (name, chassis) in observed.chassis.variables() {
        if planned.contains(name.as_str()) {
            continue;
        }
        for c in chassis {
            per_chassis.entry(c).or_default().push(name);
        }
    }
    if per_chassis.is_empty() {
        return None;
    }
    let mut txn = Transaction::new(DB);
    for (c, names) in &per_chassis {
        let Some(cv) = observed.chassis.get(c) else {
            continue;
        };
        txn.mutate(
            CHASSIS_VARS,
            vec![Condition::uuid(cv.uuid)],
            vec![delete_vars(names)],
        );
    }
    txn.comment("vipflow: template values no row names");
    let ops = txn.ops.len();
    Some(Change {
        owners: BTreeSet::new(),
        txn: Some(txn),
        ops,
    })
}

/// The chassis rows as the database has them: each one's vipflow variables, and where each
/// variable is set, kept from the table's monitor events.
#[derive(Debug, Clone, Default)]
pub struct ChassisRows {
    by_name: HashMap<String, ChassisVars>,
    /// Each row's chassis, so that an event (which names the row) finds it at once.
    by_uuid: HashMap<Uuid, String>,
    /// The chassis holding each of vipflow's variables.
    holding: HashMap<String, BTreeSet<String>>,
}

impl ChassisRows {
    pub fn get(&self, chassis: &str) -> Option<&ChassisVars> {
        self.by_name.get(chassis)
    }

    pub fn contains(&self, chassis: &str) -> bool {
        self.by_name.contains_key(chassis)
    }

    /// The chassis on which variable `name` is set.
    pub fn holding(&self, name: &str) -> impl Iterator<Item = &String> {
        self.holding.get(name).into_iter().flatten()
    }

    /// Every variable of vipflow's set on some chassis, with the chassis holding it.
    pub fn variables(&self) -> impl Iterator<Item = (&String, &BTreeSet<String>)> {
        self.holding.iter()
    }

    /// A row vipflow just created (before the monitor shows it): no variables yet.
    pub fn created(&mut self, chassis: String, uuid: Uuid) {
        if !self.by_name.contains_key(&chassis) {
            self.by_uuid.insert(uuid, chassis.clone());
            self.by_name.insert(
                chassis,
                ChassisVars {
                    uuid,
                    vars: BTreeMap::new(),
                },
            );
        }
    }

    /// Keep the rows current from one monitor event of their table (`new`: the row as it is
    /// now; `None`: deleted); returns the names of vipflow's variables whose values changed.
    pub fn apply(&mut self, uuid: Uuid, new: Option<&Row>) -> BTreeSet<String> {
        let before = self
            .by_uuid
            .remove(&uuid)
            .and_then(|c| self.by_name.remove(&c).map(|cv| (c, cv)));
        let after = new.and_then(|row| read(uuid, row));
        let mut changed = BTreeSet::new();
        if let Some((c, cv)) = &before {
            for (n, v) in &cv.vars {
                let now = after
                    .as_ref()
                    .filter(|(ac, _)| ac == c)
                    .and_then(|(_, a)| a.vars.get(n));
                if now != Some(v) {
                    changed.insert(n.clone());
                }
                if let Some(set) = self.holding.get_mut(n) {
                    set.remove(c);
                    if set.is_empty() {
                        self.holding.remove(n);
                    }
                }
            }
        }
        if let Some((c, cv)) = after {
            for (n, v) in &cv.vars {
                let was = before
                    .as_ref()
                    .filter(|(bc, _)| *bc == c)
                    .and_then(|(_, b)| b.vars.get(n));
                if was != Some(v) {
                    changed.insert(n.clone());
                }
                self.holding.entry(n.clone()).or_default().insert(c.clone());
            }
            self.by_uuid.insert(uuid, c.clone());
            self.by_name.insert(c, cv);
        }
        changed
    }
}
