//! Kubernetes Events on Services: what happened to their VIPs, told once.
//!
//! - Events are computed as a *difference*: a Service gets an event when what there is to say
//!   about it changes (a VIP programmed on this node, a VIP skipped and why, a conflict lost,
//!   a VIP not excluded from a subnet), not on every re-plan: each statement is published once
//!   while it holds.
//! - A token bucket caps the rate across all Services, so a storm of changes never becomes a
//!   storm of API writes; events over the cap are dropped and counted.

use crate::model::{Problem, ProblemKind, ServiceKey};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// One statement about one Service.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServiceEvent {
    pub service: ServiceKey,
    pub warning: bool,
    /// PascalCase reason: VipProgrammed, VipAnnounced, VipSkipped, VipConflict,
    /// VipNotExcluded.
    pub reason: &'static str,
    /// Shared: the statements are copied between the report, the observer and the sink,
    /// one per Service each.
    pub note: std::sync::Arc<str>,
}

/// What to say about each Service with VIPs once this node has applied its plan: its VIPs
/// are programmed here (Normal). `services` gives each Service's VIPs in order.
pub fn programmed<'a>(
    services: impl IntoIterator<Item = (&'a ServiceKey, Vec<std::net::IpAddr>)>,
    node: &str,
) -> BTreeSet<ServiceEvent> {
    let mut out = BTreeSet::new();
    for (key, vips) in services {
        if vips.is_empty() {
            continue;
        }
        let vips: Vec<String> = vips.iter().map(|v| v.to_string()).collect();
        out.insert(ServiceEvent {
            service: key.clone(),
            warning: false,
            reason: "VipProgrammed",
            note: format!("VIPs {} programmed on node {node}", vips.join(", ")).into(),
        });
    }
    out
}

/// What to say about the Services that have problems (Warning), by the problem's kind.
pub fn warnings(problems: &[Problem]) -> BTreeSet<ServiceEvent> {
    let mut out = BTreeSet::new();
    for p in problems {
        let Some(key) = p.service() else {
            continue;
        };
        let reason = match p.kind {
            ProblemKind::ConflictLost => "VipConflict",
            _ => "VipSkipped",
        };
        let note = match &p.vip {
            Some(v) => format!("{v}: {}", p.reason),
            None => p.reason.clone(),
        };
        out.insert(ServiceEvent {
            service: key.clone(),
            warning: true,
            reason,
            note: note.into(),
        });
    }
    out
}

/// What to say about the Services whose VIPs this node announces ([`crate::announce`]): one
/// VipAnnounced statement per Service, naming its VIPs `here` and this node. Published by the
/// node that takes a VIP when it takes it (a statement is published once while it holds), so
/// every change of owner is an Event from the new owner.
pub fn announced(
    vips: &crate::agent::vip_list::VipList,
    here: &[std::net::IpAddr],
    node: &str,
) -> BTreeSet<ServiceEvent> {
    let mut per_service: std::collections::BTreeMap<ServiceKey, Vec<String>> =
        std::collections::BTreeMap::new();
    for vip in here {
        for svc in vips.services_of(*vip) {
            per_service.entry(svc).or_default().push(vip.to_string());
        }
    }
    per_service
        .into_iter()
        .map(|(svc, vips)| ServiceEvent {
            service: svc,
            warning: false,
            reason: "VipAnnounced",
            note: format!(
                "VIPs {} announced by node {node} (it answers ARP/ND for them)",
                vips.join(", ")
            )
            .into(),
        })
        .collect()
}

/// The VipProgrammed and VipAnnounced statements of the last plan this node applied, kept
/// while a newer plan is on its way. The plan's own set is shared, not copied: at 10,000
/// Services a copy is a B-tree of 10,000 statements.
#[derive(Debug, Default)]
pub struct Programmed {
    plan: std::sync::Arc<BTreeSet<ServiceEvent>>,
    announced: BTreeSet<ServiceEvent>,
}

/// What to say now: the current plan's `warnings` and, once this node has `applied` it, its
/// `programmed` and `announced` statements (remembered in `held`). Until then, those of the
/// last plan it applied: dropping them in the meantime would publish them again once the new
/// plan lands, on every change.
pub fn with_programmed(
    mut warnings: BTreeSet<ServiceEvent>,
    programmed: &std::sync::Arc<BTreeSet<ServiceEvent>>,
    announced: BTreeSet<ServiceEvent>,
    applied: bool,
    held: &mut Programmed,
) -> BTreeSet<ServiceEvent> {
    if applied {
        *held = Programmed {
            plan: std::sync::Arc::clone(programmed),
            announced,
        };
    }
    warnings.extend(held.plan.iter().cloned());
    warnings.extend(held.announced.iter().cloned());
    warnings
}

