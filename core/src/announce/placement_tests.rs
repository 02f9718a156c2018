//! Placement in memory: owners, stickiness, claims and moves.
use super::*;
use proptest::prelude::*;

fn node(i: usize) -> NodeName {
    Arc::from(format!("node{i}"))
}

fn vip(i: u32) -> IpAddr {
    std::net::Ipv4Addr::from(0xac12_0000 + i).into()
}

fn nodes(n: usize) -> BTreeSet<NodeName> {
    (0..n).map(node).collect()
}

#[test]
fn a_fresh_placement_spreads_vips_evenly_and_is_the_same_everywhere() {
    let vips: BTreeMap<IpAddr, Eligible> = (0..10_000).map(|i| (vip(i), Eligible::Any)).collect();
    let mut a = Placement::default();
    a.set_live(nodes(10));
    a.set_vips(vips.clone());
    // The same inputs in the other order give the same owners.
    let mut b = Placement::default();
    b.set_vips(vips);
    b.set_live(nodes(10));
    for i in 0..10_000 {
        assert_eq!(a.owner(vip(i)), b.owner(vip(i)));
    }
    for n in 0..10 {
        let count = a.owned_by(&node(n)).count();
        assert!(
            (800..=1200).contains(&count),
            "node{n} owns {count} of 10,000"
        );
    }
}

#[test]
fn a_death_moves_only_its_vips_and_a_return_moves_nothing_back() {
    let vips: BTreeMap<IpAddr, Eligible> = (0..2_000).map(|i| (vip(i), Eligible::Any)).collect();
    let mut p = Placement::default();
    p.set_live(nodes(20));
    p.set_vips(vips);
    let before: BTreeMap<IpAddr, NodeName> = (0..2_000)
        .map(|i| (vip(i), p.owner(vip(i)).unwrap().clone()))
        .collect();
    let victim = node(7);
    let had: BTreeSet<IpAddr> = p.owned_by(&victim).copied().collect();
    let mut live = nodes(20);
    live.remove(&victim);
    let moves = p.set_live(live);
    assert_eq!(moves.len(), had.len());
    assert!(
        moves
            .iter()
            .all(|m| had.contains(&m.vip) && m.from.as_ref() == Some(&victim))
    );
    // It comes back: nothing moves (no failback).
    assert!(p.set_live(nodes(20)).is_empty());
    for (v, o) in &before {
        if !had.contains(v) {
            assert_eq!(p.owner(*v), Some(o));
        }
    }
}

#[test]
fn eligibility_is_kept_and_a_vip_with_no_eligible_node_has_no_owner() {
    let only = Eligible::Nodes(Arc::new([node(1), node(2)].into()));
    let mut p = Placement::default();
    p.set_live(nodes(4));
    p.set_vips([(vip(1), only.clone())].into());
    let owner = p.owner(vip(1)).unwrap().clone();
    assert!(owner == node(1) || owner == node(2));
    let mut live = nodes(4);
    live.remove(&node(1));
    live.remove(&node(2));
    let moves = p.set_live(live);
    assert_eq!(
        moves,
        [Move {
            vip: vip(1),
            from: Some(owner),
            to: None
        }]
    );
    // One comes back: it takes the orphan.
    let moves = p.set_live(nodes(4));
    assert_eq!(moves.len(), 1);
    assert!(moves[0].to == Some(node(1)) || moves[0].to == Some(node(2)));
}

fn claim(n: &NodeName, epoch: u64) -> Claim {
    Claim {
        node: n.clone(),
        epoch,
    }
}

