//! The bridge reconciler's pure core, in memory: an incremental change (delta, then commit)
//! leaves the same state, and the same switch, as a full sync; what the flow monitor reports
//! is put back slot by slot.

use super::*;
use crate::config::BridgeConfig;
use crate::plan::flows::{FlowKey, PlannedAction, PlannedFlow, PortRef};
use crate::plan::ports::OvsDb;
use openflow::monitor::{FlowEvent, FlowUpdate, MonitorEvent};
use openflow::oxm::OxmField;
use openflow::{FlowModCommand, Match, Message};
use proptest::prelude::*;
use std::collections::BTreeMap;

const BASE: u64 = 0x7f1f_0000_0000_0000;
const MASK: u64 = 0xffff_0000_0000_0000;

/// Roles with every port known: uplink 1, patch 2, a bridge MAC.
fn roles() -> Roles {
    let b = BridgeConfig {
        uplink: Some("eth0".into()),
        patch: Some("patch".into()),
        ..BridgeConfig::default()
    };
    let ports = Ports {
        desc: BTreeMap::from([(1, "eth0".into()), (2, "patch".into())]),
        local_mac: Some([2, 0, 0, 0, 0, 1]),
        db: OvsDb::NotUsed,
    };
    Roles::of(&b, &ports, None)
}

/// The key of planned flow number `k`.
fn key(k: u8) -> FlowKey {
    FlowKey::Arp(std::net::Ipv4Addr::new(198, 51, 100, k))
}

/// A planned flow for key `k` in one of a few shapes: the shape decides the match (so a key
/// can move to another (priority, match) slot) and the output (so its content can change).
fn flow(k: u8, shape: u8) -> PlannedFlow {
    PlannedFlow {
        key: key(k),
        cookie: BASE | u64::from(k) << 8 | u64::from(shape),
        table: 0,
        priority: 500 + u16::from(shape % 2),
        in_port: if shape < 2 {
            PortRef::Uplink
        } else {
            PortRef::Patch
        },
        dl_src_bridge: shape == 3,
        match_: Match::new()
            .with(OxmField::eth_type(0x0800))
            .with(OxmField::ipv4_dst([192, 0, 2, k].into())),
        actions: vec![PlannedAction::Output(if shape.is_multiple_of(2) {
            PortRef::Patch
        } else {
            PortRef::Local
        })],
    }
}

/// A plan: key -> shape, for keys 0..16.
fn arb_plan() -> impl Strategy<Value = BTreeMap<u8, u8>> {
    prop::collection::btree_map(0u8..16, 0u8..4, 0..12)
}

fn index(plan: &BTreeMap<u8, u8>) -> FlowIndex {
    plan.iter()
        .map(|(&k, &shape)| (key(k), flow(k, shape)))
        .collect()
}

