//! What is on the switch, as far as the reconciler knows, and the writes that change it.
//!
//! The state is the plan it came from (the planner's persistent key set, shared), what made
//! each flow concrete (the bridge's [`FlowMaker`] and port [`Roles`]), and the planned flows
//! the switch does not hold. No flow is held in typed form: a flow is made again from its key
//! when it is written or compared, which costs far less than keeping tens of thousands of
//! match and instruction trees. Nor is there an index from each flow's slot (table, priority,
//! match) back to its key: the few keys a match could come from are read off the match
//! ([`FlowKey::candidates`]) and made again to see which one it is, where an index cost as
//! much as the plan itself (a hash table of 80,000 keys is 4 MiB).
//!
//! - [`Applied::delta`]: the writes for a set of changed keys (a new plan, a new gateway
//!   router MAC), in proportion to the change; [`Applied::commit`] records them.
//! - [`FullSync`]: the writes that make what was read from the switch equal to a plan, fed one
//!   flow at a time so the table read is never held whole.

use super::state::{DesiredFlows, FlowBody, FlowId, Roles};
use crate::plan::flows::{FlowKey, FlowMaker};
use crate::plan::service_index::FlowIndex;
use openflow::multipart::FlowStats;
use openflow::{FlowMod, Message};
use std::collections::{BTreeMap, HashMap};

/// What makes a planned flow concrete: the plan's maker and the bridge's port roles.
#[derive(Debug, Clone)]
pub struct Making {
    pub maker: FlowMaker,
    pub roles: Roles,
}

impl Making {
    /// The flow `key` names, with real port numbers, or why it cannot be written now.
    pub fn resolve(&self, key: &FlowKey) -> Result<(FlowId, FlowBody), String> {
        self.roles.resolve(&self.maker.flow(key))
    }

    /// The ADD that writes the flow `key` names (`None` when it cannot be resolved).
    fn add(&self, key: &FlowKey) -> Option<Message> {
        let (id, body) = self.resolve(key).ok()?;
        Some(add(id, body))
    }

    /// Whether `other` makes every key into the same flow.
    fn same(&self, other: &Making) -> bool {
        self.maker.same(&other.maker) && self.roles == other.roles
    }
}

/// One write to the switch, named so that it costs a few bytes until it is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowOp {
    /// Write planned flow `key` (an ADD: it replaces whatever holds its slot).
    Add(FlowKey),
    /// Delete the flow of `key` as it was applied.
    Remove(FlowKey),
    /// Delete exactly this flow, carrying this cookie (found on the switch, not planned).
    /// Boxed: a full sync holds an op per planned flow, nearly all of them adds, and each op
    /// is as large as its largest variant.
    Delete(Box<(FlowId, u64)>),
}

fn delete(id: &FlowId, cookie: u64) -> Message {
    // Exact cookie: of the flows with this match, only ours can be deleted.
    Message::FlowMod(FlowMod::delete_strict(
        id.0,
        id.1,
        id.2.clone(),
        cookie,
        u64::MAX,
    ))
}

fn add(id: FlowId, body: FlowBody) -> Message {
    Message::FlowMod(FlowMod::add(
        id.0,
        id.1,
        body.cookie,
        id.2,
        body.instructions,
    ))
}

/// The keys in one plan and not the other.
fn changed_keys(before: &FlowIndex, after: &FlowIndex) -> Vec<FlowKey> {
    use imbl::ordset::DiffItem;
    before
        .diff(after)
        .map(|d| match d {
            DiffItem::Add(k) | DiffItem::Remove(k) => *k,
        })
        .collect()
}

/// What is on the switch, and the plan it came from.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    /// The plan (shared with the planner's index).
    planned: FlowIndex,
    /// `None`: nothing of a plan is known to be on the switch.
    making: Option<Making>,
    /// Planned flows not on the switch, with why (a missing port, rejected by the switch).
    /// Every other planned flow is.
    skipped: BTreeMap<FlowKey, String>,
    /// The plan generation this is, as planned; `None` when unknown or when a write left
    /// some of its flows out ([`Applied::left_out`]).
    pub generation: Option<u64>,
}

impl Applied {
    /// The state once plan `flows` is fully on the switch (flows that cannot be resolved
    /// now left out, with why).
    pub fn from_plan(flows: &FlowIndex, making: Making, generation: u64) -> Applied {
        let mut a = Applied {
            planned: flows.clone(),
            generation: Some(generation),
            ..Applied::default()
        };
        // With every port role and the bridge MAC known, every flow resolves: no need to make
        // each one to find out (it is a tenth of a full sync's time).
        if !making.roles.complete() {
            for key in flows {
                if let Err(why) = making.resolve(key) {
                    a.skipped.insert(*key, why);
                }
            }
        }
        a.making = Some(making);
        a
    }

