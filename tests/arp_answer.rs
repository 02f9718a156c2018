//! The ARP answer (issue 14) as the planner makes it, on a real ovs-vswitchd: `ofproto/trace`
//! of an ARP request for an owned VIP from the uplink shows the request turned into the reply,
//! sent back out of the uplink, and nothing sent to OVN or the host; a request for a VIP
//! another node owns is dropped.

use openflow::{Config, Connection, Message};
use std::net::Ipv4Addr;
use testkit::Sandbox;
use vipflow::config::BridgeConfig;
use vipflow::plan::flows::{FlowKey, PlanInput, Resolved, flow_of};

const OWNED: Ipv4Addr = Ipv4Addr::new(172, 18, 0, 200);
const ELSEWHERE: Ipv4Addr = Ipv4Addr::new(172, 18, 0, 201);

fn trace(sb: &Sandbox, vip: Ipv4Addr) -> String {
    sb.appctl(&[
        "ofproto/trace",
        "br-ex",
        &format!("in_port=eth0,arp,arp_op=1,arp_tpa={vip},arp_spa=172.18.0.2,arp_sha=02:aa:00:00:00:01,arp_tha=00:00:00:00:00:00,dl_src=02:aa:00:00:00:01,dl_dst=ff:ff:ff:ff:ff:ff"),
    ])
}

#[tokio::test]
async fn the_owner_turns_an_arp_request_into_the_reply_and_the_others_drop_it() {
    let sb = Sandbox::openflow_only();
    let target = format!("unix:{}", sb.mgmt_sock("br-ex").display());
    let (conn, _events) = Connection::connect(&target, Config::default())
        .await
        .expect("connect to br-ex");
    let mac = [0x02, 0xbe, 0xef, 0x00, 0x00, 0x01];
    let bridge = BridgeConfig {
        announce: true,
        ..BridgeConfig::default()
    };
    let input = PlanInput {
        bridge: &bridge,
        cookie_prefix: 0x7f1f,
    };
    // The sandbox's uplink eth0 is OpenFlow port 1.
    let resolved = Resolved {
        uplink: 1,
        patch: 2,
        bridge_mac: mac,
        steer_dst: None,
    };
    let flows: Vec<Message> = [
        FlowKey::Arp(OWNED),
        FlowKey::ArpAnswer(OWNED),
        FlowKey::Arp(ELSEWHERE),
    ]
    .into_iter()
    .map(|k| Message::FlowMod(flow_of(k, &input).resolve(&resolved)))
    .collect();
    conn.apply(&flows).await.expect("flows in");

    let t = trace(&sb, OWNED);
    let fin = t
        .lines()
        .find(|l| l.starts_with("Final flow:"))
        .unwrap_or_else(|| panic!("no final flow:\n{t}"));
    for want in [
        "dl_src=02:be:ef:00:00:01",
        "dl_dst=02:aa:00:00:00:01",
        "arp_spa=172.18.0.200",
        "arp_tpa=172.18.0.2",
        "arp_op=2",
        "arp_sha=02:be:ef:00:00:01",
        "arp_tha=02:aa:00:00:00:01",
    ] {
        assert!(fin.contains(want), "{want} not in {fin}\n{t}");
    }
    // Back out of the port it came in on, and nowhere else.
    assert!(t.lines().any(|l| l.trim() == "IN_PORT"), "{t}");
    assert!(!t.lines().any(|l| l.trim() == "LOCAL"), "{t}");
    assert!(!t.contains("bridge(\"br-int\")"), "{t}");
    let dp = |t: &str| {
        t.lines()
            .find(|l| l.starts_with("Datapath actions:"))
            .unwrap_or_default()
            .to_string()
    };
    assert!(!dp(&t).contains("drop"), "{}\n{t}", dp(&t));

    // Another node's VIP: neither the host nor OVN sees the request, and nothing answers.
    let t = trace(&sb, ELSEWHERE);
    assert_eq!(dp(&t).trim(), "Datapath actions: drop", "{t}");
}
