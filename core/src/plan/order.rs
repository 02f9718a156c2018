//! Make before break between the Northbound rows and the bridges' flows.
//!
//! A VIP:port steered into OVN with no load balancer behind it is a black hole, so a change goes
//! out in up to three steps:
//! 1. rows that serve the old plan and the new one at once ([`make_rows`]);
//! 2. the new flows, once those rows are committed;
//! 3. the new rows, once the bridges hold the new flows: only when step 1 kept something the
//!    new plan drops (a Service removed, a VIP:port or protocol gone).
//!
//! A new Service's rows are thus in before its steer flows, and a removed one's steer flows
//! are gone before its rows.

use crate::model::ServiceKey;
use crate::plan::northbound::LbRow;
use crate::plan::row_table::RowIndex;
use std::sync::Arc;

/// The rows of step 1: `next`, where every touched Service keeps what `prev` had and `next`
/// drops: a row of `prev` with no row of the same key in `next` stays as it was; a row in both
/// is `next`'s, plus the VIP:ports only `prev`'s had, with their old backends. `None` when that
/// is `next` itself (nothing to break later, no step 3).
pub fn make_rows(prev: &RowIndex, next: &RowIndex, touched: &[ServiceKey]) -> Option<RowIndex> {
    let mut out = next.clone();
    let mut kept_any = false;
    for key in touched {
        let Some(old) = prev.get(key) else { continue };
        let new: &[LbRow] = next.get(key).map_or(&[], |v| v.as_slice());
        let mut merged: Vec<LbRow> = new.to_vec();
        let mut kept = false;
        for o in old.iter() {
            match merged.iter_mut().find(|n| n.key == o.key) {
                Some(n) => {
                    for (vip, backends) in o.vips.iter() {
                        if !n.vips.contains_key(vip) {
                            n.vips.insert(vip, backends);
                            kept = true;
                        }
                    }
                }
                None => {
                    merged.push(o.clone());
                    kept = true;
                }
            }
        }
        if kept {
            merged.sort_by(|a, b| a.key.cmp(&b.key));
            out.insert(key.clone(), Arc::new(merged));
            kept_any = true;
        }
    }
    kept_any.then_some(out)
}

/// The number of rows in an index.
pub fn row_count(rows: &RowIndex) -> usize {
    rows.values().map(|v| v.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Protocol;
    use crate::plan::northbound::{Attach, LbKey, Scope};
    use crate::plan::str_map::StrMap;
    use crate::reconcile::northbound::index_rows;

    fn key(name: &str) -> ServiceKey {
        ServiceKey::new("ns", name)
    }

    fn row(svc: &str, proto: Protocol, vips: &[(&str, &str)]) -> LbRow {
        LbRow {
            key: LbKey {
                owner: key(svc),
                protocol: proto,
                scope: Scope::Cluster,
            },
            name: format!("vipflow/ns/{svc}/{proto}"),
            vips: vips.iter().copied().collect(),
            options: StrMap::new(),
            external_ids: StrMap::new(),
            ip_port_mappings: StrMap::new(),
            attach: Attach::default(),
            template_vars: Vec::new(),
        }
    }

    #[test]
    fn a_new_service_needs_no_break_step() {
        let prev = index_rows(vec![row(
            "a",
            Protocol::Tcp,
            &[("10.0.0.1:80", "10.1.0.1:8080")],
        )]);
        let next = index_rows(vec![
            row("a", Protocol::Tcp, &[("10.0.0.1:80", "10.1.0.1:8080")]),
            row("b", Protocol::Tcp, &[("10.0.0.2:80", "10.1.0.2:8080")]),
        ]);
        assert_eq!(make_rows(&prev, &next, &[key("b")]), None);
    }

    #[test]
    fn changed_backends_need_no_break_step() {
        let prev = index_rows(vec![row(
            "a",
            Protocol::Tcp,
            &[("10.0.0.1:80", "10.1.0.1:8080")],
        )]);
        let next = index_rows(vec![row(
            "a",
            Protocol::Tcp,
            &[("10.0.0.1:80", "10.1.0.9:8080")],
        )]);
        assert_eq!(make_rows(&prev, &next, &[key("a")]), None);
    }

    #[test]
    fn a_removed_service_keeps_its_rows_until_the_break_step() {
        let a = row("a", Protocol::Tcp, &[("10.0.0.1:80", "10.1.0.1:8080")]);
        let b = row("b", Protocol::Udp, &[("10.0.0.2:53", "10.1.0.2:5353")]);
        let prev = index_rows(vec![a.clone(), b.clone()]);
        let next = index_rows(vec![a.clone()]);
        let make = make_rows(&prev, &next, &[key("b")]).expect("a break step");
        assert_eq!(make, index_rows(vec![a, b]));
        assert_eq!(row_count(&make), 2);
    }

    #[test]
    fn a_vip_port_or_protocol_dropped_is_kept_with_its_old_backends() {
        let prev = index_rows(vec![
            row(
                "a",
                Protocol::Tcp,
                &[
                    ("10.0.0.1:80", "10.1.0.1:8080"),
                    ("10.0.0.1:443", "10.1.0.1:8443"),
                ],
            ),
            row("a", Protocol::Udp, &[("10.0.0.1:53", "10.1.0.1:5353")]),
        ]);
        // :443 and UDP go; :80's backends change; :8080 is new.
        let next = index_rows(vec![row(
            "a",
            Protocol::Tcp,
            &[
                ("10.0.0.1:80", "10.1.0.7:8080"),
                ("10.0.0.1:8080", "10.1.0.7:8080"),
            ],
        )]);
        let make = make_rows(&prev, &next, &[key("a")]).expect("a break step");
        assert_eq!(
            make,
            index_rows(vec![
                row(
                    "a",
                    Protocol::Tcp,
                    &[
                        ("10.0.0.1:80", "10.1.0.7:8080"),
                        ("10.0.0.1:443", "10.1.0.1:8443"),
                        ("10.0.0.1:8080", "10.1.0.7:8080"),
                    ],
                ),
                row("a", Protocol::Udp, &[("10.0.0.1:53", "10.1.0.1:5353")]),
            ])
        );
    }

    #[test]
    fn untouched_services_are_left_as_next_has_them() {
        let prev = index_rows(vec![row("a", Protocol::Tcp, &[("10.0.0.1:80", "x:1")])]);
        let next = index_rows(vec![]);
        // "a" is gone but not named as touched: the delta decides, not a scan.
        assert_eq!(make_rows(&prev, &next, &[]), None);
    }
}
