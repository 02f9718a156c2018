//! What the node's FRR is told about the prefixes it originates, without I/O: the agent's BGP
//! task feeds it what the plan wants and what FRR said, and does what it asks (read FRR's own
//! state back, or apply one `vtysh -f` batch).
//!
//! - **Read before writing.** FRR outlives the agent. A speaker that starts knows nothing of
//!   what FRR holds, so its first act is to read it back; it then writes only the difference,
//!   and an agent restart withdraws nothing that is still wanted.
//! - **One batch per change, at once.** A change goes out as one batch as soon as it is known
//!   (no debounce); changes that come while a batch is in flight go out together in the next.
//! - **Withdrawals first** within a batch ([`crate::plan::bgp::frr_batch`]).
//! - **A failed batch is read back.** `vtysh -f` goes on past a line FRR refuses and then
//!   fails the call, so after a failure what FRR holds is unknown: it is read again and the
//!   difference written again.

use crate::plan::bgp::frr_batch;
use ipnet::IpNet;
use std::collections::BTreeSet;

/// What the caller is to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpeakerAction {
    /// Read what FRR originates (`show bgp ... json`) and tell [`Speaker::read`].
    ReadBack,
    /// Apply this batch and tell [`Speaker::applied`] or [`Speaker::failed`].
    Apply(String),
}

/// The speaker's state, as the status shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpeakerPhase {
    /// Waiting for FRR's own answer.
    Reading,
    /// A batch is in flight.
    Writing,
    /// FRR holds what the plan wants.
    Current,
}

#[derive(Debug, Clone)]
pub struct Speaker {
    asn: u32,
    /// What the plan wants FRR to originate.
    wanted: BTreeSet<IpNet>,
    /// What FRR originates, as last read or written; `None` until read.
    held: Option<BTreeSet<IpNet>>,
    /// The set the batch in flight makes FRR hold.
    in_flight: Option<BTreeSet<IpNet>>,
    /// A read-back is asked for and not answered yet.
    reading: bool,
}

impl Speaker {
    /// A speaker for BGP instance `asn` that knows nothing of FRR yet: the first action is a
    /// read-back.
    pub fn new(asn: u32) -> Speaker {
        Speaker {
            asn,
            wanted: BTreeSet::new(),
            held: None,
            in_flight: None,
            reading: false,
        }
    }

    /// The plan wants FRR to originate `prefixes`.
    pub fn want(&mut self, prefixes: BTreeSet<IpNet>) -> Option<SpeakerAction> {
        self.wanted = prefixes;
        self.next()
    }

    /// FRR answered a read-back: it originates `prefixes`.
    pub fn read(&mut self, prefixes: BTreeSet<IpNet>) -> Option<SpeakerAction> {
        self.reading = false;
        self.held = Some(prefixes);
        self.next()
    }

    /// FRR took the batch in flight.
    pub fn applied(&mut self) -> Option<SpeakerAction> {
        if let Some(now) = self.in_flight.take() {
            self.held = Some(now);
        }
        self.next()
    }

    /// The batch in flight failed (or could not be sent): what FRR holds is read again.
    pub fn failed(&mut self) -> Option<SpeakerAction> {
        self.in_flight = None;
        self.held = None;
        self.next()
    }

    /// What FRR originates as far as this speaker knows; `None` before the first read-back.
    pub fn held(&self) -> Option<&BTreeSet<IpNet>> {
        self.held.as_ref()
    }

    pub fn phase(&self) -> SpeakerPhase {
        if self.held.is_none() {
            SpeakerPhase::Reading
        } else if self.in_flight.is_some() {
            SpeakerPhase::Writing
        } else if self.held.as_ref() == Some(&self.wanted) {
            SpeakerPhase::Current
        } else {
            SpeakerPhase::Writing
        }
    }

    /// The next action: nothing while one is in flight or while FRR holds what is wanted.
    fn next(&mut self) -> Option<SpeakerAction> {
        if self.reading || self.in_flight.is_some() {
            return None;
        }
        let Some(held) = &self.held else {
            self.reading = true;
            return Some(SpeakerAction::ReadBack);
        };
        let batch = frr_batch(self.asn, held, &self.wanted)?;
        self.in_flight = Some(self.wanted.clone());
        Some(SpeakerAction::Apply(batch))
    }
}

#[cfg(test)]
#[path = "speaker_tests.rs"]
mod tests;
