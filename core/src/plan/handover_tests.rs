use super::{
    Handover, HandoverAction, HandoverEvent, Kept, Late, ORDER_WAIT, PeerReport, PlanRows,
    SendRows, Shape, TURN_WAIT,
};
use crate::membership::HANDOVER;
use crate::model::{Protocol, ServiceKey};
use crate::plan::northbound::{Attach, LbKey, LbRow, Scope};
use crate::plan::order::{make_rows, row_count};
use crate::plan::str_map::StrMap;
use crate::reconcile::northbound::index_rows;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// A clock the tests move by hand.
struct Clock(Instant);

impl Clock {
    fn at(&self, ms: u64) -> Instant {
        self.0 + Duration::from_millis(ms)
    }
}

fn clock() -> Clock {
    Clock(Instant::now())
}

/// An agent with a Northbound writer and `bridges` bridges.
fn machine(bridges: usize) -> Handover {
    Handover::new(Shape {
        writer: true,
        bridges,
        drain_hold: HANDOVER,
    })
}

/// Everything the machine asks for now.
fn actions(m: &mut Handover) -> Vec<HandoverAction> {
    std::iter::from_fn(|| m.poll()).collect()
}

fn own(step: u64, generation: u64) -> HandoverAction {
    HandoverAction::SendRows(SendRows {
        step,
        generation,
        complete: true,
        kept: None,
    })
}

fn flows(generation: u64) -> HandoverAction {
    HandoverAction::SendFlows { generation }
}

fn key(name: &str) -> ServiceKey {
    ServiceKey::new("ns", name)
}

fn row(svc: &str, vips: &[(&str, &str)]) -> LbRow {
    LbRow {
        key: LbKey {
            owner: key(svc),
            protocol: Protocol::Tcp,
            scope: Scope::Cluster,
        },
        name: format!("vipflow/ns/{svc}/tcp"),
        vips: vips.iter().copied().collect(),
        options: StrMap::new(),
        external_ids: StrMap::new(),
        ip_port_mappings: StrMap::new(),
        attach: Attach::default(),
        template_vars: Vec::new(),
    }
}

fn vips(list: &[&str]) -> imbl::OrdSet<IpAddr> {
    list.iter()
        .filter_map(|v| v.parse::<IpAddr>().ok())
        .collect()
}

/// A first plan, handed over and written: the next plan is the one under test.
fn after_first_plan(m: &mut Handover, c: &Clock) {
    m.handle(
        c.at(0),
        HandoverEvent::Plan {
            generation: 1,
            rows: PlanRows::Own,
        },
    );
    assert_eq!(actions(m), vec![own(1, 1), flows(1)]);
    m.handle(c.at(1), HandoverEvent::Writer(PeerReport::applied(1)));
    assert!(m.is_idle());
}

/// Service `b` removed from `{a, b}`: the rows that keep it, and the VIPs of both plans.
fn removed_b() -> (PlanRows, Kept) {
    let a = row("a", &[("10.0.0.1:80", "10.1.0.1:8080")]);
    let b = row("b", &[("10.0.0.2:80", "10.1.0.2:8080")]);
    let prev = index_rows(vec![a.clone(), b]);
    let next = index_rows(vec![a]);
    let make = make_rows(&prev, &next, &[key("b")]);
    let Some(make) = make else {
        panic!("removing a Service keeps its rows first")
    };
    let kept = Kept {
        rows: make.clone(),
        row_count: row_count(&make),
        vips: vips(&["10.0.0.1", "10.0.0.2"]),
    };
    let rows = PlanRows::MakeFirst {
        rows: make,
        previous_vips: vips(&["10.0.0.1", "10.0.0.2"]),
        vips: vips(&["10.0.0.1"]),
    };
    (rows, kept)
}

fn kept(step: u64, generation: u64, kept: Kept) -> HandoverAction {
    HandoverAction::SendRows(SendRows {
        step,
        generation,
        complete: false,
        kept: Some(kept),
    })
}

#[test]
fn a_new_service_has_its_rows_written_before_its_flows() {
    let c = clock();
    let mut m = machine(1);
    after_first_plan(&mut m, &c);
    m.handle(
        c.at(10),
        HandoverEvent::Plan {
            generation: 2,
            rows: PlanRows::Own,
        },
    );
    assert_eq!(
        actions(&mut m),
        vec![
            own(2, 2),
            HandoverAction::WaitRows {
                step: 2,
                until: c.at(10) + ORDER_WAIT
            }
        ]
    );
    assert_eq!(m.poll_timeout(), Some(c.at(10) + ORDER_WAIT));
    m.handle(c.at(20), HandoverEvent::Writer(PeerReport::applied(2)));
    assert_eq!(actions(&mut m), vec![flows(2)]);
    assert!(m.is_idle());
    assert_eq!(m.poll_timeout(), None);
}

