//! Tests of [`super`]: statements, what is held while a plan is in flight, what the sink says.

use super::*;
#[test]
fn announced_names_each_service_once_with_the_vips_this_node_announces_and_where_they_came_from() {
    use crate::announce::placement::NodeName;
    let web = ServiceKey::new("shop", "web");
    let api = ServiceKey::new("shop", "api");
    let ip = |s: &str| -> std::net::IpAddr { s.parse().unwrap() };
    let here = vec![
        (api.clone(), vec![(ip("192.0.2.2"), None)]),
        (
            web.clone(),
            vec![
                (ip("192.0.2.2"), None),
                (ip("2001:db8::1"), Some(NodeName::from("node-b"))),
            ],
        ),
        // A Service with nothing here says nothing.
        (ServiceKey::new("shop", "idle"), Vec::new()),
    ];
    let got: Vec<(String, String)> = announced(&here, "node-a")
        .into_iter()
        .map(|e| {
            assert_eq!((e.reason, e.warning), ("VipAnnounced", false));
            (e.service.to_string(), e.note.to_string())
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "shop/api".to_string(),
                "VIPs 192.0.2.2 announced by node node-a (it answers ARP/ND for them)".to_string()
            ),
            (
                "shop/web".to_string(),
                "VIPs 192.0.2.2, 2001:db8::1 (from node node-b) announced by node node-a (it \
                 answers ARP/ND for them)"
                    .to_string()
            ),
        ]
    );
    // Nothing announced, nothing said.
    assert!(announced(&[], "node-a").is_empty());
}

fn ev(reason: &'static str, note: &str) -> ServiceEvent {
    ServiceEvent {
        service: ServiceKey::new("shop", "web"),
        warning: false,
        reason,
        note: note.into(),
    }
}

/// Every statement of `s`, the VipProgrammed ones made.
fn all(s: Sayings) -> BTreeSet<ServiceEvent> {
    let mut out = s.statements;
    out.extend(s.programmed.statements());
    out
}

fn vips(list: &[&str]) -> Vec<std::net::IpAddr> {
    list.iter().map(|v| v.parse().unwrap()).collect()
}

#[test]
fn programmed_statements_hold_while_a_plan_is_in_flight() {
    let mut held = Programmed::default();
    let web = ServiceKey::new("shop", "web");
    let skipped = BTreeSet::from([ev("VipSkipped", "x")]);
    let first = ProgrammedVips::listed(vec![(web.clone(), vips(&["1.2.3.4"]))], "node-a");
    let announced = BTreeSet::from([ev("VipAnnounced", "VIPs 1.2.3.4 announced")]);
    let applied: BTreeSet<ServiceEvent> = skipped
        .iter()
        .cloned()
        .chain(first.statements())
        .chain(announced.iter().cloned())
        .collect();
    assert!(applied.contains(&ev(
        "VipProgrammed",
        "VIPs 1.2.3.4 programmed on node node-a"
    )));
    assert_eq!(
        all(with_programmed(
            skipped.clone(),
            &first,
            announced,
            true,
            &mut held
        )),
        applied
    );
    // A new plan, not yet applied: the warning is still true, what the last applied plan
    // programmed and announced is held, the new plan's statements wait.
    let second =
        ProgrammedVips::listed(vec![(web.clone(), vips(&["1.2.3.4", "5.6.7.8"]))], "node-a");
    assert_eq!(
        all(with_programmed(
            skipped,
            &second,
            BTreeSet::new(),
            false,
            &mut held
        )),
        applied
    );
    // Applied, with a new VIP set and nothing announced: the new statement replaces the old.
    assert_eq!(
        all(with_programmed(
            BTreeSet::new(),
            &second,
            BTreeSet::new(),
            true,
            &mut held
        )),
        second.statements()
    );
}

#[test]
fn digests_are_stable_across_builds() {
    // Kept in Events and read back by other builds: these values must never change.
    assert_eq!(digest(&ev("VipSkipped", "x")), 0xa660_0c17_9ee7_7ec1);
    assert_eq!(
        programmed_digest(
            &ServiceKey::new("shop", "web"),
            &vips(&["192.0.2.1", "2001:db8::1"]),
            "node-a"
        ),
        0x8681_d068_0a07_8e9d
    );
}

#[test]
fn events_follow_the_problem_kind_not_its_wording() {
    use crate::model::{Problem, Subject};
    let web = ServiceKey::new("shop", "web");
    let problems = [
        Problem::new(
            Subject::Service(web.clone()),
            ProblemKind::ConflictLost,
            "worded any way at all",
        )
        .with_vip(Some("192.0.2.1:80/TCP".into())),
        Problem::new(
            Subject::Service(web.clone()),
            ProblemKind::Invalid,
            "conflict lost (in the text, but not the kind)",
        ),
        // Not about a Service: no Event.
        Problem::new(Subject::Node("n".into()), ProblemKind::Invalid, "x"),
    ];
    let got = warnings(&problems);
    let reasons: Vec<_> = got.iter().map(|e| (e.reason, e.service.clone())).collect();
    assert_eq!(reasons.len(), 2, "{got:?}");
    assert!(reasons.contains(&("VipConflict", web.clone())));
    assert!(reasons.contains(&("VipSkipped", web)));
}
