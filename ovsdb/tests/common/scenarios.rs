//! Scenarios run against both a standalone server and a RAFT cluster.
#![allow(dead_code)]

use ovsdb::txn::{ErrorKind, Operation, WaitUntil};
use ovsdb::{Client, Condition, Error, Mutation, Mutator, OpResult, Row, Transaction, Uuid, Value};
use serde_json::json;

pub const NB: &str = "OVN_Northbound";

pub fn row(cols: &[(&str, Value)]) -> Row {
    cols.iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

pub fn lb_row(name: &str, vip: &str) -> Row {
    row(&[
        ("name", name.into()),
        ("protocol", Value::set(["tcp"])),
        ("vips", Value::map([(vip, "10.1.0.1:8080")])),
        ("external_ids", Value::map([("vipflow.io/owner", name)])),
    ])
}

/// Every operation kind, checked through the results and with ovn-nbctl.
pub async fn every_op_kind(c: &Client, nbctl: &dyn Fn(&[&str]) -> String) {
    assert!(c.lock("vipflow_test").await.unwrap());

    let mut tx = Transaction::new(NB);
    tx.comment("vipflow: every op kind");
    tx.assert_lock("vipflow_test");
    let lb = tx.insert("Load_Balancer", lb_row("lb-a", "10.0.0.1:80"));
    tx.insert(
        "Logical_Switch",
        row(&[("name", "sw0".into()), ("load_balancer", Value::set([lb]))]),
    );
    // NB_Global holds at most one row (ovn-nbctl may have made it already).
    tx.delete("NB_Global", vec![]);
    tx.insert("NB_Global", row(&[]));
    let r = c.transact(&tx).await.unwrap();
    assert_eq!(r[0], OpResult::Empty);
    assert_eq!(r[1], OpResult::Empty);
    let lb_uuid = r[2].uuid().unwrap();
    assert!(r[4].count().is_some());
    r[5].uuid().unwrap();
    assert!(nbctl(&["ls-lb-list", "sw0"]).contains("lb-a"));

    let mut tx = Transaction::new(NB);
    tx.update(
        "Load_Balancer",
        vec![Condition::uuid(lb_uuid)],
        row(&[("options", Value::map([("reject", "true")]))]),
    );
    tx.mutate(
        "Load_Balancer",
        vec![Condition::eq("name", "lb-a")],
        vec![
            Mutation::new(
                "vips",
                Mutator::Insert,
                Value::map([("10.0.0.2:443", "10.1.0.2:8443")]),
            ),
            Mutation::new(
                "external_ids",
                Mutator::Delete,
                Value::set(["vipflow.io/owner"]),
            ),
        ],
    );
    tx.mutate(
        "NB_Global",
        vec![],
        vec![Mutation::new("nb_cfg", Mutator::Add, 5i64)],
    );
    tx.wait(
        "Load_Balancer",
        vec![Condition::uuid(lb_uuid)],
        &["name"],
        WaitUntil::Equal,
        vec![row(&[("name", "lb-a".into())])],
        Some(0),
    );
    tx.select(
        "Load_Balancer",
        vec![
            Condition::includes("options", Value::map([("reject", "true")])),
            Condition::new("name", ovsdb::Function::Ne, "lb"),
        ],
        Some(&["name", "vips", "external_ids", "_uuid"]),
    );
    tx.select(
        "NB_Global",
        vec![Condition::new("nb_cfg", ovsdb::Function::Ge, 5i64)],
        Some(&["nb_cfg"]),
    );
    let r = c.transact(&tx).await.unwrap();
    assert_eq!(r[0].count(), Some(1));
    assert_eq!(r[1].count(), Some(1));
    assert_eq!(r[2].count(), Some(1));
    assert_eq!(r[3], OpResult::Empty);
    let rows = r[4].rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["vips"].as_map().unwrap().len(), 2);
    assert_eq!(rows[0]["external_ids"], Value::empty_map());
    assert_eq!(rows[0]["_uuid"], Value::from(lb_uuid));
    assert_eq!(r[5].rows()[0]["nb_cfg"], Value::from(5i64));
    assert!(nbctl(&["get", "Load_Balancer", "lb-a", "options:reject"]).contains("true"));

    let mut tx = Transaction::new(NB);
    tx.mutate(
        "Logical_Switch",
        vec![Condition::eq("name", "sw0")],
        vec![Mutation::new(
            "load_balancer",
            Mutator::Delete,
            Value::set([lb_uuid]),
        )],
    );
    tx.delete("Load_Balancer", vec![Condition::uuid(lb_uuid)]);
    tx.delete("Load_Balancer", vec![Condition::uuid(lb_uuid)]);
    let r = c.transact(&tx).await.unwrap();
    assert_eq!(
        (r[0].count(), r[1].count(), r[2].count()),
        (Some(1), Some(1), Some(0))
    );
    assert!(!nbctl(&["lb-list"]).contains("lb-a"));
    c.unlock("vipflow_test").await.unwrap();
}

