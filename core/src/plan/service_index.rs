//! The incremental model of the Services and the flows of each bridge: the same flows as
//! [`super::flows::plan`], kept up to date one changed Service at a time.
//!
//! Re-planning a whole bridge on every change costs time in proportion to the cluster (about
//! 200 ms at 50,000 flows); a change touches a handful of flows. This planner keeps:
//! - each Service's validated VIP:port/protocol *claims* (re-validated only when its object
//!   changed: objects are shared, so an unchanged Service is the same allocation);
//! - the claimants of each claim, ordered by rank (oldest Service first), and a count of claims
//!   per VIP. Flows depend only on whether a claim has a claimant; the Northbound rows depend on
//!   which Service wins it, so a change of winner is recorded for [`super::row_table`];
//! - the flow index of each bridge (a persistent map: handing it to a reconciler is O(1)).
//!
//! What can invalidate other Services' VIPs is tracked too: a VIP equal to a node address is
//! re-checked when node addresses change, and one equal to a cluster IP when that cluster IP
//! appears or goes.
//!
//! A property test checks that after any sequence of snapshots the index equals the full plan.

use super::flows::{FlowKey, FlowMaker, PlanInput, claim_keys, vip_keys};
use super::service_report::{Claimants, ServiceReport, with_rank, without_rank};
use super::{KeyMap, KeySet};
use crate::config::BridgeConfig;
use crate::model::{
    KeptService, ModelOptions, Objects, Problem, ProblemKind, Protocol, Service, ServiceKey,
    Subject, build_nodes, build_service, cluster_ips_of, rank,
};
use k8s_openapi::api::core::v1 as core;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

/// A VIP:port/protocol.
pub type PortClaim = (IpAddr, u16, Protocol);

/// The keys of a bridge's planned flows (a persistent ordered set: handing it on is O(1), and
/// two versions are compared without visiting what they share). Each flow is made from its
/// key by the bridge's [`FlowMaker`].
pub type FlowIndex = imbl::OrdSet<FlowKey>;

/// What changed in one bridge's flow index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowDelta {
    /// Keys whose flow was added, changed or removed (look them up in the new index).
    pub touched: Vec<FlowKey>,
}

/// What the last [`ServiceIndex::update`] changed beyond the flows: what the row table
/// needs to know.
#[derive(Debug, Clone, Default)]
pub struct Changes {
    /// Services whose validated form or won VIP:ports may have changed.
    pub services: KeySet<ServiceKey>,
    /// The set of node names changed.
    pub node_names: bool,
    /// The set of VIPs changed.
    pub vips: bool,
}

struct Bridge {
    config: BridgeConfig,
    maker: FlowMaker,
    flows: FlowIndex,
}

pub struct ServiceIndex {
    opts: ModelOptions,
    cookie_prefix: u16,
    bridges: Vec<Bridge>,
    nodes: Vec<Arc<core::Node>>,
    node_names: BTreeSet<String>,
    /// The chassis of the nodes whose Node names one that differs from the node's name.
    chassis: BTreeMap<String, String>,
    node_ips: BTreeSet<IpAddr>,
    /// Cluster IPs with the number of Services having each.
    cluster_ip_refs: KeyMap<IpAddr, usize>,
    cluster_ips: BTreeSet<IpAddr>,
    /// The objects last seen, by key.
    raw: KeyMap<ServiceKey, Arc<KeptService>>,
    /// The last snapshot's Services in order, with their keys; whether a key was listed twice.
    order: Vec<(Arc<KeptService>, Option<ServiceKey>)>,
    duplicates: bool,
    /// Each valid Service as validated (before conflicts); its rank and claims are made from it.
    /// Boxed: a table sized for tens of thousands of entries holds a pointer per slot, not
    /// a whole validated Service (its free slots are a third of it).
    built: KeyMap<ServiceKey, Box<Service>>,
    /// Services by the VIPs their objects name (valid or not), to re-check them when a node or
    /// cluster address equal to one of them appears or goes. One ordered set of pairs: nearly
    /// every VIP has one Service, where a table of a vector each cost a slot and an allocation.
    by_raw_vip: BTreeSet<(IpAddr, ServiceKey)>,
    /// The claimants of each claim, best first: the first one wins it. A claim without
    /// claimants has no entry, so the claims in the flow index are exactly its keys.
    /// Persistent, like the validation problems: the report takes both in O(1).
    claimants: imbl::OrdMap<PortClaim, Claimants>,
    /// Each Service's validation problems, for the Services that have any.
    invalid: imbl::OrdMap<ServiceKey, Arc<[Problem]>>,
    /// The Nodes' problems, as of the last change of Nodes.
    node_problems: Arc<[Problem]>,
    /// A Service for each later listing of a key (the first one is used).
    duplicate_problems: Arc<[Problem]>,
    /// How many of the last snapshot's Services have no name.
    unnamed: usize,
    /// Every VIP with at least one claim (a persistent set: handing it on is O(1)).
    vips: imbl::OrdSet<IpAddr>,
    last: Changes,
}

