//! The membership core on a simulated network: nodes find each other through one seed, a node
//! cut off is found dead by every other, one that leaves is gone at once, and datagrams without
//! the key change nothing.

use super::*;
use crate::membership::sim::{SimNetwork, sim_node};

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
