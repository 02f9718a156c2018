//! Which node answers ARP/ND for each VIP: rendezvous (highest random weight) hashing over the
//! live nodes eligible for it, and sticky: a VIP stays with its owner while that owner lives
//! and stays eligible, so a node that comes back takes nothing back (no failback flaps).
//!
//! Sans-IO. The membership layer tells who is live; what an owner is known by across the
//! cluster (so that every node keeps the same owner, not just the one that saw the history)
//! comes from there too: [`Placement::adopt`] takes owners another node announced.
//!
//! Work follows the change: a node that dies costs its own VIPs (a few per node), a node that
//! joins costs only the VIPs that had no owner, so a failover at 2,000 nodes and 10,000 VIPs
//! hashes a handful of VIPs against the live nodes, not all of them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

/// A node's name.
pub type NodeName = Arc<str>;

/// The weight of `node` for `vip`: the highest wins.
pub fn score(vip: IpAddr, node: &str) -> u64 {
    let mut buf = Vec::with_capacity(16 + node.len());
    match vip {
        IpAddr::V4(a) => buf.extend_from_slice(&a.octets()),
        IpAddr::V6(a) => buf.extend_from_slice(&a.octets()),
    }
    buf.push(0);
    buf.extend_from_slice(node.as_bytes());
    xxhash_rust::xxh3::xxh3_64(&buf)
}

/// The candidate with the highest score for `vip` (ties, which need a 64-bit collision, go to
/// the smaller name).
pub fn choose<'a>(
    vip: IpAddr,
    candidates: impl IntoIterator<Item = &'a NodeName>,
) -> Option<NodeName> {
    candidates
        .into_iter()
        .max_by(|a, b| {
            score(vip, a)
                .cmp(&score(vip, b))
                .then_with(|| b.as_ref().cmp(a.as_ref()))
        })
        .cloned()
}

/// Which nodes may answer for a VIP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eligible {
    /// Any live node.
    Any,
    /// Only these (a pool's node selector; for externalTrafficPolicy Local, the nodes with a
    /// ready local endpoint).
    Nodes(Arc<BTreeSet<NodeName>>),
}

impl Eligible {
    pub fn allows(&self, node: &str) -> bool {
        match self {
            Eligible::Any => true,
            Eligible::Nodes(n) => n.contains(node),
        }
    }
}

/// One change of owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub vip: IpAddr,
    pub from: Option<NodeName>,
    pub to: Option<NodeName>,
}

/// The owner of every VIP, kept across membership changes.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    /// A node that joins takes the VIPs it scores best for, so that the owners are a function
    /// of the live set alone ([`Placement::consistent`]).
    failback: bool,
    vips: BTreeMap<IpAddr, Eligible>,
    live: BTreeSet<NodeName>,
    owners: BTreeMap<IpAddr, NodeName>,
    /// The VIPs each node owns.
    owned: HashMap<NodeName, BTreeSet<IpAddr>>,
}

impl Placement {
    /// A placement whose owners depend on the live nodes and the VIPs alone, not on the order
    /// things happened in: every VIP is owned by the best-scoring live eligible node, so nodes
    /// that share no history (one restarted, say) still agree. The price is failback: a node
    /// that comes back takes its VIPs back. [`Placement::default`] is sticky instead, which
    /// needs the owners shared among the nodes ([`Placement::adopt`]).
    pub fn consistent() -> Placement {
        Placement {
            failback: true,
            ..Placement::default()
        }
    }

    /// The owner of `vip`, if any live eligible node exists.
    pub fn owner(&self, vip: IpAddr) -> Option<&NodeName> {
        self.owners.get(&vip)
    }

    /// The node that takes `vip` if its owner goes: the best live eligible node but the owner.
    /// It watches the owner directly ([`crate::membership::watch`]).
    pub fn successor(&self, vip: IpAddr) -> Option<NodeName> {
        let owner = self.owners.get(&vip)?;
        let eligible = self.vips.get(&vip)?;
        choose(
            vip,
            self.live
                .iter()
                .filter(|n| *n != owner && eligible.allows(n)),
        )
    }

    /// The VIPs `node` answers for.
    pub fn owned_by(&self, node: &str) -> impl Iterator<Item = &IpAddr> {
        self.owned.get(node).into_iter().flatten()
    }

