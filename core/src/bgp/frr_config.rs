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

use super::objects::{BfdProfile, BgpPeer};
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
}

/// The node's configuration, and what was left out of it. `None` when no peer selects the
/// node (it speaks no BGP).
pub fn node_config(
    node_labels: &BTreeMap<String, String>,
    peers: &[BgpPeer],
    profiles: &[BfdProfile],
) -> (Option<String>, Vec<FrrConfigProblem>) {
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
    let _ = writeln!(out, "router bgp {}", first.spec.my_asn);
    if let Some(id) = chosen.iter().find_map(|(p, _)| p.spec.router_id.as_deref()) {
        let _ = writeln!(out, " bgp router-id {id}");
    }
    out.push_str(" no bgp ebgp-requires-policy\n no bgp network import-check\n no bgp default ipv4-unicast\n");
    let mut families: [Vec<IpAddr>; 2] = [Vec::new(), Vec::new()];
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
                fam.push(*address);
            }
        }
    }
    for (family, neighbors) in ["ipv4", "ipv6"].iter().zip(&families) {
        if neighbors.is_empty() {
            continue;
        }
        let _ = writeln!(out, " address-family {family} unicast");
        for n in neighbors {
            let _ = writeln!(out, "  neighbor {n} activate");
        }
        out.push_str(" exit-address-family\n");
    }
    out.push_str("exit\n");
    (Some(out), problems)
}

/// Whole seconds of a Go duration as Kubernetes objects write them (`90s`, `1m30s`, `2h`,
/// `500ms` rounds down); `None` when it is not one.
fn go_duration_secs(v: &str) -> Option<u64> {
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
                 router bgp 64513\n bgp router-id 10.9.0.2\n\
                 \x20no bgp ebgp-requires-policy\n no bgp network import-check\n no bgp default ipv4-unicast\n\
                 \x20neighbor 10.9.0.1 remote-as 64512\n neighbor 10.9.0.1 timers 3 9\n neighbor 10.9.0.1 bfd profile fast\n\
                 \x20neighbor fd00:9::1 remote-as 64512\n neighbor fd00:9::1 timers connect 2\n\
                 \x20address-family ipv4 unicast\n  neighbor 10.9.0.1 activate\n exit-address-family\n\
                 \x20address-family ipv6 unicast\n  neighbor 10.9.0.1 activate\n  neighbor fd00:9::1 activate\n exit-address-family\n\
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
}
