//! The writer's sans-IO core: the fence of a writer session and the [`Session`], which turns
//! monitor events and a plan into transactions and learns their outcome.

use crate::keys::WRITER_KEY;
use crate::model::ServiceKey;
use crate::reconcile::northbound::DB;
use crate::reconcile::northbound::DesiredRows;
use crate::reconcile::northbound::NB_GLOBAL;
use crate::reconcile::northbound::diff::Change;
use crate::reconcile::northbound::diff::all_owners;
use crate::reconcile::northbound::diff::diff;
use crate::reconcile::northbound::diff::diff_exclude;
use crate::reconcile::northbound::diff::diff_some;
use crate::reconcile::northbound::group;
use crate::reconcile::northbound::observed::Observed;
use crate::reconcile::northbound::observed::Touched;
use crate::reconcile::northbound::template_vars;
use ovsdb::Cache;
use ovsdb::Condition;
use ovsdb::Event;
use ovsdb::Operation;
use ovsdb::Transaction;
use ovsdb::Uuid;
use ovsdb::Value;
use ovsdb::txn::WaitUntil;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
/// The writer fence: the transaction fails unless `token` is still the writer token in
/// `NB_Global`. Put first in every transaction of a session.
pub fn fence(token: &str) -> Operation {
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

/// A fresh writer token for a session.
pub fn new_token() -> String {
    Uuid::new_v4().to_string()
}

/// The reconciler's state for one connection, sans I/O: `run` feeds it monitor events and
/// plans and sends the transactions it returns (the benchmark drives it the same way).
pub struct Session {
    pub observed: Observed,
    /// Changes seen by the monitor and not yet diffed.
    pub touched: Touched,
    /// The handover whose rows the database is known to hold.
    pub applied: Option<u64>,
    /// The first sync of the connection: everything, batched.
    pub first: bool,
    /// The next diff covers every Service (after a failure, a skipped generation, or a
    /// switch/router/group appearing or going).
    pub full: bool,
    /// `exclude_ips` must be re-diffed (a switch changed, or the first sync).
    pub exclude_due: bool,
    /// The pool ranges `exclude_ips` was last diffed for.
    pub last_pools: Arc<Vec<(std::net::Ipv4Addr, std::net::Ipv4Addr)>>,
    /// This session's writer token (`take_over`); `None`: no fence (tests of the diff).
    pub token: Option<String>,
    pub attach_problems: Vec<String>,
    pub exclude_problems: Vec<String>,
    pub group_problems: Vec<String>,
}

impl Session {
    /// Start from the monitor's first snapshot, taken after `take_over` with `token`.
    pub fn new(observed: Observed, token: Option<String>) -> Self {
        Session {
            observed,
            touched: Touched::default(),
            applied: None,
            first: true,
            full: true,
            exclude_due: true,
            last_pools: Arc::default(),
            token,
            attach_problems: Vec::new(),
            exclude_problems: Vec::new(),
            group_problems: Vec::new(),
        }
    }

    /// Start over from a new monitor's snapshot (after `send` resubscribed): the next diff
    /// covers everything, and finds nothing to do unless someone else wrote meanwhile.
    pub fn resubscribed(&mut self, observed: Observed) {
        self.observed = observed;
        self.touched = Touched::default();
        self.full = true;
        self.exclude_due = true;
    }

    /// The next diff covers every Service (after a new monitor's snapshot, a failure, or a
    /// switch, router or group that came or went).
    pub fn whole_diff_due(&self) -> bool {
        self.full
    }

    /// What the database holds, as far as the events applied so far tell.
    pub fn observed(&self) -> &Observed {
        &self.observed
    }

    /// Apply `events` in order, and re-read switches, routers and groups from `cache` if one
    /// changed. The caller owns the monitor and its cache (`absorb_queued` drains one).
    pub fn absorb(&mut self, events: impl IntoIterator<Item = Event>, cache: &Cache) {
        for ev in events {
            self.observed.apply(&ev, &mut self.touched);
        }
        if self.touched.holders {
            self.touched.holders = false;
            if self.observed.refresh_holders(cache, &mut self.touched) {
                self.full = true;
            }
            self.exclude_due = true;
        }
    }

    /// The transactions that bring the database to `plan`, given what changed since the last
    /// sync.
    pub fn changes(&mut self, plan: &DesiredRows) -> Vec<Change> {
        let mut changes = Vec::new();
        self.changes_into(plan, &mut |c| changes.push(c));
        changes
    }

    /// [`Session::changes`], each handed to `sink` as soon as it is complete.
    pub fn changes_into(&mut self, plan: &DesiredRows, sink: &mut dyn FnMut(Change)) {
        if self.first {
            let mut sync = self.first_sync(plan);
            while self.first_sync_next(plan, &mut sync, sink) {}
            return;
        }
        let new_plan = self.applied != Some(plan.step);
        let follows = self.applied.is_some_and(|g| g + 1 == plan.step);
        let delta = plan.delta.as_ref().filter(|_| follows);
        let whole = self.full || (new_plan && delta.is_none());
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
        // vipflow's groups go where they belong before rows join them (make before break).
        self.groups_into(plan, sink);
        if owners.as_ref().is_none_or(|o| !o.is_empty()) {
            let p = diff(&self.observed, &plan.rows, owners.as_ref(), false, sink);
            if whole {
                self.attach_problems = p;
            } else {
                self.attach_problems.extend(p);
                self.attach_problems.sort();
                self.attach_problems.dedup();
            }
        }
        let vips_changed = new_plan && delta.is_none_or(|d| d.vips);
        if whole {
            template_vars::sweep(&self.observed, &plan.rows)
                .into_iter()
                .for_each(&mut *sink);
        }
        self.holders_into(plan, whole || vips_changed, sink);
    }

    /// Start a first sync: every Service planned or observed, diffed a batch at a time by
    /// [`Session::first_sync_next`], so that only the batches on the wire are in memory.
    pub fn first_sync(&mut self, plan: &DesiredRows) -> FirstSync {
        self.touched.owners.clear();
        FirstSync {
            owners: all_owners(&self.observed, &plan.rows),
            next: 0,
            problems: Vec::new(),
        }
    }

    /// The next batch of a first sync to `sink`; after the last, the group's and
    /// `exclude_ips`' changes, and `false`.
    pub fn first_sync_next(
        &mut self,
        plan: &DesiredRows,
        sync: &mut FirstSync,
        sink: &mut dyn FnMut(Change),
    ) -> bool {
        if sync.next == 0 {
            self.groups_into(plan, sink);
        }
        let mut rest = sync.owners.get(sync.next..).unwrap_or(&[]).iter();
        let more = diff_some(
            &self.observed,
            &plan.rows,
            &mut rest,
            true,
            &mut sync.problems,
            sink,
        );
        sync.next = sync.owners.len() - rest.len();
        if more {
            return true;
        }
        let mut problems = std::mem::take(&mut sync.problems);
        problems.sort();
        problems.dedup();
        self.attach_problems = problems;
        template_vars::sweep(&self.observed, &plan.rows)
            .into_iter()
            .for_each(&mut *sink);
        self.holders_into(plan, true, sink);
        false
    }

    /// The attachments of vipflow's groups (a few targets, one per node, checked on every pass
    /// as a holder event would be).
    fn groups_into(&mut self, plan: &DesiredRows, sink: &mut dyn FnMut(Change)) {
        self.group_problems.clear();
        for g in plan.groups.iter() {
            let (c, p) = group::diff(&self.observed, g);
            c.into_iter().for_each(&mut *sink);
            self.group_problems.extend(p);
        }
    }

    /// `exclude_ips`, when `vips_due` or a switch or the pools changed.
    fn holders_into(&mut self, plan: &DesiredRows, vips_due: bool, sink: &mut dyn FnMut(Change)) {
        let pools_changed = !Arc::ptr_eq(&self.last_pools, &plan.pool_ranges)
            && *self.last_pools != *plan.pool_ranges;
        if plan.exclude_ips && (vips_due || self.exclude_due || pools_changed) {
            let vips: BTreeSet<IpAddr> = plan.vips.iter().copied().collect();
            self.last_pools = plan.pool_ranges.clone();
            let (c, p) = diff_exclude(&self.observed, &vips, &plan.pool_ranges, self.first);
            c.into_iter().for_each(&mut *sink);
            self.exclude_problems = p;
        }
    }

    /// Record the outcome of writing `plan`'s changes.
    pub fn done(&mut self, plan: &DesiredRows, result: &Result<(), ovsdb::Error>) {
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

/// Where a first sync's diff stands ([`Session::first_sync`]).
pub struct FirstSync {
    /// Every Service planned or observed, in order.
    owners: Vec<ServiceKey>,
    /// The first of `owners` not diffed yet.
    next: usize,
    /// Attachment problems found so far.
    problems: Vec<String>,
}

/// `txn` with the writer fence of `token` first.
pub fn fenced(mut txn: Transaction, token: Option<&str>) -> Transaction {
    if let Some(t) = token {
        txn.ops.insert(0, fence(t));
    }
    txn
}

pub fn warn_failed(e: &ovsdb::Error, services: usize) {
    if e.outcome_unknown() {
        // Never resend blindly: the next diff starts from what the monitor shows.
        tracing::warn!(error = %e, services, "transaction outcome unknown; re-reading before any retry");
    } else {
        tracing::warn!(error = %e, services, "transaction failed; will retry");
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
