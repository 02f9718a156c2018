//! A node's FRR configuration from the `BGPPeer`s and `BFDProfile`s: the BFD profiles, the
//! BGP instance and its neighbors, without the networks (those go in and out one batch per
//! change, [`crate::plan::bgp::frr_batch`]). Pure, and tested as golden text.
//!
//! - One `router bgp` per node: FRR keeps one BGP instance per VRF, so every peer a node
//!   selects must give the same `myASN`; a peer that does not is left out, and said.
//! - `no bgp ebgp-requires-policy` (routes go out without a route-map) and `no bgp network
//!   import-check` (a VIP's host route is in no routing table of the node's: it lives in OVN).
//! - `no bgp default ipv4-unicast`: each neighbor is activated for the families it carries,
//!   both unless `disableMP` (then the family of its address alone).
//! - A node marked for drain (`vipflow.io/drain`) runs its instance in `bgp
//!   graceful-shutdown` (RFC 8326): every route it still advertises carries the
//!   GRACEFUL_SHUTDOWN community, which FRR routers (and others with the RFC's inbound policy)
//!   prefer least, so traffic moves to the other nodes before the routes are withdrawn at the
//!   end of the node's drain hold.
//! - The router ID is set, never left to zebra: the peers' `routerID`, else the node's first
//!   IPv4 `InternalIP`. Zebra picks one from the interfaces' addresses and loses it when the
//!   interface carrying it flaps (FRR then runs with 0.0.0.0 and no session comes up again).
//! - Nothing is taken from the peers ([`ACCEPT_NOTHING`] on every neighbor, inbound): the node
//!   only advertises, and FRR runs on the host's network, where zebra would install what a
//!   peer sends (a default route, another rack's prefixes) into the node's own routing table.

use super::objects::{BfdProfile, BgpPeer};
use super::route_policy::RoutePolicy;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;

/// Something in the peers or profiles that the node's configuration leaves out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrrConfigProblem {
    #[error("BGPPeer {peer}: peerAddress {address:?} is not an IP address")]
    BadAddress { peer: String, address: String },
    #[error(
        "BGPPeer {peer}: myASN {asn} differs from {first}'s {first_asn}; a node speaks BGP as one AS"
    )]
    OtherAsn {
        peer: String,
        asn: u32,
        first: String,
        first_asn: u32,
    },
    #[error("BGPPeer {peer}: {field} {value:?} is not a duration (e.g. 90s, 3m)")]
    BadDuration {
        peer: String,
        field: &'static str,
        value: String,
    },
    #[error("BGPPeer {peer}: BFDProfile {profile} does not exist")]
    NoProfile { peer: String, profile: String },
    #[error(
        "BGPAdvertisement {advertisement}: community {community:?} is not A:B (16-bit numbers) or large:A:B:C (32-bit numbers); left out"
    )]
    BadCommunity {
        advertisement: String,
        community: String,
    },
}

/// The route-map every neighbor's received routes go through: it denies all.
pub const ACCEPT_NOTHING: &str = "vipflow-in";

/// Node `node`'s configuration from a snapshot's `BGPPeer`s and `BFDProfile`s (its labels pick
/// the peers), and what was left out of it: [`node_config`], with the node's router ID (unless
/// a peer names one), and in graceful shutdown while the node is marked for drain.
pub fn for_node(
    objects: &crate::model::Objects,
    node: &str,
) -> (Option<String>, Vec<FrrConfigProblem>) {
    for_node_with(objects, node, false)
}

/// [`for_node`], in graceful shutdown also when `graceful` (the agent's plan asks for it: a
/// drain hold, a stop on a cordoned Node).
pub fn for_node_with(
    objects: &crate::model::Objects,
    node: &str,
    graceful: bool,
) -> (Option<String>, Vec<FrrConfigProblem>) {
    let me = objects
        .nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node));
    let labels: BTreeMap<String, String> = me
        .and_then(|n| n.metadata.labels.clone())
        .unwrap_or_default();
    let peer_names: Vec<String> = objects
        .bgp
        .peers
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    let (policy, mut problems) = super::route_policy::outbound(
        &crate::plan::bgp_selection::BgpPools::of(objects),
        &peer_names,
    );
    let draining = me.is_some_and(|n| crate::announce::announcements::draining(n));
    let (config, peer_problems) = node_config_as(
        &labels,
        &objects.bgp.peers,
        &objects.bgp.bfd_profiles,
        &Speaking {
            policy: &policy,
            router_id: me.and_then(|n| internal_ipv4(n)),
            graceful_shutdown: graceful || draining,
        },
    );
    problems.extend(peer_problems);
    (config, problems)
}

