//! The ARP answer flow (issue 14) on a real ovs-vswitchd: `ofproto/trace` of an ARP request for
//! the VIP from the uplink shows the request turned into the reply, sent back out of the uplink,
//! and nothing sent to OVN or the host.

use openflow::{Config, Connection, Message};
use testkit::Sandbox;
use vipflow::announce::arp_answer::arp_answer;

#[tokio::test]
async fn the_switch_turns_an_arp_request_for_the_vip_into_the_reply() {
    let sb = Sandbox::openflow_only();
    let target = format!("unix:{}", sb.mgmt_sock("br-ex").display());
    let (conn, _events) = Connection::connect(&target, Config::default())
        .await
        .expect("connect to br-ex");
    let mac = [0x02, 0xbe, 0xef, 0x00, 0x00, 0x01];
    // The sandbox's uplink eth0 is OpenFlow port 1.
    let flow = arp_answer(
        "172.18.0.200".parse().unwrap(),
        mac,
        1,
        0,
        600,
        0x7f1f_0000_0000_0001,
    );
    conn.apply(&[Message::FlowMod(flow)])
        .await
        .expect("flow in");
    let trace = sb.appctl(&[
        "ofproto/trace",
        "br-ex",
        "in_port=eth0,arp,arp_op=1,arp_tpa=172.18.0.200,arp_spa=172.18.0.2,arp_sha=02:aa:00:00:00:01,arp_tha=00:00:00:00:00:00,dl_src=02:aa:00:00:00:01,dl_dst=ff:ff:ff:ff:ff:ff",
    ]);
    let fin = trace
        .lines()
        .find(|l| l.starts_with("Final flow:"))
        .unwrap_or_else(|| panic!("no final flow:\n{trace}"));
    for want in [
        "dl_src=02:be:ef:00:00:01",
        "dl_dst=02:aa:00:00:00:01",
        "arp_spa=172.18.0.200",
        "arp_tpa=172.18.0.2",
        "arp_op=2",
        "arp_sha=02:be:ef:00:00:01",
        "arp_tha=02:aa:00:00:00:01",
    ] {
        assert!(fin.contains(want), "{want} not in {fin}\n{trace}");
    }
    // Back out of the port it came in on, and nowhere else.
    assert!(trace.lines().any(|l| l.trim() == "IN_PORT"), "{trace}");
    assert!(!trace.lines().any(|l| l.trim() == "LOCAL"), "{trace}");
    assert!(!trace.contains("bridge(\"br-int\")"), "{trace}");
    let dp = trace
        .lines()
        .find(|l| l.starts_with("Datapath actions:"))
        .unwrap_or_default();
    assert!(!dp.contains("drop"), "{dp}\n{trace}");
}
