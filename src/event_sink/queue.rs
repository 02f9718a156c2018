//! What a sink has to say and has said, without I/O: the statements due, oldest first, and the
//! digests of those published that still hold; and the token bucket that paces them.
//!
//! Memory is digests: what was said is a set of 64-bit digests, what is due a digest with its
//! place in the newest set. The statements themselves are the newest set's (the sink takes the
//! whole set each time), and a VipProgrammed statement is made only when it is taken to be
//! published.

use std::collections::{BTreeMap, HashMap, HashSet};
use tokio::time::Instant;
use vipflow_core::events::{ProgrammedVips, Sayings, ServiceEvent, digest, programmed_one};

type FastHasher = foldhash::fast::RandomState;

/// Where a due statement is in the newest set; valid until the next set.
#[derive(Debug, Clone, Copy)]
enum DueAt {
    Statement(usize),
    Programmed(usize),
}

#[derive(Debug)]
struct Due {
    digest: u64,
    /// The key it first became due under: the same through retries, never another's.
    id: u64,
    at: DueAt,
    /// Held back by the rate limit at least once (counted once as deferred).
    held_back: bool,
}

/// A due statement taken to be published; handed back with [`Queue::said`] or
/// [`Queue::put_back`].
#[derive(Debug)]
pub(super) struct Taken {
    pub digest: u64,
    /// Unique to this statement's turn in this sink, the same when it is tried again.
    pub id: u64,
    pub event: ServiceEvent,
    at: DueAt,
    held_back: bool,
}

/// The statements due and said.
#[derive(Default)]
pub(super) struct Queue {
    /// Published and still holding.
    said: HashSet<u64, FastHasher>,
    /// Due, by when each first became due (a sequence number: sets arrive in time order).
    due: BTreeMap<u64, Due>,
    /// Each due digest's key in `due`.
    due_key: HashMap<u64, u64, FastHasher>,
    next_key: u64,
    /// Every due statement keyed below this has been held back already.
    held_below: u64,
    /// The newest set, with each statement's digest.
    statements: Vec<(u64, ServiceEvent)>,
    programmed: ProgrammedVips,
}

impl Queue {
    /// Everything forgotten: another instance may speak now. Keys go on from where they were,
    /// so an id is never given twice.
    pub fn forget(&mut self) {
        *self = Queue {
            next_key: self.next_key,
            held_below: self.next_key,
            ..Queue::default()
        };
    }

    /// What was said before (by an earlier instance of this sink), as the API server keeps
    /// it. Digests that do not hold go at the next [`Queue::update`].
    pub fn seed(&mut self, said: impl IntoIterator<Item = u64>) {
        self.said.extend(said);
    }

    /// Take the whole current set: what is in it and neither said nor due becomes due (in the
    /// set's order, after everything due already); what was said and is not in it is
    /// forgotten (it is said again if it comes back). Returns how many due statements stopped
    /// holding before their turn (dropped).
    pub fn update(&mut self, now: Sayings) -> u64 {
        let Sayings {
            statements,
            programmed,
        } = now;
        let statements: Vec<(u64, ServiceEvent)> =
            (statements.into_iter()).map(|e| (digest(&e), e)).collect();
        let mut holds: HashMap<u64, DueAt, FastHasher> = HashMap::with_capacity_and_hasher(
            statements.len() + programmed.services.len(),
            FastHasher::default(),
        );
        for (i, (d, _)) in statements.iter().enumerate() {
            holds.entry(*d).or_insert(DueAt::Statement(i));
        }
        for (i, s) in programmed.services.iter().enumerate() {
            holds.entry(s.digest).or_insert(DueAt::Programmed(i));
        }
        self.said.retain(|d| holds.contains_key(d));
        let mut dropped = 0;
        let due_key = &mut self.due_key;
        self.due.retain(|_, due| match holds.get(&due.digest) {
            Some(at) => {
                due.at = *at;
                true
            }
            None => {
                due_key.remove(&due.digest);
                dropped += 1;
                false
            }
        });
        drop(holds);
        for (i, (d, _)) in statements.iter().enumerate() {
            self.add(*d, DueAt::Statement(i));
        }
        for (i, s) in programmed.services.iter().enumerate() {
            self.add(s.digest, DueAt::Programmed(i));
        }
        self.statements = statements;
        self.programmed = programmed;
        dropped
    }

