use super::{
    Candidate, Decision, LeaseRecord, LeaseTerms, RoundOutcome, Write, renew_every, whole_seconds,
};
use std::time::{Duration, Instant};

const DURATION: Duration = Duration::from_secs(4);
const RENEW: Duration = Duration::from_millis(500);

fn candidate(identity: &str) -> Candidate {
    Candidate::new(LeaseTerms {
        identity: identity.into(),
        duration: DURATION,
        renew_every: RENEW,
    })
}

fn ms(t0: Instant, ms: u64) -> Instant {
    t0 + Duration::from_millis(ms)
}

/// A Lease as `holder` wrote it: renewed at `renew`, at version `version`.
fn held_by(holder: &str, renew: &str, version: &str) -> LeaseRecord {
    LeaseRecord {
        holder: Some(holder.into()),
        renew_time: Some(renew.into()),
        resource_version: Some(version.into()),
        duration_seconds: Some(4),
        transitions: Some(3),
    }
}

fn take(identity: &str, transitions: i32) -> Write {
    Write {
        holder: Some(identity.into()),
        duration_seconds: Some(4),
        transitions: Some(transitions),
    }
}

fn renew(identity: &str) -> Write {
    Write {
        holder: Some(identity.into()),
        duration_seconds: Some(4),
        transitions: None,
    }
}

#[test]
fn a_missing_lease_is_created_held_by_this_candidate_as_its_first_transition() {
    let mut a = candidate("a");
    assert_eq!(
        a.decide(Instant::now(), None),
        Decision::Create(take("a", 1))
    );
}

#[test]
fn a_released_lease_is_taken_at_once_with_one_more_transition() {
    let mut a = candidate("a");
    let released = LeaseRecord {
        holder: None,
        ..held_by("b", "t1", "7")
    };
    assert_eq!(
        a.decide(Instant::now(), Some(&released)),
        Decision::Replace(take("a", 4))
    );
}

#[test]
fn an_empty_holder_counts_as_none() {
    let mut a = candidate("a");
    assert_eq!(
        a.decide(Instant::now(), Some(&held_by("", "t1", "7"))),
        Decision::Replace(take("a", 4))
    );
}

#[test]
fn its_own_lease_is_renewed_without_a_new_transition() {
    let mut a = candidate("a");
    assert_eq!(
        a.decide(Instant::now(), Some(&held_by("a", "t1", "7"))),
        Decision::Replace(renew("a"))
    );
}

#[test]
fn another_holders_lease_is_waited_on_until_its_record_stood_still_for_the_expiry() {
    let t0 = Instant::now();
    let mut a = candidate("a");
    let lease = held_by("b", "t1", "7");
    // Expiry: the longer of 4 s (the Lease's and ours) less one renewal.
    assert_eq!(a.expiry(&lease), DURATION - RENEW);
    assert_eq!(a.decide(t0, Some(&lease)), Decision::Wait);
    assert_eq!(a.decide(ms(t0, 3499), Some(&lease)), Decision::Wait);
    assert_eq!(
        a.decide(ms(t0, 3500), Some(&lease)),
        Decision::Replace(take("a", 4))
    );
}

#[test]
fn a_renewal_by_the_holder_starts_the_expiry_again_whatever_the_clocks_say() {
    let t0 = Instant::now();
    let mut a = candidate("a");
    assert_eq!(a.decide(t0, Some(&held_by("b", "t1", "7"))), Decision::Wait);
    // The holder's renewTime may be in this node's past or future: only its change counts.
    let renewed = held_by("b", "1970-01-01T00:00:00Z", "8");
    assert_eq!(a.decide(ms(t0, 3000), Some(&renewed)), Decision::Wait);
    assert_eq!(a.decide(ms(t0, 6000), Some(&renewed)), Decision::Wait);
    assert_eq!(
        a.decide(ms(t0, 6500), Some(&renewed)),
        Decision::Replace(take("a", 4))
    );
}

#[test]
fn a_longer_duration_written_in_the_lease_is_honoured() {
    let t0 = Instant::now();
    let mut a = candidate("a");
    let lease = LeaseRecord {
        duration_seconds: Some(10),
        ..held_by("b", "t1", "7")
    };
    assert_eq!(a.expiry(&lease), Duration::from_secs(10) - RENEW);
    assert_eq!(a.decide(t0, Some(&lease)), Decision::Wait);
    assert_eq!(a.decide(ms(t0, 9000), Some(&lease)), Decision::Wait);
    assert!(matches!(
        a.decide(ms(t0, 9500), Some(&lease)),
        Decision::Replace(_)
    ));
}