    /// Take owners the cluster agreed on (the membership layer's shared view, e.g. what each
    /// owner announces), where they are live and eligible here too: they win over what this
    /// node would elect, so a node that joins or restarts keeps the cluster's owners instead of
    /// electing anew.
    pub fn adopt(&mut self, claims: impl IntoIterator<Item = (IpAddr, NodeName)>) -> Vec<Move> {
        let mut moves = Vec::new();
        for (vip, node) in claims {
            let fits =
                self.live.contains(&node) && self.vips.get(&vip).is_some_and(|e| e.allows(&node));
            if fits {
                self.set(vip, Some(node), &mut moves);
            }
        }
        moves
    }

    /// A new set of VIPs (each with the nodes that may answer for it): new VIPs get an owner,
    /// gone ones lose theirs, and a VIP whose owner is no longer eligible moves.
    pub fn set_vips(&mut self, vips: BTreeMap<IpAddr, Eligible>) -> Vec<Move> {
        let mut moves = Vec::new();
        let gone: Vec<IpAddr> = self
            .owners
            .keys()
            .filter(|v| !vips.contains_key(v))
            .copied()
            .collect();
        for vip in gone {
            self.set(vip, None, &mut moves);
        }
        let changed: Vec<IpAddr> = vips
            .iter()
            .filter(|(v, e)| self.vips.get(v) != Some(e))
            .map(|(v, _)| *v)
            .collect();
        self.vips = vips;
        for vip in changed {
            let keep = !self.failback
                && self
                    .owners
                    .get(&vip)
                    .is_some_and(|o| self.vips[&vip].allows(o));
            if !keep {
                let to = self.elect(vip);
                self.set(vip, to, &mut moves);
            }
        }
        moves
    }

    /// One VIP added or its eligible nodes changed: it gets an owner unless its owner may
    /// keep it.
    pub fn put_vip(&mut self, vip: IpAddr, eligible: Eligible) -> Vec<Move> {
        let mut moves = Vec::new();
        if self.vips.get(&vip) == Some(&eligible) {
            return moves;
        }
        let keep = !self.failback && self.owners.get(&vip).is_some_and(|o| eligible.allows(o));
        self.vips.insert(vip, eligible);
        if !keep {
            let to = self.elect(vip);
            self.set(vip, to, &mut moves);
        }
        moves
    }

    /// One VIP gone: its owner stops answering.
    pub fn remove_vip(&mut self, vip: IpAddr) -> Vec<Move> {
        let mut moves = Vec::new();
        if self.vips.remove(&vip).is_some() {
            self.set(vip, None, &mut moves);
        }
        moves
    }

    /// Live nodes changed: VIPs of nodes that died move; VIPs that had no owner get one from
    /// the nodes that joined, and with failback the joiners take the VIPs they score best for.
    /// Nothing else moves.
    pub fn set_live(&mut self, live: BTreeSet<NodeName>) -> Vec<Move> {
        let mut moves = Vec::new();
        let died: Vec<NodeName> = self.live.difference(&live).cloned().collect();
        let joiners: Vec<NodeName> = live.difference(&self.live).cloned().collect();
        let joined = !joiners.is_empty();
        self.live = live;
        if self.failback && joined {
            // Only a joiner can beat an owner that lives on: compare each VIP's owner with
            // the joiners alone.
            let owned: Vec<(IpAddr, NodeName)> = self
                .owners
                .iter()
                .filter(|(_, o)| self.live.contains(*o))
                .map(|(v, o)| (*v, o.clone()))
                .collect();
            for (vip, owner) in owned {
                let eligible = &self.vips[&vip];
                let best = choose(
                    vip,
                    std::iter::once(&owner).chain(joiners.iter().filter(|j| eligible.allows(j))),
                );
                if best.as_ref() != Some(&owner) {
                    self.set(vip, best, &mut moves);
                }
            }
        }
        for node in died {
            let theirs: Vec<IpAddr> = self
                .owned
                .get(&node)
                .map(|s| s.iter().copied().collect())
                .unwrap_or_default();
            for vip in theirs {
                let to = self.elect(vip);
                self.set(vip, to, &mut moves);
            }
        }
        if joined {
            let orphans: Vec<IpAddr> = self
                .vips
                .keys()
                .filter(|v| !self.owners.contains_key(v))
                .copied()
                .collect();
            for vip in orphans {
                let to = self.elect(vip);
                self.set(vip, to, &mut moves);
            }
        }
        moves
    }

