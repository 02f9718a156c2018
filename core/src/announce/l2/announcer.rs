//! The L2 announcer: one owner per VIP ([`Placement`], sticky rendezvous hashing), which
//! answers ARP/ND for it on every bridge that announces and tells its neighbors when it takes
//! it.

use crate::announce::placement::{Eligible, NodeName, Placement};
use crate::announce::{Announcer, Announcing, Spread};
use crate::plan::flows::{FlowKey, answer_keys};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

/// What this node emits as the L2 announcer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct L2Emits {
    /// For each bridge that answers ARP/ND (config order), the answer flows of the VIPs this
    /// node owns ([`answer_keys`]).
    pub answers: Vec<(String, Vec<FlowKey>)>,
    /// The VIPs this node took at this update: once a bridge holds their answers, it sends a
    /// gratuitous ARP or unsolicited neighbor advertisement for each out of its uplink
    /// ([`super::announcement`]).
    pub takeovers: Vec<IpAddr>,
}

/// One owner per VIP, answering from this node's announcing bridges. A node that missed moves
/// (cut off, restarted) learns the owners from the others' claims, which
/// [`crate::announce::announcements::Announcements`] adopts; this announcer places from what
/// it saw.
#[derive(Debug, Clone)]
pub struct L2Announcer {
    node: NodeName,
    bridges: Vec<String>,
    placement: Placement,
}

impl L2Announcer {
    /// For the node named `node`, answering on the bridges `announcing` names.
    pub fn new(node: &str, announcing: &Announcing) -> L2Announcer {
        L2Announcer {
            node: Arc::from(node),
            bridges: announcing.l2_bridges().map(String::from).collect(),
            placement: Placement::default(),
        }
    }
}

impl Announcer for L2Announcer {
    type Emits = L2Emits;

    fn spread(&self) -> Spread {
        Spread::OneOwner
    }

    fn update(&mut self, vips: &BTreeMap<IpAddr, Eligible>, live: &BTreeSet<NodeName>) -> L2Emits {
        let before: BTreeSet<IpAddr> = self.placement.owned_by(&self.node).copied().collect();
        // The live set first: a dead owner's VIPs go to the nodes live now.
        self.placement.set_live(live.clone());
        self.placement.set_vips(vips.clone());
        let here = self.here();
        let keys: Vec<FlowKey> = here.iter().flat_map(|v| answer_keys(*v)).collect();
        L2Emits {
            answers: self
                .bridges
                .iter()
                .map(|b| (b.clone(), keys.clone()))
                .collect(),
            takeovers: here.into_iter().filter(|v| !before.contains(v)).collect(),
        }
    }

    fn here(&self) -> Vec<IpAddr> {
        self.placement.owned_by(&self.node).copied().collect()
    }
}