#[test]
fn a_shorter_or_negative_duration_written_in_the_lease_does_not_shorten_the_expiry() {
    let a = candidate("a");
    for written in [Some(1), Some(-5), None] {
        let lease = LeaseRecord {
            duration_seconds: written,
            ..held_by("b", "t1", "7")
        };
        assert_eq!(a.expiry(&lease), DURATION - RENEW);
    }
}

#[test]
fn a_holder_leads_only_while_its_last_renewal_is_fresh() {
    let t0 = Instant::now();
    let mut a = candidate("a");
    assert!(!a.leading(t0));
    a.outcome(t0, RoundOutcome::Held);
    assert!(a.leading(t0));
    // It steps down at duration - 2 * renew_every after its last renewal.
    assert!(a.leading(ms(t0, 2999)));
    assert!(!a.leading(ms(t0, 3000)));
    a.outcome(ms(t0, 2000), RoundOutcome::Held);
    assert!(a.leading(ms(t0, 4000)));
}

#[test]
fn a_holder_steps_down_a_full_renewal_before_another_may_take_over() {
    let t0 = Instant::now();
    let mut a = candidate("a");
    let mut b = candidate("b");
    // `a` renews at t0; `b` sees that record at once.
    a.outcome(t0, RoundOutcome::Held);
    let lease = held_by("a", "t0", "7");
    assert_eq!(b.decide(t0, Some(&lease)), Decision::Wait);
    // `a` cannot renew any more: it leads until 3 s, `b` may take over at 3.5 s.
    let stepped_down = (0..=4000).find(|&t| !a.leading(ms(t0, t)));
    let taken = (0..=4000).find(|&t| b.decide(ms(t0, t), Some(&lease)) != Decision::Wait);
    assert_eq!(stepped_down, Some(3000));
    assert_eq!(taken, Some(3500));
    assert_eq!(
        stepped_down
            .zip(taken)
            .map(|(down, up)| Duration::from_millis(up - down)),
        Some(RENEW)
    );
}

#[test]
fn a_conflict_or_a_wait_ends_leadership_at_once() {
    let t0 = Instant::now();
    let mut a = candidate("a");
    a.outcome(t0, RoundOutcome::Held);
    a.outcome(ms(t0, 500), RoundOutcome::NotHeld);
    assert!(!a.leading(ms(t0, 500)));
}

#[test]
fn a_failed_round_keeps_the_last_renewal_until_it_grows_stale() {
    let t0 = Instant::now();
    let mut a = candidate("a");
    a.outcome(t0, RoundOutcome::Held);
    a.outcome(ms(t0, 500), RoundOutcome::Failed);
    a.outcome(ms(t0, 1000), RoundOutcome::Failed);
    assert!(a.leading(ms(t0, 1000)));
    assert!(!a.leading(ms(t0, 3000)));
}

#[test]
fn a_stopping_holder_clears_the_holder_only_while_it_is_still_its_own() {
    let a = candidate("a");
    assert_eq!(
        a.release(Some(&held_by("a", "t1", "7"))),
        Some(Write {
            holder: None,
            duration_seconds: None,
            transitions: None,
        })
    );
    assert_eq!(a.release(Some(&held_by("b", "t1", "7"))), None);
    assert_eq!(a.release(None), None);
}

#[test]
fn a_transition_count_at_its_limit_stays_there() {
    let mut a = candidate("a");
    let lease = LeaseRecord {
        holder: None,
        transitions: Some(i32::MAX),
        ..held_by("b", "t1", "7")
    };
    assert_eq!(
        a.decide(Instant::now(), Some(&lease)),
        Decision::Replace(take("a", i32::MAX))
    );
}

#[test]
fn the_duration_is_written_in_whole_seconds_and_at_least_one() {
    assert_eq!(whole_seconds(Duration::from_millis(4900)), 4);
    assert_eq!(whole_seconds(Duration::from_millis(300)), 1);
    assert_eq!(whole_seconds(Duration::from_secs(u64::MAX)), i32::MAX);
}

#[test]
fn renewals_come_eight_times_a_duration_between_100_ms_and_2_s() {
    assert_eq!(renew_every(Duration::from_secs(4)), RENEW);
    assert_eq!(
        renew_every(Duration::from_millis(400)),
        Duration::from_millis(100)
    );
    assert_eq!(renew_every(Duration::from_secs(60)), Duration::from_secs(2));
}
