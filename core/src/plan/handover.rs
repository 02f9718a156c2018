//! Make before break between the Northbound rows and the bridges' flows ([`super::order`]),
//! and this node's drain hold, as a state machine without I/O.
//!
//! The caller feeds it what happens ([`Handover::handle`], [`Handover::handle_timeout`]) and
//! carries out what it asks for ([`Handover::poll`]), waking it at [`Handover::poll_timeout`]:
//! the agent's planner task does so over its watch channels and timers, the tests by hand.
//!
//! A plan goes out in this order:
//! - no rows to hand over: the flows at once;
//! - the plan's own rows: the rows, then, once the writer committed them, the flows. The first
//!   handover goes out beside the flows: this process has served no plan to break yet (what
//!   the switch and the database hold is an earlier run's, which both first syncs replace),
//!   and waiting would hold every bridge's first sync behind the Northbound's whole one;
//! - rows that keep what the previous plan had ([`super::order::make_rows`]): those, with the
//!   VIPs of both plans and marked incomplete; once committed, the flows; once every bridge
//!   applied them, the plan's own rows.
//!
//! Every wait is bounded ([`ORDER_WAIT`]) and goes on with a warning when it runs out: a
//! database or switch that does not answer must not hold every later change back. Waits for
//! the writer are skipped when this agent has no writer or does not lead (another agent's
//! writer confirms nothing); a writer that is not connected confirms at once.

use crate::plan::order;
use crate::plan::row_table::RowIndex;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long a make-before-break step waits for the other side (rows committed, flows applied)
/// before it goes on anyway: a database or switch that does not answer must not hold every
/// later change back.
pub const ORDER_WAIT: Duration = Duration::from_secs(5);

/// How long a plan waits for the writer to write the last handover before it hands over the
/// next: the writer diffs only the Services a handover names when it takes every one in turn,
/// so a handover that overtook an unwritten one would cost it a diff of every Service. This is
/// about what that diff costs at tens of thousands of Services.
pub const TURN_WAIT: Duration = Duration::from_millis(100);

/// What the machine is told about the agent it runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Whether this agent has a Northbound writer (without one nothing confirms rows).
    pub writer: bool,
    /// The number of bridges, each confirming flows on its own.
    pub bridges: usize,
    /// How long this node keeps its VIPs from when its drain mark is first seen, so that the
    /// others take them and announce first.
    pub drain_hold: Duration,
}

/// What a peer (the Northbound writer, a bridge) last said of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerReport {
    pub connected: bool,
    /// The last handover written (the writer) or plan generation applied (a bridge).
    pub applied: Option<u64>,
}

impl PeerReport {
    /// Connected, having applied `n`.
    pub fn applied(n: u64) -> PeerReport {
        PeerReport {
            connected: true,
            applied: Some(n),
        }
    }

    /// Connected, having applied nothing yet.
    pub fn behind() -> PeerReport {
        PeerReport {
            connected: true,
            applied: None,
        }
    }

    /// Not connected: it confirms whatever it is waited for, as it will sync in full.
    pub fn disconnected() -> PeerReport {
        PeerReport {
            connected: false,
            applied: None,
        }
    }

    /// Whether it holds `n` or can hold nothing (a wait on it is over).
    fn confirms(&self, n: u64) -> bool {
        !self.connected || self.applied.is_some_and(|a| a >= n)
    }
}

/// A plan's Northbound rows, as far as the order goes.
#[derive(Debug, Clone, PartialEq)]
pub enum PlanRows {
    /// No rows to hand over (no writer, or a plan without rows): only flows.
    None,
    /// The plan's own rows can go first.
    Own,
    /// Rows that serve the previous plan and this one ([`order::make_rows`]) go first.
    MakeFirst {
        rows: RowIndex,
        previous_vips: imbl::OrdSet<IpAddr>,
        vips: imbl::OrdSet<IpAddr>,
    },
}