#[test]
fn a_later_claim_wins_and_an_earlier_or_unfit_one_changes_nothing() {
    let mut p = Placement::default();
    p.set_live(nodes(3));
    p.set_vips([(vip(1), Eligible::Any)].into());
    let elected = p.claim(vip(1)).unwrap();
    assert_eq!(elected.epoch, 1);
    let other = (0..3).map(node).find(|n| *n != elected.node).unwrap();
    // Another node took it later (this node missed the move): that one it is.
    let moves = p.adopt([(vip(1), claim(&other, 2))]);
    assert_eq!(
        moves,
        [Move {
            vip: vip(1),
            from: Some(elected.node.clone()),
            to: Some(other.clone())
        }]
    );
    // An older claim, one for a node that is not live, or for an unknown VIP: nothing.
    assert!(p.adopt([(vip(1), claim(&elected.node, 1))]).is_empty());
    assert!(
        p.adopt([(vip(1), claim(&node(9), 7)), (vip(2), claim(&node(0), 7))])
            .is_empty()
    );
    assert_eq!(p.claim(vip(1)), Some(claim(&other, 2)));
    // The next move counts on from the adopted epoch.
    let mut live = nodes(3);
    live.remove(&other);
    p.set_live(live);
    assert_eq!(p.claim(vip(1)).unwrap().epoch, 3);
}

#[test]
fn equal_epochs_are_settled_by_score_alike_on_every_node() {
    let v = vip(5);
    let (a, b) = (node(1), node(2));
    let winner = choose(v, [&a, &b]).unwrap();
    let loser = if winner == a { b.clone() } else { a.clone() };
    assert!(claim(&winner, 4).beats(v, &claim(&loser, 4)));
    assert!(!claim(&loser, 4).beats(v, &claim(&winner, 4)));
    assert!(claim(&loser, 5).beats(v, &claim(&winner, 4)));
    assert!(!claim(&winner, 4).beats(v, &claim(&winner, 4)));
}

#[test]
fn a_rollback_returns_to_the_owners_of_the_checkpoint() {
    let vips: BTreeMap<IpAddr, Eligible> = (0..50).map(|i| (vip(i), Eligible::Any)).collect();
    let mut p = Placement::default();
    p.set_live(nodes(3));
    p.set_vips(vips);
    p.checkpoint();
    let before: Vec<Option<Claim>> = (0..50).map(|i| p.claim(vip(i))).collect();
    // node2 dies, then node1: what they had moves twice.
    let mut live = nodes(3);
    live.remove(&node(2));
    assert!(!p.set_live(live.clone()).is_empty());
    live.remove(&node(1));
    p.set_live(live);
    // Cut off after all: every node counts as live again, and the moves are undone.
    p.set_live(nodes(3));
    p.rollback();
    let after: Vec<Option<Claim>> = (0..50).map(|i| p.claim(vip(i))).collect();
    assert_eq!(after, before);
    assert!(p.rollback().is_empty());
}

#[test]
fn a_new_vip_takes_its_claimed_owner_instead_of_electing_one() {
    let mut p = Placement::default();
    p.set_live(nodes(4));
    let best = choose(vip(3), &nodes(4)).unwrap();
    let other = (0..4).map(node).find(|n| *n != best).unwrap();
    let moves = p.put_vip_claimed(vip(3), Eligible::Any, Some(claim(&other, 6)));
    assert_eq!(moves.len(), 1);
    assert_eq!(p.claim(vip(3)), Some(claim(&other, 6)));
    // A claim for a node that may not announce it is passed over: elected as usual.
    let only = Eligible::Nodes(Arc::new([best.clone()].into()));
    p.put_vip_claimed(vip(4), only, Some(claim(&other, 6)));
    assert_eq!(p.owner(vip(4)), Some(&best));
}

/// Random steps: the live nodes, and the VIPs each with the nodes that may answer for it.
fn arb_steps() -> impl Strategy<Value = Vec<(BTreeSet<NodeName>, BTreeMap<IpAddr, Eligible>)>> {
    let live = proptest::collection::btree_set(0usize..8, 0..8)
        .prop_map(|ids| ids.into_iter().map(node).collect::<BTreeSet<NodeName>>());
    let eligible = proptest::option::of(proptest::collection::btree_set(0usize..8, 1..4)).prop_map(
        |e| match e {
            None => Eligible::Any,
            Some(s) => Eligible::Nodes(Arc::new(s.into_iter().map(node).collect())),
        },
    );
    let vips = proptest::collection::btree_map(0u32..12, eligible, 0..12)
        .prop_map(|m| m.into_iter().map(|(v, e)| (vip(v), e)).collect());
    proptest::collection::vec((live, vips), 1..30)
}

