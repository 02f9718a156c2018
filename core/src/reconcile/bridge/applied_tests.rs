//! The bridge reconciler's pure core, in memory: an incremental change (delta, then commit)
//! leaves the same state, and the same switch, as a full sync; a full sync from whatever the
//! switch holds leaves exactly the plan; what the flow monitor reports is put back slot by
//! slot.

use super::*;
use crate::config::BridgeConfig;
use crate::plan::flows::FlowMaker;
use crate::plan::flows::{FlowKey, PlannedAction, PlannedFlow, PortRef};
use crate::plan::service_index::FlowIndex;
use crate::reconcile::bridge::ports::OvsDb;
use crate::reconcile::bridge::{FlowBody, FlowId, FlowSet, Heard, Ports, Roles, diff};
use openflow::monitor::{FlowEvent, FlowUpdate, MonitorEvent};
use openflow::oxm::OxmField;
use openflow::{FlowModCommand, Match, Message};
use proptest::prelude::*;
use std::collections::BTreeMap;

const BASE: u64 = 0x7f1f_0000_0000_0000;
const MASK: u64 = 0xffff_0000_0000_0000;

/// Roles with every port known: uplink 1, patch 2, a bridge MAC.
fn roles() -> Roles {
    roles_with(2)
}

/// The same with the patch port at `patch`.
fn roles_with(patch: u32) -> Roles {
    let b = BridgeConfig {
        uplink: Some("eth0".into()),
        patch: Some("patch".into()),
        ..BridgeConfig::default()
    };
    let ports = Ports {
        desc: BTreeMap::from([(1, "eth0".into()), (patch, "patch".into())]),
        local_mac: Some([2, 0, 0, 0, 0, 1]),
        db: OvsDb::NotUsed,
    };
    Roles::of(&b, &ports, None)
}

/// The key of planned flow number `k`.
fn key(k: u8) -> FlowKey {
    FlowKey::Arp(std::net::Ipv4Addr::new(198, 51, 100, k))
}

/// A planned flow for key `k` in one of a few shapes: the shape decides the slot (priority and
/// input port: a key can move to another slot) and the output (so its content can change).
/// Its match names the key's address, as every flow a [`FlowMaker`] makes does: that is how a
/// flow read from the switch is traced back to its key ([`FlowKey::candidates`]).
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
            .with(OxmField::eth_type(0x0806))
            .with(OxmField::arp_tpa([198, 51, 100, k].into())),
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
    plan.keys().map(|&k| key(k)).collect()
}

/// Makes each key of `plan` into its shape (keys outside the plan: shape 0).
fn maker(plan: &BTreeMap<u8, u8>) -> FlowMaker {
    let shapes = plan.clone();
    FlowMaker::from_fn(move |k| {
        let FlowKey::Arp(ip) = k else {
            panic!("not a test key: {k}")
        };
        let n = ip.octets()[3];
        flow(n, shapes.get(&n).copied().unwrap_or(0))
    })
}

fn making(plan: &BTreeMap<u8, u8>, roles: &Roles) -> Making {
    Making {
        maker: maker(plan),
        roles: roles.clone(),
    }
}

fn applied(plan: &BTreeMap<u8, u8>, roles: &Roles, generation: u64) -> Applied {
    Applied::from_plan(&index(plan), making(plan, roles), generation)
}

/// The messages of a delta, as the task renders them before committing it.
fn messages(d: &DeltaPlan, before: &Applied) -> Vec<Message> {
    (0..d.ops.len())
        .filter_map(|i| d.message(i, before))
        .collect()
}

