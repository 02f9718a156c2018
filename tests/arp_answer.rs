//! The ARP and ND answers as the planner makes them, on a real ovs-vswitchd:
//! `ofproto/trace` of an ARP request or a neighbor solicitation for an owned VIP from the
//! uplink shows it turned into the reply, sent back out of the uplink, and nothing sent to OVN
//! or the host; a request for a VIP another node owns is dropped, and an advertisement from
//! the wire is not taken for one of ours.

mod common;

use openflow::{Config, Connection, Message};
use std::net::{Ipv4Addr, Ipv6Addr};
use testkit::{COOKIE_PREFIX, Sandbox};
use vipflow::config::BridgeConfig;
use vipflow::plan::flows::{FlowKey, PlanInput, Resolved, flow_of};

const OWNED: Ipv4Addr = Ipv4Addr::new(172, 18, 0, 200);
const ELSEWHERE: Ipv4Addr = Ipv4Addr::new(172, 18, 0, 201);
const OWNED6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x18, 0, 0, 0, 0, 0, 0x200);
const ELSEWHERE6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x18, 0, 0, 0, 0, 0, 0x201);
const MAC: [u8; 6] = [0x02, 0xbe, 0xef, 0x00, 0x00, 0x01];

/// Put the flows of `keys` on the sandbox's br-ex as an announcing bridge plans them; the
/// connection stays open while the test traces.
async fn install(sb: &Sandbox, keys: &[FlowKey]) -> Connection {
    let target = format!("unix:{}", sb.mgmt_sock("br-ex").display());
    let (conn, _events) = Connection::connect(&target, Config::default())
        .await
        .expect("connect to br-ex");
    let bridge = BridgeConfig {
        announce: true,
        ..BridgeConfig::default()
    };
    let input = PlanInput {
        bridge: &bridge,
        cookie_prefix: COOKIE_PREFIX,
    };
    // The sandbox's uplink eth0 is OpenFlow port 1.
    let resolved = Resolved {
        uplink: 1,
        patch: 2,
        bridge_mac: MAC,
        steer_dst: None,
    };
    let flows: Vec<Message> = keys
        .iter()
        .map(|k| Message::FlowMod(flow_of(*k, &input).resolve(&resolved)))
        .collect();
    conn.apply(&flows).await.expect("flows in");
    conn
}

fn final_flow(t: &str) -> String {
    t.lines()
        .find(|l| l.starts_with("Final flow:"))
        .unwrap_or_else(|| panic!("no final flow:\n{t}"))
        .to_string()
}

fn datapath_actions(t: &str) -> String {
    t.lines()
        .find(|l| l.starts_with("Datapath actions:"))
        .unwrap_or_default()
        .to_string()
}

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
    let _conn = install(
        &sb,
        &[
            FlowKey::Arp(OWNED),
            FlowKey::ArpAnswer(OWNED),
            FlowKey::Arp(ELSEWHERE),
        ],
    )
    .await;

    let t = trace(&sb, OWNED);
    let fin = final_flow(&t);
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
    assert!(!datapath_actions(&t).contains("drop"), "{t}");

    // Another node's VIP: neither the host nor OVN sees the request, and nothing answers.
    let t = trace(&sb, ELSEWHERE);
    assert_eq!(datapath_actions(&t).trim(), "Datapath actions: drop", "{t}");
}

/// A neighbor solicitation for `vip` from the client, multicast to the VIP's solicited-node
/// group (`icmp_type` 135), or an advertisement for it from the wire (136).
fn trace_nd(sb: &Sandbox, vip: Ipv6Addr, icmp_type: u8) -> String {
    let o = vip.octets();
    let group = format!("ff02::1:ff{:02x}:{:02x}{:02x}", o[13], o[14], o[15]);
    let group_mac = format!("33:33:ff:{:02x}:{:02x}:{:02x}", o[13], o[14], o[15]);
    let lla = if icmp_type == 135 { "nd_sll" } else { "nd_tll" };
    sb.appctl(&[
        "ofproto/trace",
        "br-ex",
        &format!(
            "in_port=eth0,icmp6,icmpv6_type={icmp_type},icmpv6_code=0,nd_target={vip},{lla}=02:aa:00:00:00:01,\
             ipv6_src=fd00:18::2,ipv6_dst={group},nw_ttl=255,dl_src=02:aa:00:00:00:01,dl_dst={group_mac}"
        ),
    ])
}

