//! The observer: follows the planner and the reconcilers, and turns what they report into
//! metrics, readiness, the status document and Events.

use super::planner_task::Arrival;
use crate::agent::AgentOptions;
use crate::agent::planner_task::Arrivals;
use crate::agent::report::PlanInfo;
use crate::config::Config;
use crate::reconcile::bridge::BridgeStatus;
use crate::reconcile::northbound as nb;
use crate::status::BridgeDoc;
use crate::status::NorthboundDoc;
use crate::status::StatusDoc;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use vipflow_core::reconcile::error::ReconcileError;

/// What one reconciler reports that the observer counts.
struct Report<'a> {
    syncs: u64,
    last_sync: Duration,
    applied: Option<u64>,
    error: &'a Option<ReconcileError>,
    /// A bridge that announces: a plan that made this node take VIPs is announced once it is
    /// applied there.
    announces: bool,
}

/// What the observer last saw of one reconciler, so that each sync, applied plan and error
/// is counted once.
#[derive(Default)]
struct Seen {
    syncs: u64,
    applied: Option<u64>,
    error: Option<ReconcileError>,
}

impl Seen {
    /// Count what is new in `r`: a sync's duration, the time from a plan's objects arriving
    /// to the plan applied (and, on a bridge, from a takeover's trigger to its announcement),
    /// a new error under its kind's label.
    fn follow(
        &mut self,
        m: &crate::metrics::Metrics,
        target: &crate::metrics::TargetLabel,
        r: Report<'_>,
        arrived: &dyn Fn(Option<u64>) -> Option<Arrival>,
    ) {
        if r.syncs > self.syncs {
            self.syncs = r.syncs;
            m.sync_seconds
                .get_or_create(target)
                .observe(r.last_sync.as_secs_f64());
        }
        if r.applied != self.applied {
            let before = self.applied.unwrap_or(0);
            self.applied = r.applied;
            if let Some(a) = arrived(r.applied) {
                m.event_to_dataplane_seconds
                    .get_or_create(target)
                    .observe(a.at.elapsed().as_secs_f64());
            }
            // A takeover's plan may have been overtaken by a later one before the bridge got
            // to it: the first takeover among the plans this apply covers counts.
            let takeover = r.applied.filter(|_| r.announces).and_then(|now| {
                (before + 1..=now)
                    .rev()
                    .take(64)
                    .filter_map(|g| arrived(Some(g)))
                    .filter(|a| a.takeover)
                    .map(|a| a.at)
                    .min()
            });
            if let Some(at) = takeover {
                m.announce_takeover_seconds
                    .get_or_create(target)
                    .observe(at.elapsed().as_secs_f64());
            }
        }
        if *r.error != self.error {
            if let Some(e) = r.error {
                m.error(e.kind.metric_label());
            }
            self.error = r.error.clone();
        }
    }
}

