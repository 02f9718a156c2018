//! Scenario tests for the flow plan (the flows on br-ex): the ARP/ND bypass and the shared gateway.

use super::support::*;
use super::*;
use crate::config::{BridgeConfig, GatewayMode};

// ---- bypass ---------------------------------------------------------------------------------

#[test]
fn arp_bypass_one_flow_per_ipv4_vip() {
    let flows = plan_for(&model(WEB), &bridge());
    let arp: Vec<&PlannedFlow> = flows
        .iter()
        .filter(|f| f.key.to_string().starts_with("arp "))
        .collect();
    assert_eq!(arp.len(), 1);
    let f = arp[0];
    assert_eq!(f.key.to_string(), "arp 192.0.2.10");
    assert_eq!(f.in_port, PortRef::Uplink);
    assert!(!f.dl_src_bridge);
    assert_eq!(
        f.match_,
        Match::new()
            .with(OxmField::eth_type(eth_type::ARP))
            .with(OxmField::arp_op(1))
            .with(OxmField::arp_tpa("192.0.2.10".parse().unwrap()))
    );
    assert_eq!(f.actions, [PlannedAction::Output(PortRef::Local)]);
}

#[test]
fn nd_bypass_one_flow_per_ipv6_vip() {
    let flows = plan_for(&model(WEB), &bridge());
    let f = flow(&flows, "nd 2001:db8::10");
    assert_eq!(f.in_port, PortRef::Uplink);
    assert_eq!(
        f.match_,
        Match::new()
            .with(OxmField::eth_type(eth_type::IPV6))
            .with(OxmField::ip_proto(ip_proto::ICMPV6))
            .with(OxmField::icmpv6_type(135))
            .with(OxmField::icmpv6_code(0))
            .with(OxmField::ipv6_nd_target("2001:db8::10".parse().unwrap()))
    );
    assert_eq!(f.actions, [PlannedAction::Output(PortRef::Local)]);
    assert_eq!(
        flows
            .iter()
            .filter(|f| f.key.to_string().starts_with("nd "))
            .count(),
        1
    );
}

#[test]
fn vlan_bypass_matches_the_vid_and_pops_the_tag_before_local() {
    let b = BridgeConfig {
        vlan: Some(100),
        ..bridge()
    };
    let flows = plan_for(&model(WEB), &b);
    for key in ["arp 192.0.2.10", "nd 2001:db8::10"] {
        let f = flow(&flows, key);
        assert_eq!(f.match_.fields[0], OxmField::vlan_vid(100), "{key}");
        assert_eq!(
            f.actions,
            [
                PlannedAction::PopVlan,
                PlannedAction::Output(PortRef::Local)
            ],
            "{key}"
        );
    }
    // Traffic steered into OVN keeps its tag.
    let steer = flow(&flows, "steer 192.0.2.10:80/tcp");
    assert_eq!(steer.match_.fields[0], OxmField::vlan_vid(100));
    assert_eq!(steer.actions, [PlannedAction::Output(PortRef::Patch)]);
    assert_eq!(
        flow(&flows, "arp 192.0.2.10").display(&b).to_string(),
        "cookie=0x7f1f6d4095d9508b,table=0,priority=500,in_port=eth0,arp,dl_vlan=100,\
         arp_tpa=192.0.2.10,arp_op=1 actions=pop_vlan,LOCAL"
    );
}

#[test]
fn no_vlan_means_no_vlan_match_and_no_pop() {
    let flows = plan_for(&model(WEB), &bridge());
    for f in &flows {
        assert!(
            f.match_.basic(openflow::oxm::field::VLAN_VID).is_none(),
            "{}",
            f.key
        );
        assert!(!f.actions.contains(&PlannedAction::PopVlan), "{}", f.key);
    }
}

// ---- shared gateway -------------------------------------------------------------------------

