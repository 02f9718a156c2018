//! Reconnect backoff: how long to wait before the next try at a peer.
//!
//! **The rule.** The wait starts at [`Policy::min`] and doubles, up to [`Policy::max`], after
//! every session that ends before it was useful for [`Policy::healthy_after`] (10 s by
//! default), whatever ended it: a refused connect, a failed handshake, invalid JSON right
//! after the monitor, a request that timed out, an EOF, or the caller giving up on it. Only a
//! session that stayed useful that long resets the wait to the minimum. A peer that fails
//! right after every connect is therefore dialled less and less often (with vipflow's 100 ms
//! to 5 s: at most 10 connections in 20 s), while one that worked for a while and then went
//! away is tried again at once.
//!
//! **Jitter.** Each wait is spread by ±[`Policy::jitter_percent`] (20 % by default) and never
//! exceeds the maximum, so agents that lost the same server at the same moment do not all
//! come back at the same moment. The spread comes from a small generator (SplitMix64) seeded
//! per instance: [`Backoff::seeded`] for a reproducible sequence, [`Backoff::new`] for one
//! seeded from the process's random hasher keys.
//!
//! **Sans-IO.** [`Backoff`] has no clock and sleeps nowhere: the caller says how long the
//! session that ended was useful and sleeps the wait it is given, so the whole sequence is
//! tested in memory. [`SharedBackoff`] is one backoff for several dialers of the same peer
//! (the `ovsdb` client's reconnects and the task that makes those clients): it also keeps when
//! the last wait ends, from instants the caller passes in, so no dialer goes before it.
//!
//! **Why a crate of its own.** Both `ovsdb` (its client reconnects by itself) and `vipflow`
//! (OpenFlow, the Kubernetes watchers, the tasks around the `ovsdb` clients) use it, and
//! `ovsdb` cannot depend on `vipflow`; inside `ovsdb` it would make the OpenFlow and
//! Kubernetes code depend on the OVSDB client for a dozen lines of arithmetic. It has no
//! dependencies.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A session useful this long resets the wait (the default [`Policy::healthy_after`]).
pub const HEALTHY_AFTER: Duration = Duration::from_secs(10);

/// The default spread of each wait, in percent either side.
pub const JITTER_PERCENT: u32 = 20;

/// The bounds of the waits and what resets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// The first wait, and the wait after a reset.
    pub min: Duration,
    /// The longest wait, jitter included. A `max` below `min` counts as `min`.
    pub max: Duration,
    /// A session useful at least this long resets the wait to `min`.
    pub healthy_after: Duration,
    /// Each wait is spread by this many percent either side (at most 100).
    pub jitter_percent: u32,
}

impl Policy {
    /// Waits from `min` doubling to `max`, reset after [`HEALTHY_AFTER`], spread by
    /// [`JITTER_PERCENT`].
    pub const fn new(min: Duration, max: Duration) -> Policy {
        Policy {
            min,
            max,
            healthy_after: HEALTHY_AFTER,
            jitter_percent: JITTER_PERCENT,
        }
    }

    pub const fn with_healthy_after(self, healthy_after: Duration) -> Policy {
        Policy {
            healthy_after,
            ..self
        }
    }

    pub const fn with_jitter_percent(self, jitter_percent: u32) -> Policy {
        Policy {
            jitter_percent,
            ..self
        }
    }

    /// The longest wait: `max`, or `min` when `max` is below it.
    fn ceiling(&self) -> Duration {
        self.max.max(self.min)
    }
}

/// The waits between tries at one peer. See the crate docs for the rule.
#[derive(Debug, Clone)]
pub struct Backoff {
    policy: Policy,
    /// The next wait before jitter.
    base: Duration,
    rng: SplitMix64,
}

impl Backoff {
    /// A backoff seeded from the process's random hasher keys (a different seed each call).
    pub fn new(policy: Policy) -> Backoff {
        Backoff::seeded(policy, random_seed())
    }

