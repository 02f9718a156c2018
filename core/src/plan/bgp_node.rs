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
use crate::announce::announcements::{MembershipView, cordoned, draining, excluded, is_ready};
use crate::announce::placement::NodeName;
use crate::model::Objects;
use ipnet::IpNet;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

/// Why this node advertises a VIP of a BGP pool, or why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BgpReason {
    /// Advertised (once the node's bridges carry it).
    Advertised,
    /// Still advertised, with the graceful-shutdown community, while this node's drain hold
    /// lasts: the routers move the traffic to the other nodes before the route goes.
    DrainingGracefully,
    /// externalTrafficPolicy Local, and no ready endpoint on this node.
    NoLocalEndpoint,
    /// The pool's or the advertisement's node selectors leave this node out.
    NotSelected,
    /// This node is not live (its agent or its Ready condition says so).
    NodeNotLive,
    /// This node is marked for drain.
    NodeDraining,
    /// This node is cordoned and its agent stops: the node is going away, its routes went.
    NodeLeaving,
    /// This node is labelled `node.kubernetes.io/exclude-from-external-load-balancers`.
    NodeExcluded,
}

impl BgpReason {
    /// As the status document and `vipflow plan` write it.
    pub fn as_str(self) -> &'static str {
        match self {
            BgpReason::Advertised => "advertised",
            BgpReason::DrainingGracefully => {
                "advertised with the graceful-shutdown community until the drain hold ends"
            }
            BgpReason::NoLocalEndpoint => "no ready local endpoint (externalTrafficPolicy Local)",
            BgpReason::NotSelected => "node selectors leave this node out",
            BgpReason::NodeNotLive => "this node is not live",
            BgpReason::NodeDraining => "this node is draining",
            BgpReason::NodeLeaving => "this node is cordoned and its agent stopped advertising",
            BgpReason::NodeExcluded => "this node is excluded from external load balancers",
        }
    }
}

impl std::fmt::Display for BgpReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What this node advertises after one snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeBgp {
    /// The prefixes (the same `Arc` while unchanged).
    pub prefixes: Arc<BTreeSet<IpNet>>,
    /// Those of externalTrafficPolicy Local VIPs (the same `Arc` while unchanged): what only
    /// this node may advertise (frr-k8s mode writes them in the node's own object).
    pub local: Arc<BTreeSet<IpNet>>,
    /// Every VIP of a pool a `BGPAdvertisement` selects, and whether this node advertises it
    /// (the same `Arc` while unchanged).
    pub vips: Arc<BTreeMap<IpAddr, BgpReason>>,
    /// The node's routes go out less preferred (BGP graceful shutdown) before they go: it is
    /// marked for drain, or cordoned while its agent stops.
    pub graceful_shutdown: bool,
}

/// This node's BGP advertisement, kept up to date one snapshot at a time.
pub struct BgpAdvertiser {
    node: String,
    /// Which nodes may carry each VIP: updated with every snapshot, one changed Service at a
    /// time, like the L2 announcer's.
    eligibility: Eligibility,
    /// The last set handed on, shared while it stands.
    last: NodeBgp,
    /// This node's drain hold lasts: a draining node keeps its routes for now (FRR sends them
    /// with the graceful-shutdown community, [`crate::bgp::frr_config`]).
    hold: bool,
    /// The agent stops ([`BgpAdvertiser::stop`]); and its hand-over is over.
    stopping: bool,
    withdrawn: bool,
    /// [`BgpAdvertiser::collect_cluster_vips`], and what the last update collected.
    collect_cluster: bool,
    cluster: Vec<(IpAddr, crate::announce::placement::Eligible)>,
    /// The pools BGP advertises, as of the last update.
    pools: BgpPools,
}

impl BgpAdvertiser {
    pub fn new(node: &str) -> BgpAdvertiser {
        BgpAdvertiser {
            node: node.into(),
            eligibility: Eligibility::default(),
            last: NodeBgp::default(),
            hold: false,
            stopping: false,
            withdrawn: false,
            collect_cluster: false,
            cluster: Vec::new(),
            pools: BgpPools::default(),
        }
    }

    /// The agent stops (`withdrawn`: and its hand-over is over). On a cordoned Node (being
    /// drained for maintenance) that means the node is going away: its routes go out in
    /// graceful shutdown until the hand-over is over, then go. On any other Node the agent
    /// restarts in place and FRR keeps its routes (a rolling upgrade moves nothing).
    pub fn stop(&mut self, withdrawn: bool) {
        self.stopping = true;
        self.withdrawn = withdrawn;
    }

