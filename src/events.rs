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
use xxhash_rust::xxh3::Xxh3;

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

/// What to say about a Service with VIPs once this node has applied its plan: its VIPs are
/// programmed here (Normal).
fn programmed_one(key: &ServiceKey, vips: &[std::net::IpAddr], node: &str) -> ServiceEvent {
    let vips: Vec<String> = vips.iter().map(|v| v.to_string()).collect();
    ServiceEvent {
        service: key.clone(),
        warning: false,
        reason: "VipProgrammed",
        note: format!("VIPs {} programmed on node {node}", vips.join(", ")).into(),
    }
}

/// The VipProgrammed statements of a plan, kept as what they are made from: each Service's
/// VIPs, with the digest its statement is known by. A statement per Service is a lot to hold
/// for what is said once; the sink makes the few it publishes. Made on the report thread,
/// so the sink only looks digests up.
#[derive(Clone, Default)]
pub struct ProgrammedVips {
    /// Every Service with VIPs, by key.
    services: Arc<[ProgrammedService]>,
    node: Arc<str>,
}

struct ProgrammedService {
    digest: u64,
    key: ServiceKey,
    /// Ascending.
    vips: Box<[std::net::IpAddr]>,
}

impl ProgrammedVips {
    /// The VIPs each Service wins in `report`, programmed on `node`.
    pub fn of(report: &crate::plan::service_report::ServiceReport, node: &str) -> ProgrammedVips {
        Self::made(report.vips_by_service().into_iter(), node)
    }

    /// Each Service's VIPs as given (by key, each ascending), programmed on `node`.
    pub fn listed(
        services: Vec<(ServiceKey, Vec<std::net::IpAddr>)>,
        node: &str,
    ) -> ProgrammedVips {
        Self::made(services.iter().map(|(k, v)| (k, v.clone())), node)
    }

    fn made<'a>(
        services: impl Iterator<Item = (&'a ServiceKey, Vec<std::net::IpAddr>)>,
        node: &str,
    ) -> ProgrammedVips {
        let services = services
            .filter(|(_, vips)| !vips.is_empty())
            .map(|(key, vips)| ProgrammedService {
                digest: programmed_digest(key, &vips, node),
                key: key.clone(),
                vips: vips.into(),
            })
            .collect();
        ProgrammedVips {
            services,
            node: node.into(),
        }
    }

    /// Every statement, made (for tests and for what reads them all).
    pub fn statements(&self) -> BTreeSet<ServiceEvent> {
        (self.services.iter())
            .map(|s| programmed_one(&s.key, &s.vips, &self.node))
            .collect()
    }
}

impl PartialEq for ProgrammedVips {
    fn eq(&self, other: &ProgrammedVips) -> bool {
        self.statements() == other.statements()
    }
}

impl std::fmt::Debug for ProgrammedVips {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.statements()).finish()
    }
}

/// What there is to say about Services now, as the sink takes it: statements, and the
/// VipProgrammed statements as what they are made from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sayings {
    pub statements: BTreeSet<ServiceEvent>,
    pub programmed: ProgrammedVips,
}

/// Who a statement is, as the sink remembers what it said: a 64-bit digest of its Service,
/// kind, reason and note, not the statement (a sink that said one for each of 10,000
/// Services keeps 10,000 digests). Two statements with one digest are about as likely as a
/// random collision of 64 bits; the cost would be one Event not published. Stable across
/// builds and Rust versions (xxh3 of the fields, each with its length), as it is kept in the
/// Events themselves and read back by the next instance.
fn digest(ev: &ServiceEvent) -> u64 {
    let mut h = Xxh3::new();
    field(&mut h, b"statement");
    field(&mut h, ev.service.namespace.as_bytes());
    field(&mut h, ev.service.name.as_bytes());
    field(&mut h, &[u8::from(ev.warning)]);
    field(&mut h, ev.reason.as_bytes());
    field(&mut h, ev.note.as_bytes());
    h.digest()
}