#[test]
fn a_removed_service_loses_its_flows_before_its_rows() {
    let c = clock();
    let mut m = machine(1);
    after_first_plan(&mut m, &c);
    let (rows, k) = removed_b();
    m.handle(
        c.at(10),
        HandoverEvent::Plan {
            generation: 2,
            rows,
        },
    );
    assert_eq!(
        actions(&mut m),
        vec![
            kept(2, 2, k),
            HandoverAction::WaitRows {
                step: 2,
                until: c.at(10) + ORDER_WAIT
            }
        ]
    );
    m.handle(c.at(20), HandoverEvent::Writer(PeerReport::applied(2)));
    assert_eq!(
        actions(&mut m),
        vec![
            flows(2),
            HandoverAction::WaitFlows {
                generation: 2,
                bridge: 0,
                until: c.at(20) + ORDER_WAIT
            }
        ]
    );
    m.handle(
        c.at(30),
        HandoverEvent::Bridge {
            bridge: 0,
            seen: PeerReport::applied(2),
        },
    );
    assert_eq!(actions(&mut m), vec![own(3, 2)]);
    assert!(m.is_idle());
}

#[test]
fn a_changed_service_keeps_both_vip_sets_until_the_flows_are_on() {
    let c = clock();
    let mut m = machine(1);
    after_first_plan(&mut m, &c);
    // Service a moves from 10.0.0.1 to 10.0.0.2.
    let prev = index_rows(vec![row("a", &[("10.0.0.1:80", "10.1.0.1:8080")])]);
    let next = index_rows(vec![row("a", &[("10.0.0.2:80", "10.1.0.1:8080")])]);
    let Some(make) = make_rows(&prev, &next, &[key("a")]) else {
        panic!("a VIP that goes is kept first")
    };
    let both = index_rows(vec![row(
        "a",
        &[
            ("10.0.0.1:80", "10.1.0.1:8080"),
            ("10.0.0.2:80", "10.1.0.1:8080"),
        ],
    )]);
    assert_eq!(make, both);
    m.handle(
        c.at(10),
        HandoverEvent::Plan {
            generation: 2,
            rows: PlanRows::MakeFirst {
                rows: make,
                previous_vips: vips(&["10.0.0.1"]),
                vips: vips(&["10.0.0.2"]),
            },
        },
    );
    let first = Kept {
        rows: both,
        row_count: 1,
        vips: vips(&["10.0.0.1", "10.0.0.2"]),
    };
    assert_eq!(
        actions(&mut m),
        vec![
            kept(2, 2, first),
            HandoverAction::WaitRows {
                step: 2,
                until: c.at(10) + ORDER_WAIT
            }
        ]
    );
    m.handle(c.at(20), HandoverEvent::Writer(PeerReport::applied(2)));
    assert_eq!(
        actions(&mut m),
        vec![
            flows(2),
            HandoverAction::WaitFlows {
                generation: 2,
                bridge: 0,
                until: c.at(20) + ORDER_WAIT
            }
        ]
    );
    // A bridge still on the last plan keeps the old VIP's rows in place.
    m.handle(
        c.at(25),
        HandoverEvent::Bridge {
            bridge: 0,
            seen: PeerReport::applied(1),
        },
    );
    assert_eq!(actions(&mut m), vec![]);
    m.handle(
        c.at(30),
        HandoverEvent::Bridge {
            bridge: 0,
            seen: PeerReport::applied(2),
        },
    );
    assert_eq!(actions(&mut m), vec![own(3, 2)]);
    assert!(m.is_idle());
}

#[test]
fn a_slow_writer_holds_the_flows_back_for_at_most_order_wait_then_they_go_with_a_warning() {
    let c = clock();
    let mut m = machine(1);
    after_first_plan(&mut m, &c);
    m.handle(
        c.at(10),
        HandoverEvent::Plan {
            generation: 2,
            rows: PlanRows::Own,
        },
    );
    let until = c.at(10) + ORDER_WAIT;
    assert_eq!(
        actions(&mut m),
        vec![own(2, 2), HandoverAction::WaitRows { step: 2, until }]
    );
    m.handle_timeout(until - Duration::from_millis(1));
    assert_eq!(actions(&mut m), vec![]);
    assert_eq!(m.poll_timeout(), Some(until));
    m.handle_timeout(until);
    assert_eq!(
        actions(&mut m),
        vec![
            HandoverAction::Warn(Late::Rows {
                step: 2,
                waited: ORDER_WAIT
            }),
            flows(2)
        ]
    );
    assert!(m.is_idle());
}

