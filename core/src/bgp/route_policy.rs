//! What a node's routes carry besides their prefix: each `BGPAdvertisement`'s communities and
//! local preference, as one outbound route-map on every neighbor ([`OUTBOUND`]).
//!
//! The route-map matches prefix-lists made of the advertisement's pools, at the lengths its
//! routes go out as (its aggregation length for Cluster VIPs, the host length for Local ones),
//! never of the VIPs themselves: it follows the objects, not the Services, so a VIP that comes
//! or goes changes no policy (a changed route-map waits out FRR's route-map delay timer, a
//! `network` line does not). Each entry goes on to the next (`on-match next`), so a prefix two
//! advertisements cover carries the communities of both; the last entry lets every route out.
//! Local preference only goes to iBGP peers (FRR, as BGP, sends none over eBGP).
//!
//! An advertisement that names its `peers` goes to those only: then every neighbor's outbound
//! routes pass a prefix-list of its own ([`peer_filter`]) made of the entries of the
//! advertisements that go to it (those naming no peer go to every one), so a prefix two
//! advertisements cover goes wherever either sends it.

use super::frr_config::FrrConfigProblem;
use crate::plan::bgp_selection::BgpPools;
use ipnet::{IpNet, Ipv4Subnets, Ipv6Subnets};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::IpAddr;

/// The route-map on every neighbor's outbound routes, when any advertisement sets something.
pub const OUTBOUND: &str = "vipflow-out";

/// One advertisement's attributes and where they apply.
#[derive(Debug, Default)]
pub(crate) struct Attributes {
    pub communities: Vec<String>,
    pub large_communities: Vec<String>,
    pub local_pref: Option<u32>,
    /// The `BGPPeer`s it goes to; empty: every peer.
    pub peers: Vec<String>,
    /// Per family (IPv4 first), the prefix-list entries.
    pub entries: [BTreeSet<String>; 2],
}

impl Attributes {
    fn sets_something(&self) -> bool {
        !self.communities.is_empty()
            || !self.large_communities.is_empty()
            || self.local_pref.is_some()
    }
}

/// What goes on a node's configuration for its advertisements' attributes and peers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoutePolicy {
    /// The prefix-lists and route-map, as configuration lines (before `router bgp`).
    pub text: String,
    /// The outbound route-map [`OUTBOUND`] exists: every neighbor takes it.
    pub route_map: bool,
    /// Some advertisement names its `peers`: each neighbor's outbound routes are filtered by
    /// the prefix-list [`peer_filter`] names for its `BGPPeer`, which lets out the prefixes of
    /// the advertisements that go to that peer.
    pub peer_filters: bool,
}

impl RoutePolicy {
    /// Nothing to configure.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }
}

/// The prefix-list that filters the routes to `BGPPeer` `peer`, per family (`4`, `6`).
pub fn peer_filter(peer: &str, family: &str) -> String {
    format!("vipflow-to-{peer}-{family}")
}

