//! The elected instance's allocation loop, without I/O: it takes what the watches see
//! (Services as [`super::service::read`] reads them, pools, namespace labels) and says what to write
//! (a Service's addresses with the [`AllocationRecord`] of what they were decided on), what to tell (one
//! statement per Service, for Events) and each pool's status. The shell (`ipam::task`) does
//! the writes and reports each outcome back ([`Allocations::written`]).

use super::allocator::Allocator;
use super::pool::PoolSpec;
use super::pool_object::VipPoolStatus;
use super::request::{AllocError, Assigned, Terms};
use super::service::{AllocationRecord, AskError, ServiceAsk};
use crate::events::ServiceEvent;
use crate::model::ServiceKey;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

/// A Service as last read.
#[derive(Debug, Clone)]
pub enum SeenService {
    Ask(Box<ServiceAsk>),
    /// Its request could not be read; what it holds (and what its status names) stays.
    Bad {
        error: AskError,
        current: Vec<IpAddr>,
        created: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    },
}

impl SeenService {
    /// What the Service's status names, when it was first seen: to reserve, whatever its
    /// request.
    fn reservation(&self, key: &ServiceKey) -> Reservation {
        match self {
            SeenService::Ask(a) => Reservation {
                created: a.created.as_ref().map(|t| t.0),
                request: a.request.clone(),
                current: a.current.clone(),
                written: a.written.clone(),
            },
            SeenService::Bad {
                current, created, ..
            } => Reservation {
                created: created.as_ref().map(|t| t.0),
                // Unknown terms: it shares with nobody until its request can be read.
                request: super::request::AllocRequest::holding(key.clone()),
                current: current.clone(),
                written: None,
            },
        }
    }
}

/// One Service's status, to reserve.
struct Reservation {
    created: Option<k8s_openapi::jiff::Timestamp>,
    request: super::request::AllocRequest,
    current: Vec<IpAddr>,
    written: Option<Terms>,
}

/// A status to write: the Service's addresses and what they were decided on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusWrite {
    pub service: ServiceKey,
    pub ips: Vec<IpAddr>,
    pub record: AllocationRecord,
}

/// What [`Allocations::pool_statuses`] hands out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolStatuses {
    pub changed: Vec<(String, VipPoolStatus)>,
    pub gone: Vec<String>,
}

/// The allocation state of the elected instance.
#[derive(Debug)]
pub struct Allocations {
    alloc: Allocator,
    services: BTreeMap<ServiceKey, SeenService>,
    namespaces: HashMap<String, BTreeMap<String, String>>,
    /// Decisions handed out whose write is not confirmed yet.
    pending: HashMap<ServiceKey, Assigned>,
    /// Services whose last write failed, to decide again on [`Allocations::retry`].
    unwritten: BTreeSet<ServiceKey>,
    /// Services no longer vipflow's whose status is being cleared; what they held is released
    /// once that write went through.
    releasing: BTreeSet<ServiceKey>,
    /// What there is to say about each Service.
    said: BTreeMap<ServiceKey, Vec<ServiceEvent>>,
    /// Whether `said` changed since [`Allocations::statements_if_changed`] was last asked.
    said_changed: bool,
    /// Each pool's status as last handed out.
    pool_status: BTreeMap<String, VipPoolStatus>,
}

impl Allocations {
    /// Start from a complete listing: every address a status names is reserved (oldest
    /// Service first) before anything is decided; then every Service is decided.
    pub fn start(
        pools: Vec<PoolSpec>,
        namespaces: HashMap<String, BTreeMap<String, String>>,
        services: Vec<(ServiceKey, SeenService)>,
    ) -> (Allocations, Vec<StatusWrite>) {
        let mut a = Allocations {
            alloc: Allocator::new(pools),
            services: services.into_iter().collect(),
            namespaces,
            pending: HashMap::new(),
            unwritten: BTreeSet::new(),
            releasing: BTreeSet::new(),
            said: BTreeMap::new(),
            said_changed: true,
            pool_status: BTreeMap::new(),
        };
        let mut held: Vec<Reservation> = a
            .services
            .iter()
            .map(|(k, s)| s.reservation(k))
            .filter(|r| !r.current.is_empty())
            .collect();
        held.sort_by(|x, y| (x.created, &x.request.service).cmp(&(y.created, &y.request.service)));
        let conflicts = a.alloc.reserve_all(
            held.iter()
                .map(|r| (&r.request, r.current.as_slice(), r.written.as_ref())),
        );
        for (service, c) in conflicts {
            tracing::warn!(%service, ip = %c.ip, holder = %c.holder, why = %c.why, "address in two statuses; the older keeps it");
        }
        let keys: Vec<ServiceKey> = a.services.keys().cloned().collect();
        let writes = keys.into_iter().filter_map(|k| a.decide(&k)).collect();
        (a, writes)
    }