/// Some flows of ours a switch may hold: shapes of any plan, and strays.
fn arb_switch() -> impl Strategy<Value = (BTreeMap<u8, u8>, Vec<u8>)> {
    (arb_plan(), prop::collection::vec(0u8..8, 0..4))
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
        let mut state = Applied::from_plan(&FlowIndex::default(), making(&BTreeMap::new(), &r), 0);
        let mut switch = FlowSet::new();
        let mut prev: BTreeMap<u8, u8> = BTreeMap::new();
        for (g, plan) in plans.iter().enumerate() {
            let next = index(plan);
            // What the planner reports as touched: keys added, removed or changed.
            let touched: Vec<FlowKey> = (0u8..16)
                .filter(|k| prev.get(k) != plan.get(k))
                .map(key)
                .collect();
            let d = state.delta(&next, making(plan, &r), touched);
            apply(&mut switch, &messages(&d, &state));
            state.commit(d, &[], g as u64 + 1);
            let full = applied(plan, &r, g as u64 + 1);
            prop_assert_eq!(&state.to_flow_set(), &full.to_flow_set());
            prop_assert_eq!(&switch, &full.to_flow_set());
            prop_assert_eq!(state.len(), full.len());
            prop_assert_eq!(state.skipped_list(), full.skipped_list());
            // And the full diff from the previous state gives the same switch.
            let mut again = FlowSet::new();
            let before = applied(&prev, &r, 0);
            apply(&mut again, &diff(&FlowSet::new(), &before.to_flow_set()));
            apply(&mut again, &diff(&before.to_flow_set(), &full.to_flow_set()));
            prop_assert_eq!(&again, &full.to_flow_set());
            prev = plan.clone();
        }
    }

    /// A full sync from whatever the switch holds (an older plan's flows, flows with our
    /// cookie nobody planned) writes exactly what makes it equal to the plan, and reading
    /// the result back finds nothing more to do.
    #[test]
    fn a_full_sync_from_any_switch_leaves_exactly_the_plan(
        (old, strays) in arb_switch(),
        plan in arb_plan(),
    ) {
        let r = roles();
        let mut switch = applied(&old, &r, 0).to_flow_set();
        for s in &strays {
            let id = (0, 900 + u16::from(*s), Match::new().with(OxmField::eth_type(0x0800)));
            switch.insert(id, FlowBody { cookie: BASE | 0xdead, instructions: vec![] });
        }
        let target = applied(&plan, &r, 1);
        let stats = |set: &FlowSet| -> Vec<openflow::multipart::FlowStats> {
            set.iter()
                .map(|((t, p, m), b)| openflow::multipart::FlowStats {
                    table_id: *t,
                    priority: *p,
                    cookie: b.cookie,
                    match_: m.clone(),
                    instructions: b.instructions.clone(),
                    ..Default::default()
                })
                .collect()
        };
        let mut sync = FullSync::new(&target);
        stats(&switch).into_iter().for_each(|f| sync.observe(f));
        let ops = sync.finish();
        let msgs: Vec<Message> = ops.iter().filter_map(|op| target.message(op)).collect();
        prop_assert_eq!(msgs.len(), ops.len());
        apply(&mut switch, &msgs);
        prop_assert_eq!(&switch, &target.to_flow_set());
        let mut again = FullSync::new(&target);
        stats(&switch).into_iter().for_each(|f| again.observe(f));
        prop_assert!(again.finish().is_empty());
    }

    /// A port renumbered (other roles): a delta over every key of both plans moves every
    /// flow that names the port, as a full sync would.
    #[test]
    fn new_roles_rewrite_every_flow_that_names_them(old in arb_plan(), plan in arb_plan()) {
        let (r1, r2) = (roles(), roles_with(5));
        let state = applied(&old, &r1, 1);
        let mut switch = state.to_flow_set();
        let m = making(&plan, &r2);
        prop_assert!(!state.made_as(&m));
        let all: Vec<FlowKey> = state.planned().iter().chain(index(&plan).iter()).copied()
            .collect::<std::collections::BTreeSet<_>>().into_iter().collect();
        let d = state.delta(&index(&plan), m, all);
        apply(&mut switch, &messages(&d, &state));
        let mut state = state;
        state.commit(d, &[], 2);
        prop_assert_eq!(&switch, &applied(&plan, &r2, 2).to_flow_set());
        prop_assert_eq!(&state.to_flow_set(), &switch);
    }
}