/// The Node's first IPv4 `InternalIP`.
pub(crate) fn internal_ipv4(node: &k8s_openapi::api::core::v1::Node) -> Option<std::net::Ipv4Addr> {
    node.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .filter(|a| a.type_ == "InternalIP")
        .find_map(|a| a.address.parse().ok())
}

/// The line that puts a BGP instance in graceful shutdown (RFC 8326).
const GRACEFUL_SHUTDOWN: &str = " bgp graceful-shutdown\n";

/// The node's configuration, and what was left out of it. `None` when no peer selects the
/// node (it speaks no BGP).
pub fn node_config(
    node_labels: &BTreeMap<String, String>,
    peers: &[BgpPeer],
    profiles: &[BfdProfile],
) -> (Option<String>, Vec<FrrConfigProblem>) {
    node_config_with(node_labels, peers, profiles, &RoutePolicy::default())
}

/// The `BGPPeer`s a node with `node_labels` peers with, in order, with their addresses: those
/// whose node selectors admit it (none: every node), with an IP address, and with the `myASN`
/// of the first (a node speaks BGP as one AS). What is left out is said.
pub fn select_peers<'a>(
    node_labels: &BTreeMap<String, String>,
    peers: &'a [BgpPeer],
) -> (Vec<(&'a BgpPeer, IpAddr)>, Vec<FrrConfigProblem>) {
    let mut problems = Vec::new();
    let name = |p: &BgpPeer| p.metadata.name.clone().unwrap_or_default();
    let mut chosen: Vec<(&BgpPeer, IpAddr)> = Vec::new();
    for p in peers {
        let s = &p.spec;
        if !s.node_selectors.is_empty()
            && !s
                .node_selectors
                .iter()
                .any(|sel| crate::ipam::selector::matches(sel, node_labels))
        {
            continue;
        }
        let Ok(address) = s.peer_address.parse::<IpAddr>() else {
            problems.push(FrrConfigProblem::BadAddress {
                peer: name(p),
                address: s.peer_address.clone(),
            });
            continue;
        };
        if let Some((first, _)) = chosen.first()
            && first.spec.my_asn != s.my_asn
        {
            problems.push(FrrConfigProblem::OtherAsn {
                peer: name(p),
                asn: s.my_asn,
                first: name(first),
                first_asn: first.spec.my_asn,
            });
            continue;
        }
        chosen.push((p, address));
    }
    (chosen, problems)
}

/// [`node_config`] with `policy`, the advertisements' route-map and peer filters
/// ([`super::route_policy::outbound`]), on every neighbor's outbound routes.
pub fn node_config_with(
    node_labels: &BTreeMap<String, String>,
    peers: &[BgpPeer],
    profiles: &[BfdProfile],
    policy: &RoutePolicy,
) -> (Option<String>, Vec<FrrConfigProblem>) {
    node_config_as(
        node_labels,
        peers,
        profiles,
        &Speaking {
            policy,
            router_id: None,
            graceful_shutdown: false,
        },
    )
}

/// How the node's BGP instance speaks, beyond its peers.
#[derive(Debug, Clone, Copy)]
pub struct Speaking<'a> {
    /// The advertisements' route-map and peer filters ([`super::route_policy::outbound`]).
    pub policy: &'a RoutePolicy,
    /// The router ID where no peer names one (the node's own address).
    pub router_id: Option<std::net::Ipv4Addr>,
    /// Every route goes out with the graceful-shutdown community (RFC 8326).
    pub graceful_shutdown: bool,
}

