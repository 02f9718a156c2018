//! Which node answers ARP/ND for each VIP: rendezvous (highest random weight) hashing over the
//! live nodes eligible for it, and sticky: a VIP stays with its owner while that owner lives
//! and stays eligible, so a node that comes back takes nothing back (no failback flaps).
//!
//! Sans-IO. The membership layer tells who is live; what an owner is known by across the
//! cluster (so that every node keeps the same owner, not just the one that saw the history)
//! comes from there too: [`Placement::adopt`] takes owners another node announced.
//!
//! Every change of owner raises the VIP's epoch; owners tell each other their claims (VIP,
//! owner, epoch) and the later epoch wins ([`Claim::beats`]), so a node that missed moves (cut
//! off, restarted) ends with the owners the others agreed on.
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

/// A node's claim to a VIP, as the owners tell each other through the membership: `epoch`
/// counts the VIP's changes of owner, so the latest owner wins over one that missed the move
/// (a node that was cut off, or restarted).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Claim {
    pub node: NodeName,
    pub epoch: u64,
}

impl Claim {
    /// Whether this claim to `vip` wins over `other`: the later epoch, or at the same epoch
    /// (two sides of a partition took the VIP at once) the better score, so every node picks
    /// the same one.
    pub fn beats(&self, vip: IpAddr, other: &Claim) -> bool {
        match self.epoch.cmp(&other.epoch) {
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Less => false,
            std::cmp::Ordering::Equal => {
                self.node != other.node
                    && choose(vip, [&self.node, &other.node]).as_ref() == Some(&self.node)
            }
        }
    }
}

/// The owner of every VIP, kept across membership changes: sticky (an owner keeps its VIPs
/// while it lives and stays eligible), each change of owner counted in the VIP's epoch.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    vips: BTreeMap<IpAddr, Eligible>,
    live: BTreeSet<NodeName>,
    /// Persistent: a snapshot for the report is a pointer copy, taken after every update.
    owners: imbl::OrdMap<IpAddr, NodeName>,
    /// Each known VIP's epoch: raised by one at every change of owner this node makes, or
    /// taken from an adopted claim. Kept while a VIP has no owner, so its next owner's epoch
    /// is higher than any before.
    epochs: BTreeMap<IpAddr, u64>,
    /// The VIPs each node owns.
    owned: HashMap<NodeName, BTreeSet<IpAddr>>,
    /// Each VIP's claim as it was at the last [`Placement::checkpoint`], for the VIPs that
    /// changed since ([`Placement::rollback`]); `None` before the first checkpoint.
    journal: Option<BTreeMap<IpAddr, Option<Claim>>>,
}

impl Placement {
    /// Remember the owners as they are now: [`Placement::rollback`] returns to them.
    pub fn checkpoint(&mut self) {
        self.journal = Some(BTreeMap::new());
    }

