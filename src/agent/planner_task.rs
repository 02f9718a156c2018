//! The planner task: each complete snapshot of the source through the [`Planner`] (off the
//! async workers), handed to the reconcilers make before break (see [`crate::plan::order`]),
//! and to the report task ([`super::report`]).

use super::*;

/// The planner task's inputs and outputs.
pub(super) struct PlannerTask {
    pub cfg: Config,
    pub objects: watch::Receiver<Arc<Loaded>>,
    /// When each generation's objects arrived, for the event-to-dataplane metric.
    pub received: Received,
    /// One per bridge, in config order.
    pub bridges: Vec<watch::Sender<Arc<DesiredFlows>>>,
    pub northbound: Option<watch::Sender<Arc<nb::DesiredRows>>>,
    /// The objects and Services of each generation, for the report task.
    pub reports: watch::Sender<Option<Arc<Planned>>>,
    pub generation: watch::Sender<u64>,
    pub nb_status: Option<watch::Receiver<nb::NorthboundStatus>>,
    pub bridge_status: Vec<watch::Receiver<BridgeStatus>>,
    pub leader: Option<watch::Receiver<bool>>,
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
            mut members,
            successors,
            claims: claims_tx,
            mut stop,
            announce,
            metrics,
            fence,
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
        // When this node's drain mark was first seen: it keeps its VIPs for a moment, so that
        // the others take them and announce first.
        let mut drain_since: Option<std::time::Instant> = None;
        // Handovers to the Northbound writer: up to two per plan (see plan::order).
        let mut nb_step = 0u64;
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
            let mut hold_until: Option<tokio::time::Instant> = None;
            if own_draining {
                let since = *drain_since.get_or_insert_with(std::time::Instant::now);
                let end = since + crate::membership_task::HANDOVER;
                let hold = std::time::Instant::now() < end;
                if hold {
                    hold_until = Some(tokio::time::Instant::from_std(end));
                }
                p.hold_while_draining(hold);
            } else {
                drain_since = None;
                p.hold_while_draining(false);
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
            let send_flows = |bridges: Vec<BridgeFlows>| {
                for (b, tx) in bridges.into_iter().zip(&senders) {
                    let delta = kept_delta(b.delta, b.flows.len());
                    let _ = tx.send(Arc::new(DesiredFlows {
                        generation,
                        flows: b.flows,
                        maker: b.maker,
                        delta,
                        router_mac,
                        announce: b.announce,
                        doubt: b.doubt,
                    }));
                }
            };
            let nb_plan = match (&nb_tx, plans.northbound) {
                (Some(tx), Some(rows)) => {
                    let mut next =
                        nb::DesiredRows::from_rows(generation, &rows, cfg.northbound.exclude_ips);
                    next.pool_ranges = Arc::new(super::oneshot::pool_v4_ranges(&loaded.objects));
                    Some((tx, next, rows.make_first, rows.previous_vips))
                }
                _ => None,
            };
            // Problems, Events and status: reported at their own pace.
            let _ = rtx.send(Some(Arc::new(Planned {
                generation,
                loaded,
                services,
                announce: plans.announce.clone(),
            })));
            let _ = gtx.send(generation);
            // The writer diffs only the Services a handover names when it takes every one in
            // turn: a handover that overtook the last one, still unwritten, would cost it a diff
            // of every Service. The wait is bounded by what it spares (TURN_WAIT).
            if nb_plan.is_some() && nb_step > 0 {
                rows_written(&nb_status_rx, &leader, nb_step, TURN_WAIT).await;
            }
            // Flows and rows, make before break (plan::order): rows that serve the old plan and
            // the new one, then the flows, then the new rows.
            match nb_plan {
                None => send_flows(plans.bridges),
                Some((tx, next, None, _)) => {
                    nb_step += 1;
                    let _ = tx.send(Arc::new(nb::DesiredRows {
                        step: nb_step,
                        ..next
                    }));
                    // The first handover goes out beside the flows: this process has served no
                    // plan to break yet (what the switch and the database hold is an earlier
                    // run's, which both first syncs replace), and waiting would hold every
                    // bridge's first sync behind the Northbound's whole one.
                    if nb_step > 1 {
                        wait_rows(&nb_status_rx, &leader, nb_step).await;
                    }
                    send_flows(plans.bridges);
                }
                Some((tx, next, Some(make), previous_vips)) => {
                    nb_step += 1;
                    let _ = tx.send(Arc::new(nb::DesiredRows {
                        row_count: order::row_count(&make),
                        rows: make,
                        vips: previous_vips.union(next.vips.clone()),
                        step: nb_step,
                        complete: false,
                        ..next.clone()
                    }));
                    wait_rows(&nb_status_rx, &leader, nb_step).await;
                    send_flows(plans.bridges);
                    wait_flows(&bridge_status_rx, generation).await;
                    nb_step += 1;
                    let _ = tx.send(Arc::new(nb::DesiredRows {
                        step: nb_step,
                        ..next
                    }));
                }
            }
            // A new snapshot, or a change of who is alive (which moves VIPs between nodes).
            let members_changed = async {
                match &mut members {
                    Some(m) => m.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            let held = async {
                match hold_until {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            let stop_changed = async {
                if stop.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                r = objects.changed() => if r.is_err() { return },
                // A membership that ended (it could not start) leaves the Nodes' Ready
                // condition to decide.
                live = members_changed => if !live { members = None },
                () = stop_changed => {}
                // The drain hold is over: plan again without this node.
                _ = held => {}
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

/// How long the planner waits for the other side of a make-before-break step (plan::order)
/// before it goes on anyway: a database or switch that does not answer must not hold every
/// later change back.
pub const ORDER_WAIT: Duration = Duration::from_secs(5);

/// How long the planner waits for the Northbound writer to write the last handover before it
/// hands over the next: about what the writer's diff of every Service, which the wait spares
/// it, costs at tens of thousands of Services.
const TURN_WAIT: Duration = Duration::from_millis(100);

/// Wait until the Northbound writer committed handover `step`, when this agent writes and the
/// writer is connected (a writer that is not, or another agent's, confirms nothing).
async fn wait_rows(
    nb_status: &Option<watch::Receiver<nb::NorthboundStatus>>,
    leader: &Option<watch::Receiver<bool>>,
    step: u64,
) {
    if !rows_written(nb_status, leader, step, ORDER_WAIT).await {
        tracing::warn!(step, wait = ?ORDER_WAIT, "Northbound rows not confirmed in time; writing the flows anyway");
    }
}

/// [`wait_rows`] for at most `within`; false when the writer had not confirmed by then.
async fn rows_written(
    nb_status: &Option<watch::Receiver<nb::NorthboundStatus>>,
    leader: &Option<watch::Receiver<bool>>,
    step: u64,
    within: Duration,
) -> bool {
    let Some(rx) = nb_status else { return true };
    if leader.as_ref().is_some_and(|l| !*l.borrow()) {
        return true;
    }
    let mut rx = rx.clone();
    let done = rx.wait_for(|s| !s.connected || s.applied_step.is_some_and(|a| a >= step));
    tokio::time::timeout(within, done).await.is_ok()
}

/// Wait until every connected bridge applied `generation`.
async fn wait_flows(bridges: &[watch::Receiver<BridgeStatus>], generation: u64) {
    for rx in bridges {
        let mut rx = rx.clone();
        let done =
            rx.wait_for(|s| !s.connected || s.applied_generation.is_some_and(|g| g >= generation));
        if tokio::time::timeout(ORDER_WAIT, done).await.is_err() {
            tracing::warn!(generation, wait = ?ORDER_WAIT, "flows not confirmed in time; removing the rows anyway");
        }
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
pub(super) type Received = Arc<std::sync::Mutex<BTreeMap<u64, Arrival>>>;

/// When a plan's trigger reached the planner, and whether the plan made this node take VIPs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Arrival {
    pub at: std::time::Instant,
    pub takeover: bool,
}
