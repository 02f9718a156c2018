//! Tests of [`super`]: what the queue says and when, and the Events it writes.

use super::queue;
use super::{SinkKind, event_object, said_by, statement_of};
use std::collections::BTreeSet;
use vipflow_core::events::{ProgrammedVips, Sayings, ServiceEvent, digest};
use vipflow_core::keys::SAID_BY_LABEL;
use vipflow_core::model::ServiceKey;

fn ev(reason: &'static str, note: &str) -> ServiceEvent {
    ServiceEvent {
        service: ServiceKey::new("shop", "web"),
        warning: false,
        reason,
        note: note.into(),
    }
}

fn vips(list: &[&str]) -> Vec<std::net::IpAddr> {
    list.iter().map(|v| v.parse().unwrap()).collect()
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
        obj.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SAID_BY_LABEL)),
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
