//! What a node advertises through BGP, and the FRR commands that make FRR advertise it.
//!
//! FRR is the BGP speaker; vipflow decides the prefixes and hands FRR the difference as one
//! `vtysh -f` batch per change (no debounce). Both are pure, so every rule is tested in memory
//! and the batch is golden text.
//!
//! **Which VIPs a node advertises.** A VIP of a pool that advertises over BGP goes out from
//! every node that may carry it: a node that is live, not draining, not labelled
//! [`EXCLUDE_FROM_LOAD_BALANCERS_LABEL`](crate::keys::EXCLUDE_FROM_LOAD_BALANCERS_LABEL), among the VIP's eligible nodes
//! ([`Eligible`]: the pool's node selectors, and for externalTrafficPolicy Local the nodes with
//! a ready local endpoint, so a Local VIP with no endpoint anywhere goes out from nobody), and
//! whose dataplane carries it (the VIP's flows confirmed on the bridge, its rows written, the
//! node's OVN dataplane programmed): a route that goes out before that draws traffic the node
//! drops. Cluster VIPs thus go out from every eligible node (ECMP at the router), Local VIPs
//! only from the nodes with an endpoint.
//!
//! **Withdraw first.** A batch removes before it adds, and the caller applies a batch that
//! withdraws before it removes the VIP's flows: traffic leaves a node before the node stops
//! carrying it.

use crate::announce::placement::Eligible;
use ipnet::IpNet;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::IpAddr;

/// The node that advertises, as the advertisement set needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BgpNode {
    pub name: String,
    /// Alive in the membership (or Ready, without one).
    pub live: bool,
    /// Marked for drain: its routes go before it stops.
    pub draining: bool,
    /// Labelled [`EXCLUDE_FROM_LOAD_BALANCERS_LABEL`](crate::keys::EXCLUDE_FROM_LOAD_BALANCERS_LABEL).
    pub excluded: bool,
}

/// One VIP, as the advertisement set needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BgpVip {
    pub vip: IpAddr,
    /// Its pool advertises over BGP.
    pub bgp: bool,
    /// Which nodes may carry it.
    pub eligible: Eligible,
    /// This node's dataplane carries it: its flows are confirmed on the bridge, its rows
    /// written and the node's OVN dataplane programmed.
    pub ready: bool,
}

/// The host prefixes `node` advertises for `vips`.
pub fn advertised<'a>(
    node: &BgpNode,
    vips: impl IntoIterator<Item = &'a BgpVip>,
) -> BTreeSet<IpNet> {
    if !node.live || node.draining || node.excluded {
        return BTreeSet::new();
    }
    vips.into_iter()
        .filter(|v| v.bgp && v.ready && v.eligible.allows(&node.name))
        .map(|v| IpNet::from(v.vip))
        .collect()
}

