//! Against a real standalone OVN_Northbound ovsdb-server.

mod common;

use std::time::Duration;

use common::scenarios::{self, lb_row, row};
use common::{NbServer, dump_rows};
use ovsdb::txn::{ErrorKind, WaitUntil};
use ovsdb::{
    Atom, Client, ClientOptions, Condition, Error, Event, LockEvent, MonitorSpec, Mutation,
    Mutator, Row, SchemaError, Transaction, Uuid, Value,
};
use serde_json::{Value as Json, json};

const NB: &str = "OVN_Northbound";

async fn client(remote: &str) -> Client {
    Client::connect(ClientOptions::new(remote, NB).unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn every_op_kind() {
    let srv = NbServer::start();
    let c = client(&srv.unix()).await;
    scenarios::every_op_kind(&c, &|a| srv.nbctl(a)).await;
}

#[tokio::test]
async fn server_errors_decoded() {
    let srv = NbServer::start();
    let c = client(&srv.tcp()).await;
    scenarios::server_errors_decoded(&c, &|a| srv.nbctl(a)).await;
}

#[tokio::test]
async fn schema_errors_before_sending() {
    let srv = NbServer::start();
    let c = client(&srv.unix()).await;
    let check = |tx: Transaction| {
        let c = c.clone();
        async move {
            match c.transact(&tx).await {
                Err(Error::Schema { index, source }) => (index, source),
                other => panic!("expected a schema error, got {other:?}"),
            }
        }
    };
    let mut tx = Transaction::new(NB);
    tx.insert("Load_Balancr", Row::new());
    assert_eq!(
        check(tx).await.1,
        SchemaError::UnknownTable {
            table: "Load_Balancr".into()
        }
    );

    let mut tx = Transaction::new(NB);
    tx.comment("first");
    tx.insert("Load_Balancer", row(&[("nmae", "x".into())]));
    let (i, e) = check(tx).await;
    assert_eq!(i, 1);
    assert_eq!(
        e,
        SchemaError::UnknownColumn {
            table: "Load_Balancer".into(),
            column: "nmae".into()
        }
    );

    let mut tx = Transaction::new(NB);
    tx.insert("Load_Balancer", row(&[("protocol", "icmp".into())]));
    let (_, e) = check(tx).await;
    let msg = e.to_string();
    assert!(
        msg.contains("Load_Balancer") && msg.contains("protocol") && msg.contains("icmp"),
        "{msg}"
    );

    let mut tx = Transaction::new(NB);
    tx.update("Load_Balancer", vec![], row(&[("vips", Value::set(["a"]))]));
    assert!(matches!(check(tx).await.1, SchemaError::BadValue { column, .. } if column == "vips"));

    let mut tx = Transaction::new(NB);
    tx.insert(
        "Logical_Switch_Port",
        row(&[("name", "p".into()), ("tag_request", Value::set([5000i64]))]),
    );
    let (_, e) = check(tx).await;
    assert!(e.to_string().contains("5000"), "{e}");

    let mut tx = Transaction::new(NB);
    tx.delete(
        "Load_Balancer",
        vec![Condition::new("name", ovsdb::Function::Lt, "x")],
    );
    assert!(matches!(check(tx).await.1, SchemaError::BadValue { .. }));

    let mut tx = Transaction::new(NB);
    tx.mutate(
        "Load_Balancer",
        vec![],
        vec![Mutation::new("name", Mutator::Add, 1i64)],
    );
    assert!(matches!(check(tx).await.1, SchemaError::BadValue { .. }));

    let mut tx = Transaction::new(NB);
    tx.insert("Load_Balancer", row(&[("_uuid", Value::from(Uuid::nil()))]));
    assert!(matches!(check(tx).await.1, SchemaError::Immutable { .. }));

    let mut tx = Transaction::new(NB);
    tx.insert(
        "Logical_Switch",
        row(&[
            ("name", "s".into()),
            (
                "load_balancer",
                Value::set([Atom::NamedUuid("ghost".into())]),
            ),
        ]),
    );
    let (_, e) = check(tx).await;
    assert!(e.to_string().contains("ghost"), "{e}");

    let mut tx = Transaction::new("OVN_Southbound");
    tx.comment("x");
    assert!(matches!(
        check(tx).await.1,
        SchemaError::WrongDatabase { .. }
    ));
    // Nothing reached the server.
    assert_eq!(srv.nbctl(&["lb-list"]).trim(), "");
}

#[tokio::test]
async fn list_dbs_schema_echo_change_aware() {
    let srv = NbServer::start();
    let c = client(&srv.tcp()).await;
    let dbs = c.list_dbs().await.unwrap();
    assert!(
        dbs.contains(&NB.to_owned()) && dbs.contains(&"_Server".to_owned()),
        "{dbs:?}"
    );
    let s = c.get_schema(NB).await.unwrap();
    let lb = s.table("Load_Balancer").unwrap();
    let proto = lb.column("protocol").unwrap();
    assert_eq!(proto.max, 1);
    assert!(
        proto
            .key
            .enumeration
            .as_ref()
            .unwrap()
            .contains(&Atom::string("sctp"))
    );
    let ls = s.table("Logical_Switch").unwrap();
    assert_eq!(
        ls.column("load_balancer").unwrap().key.ref_table.as_deref(),
        Some("Load_Balancer")
    );
    assert_eq!(
        c.call("set_db_change_aware", json!([true])).await.unwrap(),
        json!({})
    );
    assert_eq!(c.echo(json!([1, "x"])).await.unwrap(), json!([1, "x"]));
}

async fn cache_converges(
    m: &ovsdb::Monitor,
    schema: &ovsdb::DatabaseSchema,
    remote: &str,
    tables: &[&str],
) {
    let mut last = String::new();
    for _ in 0..200 {
        let mut equal = true;
        for t in tables {
            let want = dump_rows(schema, t, &common::dump(remote, t));
            let have = ovsdb::client::table_rows(m, t);
            if want != have {
                equal = false;
                let diff: Vec<String> = want
                    .iter()
                    .filter(|(u, r)| have.get(u) != Some(r))
                    .map(|(u, r)| format!("{u}: dump {r:?} cache {:?}", have.get(u)))
                    .take(2)
                    .collect();
                last = format!(
                    "{t}: dump has {} rows, cache {}: {diff:?}",
                    want.len(),
                    have.len()
                );
            }
        }
        if equal {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("cache never matched ovsdb-client dump: {last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_equals_dump_with_concurrent_nbctl() {
    let srv = NbServer::start();
    let c = client(&srv.unix()).await;
    srv.nbctl(&["lb-add", "pre", "10.9.9.9:80", "10.1.1.1:80", "udp"]);
    let mut m = c
        .monitor(
            MonitorSpec::new()
                .table("Load_Balancer")
                .table("Logical_Switch"),
        )
        .await
        .unwrap();
    assert_eq!(m.cache().table("Load_Balancer").unwrap().len(), 1);
    assert!(matches!(m.try_event(), Some(Event::Insert { .. })));

    // ovn-nbctl writes from another thread while we write through our client.
    let nb = srv.unix();
    let nbctl = std::thread::spawn(move || {
        let run = |args: &[&str]| {
            let db = format!("--db={nb}");
            let mut a = vec![db.as_str()];
            a.extend_from_slice(args);
            let o = std::process::Command::new("ovn-nbctl")
                .args(&a)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        };
        for i in 0..15 {
            let name = format!("ext{i}");
            let vip = format!("10.2.0.{i}:80");
            run(&["lb-add", &name, &vip, "10.3.0.1:80,10.3.0.2:80"]);
            run(&["ls-add", &format!("ls{i}")]);
            run(&["ls-lb-add", &format!("ls{i}"), &name]);
            run(&[
                "set",
                "Load_Balancer",
                &name,
                "options:reject=true",
                "external_ids:k=v",
            ]);
            if i % 3 == 0 {
                run(&["lb-del", &name]);
            }
            if i % 4 == 0 {
                run(&["remove", "Load_Balancer", "pre", "external_ids", "k"]);
                run(&[
                    "set",
                    "Load_Balancer",
                    "pre",
                    &format!("external_ids:k=v{i}"),
                ]);
            }
        }
    });
    let mut ours = vec![];
    for i in 0..20 {
        let mut tx = Transaction::new(NB);
        tx.insert(
            "Load_Balancer",
            lb_row(&format!("own{i}"), &format!("10.4.0.{i}:80")),
        );
        ours.push(c.transact(&tx).await.unwrap()[0].uuid().unwrap());
        if i % 2 == 1 {
            let mut tx = Transaction::new(NB);
            tx.mutate(
                "Load_Balancer",
                vec![Condition::uuid(ours[i - 1])],
                vec![
                    Mutation::new(
                        "vips",
                        Mutator::Insert,
                        Value::map([("10.5.0.1:53", "10.6.0.1:53")]),
                    ),
                    Mutation::new(
                        "selection_fields",
                        Mutator::Insert,
                        Value::set(["ip_src", "tp_src"]),
                    ),
                    Mutation::new(
                        "external_ids",
                        Mutator::Delete,
                        Value::set(["vipflow.io/owner"]),
                    ),
                ],
            );
            tx.update(
                "Load_Balancer",
                vec![Condition::uuid(ours[i])],
                row(&[("protocol", Value::set(["udp"]))]),
            );
            c.transact(&tx).await.unwrap();
        }
        if i % 5 == 4 {
            let mut tx = Transaction::new(NB);
            tx.delete("Load_Balancer", vec![Condition::uuid(ours[i - 2])]);
            c.transact(&tx).await.unwrap();
        }
    }
    nbctl.join().unwrap();
    cache_converges(
        &m,
        &c.schema(),
        &srv.unix(),
        &["Load_Balancer", "Logical_Switch"],
    )
    .await;
    let mut n = 0;
    while m.try_event().is_some() {
        n += 1;
    }
    assert!(n > 50, "only {n} events");
}

#[tokio::test]
async fn monitor_columns_and_cancel() {
    let srv = NbServer::start();
    let c = client(&srv.unix()).await;
    let mut m = c
        .monitor(MonitorSpec::new().columns("Load_Balancer", &["name", "vips"]))
        .await
        .unwrap();
    srv.nbctl(&["lb-add", "a", "10.0.0.1:80", "10.1.1.1:80"]);
    let ev = tokio::time::timeout(Duration::from_secs(5), m.next_event())
        .await
        .unwrap()
        .unwrap();
    let Event::Insert { new, .. } = ev else {
        panic!("{ev:?}")
    };
    assert_eq!(new.keys().collect::<Vec<_>>(), ["name", "vips"]);
    assert!(
        c.monitor(MonitorSpec::new().columns("Load_Balancer", &["nope"]))
            .await
            .is_err()
    );
    let id = m.id().to_owned();
    c.monitor_cancel(m).await.unwrap();
    // The server no longer knows the monitor.
    let e = c.call("monitor_cancel", json!([id])).await.unwrap_err();
    assert!(matches!(e, Error::Rpc { .. }), "{e}");
}

/// A whole-row table (RFC 7047 `monitor`) beside a kept one in one monitor: every change of
/// the whole-row table comes with the row's every monitored column, the cache keeps none of
/// them, a reconnect sends the rows again, and cancelling ends both subscriptions.
#[tokio::test]
async fn whole_row_table_beside_a_kept_one() {
    let srv = NbServer::start();
    let mut o = ClientOptions::new(&srv.unix(), NB).unwrap();
    o.backoff_max = Duration::from_millis(200);
    let c = Client::connect(o).await.unwrap();
    srv.nbctl(&["lb-add", "pre", "10.0.0.9:80", "10.1.1.9:80"]);
    srv.nbctl(&["ls-add", "sw"]);
    let mut m = c
        .monitor(
            MonitorSpec::new()
                .whole_rows("Load_Balancer", &["name", "vips", "external_ids"])
                .columns("Logical_Switch", &["name"]),
        )
        .await
        .unwrap();
    let next = |m: &mut ovsdb::Monitor| {
        let e = m.try_event();
        e.unwrap_or_else(|| panic!("an event"))
    };
    let mut first = vec![next(&mut m), next(&mut m)];
    first.sort_by_key(|e| matches!(e, Event::Insert { table, .. } if table == "Logical_Switch"));
    let Event::Insert { table, new, .. } = &first[0] else {
        panic!("{first:?}")
    };
    assert_eq!(table, "Load_Balancer");
    assert_eq!(new["vips"], Value::map([("10.0.0.9:80", "10.1.1.9:80")]));
    let lbs = m.cache().table("Load_Balancer").unwrap().clone();
    assert_eq!(lbs.len(), 1);
    assert!(
        lbs.values().all(|r| r.is_empty()),
        "no columns kept: {lbs:?}"
    );
    assert_eq!(
        m.cache()
            .table("Logical_Switch")
            .unwrap()
            .values()
            .next()
            .unwrap()["name"],
        Value::from("sw")
    );

    // A change of one column: the event has every monitored column of the row.
    srv.nbctl(&["set", "Load_Balancer", "pre", "external_ids:k=v"]);
    let ev = tokio::time::timeout(Duration::from_secs(5), m.next_event())
        .await
        .unwrap()
        .unwrap();
    let Event::Modify { table, new, .. } = &ev else {
        panic!("{ev:?}")
    };
    assert_eq!(table, "Load_Balancer");
    assert_eq!(new["name"], Value::from("pre"));
    assert_eq!(new["vips"], Value::map([("10.0.0.9:80", "10.1.1.9:80")]));
    assert_eq!(new["external_ids"], Value::map([("k", "v")]));

    // After a reconnect the rows come again, whole.
    c.reconnect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let e = tokio::time::timeout_at(deadline, m.next_event())
            .await
            .expect("the rows again")
            .unwrap();
        if let Event::Modify { table, new, .. } = &e
            && table == "Load_Balancer"
            && new["external_ids"] == Value::map([("k", "v")])
        {
            break;
        }
    }
    srv.nbctl(&["lb-del", "pre"]);
    let ev = tokio::time::timeout(Duration::from_secs(5), m.next_event())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(&ev, Event::Delete { table, .. } if table == "Load_Balancer"),
        "{ev:?}"
    );
    assert!(m.cache().table("Load_Balancer").unwrap().is_empty());

    let id = m.id().to_owned();
    c.monitor_cancel(m).await.unwrap();
    for id in [id.clone(), format!("{id}.rows")] {
        let e = c.call("monitor_cancel", json!([id])).await.unwrap_err();
        assert!(matches!(e, Error::Rpc { .. }), "{id}: {e}");
    }
}

#[tokio::test]
async fn locks_steal_unlock() {
    let srv = NbServer::start();
    let a = client(&srv.unix()).await;
    let b = client(&srv.unix()).await;
    let mut a_ev = a.lock_events();
    let mut b_ev = b.lock_events();
    assert!(a.lock("leader").await.unwrap());
    assert!(!b.lock("leader").await.unwrap());
    assert!(matches!(
        a.lock("bad name").await,
        Err(Error::Schema { .. })
    ));
    assert!(b.steal("leader").await.unwrap());
    // ovsdb-server also notifies the immediate grant: skip to the steal.
    loop {
        let e = tokio::time::timeout(Duration::from_secs(5), a_ev.recv())
            .await
            .unwrap()
            .unwrap();
        if e == LockEvent::Stolen("leader".into()) {
            break;
        }
        assert_eq!(e, LockEvent::Locked("leader".into()));
    }
    let mut tx = Transaction::new(NB);
    tx.assert_lock("leader");
    assert_eq!(
        a.transact(&tx)
            .await
            .unwrap_err()
            .txn_failure()
            .unwrap()
            .kind,
        ErrorKind::NotOwner
    );
    b.transact(&tx).await.unwrap();
    // A queued lock is granted when the holder lets go.
    a.unlock("leader").await.unwrap();
    assert!(!a.lock("leader").await.unwrap());
    b.unlock("leader").await.unwrap();
    let e = tokio::time::timeout(Duration::from_secs(5), a_ev.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(e, LockEvent::Locked("leader".into()));
    a.transact(&tx).await.unwrap();
    while let Ok(e) = b_ev.try_recv() {
        assert_ne!(e, LockEvent::Stolen("leader".into()));
    }
}

#[tokio::test]
async fn cancel_outstanding_request() {
    let srv = NbServer::start();
    let c = client(&srv.unix()).await;
    let conn = c.ready().await.unwrap();
    // A wait that blocks until some row appears: the server parks it.
    let mut tx = Transaction::new(NB);
    tx.wait(
        "Load_Balancer",
        vec![],
        &["name"],
        WaitUntil::Equal,
        vec![row(&[("name", "never".into())])],
        None,
    );
    let (id_tx, id_rx) = tokio::sync::oneshot::channel();
    let call = tokio::spawn({
        let conn = conn.clone();
        let params = tx.params();
        async move { conn.call_with_id("transact", params, id_tx).await }
    });
    let id = id_rx.await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    conn.cancel(id).unwrap();
    let r = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .unwrap()
        .unwrap();
    match r {
        Err(Error::Rpc { error, .. }) => assert_eq!(error, "canceled"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn conditional_monitor() {
    let srv = NbServer::start();
    let c = client(&srv.unix()).await;
    srv.nbctl(&["lb-add", "a", "10.0.0.1:80", "10.1.1.1:80"]);
    srv.nbctl(&["lb-add", "b", "10.0.0.2:80", "10.1.1.1:80"]);
    let mut spec = MonitorSpec::new().columns("Load_Balancer", &["name"]);
    if let Some(sel) = spec.tables.get_mut("Load_Balancer") {
        sel.conditions = vec![Condition::eq("name", "b")];
    }
    let m = c.monitor(spec).await.unwrap();
    let names = |m: &ovsdb::Monitor| -> Vec<String> {
        m.cache()
            .table("Load_Balancer")
            .unwrap()
            .values()
            .map(|r| r["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(&m), ["b"]);
    srv.nbctl(&["set", "Load_Balancer", "a", "name=b"]);
    for _ in 0..100 {
        if names(&m).len() == 2 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "row that came to match the condition never arrived: {:?}",
        names(&m)
    );
}

/// The server is replaced by one that does not know our last transaction: the monitor's
/// `monitor_cond_since` gets found=false and the whole cache is replaced, with events for the
/// difference. A transaction in flight across the crash reports an unknown outcome.
#[tokio::test]
async fn reconnect_replaces_cache_when_history_is_gone() {
    let mut srv = NbServer::start();
    let mut o = ClientOptions::new(&srv.unix(), NB).unwrap();
    o.backoff_max = Duration::from_millis(200);
    let c = Client::connect(o).await.unwrap();
    srv.nbctl(&["lb-add", "old", "10.0.0.1:80", "10.1.1.1:80"]);
    let mut m = c
        .monitor(MonitorSpec::new().table("Load_Balancer"))
        .await
        .unwrap();
    while m.try_event().is_some() {}
    let resyncs = c
        .stats()
        .full_resyncs
        .load(std::sync::atomic::Ordering::Relaxed);

    let mut blocked = Transaction::new(NB);
    blocked.wait(
        "Load_Balancer",
        vec![],
        &["name"],
        WaitUntil::Equal,
        vec![row(&[("name", "never".into())])],
        None,
    );
    let pending = tokio::spawn({
        let c = c.clone();
        async move { c.transact(&blocked).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    srv.replace_with_empty();
    match pending.await.unwrap() {
        Err(e @ Error::OutcomeUnknown { .. }) => assert!(e.to_string().contains("outcome unknown")),
        other => panic!("{other:?}"),
    }
    srv.nbctl(&["lb-add", "new", "10.0.0.2:80", "10.1.1.1:80"]);
    let (mut deleted, mut inserted) = (false, false);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !(deleted && inserted) {
        let e = tokio::time::timeout_at(deadline, m.next_event())
            .await
            .expect("events")
            .unwrap();
        match e {
            Event::Delete { old, .. } if old["name"] == Value::from("old") => deleted = true,
            Event::Insert { new, .. } if new["name"] == Value::from("new") => inserted = true,
            _ => {}
        }
    }
    let names: Vec<Value> = m
        .cache()
        .table("Load_Balancer")
        .unwrap()
        .values()
        .map(|r| r["name"].clone())
        .collect();
    assert_eq!(names, [Value::from("new")]);
    assert!(
        c.stats()
            .full_resyncs
            .load(std::sync::atomic::Ordering::Relaxed)
            > resyncs
    );
}

/// The schema is converted online (as an OVN upgrade does): the server cancels our monitors
/// (we are db_change_aware); the client fetches the new schema, resubscribes, and the new
/// column is usable.
#[tokio::test]
async fn follows_online_schema_conversion() {
    let srv = NbServer::start();
    let c = client(&srv.unix()).await;
    srv.nbctl(&["lb-add", "a", "10.0.0.1:80", "10.1.1.1:80"]);
    let m = c
        .monitor(MonitorSpec::new().table("Load_Balancer"))
        .await
        .unwrap();
    let mut schema: Json =
        serde_json::from_str(&std::fs::read_to_string(common::NB_SCHEMA).unwrap()).unwrap();
    schema["version"] = json!("99.0.0");
    schema["tables"]["Load_Balancer"]["columns"]["vipflow_note"] = json!({"type": "string"});
    let path = srv.path().join("new.ovsschema");
    std::fs::write(&path, schema.to_string()).unwrap();
    let out = std::process::Command::new("ovsdb-client")
        .args(["convert", &srv.unix(), &path.to_string_lossy()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for _ in 0..200 {
        let seen = m
            .cache()
            .table("Load_Balancer")
            .and_then(|t| t.values().next().map(|r| r.contains_key("vipflow_note")))
            .unwrap_or(false);
        if c.schema().version == "99.0.0" && seen {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(c.schema().version, "99.0.0");
    let mut tx = Transaction::new(NB);
    tx.update(
        "Load_Balancer",
        vec![Condition::eq("name", "a")],
        row(&[("vipflow_note", "hi".into())]),
    );
    c.transact(&tx).await.unwrap();
    for _ in 0..200 {
        let note = m
            .cache()
            .table("Load_Balancer")
            .and_then(|t| t.values().next().map(|r| r["vipflow_note"].clone()));
        if note == Some(Value::from("hi")) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("cache did not follow the converted schema");
}