/// Findings of the excludeIps check, attributed to the Services owning each VIP.
pub fn not_excluded(
    vips: &crate::agent::vip_list::VipList,
    findings: &[(std::net::IpAddr, String)],
) -> BTreeSet<ServiceEvent> {
    let mut out = BTreeSet::new();
    for (vip, text) in findings {
        for svc in vips.services_of(*vip) {
            out.insert(ServiceEvent {
                service: svc,
                warning: true,
                reason: "VipNotExcluded",
                note: text.as_str().into(),
            });
        }
    }
    out
}

/// A simple token bucket.
struct Bucket {
    tokens: f64,
    burst: f64,
    per_second: f64,
    last: Instant,
}

impl Bucket {
    fn take(&mut self) -> bool {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.last).as_secs_f64() * self.per_second)
            .min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Counters for metrics.
#[derive(Debug, Default)]
pub struct EventCounters {
    pub published: AtomicU64,
    pub dropped: AtomicU64,
    pub failed: AtomicU64,
}

/// Sends statements to the API server; only new or changed ones are published.
#[derive(Clone)]
pub struct EventSink {
    tx: mpsc::UnboundedSender<BTreeSet<ServiceEvent>>,
    pub counters: Arc<EventCounters>,
}

impl EventSink {
    /// Start the publisher. `controller` is the reporting controller name (vipflow), `instance`
    /// this agent (its node), so events say where they come from.
    pub fn start(
        client: Client,
        controller: &str,
        instance: &str,
        per_second: f64,
        burst: u32,
    ) -> EventSink {
        let reporter = Reporter {
            controller: controller.into(),
            instance: Some(instance.into()),
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let counters = Arc::new(EventCounters::default());
        tokio::spawn(publish(
            client,
            reporter,
            rx,
            counters.clone(),
            per_second,
            burst,
        ));
        EventSink { tx, counters }
    }

    /// The current statements (the whole set; the sink works out what is new).
    pub fn update(&self, now: BTreeSet<ServiceEvent>) {
        let _ = self.tx.send(now);
    }
}

async fn publish(
    client: Client,
    reporter: Reporter,
    mut rx: mpsc::UnboundedReceiver<BTreeSet<ServiceEvent>>,
    counters: Arc<EventCounters>,
    per_second: f64,
    burst: u32,
) {
    let mut bucket = Bucket {
        tokens: f64::from(burst),
        burst: f64::from(burst),
        per_second,
        last: Instant::now(),
    };
    // Statements already published and still true: said once, not again.
    let mut said: BTreeSet<ServiceEvent> = BTreeSet::new();
    while let Some(mut now) = rx.recv().await {
        // Only the latest set matters if several queued up.
        while let Ok(newer) = rx.try_recv() {
            now = newer;
        }
        // A statement that stopped being true may be published again if it comes back.
        said.retain(|e| now.contains(e));
        for ev in now {
            if said.contains(&ev) {
                continue;
            }
            if !bucket.take() {
                counters.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let reference = ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Service".into()),
                namespace: Some(ev.service.namespace.to_string()),
                name: Some(ev.service.name.to_string()),
                ..Default::default()
            };
            let event = Event {
                type_: if ev.warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: ev.reason.into(),
                note: Some(truncate(&ev.note, 1020)),
                action: "Reconcile".into(),
                secondary: None,
            };
            match tokio::time::timeout(
                Duration::from_secs(10),
                // A fresh Recorder each time: the Recorder folds repeats by (reason, object)
                // without looking at the note, which would merge distinct statements (and keep
                // a stale note); we publish each statement once while it holds anyway.
                Recorder::new(client.clone(), reporter.clone()).publish(&event, &reference),
            )
            .await
            {
                Ok(Ok(())) => {
                    counters.published.fetch_add(1, Ordering::Relaxed);
                    said.insert(ev);
                }
                Ok(Err(e)) => {
                    counters.failed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(service = %ev.service, reason = ev.reason, error = %e, "cannot publish event");
                }
                Err(_) => {
                    counters.failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// Events notes are limited to 1 KiB by the API server.
fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announced_names_each_service_once_with_the_vips_this_node_announces() {
        use crate::agent::status::VipDoc;
        let web = ServiceKey::new("shop", "web");
        let api = ServiceKey::new("shop", "api");
        let doc = |vip: &str, services: Vec<ServiceKey>| VipDoc {
            vip: vip.parse().unwrap(),
            ports: Vec::new(),
            services,
        };
        // In VIP order, as the plan has them; 192.0.2.2 is shared by both Services.
        let vips: crate::agent::vip_list::VipList = vec![
            doc("192.0.2.1", vec![web.clone()]),
            doc("192.0.2.2", vec![api.clone(), web.clone()]),
            doc("192.0.2.3", vec![api.clone()]),
            doc("2001:db8::1", vec![web.clone()]),
        ]
        .into();
        let here: Vec<std::net::IpAddr> = ["192.0.2.2", "2001:db8::1", "198.51.100.9"]
            .iter()
            .map(|v| v.parse().unwrap())
            .collect();
        let got: Vec<(String, String)> = announced(&vips, &here, "node-a")
            .into_iter()
            .map(|e| {
                assert_eq!((e.reason, e.warning), ("VipAnnounced", false));
                (e.service.to_string(), e.note.to_string())
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "shop/api".to_string(),
                    "VIPs 192.0.2.2 announced by node node-a (it answers ARP/ND for them)"
                        .to_string()
                ),
                (
                    "shop/web".to_string(),
                    "VIPs 192.0.2.2, 2001:db8::1 announced by node node-a (it answers ARP/ND for them)"
                        .to_string()
                ),
            ]
        );
        // Nothing announced, nothing said.
        assert!(announced(&vips, &[], "node-a").is_empty());
    }

    fn ev(reason: &'static str, note: &str) -> ServiceEvent {
        ServiceEvent {
            service: ServiceKey::new("shop", "web"),
            warning: false,
            reason,
            note: note.into(),
        }
    }

    #[test]
    fn programmed_statements_hold_while_a_plan_is_in_flight() {
        use std::sync::Arc;
        let mut held = Programmed::default();
        let skipped = BTreeSet::from([ev("VipSkipped", "x")]);
        let first = Arc::new(BTreeSet::from([ev("VipProgrammed", "VIPs 1.2.3.4")]));
        let announced = BTreeSet::from([ev("VipAnnounced", "VIPs 1.2.3.4 announced")]);
        let applied: BTreeSet<ServiceEvent> = skipped
            .iter()
            .chain(first.iter())
            .chain(announced.iter())
            .cloned()
            .collect();
        assert_eq!(
            with_programmed(skipped.clone(), &first, announced, true, &mut held),
            applied
        );
        // A new plan, not yet applied: the warning is still true, what the last applied plan
        // programmed and announced is held, the new plan's statements wait.
        let second = Arc::new(BTreeSet::from([ev(
            "VipProgrammed",
            "VIPs 1.2.3.4, 5.6.7.8",
        )]));
        assert_eq!(
            with_programmed(skipped, &second, BTreeSet::new(), false, &mut held),
            applied
        );
        // Applied, with a new VIP set and nothing announced: the new statement replaces the old.
        assert_eq!(
            with_programmed(BTreeSet::new(), &second, BTreeSet::new(), true, &mut held),
            *second
        );
    }

    #[test]
    fn events_follow_the_problem_kind_not_its_wording() {
        use crate::model::{Problem, Subject};
        let web = ServiceKey::new("shop", "web");
        let problems = [
            Problem::new(
                Subject::Service(web.clone()),
                ProblemKind::ConflictLost,
                "worded any way at all",
            )
            .with_vip(Some("192.0.2.1:80/TCP".into())),
            Problem::new(
                Subject::Service(web.clone()),
                ProblemKind::Invalid,
                "conflict lost (in the text, but not the kind)",
            ),
            // Not about a Service: no Event.
            Problem::new(Subject::Node("n".into()), ProblemKind::Invalid, "x"),
        ];
        let got = warnings(&problems);
        let reasons: Vec<_> = got.iter().map(|e| (e.reason, e.service.clone())).collect();
        assert_eq!(reasons.len(), 2, "{got:?}");
        assert!(reasons.contains(&("VipConflict", web.clone())));
        assert!(reasons.contains(&("VipSkipped", web)));
    }
}
