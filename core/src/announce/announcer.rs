//! What an announcer implements: how it spreads a VIP over the nodes that may carry it, and
//! what this node emits for the VIPs it announces. Who may carry a VIP (its eligible nodes)
//! and who is live are decided before an announcer is asked, the same for every announcer.

use super::placement::{Eligible, NodeName};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// How an announcer spreads a VIP over the live nodes that may carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spread {
    /// One node, the VIP's owner, which keeps it while it lives and stays eligible; when it
    /// dies the VIP moves to one other node. Only one node may answer ARP/ND for an address,
    /// so the nodes must agree on the owner: they do through the membership's claims, and a
    /// successor watches each owner ([`crate::membership`]). L2.
    OneOwner,
    /// Every one of them: the router spreads the flows over them (ECMP) and stops sending to a
    /// node whose session ends, so there is no owner to agree on and nothing moves. BGP.
    EveryEligible,
}

/// An announcer, as this node runs it.
pub trait Announcer {
    /// What this node emits for the VIPs it announces.
    type Emits;

    /// How this announcer spreads a VIP.
    fn spread(&self) -> Spread;

    /// Bring the announcer up to date with `vips`, the VIPs it announces, each with the nodes
    /// that may carry it (a pool's node selectors; for externalTrafficPolicy Local the nodes
    /// with a ready endpoint), and `live`, the nodes that may announce now (alive, not marked
    /// for drain); returns what this node emits now.
    fn update(
        &mut self,
        vips: &BTreeMap<IpAddr, Eligible>,
        live: &BTreeSet<NodeName>,
    ) -> Self::Emits;

    /// The VIPs this node announces, as of the last update, in VIP order.
    fn here(&self) -> Vec<IpAddr>;
}

#[cfg(test)]
#[path = "announcer_tests.rs"]
mod tests;
