//! The planner task: each complete snapshot of the source through the [`Planner`] (off the
//! async workers), handed to the reconcilers make before break (the order is
//! [`crate::plan::handover`]'s, which this task drives), and to the report task
//! ([`super::report`]).

use super::{Planned, StopPhase, router_mac};
use crate::config::Config;
use crate::model::Loaded;
use crate::plan::handover::{
    Handover, HandoverAction, HandoverEvent, Late, PeerReport, PlanRows, SendRows, Shape,
};
use crate::plan::planner::{BridgeFlows, Planner};
use crate::reconcile::bridge::{BridgeStatus, DesiredFlows};
use crate::reconcile::northbound as nb;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::watch;

pub use crate::plan::handover::ORDER_WAIT;

/// The planner task's inputs and outputs.
pub(super) struct PlannerTask {
    pub cfg: Config,
    pub objects: watch::Receiver<Arc<Loaded>>,
    /// When each generation's objects arrived, for the event-to-dataplane metric.
    pub received: Arrivals,
    /// One per bridge, in config order.
    pub bridges: Vec<watch::Sender<Arc<DesiredFlows>>>,
    pub northbound: Option<watch::Sender<Arc<nb::DesiredRows>>>,
    /// The objects and Services of each generation, for the report task.
    pub reports: watch::Sender<Option<Arc<Planned>>>,
    pub generation: watch::Sender<u64>,
    pub nb_status: Option<watch::Receiver<nb::NorthboundStatus>>,
    pub bridge_status: Vec<watch::Receiver<BridgeStatus>>,
    pub leader: Option<watch::Receiver<bool>>,
    /// Leadership of the cluster-wide work: frr-k8s's shared objects are planned while it lasts.
    pub cluster_leader: Option<watch::Receiver<bool>>,
    /// The membership's view, when this agent runs one (announcing bridges).
    pub members: Option<watch::Receiver<crate::membership_task::LiveMembers>>,
    /// Who takes this node's VIPs if it goes, for the membership (they watch this node).
    pub successors: Option<Arc<watch::Sender<crate::membership_task::Successors>>>,
    /// Where this node's claims go for the membership to send, when one runs.
    pub claims: Option<watch::Sender<crate::membership_task::OwnClaims>>,
    /// The agent's shutdown, as far as announcing goes.
    pub stop: watch::Receiver<StopPhase>,
    /// What this node announces after each plan, for the status document.
    pub announce: watch::Sender<Option<Arc<crate::plan::planner::AnnounceState>>>,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Told what this node answers for before the bridges are ([`super::fence`]).
    pub fence: Option<super::fence::FenceKeeper>,
    /// What this node advertises over BGP goes to its FRR through this, when it speaks BGP.
    pub advertising: Option<super::advertising::Advertising>,
}