    /// Planned flow `key` as it is on the switch, if it is.
    fn on_switch(&self, key: &FlowKey) -> Option<(FlowId, FlowBody)> {
        if !self.planned.contains(key) || self.skipped.contains_key(key) {
            return None;
        }
        self.making.as_ref()?.resolve(key).ok()
    }

    /// The flow of ours in slot `id`, if there is one: its key and content.
    pub fn at(&self, id: &FlowId) -> Option<(FlowKey, FlowBody)> {
        FlowKey::candidates(&id.2).into_iter().find_map(|key| {
            let (slot, body) = self.on_switch(&key)?;
            (slot == *id).then_some((key, body))
        })
    }

    /// How many flows of ours are on the switch.
    pub fn len(&self) -> usize {
        match self.making {
            Some(_) => self.planned.len().saturating_sub(self.skipped.len()),
            None => 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The plan this state came from.
    pub fn planned(&self) -> &FlowIndex {
        &self.planned
    }

    /// Whether `making` makes the same flows as the one this state was made with: then only
    /// the keys that changed need writing.
    pub fn made_as(&self, making: &Making) -> bool {
        self.making.as_ref().is_some_and(|m| m.same(making))
    }

    /// The message for `op` as this state makes flows (`Add` of one of its keys, `Remove`
    /// of one, or a literal `Delete`).
    pub fn message(&self, op: &FlowOp) -> Option<Message> {
        match op {
            FlowOp::Add(key) => self.making.as_ref()?.add(key),
            FlowOp::Remove(key) => {
                let (id, body) = self.on_switch(key)?;
                Some(delete(&id, body.cookie))
            }
            FlowOp::Delete(d) => Some(delete(&d.0, d.1)),
        }
    }

    /// The keys a write of `plan`, made by `making`, must look at: the ones its delta names
    /// when it follows the plan this state is, flows made the same way; else the keys in which
    /// the two plans differ; with another `making`, every key of both.
    pub fn touched(&self, plan: &DesiredFlows, making: &Making) -> Vec<FlowKey> {
        let follows = plan
            .generation
            .checked_sub(1)
            .is_some_and(|g| self.generation == Some(g));
        let same_making = self.made_as(making);
        match &plan.delta {
            Some(d) if follows && same_making => d.touched.clone(),
            _ if same_making => changed_keys(&self.planned, &plan.flows),
            // A new gateway router MAC changes every flow into OVN: every key.
            _ => {
                let mut all: Vec<FlowKey> = self
                    .planned
                    .iter()
                    .chain(plan.flows.iter())
                    .copied()
                    .collect();
                all.sort_unstable();
                all.dedup();
                all
            }
        }
    }

    /// The last write left flows of its plan out on purpose (answers held back until OVN
    /// programmed their VIPs): this state is no generation's plan as planned. The next plan's
    /// delta counts from that plan and would not name what was left out, so the next write
    /// compares the two plans instead.
    pub fn left_out(&mut self) {
        self.generation = None;
    }

    /// The writes that take the switch from this state to plan `flows` made by `making`,
    /// looking only at the keys in `touched` (those added, removed or changed; with another
    /// `making`, every key of both plans).
    pub fn delta(
        &self,
        flows: &FlowIndex,
        making: Making,
        touched: impl IntoIterator<Item = FlowKey>,
    ) -> DeltaPlan {
        let mut d = DeltaPlan {
            planned: flows.clone(),
            ..DeltaPlan::default()
        };
        let mut adds = Vec::new();
        for key in touched {
            let old = self.on_switch(&key);
            let new = flows.contains(&key).then(|| making.resolve(&key));
            let outcome = match new {
                Some(Ok((id, body))) => {
                    let same = old.as_ref() == Some(&(id.clone(), body));
                    if !same {
                        if old.as_ref().is_some_and(|(o, _)| *o != id) {
                            d.ops.push(FlowOp::Remove(key));
                        }
                        adds.push(FlowOp::Add(key));
                    }
                    Landing::On
                }
                Some(Err(why)) => {
                    if old.is_some() {
                        d.ops.push(FlowOp::Remove(key));
                    }
                    Landing::Skipped(why)
                }
                None => {
                    if old.is_some() {
                        d.ops.push(FlowOp::Remove(key));
                    }
                    Landing::Gone
                }
            };
            d.changes.push((key, outcome));
        }
        // Deletes first: within the bundle order is kept.
        d.ops.extend(adds);
        d.making = Some(making);
        d
    }

    /// Record a delta the switch took; `rejected` are the indices of its ops the switch
    /// refused, with why (their flows are left out, and named).
    pub fn commit(&mut self, d: DeltaPlan, rejected: &[(usize, String)], generation: u64) {
        let refused: HashMap<FlowKey, &String> = rejected
            .iter()
            .filter_map(|(i, why)| match d.ops.get(*i) {
                Some(FlowOp::Add(k)) => Some((*k, why)),
                _ => None,
            })
            .collect();
        for (key, outcome) in d.changes {
            self.skipped.remove(&key);
            match outcome {
                Landing::On => {
                    if let Some(why) = refused.get(&key) {
                        self.skipped.insert(key, (*why).clone());
                    }
                }
                Landing::Skipped(why) => {
                    self.skipped.insert(key, why);
                }
                Landing::Gone => {}
            }
        }
        self.planned = d.planned;
        if d.making.is_some() {
            self.making = d.making;
        }
        self.generation = Some(generation);
    }

    /// After a full sync whose ops the switch partly refused: those flows are left out.
    pub fn refused(&mut self, ops: &[FlowOp], rejected: &[(usize, String)]) {
        for (i, why) in rejected {
            if let Some(FlowOp::Add(key)) = ops.get(*i) {
                self.skipped.insert(*key, why.clone());
            }
        }
    }

    /// Every flow of ours on the switch, made concrete (for checks and diagnostics: it costs
    /// the typed form of every flow).
    pub fn to_flow_set(&self) -> super::state::FlowSet {
        self.planned
            .iter()
            .filter_map(|k| self.on_switch(k))
            .collect()
    }

    /// `key: why` for every planned flow that is not on the switch, in text order.
    pub fn skipped_list(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .skipped
            .iter()
            .map(|(k, w)| format!("{k}: {w}"))
            .collect();
        v.sort();
        v
    }
}

/// Where a touched key's flow is once a delta lands.
#[derive(Debug)]
enum Landing {
    On,
    Skipped(String),
    Gone,
}

/// The writes for a change to some planned flows, and how [`Applied`] looks once they land.
#[derive(Debug, Default)]
pub struct DeltaPlan {
    /// Deletes, then adds.
    pub ops: Vec<FlowOp>,
    /// Each touched key and where it ends.
    changes: Vec<(FlowKey, Landing)>,
    planned: FlowIndex,
    making: Option<Making>,
}

impl DeltaPlan {
    /// The message for op `i`: an add as the new plan makes it, a remove as `before` had it.
    pub fn message(&self, i: usize, before: &Applied) -> Option<Message> {
        match self.ops.get(i)? {
            FlowOp::Add(key) => self.making.as_ref()?.add(key),
            op => before.message(op),
        }
    }
}

/// The writes that make the switch equal to `target`, from what a read of the switch finds,
/// fed one flow at a time ([`FullSync::observe`]).
pub struct FullSync<'a> {
    target: &'a Applied,
    /// The planned keys found on the switch.
    seen: Vec<FlowKey>,
    deletes: Vec<FlowOp>,
    rewrites: Vec<FlowOp>,
}

impl<'a> FullSync<'a> {
    pub fn new(target: &'a Applied) -> FullSync<'a> {
        FullSync {
            target,
            seen: Vec::new(),
            deletes: Vec::new(),
            rewrites: Vec::new(),
        }
    }

    /// One flow of ours as the switch has it.
    pub fn observe(&mut self, f: FlowStats) {
        let id = (f.table_id, f.priority, f.match_.normalized());
        match self.target.at(&id) {
            Some((key, want)) => {
                self.seen.push(key);
                if want.cookie != f.cookie || want.instructions != f.instructions {
                    self.rewrites.push(FlowOp::Add(key));
                }
            }
            None => self.deletes.push(FlowOp::Delete(Box::new((id, f.cookie)))),
        }
    }

    /// Deletes of what is not planned, then writes of what is missing or different; render
    /// each with [`Applied::message`] of the target.
    pub fn finish(self) -> Vec<FlowOp> {
        let FullSync {
            target,
            mut seen,
            mut deletes,
            rewrites,
        } = self;
        seen.sort_unstable();
        let missing = target
            .planned
            .iter()
            .filter(|k| !target.skipped.contains_key(k) && seen.binary_search(k).is_err());
        deletes.extend(rewrites);
        deletes.extend(missing.map(|k| FlowOp::Add(*k)));
        deletes
    }
}

#[cfg(test)]
#[path = "applied_tests.rs"]
mod tests;
