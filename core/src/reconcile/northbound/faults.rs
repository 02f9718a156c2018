//! What the writer does when a transaction's fence fails (pure, so it is tested without a
//! database).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ovsdb::Row;

use super::NB_GLOBAL;
use super::lb_row::map_of;
use crate::keys::WRITER_KEY;

/// Who holds the writer token in `NB_Global`, as read after a fence failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenHolder {
    /// Our own token is there: the fence failed for another reason (a race with a row
    /// that was there a moment ago). Retry as any failure.
    Us,
    /// No token (no `NB_Global` row, or no key): the database was replaced or someone removed
    /// the key. Nobody is fenced out, so nobody writes unless someone takes over.
    Nobody,
    /// Another writer took over: it owns the database now.
    Other(String),
}

/// What to do after a fence failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceAction {
    /// Put a new token in and start a new session (snapshot, full diff).
    TakeOver,
    /// Leave the database to the writer that holds it (or to the Lease holder).
    Yield,
    /// Retry with the backoff, as after any failed transaction.
    Retry,
}

/// Whether `e` is the writer fence failing: its `wait` on `NB_Global` is the first op of
/// every fenced transaction, and times out (at once) when the token is not there.
pub fn is_fence_failure(e: &ovsdb::Error) -> bool {
    e.txn_failure().is_some_and(|f| {
        f.index == 0
            && f.op == Some("wait")
            && f.table.as_deref() == Some(NB_GLOBAL)
            && f.kind == ovsdb::txn::ErrorKind::TimedOut
    })
}

/// The token holder from `NB_Global`'s rows (`external_ids` selected).
pub fn token_holder(rows: &[Row], ours: &str) -> TokenHolder {
    let tokens: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let ids: BTreeMap<String, String> = map_of(r.get("external_ids"));
            ids.get(WRITER_KEY).cloned()
        })
        .collect();
    if tokens.iter().any(|t| t == ours) {
        TokenHolder::Us
    } else if let Some(t) = tokens.into_iter().next() {
        TokenHolder::Other(t)
    } else {
        TokenHolder::Nobody
    }
}

/// Take over again only when nobody holds the token and this agent may write: a writer that
/// lost the Lease must not put a token back in front of the Lease holder's.
pub fn after_fence_failure(holder: &TokenHolder, leading: bool) -> FenceAction {
    match holder {
        TokenHolder::Nobody if leading => FenceAction::TakeOver,
        TokenHolder::Nobody | TokenHolder::Other(_) => FenceAction::Yield,
        TokenHolder::Us => FenceAction::Retry,
    }
}

/// A rate limit for a WARN that repeats while a fault lasts: the first is due, then one per
/// `every`; [`WarnEvery::reset`] once the fault is over.
#[derive(Debug, Clone)]
pub struct WarnEvery {
    every: Duration,
    last: Option<Instant>,
}

impl WarnEvery {
    pub fn new(every: Duration) -> Self {
        WarnEvery { every, last: None }
    }

    /// Whether to warn now (and if so, count it).
    pub fn due(&mut self, now: Instant) -> bool {
        if self
            .last
            .is_some_and(|l| now.saturating_duration_since(l) < self.every)
        {
            return false;
        }
        self.last = Some(now);
        true
    }

    pub fn reset(&mut self) {
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ovsdb::Value;
    use ovsdb::txn::{ErrorKind, TxnFailure};

    fn ids(kv: &[(&str, &str)]) -> Row {
        Row::from([(
            "external_ids".to_string(),
            Value::map(kv.iter().map(|(k, v)| (*k, *v))),
        )])
    }

    fn txn_error(index: usize, op: &'static str, table: &str, kind: ErrorKind) -> ovsdb::Error {
        ovsdb::Error::Txn {
            remote: "unix:x".into(),
            source: Box::new(TxnFailure {
                index,
                op: Some(op),
                table: Some(table.into()),
                kind,
                error: "timed out".into(),
                details: None,
            }),
        }
    }

    #[test]
    fn only_the_first_wait_on_nb_global_timing_out_is_the_fence() {
        assert!(is_fence_failure(&txn_error(
            0,
            "wait",
            NB_GLOBAL,
            ErrorKind::TimedOut
        )));
        // An insert guard (a later wait on Load_Balancer) is not the fence.
        assert!(!is_fence_failure(&txn_error(
            2,
            "wait",
            "Load_Balancer",
            ErrorKind::TimedOut
        )));
        assert!(!is_fence_failure(&txn_error(
            0,
            "wait",
            NB_GLOBAL,
            ErrorKind::ConstraintViolation
        )));
        assert!(!is_fence_failure(&ovsdb::Error::Shutdown));
    }

    #[test]
    fn holder_is_read_from_the_key() {
        assert_eq!(token_holder(&[], "a"), TokenHolder::Nobody);
        assert_eq!(token_holder(&[ids(&[])], "a"), TokenHolder::Nobody);
        assert_eq!(
            token_holder(&[ids(&[("other", "x")])], "a"),
            TokenHolder::Nobody
        );
        assert_eq!(
            token_holder(&[ids(&[(WRITER_KEY, "a")])], "a"),
            TokenHolder::Us
        );
        assert_eq!(
            token_holder(&[ids(&[(WRITER_KEY, "b")])], "a"),
            TokenHolder::Other("b".into())
        );
    }

    #[test]
    fn only_a_leading_writer_takes_an_absent_token_back() {
        assert_eq!(
            after_fence_failure(&TokenHolder::Nobody, true),
            FenceAction::TakeOver
        );
        assert_eq!(
            after_fence_failure(&TokenHolder::Nobody, false),
            FenceAction::Yield
        );
        assert_eq!(
            after_fence_failure(&TokenHolder::Other("b".into()), true),
            FenceAction::Yield
        );
        assert_eq!(
            after_fence_failure(&TokenHolder::Us, true),
            FenceAction::Retry
        );
    }

    #[test]
    fn a_lasting_fault_warns_first_then_once_per_period() {
        let t0 = Instant::now();
        let mut w = WarnEvery::new(Duration::from_secs(60));
        assert!(w.due(t0));
        assert!(!w.due(t0 + Duration::from_secs(1)));
        assert!(!w.due(t0 + Duration::from_secs(59)));
        assert!(w.due(t0 + Duration::from_secs(60)));
        w.reset();
        assert!(
            w.due(t0 + Duration::from_secs(61)),
            "a new fault warns at once"
        );
    }
}
