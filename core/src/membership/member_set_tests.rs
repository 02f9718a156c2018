//! The membership core on a simulated network: nodes find each other through one seed, a node
//! cut off is found dead by every other, one that leaves is gone at once, and datagrams without
//! the key change nothing.

use super::*;
use crate::membership::sim::{SimNetwork, sim_node};
use crate::membership::watch::WatchFinding;

fn settings() -> MembershipSettings {
    MembershipSettings {
        cluster_size: 8,
        ..MembershipSettings::default()
    }
}

/// The first time after `from` at which every node but `dead` stopped seeing it, or `None`.
fn all_lost(net: &mut SimNetwork, dead: usize, from: u64, limit: u64) -> Option<u64> {
    let mut t = from;
    while t <= limit {
        net.run_until(t);
        if (0..net.len())
            .filter(|&i| i != dead)
            .all(|i| !net.sees(i, dead))
        {
            return Some(t - from);
        }
        t += 10;
    }
    None
}

#[test]
fn nodes_join_through_one_seed_and_a_cut_node_is_found_dead_by_all() {
    let mut net = SimNetwork::new(8, &settings(), 1, 0.0, 7);
    net.run_until(3_000);
    let all = net.all_names();
    for i in 0..8 {
        assert_eq!(net.live(i), &all, "node{i}");
    }
    net.cut(5);
    let took = all_lost(&mut net, 5, 3_000, 13_000).expect("node5 found dead within 10 s");
    eprintln!("a cut node was found dead by all 7 others after {took} ms (virtual time)");
    // Nothing else was lost meanwhile.
    net.run_until(net.now_ms() + 2_000);
    for i in (0..8).filter(|&i| i != 5) {
        assert_eq!(net.live(i).len(), 7, "node{i}: {:?}", net.live(i));
    }
}

#[test]
fn a_node_that_leaves_is_gone_at_once() {
    let mut net = SimNetwork::new(6, &settings(), 1, 0.0, 11);
    net.run_until(3_000);
    net.leave(2);
    let took = all_lost(&mut net, 2, 3_000, 13_000).expect("node2 gone within 10 s");
    assert!(took < 1_000, "a leave took {took} ms to reach everyone");
}

#[test]
fn a_datagram_without_the_key_changes_nothing() {
    let me = Peer {
        node: sim_node(0),
        addr: "10.0.0.1:7947".parse().unwrap(),
        bump: 1,
    };
    let key = Key::from_secret(b"the right secret, 32 bytes long.").unwrap();
    let mut m = MemberSet::new(me, &settings(), key, 1).unwrap();
    let wrong = Key::from_secret(b"another secret, also long enough").unwrap();
    let before = m.live().clone();
    for payload in [&b""[..], b"\x00\x01garbage", &[0xff; 300]] {
        let d = wrong.seal(1_000, payload);
        assert!(matches!(
            m.receive(1_000, &d),
            Err(MembershipError::Unsealed(_))
        ));
    }
    // Signed but not foca's: refused by the protocol, nothing learned.
    let right = Key::from_secret(b"the right secret, 32 bytes long.").unwrap();
    let d = right.seal(1_000, b"\x00\x01garbage");
    assert!(matches!(
        m.receive(1_000, &d),
        Err(MembershipError::Protocol(_))
    ));
    assert_eq!(m.live(), &before);
}

/// When node `dead` was first declared down after `from`, and by whom.
fn first_down(net: &SimNetwork, dead: usize, from: u64) -> Option<(u64, usize)> {
    let name = sim_node(dead);
    net.downs
        .iter()
        .filter(|(t, _, n)| *t >= from && *n == name)
        .map(|(t, by, _)| (*t - from, *by))
        .min()
}

#[test]
fn a_watched_owner_is_found_dead_by_its_successor_first() {
    let mut net = SimNetwork::formed(8, &settings(), 1, 0.0, 3);
    net.run_until(2_000);
    net.set_watchers(5, [2, 6]);
    net.run_until(3_000);
    assert_eq!(net.watching(2).1.len(), 1, "node2 watches node5");
    net.cut(5);
    net.run_until(5_000);
    let (took, by) = first_down(&net, 5, 3_000).expect("node5 declared down");
    eprintln!("a watched owner was declared down by node{by} after {took} ms (virtual time)");
    assert!(
        [2, 6].contains(&by),
        "its successors find it first, not node{by}"
    );
    // A heartbeat missed for 100 ms, the helpers' probe (40 ms) and a round trip.
    assert!(took <= 170, "{took} ms");
    // The news reaches every other node by SWIM's gossip.
    for i in (0..8).filter(|&i| i != 5) {
        assert!(!net.sees(i, 5), "node{i} still sees node5");
    }
}