/// [`node_config`], speaking as `speaking` says.
pub fn node_config_as(
    node_labels: &BTreeMap<String, String>,
    peers: &[BgpPeer],
    profiles: &[BfdProfile],
    speaking: &Speaking,
) -> (Option<String>, Vec<FrrConfigProblem>) {
    let policy = speaking.policy;
    let (chosen, mut problems) = select_peers(node_labels, peers);
    let name = |p: &BgpPeer| p.metadata.name.clone().unwrap_or_default();
    let Some((first, _)) = chosen.first() else {
        return (None, problems);
    };
    let mut out = String::from("frr defaults datacenter\n!\n");
    let named: BTreeMap<&str, &BfdProfile> = profiles
        .iter()
        .filter_map(|b| Some((b.metadata.name.as_deref()?, b)))
        .collect();
    let used: std::collections::BTreeSet<&str> = chosen
        .iter()
        .filter_map(|(p, _)| p.spec.bfd_profile.as_deref())
        .filter(|n| named.contains_key(n))
        .collect();
    if !used.is_empty() {
        out.push_str("bfd\n");
        for n in &used {
            let s = &named[n].spec;
            let _ = writeln!(out, " profile {n}");
            if let Some(v) = s.receive_interval {
                let _ = writeln!(out, "  receive-interval {v}");
            }
            if let Some(v) = s.transmit_interval {
                let _ = writeln!(out, "  transmit-interval {v}");
            }
            if let Some(v) = s.detect_multiplier {
                let _ = writeln!(out, "  detect-multiplier {v}");
            }
            if s.echo_mode {
                out.push_str("  echo-mode\n");
                if let Some(v) = s.echo_interval {
                    let _ = writeln!(out, "  echo receive-interval {v}");
                }
            }
            if s.passive_mode {
                out.push_str("  passive-mode\n");
            }
            if let Some(v) = s.minimum_ttl {
                let _ = writeln!(out, "  minimum-ttl {v}");
            }
            out.push_str(" exit\n");
        }
        out.push_str("exit\n!\n");
    }
    let _ = writeln!(out, "route-map {ACCEPT_NOTHING} deny 10\nexit\n!");
    out.push_str(&policy.text);
    let _ = writeln!(out, "router bgp {}", first.spec.my_asn);
    // A peer's router ID, else the node's own.
    let router_id = chosen
        .iter()
        .find_map(|(p, _)| p.spec.router_id.clone())
        .or_else(|| speaking.router_id.map(|a| a.to_string()));
    if let Some(id) = router_id {
        let _ = writeln!(out, " bgp router-id {id}");
    }
    if speaking.graceful_shutdown {
        out.push_str(GRACEFUL_SHUTDOWN);
    }
    out.push_str(" no bgp ebgp-requires-policy\n no bgp network import-check\n no bgp default ipv4-unicast\n");
    let mut families: [Vec<(IpAddr, String)>; 2] = [Vec::new(), Vec::new()];
    for (p, address) in &chosen {
        let s = &p.spec;
        let _ = writeln!(out, " neighbor {address} remote-as {}", s.peer_asn);
        if let Some(port) = s.peer_port {
            let _ = writeln!(out, " neighbor {address} port {port}");
        }
        let mut secs = |field: &'static str, v: &Option<String>| -> Option<u64> {
            let v = v.as_deref()?;
            match go_duration_secs(v) {
                Some(s) => Some(s),
                None => {
                    problems.push(FrrConfigProblem::BadDuration {
                        peer: name(p),
                        field,
                        value: v.to_string(),
                    });
                    None
                }
            }
        };
        let hold = secs("holdTime", &s.hold_time);
        let keepalive = secs("keepaliveTime", &s.keepalive_time);
        if hold.is_some() || keepalive.is_some() {
            let hold = hold.unwrap_or(keepalive.unwrap_or(30) * 3);
            let keepalive = keepalive.unwrap_or(hold / 3);
            let _ = writeln!(out, " neighbor {address} timers {keepalive} {hold}");
        }
        if let Some(c) = secs("connectTime", &s.connect_time) {
            let _ = writeln!(out, " neighbor {address} timers connect {c}");
        }
        if let Some(pw) = &s.password {
            let _ = writeln!(out, " neighbor {address} password {pw}");
        }
        if let Some(src) = &s.source_address {
            let _ = writeln!(out, " neighbor {address} update-source {src}");
        }
        if s.ebgp_multi_hop {
            let _ = writeln!(out, " neighbor {address} ebgp-multihop");
        }
        match s.bfd_profile.as_deref() {
            Some(b) if named.contains_key(b) => {
                let _ = writeln!(out, " neighbor {address} bfd profile {b}");
            }
            Some(b) => problems.push(FrrConfigProblem::NoProfile {
                peer: name(p),
                profile: b.to_string(),
            }),
            None => {}
        }
        if s.enable_graceful_restart {
            let _ = writeln!(out, " neighbor {address} graceful-restart");
        }
        let v6 = address.is_ipv6();
        for (i, fam) in families.iter_mut().enumerate() {
            if !s.disable_mp || v6 == (i == 1) {
                fam.push((*address, name(p)));
            }
        }
    }
    for ((family, tag), neighbors) in [("ipv4", "4"), ("ipv6", "6")].iter().zip(&families) {
        if neighbors.is_empty() {
            continue;
        }
        let _ = writeln!(out, " address-family {family} unicast");
        for (n, peer) in neighbors {
            let _ = writeln!(out, "  neighbor {n} activate");
            let _ = writeln!(out, "  neighbor {n} route-map {ACCEPT_NOTHING} in");
            if policy.route_map {
                let _ = writeln!(
                    out,
                    "  neighbor {n} route-map {} out",
                    super::route_policy::OUTBOUND
                );
            }
            if policy.peer_filters {
                let _ = writeln!(
                    out,
                    "  neighbor {n} prefix-list {} out",
                    super::route_policy::peer_filter(peer, tag)
                );
            }
        }
        out.push_str(" exit-address-family\n");
    }
    out.push_str("exit\n");
    (Some(out), problems)
}

