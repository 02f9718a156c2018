//! The decisions of leader election on a `coordination.k8s.io/v1` Lease, without I/O: when to
//! take, renew or leave the Lease, when leadership ends, and what to write. The agent's `leader`
//! reads and writes the Lease and drives a [`Candidate`] with what it saw and when.
//!
//! - **Expiry without trusting clocks**: another holder's `renewTime` is never compared with
//!   this node's clock (nodes' clocks differ); the candidate notes when it last saw the record
//!   change and takes the Lease only after the expiry of no change, measured locally.
//! - **Stepping down first**: a holder leads only while its last renewal is younger than
//!   `duration - 2 * renew_every`, a full `renew_every` before any candidate may take over
//!   (`duration - renew_every` after it last saw the record change).

use std::time::{Duration, Instant};

/// The fields of a Lease the election reads, as found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseRecord {
    /// `spec.holderIdentity`.
    pub holder: Option<String>,
    /// `spec.renewTime` as written: only compared with what was seen before.
    pub renew_time: Option<String>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// `spec.leaseDurationSeconds`.
    pub duration_seconds: Option<i32>,
    /// `spec.leaseTransitions`.
    pub transitions: Option<i32>,
}

/// What to write into the Lease's spec; `renewTime` is always the time of writing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// `holderIdentity`: this candidate, or none when it lets the Lease go.
    pub holder: Option<String>,
    /// `leaseDurationSeconds`, when holding (left as it is otherwise).
    pub duration_seconds: Option<i32>,
    /// When taking the Lease over: `acquireTime` is the time of writing and
    /// `leaseTransitions` this.
    pub transitions: Option<i32>,
}

/// What a round does with the Lease it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// There is none: create it, held by this candidate.
    Create(Write),
    /// Write it back with its resourceVersion: renew ours, or take it (free or expired).
    Replace(Write),
    /// Another holds it and it has not expired.
    Wait,
}

/// How a round ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoundOutcome {
    /// The write went through: this candidate holds the Lease now.
    Held,
    /// Another holds it: waited, or another wrote first (a conflict).
    NotHeld,
    /// The read or the write failed: nothing is known, the last renewal stands.
    Failed,
}

/// The election's settings a candidate decides with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseTerms {
    /// This candidate's identity, as written in `holderIdentity`.
    pub identity: String,
    /// A crashed holder is replaced within about this long.
    pub duration: Duration,
    /// How often the holder renews and candidates read the Lease.
    pub renew_every: Duration,
}

/// How often to renew and poll for a Lease `duration`: several renewals per duration, and a
/// release noticed quickly.
pub fn renew_every(duration: Duration) -> Duration {
    (duration / 8).clamp(Duration::from_millis(100), Duration::from_secs(2))
}

/// `leaseDurationSeconds` for `d`: whole seconds, at least one.
pub fn whole_seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

/// A record as a candidate compares it: holder, renewTime, resourceVersion.
type RecordSeen = (Option<String>, Option<String>, Option<String>);

/// One candidate's view of the Lease and of its own leadership.
#[derive(Debug, Clone)]
pub struct Candidate {
    terms: LeaseTerms,
    /// The record last seen, and when (this clock) it was first seen.
    observed: Option<(RecordSeen, Instant)>,
    /// When this candidate last wrote the Lease as its holder.
    last_renew: Option<Instant>,
}

impl Candidate {
    pub fn new(terms: LeaseTerms) -> Candidate {
        Candidate {
            terms,
            observed: None,
            last_renew: None,
        }
    }

    /// What to do with `lease` (`None`: there is none), read at `now`.
    pub fn decide(&mut self, now: Instant, lease: Option<&LeaseRecord>) -> Decision {
        let Some(lease) = lease else {
            return Decision::Create(self.hold(0, true));
        };
        let holder = lease.holder.clone().filter(|h| !h.is_empty());
        let seen = (
            holder.clone(),
            lease.renew_time.clone(),
            lease.resource_version.clone(),
        );
        let since = match &self.observed {
            Some((last, since)) if *last == seen => *since,
            _ => {
                self.observed = Some((seen, now));
                now
            }
        };
        let ours = holder.as_deref() == Some(self.terms.identity.as_str());
        let free = holder.is_none() || now.saturating_duration_since(since) >= self.expiry(lease);
        if !ours && !free {
            return Decision::Wait;
        }
        Decision::Replace(self.hold(lease.transitions.unwrap_or(0), !ours))
    }

    /// How long another holder's record must stay unchanged before the Lease is free: the
    /// longer of its duration and this election's, less the `renew_every` by which the holder
    /// stopped acting before that.
    pub fn expiry(&self, lease: &LeaseRecord) -> Duration {
        let written = Duration::from_secs(
            u64::try_from(lease.duration_seconds.unwrap_or(0).max(0)).unwrap_or(0),
        );
        written
            .max(self.terms.duration)
            .saturating_sub(self.terms.renew_every)
    }

    /// Hold the Lease: renew, or take it (`acquire`: one more transition than `transitions`).
    fn hold(&self, transitions: i32, acquire: bool) -> Write {
        Write {
            holder: Some(self.terms.identity.clone()),
            duration_seconds: Some(whole_seconds(self.terms.duration)),
            transitions: acquire.then(|| transitions.saturating_add(1)),
        }
    }

    /// Take in how the round ended, at `now`.
    pub fn outcome(&mut self, now: Instant, outcome: RoundOutcome) {
        match outcome {
            RoundOutcome::Held => self.last_renew = Some(now),
            RoundOutcome::NotHeld => self.last_renew = None,
            RoundOutcome::Failed => {}
        }
    }

    /// Whether this candidate leads at `now`: its last renewal is fresh enough that nobody
    /// else can have taken over yet.
    pub fn leading(&self, now: Instant) -> bool {
        self.last_renew.is_some_and(|t| {
            now.saturating_duration_since(t) + 2 * self.terms.renew_every < self.terms.duration
        })
    }

    /// What to write to let `lease` go on stopping: clear the holder, if it is still this
    /// candidate, so that another takes over at its next poll instead of at expiry.
    pub fn release(&self, lease: Option<&LeaseRecord>) -> Option<Write> {
        let lease = lease?;
        (lease.holder.as_deref() == Some(self.terms.identity.as_str())).then_some(Write {
            holder: None,
            duration_seconds: None,
            transitions: None,
        })
    }
}

#[cfg(test)]
#[path = "lease_tests.rs"]
mod tests;