#[test]
fn a_successor_on_a_lossy_link_moves_nothing() {
    let mut net = SimNetwork::formed(8, &settings(), 1, 0.0, 5);
    net.run_until(2_000);
    for owner in 0..8 {
        net.set_watchers(owner, [(owner + 1) % 8, (owner + 3) % 8]);
    }
    // Node 1's and node 4's links lose 5 % each way: both watch two owners.
    net.set_link_loss(1, 0.05);
    net.set_link_loss(4, 0.05);
    net.run_until(602_000);
    let count =
        |f: fn(&WatchFinding) -> bool| net.watch_events.iter().filter(|(_, _, e)| f(e)).count();
    let checks = count(|e| matches!(e, WatchFinding::Checking { .. }));
    let confirmed = count(|e| matches!(e, WatchFinding::Confirmed { .. }));
    eprintln!(
        "10 min, 5 % loss on two watchers' links: {checks} checks, {confirmed} confirmed, {} downs",
        net.downs.len()
    );
    assert_eq!(confirmed, 0);
    assert!(net.downs.is_empty(), "{:?}", net.downs);
    // At 20 % the watchers miss heartbeats often, and each time others reach the owner: the
    // watch still declares no one down (SWIM itself, probing through that link, does flap).
    net.set_link_loss(1, 0.20);
    net.set_link_loss(4, 0.20);
    let (from_checks, from_downs) = (net.watch_events.len(), net.downs.len());
    net.run_until(902_000);
    let events = &net.watch_events[from_checks..];
    let checks = events
        .iter()
        .filter(|(_, _, e)| matches!(e, WatchFinding::Checking { .. }))
        .count();
    let confirmed: Vec<_> = events
        .iter()
        .filter(|(_, _, e)| matches!(e, WatchFinding::Confirmed { .. }))
        .collect();
    eprintln!(
        "5 min more at 20 % loss: {checks} checks, {} confirmed, {} SWIM downs",
        confirmed.len(),
        net.downs.len() - from_downs
    );
    assert!(checks > 0);
    assert!(confirmed.is_empty(), "{confirmed:?}");
}

/// Node 2's link goes dead while its agent runs (its switch restarts): the others find it down.
/// Told it hears no one, node 2 declares no one down meanwhile, so once its link is back no
/// node but node 2 was ever found down, by anyone. Without being told, node 2 finds every
/// other node down and says so.
#[test]
fn a_node_that_hears_no_one_declares_no_one_down() {
    let run = |isolate: bool| {
        let mut net = SimNetwork::formed(5, &settings(), 1, 0.0, 23);
        net.run_until(2_000);
        net.set_link_loss(2, 1.0);
        net.run_until(2_400);
        if isolate {
            net.set_isolated(2, true);
        }
        net.run_until(5_000);
        net.set_link_loss(2, 0.0);
        if isolate {
            net.set_isolated(2, false);
        }
        net.run_until(10_000);
        let whole = (0..5).all(|i| net.live(i).len() == 5);
        let node2 = sim_node(2);
        let by_2: Vec<String> = net
            .downs
            .iter()
            .filter(|(_, from, _)| *from == 2)
            .map(|(_, _, d)| d.clone())
            .collect();
        let others_down = net.downs.iter().filter(|(_, _, d)| *d != node2).count();
        let node2_down = net.downs.iter().filter(|(_, _, d)| *d == node2).count();
        (whole, by_2, others_down, node2_down)
    };
    let (whole, by_2, others_down, node2_down) = run(true);
    assert!(whole, "the membership whole again");
    assert!(
        by_2.is_empty(),
        "node 2 declared {by_2:?} down while it heard no one"
    );
    assert_eq!(others_down, 0, "a node other than node 2 was found down");
    assert!(node2_down >= 4, "the others found node 2 down");
    let (_, by_2, others_down, _) = run(false);
    assert!(
        by_2.len() >= 4 && others_down >= 4,
        "not told, node 2 finds the others down: {by_2:?}"
    );
}