    /// A backoff whose jitter follows from `seed`: the same seed, the same waits.
    pub fn seeded(policy: Policy, seed: u64) -> Backoff {
        Backoff {
            policy,
            base: policy.min.min(policy.ceiling()),
            rng: SplitMix64(seed),
        }
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// A session ended after it was useful for `useful` (zero: it never was, e.g. the
    /// connect or the handshake failed). Returns the wait before the next try.
    pub fn after_session(&mut self, useful: Duration) -> Duration {
        if useful >= self.policy.healthy_after {
            self.reset();
        }
        let wait = self.jittered(self.base);
        self.base = self.base.saturating_mul(2).min(self.policy.ceiling());
        wait
    }

    /// A try that never became a session (refused, unreachable, handshake failed): the wait
    /// before the next one. The same as [`Backoff::after_session`] with zero.
    pub fn after_failure(&mut self) -> Duration {
        self.after_session(Duration::ZERO)
    }

    /// Start over at the minimum, as after a healthy session.
    pub fn reset(&mut self) {
        self.base = self.policy.min.min(self.policy.ceiling());
    }

    /// `base` spread by the jitter, at most the ceiling.
    fn jittered(&mut self, base: Duration) -> Duration {
        let b = base.as_nanos();
        let span = b * u128::from(self.policy.jitter_percent.min(100)) / 100;
        let offset = u128::from(self.rng.next()) % (2 * span + 1);
        let nanos = (b - span + offset).min(self.policy.ceiling().as_nanos());
        duration_from_nanos(nanos)
    }
}

/// `nanos` as a duration; `nanos` is at most a `Duration`'s nanoseconds, so it fits.
fn duration_from_nanos(nanos: u128) -> Duration {
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    let secs = u64::try_from(nanos / NANOS_PER_SEC).unwrap_or(u64::MAX);
    // Below 10^9, so it fits in a u32.
    let sub = u32::try_from(nanos % NANOS_PER_SEC).unwrap_or(0);
    Duration::new(secs, sub)
}

/// A seed that differs per call: the process's random hasher keys (std seeds them from the
/// OS) applied to a counter.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    use std::sync::atomic::{AtomicU64, Ordering};
    static CALLS: AtomicU64 = AtomicU64::new(0);
    RandomState::new().hash_one(CALLS.fetch_add(1, Ordering::Relaxed))
}

/// SplitMix64 (Steele, Lea, Flood): one add and a few multiplies per number, and any seed,
/// zero included, gives a full-period sequence. Plenty for spreading waits.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// One [`Backoff`] for every dialer of one peer, with the end of the last wait it gave out:
/// a dialer that asks [`SharedBackoff::remaining`] before each try goes no sooner than the
/// rule allows, whichever dialer saw the last session end. Clones share it.
///
/// The instants come from the caller (its clock, `now`), so it stays free of any runtime and
/// testable in memory.
#[derive(Debug, Clone)]
pub struct SharedBackoff(Arc<Mutex<Shared>>);

#[derive(Debug)]
struct Shared {
    backoff: Backoff,
    /// When the last wait given out ends.
    until: Option<Instant>,
}

impl SharedBackoff {
    pub fn new(backoff: Backoff) -> SharedBackoff {
        SharedBackoff(Arc::new(Mutex::new(Shared {
            backoff,
            until: None,
        })))
    }

    /// A session ended at `now` after it was useful for `useful`: the wait before the next
    /// try ([`Backoff::after_session`]), which every clone's [`SharedBackoff::remaining`] now
    /// counts down.
    pub fn after_session(&self, useful: Duration, now: Instant) -> Duration {
        let mut s = self.lock();
        let wait = s.backoff.after_session(useful);
        s.until = now.checked_add(wait);
        wait
    }

    /// A try failed at `now` before it became a session ([`Backoff::after_failure`]).
    pub fn after_failure(&self, now: Instant) -> Duration {
        self.after_session(Duration::ZERO, now)
    }

    /// How long from `now` until the next try may go: what is left of the last wait.
    pub fn remaining(&self, now: Instant) -> Duration {
        self.lock()
            .until
            .map_or(Duration::ZERO, |u| u.saturating_duration_since(now))
    }

    pub fn policy(&self) -> Policy {
        *self.lock().backoff.policy()
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // Nothing in the guarded state can be left half-updated by a panic.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn policy() -> Policy {
        Policy::new(ms(100), ms(5000))
    }

    /// `base` spread by the policy's jitter, capped: the range a wait must fall in.
    fn bounds(p: &Policy, base: Duration) -> (Duration, Duration) {
        let j = f64::from(p.jitter_percent) / 100.0;
        let lo = base.mul_f64(1.0 - j);
        let hi = base.mul_f64(1.0 + j).min(p.max);
        (lo, hi)
    }

    #[test]
    fn short_sessions_double_the_wait_up_to_the_maximum() {
        let mut b = Backoff::seeded(policy().with_jitter_percent(0), 1);
        let waits: Vec<_> = (0..9).map(|_| b.after_session(ms(20))).collect();
        assert_eq!(
            waits,
            [
                ms(100),
                ms(200),
                ms(400),
                ms(800),
                ms(1600),
                ms(3200),
                ms(5000),
                ms(5000),
                ms(5000)
            ]
        );
    }

    #[test]
    fn whatever_ended_it_a_session_short_of_healthy_grows_the_wait() {
        let mut b = Backoff::seeded(policy().with_jitter_percent(0), 1);
        // A refused connect, a session that never got useful, one just short of 10 s.
        assert_eq!(b.after_failure(), ms(100));
        assert_eq!(b.after_session(Duration::ZERO), ms(200));
        assert_eq!(b.after_session(HEALTHY_AFTER - ms(1)), ms(400));
        assert_eq!(b.after_failure(), ms(800));
    }

    #[test]
    fn a_session_useful_for_healthy_after_resets_the_wait() {
        let mut b = Backoff::seeded(policy().with_jitter_percent(0), 7);
        for _ in 0..8 {
            b.after_failure();
        }
        assert_eq!(b.after_failure(), ms(5000));
        assert_eq!(b.after_session(HEALTHY_AFTER), ms(100));
        // And it grows again from there.
        assert_eq!(b.after_failure(), ms(200));
        assert_eq!(b.after_session(Duration::from_secs(3600)), ms(100));
        // An explicit reset does the same.
        b.after_failure();
        b.reset();
        assert_eq!(b.after_failure(), ms(100));
    }

