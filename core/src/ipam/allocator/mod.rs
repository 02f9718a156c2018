//! Which addresses each LoadBalancer Service holds, and the decisions that change that.
//!
//! Sans-IO: the elected instance feeds it the pools and each Service's request and current
//! addresses (from its `status.loadBalancer.ingress`), and writes back what it decides. The
//! rules it keeps:
//! - an address in a Service's status stays with it until the Service goes, stops asking for
//!   a LoadBalancer, or asks for another address, family or pool; nothing else moves it (not
//!   another Service's deletion, not a restart, not a pool that shrinks or goes away);
//! - on a start (or a leader change) every address already in a status is reserved
//!   ([`Allocator::reserve_all`]) before anything new is handed out;
//! - an address is held by two Services only when they share a sharing key, their ports do not
//!   overlap, and (for externalTrafficPolicy Local) their selectors are equal;
//! - a failed decision changes nothing: the Service keeps what it held;
//! - what a status names stays held: when writing a decision fails, the caller takes it
//!   back ([`Allocator::undo`]) before deciding anything else, so an address a failed write
//!   could not take out of a status is not handed to anyone.

use super::free_space::FreeSpace;
use super::pool::{Family, Pool, PoolProblem, PoolSpec, addr, num};
use super::request::{
    AddressHolder, AllocError, AllocRequest, Assigned, ReserveConflict, ShareRefusal, StackPolicy,
    Terms,
};
use crate::model::ServiceKey;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

mod usage;

/// A usable pool with its free addresses.
#[derive(Debug, Clone)]
struct PoolState {
    pool: Pool,
    free_v4: FreeSpace,
    free_v6: FreeSpace,
}

impl PoolState {
    fn free(&mut self, f: Family) -> &mut FreeSpace {
        match f {
            Family::V4 => &mut self.free_v4,
            Family::V6 => &mut self.free_v6,
        }
    }

    fn has(&self, f: Family) -> bool {
        self.pool.ranges.iter().any(|r| Family::of(r.start()) == f)
    }
}

/// The allocator's state: the pools, and who holds which address.
#[derive(Debug, Clone, Default)]
pub struct Allocator {
    /// Every pool by name, usable or not.
    pools: BTreeMap<String, Pool>,
    /// The usable ones, with their free addresses.
    usable: BTreeMap<String, PoolState>,
    holders: BTreeMap<IpAddr, Vec<AddressHolder>>,
    held: HashMap<ServiceKey, Vec<IpAddr>>,
    /// Addresses held under each sharing key.
    shared: HashMap<String, BTreeSet<IpAddr>>,
}

impl Allocator {
    pub fn new(pools: Vec<PoolSpec>) -> Allocator {
        let mut a = Allocator::default();
        a.set_pools(pools);
        a
    }

    /// Take a new set of pools. Held addresses stay held, inside a pool or not; a pool that
    /// overlaps one before it in name order cannot be used (deterministic on every instance).
    pub fn set_pools(&mut self, specs: Vec<PoolSpec>) {
        let mut pools: BTreeMap<String, Pool> = BTreeMap::new();
        for s in specs {
            pools.insert(s.name.clone(), Pool::of(s));
        }
        let mut taken: Vec<(crate::plan::exclude::IpRange, String)> = Vec::new();
        for p in pools.values_mut() {
            if p.problem.is_some() {
                continue;
            }
            let clash = p.ranges.iter().find_map(|r| {
                taken
                    .iter()
                    .find(|(t, _)| t.contains(r.start()) || r.contains(t.start()))
                    .map(|(_, other)| (*r, other.clone()))
            });
            match clash {
                Some((range, other)) => p.problem = Some(PoolProblem::Overlap { range, other }),
                None => taken.extend(p.ranges.iter().map(|r| (*r, p.spec.name.clone()))),
            }
        }
        let mut usable = BTreeMap::new();
        for p in pools.values().filter(|p| p.problem.is_none()) {
            let bounds = |f: Family| -> Vec<(u128, u128)> {
                p.ranges
                    .iter()
                    .filter(|r| Family::of(r.start()) == f)
                    .map(|r| (num(r.start()), num(r.end())))
                    .collect()
            };
            let mut st = PoolState {
                pool: p.clone(),
                free_v4: FreeSpace::of(&bounds(Family::V4)),
                free_v6: FreeSpace::of(&bounds(Family::V6)),
            };
            for ip in self.holders.keys().filter(|ip| p.contains(**ip)) {
                st.free(Family::of(*ip)).take(num(*ip));
            }
            usable.insert(p.spec.name.clone(), st);
        }
        self.pools = pools;
        self.usable = usable;
    }

