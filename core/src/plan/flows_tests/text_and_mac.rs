//! Scenario tests for the flow plan: resolve() and display() as literal ovs-ofctl text; the gateway router MAC.

use super::support::*;
use super::*;
use crate::config::{BridgeConfig, GatewayMode};

// ---- resolve() and display(): literal ovs-ofctl text ----------------------------------------

/// Each kind of flow: (key, display() text, resolve() text with uplink 1, patch 2). Every text
/// was fed to `ovs-ofctl -O OpenFlow13 parse-flow` (with numbers for port names), which
/// accepted it and printed the same match and actions; cookies were computed independently.
#[test]
fn each_kind_of_flow_in_ovs_ofctl_syntax() {
    let b = BridgeConfig {
        bridge_mac: Some(BR_MAC),
        ..bridge()
    };
    let flows = plan_for(&model(WEB), &b);
    let cases = [
        (
            "arp 192.0.2.10",
            "cookie=0x7f1f6d4095d9508b,table=0,priority=500,in_port=eth0,arp,arp_tpa=192.0.2.10,arp_op=1 \
             actions=LOCAL",
            "cookie=0x7f1f6d4095d9508b,table=0,priority=500,arp,in_port=1,arp_tpa=192.0.2.10,arp_op=1,\
             actions=LOCAL",
        ),
        (
            "nd 2001:db8::10",
            "cookie=0x7f1f17cd90e66fed,table=0,priority=500,in_port=eth0,icmp6,icmp_type=135,icmp_code=0,\
             nd_target=2001:db8::10 actions=LOCAL",
            "cookie=0x7f1f17cd90e66fed,table=0,priority=500,icmp6,in_port=1,icmp_type=135,icmp_code=0,\
             nd_target=2001:db8::10,actions=LOCAL",
        ),
        (
            "pmtu 192.0.2.10",
            "cookie=0x7f1fc51a7ce20992,table=0,priority=500,in_port=eth0,icmp,nw_dst=192.0.2.10,\
             icmp_type=3,icmp_code=4 actions=output:patch-ex-to-int",
            "cookie=0x7f1fc51a7ce20992,table=0,priority=500,icmp,in_port=1,nw_dst=192.0.2.10,\
             icmp_type=3,icmp_code=4,actions=output:2",
        ),
        (
            "pmtu 2001:db8::10",
            "cookie=0x7f1f8f010b6c3887,table=0,priority=500,in_port=eth0,icmp6,ipv6_dst=2001:db8::10,\
             icmp_type=2,icmp_code=0 actions=output:patch-ex-to-int",
            "cookie=0x7f1f8f010b6c3887,table=0,priority=500,icmp6,in_port=1,ipv6_dst=2001:db8::10,\
             icmp_type=2,icmp_code=0,actions=output:2",
        ),
        (
            "steer 192.0.2.10:80/tcp",
            "cookie=0x7f1ff1ef727a35a3,table=0,priority=500,in_port=eth0,tcp,nw_dst=192.0.2.10,tp_dst=80 \
             actions=output:patch-ex-to-int",
            "cookie=0x7f1ff1ef727a35a3,table=0,priority=500,tcp,in_port=1,nw_dst=192.0.2.10,tp_dst=80,\
             actions=output:2",
        ),
        (
            "return [2001:db8::10]:53/udp",
            "cookie=0x7f1fa0f458990b3d,table=0,priority=500,in_port=patch-ex-to-int,\
             dl_src=02:00:00:00:00:01,udp6,ipv6_src=2001:db8::10,tp_src=53 actions=output:eth0",
            "cookie=0x7f1fa0f458990b3d,table=0,priority=500,udp6,in_port=2,dl_src=02:00:00:00:00:01,\
             ipv6_src=2001:db8::10,tp_src=53,actions=output:1",
        ),
    ];
    for (key, display, resolved_text) in cases {
        let f = flow(&flows, key);
        assert_eq!(f.display(&b).to_string(), display, "{key}");
        assert_eq!(f.resolve(&resolved(1)).to_string(), resolved_text, "{key}");
    }
}

#[test]
fn underlay_steering_in_ovs_ofctl_syntax() {
    let b = underlay();
    let flows = plan_for(&model(WEB), &b);
    let f = flow(&flows, "steer 192.0.2.10:3868/sctp");
    assert_eq!(
        f.display(&b).to_string(),
        "cookie=0x7f1f5e8c1809a0b5,table=0,priority=500,in_port=ens4,sctp,nw_dst=192.0.2.10,\
         tp_dst=3868 actions=mod_dl_dst:0a:58:0a:f4:00:01,output:patch-prov"
    );
    assert_eq!(
        f.resolve(&resolved(1)).to_string(),
        "cookie=0x7f1f5e8c1809a0b5,table=0,priority=500,sctp,in_port=1,nw_dst=192.0.2.10,\
         tp_dst=3868,actions=set_field:0a:58:0a:f4:00:01->eth_dst,output:2"
    );
}

