//! The planner task: each complete snapshot of the source through the [`Planner`] (off the
//! async workers), handed to the reconcilers make before break (see [`crate::plan::order`]);
//! and the report task, which builds the full model for problems, Events and status at its own
//! pace.

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
    /// The objects of each generation, for the report task.
    pub reports: watch::Sender<Option<(u64, Arc<Loaded>)>>,
    pub generation: watch::Sender<u64>,
    pub nb_status: Option<watch::Receiver<nb::NorthboundStatus>>,
    pub bridge_status: Vec<watch::Receiver<BridgeStatus>>,
    pub leader: Option<watch::Receiver<bool>>,
    /// The membership's live nodes, when this agent runs one (announcing bridges).
    pub members: Option<watch::Receiver<crate::membership::task::LiveMembers>>,
    /// What this node announces after each plan, for the status document.
    pub announce: watch::Sender<Option<Arc<crate::plan::planner::AnnounceState>>>,
    pub metrics: Arc<crate::metrics::Metrics>,
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
            announce,
            metrics,
        } = self;
        let mut planner = Some(Planner::for_config(&cfg));
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
            if let Some(m) = &mut members {
                p.set_members(m.borrow_and_update().clone());
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
                let end = since + crate::membership::task::HANDOVER;
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
            let plans = match tokio::task::spawn_blocking(move || {
                let plans = p.update(&objs.objects);
                (p, plans)
            })
            .await
            {
                Ok((p, plans)) => {
                    planner = Some(p);
                    plans
                }
                Err(e) => {
                    tracing::error!(error = %e, "the planner failed; no more plans");
                    return;
                }
            };
            let generation = plans.generation;
            if let Some(a) = &plans.announce {
                let n = |x: usize| i64::try_from(x).unwrap_or(i64::MAX);
                metrics.announced_vips.set(n(a.here.len()));
                metrics.live_nodes.set(n(a.live.len()));
                metrics
                    .announce_takeovers
                    .inc_by(u64::try_from(plans.taken).unwrap_or(u64::MAX));
                announce.send_if_modified(|cur| {
                    let same = cur.as_ref().is_some_and(|c| Arc::ptr_eq(c, a));
                    if !same {
                        *cur = Some(Arc::clone(a));
                    }
                    !same
                });
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
            // The full model for problems, Events and status: built at its own pace.
            let _ = rtx.send(Some((generation, loaded)));
            let _ = gtx.send(generation);
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
                    wait_rows(&nb_status_rx, &leader, nb_step).await;
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
            tokio::select! {
                r = objects.changed() => if r.is_err() { return },
                live = members_changed => if !live { members = None },
                // The drain hold is over: plan again without this node.
                _ = held => {}
            }
        }
    }
}

/// What the planner produced for one generation, for the observer.
pub(super) struct PlanInfo {
    pub generation: u64,
    /// Every VIP, its ports and Services, for the status document (shared with it).
    pub vips: Arc<Vec<crate::agent::status::VipDoc>>,
    pub problems: Vec<Problem>,
    /// The Events that say a Service's VIPs are programmed (once every bridge applied this
    /// plan), and those that warn (skipped VIPs, conflicts, VIPs IPAM could hand out).
    pub programmed: Arc<BTreeSet<crate::events::ServiceEvent>>,
    pub warnings: BTreeSet<crate::events::ServiceEvent>,
}