    /// Every pool and why it cannot be used, if so.
    pub fn pools(&self) -> impl Iterator<Item = &Pool> {
        self.pools.values()
    }

    /// What `service` holds.
    pub fn held(&self, service: &ServiceKey) -> &[IpAddr] {
        self.held.get(service).map_or(&[], |v| v.as_slice())
    }

    /// The Services holding `ip`.
    pub fn holders(&self, ip: IpAddr) -> impl Iterator<Item = &ServiceKey> {
        self.holders
            .get(&ip)
            .into_iter()
            .flatten()
            .map(|h| &h.service)
    }

    /// The usable pool that contains `ip`.
    pub fn pool_of(&self, ip: IpAddr) -> Option<&str> {
        self.usable
            .values()
            .find(|s| s.pool.contains(ip))
            .map(|s| s.pool.name())
    }

    /// Reserve what every Service's status names, at a start (or a leader change), before
    /// anything new is handed out: inside a pool or not. Each entry: the Service's request,
    /// its status's addresses, and the [`Terms`] recorded with the status (`None`: unknown, as
    /// for a status another allocator wrote: its present terms are taken), oldest Service
    /// first. Where two cannot share an address (a hand edit, or a status written by someone
    /// else), the one with recorded terms, or else the older, keeps it; the other's address
    /// is returned, and its next decision gives it another.
    pub fn reserve_all<'a>(
        &mut self,
        entries: impl IntoIterator<Item = (&'a AllocRequest, &'a [IpAddr], Option<&'a Terms>)>,
    ) -> Vec<(ServiceKey, ReserveConflict)> {
        let (known, unknown): (Vec<_>, Vec<_>) =
            entries.into_iter().partition(|(_, _, t)| t.is_some());
        let mut out = Vec::new();
        for (req, current, written) in known.into_iter().chain(unknown) {
            let me = AddressHolder {
                service: req.service.clone(),
                terms: written.cloned().unwrap_or_else(|| Terms::of(req)),
            };
            for c in self.reserve(&me, current) {
                out.push((req.service.clone(), c));
            }
        }
        out
    }

    /// Reserve `current` for `me`; an address held by another it cannot share with is not
    /// reserved, and returned.
    fn reserve(&mut self, me: &AddressHolder, current: &[IpAddr]) -> Vec<ReserveConflict> {
        let service = &me.service;
        let mut conflicts = Vec::new();
        let mut reserved = Vec::new();
        for &ip in current {
            if !self.held(service).contains(&ip) {
                if let Err((holder, why)) = self.share_check(me, ip) {
                    conflicts.push(ReserveConflict { ip, holder, why });
                    continue;
                }
                self.hold(me, ip);
            }
            reserved.push(ip);
        }
        // What the status names comes first: the next decision keeps it over an address a
        // decision whose write failed took.
        if let Some(held) = self.held.get_mut(service) {
            held.sort_by_key(|ip| reserved.iter().position(|r| r == ip).unwrap_or(usize::MAX));
        }
        conflicts
    }

    /// Forget a Service (deleted, or no longer a LoadBalancer of ours): its addresses go back
    /// to their pools once no one else holds them.
    pub fn release(&mut self, service: &ServiceKey) -> Vec<IpAddr> {
        let ips = self.held.remove(service).unwrap_or_default();
        for &ip in &ips {
            self.unhold(service, ip);
        }
        ips
    }

