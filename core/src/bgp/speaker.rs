//! What the node's FRR is told, without I/O: the node's BGP configuration (its peers and BFD
//! profiles, [`crate::bgp::frr_config`]) and the prefixes it originates. The agent's BGP task
//! feeds it what the objects and the plan want and what FRR said, and does what it asks (read
//! FRR's own state back, or apply one `vtysh -f` batch).
//!
//! - **Configuration first.** The prefixes live in the BGP instance the configuration opens:
//!   nothing about them is read or written before FRR has the configuration. A configuration
//!   that changes goes in as the difference ([`config_batch`]); one whose AS changes takes the
//!   instance and its networks with it, so what FRR originates is read again. An agent that
//!   starts does not know what an earlier one gave FRR: it applies its configuration whole,
//!   which changes nothing where FRR already holds it.
//! - **Read before writing.** FRR outlives the agent. A speaker that starts knows nothing of
//!   what FRR originates, so it reads it back; and it writes nothing before the plan says what
//!   it wants (the dataplane gate opens once the bridges carry the first plan), so an agent
//!   restart withdraws nothing that is still wanted.
//! - **One batch per change, at once.** A change goes out as one batch as soon as it is known
//!   (no debounce); changes that come while a batch is in flight go out together in the next.
//! - **Withdrawals first** within a batch ([`crate::plan::bgp::frr_batch`]).
//! - **A failed batch is read back.** `vtysh -f` goes on past a line FRR refuses and then
//!   fails the call, so after a failure what FRR holds is unknown: the configuration is applied
//!   whole again, the prefixes read again and the difference written again.

use crate::bgp::frr_config::{bgp_asn, config_batch};
use crate::plan::bgp::frr_batch;
use ipnet::IpNet;
use std::collections::BTreeSet;

/// What the caller is to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpeakerAction {
    /// Read what FRR originates (`show bgp ... json`) and tell [`Speaker::read`].
    ReadBack,
    /// Apply this batch of configuration (peers, BFD profiles) and tell [`Speaker::applied`]
    /// or [`Speaker::failed`].
    Configure(String),
    /// Apply this batch of `network` lines and tell [`Speaker::applied`] or
    /// [`Speaker::failed`].
    Apply(String),
}

/// The speaker's state, as the status shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpeakerPhase {
    /// Neither the configuration nor the plan is known yet.
    Waiting,
    /// Waiting for FRR's own answer.
    Reading,
    /// A batch is in flight, or one is due.
    Writing,
    /// FRR holds the configuration and the prefixes wanted.
    Current,
}

/// The batch in flight, and what FRR holds once it is taken.
#[derive(Debug, Clone)]
enum InFlight {
    Config(Option<String>),
    Networks(BTreeSet<IpNet>),
}

#[derive(Debug, Clone, Default)]
pub struct Speaker {
    /// The node's configuration as the objects make it (`Some(None)`: no peer selects this
    /// node); `None` until told.
    config_wanted: Option<Option<String>>,
    /// The configuration FRR was last given; `None` when unknown (at the start, or after a
    /// failure).
    config_held: Option<Option<String>>,
    /// What the plan wants FRR to originate; `None` until told.
    wanted: Option<BTreeSet<IpNet>>,
    /// What FRR originates, as last read or written; `None` until read.
    held: Option<BTreeSet<IpNet>>,
    in_flight: Option<InFlight>,
    /// A read-back is asked for and not answered yet.
    reading: bool,
}

impl Speaker {
    /// A speaker that knows nothing of FRR, the configuration or the plan yet.
    pub fn new() -> Speaker {
        Speaker::default()
    }

    /// The objects make this node's configuration `config` (`None`: no peer selects it, and it
    /// speaks no BGP).
    pub fn configure(&mut self, config: Option<String>) -> Option<SpeakerAction> {
        self.config_wanted = Some(config);
        self.next()
    }

