//! The objects the elected agent writes for externalTrafficPolicy Cluster VIPs: per pool, one
//! object for each group of nodes that advertise the pool's VIPs alike (the same peers, the
//! same advertisements), selecting those nodes by name. A Cluster VIP that comes or goes
//! changes one object per group — one API write when every node peers alike, at any number
//! of nodes — where writing per node would be one write per node.
//!
//! A node is in a group when it may carry traffic (live, not marked for drain, not excluded
//! from external load balancers), frr-k8s runs on it, and a `BGPPeer` selects it: the same
//! rules as the direct mode's ([`crate::plan::bgp`]). A node's own dataplane readiness is not
//! in the object: the agent writes a VIP once the plan holds it, and frr-k8s's debounce
//! (seconds) far outlasts OVN programming the VIP on each node.
//!
//! An object's name is the pool's and a digest of its group's peers and advertisements, so it
//! stays while nodes join and leave the group (they are in its node selector).

use super::build::{Entries, Role, Speaker, configuration};
use super::objects::FrrConfiguration;
use crate::announce::announcements::{draining, excluded, is_ready};
use crate::announce::placement::{Eligible, NodeName};
use crate::bgp::frr_config::{FrrConfigProblem, select_peers};
use crate::model::Objects;
use crate::plan::bgp_selection::BgpPools;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hasher as _;
use std::net::IpAddr;
use std::sync::Arc;

/// The label frr-k8s's node selectors match a node by (its name on every common installer).
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Who may advertise, as the membership and frr-k8s say.
#[derive(Debug, Clone, Copy, Default)]
pub struct Nodes<'a> {
    /// The live nodes, when a membership runs (otherwise the Nodes' Ready condition).
    pub live: Option<&'a BTreeSet<NodeName>>,
    /// The nodes frr-k8s runs on (its `FRRNodeState`s); `None`: every node.
    pub frr_k8s: Option<&'a BTreeSet<String>>,
}

/// A node that may advertise: its selector value and its peers (by index, and as its speaker).
struct Candidate<'a> {
    name: &'a str,
    hostname: String,
    peers: Vec<usize>,
    speaker: Speaker<'a>,
}