/// The `vtysh -f` batch that takes FRR from node configuration `old` to `new` (both as
/// [`node_config`] writes them; `None`: no BGP on the node). Configuration lines only add, so
/// every line `old` has and `new` has not is undone first with `no <line>` in its own context
/// (`router bgp`, `bfd`, a profile, an address family); then `new` is applied whole, which
/// changes nothing where it already holds. A BGP instance of another AS is removed whole (its
/// networks with it: the caller reads back what FRR originates after). `None` when the two are
/// the same.
///
/// With `old` unknown (an agent that starts), the graceful shutdown vipflow itself turns on
/// (a drain, a stop on a cordoned Node) is taken back first where `new` does not ask for it:
/// an agent that stopped may have left FRR in it.
pub fn config_batch(old: Option<&str>, new: Option<&str>) -> Option<String> {
    if old == new {
        return None;
    }
    let mut out = String::new();
    if old.is_none()
        && let Some(new) = new
        && !new.contains(GRACEFUL_SHUTDOWN)
        && let Some(asn) = bgp_asn(new)
    {
        let _ = writeln!(out, "router bgp {asn}\n no bgp graceful-shutdown\nexit");
    }
    let old_tree = old.map(ConfigTree::of).unwrap_or_default();
    let new_tree = new.map(ConfigTree::of).unwrap_or_default();
    for (head, lines) in &old_tree.blocks {
        match new_tree.blocks.get(head) {
            None if head.starts_with("router bgp ")
                || head.starts_with("route-map ")
                || head.starts_with("ip prefix-list ")
                || head.starts_with("ipv6 prefix-list ") =>
            {
                let _ = writeln!(out, "no {head}");
            }
            None => {
                // A `bfd` block that goes: each profile in it goes.
                let _ = writeln!(out, "{head}");
                for l in lines.iter().filter(|l| l.depth == 1 && l.opens) {
                    let _ = writeln!(out, " no {}", l.text);
                }
                out.push_str(
                    "exit
",
                );
            }
            Some(kept) => {
                let gone = undo(lines, kept);
                if !gone.is_empty() {
                    let _ = writeln!(out, "{head}");
                    out.push_str(&gone);
                    out.push_str(
                        "exit
",
                    );
                }
            }
        }
    }
    if let Some(new) = new {
        out.push_str(new);
    }
    Some(out)
}

/// The AS of the BGP instance a configuration (as [`node_config`] writes it) opens; `None`
/// when it opens none.
pub fn bgp_asn(config: &str) -> Option<u32> {
    ConfigTree::of(config)
        .blocks
        .keys()
        .find_map(|h| h.strip_prefix("router bgp ")?.trim().parse().ok())
}