/// Server-side errors come back decoded, with the failing op and the details.
pub async fn server_errors_decoded(c: &Client, nbctl: &dyn Fn(&[&str]) -> String) {
    nbctl(&["ls-add", "sw_e", "--", "create", "Address_Set", "name=as0"]);

    // Unique index on Address_Set.name: reported at commit (extra result slot).
    let mut tx = Transaction::new(NB);
    tx.insert("Address_Set", row(&[("name", "as0".into())]));
    let e = c.transact(&tx).await.unwrap_err();
    let f = e.txn_failure().unwrap_or_else(|| panic!("{e}"));
    assert_eq!(f.kind, ErrorKind::ConstraintViolation, "{f}");
    assert!(f.details.as_deref().unwrap_or("").contains("as0"), "{f:?}");
    assert_eq!(f.index, 1);

    // A strong reference to a row that does not exist.
    let mut tx = Transaction::new(NB);
    tx.insert(
        "Logical_Switch",
        row(&[
            ("name", "sw1".into()),
            ("ports", Value::set([Uuid::new_v4()])),
        ]),
    );
    let f = c
        .transact(&tx)
        .await
        .unwrap_err()
        .txn_failure()
        .cloned()
        .unwrap();
    assert_eq!(f.kind, ErrorKind::ReferentialIntegrityViolation, "{f}");
    assert!(f.details.is_some());

    // A non-root row nobody references is garbage: a constraint? No: it is simply dropped;
    // wait that cannot succeed, with a zero timeout.
    let mut tx = Transaction::new(NB);
    tx.wait(
        "Logical_Switch",
        vec![Condition::eq("name", "sw_e")],
        &["name"],
        WaitUntil::NotEqual,
        vec![row(&[("name", "sw_e".into())])],
        Some(0),
    );
    let f = c
        .transact(&tx)
        .await
        .unwrap_err()
        .txn_failure()
        .cloned()
        .unwrap();
    assert_eq!(
        (f.kind, f.index, f.op),
        (ErrorKind::TimedOut, 0, Some("wait"))
    );

    // Assert a lock we do not hold.
    let mut tx = Transaction::new(NB);
    tx.assert_lock("nobody_holds_this");
    let f = c
        .transact(&tx)
        .await
        .unwrap_err()
        .txn_failure()
        .cloned()
        .unwrap();
    assert_eq!(f.kind, ErrorKind::NotOwner);

    // Same uuid-name twice (built by hand: the builder never does this).
    let mut tx = Transaction::new(NB);
    for _ in 0..2 {
        tx.push(Operation::Insert {
            table: "Load_Balancer".into(),
            row: Row::new(),
            uuid_name: Some("x".into()),
            uuid: None,
        });
    }
    let f = c
        .transact(&tx)
        .await
        .unwrap_err()
        .txn_failure()
        .cloned()
        .unwrap();
    assert_eq!(
        (f.kind.clone(), f.index),
        (ErrorKind::DuplicateUuidName, 1),
        "{f:?}"
    );

    // JSON-RPC level error.
    match c
        .call(
            "transact",
            json!(["No_Such_DB", {"op": "comment", "comment": "x"}]),
        )
        .await
    {
        Err(Error::Rpc { kind, .. }) => assert_eq!(kind, ErrorKind::UnknownDatabase),
        other => panic!("{other:?}"),
    }
    // The session is still fine.
    assert_eq!(c.echo(json!(["hi"])).await.unwrap(), json!(["hi"]));
}
