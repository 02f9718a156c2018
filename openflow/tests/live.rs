//! The connection against a real ovs-vswitchd (dummy datapath) in a private sandbox.

mod common;

use common::*;
use openflow::action::port;
use openflow::instruction::Instruction;
use openflow::multipart::FlowStatsRequest;
use openflow::{Action, Config, ConnError, Connection, FlowMod, Match, Message, OxmField};
use std::collections::BTreeSet;
use std::time::Duration;
use testkit::Sandbox;

async fn connect(sb: &Sandbox) -> Connection {
    let target = format!("unix:{}", sb.mgmt_sock("br-ex").display());
    let (conn, _events) = Connection::connect(&target, Config::default())
        .await
        .expect("connect");
    conn
}

/// (cookie, priority) of every flow `ovs-ofctl dump-flows` shows, parsed from its text.
fn ofctl_flows(sb: &Sandbox) -> BTreeSet<(u64, u16)> {
    sb.ofctl(&["--no-stats", "dump-flows", "br-ex"])
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            // --no-stats leaves out a zero cookie.
            let cookie = match l.strip_prefix("cookie=0x") {
                Some(rest) => u64::from_str_radix(rest.split(',').next()?, 16).ok()?,
                None => 0,
            };
            let prio = l.split("priority=").nth(1)?.split([',', ' ']).next()?;
            Some((cookie, prio.parse().ok()?))
        })
        .collect()
}

#[tokio::test]
async fn bundle_of_20000_flows_reads_back_like_ovs_ofctl() {
    let sb = Sandbox::openflow_only();
    let conn = connect(&sb).await;
    let n = 20_000;
    conn.bundle(&arp_bypass_msgs(n)).await.expect("bundle");

    let ours = conn
        .flow_stats(FlowStatsRequest::by_cookie(COOKIE_PREFIX, COOKIE_MASK))
        .await
        .unwrap();
    assert_eq!(
        ours.len(),
        n as usize,
        "flow stats by cookie returns exactly our flows"
    );
    // Every flow came back with the match and actions we sent.
    let mut seen = BTreeSet::new();
    for f in &ours {
        let i = (f.cookie & !COOKIE_MASK) as u32;
        let want = arp_bypass(i);
        assert_eq!(f.priority, want.priority);
        assert_eq!(
            f.match_.normalized(),
            want.match_.normalized(),
            "match of flow {i}"
        );
        assert_eq!(
            f.instructions, want.instructions,
            "instructions of flow {i}"
        );
        seen.insert(i);
    }
    assert_eq!(seen.len(), n as usize);

    // ovs-ofctl sees the same flows, line for line, plus the bridge's default NORMAL flow.
    let ofctl: BTreeSet<String> = sb
        .ofctl(&["--no-stats", "--no-names", "dump-flows", "br-ex"])
        .lines()
        .map(|l| l.trim().to_string())
        .collect();
    let mine: BTreeSet<String> = ours
        .iter()
        .map(|f| f.dump_line(false).to_string().trim().to_string())
        .collect();
    assert_eq!(mine.len(), n as usize);
    let only_ofctl: Vec<&String> = ofctl.difference(&mine).collect();
    assert_eq!(
        only_ofctl,
        vec!["priority=0 actions=NORMAL"],
        "only the default flow is not ours"
    );
    let only_ours: Vec<&String> = mine.difference(&ofctl).take(3).collect();
    assert!(
        only_ours.is_empty(),
        "our decoding differs from ovs-ofctl: {only_ours:?}"
    );
}

