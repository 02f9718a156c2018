use super::*;
use crate::config::{GatewayMode, Profile};
use crate::model::Model;
use crate::plan::flows::plan;
use proptest::prelude::*;

/// A Service drawn from small pools, so VIPs collide with each other, with cluster IPs and
/// with the node's address.
#[derive(Debug, Clone, PartialEq)]
struct Spec {
    vips: Vec<u8>,
    ports: Vec<(u16, bool)>,
    cluster_ip: u8,
    lb: bool,
    /// Named as the next slot's Service: the same key listed twice.
    alias: bool,
    /// No name at all.
    unnamed: bool,
}

fn ip(n: u8) -> String {
    format!("10.0.0.{}", n % 8)
}

fn service(slot: usize, s: &Spec) -> KeptService {
    let ports: Vec<serde_json::Value> = s
        .ports
        .iter()
        .map(
            |(p, udp)| serde_json::json!({"port": p, "protocol": if *udp { "UDP" } else { "TCP" }}),
        )
        .collect();
    let mut v = serde_json::json!({
        "metadata": {"name": format!("s{}", if s.alias { (slot + 1) % 5 } else { slot }), "namespace": "ns", "creationTimestamp": format!("2026-01-01T00:00:0{slot}Z")},
        "spec": {"type": if s.lb { "LoadBalancer" } else { "ClusterIP" }, "clusterIP": ip(s.cluster_ip), "ports": ports},
    });
    if s.unnamed {
        v["metadata"].as_object_mut().unwrap().remove("name");
    }
    let vips: Vec<String> = s.vips.iter().map(|n| ip(*n)).collect();
    if s.lb {
        let ing: Vec<serde_json::Value> =
            vips.iter().map(|i| serde_json::json!({"ip": i})).collect();
        v["status"] = serde_json::json!({"loadBalancer": {"ingress": ing}});
    } else {
        v["spec"]["externalIPs"] = serde_json::json!(vips);
    }
    serde_json::from_value::<core::Service>(v).unwrap().into()
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::collection::vec(0u8..8, 0..3),
        prop::collection::vec(
            (prop::sample::select(vec![0u16, 53, 80, 443]), any::<bool>()),
            0..3,
        ),
        0u8..8,
        any::<bool>(),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.05),
    )
        .prop_map(|(vips, ports, cluster_ip, lb, alias, unnamed)| Spec {
            vips,
            ports,
            cluster_ip,
            lb,
            alias,
            unnamed,
        })
}