    /// A Service was added or changed (`None`: it is not a LoadBalancer of vipflow's, or it
    /// went: what it held goes back).
    pub fn service(&mut self, key: ServiceKey, seen: Option<SeenService>) -> Option<StatusWrite> {
        match seen {
            None => {
                self.services.remove(&key);
                self.said_changed |= self.said.remove(&key).is_some();
                self.unwritten.remove(&key);
                self.releasing.remove(&key);
                if let Some(a) = self.pending.remove(&key) {
                    self.alloc.undo(a);
                }
                self.alloc.release(&key);
                None
            }
            Some(seen) => {
                // Ours again before its status was cleared: it keeps what it holds.
                self.releasing.remove(&key);
                // A Service seen for the first time with addresses (it became vipflow's):
                // what its status names is reserved before it is decided.
                let r = seen.reservation(&key);
                if !self.services.contains_key(&key)
                    && self.alloc.held(&key).is_empty()
                    && !r.current.is_empty()
                {
                    for (_, c) in self.alloc.reserve_all([(
                        &r.request,
                        r.current.as_slice(),
                        r.written.as_ref(),
                    )]) {
                        tracing::warn!(service = %key, ip = %c.ip, holder = %c.holder, why = %c.why, "address held by another Service");
                    }
                }
                self.services.insert(key.clone(), seen);
                self.decide(&key)
            }
        }
    }

    /// A Service that still exists but is no longer vipflow's (not a LoadBalancer any more,
    /// or of another class), whose status names `status`: what it held is cleared from its
    /// status first, and goes back to the pools only once that write went through (an address
    /// still in a status is never handed to another Service).
    pub fn not_ours(&mut self, key: ServiceKey, status: &[IpAddr]) -> Option<StatusWrite> {
        let held: Vec<IpAddr> = self.alloc.held(&key).to_vec();
        if !status.iter().any(|ip| held.contains(ip)) {
            return self.service(key, None);
        }
        self.services.remove(&key);
        self.said_changed |= self.said.remove(&key).is_some();
        self.unwritten.remove(&key);
        if let Some(a) = self.pending.remove(&key) {
            self.alloc.undo(a);
        }
        self.releasing.insert(key.clone());
        Some(clearing(key))
    }

    /// New pools: every Service is decided again (addresses held stay held).
    pub fn pools(&mut self, pools: Vec<PoolSpec>) -> Vec<StatusWrite> {
        self.alloc.set_pools(pools);
        self.decide_all(|_| true)
    }

    /// A namespace's labels changed: its Services are decided again.
    pub fn namespace(
        &mut self,
        name: &str,
        labels: Option<BTreeMap<String, String>>,
    ) -> Vec<StatusWrite> {
        match labels {
            Some(l) => self.namespaces.insert(name.to_string(), l),
            None => self.namespaces.remove(name),
        };
        self.decide_all(|k| &*k.namespace == name)
    }

    /// Services whose last decision or write failed are tried again (an address may have
    /// freed, the API server may be back).
    pub fn retry(&mut self) -> Vec<StatusWrite> {
        let mut again: BTreeSet<ServiceKey> = std::mem::take(&mut self.unwritten);
        again.extend(
            self.said
                .iter()
                .filter(|(_, s)| s.iter().any(|e| e.warning))
                .map(|(k, _)| k.clone()),
        );
        let mut writes = self.decide_all(|k| again.contains(k));
        writes.extend(self.releasing.iter().cloned().map(clearing));
        writes
    }

    /// How the write of a Service's decision went: a failed one is taken back, so what its
    /// status still names stays held, and it is decided again on the next change or retry.
    pub fn written(&mut self, key: &ServiceKey, ok: bool) {
        if self.releasing.contains(key) {
            if ok {
                self.releasing.remove(key);
                self.alloc.release(key);
            }
            return;
        }
        if let Some(a) = self.pending.remove(key)
            && !ok
        {
            self.alloc.undo(a);
            self.unwritten.insert(key.clone());
        }
    }

    /// Every statement about every Service (the Event sink publishes what is new), when they
    /// changed since the last call: a Service's own status coming back through the watch says
    /// nothing new, and must not cost a pass over every Service.
    pub fn statements_if_changed(&mut self) -> Option<BTreeSet<ServiceEvent>> {
        std::mem::take(&mut self.said_changed).then(|| self.statements())
    }

    /// Every statement about every Service.
    pub fn statements(&self) -> BTreeSet<ServiceEvent> {
        self.said.values().flatten().cloned().collect()
    }

