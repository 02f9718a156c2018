//! The BGP announcer: every live eligible node whose dataplane carries a VIP advertises it,
//! as the prefixes [`advertised`] gives, for FRR ([`crate::plan::bgp::frr_batch`]).

use super::announcer::{Announcer, Spread};
use super::placement::{Eligible, NodeName};
use crate::plan::bgp::{BgpNode, BgpVip, advertised};
use ipnet::IpNet;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// Every eligible node advertises, gated by this node's dataplane.
#[derive(Debug, Clone)]
pub struct BgpAnnouncer {
    node: BgpNode,
    /// The VIPs this node's dataplane carries.
    carried: BTreeSet<IpAddr>,
    advertised: BTreeSet<IpNet>,
}

impl BgpAnnouncer {
    /// For the node named `node`.
    pub fn new(node: &str) -> BgpAnnouncer {
        BgpAnnouncer {
            node: BgpNode {
                name: node.into(),
                live: false,
                // A node marked for drain is not among the live nodes an update is given.
                draining: false,
                excluded: false,
            },
            carried: BTreeSet::new(),
            advertised: BTreeSet::new(),
        }
    }

    /// This node is labelled `node.kubernetes.io/exclude-from-external-load-balancers`: it
    /// advertises nothing, from the next update.
    pub fn exclude(&mut self, excluded: bool) {
        self.node.excluded = excluded;
    }

    /// The VIPs this node's dataplane carries (flows confirmed on the bridge, rows written,
    /// OVN's dataplane programmed), from the next update: a route that went out before would
    /// draw traffic the node drops.
    pub fn carry(&mut self, vips: BTreeSet<IpAddr>) {
        self.carried = vips;
    }
}

impl Announcer for BgpAnnouncer {
    /// The host prefixes this node advertises.
    type Emits = BTreeSet<IpNet>;

    fn spread(&self) -> Spread {
        Spread::EveryEligible
    }

    fn update(
        &mut self,
        vips: &BTreeMap<IpAddr, Eligible>,
        live: &BTreeSet<NodeName>,
    ) -> BTreeSet<IpNet> {
        self.node.live = live.contains(self.node.name.as_str());
        let vips: Vec<BgpVip> = vips
            .iter()
            .map(|(vip, eligible)| BgpVip {
                vip: *vip,
                // An announcer is given only the VIPs it announces.
                bgp: true,
                eligible: eligible.clone(),
                ready: self.carried.contains(vip),
            })
            .collect();
        self.advertised = advertised(&self.node, &vips);
        self.advertised.clone()
    }

    fn here(&self) -> Vec<IpAddr> {
        self.advertised.iter().map(IpNet::addr).collect()
    }
}