    /// Whether this node's drain hold lasts: while it does, a draining node still advertises
    /// (less preferred); after it, nothing.
    pub fn hold_while_draining(&mut self, hold: bool) {
        self.hold = hold;
    }

    /// Take the snapshot `services` was just updated with, and what the membership says (who
    /// is live; without a membership, the Nodes' Ready condition). Returns what this node
    /// advertises and why (the same `Arc`s when they did not change).
    pub fn update(
        &mut self,
        objects: &Objects,
        services: &ServiceIndex,
        members: Option<&MembershipView>,
    ) -> NodeBgp {
        self.eligibility.update(objects, services);
        let me = objects
            .nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(self.node.as_str()));
        let live = match members {
            Some(view) => view.live.contains(&NodeName::from(self.node.as_str())),
            // The drain mark is taken apart below: a draining node still advertises during
            // its drain hold.
            None => me.is_some_and(|n| is_ready(n)),
        };
        let node = BgpNode {
            name: self.node.clone(),
            live,
            draining: me.is_some_and(|n| draining(n)),
            excluded: me.is_some_and(|n| excluded(n)),
        };
        let pools = BgpPools::of(objects);
        // The most telling first.
        // A drain mark goes through its drain hold; an agent stopping on a cordoned Node through
        // its hand-over (the drain mark, when both, decides).
        let leaving = self.stopping && !node.draining && me.is_some_and(|n| cordoned(n));
        let graceful = (node.draining && self.hold) || (leaving && !self.withdrawn);
        let node_reason = if node.draining && !graceful {
            Some(BgpReason::NodeDraining)
        } else if leaving && !graceful {
            Some(BgpReason::NodeLeaving)
        } else if node.excluded {
            Some(BgpReason::NodeExcluded)
        } else if !node.live {
            Some(BgpReason::NodeNotLive)
        } else {
            None
        };
        let mut now = BTreeSet::new();
        let mut local_now = BTreeSet::new();
        let mut vips = BTreeMap::new();
        let mut cluster = Vec::new();
        for vip in services.vips() {
            if !pools.advertises(vip) {
                continue;
            }
            let local = self.eligibility.is_local(vip);
            // Who may carry it: asked once, for this node and for the shared objects.
            let eligible = (node_reason.is_none() || (self.collect_cluster && !local))
                .then(|| self.eligibility.of(vip));
            if self.collect_cluster
                && !local
                && let Some(e) = &eligible
            {
                cluster.push((vip, e.clone()));
            }
            let reason = if let Some(r) = node_reason {
                r
            } else if !eligible.as_ref().is_some_and(|e| e.allows(&node.name)) {
                if local {
                    BgpReason::NoLocalEndpoint
                } else {
                    BgpReason::NotSelected
                }
            } else {
                let prefixes = pools.prefixes(vip, local, &node.name);
                if prefixes.is_empty() {
                    BgpReason::NotSelected
                } else {
                    if local {
                        local_now.extend(prefixes.iter().copied());
                    }
                    now.extend(prefixes);
                    if graceful {
                        BgpReason::DrainingGracefully
                    } else {
                        BgpReason::Advertised
                    }
                }
            };
            vips.insert(vip, reason);
        }
        if *self.last.prefixes != now {
            self.last.prefixes = Arc::new(now);
        }
        if *self.last.local != local_now {
            self.last.local = Arc::new(local_now);
        }
        if *self.last.vips != vips {
            self.last.vips = Arc::new(vips);
        }
        self.last.graceful_shutdown = graceful;
        self.cluster = cluster;
        self.pools = pools;
        self.last.clone()
    }

    /// Keep, with each update, every externalTrafficPolicy Cluster VIP BGP advertises and the
    /// nodes that may carry it ([`BgpAdvertiser::cluster_vips`]): the shared frr-k8s objects
    /// are made of them.
    pub fn collect_cluster_vips(&mut self, on: bool) {
        self.collect_cluster = on;
        if !on {
            self.cluster = Vec::new();
        }
    }

    /// The pools BGP advertises, each with its advertisements' terms, as of the last
    /// [`BgpAdvertiser::update`].
    pub fn pools(&self) -> &BgpPools {
        &self.pools
    }

    /// Every externalTrafficPolicy Cluster VIP that BGP advertises, with the nodes that may
    /// carry it, as of the last [`BgpAdvertiser::update`] (empty unless collected).
    pub fn cluster_vips(&self) -> &[(IpAddr, crate::announce::placement::Eligible)] {
        &self.cluster
    }
}

#[cfg(test)]
#[path = "bgp_node_tests.rs"]
mod tests;