/// What happened.
#[derive(Debug, Clone, PartialEq)]
pub enum HandoverEvent {
    /// Plan `generation` is to go out. A plan fed while another is under way follows it.
    Plan { generation: u64, rows: PlanRows },
    /// What the Northbound writer last said ([`PeerReport::applied`]: the last handover written).
    Writer(PeerReport),
    /// Whether this agent leads (writes the Northbound rows); read when a wait for the writer
    /// starts. A writer that stops writing says so itself by disconnecting, which ends a wait
    /// already under way.
    Leader(bool),
    /// What bridge `bridge` (by index) last said ([`PeerReport::applied`]: the plan generation).
    Bridge { bridge: usize, seen: PeerReport },
    /// Whether this node's Node carries the drain mark.
    Drain(bool),
}

/// The rows of one handover.
#[derive(Debug, Clone, PartialEq)]
pub struct SendRows {
    /// The handover's number: the writer follows handovers, not generations.
    pub step: u64,
    pub generation: u64,
    /// Whether these are the plan's own rows.
    pub complete: bool,
    /// `None`: the plan's own rows. Otherwise the rows, their count and the VIPs to write
    /// in their place.
    pub kept: Option<Kept>,
}

/// Rows that serve the previous plan and the next at once.
#[derive(Debug, Clone, PartialEq)]
pub struct Kept {
    pub rows: RowIndex,
    pub row_count: usize,
    /// The VIPs of both plans, all kept out of IPAM meanwhile.
    pub vips: imbl::OrdSet<IpAddr>,
}

/// A wait that ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Late {
    /// The writer did not confirm handover `step`; the flows went anyway.
    Rows { step: u64, waited: Duration },
    /// Bridge `bridge` did not confirm `generation`; the rows went on anyway.
    Flows {
        generation: u64,
        bridge: usize,
        waited: Duration,
    },
}

/// What the caller is to do, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum HandoverAction {
    /// Hand these rows to the Northbound writer.
    SendRows(SendRows),
    /// Hand plan `generation`'s flows to the bridges.
    SendFlows { generation: u64 },
    /// Nothing goes on until the writer wrote handover `step` (tell it [`HandoverEvent::Writer`]) or
    /// `until` (tell it [`Handover::handle_timeout`]).
    WaitRows { step: u64, until: Instant },
    /// Nothing goes on until bridge `bridge` applied `generation` ([`HandoverEvent::Bridge`]) or
    /// `until`.
    WaitFlows {
        generation: u64,
        bridge: usize,
        until: Instant,
    },
    /// Plan with this node held (keeping its VIPs) while draining; plan again at `until`.
    HoldDrain { until: Instant },
    /// The drain hold is over: plan again, without this node.
    Replan,
    /// A wait ran out.
    Warn(Late),
}

/// Where the plan under way is.
#[derive(Debug)]
enum Stage {
    Idle,
    /// Waiting for handover `step` (the last one) before handing over plan `generation`
    /// (with `kept` rows first, or its own).
    Turn {
        step: u64,
        until: Instant,
        generation: u64,
        kept: Option<Kept>,
    },
    /// Waiting for handover `step`, then the flows; with `break_after`, then the flows' wait.
    Rows {
        step: u64,
        until: Instant,
        generation: u64,
        break_after: bool,
    },
    /// Waiting for bridge `bridge` to apply `generation`, then the later bridges, then the
    /// plan's own rows.
    Flows {
        generation: u64,
        bridge: usize,
        until: Instant,
    },
}

/// The make-before-break order and the drain hold of one agent.
#[derive(Debug)]
pub struct Handover {
    shape: Shape,
    /// The last handover's number (handovers made so far).
    step: u64,
    writer: PeerReport,
    leader: bool,
    bridges: Vec<PeerReport>,
    stage: Stage,
    queued: VecDeque<(u64, PlanRows)>,
    actions: VecDeque<HandoverAction>,
    /// When this node's drain mark was first seen (since it was last absent).
    drain_since: Option<Instant>,
    /// When the drain hold ends, while it lasts.
    drain_until: Option<Instant>,
}