/// The prefix-lists and the route-map for `pools`' advertisements, and the filters for the
/// `BGPPeer`s named `peers` when an advertisement goes to some peers only. What cannot be
/// written (a community that is no `A:B` or `large:A:B:C`) is left out, and said.
pub fn outbound(pools: &BgpPools, peers: &[String]) -> (RoutePolicy, Vec<FrrConfigProblem>) {
    let mut problems = Vec::new();
    let mut ads: BTreeMap<String, Attributes> = BTreeMap::new();
    for (pool, terms) in pools.each() {
        for t in terms {
            let a = ads.entry(t.name.clone()).or_insert_with(|| {
                let mut a = Attributes {
                    local_pref: t.local_pref.filter(|l| *l != 0),
                    peers: t.peers.clone(),
                    ..Attributes::default()
                };
                for c in &t.communities {
                    match community(c) {
                        Some(Community::Standard(v)) => a.communities.push(v),
                        Some(Community::Large(v)) => a.large_communities.push(v),
                        None => problems.push(FrrConfigProblem::BadCommunity {
                            advertisement: t.name.clone(),
                            community: c.clone(),
                        }),
                    }
                }
                a
            });
            for r in &pool.ranges {
                for net in cidrs(r.start(), r.end()) {
                    let (family, host, aggregate) = match net {
                        IpNet::V4(_) => (0, 32, t.aggregation_length),
                        IpNet::V6(_) => (1, 128, t.aggregation_length_v6),
                    };
                    for len in [Some(host), aggregate].into_iter().flatten() {
                        a.entries[family].insert(entry(net, len));
                    }
                }
            }
        }
    }
    let mut policy = RoutePolicy::default();
    let named: Vec<(String, &Attributes)> = ads
        .iter()
        .map(|(name, a)| (format!("vipflow-adv-{name}"), a))
        .collect();
    policy.route_map = write_route_map(&mut policy.text, &named);
    if ads.values().any(|a| !a.peers.is_empty()) {
        // Each peer's routes: those of the advertisements that go to every peer or name it.
        for peer in peers {
            let per_family: [BTreeSet<String>; 2] = std::array::from_fn(|family| {
                ads.values()
                    .filter(|a| a.peers.is_empty() || a.peers.contains(peer))
                    .flat_map(|a| a.entries[family].iter().cloned())
                    .collect()
            });
            write_peer_filter(&mut policy.text, peer, &per_family);
        }
        policy.peer_filters = true;
    }
    (policy, problems)
}

/// The address families as prefix-lists name them, and their tag in list names.
const FAMILIES: [(&str, &str); 2] = [("ip", "4"), ("ipv6", "6")];

/// Append to `out` the outbound route-map [`OUTBOUND`] of `attributes` (each with the base of
/// its prefix-lists' names, `-4`/`-6` added), one entry per family that has prefixes, each
/// going on to the next, and the last letting every route out; those setting nothing are left
/// out. Whether there is a route-map.
pub(crate) fn write_route_map(out: &mut String, attributes: &[(String, &Attributes)]) -> bool {
    let mut seq = 0;
    for (base, a) in attributes.iter().filter(|(_, a)| a.sets_something()) {
        for (family, (kind, tag)) in FAMILIES.iter().enumerate() {
            if a.entries[family].is_empty() {
                continue;
            }
            let list = format!("{base}-{tag}");
            write_list(out, kind, &list, &a.entries[family]);
            seq += 10;
            let _ = writeln!(out, "route-map {OUTBOUND} permit {seq}");
            let _ = writeln!(out, " match {kind} address prefix-list {list}");
            if !a.communities.is_empty() {
                let _ = writeln!(out, " set community {} additive", a.communities.join(" "));
            }
            if !a.large_communities.is_empty() {
                let _ = writeln!(
                    out,
                    " set large-community {} additive",
                    a.large_communities.join(" ")
                );
            }
            if let Some(l) = a.local_pref {
                let _ = writeln!(out, " set local-preference {l}");
            }
            out.push_str(" on-match next\nexit\n!\n");
        }
    }
    if seq > 0 {
        // Every route goes out, with what the entries above set.
        let _ = writeln!(out, "route-map {OUTBOUND} permit 65535\nexit\n!");
    }
    seq > 0
}

/// Append to `out` the outbound filters of the neighbor `peer` names ([`peer_filter`]): per
/// family (IPv4 first) the entries it is sent, or nothing.
pub(crate) fn write_peer_filter(out: &mut String, peer: &str, per_family: &[BTreeSet<String>; 2]) {
    for ((kind, tag), entries) in FAMILIES.iter().zip(per_family) {
        let list = peer_filter(peer, tag);
        if entries.is_empty() {
            let _ = writeln!(out, "{kind} prefix-list {list} seq 5 deny any");
        } else {
            write_list(out, kind, &list, entries);
        }
    }
}

/// Prefix-list `list` of `kind` (`ip`, `ipv6`) permitting `entries`, in order.
fn write_list(out: &mut String, kind: &str, list: &str, entries: &BTreeSet<String>) {
    for (i, e) in entries.iter().enumerate() {
        let _ = writeln!(
            out,
            "{kind} prefix-list {list} seq {} permit {e}",
            (i + 1) * 5
        );
    }
}