/// The shared objects for `vips` (every Cluster VIP BGP advertises, with the nodes that may
/// carry it), by name, and what was left out of them.
pub fn pool_configurations(
    objects: &Objects,
    pools: &BgpPools,
    vips: &[(IpAddr, Eligible)],
    nodes: Nodes,
    namespace: &str,
) -> (BTreeMap<String, FrrConfiguration>, Vec<FrrConfigProblem>) {
    let mut problems = Vec::new();
    let peer_index: BTreeMap<*const crate::bgp::objects::BgpPeer, usize> = objects
        .bgp
        .peers
        .iter()
        .enumerate()
        .map(|(i, p)| (p as *const _, i))
        .collect();
    let mut candidates = Vec::new();
    let mut said = BTreeSet::new();
    let no_labels = BTreeMap::new();
    for n in &objects.nodes {
        let Some(name) = n.metadata.name.as_deref() else {
            continue;
        };
        let live = match nodes.live {
            Some(l) => l.contains(&NodeName::from(name)),
            None => is_ready(n),
        };
        if !live || draining(n) || excluded(n) || nodes.frr_k8s.is_some_and(|f| !f.contains(name)) {
            continue;
        }
        let labels = n.metadata.labels.as_ref().unwrap_or(&no_labels);
        let (chosen, found) = select_peers(labels, &objects.bgp.peers);
        for f in found {
            if said.insert(f.to_string()) {
                problems.push(f);
            }
        }
        if chosen.is_empty() {
            continue;
        }
        let router_id = chosen.iter().find_map(|(p, _)| p.spec.router_id.clone());
        candidates.push(Candidate {
            name,
            hostname: labels
                .get(HOSTNAME_LABEL)
                .cloned()
                .unwrap_or_else(|| name.to_string()),
            peers: chosen
                .iter()
                .map(|(p, _)| peer_index[&(*p as *const _)])
                .collect(),
            speaker: Speaker {
                peers: chosen,
                router_id,
            },
        });
    }
    // Each pool's VIPs, by the nodes that may carry them (nearly always one class).
    let pool_list: Vec<_> = pools.each().collect();
    let mut classes: Vec<Vec<(&Eligible, Vec<IpAddr>)>> = vec![Vec::new(); pool_list.len()];
    for (vip, eligible) in vips {
        let Some(i) = pool_list.iter().position(|(p, _)| p.contains(*vip)) else {
            continue;
        };
        match classes[i].iter_mut().find(|(e, _)| *e == eligible) {
            Some((_, v)) => v.push(*vip),
            None => classes[i].push((eligible, vec![*vip])),
        }
    }
    let mut out = BTreeMap::new();
    for ((pool, terms), classes) in pool_list.iter().zip(&classes) {
        // Nodes grouped by what they advertise of the pool and to whom.
        type Key = (Vec<usize>, Vec<(usize, Vec<usize>)>);
        let mut groups: BTreeMap<Key, Vec<&Candidate>> = BTreeMap::new();
        for c in &candidates {
            let per_class: Vec<(usize, Vec<usize>)> = classes
                .iter()
                .enumerate()
                .filter(|(_, (e, _))| e.allows(c.name))
                .map(|(i, _)| {
                    let t: Vec<usize> = terms
                        .iter()
                        .enumerate()
                        .filter(|(_, t)| t.allows(c.name))
                        .map(|(j, _)| j)
                        .collect();
                    (i, t)
                })
                .filter(|(_, t)| !t.is_empty())
                .collect();
            if per_class.is_empty() {
                continue;
            }
            groups
                .entry((c.peers.clone(), per_class))
                .or_default()
                .push(c);
        }
        let mut names = BTreeSet::new();
        for ((_, per_class), members) in &groups {
            let mut entries = Entries::new();
            for (class, term_indices) in per_class {
                for vip in &classes[*class].1 {
                    for j in term_indices {
                        let t = &terms[*j];
                        let e = entries.entry(t.prefix(*vip, false)).or_default();
                        if !e.iter().any(|x| Arc::ptr_eq(x, t)) {
                            e.push(Arc::clone(t));
                        }
                    }
                }
            }
            let first = members[0];
            let mut digest = xxhash_rust::xxh3::Xxh3::new();
            // Named the same whatever order the source lists the peers in.
            let mut peer_names: Vec<&str> = first
                .speaker
                .peers
                .iter()
                .map(|(p, _)| p.metadata.name.as_deref().unwrap_or_default())
                .collect();
            peer_names.sort_unstable();
            for n in peer_names {
                digest.write(n.as_bytes());
                digest.write_u8(0);
            }
            for (_, term_indices) in per_class {
                for j in term_indices {
                    digest.write(terms[*j].name.as_bytes());
                    digest.write_u8(1);
                }
                digest.write_u8(2);
            }
            let base = format!("vipflow-{}-{:08x}", pool.name(), digest.finish() as u32);
            let mut name = base.clone();
            let mut n = 2;
            while !names.insert(name.clone()) {
                name = format!("{base}-{n}");
                n += 1;
            }
            let hostnames = hostnames_of(members);
            let selector = selector_of(&hostnames);
            let (object, found) = configuration(
                &name,
                namespace,
                &Role::Pool(pool.name().to_string()),
                selector,
                &first.speaker,
                &objects.bgp.bfd_profiles,
                &entries,
            );
            for f in found {
                if said.insert(f.to_string()) {
                    problems.push(f);
                }
            }
            if let Some(o) = object {
                for (name, o) in sharded(name, o, &entries, |n, e| {
                    configuration(
                        n,
                        namespace,
                        &Role::Pool(pool.name().to_string()),
                        selector_of(&hostnames),
                        &first.speaker,
                        &objects.bgp.bfd_profiles,
                        e,
                    )
                    .0
                }) {
                    out.insert(name, o);
                }
            }
        }
    }
    (out, problems)
}

/// The largest object written whole; a larger one goes out in shards, each a whole object
/// with part of the prefixes (frr-k8s merges them back), so that none nears etcd's 1.5 MiB
/// request limit however many peers and communities repeat the prefixes.
pub const SHARD_BYTES: usize = 512 * 1024;

