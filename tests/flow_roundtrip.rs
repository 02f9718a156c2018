//! Every flow the planner makes, in every bridge mode, as a real ovs-vswitchd stores it: written,
//! read back with the flow-stats request the reconciler uses, and compared the way the
//! reconciler and `vipflow verify` compare. A flow equal on the switch must compare equal, or
//! every audit "repairs" it and `verify` reports it as both missing and unexpected.

use openflow::{Config, Connection, Message};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use testkit::{COOKIE_PREFIX, Sandbox};
use vipflow::config::{BridgeConfig, GatewayMode, Profile};
use vipflow::model::Protocol;
use vipflow::plan::flows::{FlowKey, PlanInput, Resolved, flow_of};
use vipflow::reconcile::bridge::{FlowBody, FlowSet, diff, read_flows};

const V4: Ipv4Addr = Ipv4Addr::new(172, 18, 0, 200);
const V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x18, 0, 0, 0, 0, 0, 0x200);

fn keys() -> Vec<FlowKey> {
    let mut k = vec![
        FlowKey::Arp(V4),
        FlowKey::ArpAnswer(V4),
        FlowKey::Nd(V6),
        FlowKey::NdAnswer(V6),
        FlowKey::NdAdvert(V6),
    ];
    for ip in [IpAddr::V4(V4), IpAddr::V6(V6)] {
        k.extend([
            FlowKey::Pmtu(ip),
            FlowKey::Frag(ip),
            FlowKey::FragReturn(ip),
        ]);
        for p in [Protocol::Tcp, Protocol::Udp, Protocol::Sctp] {
            k.extend([FlowKey::Steer(ip, 80, p), FlowKey::Return(ip, 80, p)]);
        }
    }
    k
}

/// The modes a bridge can be set to that change its flows.
fn modes() -> Vec<(String, BridgeConfig)> {
    let mut out = Vec::new();
    for profile in [Profile::Gateway, Profile::Underlay] {
        for vlan in [None, Some(100)] {
            for announce in [false, true] {
                let b = BridgeConfig {
                    profile,
                    vlan,
                    announce,
                    gateway_mode: GatewayMode::Shared,
                    router_mac: (profile == Profile::Underlay)
                        .then_some([0x0a, 0x58, 0x0a, 0, 0, 1]),
                    ..BridgeConfig::default()
                };
                out.push((format!("{profile:?} vlan={vlan:?} announce={announce}"), b));
            }
        }
    }
    out
}

#[tokio::test]
async fn every_planned_flow_reads_back_equal_in_every_mode() {
    let sb = Sandbox::openflow_only();
    let target = format!("unix:{}", sb.mgmt_sock("br-ex").display());
    let (conn, _events) = Connection::connect(&target, Config::default())
        .await
        .expect("connect to br-ex");
    let resolved = Resolved {
        uplink: 1,
        patch: 2,
        bridge_mac: [0x02, 0xbe, 0xef, 0, 0, 1],
        steer_dst: Some([0x0a, 0x58, 0x0a, 0, 0, 9]),
    };
    let mut failures = Vec::new();
    for (name, bridge) in modes() {
        let input = PlanInput {
            bridge: &bridge,
            cookie_prefix: COOKIE_PREFIX,
        };
        let planned: Vec<openflow::FlowMod> = keys()
            .into_iter()
            .map(|k| flow_of(k, &input).resolve(&resolved))
            .collect();
        let want: FlowSet = planned
            .iter()
            .map(|fm| {
                (
                    (fm.table_id, fm.priority, fm.match_.normalized()),
                    FlowBody {
                        cookie: fm.cookie,
                        instructions: fm.instructions.clone(),
                    },
                )
            })
            .collect();
        let _ = sb.ofctl(&["del-flows", "br-ex"]);
        let msgs: Vec<Message> = planned.into_iter().map(Message::FlowMod).collect();
        conn.apply(&msgs).await.expect("flows in");
        let got = read_flows(&conn, u64::from(COOKIE_PREFIX) << 48, 0xffff << 48)
            .await
            .expect("read back");
        assert_eq!(got.len(), want.len(), "{name}: every flow is on the switch");
        let fixes = diff(&got, &want);
        println!(
            "{name}: {} flows, {} differ as read back",
            want.len(),
            fixes.len()
        );
        if !fixes.is_empty() {
            failures.push(format!("{name}: {fixes:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