    #[test]
    fn each_wait_stays_within_its_jitter_and_never_exceeds_the_maximum() {
        let p = policy();
        for seed in 0..200 {
            let mut b = Backoff::seeded(p, seed);
            let mut base = p.min;
            for i in 0..40 {
                // A healthy session now and then: back to the minimum.
                let useful = if i % 13 == 12 { HEALTHY_AFTER } else { ms(5) };
                if useful >= p.healthy_after {
                    base = p.min;
                }
                let w = b.after_session(useful);
                let (lo, hi) = bounds(&p, base);
                assert!(
                    lo <= w && w <= hi,
                    "seed {seed}, step {i}: {w:?} not in {lo:?}..={hi:?}"
                );
                assert!(w <= p.max, "seed {seed}: {w:?} over the maximum");
                base = (base * 2).min(p.max);
            }
        }
    }

    #[test]
    fn the_jitter_spreads_the_waits_and_follows_the_seed() {
        let p = policy();
        let run = |seed| {
            let mut b = Backoff::seeded(p, seed);
            (0..20).map(|_| b.after_failure()).collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3), "the same seed, the same waits");
        assert_ne!(run(3), run(4), "another seed, other waits");
        // At the maximum the waits spread below it (none above).
        let mut at_max: Vec<_> = run(5)[8..].to_vec();
        at_max.sort();
        at_max.dedup();
        assert!(at_max.len() > 5, "spread: {at_max:?}");
        assert!(
            at_max
                .iter()
                .all(|w| *w >= p.max.mul_f64(0.8) && *w <= p.max)
        );
        // Two unseeded backoffs do not wait in step.
        let (mut a, mut b) = (Backoff::new(p), Backoff::new(p));
        let a: Vec<_> = (0..10).map(|_| a.after_failure()).collect();
        let b: Vec<_> = (0..10).map(|_| b.after_failure()).collect();
        assert_ne!(a, b);
    }

    #[test]
    fn the_mean_wait_at_each_step_is_about_its_base() {
        let p = policy();
        let steps = 5;
        let mut sums = vec![0.0; steps];
        let runs = 2000;
        for seed in 0..runs {
            let mut b = Backoff::seeded(p, seed);
            for s in sums.iter_mut() {
                *s += b.after_failure().as_secs_f64();
            }
        }
        for (i, s) in sums.iter().enumerate() {
            let base = p.min.as_secs_f64() * f64::from(1u32 << i);
            let mean = s / runs as f64;
            assert!((mean / base - 1.0).abs() < 0.03, "step {i}: mean {mean}");
        }
    }

    #[test]
    fn odd_policies_stay_sane() {
        // A maximum below the minimum: every wait is the minimum.
        let mut b = Backoff::seeded(Policy::new(ms(300), ms(100)).with_jitter_percent(0), 1);
        assert_eq!(b.after_failure(), ms(300));
        assert_eq!(b.after_failure(), ms(300));
        // No minimum: no wait, ever.
        let mut b = Backoff::seeded(Policy::new(Duration::ZERO, ms(100)), 1);
        assert!((0..10).all(|_| b.after_failure() == Duration::ZERO));
        // Jitter over 100 % counts as 100 %: never below zero, never over the maximum.
        let p = Policy::new(ms(100), ms(1000)).with_jitter_percent(500);
        let mut b = Backoff::seeded(p, 9);
        assert!((0..50).all(|_| b.after_failure() <= ms(1000)));
        // Huge durations do not overflow.
        let p = Policy::new(Duration::MAX / 4, Duration::MAX);
        let mut b = Backoff::seeded(p, 2);
        for _ in 0..5 {
            assert!(b.after_failure() >= (Duration::MAX / 4).mul_f64(0.8));
        }
    }

    #[test]
    fn a_shared_backoff_holds_every_dialer_to_the_last_wait() {
        let p = policy().with_jitter_percent(0);
        let shared = SharedBackoff::new(Backoff::seeded(p, 1));
        let other = shared.clone();
        let t0 = Instant::now();
        assert_eq!(shared.remaining(t0), Duration::ZERO, "nothing to wait yet");
        // One dialer saw a session end: the other waits for it too.
        assert_eq!(shared.after_session(ms(30), t0), ms(100));
        assert_eq!(other.remaining(t0 + ms(40)), ms(60));
        assert_eq!(other.remaining(t0 + ms(100)), Duration::ZERO);
        assert_eq!(other.remaining(t0 + ms(500)), Duration::ZERO);
        // The other's failure grows the same sequence.
        let t1 = t0 + ms(100);
        assert_eq!(other.after_failure(t1), ms(200));
        assert_eq!(shared.remaining(t1), ms(200));
        // A healthy session resets it for both.
        assert_eq!(shared.after_session(HEALTHY_AFTER, t1), ms(100));
        assert_eq!(other.policy(), p);
    }
}
