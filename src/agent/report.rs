//! The report task: problems, Events and the status document of each plan, derived from
//! what the planner knows ([`crate::plan::service_report`]) at its own pace, off the planning
//! path.

use crate::agent::report_problems;
use crate::config::Config;
use crate::model::Loaded;
use crate::model::Objects;
use crate::model::Problem;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
/// What the planner produced for one generation, for the observer.
pub(super) struct PlanInfo {
    pub generation: u64,
    /// Every VIP, its ports and Services, for the status document (shared with it).
    pub vips: crate::status::VipList,
    pub problems: Vec<Problem>,
    /// The Events that say a Service's VIPs are programmed (once every bridge applied this
    /// plan), and those that warn (skipped VIPs, conflicts, VIPs IPAM could hand out).
    pub programmed: crate::events::ProgrammedVips,
    pub warnings: BTreeSet<crate::events::ServiceEvent>,
    /// The VipAnnounced statements (once this plan is applied here).
    pub announced: BTreeSet<crate::events::ServiceEvent>,
    /// The records of who announces what this node owes the Services (once this plan is
    /// applied here).
    pub records: Vec<crate::announce::record::Want>,
    /// Whether this node advertises each VIP of a BGP pool, and why, when it speaks BGP.
    pub bgp: Option<crate::plan::bgp_node::NodeBgp>,
}

/// One plan as the report task takes it: the objects it was made from and the planner's
/// Services.
#[derive(Debug)]
pub struct Planned {
    pub generation: u64,
    pub loaded: Arc<Loaded>,
    pub services: crate::plan::service_report::ServiceReport,
    /// Where every VIP is announced, when a bridge announces.
    pub announce: Option<Arc<crate::plan::planner::AnnounceState>>,
    /// What this node advertises over BGP and why, when it speaks BGP.
    pub bgp: Option<crate::plan::bgp_node::NodeBgp>,
}

impl PlanInfo {
    /// What the report task says about one plan: built off the async workers from what the
    /// planner knows, so the observer only picks from it. Without `events` (no Events are sent:
    /// the file source), no Event statements: one per Service is a lot to keep for nobody.
    fn of(cfg: &Config, events: bool, planned: &Planned) -> PlanInfo {
        let Planned {
            generation,
            loaded,
            services,
            announce,
            bgp,
        } = planned;
        let problems = report_problems(cfg, loaded, services);
        let vips = crate::status::VipList::of(services.clone());
        let (mut programmed, mut warnings) = (Default::default(), BTreeSet::new());
        let (mut announced, mut records) = (BTreeSet::new(), Vec::new());
        if events {
            let not_excluded = if loaded.objects.subnets.is_empty() {
                Vec::new()
            } else {
                let vip_set: BTreeSet<std::net::IpAddr> =
                    services.won().map(|(c, _)| c.0).collect();
                kubeovn_findings(&loaded.objects, &vip_set)
            };
            programmed = crate::events::ProgrammedVips::of(services, &cfg.node_name);
            warnings = crate::events::warnings(&problems);
            warnings.extend(crate::events::not_excluded(&vips, &not_excluded));
            if let Some(a) = announce {
                let plan = records_of(&cfg.node_name, a, loaded, services);
                announced = crate::events::announced(&plan.here, &cfg.node_name);
                records = plan.writes;
            }
        }
        PlanInfo {
            generation: *generation,
            vips,
            problems,
            programmed,
            warnings,
            announced,
            records,
            bgp: bgp.clone(),
        }
    }
}

/// What this node owes the Services' records, and what it announces of each
/// ([`crate::announce::record`]).
fn records_of(
    node: &str,
    announce: &crate::plan::planner::AnnounceState,
    loaded: &Loaded,
    services: &crate::plan::service_report::ServiceReport,
) -> crate::announce::record::RecordPlan {
    use crate::announce::record;
    let current: std::collections::HashMap<crate::model::ServiceKey, &str> = (loaded.objects)
        .services
        .iter()
        .filter_map(|s| Some((s.key()?, s.status.as_ref()?.announced.as_deref()?)))
        .collect();
    let by_service = services.vips_by_service();
    let view = record::View {
        node,
        owners: &announce.owners,
        live: &announce.live,
    };
    record::plan(
        &view,
        by_service.iter().map(|(k, v)| (*k, v.as_slice())),
        &current,
    )
}

