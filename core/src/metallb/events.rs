//! Kubernetes Events on MetalLB's objects: a Warning on each object with a field vipflow does
//! not carry out, said once while it holds. This module holds what is said, and what is due as
//! a difference from what was said ([`Ledger`]); the agent crate's `metallb_events` says it,
//! from the elected agent only.
//!
//! - One statement per problem of kind [`ProblemKind::Unsupported`] (the object is used without
//!   the field: [`FIELD_NOT_SUPPORTED`]) or [`ProblemKind::UnsupportedObject`] (the object is
//!   left out: [`OBJECT_NOT_SUPPORTED`]) about a named MetalLB object ([`Subject::Object`]).
//!   Its note is the problem's reason, the words `vipflow plan`, the log and `/status` use: it
//!   names the field and says what vipflow did.
//! - MetalLB's CRDs give these kinds no conditions in their status, and vipflow writes no
//!   MetalLB object: the Event is what is put on the object itself.
//! - Once across restarts and leader changes: each Event carries its statement's digest, and
//!   an instance that starts to lead learns what was said from the API server before it says
//!   anything ([`Ledger::learned`]).

use crate::model::{ObjectRef, Problem, ProblemKind, Subject};
use std::collections::{BTreeMap, BTreeSet};
use xxhash_rust::xxh3::Xxh3;

/// The reason of an Event on an object used without a field vipflow does not carry out.
pub const FIELD_NOT_SUPPORTED: &str = "FieldNotSupported";
/// The reason of an Event on an object left out for a field (or a kind) vipflow does not carry
/// out.
pub const OBJECT_NOT_SUPPORTED: &str = "ObjectNotSupported";

/// One statement about one MetalLB object (a Warning).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Statement {
    pub object: ObjectRef,
    /// [`FIELD_NOT_SUPPORTED`] or [`OBJECT_NOT_SUPPORTED`].
    pub reason: &'static str,
    pub note: String,
}

impl Statement {
    /// Who the statement is, as the Events keep it and the next leader reads it back: a
    /// 64-bit digest of its object, reason and note. Stable across builds and Rust versions
    /// (xxh3 of the fields, each with its length).
    pub fn digest(&self) -> u64 {
        let o = &self.object;
        let mut h = Xxh3::new();
        for f in [
            "metallb",
            &o.api_version,
            &o.kind,
            o.namespace.as_deref().unwrap_or_default(),
            &o.name,
            o.uid.as_deref().unwrap_or_default(),
            self.reason,
            &self.note,
        ] {
            h.update(&(f.len() as u64).to_le_bytes());
            h.update(f.as_bytes());
        }
        h.digest()
    }
}

/// What to say about MetalLB's objects, from a snapshot's `problems`: one statement for each
/// field (or kind) vipflow does not carry out on a named MetalLB object.
pub fn statements(problems: &[Problem]) -> BTreeSet<Statement> {
    problems
        .iter()
        .filter_map(|p| {
            let Subject::Object(object) = &p.subject else {
                return None;
            };
            let reason = match p.kind {
                ProblemKind::Unsupported => FIELD_NOT_SUPPORTED,
                ProblemKind::UnsupportedObject => OBJECT_NOT_SUPPORTED,
                _ => return None,
            };
            super::is_metallb(&object.api_version).then(|| Statement {
                object: (**object).clone(),
                reason,
                note: p.reason.clone(),
            })
        })
        .collect()
}

/// A statement to say, in its turn: a write tried again keeps its turn (an Event named from
/// it is not made twice); a statement that stops holding and comes back gets a new one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub digest: u64,
    pub turn: u64,
    pub statement: Statement,
}

/// What was said that still holds, and what is due: each statement is said once while it
/// holds, and again only after it stopped holding and came back.
#[derive(Debug, Default)]
pub struct Ledger {
    /// The digests of the statements said (or learned to have been said) that still hold.
    said: BTreeSet<u64>,
    /// What holds and was not said yet, by digest, with its turn.
    due: BTreeMap<u64, (u64, Statement)>,
    next_turn: u64,
}

impl Ledger {
    /// The digests of statements an earlier instance said (read back from the API server):
    /// taken as said while they hold. Given before the first [`Ledger::update`]; one that does
    /// not hold then is forgotten.
    pub fn learned(&mut self, digests: impl IntoIterator<Item = u64>) {
        self.said.extend(digests);
    }

    /// The statements that hold `now`: what was said and does not hold is forgotten (said
    /// again if it comes back), what holds and was not said is due.
    pub fn update(&mut self, now: BTreeSet<Statement>) {
        let now: BTreeMap<u64, Statement> = now.into_iter().map(|s| (s.digest(), s)).collect();
        self.said.retain(|d| now.contains_key(d));
        self.due.retain(|d, _| now.contains_key(d));
        for (digest, statement) in now {
            if self.said.contains(&digest) || self.due.contains_key(&digest) {
                continue;
            }
            let turn = self.next_turn;
            self.next_turn += 1;
            self.due.insert(digest, (turn, statement));
        }
    }

    /// What is due, in the order of the statements' digests.
    pub fn due(&self) -> Vec<Due> {
        self.due
            .iter()
            .map(|(digest, (turn, statement))| Due {
                digest: *digest,
                turn: *turn,
                statement: statement.clone(),
            })
            .collect()
    }

    /// The statement known by `digest` was said: it is not due again while it holds.
    pub fn said(&mut self, digest: u64) {
        if self.due.remove(&digest).is_some() {
            self.said.insert(digest);
        }
    }
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