proptest! {
    /// Over random membership and VIP changes: every VIP with a live eligible node has
    /// one as its owner, none else has an owner, and an owner changes only when it died
    /// or stopped being eligible.
    #[test]
    fn owners_are_live_eligible_and_sticky(
        steps in arb_steps()
    ) {
        let mut p = Placement::default();
        for (live, vips) in steps {
            let before = p.owners.clone();
            p.set_live(live.clone());
            p.set_vips(vips.clone());
            for (v, e) in &vips {
                let any = live.iter().any(|n| e.allows(n));
                match p.owner(*v) {
                    Some(o) => prop_assert!(live.contains(o) && e.allows(o)),
                    None => prop_assert!(!any, "{v} has live eligible nodes but no owner"),
                }
                if let (Some(old), Some(new)) = (before.get(v), p.owner(*v))
                    && live.contains(old)
                    && e.allows(old)
                {
                    prop_assert_eq!(old, new, "{} moved off a live eligible owner", v);
                }
            }
            prop_assert!(p.owners.keys().all(|v| vips.contains_key(v)));
            let indexed: usize = p.owned.values().map(|s| s.len()).sum();
            prop_assert_eq!(indexed, p.owners.len());
        }
    }

    /// Two nodes with different histories (one saw every step, the other starts at the
    /// end) agree on every owner once the second has the first's claims: a node that
    /// restarts keeps the cluster's owners, whatever the hash would elect now.
    #[test]
    fn a_node_that_starts_late_takes_the_owners_it_is_told(
        steps in arb_steps()
    ) {
        let mut p = Placement::default();
        let mut last = (BTreeSet::new(), BTreeMap::new());
        for (live, vips) in steps {
            p.set_live(live.clone());
            let gone: Vec<IpAddr> = p.vips.keys().filter(|v| !vips.contains_key(v)).copied().collect();
            for v in gone {
                p.remove_vip(v);
            }
            for (v, e) in &vips {
                p.put_vip(*v, e.clone());
            }
            last = (live, vips);
        }
        let (live, vips) = last;
        let mut late = Placement::default();
        late.set_live(live);
        for (v, e) in &vips {
            late.put_vip_claimed(*v, e.clone(), p.claim(*v));
        }
        for v in vips.keys() {
            prop_assert_eq!(late.owner(*v), p.owner(*v), "{}", v);
        }
        // And the first adopts nothing back from the late one.
        let back: Vec<(IpAddr, Claim)> = vips.keys().filter_map(|v| Some((*v, late.claim(*v)?))).collect();
        prop_assert!(p.adopt(back).is_empty());
    }
}

#[test]
fn the_successor_is_who_takes_the_vip_when_its_owner_dies() {
    let vips: BTreeMap<IpAddr, Eligible> = (0..200).map(|i| (vip(i), Eligible::Any)).collect();
    {
        let mut p = Placement::default();
        p.set_live(nodes(7));
        p.set_vips(vips.clone());
        for v in vips.keys() {
            let owner = p.owner(*v).cloned().expect("owned");
            let next = p.successor(*v).expect("a successor");
            assert_ne!(next, owner);
            let mut after = p.clone();
            let mut live = nodes(7);
            live.remove(&owner);
            after.set_live(live);
            assert_eq!(after.owner(*v), Some(&next), "{v}");
        }
    }
    // Alone, or no other eligible node: no successor.
    let mut p = Placement::default();
    p.set_live(nodes(3));
    let only = Arc::new(BTreeSet::from([node(1)]));
    p.set_vips(BTreeMap::from([(vip(1), Eligible::Nodes(only))]));
    assert_eq!(p.owner(vip(1)), Some(&node(1)));
    assert_eq!(p.successor(vip(1)), None);
}