pub(crate) enum Community {
    Standard(String),
    Large(String),
}

/// A community as MetalLB writes it: `A:B` (two 16-bit numbers) or `large:A:B:C` (three
/// 32-bit numbers).
pub(crate) fn community(c: &str) -> Option<Community> {
    let parts: Vec<&str> = c.trim().split(':').collect();
    match parts.as_slice() {
        [a, b] if a.parse::<u16>().is_ok() && b.parse::<u16>().is_ok() => {
            Some(Community::Standard(format!("{a}:{b}")))
        }
        ["large", a, b, c]
            if a.parse::<u32>().is_ok() && b.parse::<u32>().is_ok() && c.parse::<u32>().is_ok() =>
        {
            Some(Community::Large(format!("{a}:{b}:{c}")))
        }
        _ => None,
    }
}

/// The CIDRs that make up `start..=end`.
fn cidrs(start: IpAddr, end: IpAddr) -> Vec<IpNet> {
    match (start, end) {
        (IpAddr::V4(s), IpAddr::V4(e)) => Ipv4Subnets::new(s, e, 0).map(IpNet::V4).collect(),
        (IpAddr::V6(s), IpAddr::V6(e)) => Ipv6Subnets::new(s, e, 0).map(IpNet::V6).collect(),
        _ => Vec::new(),
    }
}