    fn add(&mut self, digest: u64, at: DueAt) {
        if self.said.contains(&digest) || self.due_key.contains_key(&digest) {
            return;
        }
        let key = self.next_key;
        self.next_key += 1;
        self.due_key.insert(digest, key);
        self.due.insert(
            key,
            Due {
                digest,
                id: key,
                at,
                held_back: false,
            },
        );
    }

    pub fn has_due(&self) -> bool {
        !self.due.is_empty()
    }

    #[cfg(test)]
    pub fn due_len(&self) -> usize {
        self.due.len()
    }

    /// The statement due longest, made.
    pub fn take(&mut self) -> Option<Taken> {
        while let Some((_, due)) = self.due.pop_first() {
            self.due_key.remove(&due.digest);
            let event = match due.at {
                DueAt::Statement(i) => self.statements.get(i).map(|(_, e)| e.clone()),
                DueAt::Programmed(i) => (self.programmed.services.get(i))
                    .map(|s| programmed_one(&s.key, &s.vips, &self.programmed.node)),
            };
            // Always there: places are set from the set they point into.
            if let Some(event) = event {
                return Some(Taken {
                    digest: due.digest,
                    id: due.id,
                    event,
                    at: due.at,
                    held_back: due.held_back,
                });
            }
        }
        None
    }

    /// `t` was published: said while it holds.
    pub fn said(&mut self, t: Taken) {
        self.said.insert(t.digest);
    }

    /// `t` could not be published: due again, after everything due now (a statement the API
    /// server keeps refusing does not hold up the others).
    pub fn put_back(&mut self, t: Taken) {
        if self.said.contains(&t.digest) || self.due_key.contains_key(&t.digest) {
            return;
        }
        let key = self.next_key;
        self.next_key += 1;
        self.due_key.insert(t.digest, key);
        self.due.insert(
            key,
            Due {
                digest: t.digest,
                id: t.id,
                at: t.at,
                held_back: t.held_back,
            },
        );
    }

    /// Everything due is held back by the rate limit: how many are held back for the first
    /// time (deferred). Only those that became due since the last call are looked at.
    pub fn hold_back(&mut self) -> u64 {
        let mut n = 0;
        for (_, due) in self.due.range_mut(self.held_below..) {
            if !due.held_back {
                due.held_back = true;
                n += 1;
            }
        }
        self.held_below = self.next_key;
        n
    }
}

/// A token bucket: `burst` at once, then `per_second`.
pub(crate) struct Bucket {
    tokens: f64,
    burst: f64,
    per_second: f64,
    last: Instant,
}

impl Bucket {
    /// Full.
    pub fn new(per_second: f64, burst: u32) -> Bucket {
        Bucket {
            tokens: f64::from(burst),
            burst: f64::from(burst),
            per_second,
            last: Instant::now(),
        }
    }

    pub fn take(&mut self) -> bool {
        let now = Instant::now();
        if self.per_second.is_finite() && self.per_second > 0.0 {
            self.tokens = (self.tokens
                + now.duration_since(self.last).as_secs_f64() * self.per_second)
                .min(self.burst);
        }
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// When the next token is there; `None` if never (no rate, or a burst below one).
    pub fn ready_at(&self) -> Option<Instant> {
        if !(self.per_second.is_finite() && self.per_second > 0.0) || self.burst < 1.0 {
            return None;
        }
        let wait = ((1.0 - self.tokens) / self.per_second).max(0.0);
        // Rounded up, and a nanosecond more: at that instant the token must be whole, or a
        // clock that only moves when everyone sleeps (paused, in tests) would wake there for
        // ever, a float's rounding short of it.
        let nanos = (wait * 1e9).ceil() + 1.0;
        if !nanos.is_finite() || nanos >= u64::MAX as f64 {
            return None;
        }
        self.last
            .checked_add(std::time::Duration::from_nanos(nanos as u64))
    }
}