/// One field of a digest: its length first, so that no two lists of fields hash the same text.
fn field(h: &mut Xxh3, bytes: &[u8]) {
    h.update(&(bytes.len() as u64).to_le_bytes());
    h.update(bytes);
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
    plan: ProgrammedVips,
    announced: BTreeSet<ServiceEvent>,
}

/// What to say now: the current plan's `warnings` and, once this node has `applied` it, its
/// `programmed` and `announced` statements (remembered in `held`). Until then, those of the
/// last plan it applied: dropping them in the meantime would publish them again once the new
/// plan lands, on every change.
pub fn with_programmed(
    mut warnings: BTreeSet<ServiceEvent>,
    programmed: &ProgrammedVips,
    announced: BTreeSet<ServiceEvent>,
    applied: bool,
    held: &mut Programmed,
) -> Sayings {
    if applied {
        *held = Programmed {
            plan: programmed.clone(),
            announced,
        };
    }
    warnings.extend(held.announced.iter().cloned());
    Sayings {
        statements: warnings,
        programmed: held.plan.clone(),
    }
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
    tx: mpsc::UnboundedSender<Sayings>,
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
        let _ = self.tx.send(Sayings {
            statements: now,
            programmed: ProgrammedVips::default(),
        });
    }

    /// [`EventSink::update`] with VipProgrammed statements made only as they are published.
    pub fn say(&self, now: Sayings) {
        let _ = self.tx.send(now);
    }
}

async fn publish(
    client: Client,
    reporter: Reporter,
    mut rx: mpsc::UnboundedReceiver<Sayings>,
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
    // Statements already published and still true (their digests): said once, not again.
    let mut said: std::collections::HashSet<u64> = std::collections::HashSet::new();
    while let Some(mut now) = rx.recv().await {
        // Only the latest set matters if several queued up.
        while let Ok(newer) = rx.try_recv() {
            now = newer;
        }
        let due = to_say(now, &mut said, &mut || bucket.take(), &counters.dropped);
        for (d, ev) in due {
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
                    said.insert(d);
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

/// The statements of `now` not yet `said`, each with its digest, as many as `take` allows
/// (the rest counted as `dropped`); `said` forgets what stopped being true, so it is
/// published again if it comes back. A VipProgrammed statement is known by a digest of what
/// it is made from, and made only when it is to be published.
fn to_say(
    now: Sayings,
    said: &mut std::collections::HashSet<u64>,
    take: &mut dyn FnMut() -> bool,
    dropped: &AtomicU64,
) -> Vec<(u64, ServiceEvent)> {
    let Sayings {
        statements,
        programmed,
    } = now;
    let statements: Vec<(u64, ServiceEvent)> =
        (statements.into_iter()).map(|e| (digest(&e), e)).collect();
    let mut holds: std::collections::HashSet<u64> = statements.iter().map(|(d, _)| *d).collect();
    holds.extend(programmed.services.iter().map(|s| s.digest));
    said.retain(|d| holds.contains(d));
    drop(holds);
    let mut due = Vec::new();
    let mut room = |d: u64| {
        if said.contains(&d) {
            return false;
        }
        let ok = take();
        if !ok {
            dropped.fetch_add(1, Ordering::Relaxed);
        }
        ok
    };
    for (d, ev) in statements {
        if room(d) {
            due.push((d, ev));
        }
    }
    for s in programmed.services.iter() {
        if room(s.digest) {
            due.push((s.digest, programmed_one(&s.key, &s.vips, &programmed.node)));
        }
    }
    due
}

/// [`digest`] for the VipProgrammed statement of `key` with `vips` on `node`, from what it is
/// made of.
fn programmed_digest(key: &ServiceKey, vips: &[std::net::IpAddr], node: &str) -> u64 {
    let mut h = Xxh3::new();
    field(&mut h, b"VipProgrammed");
    field(&mut h, key.namespace.as_bytes());
    field(&mut h, key.name.as_bytes());
    for vip in vips {
        match vip {
            std::net::IpAddr::V4(v) => field(&mut h, &v.octets()),
            std::net::IpAddr::V6(v) => field(&mut h, &v.octets()),
        }
    }
    field(&mut h, node.as_bytes());
    h.digest()
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
#[path = "events_tests.rs"]
mod tests;