/// The distinct claims of a validated Service, sorted.
fn claims_of(svc: &Service) -> Vec<PortClaim> {
    let mut claims: Vec<PortClaim> = (svc.vip_ports.iter())
        .map(|vp| (vp.vip, vp.port, vp.protocol))
        .collect();
    claims.sort();
    claims.dedup();
    claims
}

/// Every address a Service object names as a VIP, whether valid or not.
fn raw_vips_of(s: &KeptService) -> Vec<IpAddr> {
    let ext = s
        .spec
        .iter()
        .flat_map(|sp| sp.external_ips.iter().flatten());
    let ing = s
        .status
        .iter()
        .filter_map(|st| st.load_balancer.as_ref())
        .flat_map(|lb| lb.ingress.iter().flatten())
        .filter_map(|i| i.ip.as_ref());
    let mut v: Vec<IpAddr> = ext
        .chain(ing)
        .filter_map(|ip| ip.trim().parse().ok())
        .collect();
    v.sort();
    v.dedup();
    v
}

impl ServiceIndex {
    pub fn new(opts: ModelOptions, bridges: &[BridgeConfig], cookie_prefix: u16) -> Self {
        ServiceIndex {
            opts,
            cookie_prefix,
            bridges: bridges
                .iter()
                .map(|b| Bridge {
                    config: b.clone(),
                    maker: FlowMaker::for_bridge(b.clone(), cookie_prefix),
                    flows: FlowIndex::new(),
                })
                .collect(),
            nodes: Vec::new(),
            node_names: BTreeSet::new(),
            chassis: BTreeMap::new(),
            node_ips: BTreeSet::new(),
            cluster_ip_refs: KeyMap::default(),
            cluster_ips: BTreeSet::new(),
            raw: KeyMap::default(),
            order: Vec::new(),
            duplicates: false,
            built: KeyMap::default(),
            by_raw_vip: BTreeSet::new(),
            claimants: imbl::OrdMap::new(),
            invalid: imbl::OrdMap::new(),
            node_problems: Arc::from([]),
            duplicate_problems: Arc::from([]),
            unnamed: 0,
            vips: imbl::OrdSet::new(),
            last: Changes::default(),
        }
    }

    /// Validate the Services of `keys` (in order; `None`: gone or invalid). Each depends only on
    /// its own object and the node and cluster addresses, so a large set (a first snapshot)
    /// is split across cores.
    fn validate(&self, keys: &[ServiceKey]) -> Vec<(Option<Service>, Vec<Problem>)> {
        let one = |k: &ServiceKey| {
            let mut problems = Vec::new();
            let svc = self.raw.get(k).and_then(|raw| {
                build_service(
                    raw,
                    &self.opts,
                    &self.node_ips,
                    &self.cluster_ips,
                    &mut problems,
                )
            });
            (svc, problems)
        };
        super::map_split(keys, one)
    }

    /// The Services whose objects name `ip` as a VIP.
    fn naming(&self, ip: IpAddr) -> impl Iterator<Item = &ServiceKey> {
        (self.by_raw_vip.range((ip, ServiceKey::new("", ""))..))
            .take_while(move |(v, _)| *v == ip)
            .map(|(_, k)| k)
    }

    /// What the last update changed besides flows.
    pub fn changes(&self) -> &Changes {
        &self.last
    }