/// The `no` lines that undo what `old` (one block's lines) has and `new` has not, each inside
/// the sub-block it belongs to.
fn undo(old: &[ConfigLine], new: &[ConfigLine]) -> String {
    let mut out = String::new();
    let has = |l: &ConfigLine| {
        new.iter()
            .any(|n| n.text == l.text && n.depth == l.depth && n.parent == l.parent)
    };
    // A neighbor that goes is removed whole by `no neighbor ADDR remote-as ...`; its other
    // lines go with it and are not undone one by one (FRR would refuse them).
    let gone_neighbors: Vec<String> = old
        .iter()
        .filter(|l| l.depth == 1 && !has(l))
        .filter_map(|l| {
            let rest = l.text.strip_prefix("neighbor ")?;
            let (addr, what) = rest.split_once(' ')?;
            what.starts_with("remote-as ")
                .then(|| format!("neighbor {addr} "))
        })
        .collect();
    let of_gone_neighbor = |l: &ConfigLine| {
        gone_neighbors
            .iter()
            .any(|n| l.text.starts_with(n.as_str()))
            && !l.text.contains(" remote-as ")
    };
    // A BFD profile that goes is removed whole by `no profile NAME`.
    let mut gone_profiles: Vec<&str> = Vec::new();
    for l in old.iter().filter(|l| l.depth == 1) {
        if has(l) || of_gone_neighbor(l) {
            continue;
        }
        if l.opens {
            // An address family is undone line by line below; it has no `no` of its own.
            if l.text.starts_with("profile ") {
                gone_profiles.push(&l.text);
                let _ = writeln!(out, " no {}", l.text);
            }
            continue;
        }
        let _ = writeln!(out, " no {}", l.text);
    }
    let mut open: Option<&str> = None;
    for l in old.iter().filter(|l| l.depth == 2) {
        let parent = l.parent.as_deref().unwrap_or_default();
        if has(l) || of_gone_neighbor(l) || gone_profiles.contains(&parent) {
            continue;
        }
        if open != Some(parent) {
            if open.is_some() {
                out.push_str(exit_of(open));
            }
            let _ = writeln!(out, " {parent}");
            open = Some(parent);
        }
        let _ = writeln!(out, "  no {}", l.text);
    }
    if open.is_some() {
        out.push_str(exit_of(open));
    }
    out
}

/// How the sub-block `open` is left.
fn exit_of(open: Option<&str>) -> &'static str {
    match open {
        Some(o) if o.starts_with("address-family") => " exit-address-family\n",
        _ => " exit\n",
    }
}

/// One line of a configuration block, with where it sits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ConfigLine {
    text: String,
    /// 1: in a top-level block; 2: in a sub-block (an address family, a BFD profile).
    depth: usize,
    /// The sub-block's opening line, for depth 2.
    parent: Option<String>,
    /// The line opens a sub-block.
    opens: bool,
}

/// A configuration as [`node_config`] writes it: top-level blocks by their opening line.
#[derive(Debug, Default)]
struct ConfigTree {
    blocks: BTreeMap<String, Vec<ConfigLine>>,
}

impl ConfigTree {
    fn of(text: &str) -> ConfigTree {
        let mut blocks: BTreeMap<String, Vec<ConfigLine>> = BTreeMap::new();
        let mut head: Option<String> = None;
        let mut sub: Option<String> = None;
        for raw in text.lines() {
            let depth = raw.len() - raw.trim_start().len();
            let line = raw.trim();
            if line.is_empty() || line == "!" || line.starts_with("frr ") {
                continue;
            }
            match depth {
                0 if line == "exit" => head = None,
                0 => head = Some(line.to_string()),
                _ if line == "exit" || line == "exit-address-family" => sub = None,
                1 => {
                    let opens = line.starts_with("address-family ") || line.starts_with("profile ");
                    if let Some(h) = &head {
                        blocks.entry(h.clone()).or_default().push(ConfigLine {
                            text: line.to_string(),
                            depth: 1,
                            parent: None,
                            opens,
                        });
                    }
                    sub = opens.then(|| line.to_string());
                }
                _ => {
                    if let (Some(h), Some(s)) = (&head, &sub) {
                        blocks.entry(h.clone()).or_default().push(ConfigLine {
                            text: line.to_string(),
                            depth: 2,
                            parent: Some(s.clone()),
                            opens: false,
                        });
                    }
                }
            }
            if depth == 0 && line != "exit" {
                blocks.entry(line.to_string()).or_default();
            }
        }
        ConfigTree { blocks }
    }
}

