//! Which nodes may announce each VIP ([`crate::announce`]), kept up to date one changed
//! Service at a time.
//!
//! A VIP that an externalTrafficPolicy Local Service serves must be announced by a node with a
//! ready endpoint of that Service: any other node has no backend to send the traffic to and
//! keeps the client's address (the policy's point), so it refuses the connection. Every other
//! VIP (Cluster, prefer-local) may go to any live node. When several Services share a VIP and
//! all of them are Local, a node with a ready endpoint of any of them may announce it (the
//! union: valid sharing puts them on the same pods, and the union never leaves a VIP
//! unannounced that one of its Services could serve). A Local VIP with no ready endpoint
//! anywhere has no owner and is not announced: no node could serve it.
//!
//! A VIP inside a pool with node selectors (`VipPool` `nodeSelectors`, as MetalLB's
//! L2Advertisement has them) may only be announced by the Nodes whose labels match one of
//! them, on top of the above. The pools and the Nodes' labels are read again only when they
//! changed, and VIPs are re-placed only when a pool's set of nodes changed.
//!
//! The L2 announcer's eligibility ([`Eligibility::for_l2`]) also follows MetalLB's
//! `L2Advertisement`s ([`super::l2_selection`]): once there is one, a VIP of a pool none
//! selects has no eligible node, and one of a pool some select only the nodes they admit.
//! BGP's leaves them out: its own advertisements say where its VIPs go.

use super::exclude::IpRange;
use super::l2_selection::{L2Nodes, L2Pools, L2Reason};
use super::service_index::ServiceIndex;
use super::slice_index::SliceIndex;
use crate::announce::placement::{Eligible, NodeName};
use crate::ipam::pool::Pool;
use crate::ipam::pool_object::VipPool;
use crate::ipam::selector;
use crate::model::{Objects, ServiceKey, TrafficPolicy};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

/// What one Service says about its VIPs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Says {
    vips: Vec<IpAddr>,
    /// `None`: any node; else the nodes with a ready endpoint (Local).
    nodes: Option<BTreeSet<NodeName>>,
}

/// A pool with node selectors: its address ranges and the Nodes that match.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PoolNodes {
    ranges: Vec<IpRange>,
    nodes: Arc<BTreeSet<NodeName>>,
}

#[derive(Default)]
pub struct Eligibility {
    slices: SliceIndex,
    says: HashMap<ServiceKey, Says>,
    /// The Services that serve each VIP (nearly always one).
    by_vip: HashMap<IpAddr, Vec<ServiceKey>>,
    /// The pools and Nodes last read (Nodes by allocation), and what they gave.
    pools_read: (Vec<VipPool>, Vec<usize>),
    pools: Vec<PoolNodes>,
    /// The L2 announcer's: the `L2Advertisement`s as last read, and what they give.
    l2: Option<L2Read>,
}

#[derive(Default)]
struct L2Read {
    read: Vec<crate::metallb::L2Advertisement>,
    /// `None`: no `L2Advertisement`, every VIP as without them.
    pools: Option<L2Pools>,
    /// The VIPs of Services that no node announces because no `L2Advertisement` selects
    /// their pool, with the pool: kept one touched VIP at a time, and handed on as is
    /// while it stands.
    unadvertised: imbl::OrdMap<IpAddr, Arc<str>>,
}

impl Eligibility {
    /// The L2 announcer's eligibility: MetalLB's `L2Advertisement`s narrow it too.
    pub fn for_l2() -> Eligibility {
        Eligibility {
            l2: Some(L2Read::default()),
            ..Eligibility::default()
        }
    }