    /// Every valid Service's key.
    pub fn service_keys(&self) -> impl Iterator<Item = &ServiceKey> {
        self.built.keys()
    }

    /// The Service that wins a claim.
    pub fn winner(&self, claim: &PortClaim) -> Option<&ServiceKey> {
        self.claimants.get(claim)?.first().map(|r| &r.2)
    }

    /// What problems, Events and the status document need to know, as of the last update
    /// (persistent maps: O(1)).
    pub fn report(&self) -> ServiceReport {
        let mut other: Vec<Problem> = Vec::new();
        other.extend(self.node_problems.iter().cloned());
        other.extend(self.duplicate_problems.iter().cloned());
        if self.unnamed > 0 {
            other.push(Problem::new(
                Subject::Unnamed("Service"),
                ProblemKind::Invalid,
                "no metadata.name",
            ));
        }
        ServiceReport {
            claimants: self.claimants.clone(),
            invalid: self.invalid.clone(),
            other: other.into(),
        }
    }

    /// A Service with only the VIP:ports it wins (as [`crate::model::Model`] has it).
    pub fn resolved(&self, key: &ServiceKey) -> Option<Service> {
        let mut s = (**self.built.get(key)?).clone();
        s.vip_ports
            .retain(|vp| self.winner(&(vp.vip, vp.port, vp.protocol)) == Some(key));
        Some(s)
    }

    /// Every node's name.
    pub fn node_names(&self) -> &BTreeSet<String> {
        &self.node_names
    }

    /// The chassis of the nodes whose chassis is not named as the node.
    pub fn chassis(&self) -> &BTreeMap<String, String> {
        &self.chassis
    }

    /// Every VIP with at least one valid VIP:port.
    pub fn vips(&self) -> imbl::OrdSet<IpAddr> {
        self.vips.clone()
    }

    /// The current flow index of bridge `i` (config order).
    pub fn flows(&self, i: usize) -> FlowIndex {
        self.bridges[i].flows.clone()
    }

    /// Add (`on`) or remove a flow of bridge `i` that no Service derives (this node's ARP
    /// answers, [`crate::announce`]); whether the index changed.
    pub fn set_flow(&mut self, i: usize, key: FlowKey, on: bool) -> bool {
        let flows = &mut self.bridges[i].flows;
        if on {
            flows.insert(key).is_none()
        } else {
            flows.remove(&key).is_some()
        }
    }

    /// Whether bridge `i` announces its VIPs.
    pub fn announces(&self, i: usize) -> bool {
        crate::announce::Announcing::l2_on(&self.bridges[i].config)
    }

    /// What makes bridge `i`'s flows from their keys (the same one on every update).
    pub fn maker(&self, i: usize) -> FlowMaker {
        self.bridges[i].maker.clone()
    }

