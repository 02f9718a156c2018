//! Tests of [`super`]: statements, what is held while a plan is in flight, what the sink says.

use super::*;

#[test]
fn announced_names_each_service_once_with_the_vips_this_node_announces() {
    use crate::agent::status::VipDoc;
    let web = ServiceKey::new("shop", "web");
    let api = ServiceKey::new("shop", "api");
    let doc = |vip: &str, services: Vec<ServiceKey>| VipDoc {
        vip: vip.parse().unwrap(),
        ports: Vec::new(),
        services,
    };
    // In VIP order, as the plan has them; 192.0.2.2 is shared by both Services.
    let vips: crate::agent::vip_list::VipList = vec![
        doc("192.0.2.1", vec![web.clone()]),
        doc("192.0.2.2", vec![api.clone(), web.clone()]),
        doc("192.0.2.3", vec![api.clone()]),
        doc("2001:db8::1", vec![web.clone()]),
    ]
    .into();
    let here: Vec<std::net::IpAddr> = ["192.0.2.2", "2001:db8::1", "198.51.100.9"]
        .iter()
        .map(|v| v.parse().unwrap())
        .collect();
    let got: Vec<(String, String)> = announced(&vips, &here, "node-a")
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
                "VIPs 192.0.2.2, 2001:db8::1 announced by node node-a (it answers ARP/ND for them)"
                    .to_string()
            ),
        ]
    );
    // Nothing announced, nothing said.
    assert!(announced(&vips, &[], "node-a").is_empty());
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
fn each_statement_is_said_once_while_it_holds_and_again_when_it_comes_back() {
    let web = ServiceKey::new("shop", "web");
    let api = ServiceKey::new("shop", "api");
    let dropped = AtomicU64::new(0);
    let mut said = std::collections::HashSet::new();
    let sayings = |programmed: Vec<(ServiceKey, Vec<std::net::IpAddr>)>| Sayings {
        statements: BTreeSet::from([ev("VipSkipped", "x")]),
        programmed: ProgrammedVips::listed(programmed, "node-a"),
    };
    let both = || {
        vec![
            (web.clone(), vips(&["192.0.2.1"])),
            (api.clone(), vips(&["192.0.2.2", "192.0.2.3"])),
        ]
    };
    // Everything is new; the digests of what is published are remembered.
    let mut always = || true;
    let due = to_say(sayings(both()), &mut said, &mut always, &dropped);
    let notes: Vec<String> = due.iter().map(|(_, e)| e.note.to_string()).collect();
    assert_eq!(
        notes,
        [
            "x",
            "VIPs 192.0.2.1 programmed on node node-a",
            "VIPs 192.0.2.2, 192.0.2.3 programmed on node node-a",
        ]
    );
    said.extend(due.iter().map(|(d, _)| *d));
    // The same again: nothing to say.
    assert!(to_say(sayings(both()), &mut said, &mut always, &dropped).is_empty());
    // web's VIPs change: only its new statement is said.
    let changed = vec![
        (web.clone(), vips(&["192.0.2.9"])),
        (api.clone(), vips(&["192.0.2.2", "192.0.2.3"])),
    ];
    let due = to_say(sayings(changed), &mut said, &mut always, &dropped);
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].1.service, web);
    said.extend(due.iter().map(|(d, _)| *d));
    // Back as it was: web's first statement stopped being true meanwhile, so it is said again.
    let due = to_say(sayings(both()), &mut said, &mut always, &dropped);
    assert_eq!(due.len(), 1);
    assert_eq!(&*due[0].1.note, "VIPs 192.0.2.1 programmed on node node-a");
    // Over the rate: counted as dropped, not remembered, so tried again next time.
    let mut none = || false;
    let fresh = vec![(ServiceKey::new("shop", "new"), vips(&["192.0.2.7"]))];
    assert!(to_say(sayings(fresh.clone()), &mut said, &mut none, &dropped).is_empty());
    assert_eq!(dropped.load(Ordering::Relaxed), 1);
    assert_eq!(
        to_say(sayings(fresh), &mut said, &mut always, &dropped).len(),
        1
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