    /// Take the same snapshot `services` was just updated with; returns the VIPs whose
    /// eligible nodes may have changed.
    pub fn update(&mut self, objects: &Objects, services: &ServiceIndex) -> Vec<IpAddr> {
        let mut dirty: super::KeySet<ServiceKey> = services.changes().services.clone();
        self.slices.update(&objects.endpoint_slices, &mut dirty);
        let mut touched: Vec<IpAddr> = Vec::new();
        for k in dirty {
            let now = services.resolved(&k).map(|svc| {
                let mut vips: Vec<IpAddr> = svc.vip_ports.iter().map(|vp| vp.vip).collect();
                vips.sort_unstable();
                vips.dedup();
                // Local wins over prefer-local, as in the rows (`northbound::rows_for`).
                let nodes = (svc.traffic_policy == TrafficPolicy::Local).then(|| {
                    self.slices
                        .built(&k)
                        .iter()
                        .flat_map(|s| &s.endpoints)
                        .filter(|e| e.ready)
                        .filter_map(|e| e.node.as_deref().map(NodeName::from))
                        .collect()
                });
                Says { vips, nodes }
            });
            let before = match &now {
                Some(s) => self.says.insert(k.clone(), s.clone()),
                None => self.says.remove(&k),
            };
            if before == now {
                continue;
            }
            for v in before.iter().flat_map(|s| &s.vips) {
                if let Some(ks) = self.by_vip.get_mut(v) {
                    ks.retain(|x| *x != k);
                    if ks.is_empty() {
                        self.by_vip.remove(v);
                    }
                }
                touched.push(*v);
            }
            for v in now.iter().flat_map(|s| &s.vips) {
                self.by_vip.entry(*v).or_default().push(k.clone());
                touched.push(*v);
            }
        }
        if self.read_pools(objects) {
            touched.extend(self.by_vip.keys().copied());
        }
        touched.sort_unstable();
        touched.dedup();
        if let Some(l2) = &mut self.l2 {
            for v in &touched {
                let pool = l2
                    .pools
                    .as_ref()
                    .and_then(|p| p.of_vip(*v))
                    .filter(|(_, nodes)| **nodes == L2Nodes::Unadvertised)
                    .filter(|_| self.by_vip.contains_key(v))
                    .map(|(pool, _)| pool);
                // Written only when it changes: a write copies the shared map.
                if l2.unadvertised.get(v) != pool {
                    match pool {
                        Some(p) => l2.unadvertised.insert(*v, Arc::clone(p)),
                        None => l2.unadvertised.remove(v),
                    };
                }
            }
        }
        touched
    }

    /// The VIPs of Services that no node announces over L2 because no `L2Advertisement`
    /// selects their pool, with the pool (empty unless this is the L2 announcer's).
    pub fn unadvertised(&self) -> imbl::OrdMap<IpAddr, Arc<str>> {
        self.l2
            .as_ref()
            .map(|l| l.unadvertised.clone())
            .unwrap_or_default()
    }

    /// Why MetalLB's `L2Advertisement`s keep `node` from announcing `vip`, if they do (only
    /// the L2 announcer's eligibility reads them).
    pub fn l2_reason(&self, vip: IpAddr, node: &str) -> Option<L2Reason> {
        self.l2.as_ref()?.pools.as_ref()?.reason(vip, node)
    }

    /// Read the pools' node selectors again if the pools or the Nodes changed; whether what
    /// they select changed.
    fn read_pools(&mut self, objects: &Objects) -> bool {
        let ptr = |n: &Arc<k8s_openapi::api::core::v1::Node>| Arc::as_ptr(n) as usize;
        let same_nodes = self.pools_read.1.len() == objects.nodes.len()
            && self
                .pools_read
                .1
                .iter()
                .zip(&objects.nodes)
                .all(|(a, n)| *a == ptr(n));
        let same_ads = self
            .l2
            .as_ref()
            .is_none_or(|l| l.read == objects.l2_advertisements);
        if same_nodes && same_ads && self.pools_read.0 == objects.pools {
            return false;
        }
        self.pools_read = (
            objects.pools.clone(),
            objects.nodes.iter().map(ptr).collect(),
        );
        let empty = BTreeMap::new();
        let pools: Vec<PoolNodes> = objects
            .pools
            .iter()
            .map(|p| Pool::of(p.to_spec()))
            .filter(|p| !p.spec.node_selectors.is_empty() && !p.ranges.is_empty())
            .map(|p| {
                let nodes = objects
                    .nodes
                    .iter()
                    .filter(|n| {
                        let labels = n.metadata.labels.as_ref().unwrap_or(&empty);
                        p.spec
                            .node_selectors
                            .iter()
                            .any(|sel| selector::matches(sel, labels))
                    })
                    .filter_map(|n| n.metadata.name.as_deref().map(NodeName::from))
                    .collect();
                PoolNodes {
                    ranges: p.ranges,
                    nodes: Arc::new(nodes),
                }
            })
            .collect();
        let mut changed = pools != self.pools;
        self.pools = pools;
        if let Some(l2) = &mut self.l2 {
            let now = L2Pools::of(objects);
            changed |= now != l2.pools;
            l2.read.clone_from(&objects.l2_advertisements);
            l2.pools = now;
        }
        changed
    }

    /// The nodes that may announce `vip`: those every rule that speaks for it allows.
    pub fn of(&self, vip: IpAddr) -> Eligible {
        let pool = self
            .pools
            .iter()
            .find(|p| p.ranges.iter().any(|r| r.contains(vip)))
            .map(|p| Arc::clone(&p.nodes));
        let advertised = self
            .l2
            .as_ref()
            .and_then(|l| l.pools.as_ref()?.of_vip(vip))
            .and_then(|(_, nodes)| match nodes {
                L2Nodes::Unadvertised => Some(Arc::new(BTreeSet::new())),
                L2Nodes::Every => None,
                L2Nodes::Only(n) => Some(Arc::clone(n)),
            });
        let mut allowed: Option<Arc<BTreeSet<NodeName>>> = None;
        for rule in [self.serving(vip).map(Arc::new), pool, advertised]
            .into_iter()
            .flatten()
        {
            allowed = Some(match allowed {
                None => rule,
                Some(a) => Arc::new(a.intersection(&rule).cloned().collect()),
            });
        }
        allowed.map_or(Eligible::Any, Eligible::Nodes)
    }