    /// Take a new snapshot of the objects; returns, per bridge, what changed.
    pub fn update(&mut self, objects: &Objects) -> Vec<FlowDelta> {
        let mut dirty: KeySet<ServiceKey> = KeySet::default();
        let mut changes = Changes::default();

        // Node addresses: rarely change; when they do, the Services whose VIPs equal an address
        // that came or went are checked again.
        let nodes_same = self.nodes.len() == objects.nodes.len()
            && self
                .nodes
                .iter()
                .zip(&objects.nodes)
                .all(|(a, b)| Arc::ptr_eq(a, b));
        if !nodes_same {
            self.nodes = objects.nodes.clone();
            let mut problems = Vec::new();
            let nodes = build_nodes(&objects.nodes, &mut problems);
            self.node_problems = problems.into();
            let ips: BTreeSet<IpAddr> = nodes
                .values()
                .flat_map(|n| n.addresses.iter().copied())
                .collect();
            let chassis: BTreeMap<String, String> = nodes
                .values()
                .filter_map(|n| Some((n.name.clone(), n.chassis.clone()?)))
                .filter(|(n, c)| n != c)
                .collect();
            let names: BTreeSet<String> = nodes.into_keys().collect();
            // A node's chassis names where its template values go: as good as a rename.
            if names != self.node_names || chassis != self.chassis {
                self.node_names = names;
                self.chassis = chassis;
                changes.node_names = true;
            }
            if ips != self.node_ips {
                let changed: Vec<IpAddr> =
                    ips.symmetric_difference(&self.node_ips).copied().collect();
                self.node_ips = ips;
                for ip in changed {
                    dirty.extend(self.naming(ip).cloned());
                }
            }
        }

        // Which Services changed (first occurrence of a key wins, as in the full model). Most
        // snapshots list the same objects in the same order with a few added, removed or
        // replaced: then only the span that differs is looked at. Otherwise every object is
        // keyed and compared.
        let incoming = match self.changed_in_span(&objects.services) {
            Some(Incoming::Changed { changed, removed }) => {
                dirty.extend(changed.keys().cloned());
                dirty.extend(removed.iter().cloned());
                Incoming::Changed { changed, removed }
            }
            _ => {
                let all = self.key_all(&objects.services);
                for (k, s) in &all {
                    if self.raw.get(k).is_none_or(|old| !Arc::ptr_eq(old, s)) {
                        dirty.insert(k.clone());
                    }
                }
                for k in self.raw.keys() {
                    if !all.contains_key(k) {
                        dirty.insert(k.clone());
                    }
                }
                Incoming::All(all)
            }
        };

        // Cluster IPs and raw VIPs of the changed Services; a cluster IP that appears or goes
        // changes the validity of the VIPs equal to it.
        let mut cluster_changed: Vec<IpAddr> = Vec::new();
        for k in &dirty {
            let old = self.raw.remove(k);
            if let Some(old) = &old {
                for ip in cluster_ips_of(old) {
                    if let Some(n) = self.cluster_ip_refs.get_mut(&ip) {
                        *n -= 1;
                        if *n == 0 {
                            self.cluster_ip_refs.remove(&ip);
                            cluster_changed.push(ip);
                        }
                    }
                }
                for ip in raw_vips_of(old) {
                    self.by_raw_vip.remove(&(ip, k.clone()));
                }
            }
            let new = match &incoming {
                Incoming::All(all) => all.get(k).cloned(),
                Incoming::Changed { removed, .. } if removed.contains(k) => None,
                // Not replaced: the object stays (it was taken out of `raw` just above).
                Incoming::Changed { changed, .. } => changed.get(k).cloned().or(old),
            };
            if let Some(new) = &new {
                self.raw.insert(k.clone(), Arc::clone(new));
                for ip in cluster_ips_of(new) {
                    let n = self.cluster_ip_refs.entry(ip).or_insert(0);
                    *n += 1;
                    if *n == 1 {
                        cluster_changed.push(ip);
                    }
                }
                for ip in raw_vips_of(new) {
                    self.by_raw_vip.insert((ip, k.clone()));
                }
            }
        }
        for ip in cluster_changed {
            let now = self.cluster_ip_refs.contains_key(&ip);
            let changed = if now {
                self.cluster_ips.insert(ip)
            } else {
                self.cluster_ips.remove(&ip)
            };
            if changed {
                dirty.extend(self.naming(ip).cloned());
            }
        }

        // Re-validate the changed Services and move their claims, noting each touched claim's
        // winner before the move.
        let mut winner_before: KeyMap<PortClaim, Option<ServiceKey>> = KeyMap::default();
        let dirty: Vec<ServiceKey> = dirty.into_iter().collect();
        let mut validated = self.validate(&dirty).into_iter();
        for k in &dirty {
            let (svc, problems) = validated.next().unwrap_or_default();
            if problems.is_empty() {
                self.invalid.remove(k);
            } else {
                self.invalid.insert(k.clone(), problems.into());
            }
            if let Some(old) = self.built.remove(k) {
                let old_rank = rank(&old);
                for c in claims_of(&old) {
                    winner_before
                        .entry(c)
                        .or_insert_with(|| self.winner(&c).cloned());
                    if let Some(set) = self.claimants.get(&c) {
                        match without_rank(set, &old_rank) {
                            Some(rest) => self.claimants.insert(c, rest),
                            None => self.claimants.remove(&c),
                        };
                    }
                }
            }
            let Some(svc) = svc else { continue };
            let r = rank(&svc);
            for c in claims_of(&svc) {
                winner_before
                    .entry(c)
                    .or_insert_with(|| self.winner(&c).cloned());
                let set = with_rank(self.claimants.get(&c), &r);
                self.claimants.insert(c, set);
            }
            self.built.insert(k.clone(), Box::new(svc));
        }

        // Claims that appeared or went; Services that won or lost a claim.
        let mut added = Vec::new();
        let mut removed = Vec::new();
        for (c, before) in winner_before {
            let after = self.winner(&c).cloned();
            match (before.is_some(), after.is_some()) {
                (false, true) => added.push(c),
                (true, false) => removed.push(c),
                _ => {}
            }
            if before != after {
                changes.services.extend(before);
                changes.services.extend(after);
            }
        }
        changes.services.extend(dirty);
        let deltas = self.apply_claims(added, removed, &mut changes);
        self.last = changes;
        deltas
    }

