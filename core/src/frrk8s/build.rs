//! One `FRRConfiguration` from a node's speaker (its peers, as the `BGPPeer`s select them) and
//! the prefixes it carries, each with the `BGPAdvertisement` terms it goes out under.
//!
//! frr-k8s checks every object on its own before it merges them, so each object is whole: its
//! router names the prefixes, and each neighbor lists what it is sent, with what communities
//! and local preference, out of those prefixes only. A neighbor sent every prefix of the
//! object says `mode: all` instead of listing them again. A neighbor that carries one address
//! family (`disableMP`) lists prefixes of that family only, since frr-k8s refuses others.

use super::objects::{
    ALLOW_ALL, API_VERSION, AllowedPrefixes, CONFIGURATION_KIND, CommunityPrefixes, FrrBfdProfile,
    FrrBgp, FrrConfiguration, FrrConfigurationSpec, FrrNeighbor, FrrRouter, LocalPrefPrefixes,
    ToAdvertise,
};
use crate::bgp::frr_config::{FrrConfigProblem, go_duration_secs};
use crate::bgp::objects::{BfdProfile, BgpPeer};
use crate::plan::bgp_selection::AdvertisementTerms;
use ipnet::IpNet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

/// The prefixes one object carries, each with the terms it goes out under (at least one).
pub type Entries = BTreeMap<IpNet, Vec<Arc<AdvertisementTerms>>>;

/// The label every object vipflow writes carries, so it finds its own (and only its own).
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "vipflow";
/// `pool` (shared by the nodes that advertise a pool's Cluster VIPs alike) or `node` (one
/// node's externalTrafficPolicy Local VIPs).
pub const ROLE_LABEL: &str = "vipflow.io/frr-configuration";
/// The pool or the node the object is for.
pub const FOR_LABEL: &str = "vipflow.io/for";

/// What an object is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// A pool's Cluster VIPs, shared by every node that advertises them alike.
    Pool(String),
    /// One node's externalTrafficPolicy Local VIPs.
    Node(String),
}

impl Role {
    pub fn label(&self) -> &'static str {
        match self {
            Role::Pool(_) => "pool",
            Role::Node(_) => "node",
        }
    }

    fn subject(&self) -> &str {
        match self {
            Role::Pool(s) | Role::Node(s) => s,
        }
    }
}

/// The BGP side of the nodes an object is for: the same for each of them.
#[derive(Debug, Clone)]
pub struct Speaker<'a> {
    /// The `BGPPeer`s, in order, with their addresses ([`crate::bgp::frr_config::select_peers`]).
    pub peers: Vec<(&'a BgpPeer, IpAddr)>,
    /// The router ID, when one is the same on every node the object is for.
    pub router_id: Option<String>,
}

impl Speaker<'_> {
    /// The AS the nodes speak as: the first peer's `myASN`.
    pub fn asn(&self) -> Option<u32> {
        self.peers.first().map(|(p, _)| p.spec.my_asn)
    }
}

/// The object `name` in `namespace` for `role`, applied on the nodes `selector` selects.
/// `None` when the speaker has no peer. What cannot be written is left out and said.
pub fn configuration(
    name: &str,
    namespace: &str,
    role: &Role,
    selector: LabelSelector,
    speaker: &Speaker,
    profiles: &[BfdProfile],
    entries: &Entries,
) -> (Option<FrrConfiguration>, Vec<FrrConfigProblem>) {
    let mut problems = Vec::new();
    let Some(asn) = speaker.asn() else {
        return (None, problems);
    };
    let all: Vec<String> = entries.keys().map(|p| p.to_string()).collect();
    let named: BTreeMap<&str, &BfdProfile> = profiles
        .iter()
        .filter_map(|b| Some((b.metadata.name.as_deref()?, b)))
        .collect();
    let mut used_profiles = BTreeSet::new();
    let mut neighbors = Vec::new();
    for (peer, address) in &speaker.peers {
        let s = &peer.spec;
        let peer_name = peer.metadata.name.as_deref().unwrap_or_default();
        let duration = |field: &'static str, v: &Option<String>, problems: &mut Vec<_>| {
            let v = v.as_deref()?;
            if go_duration_secs(v).is_some() {
                Some(v.to_string())
            } else {
                problems.push(FrrConfigProblem::BadDuration {
                    peer: peer_name.to_string(),
                    field,
                    value: v.to_string(),
                });
                None
            }
        };
        let bfd_profile = match s.bfd_profile.as_deref() {
            Some(b) if named.contains_key(b) => {
                used_profiles.insert(b);
                Some(b.to_string())
            }
            Some(b) => {
                problems.push(FrrConfigProblem::NoProfile {
                    peer: peer_name.to_string(),
                    profile: b.to_string(),
                });
                None
            }
            None => None,
        };
        // One family per session with disableMP: the address's own.
        let carries = |p: &IpNet| !s.disable_mp || matches!(p, IpNet::V6(_)) == address.is_ipv6();
        let to_advertise = advertise(
            entries,
            peer_name,
            &carries,
            &all,
            &mut problems,
            Some(asn) != Some(s.peer_asn),
        );
        neighbors.push(FrrNeighbor {
            asn: s.peer_asn,
            address: address.to_string(),
            port: s.peer_port,
            password: s.password.clone(),
            source_address: s.source_address.clone(),
            hold_time: duration("holdTime", &s.hold_time, &mut problems),
            keepalive_time: duration("keepaliveTime", &s.keepalive_time, &mut problems),
            connect_time: duration("connectTime", &s.connect_time, &mut problems),
            ebgp_multi_hop: s.ebgp_multi_hop,
            bfd_profile,
            enable_graceful_restart: s.enable_graceful_restart,
            dual_stack_address_family: !s.disable_mp,
            to_advertise,
        });
    }
    // The same object whatever order the source lists the peers in.
    neighbors.sort_by(|a, b| a.address.cmp(&b.address));
    let bfd_profiles = used_profiles
        .iter()
        .map(|n| {
            let s = &named[n].spec;
            FrrBfdProfile {
                name: n.to_string(),
                receive_interval: s.receive_interval,
                transmit_interval: s.transmit_interval,
                detect_multiplier: s.detect_multiplier,
                echo_interval: s.echo_interval,
                echo_mode: s.echo_mode.then_some(true),
                passive_mode: s.passive_mode.then_some(true),
                minimum_ttl: s.minimum_ttl,
            }
        })
        .collect();
    let labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
        (ROLE_LABEL.to_string(), role.label().to_string()),
        (FOR_LABEL.to_string(), role.subject().to_string()),
    ]);
    let object = FrrConfiguration {
        api_version: API_VERSION.into(),
        kind: CONFIGURATION_KIND.into(),
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: FrrConfigurationSpec {
            bgp: FrrBgp {
                routers: vec![FrrRouter {
                    asn,
                    id: speaker.router_id.clone(),
                    vrf: None,
                    neighbors,
                    prefixes: all,
                }],
                bfd_profiles,
            },
            node_selector: selector,
        },
    };
    (Some(object), problems)
}