impl PlanInfo {
    /// What the report task says about one snapshot: built off the async workers, once per
    /// plan, so the observer only picks from it. Without `events` (no Events are sent: the
    /// file source), no Event statements: one per Service is a lot to keep for nobody.
    fn of(cfg: &Config, events: bool, generation: u64, loaded: &Loaded) -> PlanInfo {
        let (model, problems) = build_model_without_slices(cfg, loaded);
        let vips = vip_docs(&model);
        let (mut programmed, mut warnings) = (Arc::default(), BTreeSet::new());
        if events {
            let vip_set: BTreeSet<std::net::IpAddr> = vips.iter().map(|d| d.vip).collect();
            let not_excluded = kubeovn_findings(&loaded.objects, &vip_set);
            programmed = Arc::new(crate::events::statements(&model, &[], &cfg.node_name, true));
            warnings = crate::events::statements(&model, &problems, &cfg.node_name, false);
            warnings.extend(crate::events::not_excluded(&model, &not_excluded));
        }
        PlanInfo {
            generation,
            vips: Arc::new(vips),
            problems,
            programmed,
            warnings,
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

/// Every VIP of `model` with its ports and Services, in VIP order. Every VIP:port in the
/// model's order (Services by key, each one's VIP:ports sorted), grouped by VIP with a stable
/// sort: each VIP's ports keep that order and its Services come out sorted. One vector for the
/// whole model, where a map of a set per VIP was an allocation per VIP for a moment.
fn vip_docs(model: &Model) -> Vec<crate::agent::status::VipDoc> {
    use crate::agent::status::{PortDoc, VipDoc};
    let mut all: Vec<(std::net::IpAddr, &crate::model::ServiceKey, PortDoc)> = model
        .vip_ports()
        .map(|(k, vp)| {
            let port = PortDoc {
                port: vp.port,
                protocol: vp.protocol,
            };
            (vp.vip, k, port)
        })
        .collect();
    all.sort_by_key(|(vip, _, _)| *vip);
    all.chunk_by(|a, b| a.0 == b.0)
        .map(|group| {
            let mut services: Vec<crate::model::ServiceKey> = Vec::new();
            for (_, k, _) in group {
                if services.last() != Some(*k) {
                    services.push((*k).clone());
                }
            }
            services.shrink_to_fit();
            VipDoc {
                vip: group[0].0,
                services,
                ports: group.iter().map(|(_, _, p)| *p).collect(),
            }
        })
        .collect()
}

/// How long the planner waits for the other side of a make-before-break step (plan::order)
/// before it goes on anyway: a database or switch that does not answer must not hold every
/// later change back.
pub const ORDER_WAIT: Duration = Duration::from_secs(5);

/// Wait until the Northbound writer committed handover `step`, when this agent writes and the
/// writer is connected (a writer that is not, or another agent's, confirms nothing).
async fn wait_rows(
    nb_status: &Option<watch::Receiver<nb::NorthboundStatus>>,
    leader: &Option<watch::Receiver<bool>>,
    step: u64,
) {
    let Some(rx) = nb_status else { return };
    if leader.as_ref().is_some_and(|l| !*l.borrow()) {
        return;
    }
    let mut rx = rx.clone();
    let done = rx.wait_for(|s| !s.connected || s.applied_step.is_some_and(|a| a >= step));
    if tokio::time::timeout(ORDER_WAIT, done).await.is_err() {
        tracing::warn!(step, wait = ?ORDER_WAIT, "Northbound rows not confirmed in time; writing the flows anyway");
    }
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

/// Build the full model of the latest snapshot, for problems, Events and the status document.
/// Off the planning path: a burst of snapshots is reported once, for the latest.
/// The first report waits for the first sync (`ready`), at most [`FIRST_REPORT_WAIT`]: a
/// report holds a model of every object while it is built, and at startup, on a busy node, its
/// low-priority thread would hold that through the whole first sync, on top of what the sync
/// itself holds.
pub(super) async fn report(
    cfg: Config,
    events: bool,
    mut snapshots: watch::Receiver<Option<(u64, Arc<Loaded>)>>,
    plans: watch::Sender<Option<Arc<PlanInfo>>>,
    mut ready: watch::Receiver<bool>,
) {
    let _ = tokio::time::timeout(FIRST_REPORT_WAIT, ready.wait_for(|r| *r)).await;
    // What the first sync built and dropped (a database snapshot, every flow's encoding).
    let _ = tokio::task::spawn_blocking(crate::memory::give_back).await;
    let mut reported: BTreeSet<String> = BTreeSet::new();
    let reporter = Reporter::start(&cfg, events);
    while snapshots.changed().await.is_ok() {
        let Some((generation, loaded)) = snapshots.borrow_and_update().clone() else {
            continue;
        };
        let began = std::time::Instant::now();
        let Some(info) = reporter.report(generation, loaded).await else {
            continue;
        };
        // At most a fifth of a core: in a stream of changes the report skips to the latest
        // plan, and the planner and the reconcilers keep the rest.
        let rest = began.elapsed() * REPORT_IDLE;
        // Report each problem once while it lasts, not on every re-plan.
        let now: BTreeSet<String> = info.problems.iter().map(|p| p.to_string()).collect();
        for p in now.difference(&reported) {
            tracing::warn!(problem = %p, "skipped");
        }
        reported = now;
        let _ = plans.send(Some(Arc::new(info)));
        tokio::time::sleep(rest).await;
    }
}

/// Where reports are built: a thread of their own at the lowest scheduling priority, so that
/// on a busy node the planner and the reconcilers, which move traffic, always go first.
enum Reporter {
    Thread(std::sync::mpsc::Sender<(u64, Arc<Loaded>, tokio::sync::oneshot::Sender<PlanInfo>)>),
    /// The thread could not be started: the runtime's blocking threads.
    Blocking(Box<Config>, bool),
}

impl Reporter {
    fn start(cfg: &Config, events: bool) -> Reporter {
        let (tx, rx) =
            std::sync::mpsc::channel::<(u64, Arc<Loaded>, tokio::sync::oneshot::Sender<PlanInfo>)>(
            );
        let c = cfg.clone();
        let spawned = std::thread::Builder::new()
            .name("vipflow-report".into())
            .spawn(move || {
                lowest_priority();
                while let Ok((generation, loaded, reply)) = rx.recv() {
                    let info = PlanInfo::of(&c, events, generation, &loaded);
                    // The full model it was built from is gone: its pages go back now, not
                    // kept resident between what lives on.
                    crate::memory::give_back();
                    let _ = reply.send(info);
                }
            });
        match spawned {
            Ok(_) => Reporter::Thread(tx),
            Err(e) => {
                tracing::warn!(error = %e, "no thread for reports; they share the blocking threads");
                Reporter::Blocking(Box::new(cfg.clone()), events)
            }
        }
    }

    async fn report(&self, generation: u64, loaded: Arc<Loaded>) -> Option<PlanInfo> {
        match self {
            Reporter::Thread(tx) => {
                let (reply, rx) = tokio::sync::oneshot::channel();
                tx.send((generation, loaded, reply)).ok()?;
                rx.await.ok()
            }
            &Reporter::Blocking(ref cfg, events) => {
                let c = (**cfg).clone();
                tokio::task::spawn_blocking(move || PlanInfo::of(&c, events, generation, &loaded))
                    .await
                    .ok()
            }
        }
    }
}

/// Give the calling thread the lowest scheduling priority (nice 19); best effort.
fn lowest_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: gettid and setpriority only read and set this thread's scheduling attributes.
    unsafe {
        let tid = libc::gettid();
        let _ = libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19);
    }
}

/// How long the first report waits for the first sync.
const FIRST_REPORT_WAIT: Duration = Duration::from_secs(5);

/// How long the report task rests after a report, as a multiple of what the report took.
const REPORT_IDLE: u32 = 4;

/// The objects' Kube-OVN Subnets, as the excludeIps check takes them.
pub(super) fn kubeovn_subnets(objects: &Objects) -> Vec<crate::plan::exclude::KubeOvnSubnetIpam> {
    objects.subnets.iter().map(Into::into).collect()
}

/// Kube-OVN Subnets that would hand a VIP to a pod.
pub(super) fn kubeovn_findings(
    objects: &Objects,
    vips: &BTreeSet<std::net::IpAddr>,
) -> Vec<(std::net::IpAddr, String)> {
    use crate::plan::exclude::check_kubeovn;
    let subnets = kubeovn_subnets(objects);
    check_kubeovn(vips, &subnets)
        .into_iter()
        .filter_map(|f| Some((f.vip?, f.to_string())))
        .collect()
}

#[cfg(test)]
mod vip_docs_tests {
    use super::*;
    use crate::agent::status::{PortDoc, VipDoc};

    /// The status document's VIPs as a map of a set per VIP makes them: the reference.
    fn by_maps(model: &Model) -> Vec<VipDoc> {
        let mut ports: BTreeMap<std::net::IpAddr, Vec<PortDoc>> = BTreeMap::new();
        for (_, vp) in model.vip_ports() {
            ports.entry(vp.vip).or_default().push(PortDoc {
                port: vp.port,
                protocol: vp.protocol,
            });
        }
        model
            .vips()
            .into_iter()
            .map(|(vip, svcs)| VipDoc {
                vip,
                services: svcs.into_iter().cloned().collect(),
                ports: ports.remove(&vip).unwrap_or_default(),
            })
            .collect()
    }

    fn svc(ns: &str, name: &str, created: &str, ips: &str, ports: &str) -> String {
        format!(
            "- apiVersion: v1\n  kind: Service\n  metadata: {{name: {name}, namespace: {ns}, \
             creationTimestamp: \"{created}\"}}\n  spec:\n    type: ClusterIP\n    \
             externalIPs: [{ips}]\n    ports: [{ports}]\n"
        )
    }

    #[test]
    fn vips_are_grouped_with_their_ports_in_model_order_and_their_services_sorted() {
        let p = |n: u16, proto: &str| format!("{{port: {n}, protocol: {proto}}}");
        let items = [
            // Two Services share 192.0.2.1 on different ports; a third loses a conflict.
            svc(
                "b",
                "web",
                "2024-01-01T00:00:00Z",
                "192.0.2.1",
                &p(443, "TCP"),
            ),
            svc(
                "a",
                "web",
                "2024-01-02T00:00:00Z",
                "192.0.2.1, \"2001:db8::1\"",
                &format!("{}, {}", p(80, "TCP"), p(53, "UDP")),
            ),
            svc(
                "c",
                "late",
                "2024-02-01T00:00:00Z",
                "192.0.2.1",
                &p(443, "TCP"),
            ),
            svc(
                "a",
                "dns",
                "2024-01-03T00:00:00Z",
                "192.0.2.9",
                &p(53, "UDP"),
            ),
        ];
        let yaml = format!("apiVersion: v1\nkind: List\nitems:\n{}", items.concat());
        let loaded = crate::source::file::parse(&yaml).expect("fixture parses");
        let model = Model::build(&loaded.objects, &crate::model::ModelOptions::default());
        let docs = vip_docs(&model);
        assert_eq!(docs, by_maps(&model));
        let shared = docs
            .iter()
            .find(|d| d.vip.to_string() == "192.0.2.1")
            .expect("the shared VIP");
        let names: Vec<String> = shared.services.iter().map(|k| k.to_string()).collect();
        assert_eq!(names, ["a/web", "b/web"]);
        let ports: Vec<String> = shared.ports.iter().map(|p| p.to_string()).collect();
        assert_eq!(ports.len(), 3, "{ports:?}");
    }
}