/// A flow the switch refuses is left out of the state and named; the rest is applied.
#[test]
fn a_refused_flow_is_named_and_left_out() {
    let r = roles();
    let state = Applied::from_plan(&FlowIndex::default(), making(&BTreeMap::new(), &r), 0);
    let plan = BTreeMap::from([(1, 0), (2, 0)]);
    let d = state.delta(&index(&plan), making(&plan, &r), [key(1), key(2)]);
    let refused = d
        .ops
        .iter()
        .position(|op| *op == FlowOp::Add(key(2)))
        .unwrap();
    let mut state = state;
    state.commit(d, &[(refused, "bad flow".into())], 1);
    assert_eq!(state.len(), 1);
    assert_eq!(state.skipped_list(), ["arp 198.51.100.2: bad flow"]);
    // The next plan that touches it tries again.
    let d = state.delta(&index(&plan), making(&plan, &r), [key(2)]);
    assert_eq!(d.ops, [FlowOp::Add(key(2))]);
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
    let applied = applied(&BTreeMap::from([(1, 0), (2, 1)]), &r, 1);
    let set = applied.to_flow_set();
    let ids: Vec<FlowId> = set.keys().cloned().collect();
    let mut heard = Heard::default();
    let foreign_id = (0, 7, Match::new().with(OxmField::eth_type(0x0806)));
    let stray_id = (0, 9, Match::new().with(OxmField::eth_type(0x86dd)));
    let noted = heard.note(
        Ok(MonitorEvent::Updates(vec![
            // Ours deleted, ours taken over by someone else's flow.
            update(FlowEvent::Deleted, set[&ids[0]].cookie, &ids[0]),
            update(FlowEvent::Added, 0x1234, &ids[1]),
            // Someone else's flow elsewhere: none of our business.
            update(FlowEvent::Added, 0x1234, &foreign_id),
            // A flow with our cookie we never wrote.
            update(FlowEvent::Added, BASE | 0xdead, &stray_id),
            // Our own write, abbreviated.
            FlowUpdate::Abbrev { xid: 7 },
        ])),
        &applied,
        BASE,
        MASK,
    );
    assert!(noted);
    assert!(!heard.lost);
    let msgs = heard.repair(&applied);
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
    assert_eq!(switch.get(&ids[0]), set.get(&ids[0]), "deleted one back");
    assert_eq!(switch.get(&ids[1]), set.get(&ids[1]), "taken slot back");
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
    let applied = applied(&BTreeMap::from([(1, 0)]), &r, 1);
    let mut heard = Heard::default();
    let foreign = (0, 7, Match::new().with(OxmField::eth_type(0x0806)));
    assert!(!heard.note(
        Ok(MonitorEvent::Updates(vec![
            update(FlowEvent::Added, 0x1234, &foreign),
            FlowUpdate::Abbrev { xid: 1 },
        ])),
        &applied,
        BASE,
        MASK,
    ));
    assert!(heard.repair(&applied).is_empty());
    let mut heard = Heard::default();
    assert!(!heard.note(Ok(MonitorEvent::Paused), &applied, BASE, MASK));
    assert!(heard.note(Ok(MonitorEvent::Resumed), &applied, BASE, MASK));
    assert!(heard.lost, "updates missed while paused: read back");
    let mut heard = Heard::default();
    let bad = openflow::DecodeError::BadLength {
        what: "flow update",
        len: 2,
    };
    assert!(heard.note(Err(bad), &applied, BASE, MASK));
    assert!(heard.lost);
}

fn arb_key() -> impl Strategy<Value = FlowKey> {
    use crate::model::Protocol;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let v4 = any::<u32>().prop_map(Ipv4Addr::from);
    let v6 = any::<u128>().prop_map(Ipv6Addr::from);
    let ip = prop_oneof![
        v4.clone().prop_map(IpAddr::V4),
        v6.clone().prop_map(IpAddr::V6)
    ];
    let proto = prop_oneof![
        Just(Protocol::Tcp),
        Just(Protocol::Udp),
        Just(Protocol::Sctp)
    ];
    prop_oneof![
        v4.clone().prop_map(FlowKey::Arp),
        v4.prop_map(FlowKey::ArpAnswer),
        v6.clone().prop_map(FlowKey::Nd),
        v6.clone().prop_map(FlowKey::NdAnswer),
        v6.prop_map(FlowKey::NdAdvert),
        ip.clone().prop_map(FlowKey::Pmtu),
        ip.clone().prop_map(FlowKey::Frag),
        ip.clone().prop_map(FlowKey::FragReturn),
        (ip.clone(), any::<u16>(), proto.clone()).prop_map(|(i, p, x)| FlowKey::Steer(i, p, x)),
        (ip, any::<u16>(), proto).prop_map(|(i, p, x)| FlowKey::Return(i, p, x)),
    ]
}

