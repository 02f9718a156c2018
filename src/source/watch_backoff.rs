//! The API server watchers' backoff: [`retry`]'s rule behind kube-runtime's
//! [`Backoff`](kube::runtime::utils::Backoff) trait, for `.backoff(WatchBackoff::new())` in
//! place of kube-runtime's own.
//!
//! kube-runtime's `StreamBackoff` asks for the next wait after every watch error and calls
//! `reset` on every event that is not one. Resetting there would let a watch that fails a
//! moment after each list (a flapping API server, a proxy that cuts watches) be retried at the
//! minimum every time; so `reset` only notes since when the watch has been delivering, and the
//! next error counts that as how long the session was useful: the wait starts over only after
//! a watch that worked for [`retry::HEALTHY_AFTER`], and grows after one that did not.

use retry::{Backoff, Policy};
use std::time::Duration;
use tokio::time::Instant;

/// The watchers' waits: kube-runtime's own bounds (800 ms doubling to 30 s), under the
/// project's rule and jitter.
pub const WATCH_BACKOFF: Policy = Policy::new(Duration::from_millis(800), Duration::from_secs(30));

/// A watcher's backoff (see the module docs).
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    backoff: Backoff,
    /// Since when the watch has been delivering events (none since the last error: `None`).
    delivering_since: Option<Instant>,
}

impl WatchBackoff {
    /// [`WATCH_BACKOFF`], with a seed of its own.
    pub fn new() -> WatchBackoff {
        WatchBackoff::with(Backoff::new(WATCH_BACKOFF))
    }

    pub fn with(backoff: Backoff) -> WatchBackoff {
        WatchBackoff {
            backoff,
            delivering_since: None,
        }
    }
}

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff::new()
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    /// The wait after a watch error: never `None` (a watcher never gives up).
    fn next(&mut self) -> Option<Duration> {
        let useful = self
            .delivering_since
            .take()
            .map_or(Duration::ZERO, |t| t.elapsed());
        Some(self.backoff.after_session(useful))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    /// An event arrived: the watch is delivering (from the first event since the last error).
    fn reset(&mut self) {
        self.delivering_since.get_or_insert_with(Instant::now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::utils::Backoff as _;

    fn seeded() -> WatchBackoff {
        WatchBackoff::with(Backoff::seeded(WATCH_BACKOFF.with_jitter_percent(0), 1))
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[tokio::test(start_paused = true)]
    async fn errors_with_nothing_between_grow_the_wait_to_30_s() {
        let mut b = seeded();
        let waits: Vec<_> = (0..8).map(|_| b.next().unwrap_or_default()).collect();
        assert_eq!(
            waits,
            [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0].map(secs)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_watch_that_delivered_for_10_s_starts_the_wait_over() {
        let mut b = seeded();
        for _ in 0..4 {
            b.next();
        }
        // Events for 2 s, then an error: not long enough, the wait keeps growing.
        b.reset();
        tokio::time::advance(secs(1.0)).await;
        b.reset();
        tokio::time::advance(secs(1.0)).await;
        assert_eq!(b.next(), Some(secs(12.8)));
        // Events from the first one 10 s before the error: back to the minimum.
        b.reset();
        tokio::time::advance(secs(9.0)).await;
        b.reset();
        tokio::time::advance(secs(1.0)).await;
        assert_eq!(b.next(), Some(secs(0.8)));
        assert_eq!(b.next(), Some(secs(1.6)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_waits_are_jittered_within_20_percent_and_at_most_30_s() {
        let mut b = WatchBackoff::new();
        let mut base = WATCH_BACKOFF.min;
        for _ in 0..12 {
            let w = b.next().unwrap_or_default();
            assert!(w >= base.mul_f64(0.8) && w <= base.mul_f64(1.2).min(WATCH_BACKOFF.max));
            base = (base * 2).min(WATCH_BACKOFF.max);
        }
    }
}