    /// Decide the addresses of a Service from its request and what it holds: what it holds
    /// stays where it still answers the request; what is missing is taken (the requested
    /// address, else an address its sharing key already uses, else the lowest free address of
    /// the best pool). On an error nothing changes.
    pub fn assign(&mut self, req: &AllocRequest) -> Result<Assigned, AllocError> {
        let wanted = req.wanted();
        for (i, ip) in req.requested_ips.iter().enumerate() {
            let f = Family::of(*ip);
            if !wanted.contains(&f) {
                return Err(AllocError::RequestedWrongFamily { ip: *ip });
            }
            if req.requested_ips[..i].iter().any(|o| Family::of(*o) == f) {
                return Err(AllocError::RequestedTwice(f));
            }
        }
        // A pool that is named must be there and usable for any address taken anew. What the
        // Service holds on the very terms it asks for stays, even where that pool went or
        // refuses it now: an address moves only when its Service asks.
        let pool_refuses = self.requested_pool(req).err();
        let before: Vec<IpAddr> = self.held(&req.service).to_vec();
        let me = AddressHolder::of(req);
        let mut ips = Vec::new();
        let mut partial = None;
        for (i, &f) in wanted.iter().enumerate() {
            let cur = before.iter().copied().find(|ip| Family::of(*ip) == f);
            let requested = req
                .requested_ips
                .iter()
                .copied()
                .find(|ip| Family::of(*ip) == f);
            let got = match (requested, cur) {
                (Some(r), Some(c)) if r == c && (pool_refuses.is_none() || self.keeps(req, c)) => {
                    self.share_check(&me, c)
                        .map(|()| c)
                        .map_err(|(holder, why)| AllocError::RequestedInUse { ip: c, holder, why })
                }
                // What it holds stays, unless its new terms (sharing key, ports, selector)
                // no longer let it share the address with the others there: it asked for
                // that, and moves.
                (None, Some(c)) if self.keeps(req, c) && self.share_check(&me, c).is_ok() => Ok(c),
                (requested, _) => match (&pool_refuses, requested) {
                    (Some(e), _) => Err(e.clone()),
                    (None, Some(r)) => self.check_requested(req, &me, r),
                    (None, None) => self.pick(req, &me, f),
                },
            };
            match got {
                Ok(ip) => ips.push(ip),
                Err(e) => match req.policy {
                    StackPolicy::PreferDualStack if i == 1 && !ips.is_empty() => {
                        partial = Some(e);
                    }
                    StackPolicy::PreferDualStack if i == 0 => partial = Some(e),
                    _ => return Err(e),
                },
            }
        }
        if ips.is_empty() {
            return Err(partial.unwrap_or(AllocError::NoPool(wanted[0])));
        }
        // Decided: move the holdings.
        let prev: Vec<(IpAddr, AddressHolder)> = before
            .iter()
            .filter_map(|ip| {
                let h = self
                    .holders
                    .get(ip)?
                    .iter()
                    .find(|h| h.service == req.service)?;
                Some((*ip, h.clone()))
            })
            .collect();
        let released: Vec<IpAddr> = before
            .iter()
            .copied()
            .filter(|ip| !ips.contains(ip))
            .collect();
        for ip in &released {
            self.unhold(&req.service, *ip);
        }
        let new: Vec<IpAddr> = ips
            .iter()
            .copied()
            .filter(|ip| !before.contains(ip))
            .collect();
        for ip in &new {
            self.hold(&me, *ip);
        }
        // Its sharing terms may have changed for what it keeps: the holder, and the index of
        // addresses by sharing key, follow.
        let kept: Vec<IpAddr> = ips
            .iter()
            .copied()
            .filter(|ip| before.contains(ip))
            .collect();
        for ip in kept {
            let Some(hs) = self.holders.get_mut(&ip) else {
                continue;
            };
            let Some(h) = hs.iter_mut().find(|h| h.service == req.service) else {
                continue;
            };
            let old_key = std::mem::replace(h, me.clone()).terms.sharing_key;
            if old_key == me.terms.sharing_key {
                continue;
            }
            let still = |k: &String| hs.iter().any(|h| h.terms.sharing_key.as_ref() == Some(k));
            if let Some(k) = old_key.filter(|k| !still(k))
                && let Some(set) = self.shared.get_mut(&k)
            {
                set.remove(&ip);
                if set.is_empty() {
                    self.shared.remove(&k);
                }
            }
            if let Some(k) = &me.terms.sharing_key {
                self.shared.entry(k.clone()).or_default().insert(ip);
            }
        }
        self.held.insert(req.service.clone(), ips.clone());
        Ok(Assigned {
            ips,
            new,
            released,
            partial,
            before: prev,
        })
    }