#[test]
fn a_disconnected_writer_holds_nothing_back() {
    let c = clock();
    let mut m = machine(1);
    after_first_plan(&mut m, &c);
    m.handle(c.at(5), HandoverEvent::Writer(PeerReport::disconnected()));
    m.handle(
        c.at(10),
        HandoverEvent::Plan {
            generation: 2,
            rows: PlanRows::Own,
        },
    );
    assert_eq!(actions(&mut m), vec![own(2, 2), flows(2)]);
    assert!(m.is_idle());
}

#[test]
fn a_writer_that_disconnects_during_a_wait_ends_it_without_a_warning() {
    let c = clock();
    let mut m = machine(1);
    after_first_plan(&mut m, &c);
    let (rows, k) = removed_b();
    m.handle(
        c.at(10),
        HandoverEvent::Plan {
            generation: 2,
            rows,
        },
    );
    assert_eq!(
        actions(&mut m),
        vec![
            kept(2, 2, k),
            HandoverAction::WaitRows {
                step: 2,
                until: c.at(10) + ORDER_WAIT
            }
        ]
    );
    m.handle(c.at(20), HandoverEvent::Writer(PeerReport::disconnected()));
    assert_eq!(
        actions(&mut m),
        vec![
            flows(2),
            HandoverAction::WaitFlows {
                generation: 2,
                bridge: 0,
                until: c.at(20) + ORDER_WAIT
            }
        ]
    );
}

#[test]
fn an_agent_without_a_writer_hands_its_flows_over_at_once() {
    let c = clock();
    let mut m = Handover::new(Shape {
        writer: false,
        bridges: 1,
        drain_hold: HANDOVER,
    });
    for generation in 1..=3 {
        m.handle(
            c.at(generation),
            HandoverEvent::Plan {
                generation,
                rows: PlanRows::None,
            },
        );
        assert_eq!(actions(&mut m), vec![flows(generation)]);
        assert!(m.is_idle());
    }
    // Rows with no writer to confirm them: nothing waits for them either.
    m.handle(
        c.at(10),
        HandoverEvent::Plan {
            generation: 4,
            rows: PlanRows::Own,
        },
    );
    m.handle(
        c.at(10),
        HandoverEvent::Plan {
            generation: 5,
            rows: PlanRows::Own,
        },
    );
    assert_eq!(
        actions(&mut m),
        vec![own(1, 4), flows(4), own(2, 5), flows(5)]
    );
}

#[test]
fn an_agent_that_does_not_lead_waits_for_no_rows_but_still_for_the_flows() {
    let c = clock();
    let mut m = machine(1);
    after_first_plan(&mut m, &c);
    m.handle(c.at(5), HandoverEvent::Leader(false));
    let (rows, k) = removed_b();
    m.handle(
        c.at(10),
        HandoverEvent::Plan {
            generation: 2,
            rows,
        },
    );
    assert_eq!(
        actions(&mut m),
        vec![
            kept(2, 2, k),
            flows(2),
            HandoverAction::WaitFlows {
                generation: 2,
                bridge: 0,
                until: c.at(10) + ORDER_WAIT
            }
        ]
    );
    m.handle(
        c.at(20),
        HandoverEvent::Bridge {
            bridge: 0,
            seen: PeerReport::applied(2),
        },
    );
    assert_eq!(actions(&mut m), vec![own(3, 2)]);
    // Nor does the next plan wait its turn for the unwritten handover 3.
    m.handle(
        c.at(30),
        HandoverEvent::Plan {
            generation: 3,
            rows: PlanRows::Own,
        },
    );
    assert_eq!(actions(&mut m), vec![own(4, 3), flows(3)]);
}

#[test]
fn a_bridge_that_never_confirms_has_the_rows_removed_after_order_wait() {
    let c = clock();
    let mut m = machine(1);
    after_first_plan(&mut m, &c);
    let (rows, k) = removed_b();
    m.handle(
        c.at(10),
        HandoverEvent::Plan {
            generation: 2,
            rows,
        },
    );
    m.handle(c.at(20), HandoverEvent::Writer(PeerReport::applied(2)));
    let until = c.at(20) + ORDER_WAIT;
    assert_eq!(
        actions(&mut m),
        vec![
            kept(2, 2, k),
            HandoverAction::WaitRows {
                step: 2,
                until: c.at(10) + ORDER_WAIT
            },
            flows(2),
            HandoverAction::WaitFlows {
                generation: 2,
                bridge: 0,
                until
            }
        ]
    );
    assert_eq!(m.poll_timeout(), Some(until));
    m.handle_timeout(until);
    assert_eq!(
        actions(&mut m),
        vec![
            HandoverAction::Warn(Late::Flows {
                generation: 2,
                bridge: 0,
                waited: ORDER_WAIT
            }),
            own(3, 2)
        ]
    );
    assert!(m.is_idle());
}

