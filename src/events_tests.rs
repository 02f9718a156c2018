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

/// Everything due in `q`, in turn, published.
fn say_all(q: &mut queue::Queue) -> Vec<ServiceEvent> {
    let mut out = Vec::new();
    while let Some(t) = q.take() {
        out.push(t.event.clone());
        q.said(t);
    }
    out
}

#[test]
fn each_statement_is_said_once_while_it_holds_and_again_when_it_comes_back() {
    let web = ServiceKey::new("shop", "web");
    let api = ServiceKey::new("shop", "api");
    let mut q = queue::Queue::default();
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
    // Everything is new.
    assert_eq!(q.update(sayings(both())), 0);
    let notes: Vec<String> = say_all(&mut q).iter().map(|e| e.note.to_string()).collect();
    assert_eq!(
        notes,
        [
            "x",
            "VIPs 192.0.2.1 programmed on node node-a",
            "VIPs 192.0.2.2, 192.0.2.3 programmed on node node-a",
        ]
    );
    // The same again: nothing to say.
    q.update(sayings(both()));
    assert!(!q.has_due());
    // web's VIPs change: only its new statement is said.
    let changed = vec![
        (web.clone(), vips(&["192.0.2.9"])),
        (api.clone(), vips(&["192.0.2.2", "192.0.2.3"])),
    ];
    q.update(sayings(changed));
    let due = say_all(&mut q);
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].service, web);
    // Back as it was: web's first statement stopped being true meanwhile, so it is said again.
    q.update(sayings(both()));
    let due = say_all(&mut q);
    assert_eq!(due.len(), 1);
    assert_eq!(&*due[0].note, "VIPs 192.0.2.1 programmed on node node-a");
}

#[test]
fn due_statements_wait_in_the_order_they_became_due_and_are_dropped_when_they_stop_holding() {
    let a = ev("VipSkipped", "a");
    let b = ev("VipSkipped", "b");
    let c = ev("VipSkipped", "c");
    let mut q = queue::Queue::default();
    // b first; then a and c, though a sorts before b.
    q.update(Sayings {
        statements: BTreeSet::from([b.clone()]),
        ..Sayings::default()
    });
    assert_eq!(q.hold_back(), 1);
    assert_eq!(q.hold_back(), 0, "held back once, counted once");
    q.update(Sayings {
        statements: BTreeSet::from([a.clone(), b.clone(), c.clone()]),
        ..Sayings::default()
    });
    assert_eq!(q.hold_back(), 2);
    // c stops holding before its turn: dropped.
    assert_eq!(
        q.update(Sayings {
            statements: BTreeSet::from([a.clone(), b.clone()]),
            ..Sayings::default()
        }),
        1
    );
    assert_eq!(q.due_len(), 2);
    // A failed write goes back behind what is due.
    let first = q.take();
    assert_eq!(first.as_ref().map(|t| &t.event), Some(&b));
    if let Some(t) = first {
        q.said(t);
    }
    let t = q.take();
    assert_eq!(t.as_ref().map(|t| &t.event), Some(&a));
    if let Some(t) = t {
        q.put_back(t);
    }
    q.update(Sayings {
        statements: BTreeSet::from([a.clone(), b.clone(), c.clone()]),
        ..Sayings::default()
    });
    assert_eq!(say_all(&mut q), [a, c]);
}

#[test]
fn what_was_said_before_is_not_said_again_while_it_holds() {
    let a = ev("VipSkipped", "a");
    let b = ev("VipSkipped", "b");
    let mut q = queue::Queue::default();
    // Learned from the API server: a, and a statement that no longer holds.
    q.seed([digest(&a), digest(&ev("VipSkipped", "gone"))]);
    q.update(Sayings {
        statements: BTreeSet::from([a.clone(), b.clone()]),
        ..Sayings::default()
    });
    assert_eq!(say_all(&mut q), std::slice::from_ref(&b));
    // What no longer held was forgotten: said if it comes back.
    q.update(Sayings {
        statements: BTreeSet::from([a, b, ev("VipSkipped", "gone")]),
        ..Sayings::default()
    });
    assert_eq!(say_all(&mut q), [ev("VipSkipped", "gone")]);
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
fn events_carry_their_sink_and_statement() {
    let e = ServiceEvent {
        service: ServiceKey::new("shop", "web"),
        warning: true,
        reason: "NoPool",
        note: "é".repeat(600).into(),
    };
    let obj = event_object(&e, 0xab, "allocator", "node-a", 0x1234);
    assert_eq!(obj.metadata.name.as_deref(), Some("web.0000000000001234"));
    assert_eq!(obj.metadata.namespace.as_deref(), Some("shop"));
    assert_eq!(
        obj.metadata.labels.as_ref().and_then(|l| l.get(SAID_BY)),
        Some(&"allocator".to_string())
    );
    assert_eq!(statement_of(&obj), Some(0xab));
    assert_eq!(obj.type_.as_deref(), Some("Warning"));
    assert_eq!(obj.reporting_controller.as_deref(), Some("vipflow"));
    assert_eq!(obj.reporting_instance.as_deref(), Some("node-a"));
    assert_eq!(obj.action.as_deref(), Some("Reconcile"));
    let regarding = obj.regarding.clone().unwrap_or_default();
    assert_eq!(
        (regarding.kind.as_deref(), regarding.name.as_deref()),
        (Some("Service"), Some("web"))
    );
    let note = obj.note.unwrap_or_default();
    assert!(note.len() <= 1024 && note.ends_with('…'), "{}", note.len());
}

#[test]
fn a_node_sink_is_named_by_its_node_when_that_is_a_label_value() {
    assert_eq!(said_by(SinkKind::Allocator, "node-a"), "allocator");
    assert_eq!(said_by(SinkKind::Node, "node-a"), "node-a");
    assert_eq!(
        said_by(SinkKind::Node, "ip-10-0-0-1.ec2.internal"),
        "ip-10-0-0-1.ec2.internal"
    );
    let long = "n".repeat(64);
    for bad in [long.as_str(), "-a", "a.", ""] {
        let id = said_by(SinkKind::Node, bad);
        assert!(id.starts_with("node-") && id.len() == 21, "{bad}: {id}");
        assert_eq!(id, said_by(SinkKind::Node, bad), "stable");
    }
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
