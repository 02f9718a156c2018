//! The rows of each Service: the rows of [`super::northbound::plan`], kept up to date one
//! changed Service at a time.
//!
//! Re-planning every row on each change costs time in proportion to the cluster (about 50 ms
//! for the model and plan at 10,000 Services); a change concerns one Service. This planner sits
//! on the service index ([`ServiceIndex`]), which already re-validates only the changed Services
//! and knows which Service wins each VIP:port. It adds:
//! - the EndpointSlices of each Service ([`SliceIndex`]: noticed by allocation, a snapshot's
//!   unchanged slice being the same `Arc`);
//! - each Service's rows, in a persistent map (handing it to the reconciler is O(1)).
//!
//! A Service's rows are re-planned when its object changed, it won or lost a VIP:port, one of
//! its slices changed, or the set of node names changed (node-scoped rows, and the targets of
//! vipflow's own group). A property test checks that after any sequence of snapshots the rows
//! and the group equal the full plan, and that exactly the Services whose rows changed are
//! reported.

use super::KeySet;
use super::northbound::{GroupPlan, LbRow, NorthboundConfig, own_groups, service_rows};
use super::service_index::ServiceIndex;
use super::slice_index::SliceIndex;
use crate::model::{Objects, ServiceKey};
use std::sync::Arc;

/// Every Service's rows, sorted by key within a Service.
pub type RowIndex = imbl::OrdMap<ServiceKey, Arc<Vec<LbRow>>>;

/// What changed in the rows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NbDelta {
    /// Services whose rows were added, changed or removed (look them up in the new index).
    pub touched: Vec<ServiceKey>,
    /// The set of VIPs changed (their exclusion from IPAM may need work).
    pub vips: bool,
}

pub struct RowTable {
    cfg: NorthboundConfig,
    /// Each Service's slices.
    slices: SliceIndex,
    rows: RowIndex,
    /// The number of rows in `rows`.
    count: usize,
    /// vipflow's own group and its targets ([`own_group`]).
    groups: Arc<Vec<GroupPlan>>,
    /// With template rows: every node's chassis (one per node, named as the node).
    template_chassis: Option<Arc<std::collections::BTreeSet<String>>>,
}

impl RowTable {
    pub fn new(cfg: NorthboundConfig) -> Self {
        RowTable {
            groups: Arc::new(own_groups(&cfg, &Default::default())),
            cfg,
            slices: SliceIndex::default(),
            template_chassis: None,
            rows: RowIndex::new(),
            count: 0,
        }
    }

    /// The number of rows.
    pub fn row_count(&self) -> usize {
        self.count
    }

    /// Every Service's rows.
    pub fn rows(&self) -> RowIndex {
        self.rows.clone()
    }

    /// The chassis that need a `Chassis_Template_Var` row, with template rows.
    pub fn template_chassis(&self) -> Option<Arc<std::collections::BTreeSet<String>>> {
        self.template_chassis.clone()
    }

    /// vipflow's own Load_Balancer_Group and its targets, when cluster rows use it.
    pub fn groups(&self) -> Arc<Vec<GroupPlan>> {
        self.groups.clone()
    }