#[test]
fn each_bridge_is_waited_for_in_turn_with_a_bound_of_its_own() {
    let c = clock();
    let mut m = machine(3);
    after_first_plan(&mut m, &c);
    // Bridge 1 is not connected: it confirms anything.
    m.handle(
        c.at(5),
        HandoverEvent::Bridge {
            bridge: 1,
            seen: PeerReport::disconnected(),
        },
    );
    let (rows, _) = removed_b();
    m.handle(
        c.at(10),
        HandoverEvent::Plan {
            generation: 2,
            rows,
        },
    );
    m.handle(c.at(20), HandoverEvent::Writer(PeerReport::applied(2)));
    let first = c.at(20) + ORDER_WAIT;
    assert_eq!(
        actions(&mut m).last(),
        Some(&HandoverAction::WaitFlows {
            generation: 2,
            bridge: 0,
            until: first
        })
    );
    m.handle_timeout(first);
    let second = first + ORDER_WAIT;
    assert_eq!(
        actions(&mut m),
        vec![
            HandoverAction::Warn(Late::Flows {
                generation: 2,
                bridge: 0,
                waited: ORDER_WAIT
            }),
            HandoverAction::WaitFlows {
                generation: 2,
                bridge: 2,
                until: second
            }
        ]
    );
    m.handle(
        c.at(6000),
        HandoverEvent::Bridge {
            bridge: 2,
            seen: PeerReport::applied(2),
        },
    );
    assert_eq!(actions(&mut m), vec![own(3, 2)]);
}

#[test]
fn the_first_handover_goes_out_beside_the_flows() {
    let c = clock();
    let mut m = machine(1);
    // The writer has written nothing, yet the flows do not wait for it.
    m.handle(
        c.at(0),
        HandoverEvent::Plan {
            generation: 1,
            rows: PlanRows::Own,
        },
    );
    assert_eq!(actions(&mut m), vec![own(1, 1), flows(1)]);
    assert!(m.is_idle());
}

#[test]
fn rows_that_keep_the_last_plan_wait_even_as_the_first_handover() {
    let c = clock();
    let mut m = machine(1);
    let (rows, k) = removed_b();
    m.handle(
        c.at(0),
        HandoverEvent::Plan {
            generation: 1,
            rows,
        },
    );
    assert_eq!(
        actions(&mut m),
        vec![
            kept(1, 1, k),
            HandoverAction::WaitRows {
                step: 1,
                until: c.at(0) + ORDER_WAIT
            }
        ]
    );
}

#[test]
fn a_plan_that_overtakes_an_unwritten_handover_waits_turn_wait_for_it() {
    let c = clock();
    let mut m = machine(1);
    m.handle(
        c.at(0),
        HandoverEvent::Plan {
            generation: 1,
            rows: PlanRows::Own,
        },
    );
    assert_eq!(actions(&mut m), vec![own(1, 1), flows(1)]);
    m.handle(
        c.at(10),
        HandoverEvent::Plan {
            generation: 2,
            rows: PlanRows::Own,
        },
    );
    let turn = c.at(10) + TURN_WAIT;
    assert_eq!(
        actions(&mut m),
        vec![HandoverAction::WaitRows {
            step: 1,
            until: turn
        }]
    );
    assert_eq!(m.poll_timeout(), Some(turn));
    // The turn's wait runs out with no warning; the handover then waits as any other.
    m.handle_timeout(turn);
    assert_eq!(
        actions(&mut m),
        vec![
            own(2, 2),
            HandoverAction::WaitRows {
                step: 2,
                until: turn + ORDER_WAIT
            }
        ]
    );
}

#[test]
fn a_plan_takes_its_turn_as_soon_as_the_last_handover_is_written() {
    let c = clock();
    let mut m = machine(1);
    m.handle(
        c.at(0),
        HandoverEvent::Plan {
            generation: 1,
            rows: PlanRows::Own,
        },
    );
    m.handle(
        c.at(10),
        HandoverEvent::Plan {
            generation: 2,
            rows: PlanRows::Own,
        },
    );
    assert_eq!(
        actions(&mut m),
        vec![
            own(1, 1),
            flows(1),
            HandoverAction::WaitRows {
                step: 1,
                until: c.at(10) + TURN_WAIT
            }
        ]
    );
    m.handle(c.at(50), HandoverEvent::Writer(PeerReport::applied(1)));
    assert_eq!(
        actions(&mut m),
        vec![
            own(2, 2),
            HandoverAction::WaitRows {
                step: 2,
                until: c.at(50) + ORDER_WAIT
            }
        ]
    );
}