#[test]
fn shared_gateway_steers_returns_and_passes_pmtu_for_every_protocol() {
    let flows = plan_for(&model(WEB), &bridge());
    assert_eq!(
        keys(&flows),
        [
            "arp 192.0.2.10",
            "frag 192.0.2.10",
            "frag 2001:db8::10",
            "frag return 192.0.2.10",
            "frag return 2001:db8::10",
            "nd 2001:db8::10",
            "pmtu 192.0.2.10",
            "pmtu 2001:db8::10",
            "return 192.0.2.10:3868/sctp",
            "return 192.0.2.10:53/udp",
            "return 192.0.2.10:80/tcp",
            "return [2001:db8::10]:3868/sctp",
            "return [2001:db8::10]:53/udp",
            "return [2001:db8::10]:80/tcp",
            "steer 192.0.2.10:3868/sctp",
            "steer 192.0.2.10:53/udp",
            "steer 192.0.2.10:80/tcp",
            "steer [2001:db8::10]:3868/sctp",
            "steer [2001:db8::10]:53/udp",
            "steer [2001:db8::10]:80/tcp",
        ]
    );
    let text = |k: &str| flow(&flows, k).match_.to_string();
    assert_eq!(
        text("steer 192.0.2.10:80/tcp"),
        "tcp,nw_dst=192.0.2.10,tp_dst=80"
    );
    assert_eq!(
        text("steer 192.0.2.10:53/udp"),
        "udp,nw_dst=192.0.2.10,tp_dst=53"
    );
    assert_eq!(
        text("steer 192.0.2.10:3868/sctp"),
        "sctp,nw_dst=192.0.2.10,tp_dst=3868"
    );
    assert_eq!(
        text("steer [2001:db8::10]:80/tcp"),
        "tcp6,ipv6_dst=2001:db8::10,tp_dst=80"
    );
    assert_eq!(
        text("return 192.0.2.10:80/tcp"),
        "tcp,nw_src=192.0.2.10,tp_src=80"
    );
    assert_eq!(
        text("return [2001:db8::10]:3868/sctp"),
        "sctp6,ipv6_src=2001:db8::10,tp_src=3868"
    );
    assert_eq!(text("frag 192.0.2.10"), "ip,nw_dst=192.0.2.10,nw_frag=yes");
    assert_eq!(
        text("frag return 2001:db8::10"),
        "ipv6,ipv6_src=2001:db8::10,nw_frag=yes"
    );
    for f in &flows {
        let key = f.key.to_string();
        let kind = key.rsplit_once(' ').map_or("", |(k, _)| k);
        let (in_port, dl_src, actions) = match kind {
            "steer" | "pmtu" | "frag" => (
                PortRef::Uplink,
                false,
                vec![PlannedAction::Output(PortRef::Patch)],
            ),
            "return" | "frag return" => (
                PortRef::Patch,
                true,
                vec![PlannedAction::Output(PortRef::Uplink)],
            ),
            _ => (
                PortRef::Uplink,
                false,
                vec![PlannedAction::Output(PortRef::Local)],
            ),
        };
        assert_eq!(f.in_port, in_port, "{}", f.key);
        assert_eq!(f.dl_src_bridge, dl_src, "{}", f.key);
        assert_eq!(f.actions, actions, "{}", f.key);
    }
}

#[test]
fn pmtu_ipv4_is_fragmentation_needed() {
    let flows = plan_for(&model(WEB), &bridge());
    let f = flow(&flows, "pmtu 192.0.2.10");
    assert_eq!(
        f.match_,
        Match::new()
            .with(OxmField::eth_type(eth_type::IPV4))
            .with(OxmField::ip_proto(ip_proto::ICMP))
            .with(OxmField::ipv4_dst("192.0.2.10".parse().unwrap()))
            .with(OxmField::icmpv4_type(3))
            .with(OxmField::icmpv4_code(4))
    );
}

#[test]
fn pmtu_ipv6_is_packet_too_big() {
    let flows = plan_for(&model(WEB), &bridge());
    let f = flow(&flows, "pmtu 2001:db8::10");
    assert_eq!(
        f.match_,
        Match::new()
            .with(OxmField::eth_type(eth_type::IPV6))
            .with(OxmField::ip_proto(ip_proto::ICMPV6))
            .with(OxmField::ipv6_dst("2001:db8::10".parse().unwrap()))
            .with(OxmField::icmpv6_type(2))
            .with(OxmField::icmpv6_code(0))
    );
}

#[test]
fn local_gateway_mode_has_only_the_bypass_flows() {
    let b = BridgeConfig {
        gateway_mode: GatewayMode::Local,
        ..bridge()
    };
    let flows = plan_for(&model(WEB), &b);
    assert_eq!(keys(&flows), ["arp 192.0.2.10", "nd 2001:db8::10"]);
}