/// The prefix-list entry for routes of length `len` inside `net`: `net` itself, the networks
/// of that length in it, or the one network of that length holding it.
fn entry(net: IpNet, len: u8) -> String {
    let own = net.prefix_len();
    if len == own {
        net.to_string()
    } else if len > own {
        format!("{net} ge {len} le {len}")
    } else {
        let wider = match net {
            IpNet::V4(n) => ipnet::Ipv4Net::new(n.network(), len).map(|n| IpNet::V4(n.trunc())),
            IpNet::V6(n) => ipnet::Ipv6Net::new(n.network(), len).map(|n| IpNet::V6(n.trunc())),
        };
        wider.map_or_else(|_| net.to_string(), |w| w.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pools(advertisements: &str) -> BgpPools {
        let text = format!(
            "apiVersion: v1\nkind: List\nitems:\n\
             - {{apiVersion: vipflow.io/v1alpha1, kind: VipPool, metadata: {{name: blue}}, spec: {{addresses: [198.51.100.0/24, '2001:db8:100::/64']}}}}\n\
             - {{apiVersion: vipflow.io/v1alpha1, kind: VipPool, metadata: {{name: green}}, spec: {{addresses: [192.168.1.240-192.168.1.250]}}}}\n\
             {advertisements}"
        );
        BgpPools::of(&crate::decode::parse(&text).expect("parses").objects)
    }

    #[test]
    fn communities_and_local_preference_go_on_the_pools_prefixes_at_the_lengths_they_go_out_as() {
        let p = pools(
            "- {apiVersion: vipflow.io/v1alpha1, kind: BGPAdvertisement, metadata: {name: local}, spec: {ipAddressPools: [blue], localPref: 100, communities: ['65535:65282', 'large:64512:1:2']}}\n\
             - {apiVersion: vipflow.io/v1alpha1, kind: BGPAdvertisement, metadata: {name: wide}, spec: {ipAddressPools: [green], aggregationLength: 24, communities: ['64512:7']}}\n\
             - {apiVersion: vipflow.io/v1alpha1, kind: BGPAdvertisement, metadata: {name: plain}, spec: {}}\n",
        );
        let (policy, problems) = outbound(&p, &["tor".to_string()]);
        assert!(problems.is_empty(), "{problems:?}");
        assert!(policy.route_map && !policy.peer_filters);
        assert_eq!(
            Some(policy.text.as_str()),
            Some(
                "ip prefix-list vipflow-adv-local-4 seq 5 permit 198.51.100.0/24 ge 32 le 32\n\
                 route-map vipflow-out permit 10\n \
                 match ip address prefix-list vipflow-adv-local-4\n \
                 set community 65535:65282 additive\n \
                 set large-community 64512:1:2 additive\n \
                 set local-preference 100\n \
                 on-match next\nexit\n!\n\
                 ipv6 prefix-list vipflow-adv-local-6 seq 5 permit 2001:db8:100::/64 ge 128 le 128\n\
                 route-map vipflow-out permit 20\n \
                 match ipv6 address prefix-list vipflow-adv-local-6\n \
                 set community 65535:65282 additive\n \
                 set large-community 64512:1:2 additive\n \
                 set local-preference 100\n \
                 on-match next\nexit\n!\n\
                 ip prefix-list vipflow-adv-wide-4 seq 5 permit 192.168.1.0/24\n\
                 ip prefix-list vipflow-adv-wide-4 seq 10 permit 192.168.1.240/29 ge 32 le 32\n\
                 ip prefix-list vipflow-adv-wide-4 seq 15 permit 192.168.1.248/31 ge 32 le 32\n\
                 ip prefix-list vipflow-adv-wide-4 seq 20 permit 192.168.1.250/32\n\
                 route-map vipflow-out permit 30\n \
                 match ip address prefix-list vipflow-adv-wide-4\n \
                 set community 64512:7 additive\n \
                 on-match next\nexit\n!\n\
                 route-map vipflow-out permit 65535\nexit\n!\n"
            )
        );
    }

    #[test]
    fn nothing_to_set_is_no_policy_and_a_bad_community_is_said() {
        let (policy, _) = outbound(
            &pools(
                "- {apiVersion: vipflow.io/v1alpha1, kind: BGPAdvertisement, metadata: {name: plain}, spec: {localPref: 0}}\n",
            ),
            &[],
        );
        assert!(policy.is_empty());
        let (policy, problems) = outbound(
            &pools(
                "- {apiVersion: vipflow.io/v1alpha1, kind: BGPAdvertisement, metadata: {name: odd}, spec: {ipAddressPools: [blue], communities: ['70000:1', '1:2']}}\n",
            ),
            &[],
        );
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(policy.text.contains(" set community 1:2 additive\n"));
    }
}

#[cfg(test)]
mod peer_tests {
    use super::*;

    #[test]
    fn an_advertisement_naming_peers_goes_to_those_only_and_one_naming_none_to_every_peer() {
        let text = "apiVersion: v1\nkind: List\nitems:\n\
             - {apiVersion: vipflow.io/v1alpha1, kind: VipPool, metadata: {name: blue}, spec: {addresses: [198.51.100.0/24]}}\n\
             - {apiVersion: vipflow.io/v1alpha1, kind: VipPool, metadata: {name: green}, spec: {addresses: [203.0.113.0/24]}}\n\
             - {apiVersion: vipflow.io/v1alpha1, kind: BGPAdvertisement, metadata: {name: to-a}, spec: {ipAddressPools: [blue], peers: [a]}}\n\
             - {apiVersion: vipflow.io/v1alpha1, kind: BGPAdvertisement, metadata: {name: all}, spec: {ipAddressPools: [green]}}\n";
        let pools = BgpPools::of(&crate::decode::parse(text).expect("parses").objects);
        let (policy, problems) = outbound(&pools, &["a".to_string(), "b".to_string()]);
        assert!(problems.is_empty(), "{problems:?}");
        assert!(policy.peer_filters && !policy.route_map);
        assert_eq!(
            policy.text,
            "ip prefix-list vipflow-to-a-4 seq 5 permit 198.51.100.0/24 ge 32 le 32\n\
             ip prefix-list vipflow-to-a-4 seq 10 permit 203.0.113.0/24 ge 32 le 32\n\
             ipv6 prefix-list vipflow-to-a-6 seq 5 deny any\n\
             ip prefix-list vipflow-to-b-4 seq 5 permit 203.0.113.0/24 ge 32 le 32\n\
             ipv6 prefix-list vipflow-to-b-6 seq 5 deny any\n"
        );
    }
}
