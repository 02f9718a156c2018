//! Drift on a big table: with 50,000 of vipflow's flows on a real ovs-vswitchd, a flow deleted
//! by someone else or the whole bridge wiped is heard from the switch's flow monitor and put
//! back, timed; a change to someone else's flow costs no read-back at all.

mod common;

use common::{Agent, kubectl_dump};
use std::time::{Duration, Instant};
use testkit::{Sandbox, our_cookie, our_cookie_match};
use vipflow::reconcile::bridge::BridgeStatus;

/// The number of vipflow's flows on br-ex, counted by the switch.
fn ours_on_switch(sb: &Sandbox) -> usize {
    let out = sb.ofctl(&["dump-aggregate", "br-ex", &our_cookie_match()]);
    out.split("flow_count=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no flow_count in {out:?}"))
}

/// Time from `change` until `repaired` holds, polled every millisecond.
async fn repair_time(change: impl FnOnce(), repaired: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    change();
    while !repaired() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "not repaired within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_at_50000_flows_is_heard_from_the_switch_and_repaired_within_a_second() {
    let sb = Sandbox::openflow_only();
    let h = Agent::start(sb, false, |_| {}, &kubectl_dump(6_250, false)).await;
    let status = || -> BridgeStatus { h.running.status[0].1.borrow().clone() };
    let flows = status().flows;
    assert!(flows >= 50_000, "{flows} flows");
    assert_eq!(ours_on_switch(&h.sb), flows);

    // Someone else's flow added and deleted: nothing of ours is touched, nothing is read.
    let (syncs, repairs) = (status().full_syncs, status().drift_repairs);
    h.sb.ofctl(&[
        "add-flow",
        "br-ex",
        "cookie=0x1234,priority=7,ip,nw_dst=192.0.2.9 actions=drop",
    ]);
    h.sb.ofctl(&[
        "--strict",
        "del-flows",
        "br-ex",
        "priority=7,ip,nw_dst=192.0.2.9",
    ]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        (status().full_syncs, status().drift_repairs),
        (syncs, repairs),
        "a foreign flow's change is no drift"
    );

    // One of ours deleted: the ARP bypass of the first Service's VIP.
    let arp = "priority=500,arp,in_port=1,arp_tpa=172.16.0.1,arp_op=1";
    let one = repair_time(
        || {
            h.sb.ofctl(&["--strict", "del-flows", "br-ex", arp]);
        },
        || {
            h.sb.ofctl(&["dump-flows", "br-ex", "arp,arp_tpa=172.16.0.1"])
                .contains(&our_cookie())
        },
    )
    .await;
    assert_eq!(ours_on_switch(&h.sb), flows);

    // The whole bridge wiped.
    let all = repair_time(
        || {
            h.sb.ofctl(&["del-flows", "br-ex"]);
        },
        || ours_on_switch(&h.sb) == flows,
    )
    .await;
    println!(
        "{flows} flows: one of vipflow's flows deleted, put back in {one:?}; the bridge wiped (ovs-ofctl del-flows br-ex), all back in {all:?}; drift repairs {}",
        status().drift_repairs
    );
    assert!(status().drift_repairs >= 2);
}