#[test]
fn return_path_without_a_configured_mac_names_the_bridge_and_resolves_late() {
    let b = bridge();
    let flows = plan_for(&model(SMALL), &b);
    let f = flow(&flows, "return 192.0.2.10:80/tcp");
    assert!(
        f.display(&b)
            .to_string()
            .contains(",in_port=patch-ex-to-int,dl_src=<br-ex mac>,tcp,"),
        "{}",
        f.display(&b)
    );
    let fm = f.resolve(&resolved(1));
    assert_eq!(
        fm.match_.basic(openflow::oxm::field::ETH_SRC),
        Some(&OxmField::eth_src(BR_MAC))
    );
}

#[test]
fn resolve_builds_an_add_with_a_normalized_match() {
    let flows = plan_for(&model(SMALL), &bridge());
    let f = flow(&flows, "return 192.0.2.10:80/tcp");
    let fm = f.resolve(&resolved(1));
    assert_eq!(fm.command, openflow::FlowModCommand::Add);
    assert_eq!(fm.cookie, f.cookie);
    assert_eq!(fm.cookie_mask, 0);
    assert_eq!(fm.match_, fm.match_.normalized());
    // in_port first, eth_src before eth_type, as OXM field numbers order them.
    assert_eq!(fm.match_.fields[0], OxmField::in_port(2));
    assert_eq!(fm.match_.fields[1], OxmField::eth_src(BR_MAC));
    assert_eq!(
        fm.instructions,
        [Instruction::ApplyActions(vec![Action::output(1)])]
    );
    let arp = flow(&flows, "arp 192.0.2.10").resolve(&resolved(1));
    assert_eq!(
        arp.instructions,
        [Instruction::ApplyActions(vec![Action::output(
            ofport::LOCAL
        )])]
    );
}

// ---- the gateway router's MAC ----------------------------------------------------------------

#[test]
fn steered_traffic_is_rewritten_only_when_the_router_mac_differs() {
    let gw = bridge();
    let other: MacAddr = [0x0a, 0x58, 0x64, 0x40, 0, 0x05];
    assert_eq!(steer_rewrite(&gw, Some(other), Some(BR_MAC)), Some(other));
    assert_eq!(
        steer_rewrite(&gw, Some(BR_MAC), Some(BR_MAC)),
        None,
        "equal"
    );
    assert_eq!(
        steer_rewrite(&gw, None, Some(BR_MAC)),
        None,
        "no annotation"
    );
    assert_eq!(
        steer_rewrite(&gw, Some(other), None),
        None,
        "bridge MAC unknown"
    );
    let local = BridgeConfig {
        gateway_mode: GatewayMode::Local,
        ..bridge()
    };
    assert_eq!(steer_rewrite(&local, Some(other), Some(BR_MAC)), None);
    assert_eq!(steer_rewrite(&underlay(), Some(other), Some(BR_MAC)), None);
}

#[test]
fn a_rewrite_adds_set_field_before_the_patch_port_and_keeps_the_cookie() {
    let other: MacAddr = [0x0a, 0x58, 0x64, 0x40, 0, 0x05];
    let flows = plan_for(&model(SMALL), &bridge());
    let r = Resolved {
        steer_dst: Some(other),
        ..resolved(1)
    };
    let steer = flow(&flows, "steer 192.0.2.10:80/tcp");
    assert_eq!(
        steer.resolve(&r).to_string(),
        "cookie=0x7f1ff1ef727a35a3,table=0,priority=500,tcp,in_port=1,nw_dst=192.0.2.10,tp_dst=80,\
         actions=set_field:0a:58:64:40:00:05->eth_dst,output:2"
    );
    let pmtu = flow(&flows, "pmtu 192.0.2.10").resolve(&r);
    assert_eq!(
        pmtu.instructions,
        [Instruction::ApplyActions(vec![
            Action::SetField(OxmField::eth_dst(other)),
            Action::output(2)
        ])]
    );
    // Bypass and return flows do not go into OVN: untouched.
    for key in ["arp 192.0.2.10", "return 192.0.2.10:80/tcp"] {
        let f = flow(&flows, key);
        assert_eq!(f.resolve(&r), f.resolve(&resolved(1)), "{key}");
    }
}

#[test]
fn plan_names_ports_left_to_the_ovs_database_by_role() {
    let b = BridgeConfig::default();
    let flows = plan_for(&model(SMALL), &b);
    let steer = flow(&flows, "steer 192.0.2.10:80/tcp")
        .display(&b)
        .to_string();
    assert!(
        steer.contains(",in_port=<br-ex uplink>,")
            && steer.ends_with("actions=output:<br-ex patch>"),
        "{steer}"
    );
    // Same flows and cookies as with the ports named.
    assert_eq!(flows, plan_for(&model(SMALL), &bridge()));
}
