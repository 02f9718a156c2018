//! What frr-k8s makes of the objects that select a node, rendered by vipflow's own FRR
//! translation ([`crate::bgp::frr_config`]): the objects merged as frr-k8s merges them (one
//! router per VRF, neighbors by address, the union of what each object sends them), then
//! written as the direct mode writes a node's configuration. `vipflow` uses it to check what
//! it wrote, and the tests load it into a real FRR to compare the routes with the direct
//! mode's.
//!
//! Only what vipflow writes is rendered: the default VRF, neighbors by address, no raw
//! configuration; and one set of communities and local preferences for every neighbor
//! (vipflow's objects give every neighbor the same).

use super::objects::{ALLOW_ALL, FrrConfiguration, FrrNeighbor};
use crate::bgp::frr_config::{FrrConfigProblem, node_config_with};
use crate::bgp::objects::{BfdProfile, BfdProfileSpec, BgpPeer, BgpPeerSpec};
use crate::bgp::route_policy::{
    Attributes, Community, RoutePolicy, community, write_peer_filter, write_route_map,
};
use ipnet::IpNet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::{BTreeMap, BTreeSet};

/// Why the objects that select a node make no configuration (frr-k8s would refuse them too).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    #[error("FRRConfiguration {object}: {what} is not rendered")]
    NotRendered { object: String, what: &'static str },
    #[error("FRRConfiguration {object}: router AS {asn} differs from {first}")]
    OtherAsn {
        object: String,
        asn: u32,
        first: u32,
    },
    #[error("FRRConfiguration {object}: prefix {prefix:?} is not a prefix")]
    BadPrefix { object: String, prefix: String },
    #[error(
        "FRRConfiguration {object}: neighbor {address} differs from another object's ({field})"
    )]
    NeighborConflict {
        object: String,
        address: String,
        field: &'static str,
    },
    #[error("FRRConfiguration {object}: BFD profile {profile} differs from another object's")]
    ProfileConflict { object: String, profile: String },
    #[error("neighbor {address}: communities or local preferences differ from another neighbor's")]
    PerNeighborAttributes { address: String },
    #[error("prefix {prefix} has local preferences {first} and {second}")]
    LocalPrefConflict {
        prefix: String,
        first: u32,
        second: u32,
    },
}

/// A node's configuration as frr-k8s would merge it, in the direct mode's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedNode {
    pub asn: u32,
    /// The configuration (as [`crate::bgp::frr_config::node_config`] writes it).
    pub config: String,
    /// What the node originates ([`crate::plan::bgp::frr_batch`] makes the lines).
    pub networks: BTreeSet<IpNet>,
    /// What each neighbor is sent, by address.
    pub sent: BTreeMap<String, BTreeSet<IpNet>>,
}

#[derive(Default)]
struct Merged {
    neighbor: Option<FrrNeighbor>,
    sent: BTreeSet<IpNet>,
    /// Community or `lp:N`, and the prefixes it goes on.
    attributes: BTreeMap<String, BTreeSet<IpNet>>,
}