    /// Take back a decision whose status write failed, at once (before anything else is
    /// decided): the Service holds again what its status still names, on the terms it had.
    pub fn undo(&mut self, a: Assigned) {
        let Some(service) = a
            .before
            .first()
            .map(|(_, h)| h.service.clone())
            .or_else(|| {
                a.new
                    .first()
                    .and_then(|ip| self.holders.get(ip))
                    .and_then(|hs| hs.last())
                    .map(|h| h.service.clone())
            })
        else {
            return;
        };
        for ip in &a.new {
            self.unhold(&service, *ip);
        }
        for (ip, h) in &a.before {
            self.unhold(&service, *ip);
            self.hold(h, *ip);
        }
        let order: Vec<IpAddr> = a.before.iter().map(|(ip, _)| *ip).collect();
        if order.is_empty() {
            self.held.remove(&service);
        } else {
            self.held.insert(service, order);
        }
    }

    /// Whether a held address still answers a request that names no address: always, while
    /// the Service asks for the pool it asked for when the address was written to its status
    /// (a pool that shrinks, goes or cannot be used moves nothing); after it asked for another
    /// pool, only an address of that pool.
    fn keeps(&self, req: &AllocRequest, ip: IpAddr) -> bool {
        let written = self
            .holders
            .get(&ip)
            .and_then(|hs| hs.iter().find(|h| h.service == req.service))
            .map(|h| &h.terms.pool);
        match &req.requested_pool {
            None => true,
            Some(_) if written == Some(&req.requested_pool) => true,
            Some(want) => self.pool_of(ip) == Some(want.as_str()),
        }
    }

    /// Whether `me` may hold `ip` beside its holders (other than itself), on the terms their
    /// statuses were written for.
    fn share_check(
        &self,
        me: &AddressHolder,
        ip: IpAddr,
    ) -> Result<(), (ServiceKey, ShareRefusal)> {
        for h in self.holders.get(&ip).into_iter().flatten() {
            if h.service != me.service {
                me.terms
                    .can_share(&h.terms)
                    .map_err(|why| (h.service.clone(), why))?;
            }
        }
        Ok(())
    }

    fn check_requested(
        &self,
        req: &AllocRequest,
        me: &AddressHolder,
        ip: IpAddr,
    ) -> Result<IpAddr, AllocError> {
        let pool = self
            .usable
            .values()
            .find(|s| s.pool.contains(ip))
            .filter(|s| permits(&s.pool, req))
            .filter(|s| {
                req.requested_pool
                    .as_ref()
                    .is_none_or(|p| p == s.pool.name())
            })
            .ok_or(AllocError::RequestedNotInPool { ip })?;
        if !pool.pool.allows(ip) {
            return Err(AllocError::RequestedAvoided {
                ip,
                pool: pool.pool.name().into(),
            });
        }
        self.share_check(me, ip)
            .map_err(|(holder, why)| AllocError::RequestedInUse { ip, holder, why })?;
        Ok(ip)
    }

    /// The pool `req` names, when it exists, can be used and lets the Service use it.
    fn requested_pool(&self, req: &AllocRequest) -> Result<Option<&PoolState>, AllocError> {
        let Some(name) = &req.requested_pool else {
            return Ok(None);
        };
        let Some(pool) = self.pools.get(name) else {
            return Err(AllocError::UnknownPool(name.clone()));
        };
        if let Some(problem) = &pool.problem {
            return Err(AllocError::PoolUnusable {
                pool: name.clone(),
                problem: problem.clone(),
            });
        }
        if !permits(pool, req) {
            return Err(AllocError::PoolRefuses { pool: name.clone() });
        }
        Ok(self.usable.get(name.as_str()))
    }

