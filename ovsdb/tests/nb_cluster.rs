//! Against a real 3-member RAFT cluster of OVN_Northbound ovsdb-servers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::time::Duration;

use ovsdb::{
    Client, ClientOptions, Condition, Error, MonitorSpec, Mutation, Mutator, Row, Transaction,
    Uuid, Value,
};
use testkit::cluster::NbCluster;

mod common;
use common::scenarios::row;

const NB: &str = "OVN_Northbound";

fn opts(remotes: &str) -> ClientOptions {
    let mut o = ClientOptions::new(remotes, NB).unwrap();
    o.connect.probe_interval = Some(Duration::from_millis(500));
    o.backoff_max = Duration::from_millis(300);
    o
}

fn dump_rows(schema: &ovsdb::DatabaseSchema, remote: &str, table: &str) -> BTreeMap<Uuid, Row> {
    common::dump_rows(schema, table, &common::dump(remote, table))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_go_to_the_leader_and_followers_are_refused() {
    let cl = NbCluster::start();
    let leader = cl.wait_leader();
    let c = Client::connect(opts(&cl.tcp_remotes())).await.unwrap();
    assert_eq!(c.current_remote().unwrap(), cl.tcp(leader));

    let mut tx = Transaction::new(NB);
    let lb = tx.insert(
        "Load_Balancer",
        row(&[
            ("name", "lb".into()),
            ("vips", Value::map([("10.0.0.1:80", "")])),
        ]),
    );
    tx.insert(
        "Logical_Switch",
        row(&[("name", "sw".into()), ("load_balancer", Value::set([lb]))]),
    );
    let r = c.transact(&tx).await.unwrap();
    let lb = r[0].uuid().unwrap();
    let mut tx = Transaction::new(NB);
    tx.mutate(
        "Load_Balancer",
        vec![Condition::uuid(lb)],
        vec![Mutation::new(
            "options",
            Mutator::Insert,
            Value::map([("reject", "true")]),
        )],
    );
    tx.select(
        "Logical_Switch",
        vec![Condition::includes("load_balancer", lb)],
        Some(&["name"]),
    );
    let r = c.transact(&tx).await.unwrap();
    assert_eq!(r[0].count(), Some(1));
    assert_eq!(r[1].rows()[0]["name"], Value::from("sw"));
    assert!(cl.nbctl(&["ls-lb-list", "sw"]).contains("lb"));

    // The shared scenarios, through the leader.
    common::scenarios::every_op_kind(&c, &|a| cl.nbctl(a)).await;
    common::scenarios::server_errors_decoded(&c, &|a| cl.nbctl(a)).await;

    // A follower alone is refused: leader only, like ovn-nbctl.
    let follower = (leader + 1) % 3;
    let mut o = opts(&cl.tcp(follower));
    o.wait_timeout = Duration::from_millis(500);
    match Client::connect(o).await {
        Err(Error::NoServer { reason, .. }) => assert!(reason.contains("leader"), "{reason}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("connected to a follower"),
    }
    // Unless asked to use any member.
    let mut o = opts(&cl.tcp(follower));
    o.leader_only = false;
    let f = Client::connect(o).await.unwrap();
    let mut tx = Transaction::new(NB);
    tx.select("Load_Balancer", vec![], Some(&["name"]));
    assert_eq!(f.transact(&tx).await.unwrap()[0].rows().len(), 1);
    assert_eq!(f.current_remote().unwrap(), cl.tcp(follower));
}

/// Kill the leader while transactions and ovn-nbctl writes are going on: the client follows
/// the new leader, the monitor resumes from its last txn id, and every committed row is in the
/// database exactly once and in the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_mid_run() {
    let cl = NbCluster::start();
    let old_leader = cl.wait_leader();
    let c = Client::connect(opts(&cl.tcp_remotes())).await.unwrap();
    let m = c
        .monitor(MonitorSpec::new().table("Load_Balancer"))
        .await
        .unwrap();
    assert!(
        m.cache().last_txn_id().is_some_and(|t| !t.is_nil()),
        "clustered servers give txn ids"
    );
    // The first monitor_cond_since (from no txn id) is a full initial load.
    let resyncs_before = c.stats().full_resyncs.load(Ordering::Relaxed);

    let nbctl_remotes = cl.unix_remotes();
    let nbctl = std::thread::spawn(move || {
        for i in 0..10 {
            let o = std::process::Command::new("ovn-nbctl")
                .args([
                    &format!("--db={nbctl_remotes}"),
                    "--timeout=30",
                    "lb-add",
                    &format!("ext{i}"),
                    &format!("10.9.0.{i}:80"),
                    "10.8.0.1:80",
                ])
                .output()
                .unwrap();
            // ovn-nbctl itself may give up during the election; it never duplicates either.
            let _ = o;
            std::thread::sleep(Duration::from_millis(100));
        }
    });

    // A transaction the server holds (a wait that cannot be satisfied yet) is in flight when
    // the leader dies: its outcome is unknown and it must be reported so.
    let mut blocked = Transaction::new(NB);
    blocked.wait(
        "Load_Balancer",
        vec![],
        &["name"],
        ovsdb::txn::WaitUntil::Equal,
        vec![row(&[("name", "never".into())])],
        None,
    );
    let blocked = tokio::spawn({
        let c = c.clone();
        async move { c.transact(&blocked).await }
    });

    // Four writers insert uniquely named rows; the leader is killed once 30 are in.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut writers = vec![];
    for w in 0..4 {
        let (c, done) = (c.clone(), done.clone());
        writers.push(tokio::spawn(async move {
            let (mut committed, mut unknown, mut retried) = (BTreeSet::new(), BTreeSet::new(), 0);
            for i in 0..20 {
                let name = format!("lb{w}-{i}");
                let mut tx = Transaction::new(NB);
                tx.insert(
                    "Load_Balancer",
                    row(&[
                        ("name", name.as_str().into()),
                        ("external_ids", Value::map([("seq", i.to_string())])),
                    ]),
                );
                // Retry only what certainly did not run.
                let mut attempts = 0;
                loop {
                    attempts += 1;
                    match c.transact(&tx).await {
                        Ok(_) => {
                            committed.insert(name.clone());
                            break;
                        }
                        Err(e) if e.outcome_unknown() => {
                            unknown.insert(name.clone());
                            break;
                        }
                        Err(e) if attempts < 50 => {
                            retried += 1;
                            eprintln!("retrying {name}: {e}");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        Err(e) => panic!("{name}: {e}"),
                    }
                }
                done.fetch_add(1, Ordering::SeqCst);
            }
            (committed, unknown, retried)
        }));
    }
    while done.load(Ordering::SeqCst) < 30 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    cl.kill(old_leader);
    let (mut committed, mut unknown, mut errors) = (BTreeSet::new(), BTreeSet::new(), 0);
    for w in writers {
        let (c2, u2, r2) = w.await.unwrap();
        committed.extend(c2);
        unknown.extend(u2);
        errors += r2;
    }
    match blocked.await.unwrap() {
        Err(Error::OutcomeUnknown { remote, .. }) => assert_eq!(remote, cl.tcp(old_leader)),
        other => panic!("blocked transaction: {other:?}"),
    }
    nbctl.join().unwrap();
    let new_leader = cl.wait_leader();
    assert_ne!(new_leader, old_leader);
    assert_eq!(c.current_remote().unwrap(), cl.tcp(new_leader));

    let live = cl.unix(new_leader);
    let want = dump_rows(&c.schema(), &live, "Load_Balancer");
    // Every name at most once; every committed one exactly once.
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for r in want.values() {
        *count
            .entry(r["name"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert!(count.values().all(|&n| n == 1), "duplicates: {count:?}");
    for name in &committed {
        assert_eq!(count.get(name), Some(&1), "{name} committed but missing");
    }
    let resolved = unknown.iter().filter(|n| count.contains_key(*n)).count();
    eprintln!(
        "committed {}, outcome unknown {} ({} found in the db), retried-not-sent/other {}, resumed {}, full resyncs {}",
        committed.len(),
        unknown.len(),
        resolved,
        errors,
        c.stats().resumed.load(Ordering::Relaxed),
        c.stats().full_resyncs.load(Ordering::Relaxed)
    );

    // The cache converges on the dump, with no full resync: resumed from the last txn id.
    let mut ok = false;
    for _ in 0..200 {
        if ovsdb::client::table_rows(&m, "Load_Balancer") == want {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        ok,
        "cache != dump: cache {} rows, dump {}",
        m.cache().table("Load_Balancer").unwrap().len(),
        want.len()
    );
    assert!(
        c.stats().resumed.load(Ordering::Relaxed) >= 1,
        "monitor was not resumed"
    );
    assert_eq!(
        c.stats().full_resyncs.load(Ordering::Relaxed),
        resyncs_before
    );

    // The killed member comes back and rejoins.
    cl.restart(old_leader);
    cl.wait_connected(old_leader);
}

/// Leadership moves without any socket closing (raft failure-test "transfer-leadership"): the
/// `_Server` monitor tells the client, which moves to the new leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_leadership_transfer() {
    let cl = NbCluster::start();
    let old = cl.wait_leader();
    let c = Client::connect(opts(&cl.tcp_remotes())).await.unwrap();
    assert_eq!(c.current_remote().unwrap(), cl.tcp(old));
    let ctl = cl.path().join(format!("s{old}.ctl"));
    let out = std::process::Command::new("ovs-appctl")
        .args([
            "-t",
            &ctl.to_string_lossy(),
            "cluster/failure-test",
            "transfer-leadership",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The transfer happens on the leader's next append; a write provokes it.
    let mut tx = Transaction::new(NB);
    tx.insert("Load_Balancer", row(&[("name", "t0".into())]));
    let _ = c.transact(&tx).await;
    let mut moved = false;
    for _ in 0..200 {
        if let (Some(l), Some(r)) = (cl.leader(), c.current_remote())
            && l != old
            && r == cl.tcp(l)
        {
            moved = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        moved,
        "client stayed on {:?}, leader {:?}",
        c.current_remote(),
        cl.leader()
    );
    let mut tx = Transaction::new(NB);
    tx.insert("Load_Balancer", row(&[("name", "t1".into())]));
    c.transact(&tx).await.unwrap();
    assert!(cl.pid(old).is_some(), "the old leader is still running");
}