#[tokio::test]
async fn flows_made_one_at_a_time_land_and_stream_back_part_by_part() {
    let sb = Sandbox::openflow_only();
    let conn = connect(&sb).await;
    let n = 20_000;
    conn.bundle_each(n as usize, |i| Some(Message::FlowMod(arp_bypass(i as u32))))
        .await
        .expect("bundle_each");
    let req = || FlowStatsRequest::by_cookie(COOKIE_PREFIX, COOKIE_MASK);
    let whole = conn.flow_stats(req()).await.unwrap();
    let mut streamed = Vec::new();
    conn.flow_stats_each(req(), |f| streamed.push(f))
        .await
        .unwrap();
    assert_eq!(whole.len(), n as usize);
    // Durations move between two reads; everything else is the same.
    let shape = |v: &[openflow::multipart::FlowStats]| -> Vec<_> {
        v.iter()
            .map(|f| {
                (
                    f.cookie,
                    f.priority,
                    f.match_.clone(),
                    f.instructions.clone(),
                )
            })
            .collect()
    };
    assert_eq!(
        shape(&streamed),
        shape(&whole),
        "the same flows, in the same order"
    );
    // And the batch form made one at a time: the same flows again, deleted and re-added.
    conn.apply_each(1, |_| {
        Some(Message::FlowMod(FlowMod::delete_by_cookie(
            COOKIE_PREFIX,
            COOKIE_MASK,
        )))
    })
    .await
    .unwrap();
    conn.apply_each(n as usize, |i| Some(Message::FlowMod(arp_bypass(i as u32))))
        .await
        .unwrap();
    assert_eq!(shape(&conn.flow_stats(req()).await.unwrap()), shape(&whole));
}

#[tokio::test]
async fn delete_by_cookie_mask_leaves_foreign_flows_alone() {
    let sb = Sandbox::openflow_only();
    let conn = connect(&sb).await;
    // A foreign flow with the same match as one of ours at another priority (an identical
    // (priority, match) cannot coexist: an ADD replaces it), and one of a neighbouring owner.
    sb.ofctl(&[
        "add-flow",
        "br-ex",
        "cookie=0x1234,priority=99,in_port=1,arp,arp_op=1,arp_tpa=10.0.0.3 actions=drop",
    ]);
    sb.ofctl(&[
        "add-flow",
        "br-ex",
        "cookie=0x7f1e000000000001,priority=50,ip actions=NORMAL",
    ]);
    conn.bundle(&arp_bypass_msgs(10)).await.unwrap();
    assert_eq!(ofctl_flows(&sb).len(), 10 + 3);

    conn.apply(&[Message::FlowMod(FlowMod::delete_by_cookie(
        COOKIE_PREFIX,
        COOKIE_MASK,
    ))])
    .await
    .unwrap();
    let left = ofctl_flows(&sb);
    assert_eq!(
        left,
        BTreeSet::from([(0, 0), (0x1234, 99), (0x7f1e_0000_0000_0001, 50)])
    );

    // delete_strict of one (table, priority, match) restricted to our cookie spares the
    // foreign flow with the identical match.
    conn.bundle(&arp_bypass_msgs(10)).await.unwrap();
    let del = FlowMod::delete_strict(0, 100, arp_bypass(3).match_, COOKIE_PREFIX, COOKIE_MASK);
    conn.apply(&[Message::FlowMod(del)]).await.unwrap();
    let left = ofctl_flows(&sb);
    assert!(
        left.contains(&(0x1234, 99)),
        "foreign flow with the same match survives"
    );
    assert!(!left.contains(&(COOKIE_PREFIX | 3, 100)));
    assert_eq!(left.len(), 3 + 9);
}

#[tokio::test]
async fn port_desc_finds_uplink_patch_and_local() {
    let sb = Sandbox::openflow_only();
    let conn = connect(&sb).await;
    let ports = conn.port_desc().await.unwrap();
    let find = |name: &str| ports.iter().find(|p| p.name == name).map(|p| p.port_no);
    assert_eq!(find("eth0"), Some(1));
    assert_eq!(find("patch-ex-to-int"), Some(2));
    assert_eq!(find("br-ex"), Some(port::LOCAL));
    assert_eq!(ports.len(), 3);
    assert!(conn.features().n_tables > 0);
    let desc = conn.desc().await.unwrap();
    assert!(desc.mfr_desc.contains("Nicira"), "{desc:?}");
}

/// arp_op without its prerequisite eth_type=arp: OFPBMC_BAD_PREREQ.
fn invalid_flow() -> FlowMod {
    FlowMod::add(
        0,
        10,
        COOKIE_PREFIX | 0xbad,
        Match::new()
            .with(OxmField::in_port(1))
            .with(OxmField::arp_op(1)),
        vec![Instruction::ApplyActions(vec![Action::output(port::LOCAL)])],
    )
}