/// Whole seconds of a Go duration as Kubernetes objects write them (`90s`, `1m30s`, `2h`,
/// `500ms` rounds down); `None` when it is not one.
pub(crate) fn go_duration_secs(v: &str) -> Option<u64> {
    let mut total_ms: u64 = 0;
    let mut rest = v.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit())?;
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (1, 2)
        } else if rest.starts_with('s') {
            (1_000, 1)
        } else if rest.starts_with('m') {
            (60_000, 1)
        } else if rest.starts_with('h') {
            (3_600_000, 1)
        } else {
            return None;
        };
        total_ms = total_ms.checked_add(n.checked_mul(unit)?)?;
        rest = &rest[len..];
    }
    Some(total_ms / 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(name: &str, yaml_spec: &str) -> BgpPeer {
        serde_yaml_ng::from_str(&format!(
            "kind: BGPPeer\nmetadata: {{name: {name}}}\nspec: {yaml_spec}\n"
        ))
        .expect("a BGPPeer")
    }

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn peers_and_profiles_become_the_nodes_configuration() {
        let peers = [
            peer(
                "tor4",
                "{myASN: 64513, peerASN: 64512, peerAddress: 10.9.0.1, holdTime: 9s, keepaliveTime: 3s, bfdProfile: fast, routerID: 10.9.0.2}",
            ),
            peer(
                "tor6",
                "{myASN: 64513, peerASN: 64512, peerAddress: 'fd00:9::1', disableMP: true, connectTime: 2s}",
            ),
            // Another rack's router: not this node's.
            peer(
                "r2",
                "{myASN: 64513, peerASN: 64512, peerAddress: 10.8.0.1, nodeSelectors: [{matchLabels: {rack: r2}}]}",
            ),
        ];
        let profiles: Vec<BfdProfile> = vec![
            serde_yaml_ng::from_str(
                "kind: BFDProfile\nmetadata: {name: fast}\nspec: {receiveInterval: 300, transmitInterval: 300, detectMultiplier: 3}\n",
            )
            .expect("a BFDProfile"),
        ];
        let (text, problems) = node_config(&labels(&[("rack", "r1")]), &peers, &profiles);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            text.as_deref(),
            Some(
                "frr defaults datacenter\n!\n\
                 bfd\n profile fast\n  receive-interval 300\n  transmit-interval 300\n  detect-multiplier 3\n exit\nexit\n!\n\
                 route-map vipflow-in deny 10\nexit\n!\n\
                 router bgp 64513\n bgp router-id 10.9.0.2\n\
                 \x20no bgp ebgp-requires-policy\n no bgp network import-check\n no bgp default ipv4-unicast\n\
                 \x20neighbor 10.9.0.1 remote-as 64512\n neighbor 10.9.0.1 timers 3 9\n neighbor 10.9.0.1 bfd profile fast\n\
                 \x20neighbor fd00:9::1 remote-as 64512\n neighbor fd00:9::1 timers connect 2\n\
                 \x20address-family ipv4 unicast\n  neighbor 10.9.0.1 activate\n  neighbor 10.9.0.1 route-map vipflow-in in\n exit-address-family\n\
                 \x20address-family ipv6 unicast\n  neighbor 10.9.0.1 activate\n  neighbor 10.9.0.1 route-map vipflow-in in\n\
                 \x20 neighbor fd00:9::1 activate\n  neighbor fd00:9::1 route-map vipflow-in in\n exit-address-family\n\
                 exit\n"
            )
        );
    }

    #[test]
    fn what_cannot_be_configured_is_said_and_left_out() {
        let peers = [
            peer("a", "{myASN: 64513, peerASN: 64512, peerAddress: 10.9.0.1}"),
            peer("b", "{myASN: 64999, peerASN: 64512, peerAddress: 10.9.0.3}"),
            peer("c", "{myASN: 64513, peerASN: 64512, peerAddress: nope}"),
            peer(
                "d",
                "{myASN: 64513, peerASN: 64512, peerAddress: 10.9.0.4, holdTime: soon, bfdProfile: none}",
            ),
        ];
        let (text, problems) = node_config(&BTreeMap::new(), &peers, &[]);
        let text = text.expect("a configuration");
        assert!(
            !text.contains("10.9.0.3") && !text.contains("nope"),
            "{text}"
        );
        assert!(text.contains("neighbor 10.9.0.4 remote-as"), "{text}");
        let said: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(said.len(), 4, "{said:#?}");
        assert!(said[0].contains("myASN 64999"), "{said:#?}");
        // No peer for the node: no BGP at all.
        let only_r2 = [peer(
            "r2",
            "{myASN: 1, peerASN: 2, peerAddress: 10.8.0.1, nodeSelectors: [{matchLabels: {rack: r2}}]}",
        )];
        assert_eq!(node_config(&BTreeMap::new(), &only_r2, &[]).0, None);
    }

    #[test]
    fn go_durations() {
        for (v, s) in [
            ("90s", Some(90)),
            ("1m30s", Some(90)),
            ("2h", Some(7200)),
            ("1500ms", Some(1)),
        ] {
            assert_eq!(go_duration_secs(v), s, "{v}");
        }
        for v in ["", "s", "10", "1x", "-1s"] {
            assert_eq!(go_duration_secs(v), None, "{v}");
        }
    }

    /// Two peers (one with BFD and timers) and one of them alone, as [`node_config`] writes them.
    fn two_and_one() -> (String, String) {
        let (two, one, _, _) = two_and_one_also_shutting_down();
        (two, one)
    }

    /// [`two_and_one`], and each in graceful shutdown.
    fn two_and_one_also_shutting_down() -> (String, String, String, String) {
        let fast: BfdProfile = serde_yaml_ng::from_str(
            "kind: BFDProfile\nmetadata: {name: fast}\nspec: {receiveInterval: 300, transmitInterval: 300, detectMultiplier: 3}\n",
        )
        .expect("a BFDProfile");
        let tor4 = peer(
            "tor4",
            "{myASN: 64513, peerASN: 64512, peerAddress: 10.9.0.1, holdTime: 9s, keepaliveTime: 3s, bfdProfile: fast}",
        );
        let tor6 = peer(
            "tor6",
            "{myASN: 64513, peerASN: 64512, peerAddress: 'fd00:9::1', connectTime: 2s}",
        );
        let none = BTreeMap::new();
        let policy = RoutePolicy::default();
        let make = |peers: &[BgpPeer], graceful_shutdown: bool| {
            node_config_as(
                &none,
                peers,
                std::slice::from_ref(&fast),
                &Speaking {
                    policy: &policy,
                    router_id: None,
                    graceful_shutdown,
                },
            )
            .0
            .expect("a configuration")
        };
        let two = [tor4, tor6.clone()];
        let one = [tor6];
        (
            make(&two, false),
            make(&one, false),
            make(&two, true),
            make(&one, true),
        )
    }

    #[test]
    fn the_same_configuration_is_no_batch_and_a_first_one_is_itself_without_a_left_graceful_shutdown()
     {
        let (two, _, draining, _) = two_and_one_also_shutting_down();
        assert_eq!(config_batch(Some(&two), Some(&two)), None);
        assert_eq!(config_batch(None, None), None);
        assert_eq!(
            config_batch(None, Some(&two)),
            Some(format!(
                "router bgp 64513\n no bgp graceful-shutdown\nexit\n{two}"
            ))
        );
        // Asked for, it is not taken back.
        assert_eq!(config_batch(None, Some(&draining)), Some(draining.clone()));
    }

    #[test]
    fn a_peer_that_goes_is_removed_whole_and_its_unused_profile_with_it() {
        let (two, one) = two_and_one();
        let batch = config_batch(Some(&two), Some(&one)).expect("a change");
        let undo: String = batch
            .split("frr defaults")
            .next()
            .unwrap_or_default()
            .to_string();
        assert_eq!(
            undo,
            "bfd\n no profile fast\nexit\nrouter bgp 64513\n no neighbor 10.9.0.1 remote-as 64512\nexit\n",
            "{batch}"
        );
        assert!(
            batch.ends_with(&one),
            "then the new configuration whole:\n{batch}"
        );
    }

    #[test]
    fn a_setting_that_goes_is_undone_in_its_own_block() {
        let (_, one) = two_and_one();
        let without_timer = one.replace(" neighbor fd00:9::1 timers connect 2\n", "");
        let batch = config_batch(Some(&one), Some(&without_timer)).expect("a change");
        assert!(
            batch.starts_with("router bgp 64513\n no neighbor fd00:9::1 timers connect 2\nexit\n"),
            "{batch}"
        );
        // An activation that goes is undone inside its address family.
        let v4_off = one.replace(
            " address-family ipv4 unicast\n  neighbor fd00:9::1 activate\n  neighbor fd00:9::1 route-map vipflow-in in\n exit-address-family\n",
            "",
        );
        assert_ne!(v4_off, one);
        let batch = config_batch(Some(&one), Some(&v4_off)).expect("a change");
        assert!(
            batch.starts_with("router bgp 64513\n address-family ipv4 unicast\n  no neighbor fd00:9::1 activate\n  no neighbor fd00:9::1 route-map vipflow-in in\n exit-address-family\nexit\n"),
            "{batch}"
        );
    }

    #[test]
    fn another_as_or_no_bgp_at_all_removes_the_bgp_instance() {
        let (_, one) = two_and_one();
        let other_as = one.replace("router bgp 64513", "router bgp 64600");
        let batch = config_batch(Some(&one), Some(&other_as)).expect("a change");
        assert!(batch.starts_with("no router bgp 64513\n"), "{batch}");
        assert!(batch.ends_with(&other_as));
        assert_eq!(
            config_batch(Some(&one), None).as_deref(),
            Some("no route-map vipflow-in deny 10\nno router bgp 64513\n")
        );
    }

    #[test]
    fn a_draining_node_shuts_down_gracefully_and_back() {
        let (_, one, _, draining) = two_and_one_also_shutting_down();
        assert!(
            draining.contains(
                "router bgp 64513\n bgp graceful-shutdown\n no bgp ebgp-requires-policy\n"
            ),
            "{draining}"
        );
        let on = config_batch(Some(&one), Some(&draining)).expect("a change");
        assert!(on.ends_with(&draining), "{on}");
        let off = config_batch(Some(&draining), Some(&one)).expect("a change");
        assert!(
            off.starts_with("router bgp 64513\n no bgp graceful-shutdown\nexit\n"),
            "{off}"
        );
        // Through the objects: the drain mark on the Node.
        let o = crate::decode::parse(
            "apiVersion: v1\nkind: List\nitems:\n\
             - {apiVersion: v1, kind: Node, metadata: {name: n1, annotations: {vipflow.io/drain: 'true'}}}\n\
             - {apiVersion: v1, kind: Node, metadata: {name: n2}}\n\
             - {apiVersion: vipflow.io/v1alpha1, kind: BGPPeer, metadata: {name: tor}, spec: {myASN: 64513, peerASN: 64512, peerAddress: 10.9.0.1}}\n",
        )
        .expect("objects")
        .objects;
        let n1 = for_node(&o, "n1").0.expect("a configuration");
        let n2 = for_node(&o, "n2").0.expect("a configuration");
        assert!(n1.contains(" bgp graceful-shutdown\n"), "{n1}");
        assert!(!n2.contains("graceful-shutdown"), "{n2}");
    }

    #[test]
    fn the_router_id_is_the_peers_else_the_nodes_internal_ipv4_address() {
        let objects = |peer_spec: &str| {
            crate::decode::parse(&format!(
                "apiVersion: v1\nkind: List\nitems:\n\
                 - {{apiVersion: v1, kind: Node, metadata: {{name: n1}}, status: {{addresses: [{{type: Hostname, address: n1}}, {{type: InternalIP, address: 'fd00:18::11'}}, {{type: InternalIP, address: 172.18.0.11}}]}}}}\n\
                 - {{apiVersion: v1, kind: Node, metadata: {{name: n2}}}}\n\
                 - {{apiVersion: vipflow.io/v1alpha1, kind: BGPPeer, metadata: {{name: tor}}, spec: {peer_spec}}}\n"
            ))
            .expect("objects")
            .objects
        };
        let o = objects("{myASN: 64513, peerASN: 64512, peerAddress: 10.9.0.1}");
        let n1 = for_node(&o, "n1").0.expect("a configuration");
        assert!(
            n1.contains("router bgp 64513\n bgp router-id 172.18.0.11\n"),
            "{n1}"
        );
        // No address known: zebra picks one.
        let n2 = for_node(&o, "n2").0.expect("a configuration");
        assert!(!n2.contains("router-id"), "{n2}");
        // The peer's routerID wins.
        let o =
            objects("{myASN: 64513, peerASN: 64512, peerAddress: 10.9.0.1, routerID: 10.0.0.1}");
        let n1 = for_node(&o, "n1").0.expect("a configuration");
        assert!(n1.contains(" bgp router-id 10.0.0.1\n"), "{n1}");
        assert_eq!(n1.matches("router-id").count(), 1, "{n1}");
    }

    #[test]
    fn every_neighbor_takes_nothing_from_its_peer() {
        let (two, _) = two_and_one();
        assert!(
            two.contains("route-map vipflow-in deny 10\nexit\n"),
            "{two}"
        );
        for n in ["10.9.0.1", "fd00:9::1"] {
            for family in ["ipv4", "ipv6"] {
                let block = two
                    .split(&format!(" address-family {family} unicast\n"))
                    .nth(1)
                    .and_then(|b| b.split(" exit-address-family").next())
                    .unwrap_or_default();
                assert!(
                    block.contains(&format!("  neighbor {n} route-map vipflow-in in\n")),
                    "{n} in {family}: {two}"
                );
            }
        }
    }

    #[test]
    fn the_as_is_read_from_the_instance_a_configuration_opens() {
        let (_, one) = two_and_one();
        assert_eq!(bgp_asn(&one), Some(64513));
        assert_eq!(bgp_asn("frr defaults datacenter\n"), None);
    }
}