    /// Undo every change of owner since the last [`Placement::checkpoint`] (where the old
    /// owner is still live and eligible, and the VIP still placed). A node that finds itself
    /// cut off takes back the decisions it made while it saw the others die one by one: the
    /// first deaths a cut-off node sees look like a majority's view, which they were not.
    pub fn rollback(&mut self) -> Vec<Move> {
        let Some(journal) = self.journal.take() else {
            return Vec::new();
        };
        let mut moves = Vec::new();
        for (vip, prior) in journal {
            let Some(eligible) = self.vips.get(&vip) else {
                continue;
            };
            match prior {
                Some(c) if self.live.contains(&c.node) && eligible.allows(&c.node) => {
                    let epoch = c.epoch;
                    self.set(vip, Some(c.node), Some(epoch), &mut moves);
                    self.epochs.insert(vip, epoch);
                }
                Some(_) => {}
                None => self.set(vip, None, None, &mut moves),
            }
        }
        self.checkpoint();
        moves
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

    /// The owner of `vip` and its epoch.
    pub fn claim(&self, vip: IpAddr) -> Option<Claim> {
        let node = self.owners.get(&vip)?.clone();
        let epoch = self.epochs.get(&vip).copied().unwrap_or(0);
        Some(Claim { node, epoch })
    }

    /// Every VIP's owner, as a snapshot that later changes do not touch.
    pub fn owners(&self) -> imbl::OrdMap<IpAddr, NodeName> {
        self.owners.clone()
    }

    /// The VIPs `node` answers for.
    pub fn owned_by(&self, node: &str) -> impl Iterator<Item = &IpAddr> {
        self.owned.get(node).into_iter().flatten()
    }

    /// Take claims other nodes made (through the membership), where the claimed node is live
    /// and eligible here too and the claim beats the owner this node knows ([`Claim::beats`]):
    /// a node that was cut off or restarted thereby keeps the owners the others agreed on
    /// instead of electing anew.
    pub fn adopt(&mut self, claims: impl IntoIterator<Item = (IpAddr, Claim)>) -> Vec<Move> {
        let mut moves = Vec::new();
        for (vip, claim) in claims {
            let fits = self.live.contains(&claim.node)
                && self.vips.get(&vip).is_some_and(|e| e.allows(&claim.node));
            if !fits {
                continue;
            }
            let wins = match self.claim(vip) {
                Some(cur) if cur.node == claim.node => {
                    if claim.epoch > cur.epoch {
                        self.epochs.insert(vip, claim.epoch);
                    }
                    false
                }
                Some(cur) => claim.beats(vip, &cur),
                None => true,
            };
            if wins {
                self.set(vip, Some(claim.node), Some(claim.epoch), &mut moves);
            }
        }
        moves
    }

    /// A new set of VIPs (each with the nodes that may answer for it): new VIPs get an owner,
    /// gone ones lose theirs, and a VIP whose owner is no longer eligible moves.
    pub fn set_vips(&mut self, vips: BTreeMap<IpAddr, Eligible>) -> Vec<Move> {
        let mut moves = Vec::new();
        let gone: Vec<IpAddr> = self
            .vips
            .keys()
            .filter(|v| !vips.contains_key(v))
            .copied()
            .collect();
        for vip in gone {
            self.set(vip, None, None, &mut moves);
            self.epochs.remove(&vip);
        }
        let changed: Vec<IpAddr> = vips
            .iter()
            .filter(|(v, e)| self.vips.get(v) != Some(e))
            .map(|(v, _)| *v)
            .collect();
        self.vips = vips;
        for vip in changed {
            let keep = self
                .owners
                .get(&vip)
                .is_some_and(|o| self.vips[&vip].allows(o));
            if !keep {
                self.elect_into(vip, &mut moves);
            }
        }
        moves
    }

    /// One VIP added or its eligible nodes changed: it gets an owner unless its owner may
    /// keep it.
    pub fn put_vip(&mut self, vip: IpAddr, eligible: Eligible) -> Vec<Move> {
        self.put_vip_claimed(vip, eligible, None)
    }

    /// [`Placement::put_vip`] where the cluster may already have an owner for the VIP
    /// (`claim`, from the membership): a VIP new to this node takes the claimed owner when it
    /// is live and eligible, instead of electing one (a restarted node keeps the owners it
    /// finds); a known VIP adopts the claim if it wins ([`Placement::adopt`]).
    pub fn put_vip_claimed(
        &mut self,
        vip: IpAddr,
        eligible: Eligible,
        claim: Option<Claim>,
    ) -> Vec<Move> {
        let mut moves = Vec::new();
        if self.vips.get(&vip) != Some(&eligible) {
            let keep = self.owners.get(&vip).is_some_and(|o| eligible.allows(o));
            self.vips.insert(vip, eligible);
            if !keep {
                // A claim older than what this node knows of the VIP is stale.
                let known = self.epochs.get(&vip).copied().unwrap_or(0);
                let fits = claim.as_ref().filter(|c| {
                    c.epoch >= known
                        && self.live.contains(&c.node)
                        && self.vips[&vip].allows(&c.node)
                });
                match fits {
                    Some(c) => self.set(vip, Some(c.node.clone()), Some(c.epoch), &mut moves),
                    None => self.elect_into(vip, &mut moves),
                }
                return moves;
            }
        }
        if let Some(c) = claim {
            moves.extend(self.adopt([(vip, c)]));
        }
        moves
    }

    /// One VIP gone: its owner stops answering.
    pub fn remove_vip(&mut self, vip: IpAddr) -> Vec<Move> {
        let mut moves = Vec::new();
        if self.vips.remove(&vip).is_some() {
            self.set(vip, None, None, &mut moves);
            self.epochs.remove(&vip);
        }
        moves
    }

    /// Live nodes changed: VIPs of nodes that died move; VIPs that had no owner get one from
    /// the nodes that joined. Nothing else moves: a node that comes back takes nothing back.
    pub fn set_live(&mut self, live: BTreeSet<NodeName>) -> Vec<Move> {
        let mut moves = Vec::new();
        let died: Vec<NodeName> = self.live.difference(&live).cloned().collect();
        let joined = live.difference(&self.live).next().is_some();
        self.live = live;
        for node in died {
            let theirs: Vec<IpAddr> = self
                .owned
                .get(&node)
                .map(|s| s.iter().copied().collect())
                .unwrap_or_default();
            for vip in theirs {
                self.elect_into(vip, &mut moves);
            }
        }
        if joined {
            let orphans: Vec<IpAddr> = self
                .vips
                .keys()
                .filter(|v| !self.owners.contains_key(*v))
                .copied()
                .collect();
            for vip in orphans {
                self.elect_into(vip, &mut moves);
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

    /// Give `vip` to the best live eligible node (or none), a new epoch if that moves it.
    fn elect_into(&mut self, vip: IpAddr, moves: &mut Vec<Move>) {
        let to = self.elect(vip);
        self.set(vip, to, None, moves);
    }

    /// Make `to` the owner of `vip`; a change of owner takes `epoch`, or the next one.
    fn set(
        &mut self,
        vip: IpAddr,
        to: Option<NodeName>,
        epoch: Option<u64>,
        moves: &mut Vec<Move>,
    ) {
        // Untouched, the owners stay the same snapshot (a write of the same owner copies).
        if self.owners.get(&vip) == to.as_ref() {
            return;
        }
        let before = self.epochs.get(&vip).copied().unwrap_or(0);
        let from = match &to {
            Some(n) => self.owners.insert(vip, n.clone()),
            None => self.owners.remove(&vip),
        };
        if from == to {
            return;
        }
        if let Some(j) = &mut self.journal {
            j.entry(vip).or_insert_with(|| {
                from.as_ref().map(|n| Claim {
                    node: n.clone(),
                    epoch: before,
                })
            });
        }
        if to.is_some() {
            let next = self.epochs.get(&vip).map_or(1, |e| e + 1);
            self.epochs.insert(vip, epoch.unwrap_or(next));
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
#[path = "placement_tests.rs"]
mod tests;
