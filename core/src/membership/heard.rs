//! What this node heard of the owners' claims, sans IO: the best claim per VIP
//! ([`Claim::beats`]), and the members it has seen join but not heard out yet.
//!
//! A member that joins (a restarted agent, a node back from a partition or a switch restart)
//! is published to the placement only once its complete claims arrived, or after
//! [`CLAIMS_WAIT_MS`]: the placement then sees the member and what it owns at once, and neither
//! side announces a VIP the other took meanwhile.

use super::claims::ClaimsMessage;
use crate::announce::announcements::MembershipView;
use crate::announce::placement::{Claim, NodeName};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

/// How long a member that joined is kept from the placement while its claims are awaited.
pub const CLAIMS_WAIT_MS: u64 = 1_000;

/// The claims heard, and the members waited for.
#[derive(Debug, Clone)]
pub struct HeardClaims {
    me: NodeName,
    claims: imbl::OrdMap<IpAddr, Claim>,
    /// Members seen live whose complete claims have not arrived: until when they are waited
    /// for.
    waiting: BTreeMap<NodeName, u64>,
    /// The live set last seen.
    live: BTreeSet<NodeName>,
    /// Members heard out since they last joined.
    heard: BTreeSet<NodeName>,
}

impl HeardClaims {
    pub fn new(me: &str) -> HeardClaims {
        let me = NodeName::from(me);
        HeardClaims {
            live: BTreeSet::from([me.clone()]),
            me,
            claims: imbl::OrdMap::new(),
            waiting: BTreeMap::new(),
            heard: BTreeSet::new(),
        }
    }

    /// The membership's live set is now `live`: members new to it are waited for, and the
    /// claims of those gone are dropped (their VIPs are elected anew). Returns the new members,
    /// to send this node's claims to.
    pub fn members(&mut self, live: &BTreeSet<NodeName>, now_ms: u64) -> Vec<NodeName> {
        let joined: Vec<NodeName> = live
            .difference(&self.live)
            .filter(|n| **n != self.me)
            .cloned()
            .collect();
        let gone: Vec<NodeName> = self.live.difference(live).cloned().collect();
        for g in &gone {
            self.waiting.remove(g);
            self.heard.remove(g);
        }
        if !gone.is_empty() {
            let stale: Vec<IpAddr> = self
                .claims
                .iter()
                .filter(|(_, c)| gone.contains(&c.node))
                .map(|(v, _)| *v)
                .collect();
            for v in stale {
                self.claims.remove(&v);
            }
        }
        for j in &joined {
            if !self.heard.contains(j) {
                self.waiting.insert(j.clone(), now_ms + CLAIMS_WAIT_MS);
            }
        }
        self.live = live.clone();
        joined
    }

    /// A claims datagram from a member: its claims are merged, and a complete set ends the
    /// wait for it. Returns whether the view changed.
    pub fn heard(&mut self, msg: &ClaimsMessage) -> bool {
        let node = NodeName::from(msg.node.as_str());
        if node == self.me {
            return false;
        }
        let mut changed = false;
        for (vip, epoch) in &msg.claims {
            let c = Claim {
                node: node.clone(),
                epoch: *epoch,
            };
            let better = match self.claims.get(vip) {
                None => true,
                Some(old) => c.beats(*vip, old) || (old.node == c.node && c.epoch > old.epoch),
            };
            if better {
                self.claims.insert(*vip, c);
                changed = true;
            }
        }
        if msg.complete {
            self.heard.insert(node.clone());
            if self.waiting.remove(&node).is_some() {
                changed = true;
            }
        }
        changed
    }

    /// End the waits that ran out by `now_ms`; whether any did.
    pub fn expire(&mut self, now_ms: u64) -> bool {
        let before = self.waiting.len();
        self.waiting.retain(|_, until| *until > now_ms);
        self.waiting.len() != before
    }

    /// When the next wait runs out.
    pub fn next_expiry(&self) -> Option<u64> {
        self.waiting.values().min().copied()
    }

    /// Whether every member seen was heard out (or waited for long enough).
    pub fn all_heard(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The view for the placement: the live members but those still waited for, and the
    /// claims heard.
    pub fn view(&self) -> MembershipView {
        let live: BTreeSet<NodeName> = self
            .live
            .iter()
            .filter(|n| !self.waiting.contains_key(*n))
            .cloned()
            .collect();
        MembershipView {
            live: Arc::new(live),
            claims: self.claims.clone(),
            isolated: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> BTreeSet<NodeName> {
        n.iter().map(|x| NodeName::from(*x)).collect()
    }

    fn msg(node: &str, complete: bool, claims: &[(&str, u64)]) -> ClaimsMessage {
        ClaimsMessage {
            node: node.into(),
            complete,
            claims: claims
                .iter()
                .map(|(v, e)| (v.parse().unwrap(), *e))
                .collect(),
        }
    }

    #[test]
    fn a_joiner_is_published_once_heard_out_or_after_the_wait() {
        let mut h = HeardClaims::new("a");
        let joined = h.members(&names(&["a", "b", "c"]), 1_000);
        assert_eq!(joined, Vec::from_iter(names(&["b", "c"])));
        assert_eq!(*h.view().live, names(&["a"]));
        // b's claims, in two datagrams: only the complete set ends the wait.
        assert!(h.heard(&msg("b", false, &[("10.0.0.1", 2)])));
        assert_eq!(*h.view().live, names(&["a"]));
        assert!(h.heard(&msg("b", true, &[])));
        assert_eq!(*h.view().live, names(&["a", "b"]));
        assert!(!h.all_heard());
        // c never answers: published after the wait.
        assert_eq!(h.next_expiry(), Some(1_000 + CLAIMS_WAIT_MS));
        assert!(!h.expire(1_500));
        assert!(h.expire(1_000 + CLAIMS_WAIT_MS));
        assert_eq!(*h.view().live, names(&["a", "b", "c"]));
        assert!(h.all_heard());
        let v = h.view();
        assert_eq!(v.claims.len(), 1);
    }

    #[test]
    fn the_later_claim_is_kept_and_a_gone_members_claims_are_dropped() {
        let mut h = HeardClaims::new("a");
        h.members(&names(&["a", "b", "c"]), 0);
        h.heard(&msg("b", true, &[("10.0.0.1", 2), ("10.0.0.2", 1)]));
        // c took 10.0.0.1 later; an older claim from b changes nothing.
        assert!(h.heard(&msg("c", true, &[("10.0.0.1", 3)])));
        assert!(!h.heard(&msg("b", false, &[("10.0.0.1", 2)])));
        let v = h.view();
        assert_eq!(
            v.claims[&"10.0.0.1".parse::<IpAddr>().unwrap()]
                .node
                .as_ref(),
            "c"
        );
        // c goes: its claims with it; b comes back later and is waited for again.
        h.members(&names(&["a", "b"]), 10);
        assert!(
            h.view()
                .claims
                .get(&"10.0.0.1".parse::<IpAddr>().unwrap())
                .is_none()
        );
        h.members(&names(&["a"]), 20);
        h.members(&names(&["a", "b"]), 30);
        assert_eq!(*h.view().live, names(&["a"]));
    }
}
