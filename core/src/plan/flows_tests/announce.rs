//! The flows of a bridge that announces ([`crate::announce`]): the bypass drops, and the
//! owner's answer sits one priority above it, on a VLAN uplink too.

use super::support::*;
use super::*;
use crate::config::BridgeConfig;

fn announcing(vlan: Option<u16>) -> BridgeConfig {
    BridgeConfig {
        announce: true,
        vlan,
        bridge_mac: Some([0x0a, 0x58, 0xac, 0x12, 0x00, 0x11]),
        ..bridge()
    }
}

/// The actions of `flow` as the switch gets them (uplink 1).
fn actions_of(flow: &PlannedFlow) -> Vec<openflow::Action> {
    let fm = flow.resolve(&resolved(1));
    match fm.instructions.first() {
        Some(Instruction::ApplyActions(actions)) => actions.clone(),
        other => panic!("{other:?}"),
    }
}

fn input(b: &BridgeConfig) -> PlanInput<'_> {
    PlanInput {
        bridge: b,
        cookie_prefix: PREFIX,
    }
}

#[test]
fn the_bypass_drops_and_the_answer_sits_one_priority_above_it() {
    let b = announcing(None);
    let vip = "192.0.2.10".parse().unwrap();
    let bypass = flow_of(FlowKey::Arp(vip), &input(&b));
    let answer = flow_of(FlowKey::ArpAnswer(vip), &input(&b));
    assert!(bypass.actions.is_empty());
    assert_eq!(answer.priority, bypass.priority + 1);
    assert_eq!(answer.match_, bypass.match_);
    assert_eq!(answer.in_port, PortRef::Uplink);
    assert_eq!(answer.actions, [PlannedAction::AnswerArp(vip)]);
    assert_ne!(answer.cookie, bypass.cookie);
    assert_eq!(
        bypass.display(&b).to_string(),
        format!(
            "cookie={:#x},table=0,priority=500,in_port=eth0,arp,arp_tpa=192.0.2.10,arp_op=1 actions=drop",
            bypass.cookie
        )
    );
    let text = answer.display(&b).to_string();
    assert!(
        text.contains("priority=501,in_port=eth0,arp,arp_tpa=192.0.2.10,arp_op=1 actions=")
            && text.contains("set_field:0a:58:ac:12:00:11->arp_sha")
            && text.ends_with("set_field:192.0.2.10->arp_spa,IN_PORT"),
        "{text}"
    );
}

#[test]
fn on_a_vlan_uplink_the_answer_matches_the_tag_and_keeps_it() {
    let b = announcing(Some(100));
    let vip = "192.0.2.10".parse().unwrap();
    let answer = flow_of(FlowKey::ArpAnswer(vip), &input(&b));
    assert_eq!(answer.match_.fields[0], OxmField::vlan_vid(100));
    let actions = actions_of(&answer);
    assert!(!actions.contains(&openflow::Action::PopVlan), "{actions:?}");
    assert_eq!(
        actions.last(),
        Some(&openflow::Action::output(ofport::IN_PORT))
    );
    // The bypass drops the tagged request without popping anything.
    let bypass = flow_of(FlowKey::Arp(vip), &input(&b));
    assert!(bypass.actions.is_empty());
}

#[test]
fn for_an_ipv6_vip_the_solicitation_is_answered_in_two_marked_steps_and_the_bypass_drops() {
    let b = announcing(None);
    let vip: std::net::Ipv6Addr = "2001:db8::10".parse().unwrap();
    let bypass = flow_of(FlowKey::Nd(vip), &input(&b));
    let answer = flow_of(FlowKey::NdAnswer(vip), &input(&b));
    let advert = flow_of(FlowKey::NdAdvert(vip), &input(&b));
    assert!(bypass.actions.is_empty());
    assert_eq!(answer.match_, bypass.match_);
    assert_eq!(answer.priority, bypass.priority + 1);
    assert_eq!(advert.priority, bypass.priority + 1);
    assert_eq!(answer.actions, [PlannedAction::AnswerNd(vip)]);
    assert_eq!(advert.actions, [PlannedAction::AdvertNd]);
    assert_eq!(advert.in_port, PortRef::Uplink);
    // The second step takes only what the first marked: an advertisement from the wire has
    // no mark.
    assert!(advert.match_.fields.contains(&OxmField::reg(
        crate::announce::l2::MARK_REG,
        crate::announce::l2::MARK
    )));
    assert!(advert.match_.fields.contains(&OxmField::icmpv6_type(136)));
    assert!(answer.match_.fields.contains(&OxmField::icmpv6_type(135)));
    let cookies: std::collections::BTreeSet<u64> =
        [bypass.cookie, answer.cookie, advert.cookie].into();
    assert_eq!(cookies.len(), 3);
    let text = answer.display(&b).to_string();
    assert!(
        text.contains("priority=501,in_port=eth0,icmp6,icmp_type=135,icmp_code=0,nd_target=2001:db8::10 actions=")
            && text.contains("set_field:2001:db8::10->ipv6_src,set_field:136->icmpv6_type")
            && text.ends_with("set_field:0x56464e41->reg0,resubmit(,0)"),
        "{text}"
    );
    let text = advert.display(&b).to_string();
    assert!(
        text.ends_with("actions=set_field:0a:58:ac:12:00:11->nd_tll,IN_PORT"),
        "{text}"
    );
    // The resubmit goes to the flow's own table, wherever that is.
    assert_eq!(
        actions_of(&answer).last(),
        Some(&openflow::Action::Resubmit {
            in_port: openflow::action::NX_RESUBMIT_IN_PORT,
            table: answer.table
        })
    );
}
