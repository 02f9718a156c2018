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
struct Attributes {
    communities: Vec<String>,
    large_communities: Vec<String>,
    local_pref: Option<u32>,
    /// Per family (IPv4 first), the prefix-list entries.
    entries: [BTreeSet<String>; 2],
}

/// The prefix-lists and the route-map for `pools`' advertisements, as configuration text;
/// `None` when no advertisement sets a community or a local preference. What cannot be
/// written (a community that is no `A:B` or `large:A:B:C`) is left out, and said.
pub fn outbound(pools: &BgpPools) -> (Option<String>, Vec<FrrConfigProblem>) {
    let mut problems = Vec::new();
    let mut ads: BTreeMap<String, Attributes> = BTreeMap::new();
    for (pool, terms) in pools.each() {
        for t in terms {
            let local_pref = t.local_pref.filter(|l| *l != 0);
            if t.communities.is_empty() && local_pref.is_none() {
                continue;
            }
            let a = ads.entry(t.name.clone()).or_insert_with(|| {
                let mut a = Attributes {
                    local_pref,
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
    if ads.is_empty() {
        return (None, problems);
    }
    let mut out = String::new();
    let mut seq = 0;
    for (name, a) in &ads {
        for (family, (list_kind, match_kind, tag)) in [("ip", "ip", "4"), ("ipv6", "ipv6", "6")]
            .iter()
            .enumerate()
        {
            if a.entries[family].is_empty() {
                continue;
            }
            let list = format!("vipflow-adv-{name}-{tag}");
            for (i, e) in a.entries[family].iter().enumerate() {
                let _ = writeln!(
                    out,
                    "{list_kind} prefix-list {list} seq {} permit {e}",
                    (i + 1) * 5
                );
            }
            seq += 10;
            let _ = writeln!(out, "route-map {OUTBOUND} permit {seq}");
            let _ = writeln!(out, " match {match_kind} address prefix-list {list}");
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
    // Every route goes out, with what the entries above set.
    let _ = writeln!(out, "route-map {OUTBOUND} permit 65535\nexit\n!");
    (Some(out), problems)
}

enum Community {
    Standard(String),
    Large(String),
}

/// A community as MetalLB writes it: `A:B` (two 16-bit numbers) or `large:A:B:C` (three
/// 32-bit numbers).
fn community(c: &str) -> Option<Community> {
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
        let (text, problems) = outbound(&p);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            text.as_deref(),
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
        let (text, _) = outbound(&pools(
            "- {apiVersion: vipflow.io/v1alpha1, kind: BGPAdvertisement, metadata: {name: plain}, spec: {localPref: 0}}\n",
        ));
        assert_eq!(text, None);
        let (text, problems) = outbound(&pools(
            "- {apiVersion: vipflow.io/v1alpha1, kind: BGPAdvertisement, metadata: {name: odd}, spec: {ipAddressPools: [blue], communities: ['70000:1', '1:2']}}\n",
        ));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(text.is_some_and(|t| t.contains(" set community 1:2 additive\n")));
    }
}