impl PlannerTask {
    pub(super) async fn run(self) {
        let PlannerTask {
            cfg,
            mut objects,
            received: stamps,
            bridges: senders,
            northbound: nb_tx,
            reports: rtx,
            generation: gtx,
            nb_status: nb_status_rx,
            bridge_status: bridge_status_rx,
            leader,
            cluster_leader,
            mut members,
            successors,
            claims: claims_tx,
            mut stop,
            announce,
            metrics,
            fence,
            mut advertising,
        } = self;
        let mut planner = Some(Planner::for_config(&cfg));
        // This node's claims go to the others once the flows that carry them are on the
        // bridges: a node that gives a VIP up on hearing the claim stops answering only after
        // the new owner answers.
        let claims_pending = claims_tx.map(|tx| {
            let (pending, rx) = watch::channel(None);
            tokio::spawn(publish_claims(rx, tx, bridge_status_rx.clone()));
            pending
        });
        // The order of rows and flows, and the drain hold: this node keeps its VIPs for a
        // moment after its drain mark is first seen, so that the others take them and
        // announce first.
        let mut handover = Handover::new(Shape {
            writer: nb_status_rx.is_some(),
            bridges: bridge_status_rx.len(),
            drain_hold: crate::membership_task::HANDOVER,
        });
        // frr-k8s mode: the shared objects are planned only while this agent leads (they are
        // the leader's to write); a change of leader plans again.
        let mut frr_k8s_leader = (cfg.bgp.frr_k8s == crate::config::FrrK8sMode::On)
            .then_some(cluster_leader)
            .flatten();
        let frr_k8s_pools = (cfg.bgp.frr_k8s == crate::config::FrrK8sMode::On)
            .then(|| cfg.bgp.frr_k8s_namespace.clone());
        let mut shell = Shell {
            flows: &senders,
            rows: nb_tx.as_ref(),
            nb_status: nb_status_rx,
            leader,
            bridges: bridge_status_rx,
            plan: None,
            waiting: None,
            hold: false,
            replan: false,
        };
        loop {
            let received = std::time::Instant::now();
            let loaded = objects.borrow_and_update().clone();
            if !loaded.complete {
                // The source has not listed everything yet: a partial world would delete what
                // is programmed. Wait for the first complete snapshot.
                if objects.changed().await.is_err() {
                    return;
                }
                continue;
            }
            // Off the async workers: a first snapshot of many Services takes a while, and the
            // reconcilers, the observer and shutdown must not wait behind it.
            let Some(mut p) = planner.take() else { return };
            p.set_members(match &mut members {
                Some(m) => match m.borrow_and_update().clone() {
                    Some(view) => crate::plan::planner::Membership::View(view),
                    None => crate::plan::planner::Membership::Waiting,
                },
                None => crate::plan::planner::Membership::Off,
            });
            match *stop.borrow_and_update() {
                StopPhase::Running => {}
                StopPhase::HandingOver => p.stop_announcing(),
                StopPhase::Withdraw => p.withdraw(),
            }
            let own_draining = loaded
                .objects
                .nodes
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(cfg.node_name.as_str()))
                .is_some_and(|n| crate::announce::announcements::draining(n));
            // This plan is any replan the machine asked for.
            shell.hold = false;
            handover.handle(
                std::time::Instant::now(),
                HandoverEvent::Drain(own_draining),
            );
            shell.apply_all(&mut handover);
            shell.replan = false;
            p.hold_while_draining(shell.hold);
            if let Some(ns) = &frr_k8s_pools {
                let leading = frr_k8s_leader
                    .as_mut()
                    .is_none_or(|l| *l.borrow_and_update());
                p.write_frr_k8s_pools(leading.then_some(ns.as_str()));
            }
            let objs = Arc::clone(&loaded);
            let (plans, services) = match tokio::task::spawn_blocking(move || {
                let plans = p.update(&objs.objects);
                let services = p.services().report();
                (p, plans, services)
            })
            .await
            {
                Ok((p, plans, services)) => {
                    planner = Some(p);
                    (plans, services)
                }
                Err(e) => {
                    tracing::error!(error = %e, "the planner failed; no more plans");
                    return;
                }
            };
            let generation = plans.generation;
            if let (Some(tx), Some(c)) = (&claims_pending, &plans.claims) {
                tx.send_replace(Some((generation, Arc::clone(c))));
            }
            if let Some(a) = &plans.announce {
                let n = |x: usize| i64::try_from(x).unwrap_or(i64::MAX);
                metrics.announced_vips.set(n(a.here.len()));
                metrics.live_nodes.set(n(a.live.len()));
                metrics
                    .announce_takeovers
                    .inc_by(u64::try_from(plans.taken).unwrap_or(u64::MAX));
                if let Some(tx) = &successors {
                    tx.send_if_modified(|cur| {
                        let changed = cur.as_slice() != a.successors.as_slice();
                        if changed {
                            *cur = Arc::new(a.successors.clone());
                        }
                        changed
                    });
                }
                let new = announce.send_if_modified(|cur| {
                    let same = cur.as_ref().is_some_and(|c| Arc::ptr_eq(c, a));
                    if !same {
                        *cur = Some(Arc::clone(a));
                    }
                    !same
                });
                if let Some(f) = &fence
                    && new
                {
                    f.note(a.here.iter().copied().collect());
                }
            }
            tracing::debug!(
                generation,
                took_ms = received.elapsed().as_millis() as u64,
                "planned"
            );
            {
                let mut s = stamps.lock().unwrap_or_else(|p| p.into_inner());
                s.insert(
                    generation,
                    Arrival {
                        at: received,
                        takeover: plans.taken > 0,
                    },
                );
                while s.len() > 64 {
                    s.pop_first();
                }
            }
            let router_mac = router_mac(&cfg, &loaded.objects);
            let (rows, next) = match (&nb_tx, plans.northbound) {
                (Some(_), Some(rows)) => {
                    let mut next =
                        nb::DesiredRows::from_rows(generation, &rows, cfg.northbound.exclude_ips);
                    next.pool_ranges = Arc::new(super::oneshot::pool_v4_ranges(&loaded.objects));
                    let order = match rows.make_first {
                        None => PlanRows::Own,
                        Some(make) => PlanRows::MakeFirst {
                            rows: make,
                            previous_vips: rows.previous_vips,
                            vips: next.vips.clone(),
                        },
                    };
                    (order, Some(next))
                }
                _ => (PlanRows::None, None),
            };
            // BGP withdrawals before the flows change: traffic leaves this node first.
            if let (Some(a), Some(bgp)) = (&mut advertising, &plans.bgp) {
                let withdrawn = a.plan(
                    &loaded.objects,
                    generation,
                    bgp,
                    plans.frr_k8s_pools.as_ref(),
                );
                a.withdrawn(&withdrawn).await;
            }
            // Problems, Events and status: reported at their own pace.
            let _ = rtx.send(Some(Arc::new(Planned {
                generation,
                loaded,
                services,
                announce: plans.announce.clone(),
                bgp: plans.bgp.clone(),
            })));
            let _ = gtx.send(generation);
            // Flows and rows, make before break, as the machine orders them.
            shell.plan = Some(Outgoing {
                generation,
                router_mac,
                flows: Some(plans.bridges),
                rows: next,
            });
            let now = std::time::Instant::now();
            shell.refresh(&mut handover, now);
            handover.handle(now, HandoverEvent::Plan { generation, rows });
            shell.settle(&mut handover).await;
            if shell.replan {
                // The drain hold ended meanwhile: plan again without this node.
                continue;
            }
            // A new snapshot, or a change of who is alive (which moves VIPs between nodes).
            let members_changed = async {
                match &mut members {
                    Some(m) => m.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            let held = until(handover.poll_timeout());
            let stop_changed = async {
                if stop.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            let lead_changed = async {
                match &mut frr_k8s_leader {
                    Some(l) => {
                        if l.changed().await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = objects.changed() => if r.is_err() { return },
                () = lead_changed => {}
                // A membership that ended (it could not start) leaves the Nodes' Ready
                // condition to decide.
                live = members_changed => if !live { members = None },
                () = stop_changed => {}
                // The drain hold is over: plan again without this node.
                () = held => handover.handle_timeout(std::time::Instant::now()),
            }
        }
    }
}

/// The delta to hand on with a plan, or `None` when it names a large part of the flows (a
/// first plan names every one): the plan is kept for as long as it stands, and such a delta
/// with it, where comparing the two plans (without visiting what they share) costs as much.
fn kept_delta(
    delta: crate::plan::service_index::FlowDelta,
    flows: usize,
) -> Option<crate::plan::service_index::FlowDelta> {
    const SMALL: usize = 4096;
    (delta.touched.len() <= SMALL.max(flows / 4)).then_some(delta)
}

/// A plan's flows and rows, until the machine has them sent.
struct Outgoing {
    generation: u64,
    router_mac: Option<openflow::oxm::MacAddr>,
    flows: Option<Vec<BridgeFlows>>,
    /// The plan's own rows, when it has rows to hand over.
    rows: Option<nb::DesiredRows>,
}

/// Whose word a wait of the machine is for.
#[derive(Debug, Clone, Copy)]
enum Waiting {
    Writer,
    Bridge(usize),
}

/// The I/O of [`Handover`]: where its actions go and what it is told.
struct Shell<'a> {
    flows: &'a [watch::Sender<Arc<DesiredFlows>>],
    rows: Option<&'a watch::Sender<Arc<nb::DesiredRows>>>,
    nb_status: Option<watch::Receiver<nb::NorthboundStatus>>,
    leader: Option<watch::Receiver<bool>>,
    bridges: Vec<watch::Receiver<BridgeStatus>>,
    plan: Option<Outgoing>,
    /// The machine's current wait, as it last said.
    waiting: Option<Waiting>,
    /// Whether this plan holds this node's VIPs while it drains.
    hold: bool,
    /// Whether the machine asked for another plan.
    replan: bool,
}

impl Shell<'_> {
    /// Carry out what the machine asks until the plan under way is handed over.
    async fn settle(&mut self, handover: &mut Handover) {
        loop {
            self.apply_all(handover);
            if handover.is_idle() {
                return;
            }
            // A closed channel ends the wait as well: `refresh` reads it as disconnected.
            let changed = async {
                let _ = match self.waiting {
                    Some(Waiting::Writer) => match &mut self.nb_status {
                        Some(rx) => rx.changed().await,
                        None => std::future::pending().await,
                    },
                    Some(Waiting::Bridge(i)) => match self.bridges.get_mut(i) {
                        Some(rx) => rx.changed().await,
                        None => std::future::pending().await,
                    },
                    None => std::future::pending().await,
                };
            };
            tokio::select! {
                () = changed => {}
                () = until(handover.poll_timeout()) => {}
            }
            // What the peers say now first: a confirmation that came with the deadline
            // counts.
            let now = std::time::Instant::now();
            self.refresh(handover, now);
            handover.handle_timeout(now);
        }
    }

    /// Tell the machine what the election, the bridges and the writer say now; the writer
    /// last, as its word may start a wait on the others'.
    fn refresh(&mut self, handover: &mut Handover, now: std::time::Instant) {
        if let Some(l) = &self.leader {
            handover.handle(now, HandoverEvent::Leader(*l.borrow()));
        }
        for (bridge, rx) in self.bridges.iter_mut().enumerate() {
            let seen = seen(rx, |s| (s.connected, s.applied_generation));
            handover.handle(now, HandoverEvent::Bridge { bridge, seen });
        }
        if let Some(rx) = &mut self.nb_status {
            let seen = seen(rx, |s| (s.connected, s.applied_step));
            handover.handle(now, HandoverEvent::Writer(seen));
        }
    }

    /// Carry out every action the machine has for now.
    fn apply_all(&mut self, handover: &mut Handover) {
        while let Some(action) = handover.poll() {
            self.apply(action);
        }
    }

    fn apply(&mut self, action: HandoverAction) {
        match action {
            HandoverAction::SendRows(r) => self.send_rows(r),
            HandoverAction::SendFlows { generation } => self.send_flows(generation),
            HandoverAction::WaitRows { .. } => self.waiting = Some(Waiting::Writer),
            HandoverAction::WaitFlows { bridge, .. } => {
                self.waiting = Some(Waiting::Bridge(bridge))
            }
            HandoverAction::HoldDrain { .. } => self.hold = true,
            HandoverAction::Replan => self.replan = true,
            HandoverAction::Warn(Late::Rows { step, waited }) => {
                tracing::warn!(step, wait = ?waited, "Northbound rows not confirmed in time; writing the flows anyway");
            }
            HandoverAction::Warn(Late::Flows {
                generation, waited, ..
            }) => {
                tracing::warn!(generation, wait = ?waited, "flows not confirmed in time; removing the rows anyway");
            }
        }
    }

    fn send_rows(&mut self, r: SendRows) {
        let (Some(tx), Some(plan)) = (self.rows, &mut self.plan) else {
            return;
        };
        let rows = match r.kept {
            // The plan's own rows are its last handover.
            None => match plan.rows.take() {
                Some(next) => nb::DesiredRows {
                    step: r.step,
                    complete: r.complete,
                    ..next
                },
                None => return,
            },
            Some(kept) => match &plan.rows {
                Some(next) => nb::DesiredRows {
                    row_count: kept.row_count,
                    rows: kept.rows,
                    vips: kept.vips,
                    step: r.step,
                    complete: r.complete,
                    ..next.clone()
                },
                None => return,
            },
        };
        let _ = tx.send(Arc::new(rows));
    }

    fn send_flows(&mut self, generation: u64) {
        let Some(plan) = self.plan.as_mut().filter(|p| p.generation == generation) else {
            return;
        };
        let Some(bridges) = plan.flows.take() else {
            return;
        };
        for (b, tx) in bridges.into_iter().zip(self.flows) {
            let delta = kept_delta(b.delta, b.flows.len());
            let _ = tx.send(Arc::new(DesiredFlows {
                generation,
                flows: b.flows,
                maker: b.maker,
                delta,
                router_mac: plan.router_mac,
                announce: b.announce,
                doubt: b.doubt,
            }));
        }
    }
}

/// What a peer's status says, as the machine takes it; a closed channel as disconnected.
fn seen<T>(rx: &mut watch::Receiver<T>, read: impl Fn(&T) -> (bool, Option<u64>)) -> PeerReport {
    if rx.has_changed().is_err() {
        return PeerReport::disconnected();
    }
    let (connected, applied) = read(&rx.borrow_and_update());
    PeerReport { connected, applied }
}

/// Sleep until `t`, or for ever.
async fn until(t: Option<std::time::Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await,
        None => std::future::pending().await,
    }
}

/// Hand each plan's claims on to the membership once every connected bridge applied that plan
/// (or [`ORDER_WAIT`] passed): the newest claims only, in plan order.
async fn publish_claims(
    mut pending: watch::Receiver<Option<(u64, crate::membership_task::OwnClaims)>>,
    claims: watch::Sender<crate::membership_task::OwnClaims>,
    bridges: Vec<watch::Receiver<BridgeStatus>>,
) {
    while pending.changed().await.is_ok() {
        let Some((generation, c)) = pending.borrow_and_update().clone() else {
            continue;
        };
        for rx in &bridges {
            let mut rx = rx.clone();
            let done = rx.wait_for(|s| {
                !s.connected || s.applied_generation.is_some_and(|g| g >= generation)
            });
            let _ = tokio::time::timeout(ORDER_WAIT, done).await;
        }
        claims.send_replace(c);
    }
}

/// When each recent plan generation's objects arrived.
/// When each recent plan's trigger (a snapshot, or news from the membership) reached the
/// planner, by generation.
pub(super) type Arrivals = Arc<std::sync::Mutex<BTreeMap<u64, Arrival>>>;

/// When a plan's trigger reached the planner, and whether the plan made this node take VIPs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Arrival {
    pub at: std::time::Instant,
    pub takeover: bool,
}