    fn say(&mut self, key: &ServiceKey, now: Vec<ServiceEvent>) {
        if self.said.get(key) != Some(&now) {
            self.said.insert(key.clone(), now);
            self.said_changed = true;
        }
    }

    /// The pools whose status changed since the last call, and those gone since.
    pub fn pool_statuses(&mut self) -> PoolStatuses {
        let now: Vec<(String, VipPoolStatus)> = self
            .alloc
            .pools()
            .map(|p| {
                let st = VipPoolStatus::of(p, |f| self.alloc.usage(p.name(), f));
                (p.name().to_string(), st)
            })
            .collect();
        let mut changed = Vec::new();
        let mut next = BTreeMap::new();
        for (name, st) in now {
            if self.pool_status.get(&name) != Some(&st) {
                changed.push((name.clone(), st.clone()));
            }
            next.insert(name, st);
        }
        let gone = self
            .pool_status
            .keys()
            .filter(|k| !next.contains_key(*k))
            .cloned()
            .collect();
        self.pool_status = next;
        PoolStatuses { changed, gone }
    }

    /// Every pool with its status as last handed out, for the status document.
    pub fn pool_docs(&self) -> Vec<crate::status::PoolDoc> {
        self.pool_status
            .iter()
            .map(|(name, status)| crate::status::PoolDoc {
                name: name.clone(),
                status: status.clone(),
            })
            .collect()
    }

    /// The allocator, for reports.
    pub fn allocator(&self) -> &Allocator {
        &self.alloc
    }

    fn decide_all(&mut self, pick: impl Fn(&ServiceKey) -> bool) -> Vec<StatusWrite> {
        let keys: Vec<ServiceKey> = self.services.keys().filter(|k| pick(k)).cloned().collect();
        keys.iter().filter_map(|k| self.decide(k)).collect()
    }

    fn with_labels(&self, ask: &ServiceAsk) -> super::request::AllocRequest {
        let mut req = ask.request.clone();
        if let Some(l) = self.namespaces.get(&*req.service.namespace) {
            req.namespace_labels = l.clone();
        }
        req
    }

    /// Decide one Service; the status to write when it differs from what is there.
    fn decide(&mut self, key: &ServiceKey) -> Option<StatusWrite> {
        if self.pending.contains_key(key) {
            // Its last decision is being written; the watch brings it back, and then this.
            return None;
        }
        let ask = match self.services.get(key)? {
            SeenService::Bad { error: e, .. } => {
                self.say(key, vec![warning(key, e.reason(), e)]);
                return None;
            }
            SeenService::Ask(a) => (**a).clone(),
        };
        let req = self.with_labels(&ask);
        let result = self.alloc.assign(&req);
        let a = match result {
            Ok(a) => a,
            Err(e) => {
                self.say(key, vec![failed(key, &e)]);
                return None;
            }
        };
        let terms = Terms::of(&req);
        let mut say = vec![self.allocated(key, &a.ips)];
        if let Some(e) = &a.partial {
            say.push(failed(key, e));
        }
        self.say(key, say);
        if a.ips == ask.current && ask.written.as_ref() == Some(&terms) {
            return None;
        }
        let write = StatusWrite {
            service: key.clone(),
            ips: a.ips.clone(),
            record: AllocationRecord::of(&a.ips, &terms),
        };
        self.pending.insert(key.clone(), a);
        Some(write)
    }

    fn allocated(&self, key: &ServiceKey, ips: &[IpAddr]) -> ServiceEvent {
        let each: Vec<String> = ips
            .iter()
            .map(|ip| match self.alloc.pool_of(*ip) {
                Some(p) => format!("{ip} (pool {p})"),
                None => format!("{ip} (in no pool now; kept)"),
            })
            .collect();
        ServiceEvent {
            service: key.clone(),
            warning: false,
            reason: "IPAllocated",
            note: Arc::from(format!("assigned {}", each.join(", "))),
        }
    }
}

/// The write that clears a Service's addresses (and vipflow's record) from its status.
fn clearing(service: ServiceKey) -> StatusWrite {
    StatusWrite {
        record: AllocationRecord::of(
            &[],
            &Terms::of(&super::request::AllocRequest::holding(service.clone())),
        ),
        service,
        ips: Vec::new(),
    }
}

fn failed(key: &ServiceKey, e: &AllocError) -> ServiceEvent {
    warning(key, e.reason(), e)
}

fn warning(key: &ServiceKey, reason: &'static str, e: &dyn std::fmt::Display) -> ServiceEvent {
    ServiceEvent {
        service: key.clone(),
        warning: true,
        reason,
        note: Arc::from(format!("no address allocated: {e}")),
    }
}

#[cfg(test)]
#[path = "controller_tests.rs"]
mod tests;
