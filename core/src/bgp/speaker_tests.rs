//! Tests of [`super`]: what FRR is told and when, every ordering case by name.

use super::*;

const ASN: u32 = 64513;
/// A node's configuration, as `node_config` writes one.
const CONFIG: &str = "frr defaults datacenter\n!\nrouter bgp 64513\n no bgp network import-check\n neighbor 10.9.0.1 remote-as 64512\nexit\n";

/// [`CONFIG`] as a speaker that does not know what FRR holds applies it: whole, after taking
/// back a graceful shutdown an earlier agent may have left.
fn whole() -> String {
    format!("router bgp 64513\n no bgp graceful-shutdown\nexit\n{CONFIG}")
}

fn nets(v: &[&str]) -> BTreeSet<IpNet> {
    v.iter().map(|s| s.parse().expect("a prefix")).collect()
}

fn batch(old: &[&str], new: &[&str]) -> SpeakerAction {
    SpeakerAction::Apply(frr_batch(ASN, &nets(old), &nets(new)).expect("a change"))
}

/// A speaker that gave FRR [`CONFIG`] and asks to read back what FRR originates.
fn configured() -> Speaker {
    let mut s = Speaker::new();
    assert_eq!(
        s.configure(Some(CONFIG.into())),
        Some(SpeakerAction::Configure(whole())),
        "a starting agent applies its configuration whole"
    );
    assert_eq!(s.applied(), Some(SpeakerAction::ReadBack));
    assert_eq!(s.phase(), SpeakerPhase::Reading);
    s
}

/// A configured speaker that read `held` and was told to want `wanted`.
fn current(held: &[&str], wanted: &[&str]) -> Speaker {
    let mut s = configured();
    assert_eq!(s.read(nets(held)), None, "no plan yet: nothing written");
    assert_eq!(s.phase(), SpeakerPhase::Waiting);
    if let Some(SpeakerAction::Apply(_)) = s.want(nets(wanted)) {
        assert_eq!(s.applied(), None);
    }
    assert_eq!(s.phase(), SpeakerPhase::Current);
    s
}

#[test]
fn nothing_is_done_before_the_configuration_is_known() {
    let mut s = Speaker::new();
    assert_eq!(s.want(nets(&["198.51.100.1/32"])), None);
    assert_eq!(s.phase(), SpeakerPhase::Waiting);
    assert_eq!(s.asn(), None);
    assert!(!s.knows_frr());
}

#[test]
fn what_frr_originates_is_known_once_read_or_when_there_is_no_instance() {
    let mut s = configured();
    assert!(!s.knows_frr());
    s.read(BTreeSet::new());
    assert!(s.knows_frr());
    let mut none = Speaker::new();
    none.configure(None);
    assert!(none.knows_frr());
}