    /// The best live eligible node for `vip`.
    fn elect(&self, vip: IpAddr) -> Option<NodeName> {
        let eligible = self.vips.get(&vip)?;
        match eligible {
            Eligible::Any => choose(vip, &self.live),
            Eligible::Nodes(n) => choose(vip, n.iter().filter(|x| self.live.contains(*x))),
        }
    }

    fn set(&mut self, vip: IpAddr, to: Option<NodeName>, moves: &mut Vec<Move>) {
        let from = match &to {
            Some(n) => self.owners.insert(vip, n.clone()),
            None => self.owners.remove(&vip),
        };
        if from == to {
            return;
        }
        if let Some(f) = &from
            && let Some(set) = self.owned.get_mut(f)
        {
            set.remove(&vip);
            if set.is_empty() {
                self.owned.remove(f);
            }
        }
        if let Some(t) = &to {
            self.owned.entry(t.clone()).or_default().insert(vip);
        }
        moves.push(Move { vip, from, to });
    }
}

#[cfg(test)]
mod tests {
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
        let vips: BTreeMap<IpAddr, Eligible> =
            (0..10_000).map(|i| (vip(i), Eligible::Any)).collect();
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
        let vips: BTreeMap<IpAddr, Eligible> =
            (0..2_000).map(|i| (vip(i), Eligible::Any)).collect();
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

    #[test]
    fn the_successor_is_who_takes_the_vip_when_its_owner_dies() {
        let vips: BTreeMap<IpAddr, Eligible> = (0..200).map(|i| (vip(i), Eligible::Any)).collect();
        for mut p in [Placement::default(), Placement::consistent()] {
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

    #[test]
    fn adopted_owners_win_where_they_are_live_and_eligible() {
        let mut p = Placement::default();
        p.set_live(nodes(3));
        p.set_vips([(vip(1), Eligible::Any)].into());
        let elected = p.owner(vip(1)).unwrap().clone();
        let other = (0..3).map(node).find(|n| *n != elected).unwrap();
        // The cluster says another live node owns it: that one it is.
        let moves = p.adopt([(vip(1), other.clone())]);
        assert_eq!(
            moves,
            [Move {
                vip: vip(1),
                from: Some(elected),
                to: Some(other.clone())
            }]
        );
        // A claim for a node that is not live, or for an unknown VIP, changes nothing.
        assert!(p.adopt([(vip(1), node(9)), (vip(2), node(0))]).is_empty());
        assert_eq!(p.owner(vip(1)), Some(&other));
    }

    /// Random steps: the live nodes, and the VIPs each with the nodes that may answer for it.
    fn arb_steps() -> impl Strategy<Value = Vec<(BTreeSet<NodeName>, BTreeMap<IpAddr, Eligible>)>> {
        let live = proptest::collection::btree_set(0usize..8, 0..8)
            .prop_map(|ids| ids.into_iter().map(node).collect::<BTreeSet<NodeName>>());
        let eligible = proptest::option::of(proptest::collection::btree_set(0usize..8, 1..4))
            .prop_map(|e| match e {
                None => Eligible::Any,
                Some(s) => Eligible::Nodes(Arc::new(s.into_iter().map(node).collect())),
            });
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

        /// A consistent placement's owners are the best live eligible node of each VIP,
        /// whatever happened before: two nodes with different histories agree. VIPs arrive one
        /// at a time here, as the planner hands them on.
        #[test]
        fn consistent_owners_depend_on_the_present_alone(
            steps in arb_steps()
        ) {
            let mut p = Placement::consistent();
            for (live, vips) in steps {
                p.set_live(live.clone());
                let gone: Vec<IpAddr> = p.vips.keys().filter(|v| !vips.contains_key(v)).copied().collect();
                for v in gone {
                    p.remove_vip(v);
                }
                for (v, e) in &vips {
                    p.put_vip(*v, e.clone());
                }
                let mut fresh = Placement::consistent();
                fresh.set_vips(vips.clone());
                fresh.set_live(live.clone());
                for (v, e) in &vips {
                    let best = choose(*v, live.iter().filter(|n| e.allows(n)));
                    prop_assert_eq!(p.owner(*v), best.as_ref(), "{}", v);
                    prop_assert_eq!(fresh.owner(*v), best.as_ref(), "{}", v);
                }
                prop_assert!(p.owners.keys().all(|v| vips.contains_key(v)));
            }
        }
    }
}
