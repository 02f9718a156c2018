//! Tests of [`super`]: what FRR is told and when, every ordering case by name.

use super::*;

const ASN: u32 = 64513;

fn nets(v: &[&str]) -> BTreeSet<IpNet> {
    v.iter().map(|s| s.parse().expect("a prefix")).collect()
}

fn batch(old: &[&str], new: &[&str]) -> SpeakerAction {
    SpeakerAction::Apply(frr_batch(ASN, &nets(old), &nets(new)).expect("a change"))
}

#[test]
fn a_starting_speaker_reads_frr_before_it_writes_so_a_restart_withdraws_nothing() {
    let mut s = Speaker::new(ASN);
    assert_eq!(s.phase(), SpeakerPhase::Reading);
    // The first plan cannot go out before FRR said what it holds.
    assert_eq!(
        s.want(nets(&["198.51.100.1/32", "198.51.100.2/32"])),
        Some(SpeakerAction::ReadBack)
    );
    assert_eq!(s.want(nets(&["198.51.100.1/32", "198.51.100.2/32"])), None);
    // FRR kept the previous agent's routes: only what differs is written.
    assert_eq!(
        s.read(nets(&["198.51.100.1/32", "198.51.100.3/32"])),
        Some(batch(
            &["198.51.100.1/32", "198.51.100.3/32"],
            &["198.51.100.1/32", "198.51.100.2/32"]
        ))
    );
    assert_eq!(s.applied(), None);
    assert_eq!(s.phase(), SpeakerPhase::Current);
}

#[test]
fn frr_that_already_holds_the_plan_is_told_nothing() {
    let mut s = Speaker::new(ASN);
    assert_eq!(
        s.want(nets(&["198.51.100.1/32"])),
        Some(SpeakerAction::ReadBack)
    );
    assert_eq!(s.read(nets(&["198.51.100.1/32"])), None);
    assert_eq!(s.phase(), SpeakerPhase::Current);
    assert_eq!(
        s.want(nets(&["198.51.100.1/32"])),
        None,
        "the same plan again"
    );
}

#[test]
fn a_change_goes_out_at_once_as_one_batch_withdrawals_first() {
    let mut s = Speaker::new(ASN);
    s.want(nets(&["198.51.100.1/32"]));
    s.read(nets(&["198.51.100.1/32"]));
    let action = s.want(nets(&["198.51.100.2/32", "2001:db8::2/128"]));
    assert_eq!(
        action,
        Some(batch(
            &["198.51.100.1/32"],
            &["198.51.100.2/32", "2001:db8::2/128"]
        ))
    );
    let Some(SpeakerAction::Apply(text)) = action else {
        unreachable!()
    };
    let no = text
        .find("no network 198.51.100.1/32")
        .expect("the withdrawal");
    let yes = text.find("network 198.51.100.2/32").expect("the addition");
    assert!(no < yes, "withdrawn before added:\n{text}");
    assert_eq!(s.phase(), SpeakerPhase::Writing);
    assert_eq!(s.applied(), None);
    assert_eq!(
        s.held(),
        Some(&nets(&["198.51.100.2/32", "2001:db8::2/128"]))
    );
}

#[test]
fn changes_during_a_batch_go_out_together_in_the_next_one() {
    let mut s = Speaker::new(ASN);
    s.want(BTreeSet::new());
    s.read(BTreeSet::new());
    assert_eq!(
        s.want(nets(&["198.51.100.1/32"])),
        Some(batch(&[], &["198.51.100.1/32"]))
    );
    // Two more plans while FRR takes the first batch: nothing goes out meanwhile.
    assert_eq!(s.want(nets(&["198.51.100.1/32", "198.51.100.2/32"])), None);
    assert_eq!(s.want(nets(&["198.51.100.2/32", "198.51.100.3/32"])), None);
    // Then one batch from what FRR holds to the newest plan.
    assert_eq!(
        s.applied(),
        Some(batch(
            &["198.51.100.1/32"],
            &["198.51.100.2/32", "198.51.100.3/32"]
        ))
    );
    assert_eq!(s.applied(), None);
    assert_eq!(s.phase(), SpeakerPhase::Current);
}

#[test]
fn a_failed_batch_is_read_back_and_only_what_is_missing_written_again() {
    let mut s = Speaker::new(ASN);
    s.want(BTreeSet::new());
    s.read(BTreeSet::new());
    s.want(nets(&["198.51.100.1/32", "198.51.100.2/32"]));
    // vtysh refused a line and went on: FRR holds part of the batch.
    assert_eq!(s.failed(), Some(SpeakerAction::ReadBack));
    assert_eq!(s.phase(), SpeakerPhase::Reading);
    assert_eq!(s.want(nets(&["198.51.100.1/32", "198.51.100.2/32"])), None);
    assert_eq!(
        s.read(nets(&["198.51.100.1/32"])),
        Some(batch(
            &["198.51.100.1/32"],
            &["198.51.100.1/32", "198.51.100.2/32"]
        ))
    );
}

#[test]
fn withdrawing_everything_is_one_batch_of_withdrawals() {
    let mut s = Speaker::new(ASN);
    s.want(nets(&["198.51.100.1/32", "2001:db8::1/128"]));
    s.read(nets(&["198.51.100.1/32", "2001:db8::1/128"]));
    let Some(SpeakerAction::Apply(text)) = s.want(BTreeSet::new()) else {
        panic!("a batch")
    };
    assert!(text.contains("no network 198.51.100.1/32"), "{text}");
    assert!(text.contains("no network 2001:db8::1/128"), "{text}");
    assert!(
        !text.lines().any(|l| l.trim_start().starts_with("network ")),
        "{text}"
    );
    assert_eq!(s.applied(), None);
    assert_eq!(s.held(), Some(&BTreeSet::new()));
}