fn bridges() -> Vec<BridgeConfig> {
    vec![
        BridgeConfig::default(),
        BridgeConfig {
            name: "br-local".into(),
            gateway_mode: GatewayMode::Local,
            vlan: Some(7),
            ..Default::default()
        },
        BridgeConfig {
            name: "br-provider".into(),
            profile: Profile::Underlay,
            router_mac: Some([2, 0, 0, 0, 0, 9]),
            ..Default::default()
        },
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn incremental_index_equals_the_full_plan(
        steps in prop::collection::vec((prop::collection::vec(prop::option::of(spec()), 5), prop::option::of(0u8..8)), 1..8)
    ) {
        let bridges = bridges();
        let mut planner = ServiceIndex::new(ModelOptions::default(), &bridges, 0x7f1f);
        let mut last: Vec<Option<(Spec, Arc<KeptService>)>> = vec![None; 5];
        let mut last_node: Option<(u8, Arc<core::Node>)> = None;
        let mut prev: Vec<std::collections::BTreeMap<FlowKey, crate::plan::flows::PlannedFlow>> = vec![Default::default(); bridges.len()];
        for (slots, node) in steps {
            let mut objects = Objects::default();
            for (i, s) in slots.iter().enumerate() {
                let Some(s) = s else { last[i] = None; continue };
                // Unchanged Services stay the same allocation, as sources deliver them.
                let arc = match &last[i] {
                    Some((old, a)) if old == s => Arc::clone(a),
                    _ => Arc::new(service(i, s)),
                };
                last[i] = Some((s.clone(), Arc::clone(&arc)));
                objects.services.push(arc);
            }
            if let Some(n) = node {
                let arc = match &last_node {
                    Some((old, a)) if *old == n => Arc::clone(a),
                    _ => Arc::new(serde_json::from_value(serde_json::json!({
                        "metadata": {"name": "node"},
                        "status": {"addresses": [{"type": "InternalIP", "address": ip(n)}]}
                    })).unwrap()),
                };
                last_node = Some((n, Arc::clone(&arc)));
                objects.nodes.push(arc);
            } else {
                last_node = None;
            }
            let deltas = planner.update(&objects);
            let model = Model::build(&objects, &ModelOptions::default());
            // The report: the model's problems (there are no slices here) and winners.
            let report = planner.report();
            prop_assert_eq!(report.problems(), model.problems.clone());
            let won: Vec<(PortClaim, ServiceKey)> =
                report.won().map(|(c, k)| (*c, k.clone())).collect();
            let mut want_won: Vec<(PortClaim, ServiceKey)> = model
                .vip_ports()
                .map(|(k, vp)| ((vp.vip, vp.port, vp.protocol), k.clone()))
                .collect();
            want_won.sort();
            prop_assert_eq!(won, want_won);
            let by_service: Vec<(ServiceKey, Vec<IpAddr>)> = report
                .vips_by_service()
                .into_iter()
                .map(|(k, v)| (k.clone(), v))
                .collect();
            let want_by_service: Vec<(ServiceKey, Vec<IpAddr>)> = model
                .services
                .values()
                .map(|s| (s.key.clone(), s.vips().into_iter().collect::<Vec<_>>()))
                .filter(|(_, v)| !v.is_empty())
                .collect();
            prop_assert_eq!(by_service, want_by_service);
            for (i, b) in bridges.iter().enumerate() {
                let want = plan(&model, &PlanInput { bridge: b, cookie_prefix: 0x7f1f });
                let maker = planner.maker(i);
                let mut have: Vec<crate::plan::flows::PlannedFlow> =
                    planner.flows(i).iter().map(|k| maker.flow(k)).collect();
                have.sort_by_cached_key(|f| f.key.to_string());
                prop_assert_eq!(&have, &want, "bridge {}", b.name);
                // Exactly the keys whose flow differs from the previous plan are touched.
                let now: std::collections::BTreeMap<FlowKey, crate::plan::flows::PlannedFlow> =
                    want.into_iter().map(|f| (f.key, f)).collect();
                let changed: BTreeSet<FlowKey> = prev[i]
                    .keys()
                    .chain(now.keys())
                    .filter(|k| prev[i].get(*k) != now.get(*k))
                    .cloned()
                    .collect();
                let touched: BTreeSet<FlowKey> = deltas[i].touched.iter().cloned().collect();
                prop_assert_eq!(touched.len(), deltas[i].touched.len());
                prop_assert_eq!(touched, changed, "bridge {}", b.name);
                prev[i] = now;
            }
        }
    }
}

#[test]
fn a_change_touches_only_its_own_flows() {
    let bridges = vec![BridgeConfig::default()];
    let mut p = ServiceIndex::new(ModelOptions::default(), &bridges, 0x7f1f);
    let base: Vec<Arc<KeptService>> = (0..5)
        .map(|i| {
            Arc::new(service(
                i,
                &Spec {
                    vips: vec![i as u8],
                    ports: vec![(80, false)],
                    cluster_ip: 7,
                    lb: false,
                    alias: false,
                    unnamed: false,
                },
            ))
        })
        .collect();
    let mut objects = Objects {
        services: base.clone(),
        ..Default::default()
    };
    let first = p.update(&objects);
    assert_eq!(
        first[0].touched.len(),
        5 * 6,
        "arp, pmtu, frag, frag return, steer, return per Service"
    );
    // One more Service on a new VIP: its six flows, nothing else.
    objects.services.push(Arc::new(service(
        5,
        &Spec {
            vips: vec![5],
            ports: vec![(443, false)],
            cluster_ip: 7,
            lb: false,
            alias: false,
            unnamed: false,
        },
    )));
    let d = p.update(&objects);
    assert_eq!(d[0].touched.len(), 6, "{:?}", d[0].touched);
    // Same objects again: nothing.
    assert!(p.update(&objects)[0].touched.is_empty());
}

#[test]
fn filling_yields_every_key_once_evens_first() {
    let keys: Vec<u32> = (0..7).collect();
    let order: Vec<u32> = super::filling(&keys).copied().collect();
    assert_eq!(order, [0, 2, 4, 6, 1, 3, 5]);
    assert_eq!(super::filling::<u32>(&[]).count(), 0);
    assert_eq!(super::filling(&[9]).copied().collect::<Vec<_>>(), [9]);
}

/// An index filled in [`super::filling`]'s order holds the same keys as one filled in
/// ascending order (how full its nodes are is measured by `agent_whole`'s resident size).
#[test]
fn an_index_filled_evens_first_holds_the_same_keys() {
    let keys: Vec<u32> = (0..10_000).map(|i| i * 3).collect();
    let filled: imbl::OrdSet<u32> = super::filling(&keys).copied().collect();
    let ascending: imbl::OrdSet<u32> = keys.iter().copied().collect();
    assert_eq!(filled, ascending);
    assert!(keys.iter().all(|k| filled.contains(k)));
}