/// The `vtysh -f` text (configuration lines, as in `frr.conf`) that turns FRR's `network` statements under `router bgp asn` from
/// `old` into `new`: every withdrawal, then every addition, per address family; `None` when
/// nothing changes. `vtysh -f` goes on past a line FRR refuses (a `no network` for a prefix it
/// does not have), so one stale line never holds back the rest.
pub fn frr_batch(asn: u32, old: &BTreeSet<IpNet>, new: &BTreeSet<IpNet>) -> Option<String> {
    let gone: Vec<&IpNet> = old.difference(new).collect();
    let added: Vec<&IpNet> = new.difference(old).collect();
    if gone.is_empty() && added.is_empty() {
        return None;
    }
    let mut out = format!("router bgp {asn}\n");
    for (family, v6) in [("ipv4", false), ("ipv6", true)] {
        let of = |n: &&&IpNet| matches!(n, IpNet::V6(_)) == v6;
        if !gone.iter().chain(&added).any(|n| of(&n)) {
            continue;
        }
        let _ = writeln!(out, " address-family {family} unicast");
        for n in gone.iter().filter(of) {
            let _ = writeln!(out, "  no network {n}");
        }
        for n in added.iter().filter(of) {
            let _ = writeln!(out, "  network {n}");
        }
        out.push_str(" exit-address-family\n");
    }
    out.push_str("exit\n");
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn node(name: &str) -> BgpNode {
        BgpNode {
            name: name.into(),
            live: true,
            draining: false,
            excluded: false,
        }
    }

    fn vip(ip: &str, eligible: Eligible) -> BgpVip {
        BgpVip {
            vip: ip.parse().expect("an address"),
            bgp: true,
            eligible,
            ready: true,
        }
    }

    fn only(nodes: &[&str]) -> Eligible {
        Eligible::Nodes(Arc::new(nodes.iter().map(|n| Arc::from(*n)).collect()))
    }

    fn nets(v: &[&str]) -> BTreeSet<IpNet> {
        v.iter().map(|s| s.parse().expect("a prefix")).collect()
    }

    #[test]
    fn cluster_vips_go_out_from_every_eligible_node_and_local_ones_from_their_endpoints() {
        let vips = [
            vip("198.51.100.1", Eligible::Any),
            vip("198.51.100.2", only(&["a"])),
            vip("2001:db8::3", Eligible::Any),
            // A Local VIP with no ready endpoint anywhere: nobody.
            vip("198.51.100.4", only(&[])),
        ];
        assert_eq!(
            advertised(&node("a"), &vips),
            nets(&["198.51.100.1/32", "198.51.100.2/32", "2001:db8::3/128"])
        );
        assert_eq!(
            advertised(&node("b"), &vips),
            nets(&["198.51.100.1/32", "2001:db8::3/128"])
        );
    }

    #[test]
    fn a_node_that_cannot_carry_traffic_advertises_nothing() {
        let vips = [vip("198.51.100.1", Eligible::Any)];
        for n in [
            BgpNode {
                live: false,
                ..node("a")
            },
            BgpNode {
                draining: true,
                ..node("a")
            },
            BgpNode {
                excluded: true,
                ..node("a")
            },
        ] {
            assert!(advertised(&n, &vips).is_empty(), "{n:?}");
        }
    }

    #[test]
    fn a_vip_goes_out_only_once_its_dataplane_is_ready_and_only_from_a_bgp_pool() {
        let mut v = vip("198.51.100.1", Eligible::Any);
        v.ready = false;
        assert!(advertised(&node("a"), [&v]).is_empty());
        v.ready = true;
        v.bgp = false;
        assert!(advertised(&node("a"), [&v]).is_empty());
        v.bgp = true;
        assert_eq!(advertised(&node("a"), [&v]), nets(&["198.51.100.1/32"]));
    }

    #[test]
    fn a_batch_withdraws_first_per_family_and_nothing_is_no_batch() {
        let old = nets(&["198.51.100.1/32", "198.51.100.2/32", "2001:db8::1/128"]);
        let new = nets(&["198.51.100.2/32", "198.51.100.3/32", "2001:db8::2/128"]);
        assert_eq!(
            frr_batch(64513, &old, &new).as_deref(),
            Some(
                "router bgp 64513\n \
                 address-family ipv4 unicast\n  \
                 no network 198.51.100.1/32\n  \
                 network 198.51.100.3/32\n \
                 exit-address-family\n \
                 address-family ipv6 unicast\n  \
                 no network 2001:db8::1/128\n  \
                 network 2001:db8::2/128\n \
                 exit-address-family\n\
                 exit\n"
            )
        );
        assert_eq!(frr_batch(64513, &new, &new), None);
        // One family changed: the other is not named.
        let v4 = nets(&["198.51.100.9/32"]);
        let text = frr_batch(64513, &BTreeSet::new(), &v4).expect("a batch");
        assert!(!text.contains("ipv6"), "{text}");
    }
}