/// What neighbor `peer` is sent of `entries`: the prefixes an advertisement that goes to it
/// covers, of the families it carries, with their communities and (over iBGP) local
/// preference.
fn advertise(
    entries: &Entries,
    peer: &str,
    carries: &dyn Fn(&IpNet) -> bool,
    all: &[String],
    problems: &mut Vec<FrrConfigProblem>,
    ebgp: bool,
) -> ToAdvertise {
    let mut allowed = Vec::new();
    let mut every = true;
    let mut communities: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut local_prefs: BTreeMap<String, u32> = BTreeMap::new();
    let mut said = BTreeSet::new();
    for (prefix, terms) in entries {
        let to_peer: Vec<&Arc<AdvertisementTerms>> = terms
            .iter()
            .filter(|t| t.peers.is_empty() || t.peers.iter().any(|p| p == peer))
            .collect();
        if to_peer.is_empty() {
            every = false;
            continue;
        }
        if !carries(prefix) {
            continue;
        }
        let text = prefix.to_string();
        for t in &to_peer {
            for c in &t.communities {
                match crate::bgp::route_policy::community(c) {
                    Some(_) => {
                        let list = communities.entry(c.trim().to_string()).or_default();
                        if list.last() != Some(&text) {
                            list.push(text.clone());
                        }
                    }
                    None => {
                        if said.insert((t.name.clone(), c.clone())) {
                            problems.push(FrrConfigProblem::BadCommunity {
                                advertisement: t.name.clone(),
                                community: c.clone(),
                            });
                        }
                    }
                }
            }
            // Local preference travels over iBGP only; frr-k8s takes one per prefix (the
            // highest of the advertisements that cover it).
            if let Some(l) = t.local_pref.filter(|l| *l != 0 && !ebgp) {
                let e = local_prefs.entry(text.clone()).or_insert(l);
                *e = (*e).max(l);
            }
        }
        allowed.push(text);
    }
    let mut by_pref: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for (prefix, l) in local_prefs {
        by_pref.entry(l).or_default().push(prefix);
    }
    ToAdvertise {
        allowed: if every && !all.is_empty() {
            AllowedPrefixes {
                mode: Some(ALLOW_ALL.into()),
                prefixes: Vec::new(),
            }
        } else {
            AllowedPrefixes {
                mode: None,
                prefixes: allowed,
            }
        },
        with_local_pref: by_pref
            .into_iter()
            .map(|(local_pref, prefixes)| LocalPrefPrefixes {
                local_pref,
                prefixes,
            })
            .collect(),
        with_community: communities
            .into_iter()
            .map(|(community, prefixes)| CommunityPrefixes {
                community,
                prefixes,
            })
            .collect(),
    }
}

/// `object` with only the prefixes of `to` (what the dataplane gate let through); `None`
/// when none is left.
pub fn restricted(object: &FrrConfiguration, to: &BTreeSet<IpNet>) -> Option<FrrConfiguration> {
    let keep = |p: &String| p.parse::<IpNet>().is_ok_and(|n| to.contains(&n));
    let mut out = object.clone();
    let mut any = false;
    for r in &mut out.spec.bgp.routers {
        r.prefixes.retain(keep);
        any |= !r.prefixes.is_empty();
        for n in &mut r.neighbors {
            let a = &mut n.to_advertise;
            a.allowed.prefixes.retain(keep);
            for l in &mut a.with_local_pref {
                l.prefixes.retain(keep);
            }
            a.with_local_pref.retain(|l| !l.prefixes.is_empty());
            for c in &mut a.with_community {
                c.prefixes.retain(keep);
            }
            a.with_community.retain(|c| !c.prefixes.is_empty());
        }
    }
    any.then_some(out)
}

/// Every prefix `object`'s routers originate.
pub fn originated(object: &FrrConfiguration) -> BTreeSet<IpNet> {
    object
        .spec
        .bgp
        .routers
        .iter()
        .flat_map(|r| r.prefixes.iter().filter_map(|p| p.parse().ok()))
        .collect()
}