    /// The plan wants FRR to originate `prefixes`.
    pub fn want(&mut self, prefixes: BTreeSet<IpNet>) -> Option<SpeakerAction> {
        self.wanted = Some(prefixes);
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
        match self.in_flight.take() {
            Some(InFlight::Config(c)) => {
                let before = self.config_held.clone().flatten();
                if before.as_deref().and_then(bgp_asn) != c.as_deref().and_then(bgp_asn) {
                    // The instance changed (or came, or went): its networks with it.
                    self.held = None;
                }
                self.config_held = Some(c);
            }
            Some(InFlight::Networks(n)) => self.held = Some(n),
            None => {}
        }
        self.next()
    }

    /// The batch in flight failed (or could not be sent): what FRR holds is unknown.
    pub fn failed(&mut self) -> Option<SpeakerAction> {
        if let Some(InFlight::Config(_)) = self.in_flight.take() {
            self.config_held = None;
        }
        self.held = None;
        self.next()
    }

    /// FRR lost what it was given (a daemon restarted without it): the configuration goes in
    /// whole again, then every prefix wanted.
    pub fn lost(&mut self) -> Option<SpeakerAction> {
        if self.in_flight.is_none() {
            self.config_held = None;
            self.held = None;
        }
        self.next()
    }

    /// What FRR originates as far as this speaker knows; `None` before the first read-back.
    pub fn held(&self) -> Option<&BTreeSet<IpNet>> {
        self.held.as_ref()
    }

    /// Whether what FRR originates is known: read back, or nothing to read (no peer selects
    /// the node, so it has no BGP instance of vipflow's).
    pub fn knows_frr(&self) -> bool {
        self.held.is_some() || matches!(self.config_held, Some(None))
    }

    /// The AS of the BGP instance FRR was given, when it was given one.
    pub fn asn(&self) -> Option<u32> {
        self.config_held
            .clone()
            .flatten()
            .as_deref()
            .and_then(bgp_asn)
    }

    pub fn phase(&self) -> SpeakerPhase {
        let Some(config) = &self.config_wanted else {
            return SpeakerPhase::Waiting;
        };
        if self.in_flight.is_some() || self.config_held.as_ref() != Some(config) {
            return SpeakerPhase::Writing;
        }
        if config.is_none() {
            return SpeakerPhase::Current;
        }
        match (&self.held, &self.wanted) {
            (None, _) => SpeakerPhase::Reading,
            (Some(_), None) => SpeakerPhase::Waiting,
            (Some(h), Some(w)) if h == w => SpeakerPhase::Current,
            _ => SpeakerPhase::Writing,
        }
    }

    /// The next action: nothing while one is in flight or while FRR holds what is wanted.
    fn next(&mut self) -> Option<SpeakerAction> {
        if self.reading || self.in_flight.is_some() {
            return None;
        }
        let wanted_config = self.config_wanted.clone()?;
        if self.config_held.as_ref() != Some(&wanted_config) {
            let before = self.config_held.clone().flatten();
            if self.config_held.is_none() && wanted_config.is_none() {
                // Nothing to configure, and nothing known of what an earlier agent left:
                // FRR is left as it is.
                self.config_held = Some(None);
            } else {
                match config_batch(before.as_deref(), wanted_config.as_deref()) {
                    Some(batch) => {
                        self.in_flight = Some(InFlight::Config(wanted_config));
                        return Some(SpeakerAction::Configure(batch));
                    }
                    None => self.config_held = Some(wanted_config),
                }
            }
        }
        let asn = self.asn()?;
        let Some(held) = &self.held else {
            self.reading = true;
            return Some(SpeakerAction::ReadBack);
        };
        let wanted = self.wanted.as_ref()?;
        let batch = frr_batch(asn, held, wanted)?;
        self.in_flight = Some(InFlight::Networks(wanted.clone()));
        Some(SpeakerAction::Apply(batch))
    }
}

#[cfg(test)]
#[path = "speaker_tests.rs"]
mod tests;
