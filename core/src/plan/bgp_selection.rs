//! Which VIPs BGP advertises, from which nodes and as which prefixes, as the `BGPAdvertisement`s
//! say (MetalLB's rules, so its users' objects mean the same here):
//!
//! - an advertisement selects pools by name (`ipAddressPools`) and by label
//!   (`ipAddressPoolSelectors`); one that names and selects none selects every pool;
//! - a VIP goes out over BGP when a pool that holds it is selected by an advertisement; several
//!   advertisements may select one pool, and each adds its terms;
//! - an advertisement's `nodeSelectors` narrow the nodes that advertise under it (none: every
//!   node); a node advertises a VIP when one of its advertisements lets it;
//! - `aggregationLength` (IPv4) and `aggregationLengthV6` advertise an externalTrafficPolicy
//!   Cluster VIP as the network of that length holding it, so a pool's VIPs go out as one route;
//!   a Local VIP always goes out as its own host route, since only some nodes carry it.
//!
//! A pool that cannot be used (a bad address entry) advertises nothing; the allocator says why.

use crate::bgp::objects::BgpAdvertisement;
use crate::ipam::pool::Pool;
use crate::ipam::selector;
use crate::model::Objects;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use k8s_openapi::api::core::v1 as core;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

/// One advertisement's terms, as the prefixes it covers go out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdvertisementTerms {
    /// The `BGPAdvertisement`'s name.
    pub name: String,
    pub aggregation_length: Option<u8>,
    pub aggregation_length_v6: Option<u8>,
    pub local_pref: Option<u32>,
    pub communities: Vec<String>,
    /// The `BGPPeer`s by name; empty: every peer.
    pub peers: Vec<String>,
    /// The nodes that advertise under these terms; `None`: every node.
    pub nodes: Option<Arc<std::collections::BTreeSet<String>>>,
}

impl AdvertisementTerms {
    /// Whether `node` advertises under these terms.
    pub fn allows(&self, node: &str) -> bool {
        self.nodes.as_ref().is_none_or(|n| n.contains(node))
    }

    /// The prefix `vip` goes out as: its host route, or for a Cluster VIP with an aggregation
    /// length, the network of that length that holds it.
    pub fn prefix(&self, vip: IpAddr, local: bool) -> IpNet {
        let aggregate = |len: Option<u8>| if local { None } else { len };
        let net = match vip {
            IpAddr::V4(a) => aggregate(self.aggregation_length)
                .and_then(|len| Ipv4Net::new(a, len).ok())
                .map(|n| IpNet::V4(n.trunc())),
            IpAddr::V6(a) => aggregate(self.aggregation_length_v6)
                .and_then(|len| Ipv6Net::new(a, len).ok())
                .map(|n| IpNet::V6(n.trunc())),
        };
        net.unwrap_or_else(|| IpNet::from(vip))
    }
}

/// The pools BGP advertises, each with the terms of every advertisement that selects it.
#[derive(Debug, Clone, Default)]
pub struct BgpPools {
    pools: Vec<(Pool, Vec<Arc<AdvertisementTerms>>)>,
}

impl BgpPools {
    /// Read the snapshot's pools, advertisements and Nodes.
    pub fn of(objects: &Objects) -> BgpPools {
        let terms: Vec<(&BgpAdvertisement, Arc<AdvertisementTerms>)> = objects
            .bgp
            .advertisements
            .iter()
            .map(|a| (a, Arc::new(terms_of(a, &objects.nodes))))
            .collect();
        let no_labels = BTreeMap::new();
        let pools = objects
            .pools
            .iter()
            .filter_map(|object| {
                let pool = Pool::of(object.to_spec());
                if pool.problem.is_some() {
                    return None;
                }
                let labels = object.metadata.labels.as_ref().unwrap_or(&no_labels);
                let selected: Vec<Arc<AdvertisementTerms>> = terms
                    .iter()
                    .filter(|(a, _)| selects(a, pool.name(), labels))
                    .map(|(_, t)| Arc::clone(t))
                    .collect();
                (!selected.is_empty()).then_some((pool, selected))
            })
            .collect();
        BgpPools { pools }
    }

    /// Every advertised pool with the terms of the advertisements that select it.
    pub fn each(&self) -> impl Iterator<Item = (&Pool, &[Arc<AdvertisementTerms>])> {
        self.pools.iter().map(|(p, t)| (p, t.as_slice()))
    }

    /// The terms `vip` goes out under: empty when no advertised pool holds it.
    pub fn terms(&self, vip: IpAddr) -> &[Arc<AdvertisementTerms>] {
        self.pools
            .iter()
            .find(|(p, _)| p.contains(vip))
            .map_or(&[], |(_, t)| t.as_slice())
    }

    /// Whether `vip` goes out over BGP at all.
    pub fn advertises(&self, vip: IpAddr) -> bool {
        !self.terms(vip).is_empty()
    }

    /// The prefixes `node` advertises `vip` as (one per distinct aggregation among its terms);
    /// empty when none of its advertisements lets `node` advertise it.
    pub fn prefixes(&self, vip: IpAddr, local: bool, node: &str) -> Vec<IpNet> {
        let mut out: Vec<IpNet> = self
            .terms(vip)
            .iter()
            .filter(|t| t.allows(node))
            .map(|t| t.prefix(vip, local))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// Whether advertisement `a` selects the pool `name` with `labels`.
fn selects(a: &BgpAdvertisement, name: &str, labels: &BTreeMap<String, String>) -> bool {
    selector::selects_pool(
        &a.spec.ip_address_pools,
        &a.spec.ip_address_pool_selectors,
        name,
        labels,
    )
}

fn terms_of(a: &BgpAdvertisement, nodes: &[Arc<core::Node>]) -> AdvertisementTerms {
    let spec = &a.spec;
    let selected = (!spec.node_selectors.is_empty()).then(|| {
        Arc::new(
            nodes
                .iter()
                .filter(|n| {
                    let labels = n.metadata.labels.clone().unwrap_or_default();
                    spec.node_selectors
                        .iter()
                        .any(|s| selector::check(s).is_ok() && selector::matches(s, &labels))
                })
                .filter_map(|n| n.metadata.name.clone())
                .collect(),
        )
    });
    AdvertisementTerms {
        name: a.metadata.name.clone().unwrap_or_default(),
        aggregation_length: spec.aggregation_length,
        aggregation_length_v6: spec.aggregation_length_v6,
        local_pref: spec.local_pref,
        communities: spec.communities.clone(),
        peers: spec.peers.clone(),
        nodes: selected,
    }
}

#[cfg(test)]
#[path = "bgp_selection_tests.rs"]
mod tests;