/// Follow the reconcilers: metrics, readiness, the status document, Events.
#[allow(clippy::too_many_arguments)]
pub(super) async fn observe_agent(
    cfg: Config,
    mut bridges: Vec<(String, watch::Receiver<BridgeStatus>)>,
    mut nb_status: Option<watch::Receiver<nb::NorthboundStatus>>,
    opts: AgentOptions,
    mut plans: watch::Receiver<Option<Arc<PlanInfo>>>,
    received: Arrivals,
    ready: watch::Sender<bool>,
    json: watch::Sender<Option<StatusDoc>>,
    mut announce: watch::Receiver<Option<Arc<crate::plan::planner::AnnounceState>>>,
    mut frr: Option<watch::Receiver<crate::reconcile::frr::FrrStatus>>,
) {
    use crate::metrics::Metrics;
    let m = &opts.metrics;
    let mut leader = opts.leader.clone();
    let mut pools = opts.pools.clone();
    let mut seen_bridges: Vec<Seen> = bridges.iter().map(|_| Seen::default()).collect();
    let mut seen_nb = Seen::default();
    let mut seen_frr = Seen::default();
    let mut frr_error: Option<String> = None;
    let announcing = crate::announce::Announcing::of(&cfg);
    // The VipProgrammed statements of the last plan every bridge applied.
    let mut programmed = crate::events::Programmed::default();
    // The plan and applied state the Events were last updated for.
    let mut events_for: Option<(u64, bool)> = None;
    // The plan whose records went to the record writer.
    let mut records_for: Option<u64> = None;
    loop {
        let plan = plans.borrow_and_update().clone();
        let arrived = |g: Option<u64>| {
            let r = received.lock().unwrap_or_else(|p| p.into_inner());
            g.and_then(|g| r.get(&g).copied())
        };
        if let Some(p) = &plan {
            m.vips.set(i64::try_from(p.vips.len()).unwrap_or(i64::MAX));
            m.problems
                .set(i64::try_from(p.problems.len()).unwrap_or(i64::MAX));
        }
        let is_leader = leader.as_ref().is_none_or(|l| *l.borrow());
        m.leader.set(i64::from(leader.is_some() && is_leader));
        let mut all_applied = !bridges.is_empty() || nb_status.is_some();
        let mut min_applied: Option<u64> = None;
        let mut bridge_docs = Vec::new();
        for ((name, st), seen) in bridges.iter_mut().zip(&mut seen_bridges) {
            let s = st.borrow_and_update().clone();
            let target = Metrics::target(&format!("bridge/{name}"));
            m.flows
                .get_or_create(&target)
                .set(i64::try_from(s.flows).unwrap_or(i64::MAX));
            m.connected
                .get_or_create(&Metrics::peer(&format!("openflow/{name}")))
                .set(i64::from(s.connected));
            seen.follow(
                m,
                &target,
                Report {
                    syncs: s.syncs,
                    last_sync: s.last_sync,
                    applied: s.applied_generation,
                    error: &s.last_error,
                    announces: announcing.bridge(name),
                },
                &arrived,
            );
            all_applied &= s.applied_generation.is_some();
            min_applied = Some(
                min_applied.map_or(s.applied_generation.unwrap_or(0), |x: u64| {
                    x.min(s.applied_generation.unwrap_or(0))
                }),
            );
            bridge_docs.push(BridgeDoc {
                name: name.clone(),
                connected: s.connected,
                flows: s.flows,
                applied_generation: s.applied_generation,
                skipped: s.skipped.clone(),
                last_error: s.last_error.as_ref().map(ToString::to_string),
                full_syncs: s.full_syncs,
                problems: s.problems.iter().map(ToString::to_string).collect(),
            });
        }
        let mut nb_doc = None;
        if let Some(st) = &mut nb_status {
            let s = st.borrow_and_update().clone();
            let target = Metrics::target("northbound");
            m.nb_rows.set(i64::try_from(s.rows).unwrap_or(i64::MAX));
            m.connected
                .get_or_create(&Metrics::peer("ovsdb/northbound"))
                .set(i64::from(s.connected));
            seen_nb.follow(
                m,
                &target,
                Report {
                    syncs: s.syncs,
                    last_sync: s.last_sync,
                    applied: s.applied_generation,
                    error: &s.last_error,
                    announces: false,
                },
                &arrived,
            );
            if is_leader {
                all_applied &= s.applied_generation.is_some();
            }
            nb_doc = Some(NorthboundDoc {
                writer: is_leader,
                connected: s.connected,
                rows: s.rows,
                applied_generation: s.applied_generation,
                problems: s.problems.clone(),
                last_error: s.last_error.as_ref().map(ToString::to_string),
                transactions: s.transactions,
            });
        }
        let frr_now = frr.as_mut().map(|rx| rx.borrow_and_update().clone());
        if let Some(s) = &frr_now {
            follow_frr(m, s, &mut seen_frr, &mut frr_error, &arrived);
        }
        ready.send_if_modified(|r| {
            let changed = *r != all_applied;
            *r = all_applied;
            changed
        });
        if let Some(p) = &plan {
            let applied_here = min_applied.is_some_and(|g| g >= p.generation);
            let ann = announce.borrow_and_update().clone();
            // Events change only with the plan or with whether it is applied here (the sink
            // publishes what the rate limit held back by itself).
            if let Some(ev) = &opts.events
                && events_for != Some((p.generation, applied_here))
            {
                events_for = Some((p.generation, applied_here));
                let announced = if applied_here {
                    p.announced.clone()
                } else {
                    BTreeSet::new()
                };
                ev.say(crate::events::with_programmed(
                    p.warnings.clone(),
                    &p.programmed,
                    announced,
                    applied_here,
                    &mut programmed,
                ));
            }
            // A record names this node only once its answers are on the switch.
            if let Some(rw) = &opts.records
                && applied_here
                && records_for != Some(p.generation)
            {
                records_for = Some(p.generation);
                rw.update(p.records.clone());
            }
            let vips = p.vips.clone();
            let _ = json.send(Some(StatusDoc {
                node: cfg.node_name.clone(),
                generation: p.generation,
                ready: all_applied,
                leader: leader.as_ref().map(|_| is_leader),
                vips,
                problems: p.problems.iter().map(ToString::to_string).collect(),
                bridges: bridge_docs,
                northbound: nb_doc,
                pools: pools
                    .as_mut()
                    .map(|p| p.borrow_and_update().to_vec())
                    .unwrap_or_default(),
                announce: ann.as_ref().map(|a| {
                    crate::status::AnnounceDoc::with(
                        a.live.iter().map(|n| n.to_string()).collect(),
                        a.here.clone(),
                        &a.unadvertised,
                    )
                }),
                bgp: frr_now.as_ref().map(|s| {
                    let vips = p.bgp.as_ref().map(|b| b.vips.as_ref());
                    let mut doc = crate::status::BgpDoc::with(
                        vips.unwrap_or(&Default::default()),
                        &s.originated,
                        &s.sessions,
                        &s.bfd,
                    );
                    doc.asn = s.asn;
                    doc.current = s.current;
                    doc.batches = s.batches;
                    doc.last_error.clone_from(&s.last_error);
                    doc
                }),
            }));
        }
        // Wait for any change.
        // (select_all panics on an empty list.)
        let has_bridges = !bridges.is_empty();
        let bridge_changed = async {
            if has_bridges {
                let _ = futures::future::select_all(
                    bridges.iter_mut().map(|(_, st)| Box::pin(st.changed())),
                )
                .await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        let nb_changed = async {
            match &mut nb_status {
                Some(st) => st.changed().await,
                None => std::future::pending().await,
            }
        };
        let leader_changed = async {
            match &mut leader {
                Some(l) => l.changed().await,
                None => std::future::pending().await,
            }
        };
        let pools_changed = async {
            match &mut pools {
                Some(p) => p.changed().await,
                None => std::future::pending().await,
            }
        };
        let frr_changed = async {
            match &mut frr {
                Some(f) => f.changed().await,
                None => std::future::pending().await,
            }
        };
        let plans_changed = plans.changed();
        tokio::select! {
            r = frr_changed => if r.is_err() { frr = None },
            r = plans_changed => if r.is_err() { return },
            _ = announce.changed() => {}
            _ = bridge_changed => {}
            _ = nb_changed => {}
            _ = leader_changed => {}
            _ = pools_changed => {}
        }
    }
}

/// The FRR task's metrics: its sessions, what it advertises, each batch, and the time from a
/// plan's trigger to FRR having its prefixes.
fn follow_frr(
    m: &crate::metrics::Metrics,
    s: &crate::reconcile::frr::FrrStatus,
    seen: &mut Seen,
    error: &mut Option<String>,
    arrived: &dyn Fn(Option<u64>) -> Option<Arrival>,
) {
    use crate::metrics::{BfdLabel, BgpSessionLabel};
    for b in &s.sessions {
        m.bgp_session_up
            .get_or_create(&BgpSessionLabel {
                peer: b.peer.to_string(),
                family: b.family.clone(),
            })
            .set(i64::from(b.established()));
    }
    for b in &s.bfd {
        m.bfd_up
            .get_or_create(&BfdLabel {
                peer: b.peer.to_string(),
            })
            .set(i64::from(b.up()));
    }
    m.bgp_advertised_prefixes
        .set(i64::try_from(s.originated.len()).unwrap_or(i64::MAX));
    seen.follow(
        m,
        &crate::metrics::Metrics::target("frr"),
        Report {
            syncs: s.batches,
            last_sync: s.last_batch,
            applied: s.applied_generation,
            error: &None,
            announces: false,
        },
        arrived,
    );
    if s.last_error != *error {
        if s.last_error.is_some() {
            m.error("frr");
        }
        error.clone_from(&s.last_error);
    }
}
