//! Which nodes may answer ARP/ND for a VIP as MetalLB's `L2Advertisement`s say it (MetalLB's
//! rules, so its users' objects mean the same here):
//!
//! - a snapshot without any `L2Advertisement` changes nothing: every VIP is announced, as
//!   vipflow does by default;
//! - once there is one, a VIP inside a pool (a `VipPool`, or MetalLB's `IPAddressPool` read as
//!   one) is announced only when an advertisement selects its pool, by name (`ipAddressPools`)
//!   or by label (`ipAddressPoolSelectors`; one that names and selects none selects every
//!   pool), and only by the nodes one of those advertisements admits (`nodeSelectors`, ORed;
//!   none: every node). Several advertisements of one pool add up: the union of their nodes;
//! - a VIP outside every pool (an `externalIPs` address no pool holds) is announced as without
//!   them: advertisements speak for pools only.
//!
//! This comes on top of the rest of [`super::eligibility`] (a pool's own `nodeSelectors`, live
//! nodes, the ready endpoints of externalTrafficPolicy Local Services). A pool whose addresses
//! cannot be read holds no VIP here (the allocator says why).

use super::exclude::IpRange;
use crate::announce::placement::NodeName;
use crate::ipam::pool::Pool;
use crate::model::Objects;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

/// The nodes the advertisements of one pool let announce its VIPs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum L2Nodes {
    /// No advertisement selects the pool: no node announces its VIPs over L2.
    Unadvertised,
    /// One without node selectors does: every node.
    Every,
    /// Only these (the union over the advertisements).
    Only(Arc<BTreeSet<NodeName>>),
}

/// Why the `L2Advertisement`s keep a node from announcing a VIP.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum L2Reason {
    /// No `L2Advertisement` selects the VIP's pool: no node announces it over L2.
    Unadvertised { pool: Arc<str> },
    /// The ones that select the pool leave this node out.
    NodeNotSelected { pool: Arc<str> },
}

impl fmt::Display for L2Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            L2Reason::Unadvertised { pool } => {
                write!(f, "no L2Advertisement selects its pool {pool}")
            }
            L2Reason::NodeNotSelected { pool } => write!(
                f,
                "the nodeSelectors of the L2Advertisements that select its pool {pool} leave this node out"
            ),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct L2Pool {
    name: Arc<str>,
    ranges: Vec<IpRange>,
    nodes: L2Nodes,
}

/// Every pool of a snapshot with `L2Advertisement`s, and the nodes they let announce it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct L2Pools {
    pools: Vec<L2Pool>,
}

impl L2Pools {
    /// Read the snapshot's pools, `L2Advertisement`s and Nodes; `None` when it has no
    /// `L2Advertisement`, so every VIP is announced as vipflow does without them.
    pub fn of(objects: &Objects) -> Option<L2Pools> {
        let ads = &objects.l2_advertisements;
        if ads.is_empty() {
            return None;
        }
        let no_labels = BTreeMap::new();
        // Each advertisement's nodes, read once; `None`: every node.
        let admitted: Vec<Option<Vec<NodeName>>> = ads
            .iter()
            .map(|a| {
                (!a.spec.node_selectors.is_empty()).then(|| {
                    objects
                        .nodes
                        .iter()
                        .filter(|n| {
                            a.spec
                                .admits_node(n.metadata.labels.as_ref().unwrap_or(&no_labels))
                        })
                        .filter_map(|n| n.metadata.name.as_deref().map(NodeName::from))
                        .collect()
                })
            })
            .collect();
        let pools = objects
            .pools
            .iter()
            .filter_map(|object| {
                let pool = Pool::of(object.to_spec());
                if pool.ranges.is_empty() {
                    return None;
                }
                let labels = object.metadata.labels.as_ref().unwrap_or(&no_labels);
                let mut selected = false;
                let mut every = false;
                let mut union: BTreeSet<NodeName> = BTreeSet::new();
                for (a, nodes) in ads.iter().zip(&admitted) {
                    if !a.spec.selects_pool(pool.name(), labels) {
                        continue;
                    }
                    selected = true;
                    match nodes {
                        None => every = true,
                        Some(n) => union.extend(n.iter().cloned()),
                    }
                }
                let nodes = match (selected, every) {
                    (false, _) => L2Nodes::Unadvertised,
                    (true, true) => L2Nodes::Every,
                    (true, false) => L2Nodes::Only(Arc::new(union)),
                };
                Some(L2Pool {
                    name: Arc::from(pool.name()),
                    ranges: pool.ranges,
                    nodes,
                })
            })
            .collect();
        Some(L2Pools { pools })
    }

    /// The pool that holds `vip` and the nodes its advertisements admit; `None` when no pool
    /// holds it (announced as without advertisements). Pools may not overlap: the first that
    /// holds it speaks for it.
    pub fn of_vip(&self, vip: IpAddr) -> Option<(&Arc<str>, &L2Nodes)> {
        self.pools
            .iter()
            .find(|p| p.ranges.iter().any(|r| r.contains(vip)))
            .map(|p| (&p.name, &p.nodes))
    }

    /// Why the advertisements keep `node` from announcing `vip`, if they do.
    pub fn reason(&self, vip: IpAddr, node: &str) -> Option<L2Reason> {
        let (pool, nodes) = self.of_vip(vip)?;
        match nodes {
            L2Nodes::Unadvertised => Some(L2Reason::Unadvertised {
                pool: Arc::clone(pool),
            }),
            L2Nodes::Only(n) if !n.contains(node) => Some(L2Reason::NodeNotSelected {
                pool: Arc::clone(pool),
            }),
            L2Nodes::Every | L2Nodes::Only(_) => None,
        }
    }
}

#[cfg(test)]
#[path = "l2_selection_tests.rs"]
mod tests;