/// The switch as a flow table: what OpenFlow does with ADDs and strict DELETEs.
fn apply(switch: &mut FlowSet, msgs: &[Message]) {
    for m in msgs {
        let Message::FlowMod(fm) = m else {
            panic!("not a flow mod: {m:?}")
        };
        let id = (fm.table_id, fm.priority, fm.match_.normalized());
        match fm.command {
            FlowModCommand::Add => {
                switch.insert(
                    id,
                    FlowBody {
                        cookie: fm.cookie,
                        instructions: fm.instructions.clone(),
                    },
                );
            }
            FlowModCommand::DeleteStrict => {
                if switch
                    .get(&id)
                    .is_some_and(|b| b.cookie & fm.cookie_mask == fm.cookie & fm.cookie_mask)
                {
                    switch.remove(&id);
                }
            }
            other => panic!("unexpected command {other:?}"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// After any sequence of plans, writing only the touched keys (delta, then commit) leaves
    /// the reconciler's state and the switch exactly as a full sync to the last plan would.
    #[test]
    fn delta_then_commit_equals_a_full_sync(plans in prop::collection::vec(arb_plan(), 1..8)) {
        let r = roles();
        let mut applied = Applied::from_plan(&FlowIndex::default(), &r, 0);
        let mut switch = FlowSet::new();
        let mut prev: BTreeMap<u8, u8> = BTreeMap::new();
        for (g, plan) in plans.iter().enumerate() {
            let next = index(plan);
            // What the planner reports as touched: keys added, removed or changed.
            let touched: Vec<FlowKey> = (0u8..16)
                .filter(|k| prev.get(k) != plan.get(k))
                .map(key)
                .collect();
            let d = applied.delta(&next, &touched, &r);
            apply(&mut switch, &d.msgs);
            applied.commit(d, g as u64 + 1);
            let full = Applied::from_plan(&next, &r, g as u64 + 1);
            prop_assert_eq!(&applied.set, &full.set);
            prop_assert_eq!(&switch, &full.set);
            prop_assert_eq!(applied.skipped_list(), full.skipped_list());
            // And the full diff from the previous state gives the same switch.
            let mut again = FlowSet::new();
            let before = Applied::from_plan(&index(&prev), &r, 0);
            apply(&mut again, &diff(&FlowSet::new(), &before.set));
            apply(&mut again, &diff(&before.set, &full.set));
            prop_assert_eq!(&again, &full.set);
            prev = plan.clone();
        }
    }
}

fn update(event: FlowEvent, cookie: u64, id: &FlowId) -> FlowUpdate {
    FlowUpdate::Full {
        event,
        reason: 0,
        priority: id.1,
        idle_timeout: 0,
        hard_timeout: 0,
        table_id: id.0,
        cookie,
        match_: id.2.clone(),
        instructions: vec![],
    }
}

#[test]
fn what_the_monitor_reports_is_put_back_slot_by_slot() {
    let r = roles();
    let applied = Applied::from_plan(&index(&BTreeMap::from([(1, 0), (2, 1)])), &r, 1);
    let ids: Vec<FlowId> = applied.set.keys().cloned().collect();
    let mut heard = Heard::default();
    let foreign_id = (0, 7, Match::new().with(OxmField::eth_type(0x0806)));
    let stray_id = (0, 9, Match::new().with(OxmField::eth_type(0x86dd)));
    let noted = heard.note(
        Ok(MonitorEvent::Updates(vec![
            // Ours deleted, ours taken over by someone else's flow.
            update(FlowEvent::Deleted, applied.set[&ids[0]].cookie, &ids[0]),
            update(FlowEvent::Added, 0x1234, &ids[1]),
            // Someone else's flow elsewhere: none of our business.
            update(FlowEvent::Added, 0x1234, &foreign_id),
            // A flow with our cookie we never wrote.
            update(FlowEvent::Added, BASE | 0xdead, &stray_id),
            // Our own write, abbreviated.
            FlowUpdate::Abbrev { xid: 7 },
        ])),
        &applied.set,
        BASE,
        MASK,
    );
    assert!(noted);
    assert!(!heard.lost);
    let msgs = heard.repair(&applied.set);
    let mut switch: FlowSet = FlowSet::from([
        (
            ids[1].clone(),
            FlowBody {
                cookie: 0x1234,
                instructions: vec![],
            },
        ),
        (
            stray_id.clone(),
            FlowBody {
                cookie: BASE | 0xdead,
                instructions: vec![],
            },
        ),
        (
            foreign_id.clone(),
            FlowBody {
                cookie: 0x1234,
                instructions: vec![],
            },
        ),
    ]);
    apply(&mut switch, &msgs);
    assert_eq!(
        switch.get(&ids[0]),
        applied.set.get(&ids[0]),
        "deleted one back"
    );
    assert_eq!(
        switch.get(&ids[1]),
        applied.set.get(&ids[1]),
        "taken slot back"
    );
    assert!(
        !switch.contains_key(&stray_id),
        "stray flow with our cookie gone"
    );
    assert!(switch.contains_key(&foreign_id), "foreign flow untouched");
    assert_eq!(msgs.len(), 3);
}

#[test]
fn only_changes_to_our_slots_or_cookie_count_and_lost_updates_ask_for_a_read_back() {
    let r = roles();
    let applied = Applied::from_plan(&index(&BTreeMap::from([(1, 0)])), &r, 1);
    let mut heard = Heard::default();
    let foreign = (0, 7, Match::new().with(OxmField::eth_type(0x0806)));
    assert!(!heard.note(
        Ok(MonitorEvent::Updates(vec![
            update(FlowEvent::Added, 0x1234, &foreign),
            FlowUpdate::Abbrev { xid: 1 },
        ])),
        &applied.set,
        BASE,
        MASK,
    ));
    assert!(heard.repair(&applied.set).is_empty());
    let mut heard = Heard::default();
    assert!(!heard.note(Ok(MonitorEvent::Paused), &applied.set, BASE, MASK));
    assert!(heard.note(Ok(MonitorEvent::Resumed), &applied.set, BASE, MASK));
    assert!(heard.lost, "updates missed while paused: read back");
    let mut heard = Heard::default();
    let bad = openflow::DecodeError::BadLength {
        what: "flow update",
        len: 2,
    };
    assert!(heard.note(Err(bad), &applied.set, BASE, MASK));
    assert!(heard.lost);
}