impl Handover {
    /// A machine with no plan handed over yet. Until told otherwise it takes the writer and
    /// every bridge as connected and behind, and this agent as leading.
    pub fn new(shape: Shape) -> Handover {
        Handover {
            shape,
            step: 0,
            writer: PeerReport::behind(),
            leader: true,
            bridges: vec![PeerReport::behind(); shape.bridges],
            stage: Stage::Idle,
            queued: VecDeque::new(),
            actions: VecDeque::new(),
            drain_since: None,
            drain_until: None,
        }
    }

    /// Take in what happened at `now`.
    pub fn handle(&mut self, now: Instant, event: HandoverEvent) {
        match event {
            HandoverEvent::Plan { generation, rows } => {
                self.queued.push_back((generation, rows));
                if matches!(self.stage, Stage::Idle) {
                    self.next_plan(now);
                }
            }
            HandoverEvent::Writer(seen) => {
                self.writer = seen;
                match self.stage {
                    Stage::Turn { step, .. } if seen.confirms(step) => self.take_turn(now),
                    Stage::Rows {
                        step,
                        generation,
                        break_after,
                        ..
                    } if seen.confirms(step) => self.rows_done(now, generation, break_after),
                    _ => {}
                }
            }
            HandoverEvent::Leader(leading) => self.leader = leading,
            HandoverEvent::Bridge { bridge, seen } => {
                // A bridge the shape does not have has nothing to confirm.
                let Some(b) = self.bridges.get_mut(bridge) else {
                    return;
                };
                *b = seen;
                if let Stage::Flows {
                    generation,
                    bridge: waited,
                    ..
                } = self.stage
                    && waited == bridge
                    && seen.confirms(generation)
                {
                    self.wait_flows(now, generation, bridge + 1);
                }
            }
            HandoverEvent::Drain(marked) => self.drain(now, marked),
        }
    }

