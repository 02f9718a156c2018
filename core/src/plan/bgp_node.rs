//! What this node wants FRR to originate after each snapshot: the prefixes of every VIP it may
//! carry from a pool a `BGPAdvertisement` selects (see [`super::bgp_selection`] for which
//! pools, nodes and prefixes, and [`super::bgp`] for which nodes carry a VIP).
//!
//! The set is what the plan allows; the agent's BGP task adds the dataplane gate (a route goes
//! out once the VIP's flows are on the bridge) before FRR is told.

use super::bgp::BgpNode;
use super::bgp_selection::BgpPools;
use super::eligibility::Eligibility;
use super::service_index::ServiceIndex;
use crate::announce::announcements::{MembershipView, draining, is_live};
use crate::announce::placement::NodeName;
use crate::keys::EXCLUDE_FROM_LOAD_BALANCERS_LABEL;
use crate::model::Objects;
use ipnet::IpNet;
use std::collections::BTreeSet;
use std::sync::Arc;

/// This node's BGP advertisement, kept up to date one snapshot at a time.
pub struct BgpAdvertiser {
    node: String,
    /// Which nodes may carry each VIP: updated with every snapshot, one changed Service at a
    /// time, like the L2 announcer's.
    eligibility: Eligibility,
    /// The last set handed on, shared while it stands.
    last: Arc<BTreeSet<IpNet>>,
}

impl BgpAdvertiser {
    pub fn new(node: &str) -> BgpAdvertiser {
        BgpAdvertiser {
            node: node.into(),
            eligibility: Eligibility::default(),
            last: Arc::default(),
        }
    }

    /// Take the snapshot `services` was just updated with, and what the membership says (who
    /// is live; without a membership, the Nodes' Ready condition). Returns the prefixes this
    /// node advertises (the same `Arc` when they did not change).
    pub fn update(
        &mut self,
        objects: &Objects,
        services: &ServiceIndex,
        members: Option<&MembershipView>,
    ) -> Arc<BTreeSet<IpNet>> {
        self.eligibility.update(objects, services);
        let me = objects
            .nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(self.node.as_str()));
        let live = match members {
            Some(view) => view.live.contains(&NodeName::from(self.node.as_str())),
            None => me.is_some_and(|n| is_live(n)),
        };
        let node = BgpNode {
            name: self.node.clone(),
            live,
            draining: me.is_some_and(|n| draining(n)),
            excluded: me.is_some_and(|n| {
                n.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key(EXCLUDE_FROM_LOAD_BALANCERS_LABEL))
            }),
        };
        let pools = BgpPools::of(objects);
        let mut now = BTreeSet::new();
        if node.live && !node.draining && !node.excluded {
            for vip in services.vips() {
                if !pools.advertises(vip) || !self.eligibility.of(vip).allows(&node.name) {
                    continue;
                }
                let local = self.eligibility.is_local(vip);
                now.extend(pools.prefixes(vip, local, &node.name));
            }
        }
        if *self.last != now {
            self.last = Arc::new(now);
        }
        Arc::clone(&self.last)
    }
}

#[cfg(test)]
#[path = "bgp_node_tests.rs"]
mod tests;
