//! Kubernetes Events on Services: what happened to their VIPs, told once. This module holds
//! what is said (statements, computed as differences); the agent crate's `event_sink` says it.
//!
//! - Events are computed as a *difference*: a Service gets an event when what there is to say
//!   about it changes (a VIP programmed on this node, a VIP skipped and why, a conflict lost,
//!   a VIP not excluded from a subnet), not on every re-plan: each statement is published once
//!   while it holds.
//! - A token bucket caps the rate across all Services, so a storm of changes never becomes a
//!   storm of API writes; statements over the cap stay due and go out, oldest first, as the
//!   budget allows (the agent crate's `event_sink`).
//! - Once across restarts and leader changes: each Event carries its sink and its statement's
//!   digest, and a sink learns what it said from the API server before it says anything
//!   (the agent crate's `event_sink`). The API server deletes Events after its `--event-ttl` (1 h by
//!   default); a statement that still holds after that is said again at the next start.

use crate::model::{Problem, ProblemKind, ServiceKey};
use std::collections::BTreeSet;
use std::sync::Arc;
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
pub fn programmed_one(key: &ServiceKey, vips: &[std::net::IpAddr], node: &str) -> ServiceEvent {
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
    pub services: Arc<[ProgrammedService]>,
    pub node: Arc<str>,
}

pub struct ProgrammedService {
    pub digest: u64,
    pub key: ServiceKey,
    /// Ascending.
    pub vips: Box<[std::net::IpAddr]>,
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
pub fn digest(ev: &ServiceEvent) -> u64 {
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
/// VipAnnounced statement per Service, naming its VIPs `here` and this node, and for a VIP that
/// moved, the node it came from (as the Service's record named it,
/// [`crate::announce::record`]). Published by the node that takes a VIP when it takes it (a
/// statement is published once while it holds), so every change of owner is one Event from
/// the new owner, from the old owner to it.
pub fn announced(
    here: &[(ServiceKey, crate::announce::record::Here)],
    node: &str,
) -> BTreeSet<ServiceEvent> {
    here.iter()
        .filter(|(_, vips)| !vips.is_empty())
        .map(|(svc, vips)| {
            let vips: Vec<String> = (vips.iter())
                .map(|(v, from)| match from {
                    Some(f) => format!("{v} (from node {f})"),
                    None => v.to_string(),
                })
                .collect();
            ServiceEvent {
                service: svc.clone(),
                warning: false,
                reason: "VipAnnounced",
                note: format!(
                    "VIPs {} announced by node {node} (it answers ARP/ND for them)",
                    vips.join(", ")
                )
                .into(),
            }
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
    vips: &crate::status::VipList,
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

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