/// Problems, Events and the status document of the latest plan. Off the planning path: a
/// burst of plans is reported once, for the latest. The first report waits for the first sync
/// (`ready`), at most [`FIRST_REPORT_WAIT`]: it has a statement and a status entry for every
/// Service to build, and at startup, on a busy node, the sync goes first.
pub(super) async fn report(
    cfg: Config,
    events: bool,
    mut snapshots: watch::Receiver<Option<Arc<Planned>>>,
    plans: watch::Sender<Option<Arc<PlanInfo>>>,
    mut ready: watch::Receiver<bool>,
) {
    let _ = tokio::time::timeout(FIRST_REPORT_WAIT, ready.wait_for(|r| *r)).await;
    // What the first sync built and dropped (a database snapshot, every flow's encoding).
    let _ = tokio::task::spawn_blocking(crate::memory::give_back).await;
    let mut reported: BTreeSet<String> = BTreeSet::new();
    let reporter = Reporter::start(&cfg, events);
    while snapshots.changed().await.is_ok() {
        let Some(planned) = snapshots.borrow_and_update().clone() else {
            continue;
        };
        let began = std::time::Instant::now();
        let Some(info) = reporter.report(planned).await else {
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
    Thread(std::sync::mpsc::Sender<(Arc<Planned>, tokio::sync::oneshot::Sender<PlanInfo>)>),
    /// The thread could not be started: the runtime's blocking threads.
    Blocking(Box<Config>, bool),
}

impl Reporter {
    fn start(cfg: &Config, events: bool) -> Reporter {
        let (tx, rx) =
            std::sync::mpsc::channel::<(Arc<Planned>, tokio::sync::oneshot::Sender<PlanInfo>)>();
        let c = cfg.clone();
        let spawned = std::thread::Builder::new()
            .name("vipflow-report".into())
            .spawn(move || {
                lowest_priority();
                while let Ok((planned, reply)) = rx.recv() {
                    let info = PlanInfo::of(&c, events, &planned);
                    // What was built on the way is gone: its pages go back now, not kept
                    // resident between what lives on.
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

    async fn report(&self, planned: Arc<Planned>) -> Option<PlanInfo> {
        match self {
            Reporter::Thread(tx) => {
                let (reply, rx) = tokio::sync::oneshot::channel();
                tx.send((planned, reply)).ok()?;
                rx.await.ok()
            }
            &Reporter::Blocking(ref cfg, events) => {
                let c = (**cfg).clone();
                tokio::task::spawn_blocking(move || PlanInfo::of(&c, events, &planned))
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
mod tests {
    use super::*;
    use crate::agent::build_model_without_slices;
    use crate::model::Model;
    use crate::status::{PortDoc, VipDoc};
    use std::collections::BTreeMap;

    /// The status document's VIPs as a map of a set per VIP makes them from a model of every
    /// Service: the reference.
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
    fn the_planners_vips_are_a_models_grouped_with_their_ports_in_model_order_and_services_sorted()
    {
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
        let loaded = crate::decode::parse(&yaml).expect("fixture parses");
        let opts = crate::model::ModelOptions::default();
        let model = Model::build(&loaded.objects, &opts);
        let mut index = crate::plan::service_index::ServiceIndex::new(opts, &[], 0x7f1f);
        index.update(&loaded.objects);
        let list = crate::status::VipList::of(index.report());
        let docs: Vec<VipDoc> = list.iter().collect();
        assert_eq!(docs, by_maps(&model));
        // What Events look up, and the metric, agree with the documents.
        assert_eq!(list.len(), docs.len());
        for d in &docs {
            assert_eq!(list.services_of(d.vip), d.services, "{}", d.vip);
        }
        assert!(list.services_of("198.51.100.1".parse().unwrap()).is_empty());
        // Read back from JSON, the list is the same.
        let back: crate::status::VipList =
            serde_json::from_value(serde_json::to_value(&list).unwrap()).unwrap();
        assert_eq!(back, list);
        let shared = docs
            .iter()
            .find(|d| d.vip.to_string() == "192.0.2.1")
            .expect("the shared VIP");
        let names: Vec<String> = shared.services.iter().map(|k| k.to_string()).collect();
        assert_eq!(names, ["a/web", "b/web"]);
        let ports: Vec<String> = shared.ports.iter().map(|p| p.to_string()).collect();
        assert_eq!(ports.len(), 3, "{ports:?}");
    }

    #[test]
    fn the_planners_problems_are_a_models_with_the_sources_and_this_nodes() {
        let items = [
            svc(
                "a",
                "old",
                "2024-01-01T00:00:00Z",
                "192.0.2.1",
                "{port: 80}",
            ),
            // Loses 192.0.2.1:80 to the older a/old; "bad" is no address.
            svc(
                "b",
                "new",
                "2024-01-02T00:00:00Z",
                "192.0.2.1, bad",
                "{port: 80}",
            ),
            // Listed twice; the second one is not used.
            svc(
                "a",
                "old",
                "2024-01-03T00:00:00Z",
                "192.0.2.7",
                "{port: 81}",
            ),
            "- apiVersion: discovery.k8s.io/v1\n  kind: EndpointSlice\n  metadata: {name: old-1, \
             namespace: a, labels: {kubernetes.io/service-name: old}}\n  addressType: IPv4\n  \
             ports: [{port: 0}]\n  endpoints: []\n"
                .to_string(),
            // Not an object this version reads: the source's problem.
            "- apiVersion: v2\n  kind: Service\n  metadata: {name: web, namespace: shop}\n"
                .to_string(),
            // This node, without a readable gateway router MAC.
            "- apiVersion: v1\n  kind: Node\n  metadata: {name: node-a, annotations: \
             {k8s.ovn.org/l3-gateway-config: 'not json'}}\n"
                .to_string(),
        ];
        let yaml = format!("apiVersion: v1\nkind: List\nitems:\n{}", items.concat());
        let loaded = crate::decode::parse(&yaml).expect("fixture parses");
        let cfg = Config {
            node_name: "node-a".into(),
            ..Config::default()
        };
        let (_, want) = build_model_without_slices(&cfg, &loaded);
        let mut planner = crate::plan::planner::Planner::for_config(&cfg);
        planner.update(&loaded.objects);
        let have = report_problems(&cfg, &loaded, &planner.services().report());
        let text: Vec<String> = have.iter().map(|p| p.to_string()).collect();
        assert_eq!(have, want, "{text:#?}");
        let kinds = [
            "apiVersion",
            "port Some(0)",
            "listed twice",
            "conflict lost",
            "not an IP",
            "l3-gateway-config",
        ];
        for kind in kinds {
            assert!(text.iter().any(|t| t.contains(kind)), "{kind}: {text:#?}");
        }
    }
}