    /// The nodes with a ready endpoint of the Services on `vip`, when all of them are Local
    /// (`None`: any node can serve it).
    /// Whether only externalTrafficPolicy Local Services serve `vip`: only the nodes with one
    /// of their endpoints may carry it, and it goes out as its own route.
    pub fn is_local(&self, vip: IpAddr) -> bool {
        self.serving(vip).is_some()
    }

    fn serving(&self, vip: IpAddr) -> Option<BTreeSet<NodeName>> {
        let keys = self.by_vip.get(&vip)?;
        let mut nodes: BTreeSet<NodeName> = BTreeSet::new();
        for k in keys {
            nodes.extend(self.says.get(k)?.nodes.as_ref()?.iter().cloned());
        }
        Some(nodes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelOptions;

    /// `web` (Cluster, port 80) and `api` (Local, port 443) on one VIP, `api`'s endpoint on
    /// `api_on`; with `web` left out when `with_web` is false.
    fn objects(api_on: &str, with_web: bool) -> Objects {
        objects_with(api_on, with_web, "")
    }

    /// [`objects`] with `meta` added to `api`'s metadata.
    fn objects_with(api_on: &str, with_web: bool, meta: &str) -> Objects {
        let mut y = String::from("apiVersion: v1\nkind: List\nitems:\n");
        if with_web {
            y.push_str(
                "- apiVersion: v1
  kind: Service
  metadata: {name: web, namespace: shop, creationTimestamp: '2026-01-01T00:00:00Z'}
  spec: {externalIPs: [192.0.2.7], ports: [{port: 80, protocol: TCP}]}
",
            );
        }
        y.push_str(&format!(
            "- apiVersion: v1
  kind: Service
  metadata: {{name: api, namespace: shop, creationTimestamp: '2026-01-02T00:00:00Z'{meta}}}
  spec: {{externalIPs: [192.0.2.7], externalTrafficPolicy: Local, ports: [{{port: 443, protocol: TCP, targetPort: 8443}}]}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{name: api-1, namespace: shop, labels: {{kubernetes.io/service-name: api}}}}
  addressType: IPv4
  ports: [{{port: 8443, protocol: TCP}}]
  endpoints: [{{addresses: [10.0.0.9], nodeName: {api_on}, conditions: {{ready: true}}}}]
"
        ));
        crate::decode::parse(&y).expect("objects").objects
    }

    #[test]
    fn a_vip_any_cluster_service_serves_may_go_anywhere_and_a_local_only_one_follows_its_endpoints()
    {
        let vip: IpAddr = "192.0.2.7".parse().unwrap();
        let mut services = ServiceIndex::new(ModelOptions::default(), &[], 0x7f1f);
        let mut e = Eligibility::default();
        let only = |n: &str| Eligible::Nodes(Arc::new(BTreeSet::from([NodeName::from(n)])));

        // Shared with a Cluster Service: any node can serve the VIP (port 80 from anywhere).
        let o = objects("n3", true);
        services.update(&o);
        assert_eq!(e.update(&o, &services), [vip]);
        assert_eq!(e.of(vip), Eligible::Any);

        // The Cluster Service goes: only api's endpoint's node.
        let o = objects("n3", false);
        services.update(&o);
        assert_eq!(e.update(&o, &services), [vip]);
        assert_eq!(e.of(vip), only("n3"));

        // The endpoint moves: the eligible node follows; nothing else is re-read.
        let o = objects("n1", false);
        services.update(&o);
        assert_eq!(e.update(&o, &services), [vip]);
        assert_eq!(e.of(vip), only("n1"));
        services.update(&o);
        assert!(
            e.update(&o, &services).is_empty(),
            "the same snapshot again"
        );
    }

    #[test]
    fn local_wins_over_prefer_local_as_in_the_rows() {
        let vip: IpAddr = "192.0.2.7".parse().unwrap();
        let mut services = ServiceIndex::new(ModelOptions::default(), &[], 0x7f1f);
        let mut e = Eligibility::default();
        let o = objects_with(
            "n2",
            false,
            ", annotations: {vipflow.io/prefer-local: 'true'}",
        );
        services.update(&o);
        e.update(&o, &services);
        assert_eq!(
            e.of(vip),
            Eligible::Nodes(Arc::new(BTreeSet::from([NodeName::from("n2")])))
        );
    }
}
