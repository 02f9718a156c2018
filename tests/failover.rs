//! Unplanned failover with real packets: three nodes announce a VIP with the
//! membership on; the owner's uplink is cut while the client probes the VIP every 10 ms, and
//! another node must take the VIP and answer. The figures of many trials are
//! `cargo bench --bench failover`; this test runs two and bounds each generously, to catch a
//! failover that does not happen. Without root (no network namespaces) it says so and skips.

#[path = "announce_bed/mod.rs"]
mod announce_bed;

use announce_bed::{AnnounceBed, Prober};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One testbed at a time: each is three nodes' daemons, agents and OVN on a 2-core machine,
/// and the timings these tests read must not be another testbed's.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn a_cut_owner_is_replaced_and_the_vip_answers_again() {
    let _serial = one_at_a_time();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_vipflow"));
    let Some(bed) = AnnounceBed::start(&bin) else {
        return;
    };
    let prober = Prober::start(bed.client_udp());
    for n in 1..=2 {
        let t = bed.trial(&prober);
        eprintln!("trial {n}: {t:?}");
        assert!(t.next != 0 && t.next != t.owner, "no new owner: {t:?}");
        let outage = t.outage_ms.expect("the VIP answered again");
        // The target is 1 s; this only catches a failover that hangs.
        assert!(outage < 10_000.0, "outage {outage} ms");
        assert!(
            t.detect_ms.is_some(),
            "no node logged the owner gone: {t:?}"
        );
        assert!(
            t.garp_ms.is_some(),
            "no gratuitous ARP from the new owner: {t:?}"
        );
        let heal = t
            .heal_ms
            .expect("one node answering after the partition healed");
        assert!(
            heal < 10_000.0,
            "two nodes answered {heal} ms after the heal"
        );
    }
}

/// A planned move: start the bed and the prober, do `hand_over` to the owner, and check that
/// another node answers alone, the client is on it, and no probe sent meanwhile was lost.
fn planned_move(what: &str, hand_over: impl FnOnce(&mut AnnounceBed, usize)) {
    let _serial = one_at_a_time();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_vipflow"));
    let Some(mut bed) = AnnounceBed::start(&bin) else {
        return;
    };
    let prober = Prober::start(bed.client_udp());
    prober.wait_answered(Duration::from_secs(10));
    let owner = bed.answering()[0];
    let start = Instant::now();
    hand_over(&mut bed, owner);
    // Another node answers, and the old owner no longer does (its other flows stay).
    announce_bed::eventually("another node answering alone", 10, || {
        let a = bed.answering();
        a.len() == 1 && a[0] != owner
    });
    let next = bed.answering()[0];
    let mac = testkit::testbed::node_mac(next);
    announce_bed::eventually("the client on the new owner", 10, || {
        bed.client_neighbor().as_deref() == Some(mac.as_str())
    });
    let end = Instant::now();
    // Answers to the last probes are let in.
    std::thread::sleep(Duration::from_millis(500));
    let (sent, answered) = prober.sent_and_answered(start, end);
    eprintln!(
        "node{owner} {what}, node{next} took over: {sent} probes in {} ms, {answered} answered",
        end.duration_since(start).as_millis()
    );
    assert!(sent > 50, "{sent} probes");
    assert_eq!(answered, sent, "probes lost when node{owner} was {what}");
}

#[test]
fn a_stopped_owner_hands_its_vip_over_without_losing_a_probe() {
    // SIGTERM, as a rolling upgrade or a drain stops the pod.
    planned_move("stopped", |bed, owner| {
        let status = bed.agents[owner - 1].terminate();
        assert!(
            status.is_some_and(|s| s.success()),
            "the agent did not stop cleanly: {status:?}"
        );
    });
}

#[test]
fn a_node_marked_for_drain_hands_its_vip_over_without_losing_a_probe() {
    planned_move("marked for drain", |bed, owner| bed.drain(owner));
}
