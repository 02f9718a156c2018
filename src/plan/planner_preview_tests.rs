//! Previews: whatever partial snapshots were previewed, the next update's plans are those of
//! a planner that never previewed (flows, rows, what they name as changed, the report).

use super::*;
use crate::model::Objects;
use proptest::prelude::*;
use std::collections::BTreeSet;

/// `n` Services (some sharing a VIP, some externalTrafficPolicy Local) with an EndpointSlice
/// each, on two Nodes; `port` is Service 0's port.
fn objects(n: usize, port: u16) -> Objects {
    let mut s = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for node in ["n1", "n2"] {
        s.push_str(&format!(
            "- {{apiVersion: v1, kind: Node, metadata: {{name: {node}}}}}\n"
        ));
    }
    for i in 0..n {
        let policy = if i % 3 == 0 { "Local" } else { "Cluster" };
        let p = if i == 0 { port } else { 80 };
        s.push_str(&format!(
            "- apiVersion: v1
  kind: Service
  metadata: {{name: s{i}, namespace: shop}}
  spec:
    externalIPs: [198.51.100.{vip}]
    externalTrafficPolicy: {policy}
    ports: [{{port: {p}, protocol: TCP, targetPort: 8080}}]
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{name: s{i}-1, namespace: shop, labels: {{kubernetes.io/service-name: s{i}}}}}
  addressType: IPv4
  ports: [{{port: 8080, protocol: TCP}}]
  endpoints:
  - {{addresses: [10.0.1.{i}], nodeName: n{node}, conditions: {{ready: true}}}}
",
            vip = i % 7,
            node = i % 2 + 1,
        ));
    }
    crate::source::file::parse(&s).expect("objects").objects
}

/// The objects at `keep` (indices into Services and slices alike), as a list under way has them.
fn partial(all: &Objects, keep: &BTreeSet<usize>) -> Objects {
    fn pick<T>(v: &[Arc<T>], keep: &BTreeSet<usize>) -> Vec<Arc<T>> {
        keep.iter().filter_map(|&i| v.get(i).cloned()).collect()
    }
    Objects {
        services: pick(&all.services, keep),
        endpoint_slices: pick(&all.endpoint_slices, keep),
        nodes: all.nodes.clone(),
        ..Objects::default()
    }
}

fn planner() -> Planner {
    let cfg = NorthboundConfig {
        node_router: Some("GR_{node}".into()),
        ..NorthboundConfig::default()
    };
    Planner::new(
        ModelOptions::default(),
        &[BridgeConfig::default()],
        0x7f1f,
        Some(cfg),
    )
}

fn sorted<T: Ord + Clone>(v: &[T]) -> Vec<T> {
    let mut v = v.to_vec();
    v.sort();
    v.dedup();
    v
}

/// `a` names at least what `b` names as changed; exactly that with `exact`. (What previews
/// took away and put back is named again: a reconciler finds it unchanged.)
fn names<T: Ord + Clone + std::fmt::Debug>(
    a: &[T],
    b: &[T],
    exact: bool,
) -> Result<(), TestCaseError> {
    let (a, b) = (sorted(a), sorted(b));
    if exact {
        prop_assert_eq!(a, b);
    } else {
        let missing: Vec<&T> = b.iter().filter(|k| a.binary_search(k).is_err()).collect();
        prop_assert!(missing.is_empty(), "not named: {:?}", missing);
    }
    Ok(())
}

/// The two updates' plans are the same, but for the order in which changes are named (and
/// without `exact`, for changes `a` names beyond `b`'s).
fn same_plans(a: &Plans, b: &Plans, exact: bool) -> Result<(), TestCaseError> {
    prop_assert_eq!(a.generation, b.generation);
    prop_assert_eq!(a.bridges.len(), b.bridges.len());
    for (x, y) in a.bridges.iter().zip(&b.bridges) {
        prop_assert_eq!(&x.flows, &y.flows);
        names(&x.delta.touched, &y.delta.touched, exact)?;
    }
    let (Some(x), Some(y)) = (&a.northbound, &b.northbound) else {
        return Err(TestCaseError::fail("rows planned"));
    };
    prop_assert_eq!(&x.rows, &y.rows);
    prop_assert_eq!(x.row_count, y.row_count);
    names(&x.delta.touched, &y.delta.touched, exact)?;
    prop_assert!(x.delta.vips || !y.delta.vips);
    if exact {
        prop_assert_eq!(x.delta.vips, y.delta.vips);
    }
    prop_assert_eq!(&x.vips, &y.vips);
    prop_assert_eq!(&x.previous_vips, &y.previous_vips);
    prop_assert_eq!(&x.make_first, &y.make_first);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn an_update_after_previews_plans_what_an_update_without_them_plans(
        n in 1usize..24,
        previews in prop::collection::vec(prop::collection::btree_set(0usize..24, 0..24), 0..4),
        again in any::<bool>(),
    ) {
        let all = objects(n, 80);
        let (mut previewed, mut plain) = (planner(), planner());
        if again {
            // Previews after a first update (a relist) hand on what changed since it.
            let first = objects(n, 443);
            same_plans(&previewed.update(&first), &plain.update(&first), true)?;
        }
        for keep in &previews {
            let flows = previewed.preview(&partial(&all, keep)).expect("no bridge announces");
            prop_assert_eq!(flows.len(), 1);
            prop_assert_eq!(&flows[0].flows, &previewed.services().flows(0));
        }
        prop_assert_eq!(previewed.generation(), plain.generation(), "previews count no generation");
        same_plans(&previewed.update(&all), &plain.update(&all), false)?;
        let (a, b) = (previewed.services().report(), plain.services().report());
        prop_assert_eq!(a.won().collect::<Vec<_>>(), b.won().collect::<Vec<_>>());
        prop_assert_eq!(a.vips_by_service(), b.vips_by_service());
        prop_assert_eq!(a.problems(), b.problems());
        // And the next update, from there.
        let next = objects(n, 8080);
        same_plans(&previewed.update(&next), &plain.update(&next), true)?;
    }
}

#[test]
fn a_planner_whose_bridge_announces_previews_nothing() {
    let bridge = BridgeConfig {
        announce: true,
        ..BridgeConfig::default()
    };
    let mut p = Planner::new(ModelOptions::default(), &[bridge], 0x7f1f, None).announcing_as("n1");
    assert!(p.preview(&objects(3, 80)).is_none());
    assert_eq!(p.services().report().won().count(), 0, "nothing planned");
}