    /// Take the same snapshot `services` was just updated with.
    pub fn update(&mut self, objects: &Objects, services: &ServiceIndex) -> NbDelta {
        let changes = services.changes();
        let mut dirty: KeySet<ServiceKey> = changes.services.clone();
        self.slices.update(&objects.endpoint_slices, &mut dirty);
        if changes.node_names {
            dirty.extend(services.service_keys().cloned());
            dirty.extend(self.rows.keys().cloned());
            self.groups = Arc::new(own_groups(&self.cfg, services.node_names()));
            self.template_chassis = self.cfg.node_rows.templates().then(|| {
                let chassis = services.chassis();
                Arc::new(
                    services
                        .node_names()
                        .iter()
                        .map(|n| chassis.get(n).unwrap_or(n).clone())
                        .collect(),
                )
            });
        }

        let dirty: Vec<ServiceKey> = dirty.into_iter().collect();
        let (slices, cfg) = (&self.slices, &self.cfg);
        let plan_one = |k: &ServiceKey| -> Vec<LbRow> {
            let Some(svc) = services.resolved(k) else {
                return Vec::new();
            };
            service_rows(
                &svc,
                &slices.built(k),
                services.node_names(),
                services.chassis(),
                cfg,
            )
        };
        let planned = super::map_split(&dirty, plan_one);

        let mut touched = Vec::new();
        for (k, rows) in dirty.into_iter().zip(planned) {
            let changed = match self.rows.get(&k) {
                Some(old) => **old != rows,
                None => !rows.is_empty(),
            };
            if changed {
                self.count += rows.len();
                let old = if rows.is_empty() {
                    self.rows.remove(&k)
                } else {
                    self.rows.insert(k.clone(), Arc::new(rows))
                };
                self.count -= old.map_or(0, |o| o.len());
                touched.push(k);
            }
        }
        touched.sort();
        NbDelta {
            touched,
            vips: changes.vips,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{KeptService, KeptSlice, Model, ModelOptions};
    use crate::plan::northbound::plan;
    use k8s_openapi::api::core::v1 as core;
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use std::collections::HashMap;

    /// A Service drawn from small pools: VIPs collide (conflicts move winners), policies vary
    /// (node-scoped rows), and endpoints sit on nodes that come and go.
    #[derive(Debug, Clone, PartialEq)]
    struct Spec {
        vip: u8,
        port: u16,
        age: u8,
        local: bool,
        prefer_local: bool,
    }

    #[derive(Debug, Clone, PartialEq)]
    struct SliceSpec {
        /// (address, node, ready)
        endpoints: Vec<(u8, u8, bool)>,
    }

    fn service(slot: usize, s: &Spec) -> KeptService {
        let mut ann = serde_json::Map::new();
        if s.prefer_local {
            ann.insert("vipflow.io/prefer-local".into(), "true".into());
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("s{slot}"), "namespace": "ns", "annotations": ann,
                         "creationTimestamp": format!("2026-01-01T00:00:0{}Z", s.age % 10)},
            "spec": {"type": "ClusterIP", "externalIPs": [format!("172.18.0.{}", s.vip % 4)],
                     "externalTrafficPolicy": if s.local { "Local" } else { "Cluster" },
                     "ports": [{"port": s.port, "targetPort": 8080, "protocol": "TCP"}]},
        }))
        .map(|s: core::Service| s.into())
        .unwrap()
    }

    fn slice(slot: usize, n: usize, s: &SliceSpec) -> KeptSlice {
        let eps: Vec<serde_json::Value> = s
            .endpoints
            .iter()
            .map(|(a, node, ready)| {
                serde_json::json!({"addresses": [format!("10.1.0.{a}")], "nodeName": format!("n{}", node % 3),
                                   "conditions": {"ready": ready}})
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("s{slot}-{n}"), "namespace": "ns",
                         "labels": {"kubernetes.io/service-name": format!("s{slot}")}},
            "addressType": "IPv4",
            "ports": [{"port": 8080, "protocol": "TCP"}],
            "endpoints": eps,
        }))
        .map(|s: k8s_openapi::api::discovery::v1::EndpointSlice| s.into())
        .unwrap()
    }

    fn node(i: u8) -> core::Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("n{i}")},
            "status": {"addresses": [{"type": "InternalIP", "address": format!("192.168.0.{i}")}]}
        }))
        .unwrap()
    }

    fn spec() -> impl Strategy<Value = Spec> {
        (
            0u8..4,
            prop::sample::select(vec![80u16, 443]),
            0u8..3,
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(vip, port, age, local, prefer_local)| Spec {
                vip,
                port,
                age,
                local,
                prefer_local,
            })
    }

    fn slice_spec() -> impl Strategy<Value = SliceSpec> {
        prop::collection::vec((0u8..4, 0u8..3, any::<bool>()), 0..3)
            .prop_map(|endpoints| SliceSpec { endpoints })
    }

    /// The world: per Service slot an optional Service and two optional slices, and which of
    /// three nodes exist.
    type World = (Vec<(Option<Spec>, Vec<Option<SliceSpec>>)>, Vec<bool>);

    /// One edit of the world: most steps change one thing, as a cluster does.
    #[derive(Debug, Clone)]
    enum Edit {
        Service(usize, Option<Spec>),
        Slice(usize, usize, Option<SliceSpec>),
        Node(usize, bool),
    }

    fn edit() -> impl Strategy<Value = Edit> {
        prop_oneof![
            3 => (0usize..4, prop::option::of(spec())).prop_map(|(i, s)| Edit::Service(i, s)),
            3 => (0usize..4, 0usize..2, prop::option::of(slice_spec()))
                .prop_map(|(i, n, s)| Edit::Slice(i, n, s)),
            1 => (0usize..3, any::<bool>()).prop_map(|(i, on)| Edit::Node(i, on)),
        ]
    }

    fn step() -> impl Strategy<Value = World> {
        (
            prop::collection::vec(
                (
                    prop::option::of(spec()),
                    prop::collection::vec(prop::option::of(slice_spec()), 2),
                ),
                4,
            ),
            prop::collection::vec(any::<bool>(), 3),
        )
    }

    fn apply(world: &mut World, e: &Edit) {
        match e {
            Edit::Service(i, s) => world.0[*i].0 = s.clone(),
            Edit::Slice(i, n, s) => world.0[*i].1[*n] = s.clone(),
            Edit::Node(i, on) => world.1[*i] = *on,
        }
    }

    /// Keeps the allocation of what did not change, as sources do.
    #[derive(Default)]
    struct Reuse {
        services: HashMap<usize, (Spec, Arc<KeptService>)>,
        slices: HashMap<(usize, usize), (SliceSpec, Arc<KeptSlice>)>,
        nodes: HashMap<u8, Arc<core::Node>>,
    }

    fn snapshot(r: &mut Reuse, step: &World, shuffle: bool) -> Objects {
        let mut o = Objects::default();
        for (slot, (svc, slices)) in step.0.iter().enumerate() {
            if let Some(s) = svc {
                let arc = match r.services.get(&slot) {
                    Some((old, a)) if old == s => Arc::clone(a),
                    _ => Arc::new(service(slot, s)),
                };
                r.services.insert(slot, (s.clone(), Arc::clone(&arc)));
                o.services.push(arc);
            }
            for (n, sl) in slices.iter().enumerate() {
                let Some(sl) = sl else { continue };
                let arc = match r.slices.get(&(slot, n)) {
                    Some((old, a)) if old == sl => Arc::clone(a),
                    _ => Arc::new(slice(slot, n, sl)),
                };
                r.slices.insert((slot, n), (sl.clone(), Arc::clone(&arc)));
                o.endpoint_slices.push(arc);
            }
        }
        for (i, on) in step.1.iter().enumerate() {
            if *on {
                let a = r
                    .nodes
                    .entry(i as u8)
                    .or_insert_with(|| Arc::new(node(i as u8)));
                o.nodes.push(Arc::clone(a));
            }
        }
        if shuffle {
            // Sources may list unchanged objects in another order.
            o.endpoint_slices.reverse();
        }
        o
    }

    /// The attachment shapes that change rows: node templates (own group, node-scoped rows,
    /// the ETP=Local switch row), configured switches and group, Kube-OVN's dialect.
    fn config() -> impl Strategy<Value = NorthboundConfig> {
        (
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(kube_ovn, node_router, node_switch, switch, group, prefer_local)| {
                    NorthboundConfig {
                        kube_ovn,
                        node_router: node_router.then(|| "GR_{node}".into()),
                        node_switch: node_switch.then(|| "{node}".into()),
                        switches: if switch { vec!["join".into()] } else { vec![] },
                        lb_group: group.then(|| "clusterLBGroup".into()),
                        prefer_local,
                        ..Default::default()
                    }
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn incremental_rows_equal_the_full_plan(
            start in step(),
            edits in prop::collection::vec((prop::collection::vec(edit(), 1..3), any::<bool>()), 1..12),
            cfg in config(),
        ) {
            let mut services = ServiceIndex::new(ModelOptions::default(), &[], 0x7f1f);
            let mut nb = RowTable::new(cfg.clone());
            let mut reuse = Reuse::default();
            let mut prev: BTreeMap<ServiceKey, Vec<LbRow>> = BTreeMap::new();
            let mut world = start;
            let steps = std::iter::once((Vec::new(), false)).chain(edits);
            for (es, shuffle) in steps {
                for e in &es {
                    apply(&mut world, e);
                }
                let objects = snapshot(&mut reuse, &world, shuffle);
                services.update(&objects);
                let delta = nb.update(&objects, &services);
                let model = Model::build(&objects, &ModelOptions::default());
                let want = plan(&model, &cfg);
                let have: Vec<LbRow> = nb.rows().values().flat_map(|v| v.iter().cloned()).collect();
                prop_assert_eq!(&have, &want);
                let nodes = model.nodes.keys().cloned().collect();
                prop_assert_eq!(&*nb.groups(), &own_groups(&cfg, &nodes));
                prop_assert_eq!(nb.row_count(), want.len());
                let now: BTreeMap<ServiceKey, Vec<LbRow>> = nb
                    .rows()
                    .iter()
                    .map(|(k, v)| (k.clone(), (**v).clone()))
                    .collect();
                let changed: Vec<ServiceKey> = prev
                    .keys()
                    .chain(now.keys())
                    .filter(|k| prev.get(*k) != now.get(*k))
                    .cloned()
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect();
                prop_assert_eq!(&delta.touched, &changed);
                let vips_now: Vec<std::net::IpAddr> = services.vips().into_iter().collect();
                let vips_model: Vec<std::net::IpAddr> = Model::build(&objects, &ModelOptions::default()).vips().into_keys().collect();
                prop_assert_eq!(vips_now, vips_model);
                prev = now;
            }
        }
    }

    #[test]
    fn a_large_snapshot_split_across_cores_equals_the_full_plan() {
        // Above the split threshold, with VIP conflicts and node-scoped rows.
        let n = 3000;
        let mut o = Objects::default();
        for i in 0..n {
            let s = Spec {
                vip: (i % 4) as u8,
                port: 80 + (i % 7) as u16,
                age: (i % 3) as u8,
                local: i % 5 == 0,
                prefer_local: i % 7 == 0,
            };
            o.services.push(Arc::new(service(i, &s)));
            let sl = SliceSpec {
                endpoints: vec![((i % 4) as u8, (i % 3) as u8, i % 2 == 0)],
            };
            o.endpoint_slices.push(Arc::new(slice(i, 0, &sl)));
        }
        o.nodes = (0..3).map(|i| Arc::new(node(i))).collect();
        let cfg = NorthboundConfig::default();
        let mut services = ServiceIndex::new(ModelOptions::default(), &[], 0x7f1f);
        let mut nb = RowTable::new(cfg.clone());
        services.update(&o);
        nb.update(&o, &services);
        let want = plan(&Model::build(&o, &ModelOptions::default()), &cfg);
        let have: Vec<LbRow> = nb.rows().values().flat_map(|v| v.iter().cloned()).collect();
        assert!(!want.is_empty());
        assert_eq!(have, want);
        assert_eq!(nb.row_count(), want.len());
    }

    #[test]
    fn one_slice_change_re_plans_one_service() {
        let mut services = ServiceIndex::new(ModelOptions::default(), &[], 0x7f1f);
        let mut nb = RowTable::new(NorthboundConfig::default());
        let specs: Vec<Spec> = (0..4)
            .map(|i| Spec {
                vip: i,
                port: 80,
                age: 0,
                local: false,
                prefer_local: false,
            })
            .collect();
        let mut o = Objects::default();
        for (i, s) in specs.iter().enumerate() {
            o.services.push(Arc::new(service(i, s)));
            o.endpoint_slices.push(Arc::new(slice(
                i,
                0,
                &SliceSpec {
                    endpoints: vec![(i as u8, 0, true)],
                },
            )));
        }
        services.update(&o);
        assert_eq!(nb.update(&o, &services).touched.len(), 4);
        o.endpoint_slices[2] = Arc::new(slice(
            2,
            0,
            &SliceSpec {
                endpoints: vec![(3, 1, true)],
            },
        ));
        services.update(&o);
        let d = nb.update(&o, &services);
        assert_eq!(d.touched, vec![ServiceKey::new("ns", "s2")]);
        assert!(!d.vips);
        services.update(&o);
        assert!(nb.update(&o, &services).touched.is_empty());
    }
}