    /// Update every bridge's index for claims that appeared or went, and the VIPs that gained
    /// their first or lost their last claim.
    fn apply_claims(
        &mut self,
        added: Vec<PortClaim>,
        removed: Vec<PortClaim>,
        changes: &mut Changes,
    ) -> Vec<FlowDelta> {
        let affected: BTreeSet<IpAddr> = added.iter().chain(&removed).map(|c| c.0).collect();
        let mut vips_added = Vec::new();
        let mut vips_removed = Vec::new();
        for v in affected {
            // `vips` is still the last update's; the claimants are already this one's.
            let has_claims = (self.claimants.range((v, 0, Protocol::Tcp)..).next())
                .is_some_and(|(c, _)| c.0 == v);
            match (self.vips.contains(&v), has_claims) {
                (false, true) => vips_added.push(v),
                (true, false) => vips_removed.push(v),
                _ => {}
            }
        }
        for v in &vips_added {
            self.vips.insert(*v);
        }
        for v in &vips_removed {
            self.vips.remove(v);
        }
        changes.vips = !vips_added.is_empty() || !vips_removed.is_empty();

        let prefix = self.cookie_prefix;
        let mut deltas = Vec::with_capacity(self.bridges.len());
        for b in &mut self.bridges {
            let input = PlanInput {
                bridge: &b.config,
                cookie_prefix: prefix,
            };
            let mut gone: Vec<FlowKey> = (removed.iter())
                .flat_map(|c| claim_keys(c.0, c.1, c.2, &input))
                .chain(vips_removed.iter().flat_map(|v| vip_keys(*v, &input)))
                .collect();
            let mut new: Vec<FlowKey> = (added.iter())
                .flat_map(|c| claim_keys(c.0, c.1, c.2, &input))
                .chain(vips_added.iter().flat_map(|v| vip_keys(*v, &input)))
                .collect();
            // In key order (the new ones in two ascending runs, see `filling`), each insert or
            // removal lands next to the last one in the tree: a first plan's tens of thousands
            // stay in cache.
            gone.sort_unstable();
            new.sort_unstable();
            for k in &gone {
                b.flows.remove(k);
            }
            for k in filling(&new) {
                b.flows.insert(*k);
            }
            // Two sorted runs: the sort merges them. The longer one's buffer is kept.
            let (mut touched, rest) = if gone.len() >= new.len() {
                (gone, new)
            } else {
                (new, gone)
            };
            touched.extend(rest);
            touched.sort();
            touched.dedup();
            deltas.push(FlowDelta { touched });
        }
        deltas
    }
}

/// `sorted` in an order that leaves the index's B-tree nodes full. imbl splits a full node at
/// its middle, so keys inserted in ascending order leave each node behind half full, twice the
/// memory of a first plan's index; the even-indexed keys first, then the odd ones, fill each
/// half back up. Both runs still ascend, so each insert lands beside the last.
fn filling<T>(sorted: &[T]) -> impl Iterator<Item = &T> {
    let odd = sorted.get(1..).unwrap_or_default();
    sorted.iter().step_by(2).chain(odd.iter().step_by(2))
}

#[path = "service_span.rs"]
mod span;
use span::Incoming;

#[cfg(test)]
#[path = "service_index_tests.rs"]
mod tests;