/// The objects among `objects` whose node selector selects a node with `labels`, merged and
/// rendered. `Ok(None)` when none does (or none has a router).
pub fn render(
    objects: &[FrrConfiguration],
    labels: &BTreeMap<String, String>,
) -> Result<Option<RenderedNode>, RenderError> {
    let mut asn = None;
    let mut router_id = None;
    let mut networks = BTreeSet::new();
    let mut neighbors: BTreeMap<String, Merged> = BTreeMap::new();
    let mut profiles: BTreeMap<String, BfdProfileSpec> = BTreeMap::new();
    for o in objects {
        if !crate::ipam::selector::matches(&o.spec.node_selector, labels) {
            continue;
        }
        let object = o.metadata.name.clone().unwrap_or_default();
        for b in &o.spec.bgp.bfd_profiles {
            let spec = BfdProfileSpec {
                receive_interval: b.receive_interval,
                transmit_interval: b.transmit_interval,
                detect_multiplier: b.detect_multiplier,
                echo_interval: b.echo_interval,
                echo_mode: b.echo_mode.unwrap_or(false),
                passive_mode: b.passive_mode.unwrap_or(false),
                minimum_ttl: b.minimum_ttl,
            };
            if profiles.get(&b.name).is_some_and(|s| *s != spec) {
                return Err(RenderError::ProfileConflict {
                    object,
                    profile: b.name.clone(),
                });
            }
            profiles.insert(b.name.clone(), spec);
        }
        for r in &o.spec.bgp.routers {
            if r.vrf.as_deref().is_some_and(|v| !v.is_empty()) {
                return Err(RenderError::NotRendered {
                    object,
                    what: "a VRF",
                });
            }
            match asn {
                Some(first) if first != r.asn => {
                    return Err(RenderError::OtherAsn {
                        object,
                        asn: r.asn,
                        first,
                    });
                }
                _ => asn = Some(r.asn),
            }
            if router_id.is_none() {
                router_id.clone_from(&r.id);
            }
            let mut own = BTreeSet::new();
            for p in &r.prefixes {
                let net: IpNet = p.parse().map_err(|_| RenderError::BadPrefix {
                    object: object.clone(),
                    prefix: p.clone(),
                })?;
                own.insert(net);
            }
            networks.extend(own.iter().copied());
            for n in &r.neighbors {
                let parse = |p: &String| -> Result<IpNet, RenderError> {
                    p.parse().map_err(|_| RenderError::BadPrefix {
                        object: object.clone(),
                        prefix: p.clone(),
                    })
                };
                let m = neighbors.entry(n.address.clone()).or_default();
                let mut plain = n.clone();
                plain.to_advertise = Default::default();
                match &m.neighbor {
                    Some(kept) => {
                        if let Some(field) = differs(kept, &plain) {
                            return Err(RenderError::NeighborConflict {
                                object,
                                address: n.address.clone(),
                                field,
                            });
                        }
                        if kept.bfd_profile.is_none() {
                            m.neighbor = Some(plain);
                        }
                    }
                    None => m.neighbor = Some(plain),
                }
                let a = &n.to_advertise;
                if a.allowed.mode.as_deref() == Some(ALLOW_ALL) {
                    m.sent.extend(own.iter().copied());
                } else {
                    for p in &a.allowed.prefixes {
                        m.sent.insert(parse(p)?);
                    }
                }
                for c in &a.with_community {
                    let set = m.attributes.entry(c.community.clone()).or_default();
                    for p in &c.prefixes {
                        set.insert(parse(p)?);
                    }
                }
                for l in &a.with_local_pref {
                    let set = m
                        .attributes
                        .entry(format!("lp:{}", l.local_pref))
                        .or_default();
                    for p in &l.prefixes {
                        set.insert(parse(p)?);
                    }
                }
            }
        }
    }
    let Some(asn) = asn else {
        return Ok(None);
    };
    // A neighbor of one family is sent that family only.
    for m in neighbors.values_mut() {
        if let Some(n) = &m.neighbor
            && !n.dual_stack_address_family
        {
            let v6 = n.address.contains(':');
            m.sent.retain(|p| matches!(p, IpNet::V6(_)) == v6);
            for set in m.attributes.values_mut() {
                set.retain(|p| matches!(p, IpNet::V6(_)) == v6);
            }
        }
    }
    // One set of attributes for every neighbor, as the direct mode's route-map has.
    let mut attributes: BTreeMap<String, BTreeSet<IpNet>> = BTreeMap::new();
    for (address, m) in &neighbors {
        for (a, set) in &m.attributes {
            let all = attributes.entry(a.clone()).or_default();
            for p in set {
                if !all.contains(p)
                    && neighbors.values().any(|o| {
                        o.sent.contains(p) && !o.attributes.get(a).is_some_and(|s| s.contains(p))
                    })
                {
                    return Err(RenderError::PerNeighborAttributes {
                        address: address.clone(),
                    });
                }
                all.insert(*p);
            }
        }
    }
    let mut local_pref: BTreeMap<IpNet, u32> = BTreeMap::new();
    for (a, set) in &attributes {
        if let Some(l) = a.strip_prefix("lp:").and_then(|l| l.parse::<u32>().ok()) {
            for p in set {
                if let Some(first) = local_pref.insert(*p, l)
                    && first != l
                {
                    return Err(RenderError::LocalPrefConflict {
                        prefix: p.to_string(),
                        first,
                        second: l,
                    });
                }
            }
        }
    }
    let name = |address: &str| format!("n-{}", address.replace(['.', ':'], "-"));
    let peers: Vec<BgpPeer> = neighbors
        .iter()
        .filter_map(|(address, m)| {
            let n = m.neighbor.as_ref()?;
            Some(BgpPeer {
                api_version: None,
                kind: None,
                metadata: ObjectMeta {
                    name: Some(name(address)),
                    ..ObjectMeta::default()
                },
                spec: BgpPeerSpec {
                    my_asn: asn,
                    peer_asn: n.asn,
                    peer_address: n.address.clone(),
                    source_address: n.source_address.clone(),
                    peer_port: n.port,
                    hold_time: n.hold_time.clone(),
                    keepalive_time: n.keepalive_time.clone(),
                    connect_time: n.connect_time.clone(),
                    router_id: router_id.clone(),
                    node_selectors: Vec::new(),
                    password: n.password.clone(),
                    bfd_profile: n.bfd_profile.clone(),
                    enable_graceful_restart: n.enable_graceful_restart,
                    ebgp_multi_hop: n.ebgp_multi_hop,
                    disable_mp: !n.dual_stack_address_family,
                },
            })
        })
        .collect();
    let bfd: Vec<BfdProfile> = profiles
        .into_iter()
        .map(|(n, spec)| BfdProfile {
            api_version: None,
            kind: None,
            metadata: ObjectMeta {
                name: Some(n),
                ..ObjectMeta::default()
            },
            spec,
        })
        .collect();
    let policy = policy(&neighbors, &attributes, &name);
    let (config, problems) = node_config_with(&BTreeMap::new(), &peers, &bfd, &policy);
    if let Some(p) = problems.first() {
        return Err(RenderError::NotRendered {
            object: match p {
                FrrConfigProblem::BadAddress { peer, .. }
                | FrrConfigProblem::OtherAsn { peer, .. }
                | FrrConfigProblem::BadDuration { peer, .. }
                | FrrConfigProblem::NoProfile { peer, .. } => peer.clone(),
                FrrConfigProblem::BadCommunity { advertisement, .. } => advertisement.clone(),
            },
            what: "a neighbor vipflow's translation refuses",
        });
    }
    let Some(config) = config else {
        return Ok(None);
    };
    Ok(Some(RenderedNode {
        asn,
        config,
        networks,
        sent: neighbors.into_iter().map(|(a, m)| (a, m.sent)).collect(),
    }))
}