#[tokio::test]
async fn invalid_flow_mod_returns_the_switch_error_to_its_caller() {
    let sb = Sandbox::openflow_only();
    let conn = connect(&sb).await;

    // A non-atomic batch: the bad message is named by index, the good ones applied.
    let batch = vec![
        Message::FlowMod(arp_bypass(1)),
        Message::FlowMod(invalid_flow()),
        Message::FlowMod(arp_bypass(2)),
    ];
    match conn.apply(&batch).await {
        Err(ConnError::Batch(errs)) => {
            assert_eq!(errs.len(), 1);
            assert_eq!(errs[0].0, 1, "the second message failed");
            assert_eq!(errs[0].1.err_type, 4, "OFPET_BAD_MATCH: {}", errs[0].1);
        }
        other => panic!("expected a batch error, got {other:?}"),
    }
    assert_eq!(ofctl_flows(&sb).len(), 1 + 2);

    // An atomic bundle: nothing is applied and the culprit is named.
    let mut msgs = arp_bypass_msgs(100);
    msgs.insert(57, Message::FlowMod(invalid_flow()));
    match conn.bundle(&msgs).await {
        Err(ConnError::Bundle { messages, .. }) => {
            assert_eq!(messages.first().map(|m| m.0), Some(57), "{messages:?}");
        }
        other => panic!("expected a bundle error, got {other:?}"),
    }
    assert_eq!(
        ofctl_flows(&sb).len(),
        1 + 2,
        "a failed bundle applies nothing"
    );

    // A request that the switch answers with an error gets that error.
    let bad_mp = openflow::MultipartRequestBody::Other {
        mp_type: 0x7777,
        body: vec![],
    };
    match conn.multipart(bad_mp).await {
        Err(ConnError::Switch(e)) => assert_eq!(e.err_type, 1, "OFPET_BAD_REQUEST: {e}"),
        other => panic!("expected the switch's error, got {other:?}"),
    }
    // The connection is still usable afterwards.
    conn.barrier().await.unwrap();
}