#[test]
fn a_starting_speaker_reads_frr_before_it_writes_so_a_restart_withdraws_nothing() {
    let mut s = configured();
    assert_eq!(s.asn(), Some(ASN));
    // The first plan cannot go out before FRR said what it holds.
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
fn what_frr_holds_is_kept_until_the_plan_is_known() {
    // The dataplane gate opens once the bridges carry the first plan: until then the speaker
    // withdraws nothing FRR holds.
    let mut s = configured();
    assert_eq!(s.read(nets(&["198.51.100.1/32"])), None);
    assert_eq!(s.phase(), SpeakerPhase::Waiting);
    assert_eq!(s.want(nets(&["198.51.100.1/32"])), None);
    assert_eq!(s.phase(), SpeakerPhase::Current);
}

#[test]
fn frr_that_already_holds_the_plan_is_told_nothing() {
    let mut s = current(&["198.51.100.1/32"], &["198.51.100.1/32"]);
    assert_eq!(
        s.want(nets(&["198.51.100.1/32"])),
        None,
        "the same plan again"
    );
    assert_eq!(
        s.configure(Some(CONFIG.into())),
        None,
        "the same configuration again"
    );
}

#[test]
fn a_change_goes_out_at_once_as_one_batch_withdrawals_first() {
    let mut s = current(&["198.51.100.1/32"], &["198.51.100.1/32"]);
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
    let mut s = current(&[], &[]);
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
    let mut s = current(&[], &[]);
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
    let mut s = current(
        &["198.51.100.1/32", "2001:db8::1/128"],
        &["198.51.100.1/32", "2001:db8::1/128"],
    );
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

#[test]
fn a_changed_configuration_goes_in_as_its_difference_and_the_networks_stay() {
    let mut s = current(&["198.51.100.1/32"], &["198.51.100.1/32"]);
    let more = CONFIG.replace(
        " neighbor 10.9.0.1 remote-as 64512\n",
        " neighbor 10.9.0.1 remote-as 64512\n neighbor 10.9.0.3 remote-as 64512\n",
    );
    let Some(SpeakerAction::Configure(text)) = s.configure(Some(more.clone())) else {
        panic!("a batch")
    };
    assert_eq!(text, more, "nothing to undo: the new configuration whole");
    // The instance stays, and with it what FRR originates: nothing to read again.
    assert_eq!(s.applied(), None);
    assert_eq!(s.phase(), SpeakerPhase::Current);
    assert_eq!(s.held(), Some(&nets(&["198.51.100.1/32"])));
}

#[test]
fn another_as_removes_the_instance_and_every_network_goes_in_again() {
    let mut s = current(&["198.51.100.1/32"], &["198.51.100.1/32"]);
    let other = CONFIG.replace("router bgp 64513", "router bgp 64600");
    let Some(SpeakerAction::Configure(text)) = s.configure(Some(other.clone())) else {
        panic!("a batch")
    };
    assert!(text.starts_with("no router bgp 64513\n"), "{text}");
    // The old instance took its networks: read again, then written under the new AS.
    assert_eq!(s.applied(), Some(SpeakerAction::ReadBack));
    assert_eq!(s.asn(), Some(64600));
    let Some(SpeakerAction::Apply(text)) = s.read(BTreeSet::new()) else {
        panic!("a batch")
    };
    assert!(text.starts_with("router bgp 64600\n"), "{text}");
    assert!(text.contains(" network 198.51.100.1/32"), "{text}");
}

#[test]
fn no_peer_for_the_node_removes_the_instance_and_writes_no_network() {
    let mut s = current(&["198.51.100.1/32"], &["198.51.100.1/32"]);
    assert_eq!(
        s.configure(None),
        Some(SpeakerAction::Configure("no router bgp 64513\n".into()))
    );
    assert_eq!(s.applied(), None);
    assert_eq!(s.phase(), SpeakerPhase::Current);
    // A plan that still names prefixes does not bring an instance back.
    assert_eq!(s.want(nets(&["198.51.100.2/32"])), None);
    assert_eq!(s.asn(), None);
}

#[test]
fn a_starting_agent_without_a_peer_leaves_frr_as_it_is() {
    let mut s = Speaker::new();
    assert_eq!(s.configure(None), None);
    assert_eq!(s.want(nets(&["198.51.100.1/32"])), None);
    assert_eq!(s.phase(), SpeakerPhase::Current);
}

#[test]
fn a_failed_configuration_goes_in_whole_again_then_the_networks_are_read() {
    let mut s = Speaker::new();
    s.configure(Some(CONFIG.into()));
    assert_eq!(
        s.failed(),
        Some(SpeakerAction::Configure(whole())),
        "unknown what FRR took: the whole configuration again"
    );
    assert_eq!(s.applied(), Some(SpeakerAction::ReadBack));
}

#[test]
fn frr_that_lost_its_configuration_gets_it_whole_then_every_network() {
    let mut s = current(&["198.51.100.1/32"], &["198.51.100.1/32"]);
    // bgpd restarted empty.
    assert_eq!(s.lost(), Some(SpeakerAction::Configure(whole())));
    assert_eq!(s.applied(), Some(SpeakerAction::ReadBack));
    assert_eq!(
        s.read(BTreeSet::new()),
        Some(batch(&[], &["198.51.100.1/32"]))
    );
}