/// `object` (named `name`, made of `entries`) as it is written: whole, or, when larger than
/// [`SHARD_BYTES`], as shards named `<name>-<i>of<n>` (`n` a power of two), each prefix in the
/// shard its hash picks, so that a VIP that comes or goes changes one shard.
fn sharded(
    name: String,
    object: FrrConfiguration,
    entries: &Entries,
    make: impl Fn(&str, &Entries) -> Option<FrrConfiguration>,
) -> Vec<(String, FrrConfiguration)> {
    // Below this many prefixes no object comes near the limit: not measured.
    const SMALL: usize = 2000;
    let size = if entries.len() < SMALL {
        0
    } else {
        serde_json::to_vec(&object).map_or(0, |v| v.len())
    };
    if size <= SHARD_BYTES {
        return vec![(name, object)];
    }
    let n = size.div_ceil(SHARD_BYTES).next_power_of_two();
    let mut shards = vec![Entries::new(); n];
    for (prefix, terms) in entries {
        shards[shard_of(prefix, n)].insert(*prefix, terms.clone());
    }
    shards
        .iter()
        .enumerate()
        .filter(|(_, e)| !e.is_empty())
        .filter_map(|(i, e)| {
            let shard = format!("{name}-{i}of{n}");
            make(&shard, e).map(|o| (shard, o))
        })
        .collect()
}

/// The shard of `n` that `prefix` goes in.
fn shard_of(prefix: &ipnet::IpNet, n: usize) -> usize {
    let h = xxhash_rust::xxh3::xxh3_64(prefix.to_string().as_bytes());
    usize::try_from(h % n as u64).unwrap_or(0)
}

/// The sorted hostnames of `members`.
fn hostnames_of(members: &[&Candidate]) -> Vec<String> {
    let mut hostnames: Vec<String> = members.iter().map(|c| c.hostname.clone()).collect();
    hostnames.sort();
    hostnames.dedup();
    hostnames
}

/// The node selector of the nodes named `hostnames`.
fn selector_of(hostnames: &[String]) -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: HOSTNAME_LABEL.into(),
            operator: "In".into(),
            values: Some(hostnames.to_vec()),
        }]),
        match_labels: None,
    }
}

/// The object for node `node`'s externalTrafficPolicy Local VIPs: `entries` (their host
/// routes), selecting the node alone. `None` when it has none or no peer.
pub fn node_configuration(
    objects: &Objects,
    node: &str,
    entries: &Entries,
    namespace: &str,
) -> (Option<FrrConfiguration>, Vec<FrrConfigProblem>) {
    if entries.is_empty() {
        return (None, Vec::new());
    }
    let me = objects
        .nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node));
    let labels = me
        .and_then(|n| n.metadata.labels.clone())
        .unwrap_or_default();
    let (peers, mut problems) = select_peers(&labels, &objects.bgp.peers);
    let router_id = peers
        .iter()
        .find_map(|(p, _)| p.spec.router_id.clone())
        .or_else(|| {
            me.and_then(|n| crate::bgp::frr_config::internal_ipv4(n))
                .map(|a| a.to_string())
        });
    let hostname = labels
        .get(HOSTNAME_LABEL)
        .cloned()
        .unwrap_or_else(|| node.to_string());
    let selector = LabelSelector {
        match_labels: Some(BTreeMap::from([(HOSTNAME_LABEL.to_string(), hostname)])),
        match_expressions: None,
    };
    let (object, found) = configuration(
        &node_object_name(node),
        namespace,
        &Role::Node(node.to_string()),
        selector,
        &Speaker { peers, router_id },
        &objects.bgp.bfd_profiles,
        entries,
    );
    problems.extend(found);
    (object, problems)
}

/// Node `node`'s own object for `local`, the host routes of the externalTrafficPolicy Local
/// VIPs it advertises ([`crate::plan::bgp_node::NodeBgp::local`]), each with the terms of the
/// advertisements it goes out under: [`node_configuration`] of [`local_entries`].
pub fn local_configuration(
    objects: &Objects,
    node: &str,
    local: &std::collections::BTreeSet<ipnet::IpNet>,
    namespace: &str,
) -> (Option<FrrConfiguration>, Vec<FrrConfigProblem>) {
    let entries = local_entries(&BgpPools::of(objects), node, local.iter().copied());
    node_configuration(objects, node, &entries, namespace)
}

/// The name of node `node`'s object.
pub fn node_object_name(node: &str) -> String {
    format!("vipflow-node-{node}")
}

/// `prefixes` (host routes of Local VIPs `node` advertises) with the terms of `pools` each goes
/// out under from `node`.
pub fn local_entries(
    pools: &BgpPools,
    node: &str,
    prefixes: impl IntoIterator<Item = ipnet::IpNet>,
) -> Entries {
    let mut out = Entries::new();
    for p in prefixes {
        let terms: Vec<_> = pools
            .terms(p.addr())
            .iter()
            .filter(|t| t.allows(node))
            .cloned()
            .collect();
        if !terms.is_empty() {
            out.insert(p, terms);
        }
    }
    out
}