#[test]
fn a_plan_fed_during_a_handover_goes_out_after_it() {
    let c = clock();
    let mut m = machine(1);
    after_first_plan(&mut m, &c);
    m.handle(
        c.at(10),
        HandoverEvent::Plan {
            generation: 2,
            rows: PlanRows::Own,
        },
    );
    m.handle(
        c.at(20),
        HandoverEvent::Plan {
            generation: 3,
            rows: PlanRows::None,
        },
    );
    assert_eq!(
        actions(&mut m),
        vec![
            own(2, 2),
            HandoverAction::WaitRows {
                step: 2,
                until: c.at(10) + ORDER_WAIT
            }
        ]
    );
    assert!(!m.is_idle());
    m.handle(c.at(30), HandoverEvent::Writer(PeerReport::applied(2)));
    assert_eq!(actions(&mut m), vec![flows(2), flows(3)]);
    assert!(m.is_idle());
}

#[test]
fn a_draining_node_holds_its_vips_for_handover_from_the_first_sight_of_the_mark() {
    let c = clock();
    let mut m = machine(1);
    let end = c.at(0) + HANDOVER;
    m.handle(c.at(0), HandoverEvent::Drain(true));
    assert_eq!(
        actions(&mut m),
        vec![HandoverAction::HoldDrain { until: end }]
    );
    // Seen again later (another plan): the hold still ends HANDOVER after the first sight.
    m.handle(c.at(400), HandoverEvent::Drain(true));
    assert_eq!(
        actions(&mut m),
        vec![HandoverAction::HoldDrain { until: end }]
    );
    assert_eq!(m.poll_timeout(), Some(end));
    m.handle_timeout(end - Duration::from_millis(1));
    assert_eq!(actions(&mut m), vec![]);
    m.handle_timeout(end);
    assert_eq!(actions(&mut m), vec![HandoverAction::Replan]);
    assert_eq!(m.poll_timeout(), None);
    // The replan finds the mark still there and the hold over.
    m.handle(end, HandoverEvent::Drain(true));
    assert_eq!(actions(&mut m), vec![]);
    assert_eq!(m.poll_timeout(), None);
}

#[test]
fn a_cleared_drain_mark_ends_the_hold() {
    let c = clock();
    let mut m = machine(1);
    m.handle(c.at(0), HandoverEvent::Drain(true));
    assert_eq!(
        actions(&mut m),
        vec![HandoverAction::HoldDrain {
            until: c.at(0) + HANDOVER
        }]
    );
    m.handle(c.at(200), HandoverEvent::Drain(false));
    assert_eq!(m.poll_timeout(), None);
    m.handle_timeout(c.at(0) + HANDOVER);
    assert_eq!(actions(&mut m), vec![]);
}

#[test]
fn a_second_drain_mark_restarts_the_hold() {
    let c = clock();
    let mut m = machine(1);
    m.handle(c.at(0), HandoverEvent::Drain(true));
    m.handle(c.at(200), HandoverEvent::Drain(false));
    let _ = actions(&mut m);
    m.handle(c.at(700), HandoverEvent::Drain(true));
    assert_eq!(
        actions(&mut m),
        vec![HandoverAction::HoldDrain {
            until: c.at(700) + HANDOVER
        }]
    );
    assert_eq!(m.poll_timeout(), Some(c.at(700) + HANDOVER));
}

#[test]
fn a_drain_hold_that_ends_during_a_wait_asks_for_a_replan_and_the_wait_goes_on() {
    let c = clock();
    let mut m = machine(1);
    after_first_plan(&mut m, &c);
    m.handle(c.at(10), HandoverEvent::Drain(true));
    assert_eq!(
        actions(&mut m),
        vec![HandoverAction::HoldDrain {
            until: c.at(10) + HANDOVER
        }]
    );
    m.handle(
        c.at(20),
        HandoverEvent::Plan {
            generation: 2,
            rows: PlanRows::Own,
        },
    );
    let _ = actions(&mut m);
    assert_eq!(m.poll_timeout(), Some(c.at(10) + HANDOVER));
    m.handle_timeout(c.at(10) + HANDOVER);
    assert_eq!(actions(&mut m), vec![HandoverAction::Replan]);
    assert_eq!(m.poll_timeout(), Some(c.at(20) + ORDER_WAIT));
    assert!(!m.is_idle());
}