#[tokio::test]
async fn concurrent_requests_each_get_their_own_reply() {
    let sb = Sandbox::openflow_only();
    let conn = connect(&sb).await;
    conn.bundle(&arp_bypass_msgs(300)).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..60u32 {
        let c = conn.clone();
        tasks.push(tokio::spawn(async move {
            match i % 3 {
                0 => {
                    let d = i.to_be_bytes().to_vec();
                    assert_eq!(c.echo(d.clone()).await.unwrap(), d);
                }
                1 => {
                    let f = c
                        .flow_stats(FlowStatsRequest::by_cookie(
                            COOKIE_PREFIX | u64::from(i),
                            u64::MAX,
                        ))
                        .await
                        .unwrap();
                    assert_eq!(f.len(), 1);
                    assert_eq!(f[0].cookie, COOKIE_PREFIX | u64::from(i));
                }
                _ => {
                    let all = c
                        .flow_stats(FlowStatsRequest::by_cookie(COOKIE_PREFIX, COOKIE_MASK))
                        .await
                        .unwrap();
                    assert_eq!(all.len(), 300);
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test]
async fn killed_switch_fails_every_pending_request_promptly() {
    let sb = Sandbox::openflow_only();
    let conn = connect(&sb).await;
    // Keep the switch busy so requests are in flight when it dies.
    let mut pending = Vec::new();
    for _ in 0..20 {
        let c = conn.clone();
        pending.push(tokio::spawn(async move {
            c.bundle(&arp_bypass_msgs(2_000)).await
        }));
    }
    for _ in 0..20 {
        let c = conn.clone();
        pending.push(tokio::spawn(async move {
            c.flow_stats(FlowStatsRequest::default()).await.map(|_| ())
        }));
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    sb.kill("ovs-vswitchd");

    // Generous bound: "promptly" means on the socket's EOF, not after a keepalive timeout.
    let outcome = tokio::time::timeout(Duration::from_secs(5), async {
        let mut failed = 0;
        for t in pending {
            if let Err(e) = t.await.unwrap() {
                assert!(matches!(e, ConnError::Closed(_)), "{e}");
                failed += 1;
            }
        }
        failed
    })
    .await
    .expect("every pending request finished after the switch died");
    assert!(
        outcome > 0,
        "some requests were still pending when the switch was killed"
    );
    assert!(matches!(conn.closed(), Some(ConnError::Closed(_))));
    // New requests fail at once.
    assert!(matches!(conn.barrier().await, Err(ConnError::Closed(_))));
}

#[tokio::test]
async fn version_negotiation_fails_clearly_when_13_is_not_shared() {
    let sb = Sandbox::openflow_only();
    sb.vsctl(&["set", "bridge", "br-ex", "protocols=OpenFlow10"]);
    let target = format!("unix:{}", sb.mgmt_sock("br-ex").display());
    match Connection::connect(&target, Config::default()).await {
        Err(ConnError::Version { detail, .. }) => {
            assert!(
                detail.contains("1.3") || detail.contains("error"),
                "{detail}"
            );
        }
        Err(e) => panic!("expected a version error, got {e}"),
        Ok(_) => panic!("negotiated 1.3 with a switch limited to 1.0"),
    }
}

#[tokio::test]
async fn bad_targets_are_rejected_with_a_clear_error() {
    assert!(matches!(
        Connection::connect("br-ex", Config::default()).await,
        Err(ConnError::Target(_))
    ));
    match Connection::connect("unix:/nonexistent/br-ex.mgmt", Config::default()).await {
        Err(ConnError::Connect { target, .. }) => {
            assert_eq!(target, "unix:/nonexistent/br-ex.mgmt")
        }
        other => panic!("{:?}", other.err()),
    }
}

#[tokio::test]
async fn port_status_arrives_after_subscribing() {
    let sb = Sandbox::openflow_only();
    let target = format!("unix:{}", sb.mgmt_sock("br-ex").display());
    let (conn, mut events) = Connection::connect(&target, Config::default())
        .await
        .unwrap();
    conn.subscribe_port_status().await.unwrap();
    sb.vsctl(&[
        "add-port",
        "br-ex",
        "eth9",
        "--",
        "set",
        "interface",
        "eth9",
        "type=dummy",
        "ofport_request=9",
    ]);
    sb.vsctl(&["del-port", "br-ex", "eth9"]);
    // OVS reports the new port (Add), its link coming up (Modify), then its removal (Delete).
    let mut seen = Vec::new();
    while !seen.contains(&openflow::port::PortReason::Delete) {
        let ev = tokio::time::timeout(Duration::from_secs(5), events.recv())
            .await
            .expect("a PORT_STATUS");
        if let Some(openflow::Event::Message(_, Message::PortStatus(ps))) = ev
            && ps.port.name == "eth9"
        {
            assert_eq!(ps.port.port_no, 9);
            seen.push(ps.reason);
        }
    }
    assert_eq!(
        seen.first(),
        Some(&openflow::port::PortReason::Add),
        "{seen:?}"
    );
}

#[tokio::test]
async fn a_flow_monitor_hears_other_connections_changes_and_abbreviates_its_own() {
    use openflow::Event;
    use openflow::monitor::{FlowEvent, FlowMonitorRequest, FlowUpdate, MonitorEvent, flags};
    let sb = Sandbox::openflow_only();
    let target = format!("unix:{}", sb.mgmt_sock("br-ex").display());
    let (conn, mut events) = Connection::connect(&target, Config::default())
        .await
        .expect("connect");
    let req = FlowMonitorRequest {
        id: 1,
        flags: flags::ADD | flags::DELETE | flags::MODIFY,
        out_port: openflow::monitor::PORT_ANY,
        table_id: 0,
        match_: Match::new(),
    };
    conn.multipart(req.to_multipart())
        .await
        .expect("Open vSwitch takes the monitor");
    let mut next = async || loop {
        let ev = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("an update within 10 s")
            .expect("events open");
        if let Event::Message(_, m) = ev
            && let Some(r) = openflow::monitor::monitor_event(&m)
        {
            return r.expect("parses");
        }
    };
    // Another connection's add, modify and delete, each with its cookie.
    sb.ofctl(&[
        "add-flow",
        "br-ex",
        "cookie=0x42,priority=77,in_port=1,actions=drop",
    ]);
    sb.ofctl(&[
        "mod-flows",
        "br-ex",
        "priority=77,in_port=1,actions=output:2",
    ]);
    sb.ofctl(&["--strict", "del-flows", "br-ex", "priority=77,in_port=1"]);
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let MonitorEvent::Updates(u) = next().await else {
            continue;
        };
        for x in u {
            if let FlowUpdate::Full {
                event,
                cookie,
                priority,
                match_,
                ..
            } = x
            {
                assert_eq!((cookie, priority), (0x42, 77));
                assert_eq!(match_, Match::new().with(OxmField::in_port(1)));
                seen.push(event);
            }
        }
    }
    assert_eq!(
        seen,
        [FlowEvent::Added, FlowEvent::Modified, FlowEvent::Deleted]
    );
    // This connection's own change comes back abbreviated, by the xid that made it.
    conn.bundle(&arp_bypass_msgs(1)).await.unwrap();
    loop {
        let MonitorEvent::Updates(u) = next().await else {
            continue;
        };
        assert!(
            u.iter().all(|x| matches!(x, FlowUpdate::Abbrev { .. })),
            "{u:?}"
        );
        if !u.is_empty() {
            break;
        }
    }
}

#[tokio::test]
async fn an_open_bundle_takes_adds_over_several_writes_and_applies_them_only_at_the_commit() {
    let sb = Sandbox::openflow_only();
    let conn = connect(&sb).await;
    // The switch's own flow (priority 0, NORMAL) is there throughout.
    let before = ofctl_flows(&sb);
    let strict = |i: u32| {
        let f = arp_bypass(i);
        Message::FlowMod(FlowMod::delete_strict(
            f.table_id,
            f.priority,
            f.match_,
            f.cookie,
            u64::MAX,
        ))
    };

    // Three writes: 0..100, then 100..150 with 0..10 taken back, then 150..160.
    let mut b = conn.open_bundle().await.expect("open");
    b.add_each(100, |i| Some(Message::FlowMod(arp_bypass(i as u32))))
        .await
        .expect("add");
    b.add_each(60, |i| {
        Some(if i < 50 {
            Message::FlowMod(arp_bypass(100 + i as u32))
        } else {
            strict(i as u32 - 50)
        })
    })
    .await
    .expect("add");
    conn.barrier().await.expect("barrier");
    assert_eq!(
        ofctl_flows(&sb),
        before,
        "nothing of an open bundle is applied"
    );
    b.add_each(10, |i| Some(Message::FlowMod(arp_bypass(150 + i as u32))))
        .await
        .expect("add");
    assert_eq!(b.len(), 170);
    b.commit().await.expect("commit");
    let mut want: BTreeSet<(u64, u16)> = (10..160u32)
        .map(|i| (COOKIE_PREFIX | u64::from(i), 100))
        .collect();
    want.extend(before);
    assert_eq!(ofctl_flows(&sb), want, "the adds, less those taken back");

    // A refused message anywhere: nothing applied, named by its index in the whole bundle.
    let mut b = conn.open_bundle().await.expect("open");
    b.add_each(5, |i| Some(Message::FlowMod(arp_bypass(1000 + i as u32))))
        .await
        .expect("add");
    b.add_each(5, |i| {
        Some(Message::FlowMod(if i == 3 {
            invalid_flow()
        } else {
            arp_bypass(2000 + i as u32)
        }))
    })
    .await
    .expect("add");
    match b.commit().await {
        Err(ConnError::Bundle { messages, .. }) => {
            assert_eq!(messages.first().map(|m| m.0), Some(8), "{messages:?}");
        }
        other => panic!("expected a bundle error, got {other:?}"),
    }
    assert_eq!(ofctl_flows(&sb), want, "a refused bundle applies nothing");

    // Discarded: nothing applied, and the connection goes on.
    let mut b = conn.open_bundle().await.expect("open");
    b.add_each(5, |i| Some(Message::FlowMod(arp_bypass(3000 + i as u32))))
        .await
        .expect("add");
    b.discard().await.expect("discard");
    assert_eq!(ofctl_flows(&sb), want, "a discarded bundle applies nothing");
    conn.barrier().await.expect("still usable");
}
