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

use super::service_index::ServiceIndex;
use super::slice_index::SliceIndex;
use crate::announce::placement::{Eligible, NodeName};
use crate::model::{Objects, ServiceKey, TrafficPolicy};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

/// What one Service says about its VIPs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Says {
    vips: Vec<IpAddr>,
    /// `None`: any node; else the nodes with a ready endpoint (Local).
    nodes: Option<BTreeSet<NodeName>>,
}

#[derive(Default)]
pub struct Eligibility {
    slices: SliceIndex,
    says: HashMap<ServiceKey, Says>,
    /// The Services that serve each VIP (nearly always one).
    by_vip: HashMap<IpAddr, Vec<ServiceKey>>,
}

impl Eligibility {
    /// Take the same snapshot `services` was just updated with; returns the VIPs whose
    /// eligible nodes may have changed.
    pub fn update(&mut self, objects: &Objects, services: &ServiceIndex) -> Vec<IpAddr> {
        let mut dirty: HashSet<ServiceKey> = services.changes().services.clone();
        self.slices.update(&objects.endpoint_slices, &mut dirty);
        let mut touched: Vec<IpAddr> = Vec::new();
        for k in dirty {
            let now = services.resolved(&k).map(|svc| {
                let mut vips: Vec<IpAddr> = svc.vip_ports.iter().map(|vp| vp.vip).collect();
                vips.sort_unstable();
                vips.dedup();
                let nodes =
                    (svc.traffic_policy == TrafficPolicy::Local && !svc.prefer_local).then(|| {
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
        touched.sort_unstable();
        touched.dedup();
        touched
    }

    /// The nodes that may announce `vip`.
    pub fn of(&self, vip: IpAddr) -> Eligible {
        let Some(keys) = self.by_vip.get(&vip) else {
            return Eligible::Any;
        };
        let mut nodes: BTreeSet<NodeName> = BTreeSet::new();
        for k in keys {
            match self.says.get(k).and_then(|s| s.nodes.as_ref()) {
                Some(n) => nodes.extend(n.iter().cloned()),
                None => return Eligible::Any,
            }
        }
        Eligible::Nodes(Arc::new(nodes))
    }
}