/// The field two objects' copies of a neighbor disagree on, as frr-k8s compares them.
fn differs(a: &FrrNeighbor, b: &FrrNeighbor) -> Option<&'static str> {
    if a.asn != b.asn {
        return Some("asn");
    }
    if a.port.unwrap_or(179) != b.port.unwrap_or(179) {
        return Some("port");
    }
    if a.source_address != b.source_address {
        return Some("sourceaddress");
    }
    if a.password != b.password {
        return Some("password");
    }
    if a.bfd_profile.is_some() && b.bfd_profile.is_some() && a.bfd_profile != b.bfd_profile {
        return Some("bfdProfile");
    }
    if a.ebgp_multi_hop != b.ebgp_multi_hop {
        return Some("ebgpMultiHop");
    }
    if a.dual_stack_address_family != b.dual_stack_address_family {
        return Some("dualStackAddressFamily");
    }
    let secs = |v: &Option<String>| {
        v.as_deref()
            .and_then(crate::bgp::frr_config::go_duration_secs)
    };
    for (field, x, y, default) in [
        ("holdTime", &a.hold_time, &b.hold_time, 180),
        ("keepaliveTime", &a.keepalive_time, &b.keepalive_time, 60),
        ("connectTime", &a.connect_time, &b.connect_time, 60),
    ] {
        if secs(x).unwrap_or(default) != secs(y).unwrap_or(default) {
            return Some(field);
        }
    }
    None
}

/// Each neighbor's outbound filter (what it is sent), and the route-map of the attributes
/// (each a community, a large community or `lp:N`, and the prefixes it goes on).
fn policy(
    neighbors: &BTreeMap<String, Merged>,
    attributes: &BTreeMap<String, BTreeSet<IpNet>>,
    name: &dyn Fn(&str) -> String,
) -> RoutePolicy {
    let per_family = |set: &BTreeSet<IpNet>| -> [BTreeSet<String>; 2] {
        std::array::from_fn(|family| {
            set.iter()
                .filter(|p| matches!(p, IpNet::V6(_)) == (family == 1))
                .map(|p| p.to_string())
                .collect()
        })
    };
    let made: Vec<(String, Attributes)> = attributes
        .iter()
        .enumerate()
        .map(|(i, (a, set))| {
            let mut made = Attributes {
                entries: per_family(set),
                ..Attributes::default()
            };
            match (a.strip_prefix("lp:"), community(a)) {
                (Some(l), _) => made.local_pref = l.parse().ok(),
                (None, Some(Community::Standard(c))) => made.communities.push(c),
                (None, Some(Community::Large(c))) => made.large_communities.push(c),
                (None, None) => {}
            }
            (format!("vipflow-attr-{i}"), made)
        })
        .collect();
    let named: Vec<(String, &Attributes)> = made.iter().map(|(n, a)| (n.clone(), a)).collect();
    let mut policy = RoutePolicy {
        peer_filters: true,
        ..RoutePolicy::default()
    };
    policy.route_map = write_route_map(&mut policy.text, &named);
    for (address, m) in neighbors {
        write_peer_filter(&mut policy.text, &name(address), &per_family(&m.sent));
    }
    policy
}