#[tokio::test]
async fn the_owner_turns_a_neighbor_solicitation_into_the_advertisement_and_the_others_drop_it() {
    let sb = Sandbox::openflow_only();
    let _conn = install(
        &sb,
        &[
            FlowKey::Nd(OWNED6),
            FlowKey::NdAnswer(OWNED6),
            FlowKey::NdAdvert(OWNED6),
            FlowKey::Nd(ELSEWHERE6),
        ],
    )
    .await;

    let t = trace_nd(&sb, OWNED6, 135);
    let fin = final_flow(&t);
    for want in [
        "dl_src=02:be:ef:00:00:01",
        "dl_dst=02:aa:00:00:00:01",
        "ipv6_src=fd00:18::200",
        "ipv6_dst=fd00:18::2",
        "icmp_type=136",
        "nd_target=fd00:18::200",
        "nd_tll=02:be:ef:00:00:01",
    ] {
        assert!(fin.contains(want), "{want} not in {fin}\n{t}");
    }
    // The flags (Solicited, Override) and the option's type, which the final flow does not
    // show, are written on the packet.
    let dp = datapath_actions(&t);
    for want in [
        "nd_ext(nd_reserved=0x60000000,nd_options_type=2)",
        "nd(tll=02:be:ef:00:00:01)",
        "icmpv6(type=136,code=0)",
    ] {
        assert!(dp.contains(want), "{want} not in {dp}\n{t}");
    }
    // Through both steps, back out of the uplink, and nowhere else.
    assert!(t.contains("resubmit(,0)"), "{t}");
    assert!(t.lines().any(|l| l.trim() == "IN_PORT"), "{t}");
    assert!(!t.lines().any(|l| l.trim() == "LOCAL"), "{t}");
    assert!(!datapath_actions(&t).contains("drop"), "{t}");

    // An advertisement for the VIP from the wire carries no mark: the answer's second step
    // does not take it, and it goes where it went before (here the sandbox's NORMAL flow).
    let t = trace_nd(&sb, OWNED6, 136);
    assert!(!t.lines().any(|l| l.trim() == "IN_PORT"), "{t}");
    assert!(!t.contains("->nd_tll"), "{t}");
    assert!(t.contains("NORMAL"), "{t}");

    // Another node's VIP: dropped.
    let t = trace_nd(&sb, ELSEWHERE6, 135);
    assert_eq!(datapath_actions(&t).trim(), "Datapath actions: drop", "{t}");
}

/// `vipflow plan --announce` lists the answers this node would put on the bridge (the planner's
/// placement over the objects' Ready Nodes): here the only Node, so every VIP.
#[test]
fn vipflow_plan_lists_the_answers_of_this_node() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("objects.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: n1}}
- apiVersion: v1
  kind: Service
  metadata: {name: web, namespace: shop}
  spec:
    externalIPs: [172.18.0.200, 'fd00:18::200']
    ports: [{port: 80, protocol: TCP}]
",
    )
    .unwrap();
    let path = file.to_str().expect("a UTF-8 sandbox path");
    let text = common::vipflow_ok(["plan", "--announce", "--node-name", "n1", "--objects", path]);
    let answers = text
        .split("# answers node n1 puts on br-ex (3 flows")
        .nth(1)
        .unwrap_or_else(|| panic!("no answers section:\n{text}"));
    assert!(
        answers
            .lines()
            .any(|l| l.contains("arp_tpa=172.18.0.200") && l.ends_with("IN_PORT")),
        "{text}"
    );
    assert!(
        answers
            .lines()
            .any(|l| l.contains("nd_target=fd00:18::200") && l.contains("resubmit(,0)")),
        "{text}"
    );
    assert!(
        answers
            .lines()
            .any(|l| l.contains("reg0=0x56464e41") && l.contains("->nd_tll,IN_PORT")),
        "{text}"
    );
}