    /// Take in that `now` came: a wait or the drain hold may be over.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.drain_until.is_some_and(|t| t <= now) {
            self.drain_until = None;
            self.actions.push_back(HandoverAction::Replan);
        }
        match self.stage {
            Stage::Turn { until, .. } if until <= now => self.take_turn(now),
            Stage::Rows {
                step,
                until,
                generation,
                break_after,
            } if until <= now => {
                self.actions.push_back(HandoverAction::Warn(Late::Rows {
                    step,
                    waited: ORDER_WAIT,
                }));
                self.rows_done(now, generation, break_after);
            }
            Stage::Flows {
                generation,
                bridge,
                until,
            } if until <= now => {
                self.actions.push_back(HandoverAction::Warn(Late::Flows {
                    generation,
                    bridge,
                    waited: ORDER_WAIT,
                }));
                self.wait_flows(now, generation, bridge + 1);
            }
            _ => {}
        }
    }

    /// The next thing to do, oldest first.
    pub fn poll(&mut self) -> Option<HandoverAction> {
        self.actions.pop_front()
    }

    /// When to call [`Handover::handle_timeout`] next, if at all.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let wait = match self.stage {
            Stage::Idle => None,
            Stage::Turn { until, .. } | Stage::Rows { until, .. } | Stage::Flows { until, .. } => {
                Some(until)
            }
        };
        match (wait, self.drain_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether every plan fed has been handed over in full (its actions may wait in
    /// [`Handover::poll`]).
    pub fn is_idle(&self) -> bool {
        matches!(self.stage, Stage::Idle) && self.queued.is_empty()
    }

    /// Start the next queued plan, if any.
    fn next_plan(&mut self, now: Instant) {
        self.stage = Stage::Idle;
        while let Some((generation, rows)) = self.queued.pop_front() {
            let kept = match rows {
                PlanRows::None => {
                    self.actions
                        .push_back(HandoverAction::SendFlows { generation });
                    continue;
                }
                PlanRows::Own => None,
                PlanRows::MakeFirst {
                    rows,
                    previous_vips,
                    vips,
                } => Some(Kept {
                    row_count: order::row_count(&rows),
                    rows,
                    vips: previous_vips.union(vips),
                }),
            };
            if self.step > 0 && self.must_wait_for_rows(self.step) {
                let until = now + TURN_WAIT;
                self.actions.push_back(HandoverAction::WaitRows {
                    step: self.step,
                    until,
                });
                self.stage = Stage::Turn {
                    step: self.step,
                    until,
                    generation,
                    kept,
                };
            } else {
                self.hand_over(now, generation, kept);
            }
            return;
        }
    }

    /// The turn's wait is over (written, or [`TURN_WAIT`] gone): hand the plan over.
    fn take_turn(&mut self, now: Instant) {
        if let Stage::Turn {
            generation, kept, ..
        } = std::mem::replace(&mut self.stage, Stage::Idle)
        {
            self.hand_over(now, generation, kept);
        }
    }

    /// The first handover of a plan with rows: its own, or `kept` (then the flows and their
    /// wait, then its own).
    fn hand_over(&mut self, now: Instant, generation: u64, kept: Option<Kept>) {
        self.step += 1;
        let step = self.step;
        let break_after = kept.is_some();
        self.actions.push_back(HandoverAction::SendRows(SendRows {
            step,
            generation,
            complete: !break_after,
            kept,
        }));
        // The plan's own rows wait unless they are the first handover; kept rows always do,
        // as the flows after them break the last plan.
        if (break_after || step > 1) && self.must_wait_for_rows(step) {
            let until = now + ORDER_WAIT;
            self.actions
                .push_back(HandoverAction::WaitRows { step, until });
            self.stage = Stage::Rows {
                step,
                until,
                generation,
                break_after,
            };
        } else {
            self.rows_done(now, generation, break_after);
        }
    }

    /// Whether a wait for handover `step` is due: this agent writes (it has a writer and
    /// leads) and the writer has not confirmed it yet.
    fn must_wait_for_rows(&self, step: u64) -> bool {
        self.shape.writer && self.leader && !self.writer.confirms(step)
    }

    /// The rows are written, or their wait ran out: the flows go, then (`break_after`) the
    /// wait for them, else the next plan.
    fn rows_done(&mut self, now: Instant, generation: u64, break_after: bool) {
        self.actions
            .push_back(HandoverAction::SendFlows { generation });
        if break_after {
            self.wait_flows(now, generation, 0);
        } else {
            self.next_plan(now);
        }
    }

    /// Wait for the bridges from `from` on, one after the other, to apply `generation`; then
    /// hand over the plan's own rows.
    fn wait_flows(&mut self, now: Instant, generation: u64, from: usize) {
        let waiting = self
            .bridges
            .iter()
            .enumerate()
            .skip(from)
            .find(|(_, b)| !b.confirms(generation))
            .map(|(i, _)| i);
        if let Some(bridge) = waiting {
            let until = now + ORDER_WAIT;
            self.actions.push_back(HandoverAction::WaitFlows {
                generation,
                bridge,
                until,
            });
            self.stage = Stage::Flows {
                generation,
                bridge,
                until,
            };
            return;
        }
        self.step += 1;
        self.actions.push_back(HandoverAction::SendRows(SendRows {
            step: self.step,
            generation,
            complete: true,
            kept: None,
        }));
        self.next_plan(now);
    }

    /// This node's drain mark is there (`marked`) or not, at `now`.
    fn drain(&mut self, now: Instant, marked: bool) {
        if !marked {
            self.drain_since = None;
            self.drain_until = None;
            return;
        }
        let since = *self.drain_since.get_or_insert(now);
        let end = since + self.shape.drain_hold;
        if now < end {
            self.drain_until = Some(end);
            self.actions
                .push_back(HandoverAction::HoldDrain { until: end });
        } else {
            self.drain_until = None;
        }
    }
}

#[cfg(test)]
#[path = "handover_tests.rs"]
mod tests;