    /// The pools to take a `f` address from, best first.
    fn candidates<'a>(&'a self, req: &AllocRequest, f: Family) -> Result<Vec<&'a str>, AllocError> {
        if let Some(st) = self.requested_pool(req)? {
            return if st.has(f) {
                Ok(vec![st.pool.name()])
            } else {
                Err(AllocError::NoPool(f))
            };
        }
        let mut c: Vec<&PoolState> = self
            .usable
            .values()
            .filter(|s| s.pool.spec.auto_assign && permits(&s.pool, req) && s.has(f))
            .collect();
        if c.is_empty() {
            return Err(AllocError::NoPool(f));
        }
        c.sort_by_key(|s| {
            let p = s.pool.spec.allocation.priority;
            (p.is_none(), p, s.pool.name())
        });
        Ok(c.into_iter().map(|s| s.pool.name()).collect())
    }

    /// A `f` address for a Service that names none: one its sharing key already uses (in a
    /// candidate pool, and shareable), else the lowest free one of the best pool with room.
    /// `taken`: what this decision took already (never the same family).
    fn pick(
        &self,
        req: &AllocRequest,
        me: &AddressHolder,
        f: Family,
    ) -> Result<IpAddr, AllocError> {
        let names = self.candidates(req, f)?;
        if let Some(key) = &req.sharing_key
            && let Some(ips) = self.shared.get(key)
        {
            let found = ips.iter().copied().find(|ip| {
                Family::of(*ip) == f
                    && self.pool_of(*ip).is_some_and(|p| names.contains(&p))
                    && self.share_check(me, *ip).is_ok()
            });
            if let Some(ip) = found {
                return Ok(ip);
            }
        }
        for name in &names {
            let Some(st) = self.usable.get(*name) else {
                continue;
            };
            let free = match f {
                Family::V4 => &st.free_v4,
                Family::V6 => &st.free_v6,
            };
            if let Some(x) = free.lowest(|x| st.pool.allows(addr(f, x))) {
                return Ok(addr(f, x));
            }
        }
        Err(AllocError::Exhausted {
            family: f,
            pools: names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    fn hold(&mut self, me: &AddressHolder, ip: IpAddr) {
        if !self.holders.contains_key(&ip)
            && let Some(st) = self.usable.values_mut().find(|s| s.pool.contains(ip))
        {
            st.free(Family::of(ip)).take(num(ip));
        }
        let hs = self.holders.entry(ip).or_default();
        if !hs.iter().any(|h| h.service == me.service) {
            hs.push(me.clone());
        }
        if let Some(k) = &me.terms.sharing_key {
            self.shared.entry(k.clone()).or_default().insert(ip);
        }
        let held = self.held.entry(me.service.clone()).or_default();
        if !held.contains(&ip) {
            held.push(ip);
        }
    }

    fn unhold(&mut self, service: &ServiceKey, ip: IpAddr) {
        let Some(hs) = self.holders.get_mut(&ip) else {
            return;
        };
        let mut gone_key = None;
        hs.retain(|h| {
            let mine = &h.service == service;
            if mine {
                gone_key = h.terms.sharing_key.clone();
            }
            !mine
        });
        let empty = hs.is_empty();
        let key_left = gone_key
            .as_ref()
            .is_some_and(|k| hs.iter().any(|h| h.terms.sharing_key.as_ref() == Some(k)));
        if let Some(k) = gone_key
            && !key_left
            && let Some(set) = self.shared.get_mut(&k)
        {
            set.remove(&ip);
            if set.is_empty() {
                self.shared.remove(&k);
            }
        }
        if empty {
            self.holders.remove(&ip);
            if let Some(st) = self.usable.values_mut().find(|s| s.pool.contains(ip)) {
                st.free(Family::of(ip)).give(num(ip));
            }
        }
        if let Some(held) = self.held.get_mut(service) {
            held.retain(|h| *h != ip);
        }
    }
}

/// Whether `pool`'s rules let `req`'s Service use it.
fn permits(pool: &Pool, req: &AllocRequest) -> bool {
    pool.permits(&req.service.namespace, &req.namespace_labels, &req.labels)
}

#[cfg(test)]
mod tests;