proptest! {
    /// A flow read from the switch is traced back to its key from its match alone, for every
    /// kind of key and every bridge setting that changes how flows look (VLAN, announcing,
    /// the profile, the gateway mode): the reconciler keeps no index from slot to key.
    #[test]
    fn every_flow_of_the_real_maker_is_found_from_its_slot(
        keys in prop::collection::btree_set(arb_key(), 1..24),
        vlan in prop::option::of(1u16..4095),
        announce: bool,
        underlay: bool,
        shared: bool,
    ) {
        use crate::config::{GatewayMode, Profile};
        let b = BridgeConfig {
            uplink: Some("eth0".into()),
            patch: Some("patch".into()),
            vlan,
            announce,
            profile: if underlay { Profile::Underlay } else { Profile::default() },
            gateway_mode: if shared { GatewayMode::Shared } else { GatewayMode::default() },
            router_mac: Some([2, 0, 0, 0, 0, 2]),
            ..BridgeConfig::default()
        };
        let ports = Ports {
            desc: BTreeMap::from([(1, "eth0".into()), (2, "patch".into())]),
            local_mac: Some([2, 0, 0, 0, 0, 1]),
            db: OvsDb::NotUsed,
        };
        let making = Making {
            maker: FlowMaker::for_bridge(b.clone(), 0x7f1f),
            roles: Roles::of(&b, &ports, None),
        };
        let plan: FlowIndex = keys.iter().copied().collect();
        let a = Applied::from_plan(&plan, making.clone(), 1);
        for key in &keys {
            let (id, body) = making.resolve(key).map_err(|e| TestCaseError::fail(format!("{key}: {e}")))?;
            prop_assert_eq!(a.at(&id), Some((*key, body)), "{}", key);
        }
        prop_assert_eq!(a.len(), keys.len());
    }
}

#[test]
fn a_write_costs_no_more_than_its_key() {
    // A full sync holds one op per planned flow.
    assert!(
        std::mem::size_of::<FlowOp>() <= 32,
        "{}",
        std::mem::size_of::<FlowOp>()
    );
}

/// A write that left a flow of its plan out (an answer held back until OVN programmed its
/// VIP), then the next generation, whose delta counts from the plan as planned and so does
/// not name the flow left out: the write of that generation looks at the left-out flow too and
/// adds it. Without anything left out, the delta alone is looked at.
#[test]
fn the_plan_after_a_write_that_left_a_flow_out_writes_that_flow() {
    use crate::plan::service_index::FlowDelta;
    use crate::reconcile::bridge::DesiredFlows;
    let r = roles();
    // Key 1 is the answer; generation 2 adds key 3.
    let first: BTreeMap<u8, u8> = [(1, 0), (2, 0)].into();
    let written: BTreeMap<u8, u8> = [(2, 0)].into();
    let second: BTreeMap<u8, u8> = [(1, 0), (2, 0), (3, 0)].into();
    let m = making(&second, &r);
    let plan = DesiredFlows {
        generation: 2,
        flows: index(&second),
        maker: m.maker.clone(),
        delta: Some(FlowDelta {
            touched: vec![key(3)],
        }),
        router_mac: None,
        announce: Vec::new(),
        doubt: false,
    };

    let mut held = Applied::from_plan(&index(&written), m.clone(), 1);
    held.left_out();
    let touched = held.touched(&plan, &m);
    assert_eq!(touched, vec![key(1), key(3)]);
    let d = held.delta(&plan.flows, m.clone(), touched);
    assert!(d.ops.contains(&FlowOp::Add(key(1))), "{:?}", d.ops);
    assert!(d.ops.contains(&FlowOp::Add(key(3))), "{:?}", d.ops);

    let whole = Applied::from_plan(&index(&first), m.clone(), 1);
    assert_eq!(whole.touched(&plan, &m), vec![key(3)]);
}
