//! What a Service asks of the allocator ([`AllocRequest`]), what it gets or why not, and
//! the terms a status is written for.

use super::pool::{Family, PoolProblem};
use crate::model::{Protocol, ServiceKey};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use thiserror::Error;

/// How many families a Service wants (its `spec.ipFamilyPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StackPolicy {
    #[default]
    SingleStack,
    PreferDualStack,
    RequireDualStack,
}

/// What one Service asks of the allocator.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocRequest {
    pub service: ServiceKey,
    pub namespace_labels: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    pub policy: StackPolicy,
    /// `spec.ipFamilies` in order; IPv4 alone when empty.
    pub families: Vec<Family>,
    /// Addresses asked for (at most one per family).
    pub requested_ips: Vec<IpAddr>,
    pub requested_pool: Option<String>,
    pub sharing_key: Option<String>,
    /// Its (protocol, port) pairs.
    pub ports: BTreeSet<(Protocol, u16)>,
    /// externalTrafficPolicy Local.
    pub local: bool,
    /// Its pod selector, in a canonical text (compared between sharers when one is Local).
    pub selector: String,
}

impl AllocRequest {
    /// A request that only holds what a Service has: no sharing key, no ports, one family
    /// (for a Service whose own request cannot be read).
    pub fn holding(service: ServiceKey) -> AllocRequest {
        AllocRequest {
            service,
            namespace_labels: BTreeMap::new(),
            labels: BTreeMap::new(),
            policy: StackPolicy::SingleStack,
            families: Vec::new(),
            requested_ips: Vec::new(),
            requested_pool: None,
            sharing_key: None,
            ports: BTreeSet::new(),
            local: false,
            selector: String::new(),
        }
    }

    /// The families to allocate, first the one that must be there (for SingleStack the only
    /// one).
    pub fn wanted(&self) -> Vec<Family> {
        let first = self.families.first().copied().unwrap_or(Family::V4);
        let other = match first {
            Family::V4 => Family::V6,
            Family::V6 => Family::V4,
        };
        match self.policy {
            StackPolicy::SingleStack => vec![first],
            _ => vec![first, other],
        }
    }
}

/// Why a Service did not get (all) the addresses it asked for. It keeps what it held.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AllocError {
    #[error("requested {ip} is {family_word}, which the Service does not use", family_word = Family::of(*ip))]
    RequestedWrongFamily { ip: IpAddr },
    #[error("more than one requested {0} address")]
    RequestedTwice(Family),
    #[error("requested {ip} is in no usable pool that serves this Service")]
    RequestedNotInPool { ip: IpAddr },
    #[error("requested {ip} is an address pool `{pool}` avoids (.0 or .255)")]
    RequestedAvoided { ip: IpAddr, pool: String },
    #[error("requested {ip} is held by {holder}: {why}")]
    RequestedInUse {
        ip: IpAddr,
        holder: ServiceKey,
        why: ShareRefusal,
    },
    #[error("requested pool `{0}` does not exist")]
    UnknownPool(String),
    #[error("requested pool `{pool}` cannot be used: {problem}")]
    PoolUnusable { pool: String, problem: PoolProblem },
    #[error("requested pool `{pool}` does not serve this Service")]
    PoolRefuses { pool: String },
    #[error("no usable pool with {0} addresses serves this Service")]
    NoPool(Family),
    #[error("no free {family} address in {pools}")]
    Exhausted { family: Family, pools: String },
}

impl AllocError {
    /// A short, stable reason for Events and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            AllocError::RequestedWrongFamily { .. } | AllocError::RequestedTwice(_) => "BadRequest",
            AllocError::RequestedNotInPool { .. } | AllocError::RequestedAvoided { .. } => {
                "RequestedIPNotAllowed"
            }
            AllocError::RequestedInUse { .. } => "RequestedIPInUse",
            AllocError::UnknownPool(_)
            | AllocError::PoolUnusable { .. }
            | AllocError::PoolRefuses { .. } => "PoolNotUsable",
            AllocError::NoPool(_) => "NoPool",
            AllocError::Exhausted { .. } => "PoolExhausted",
        }
    }
}

/// Why an address cannot be shared with the Services holding it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ShareRefusal {
    #[error("no common sharing key")]
    NoSharingKey,
    #[error("port {1}/{0} is used by both")]
    PortOverlap(Protocol, u16),
    #[error("externalTrafficPolicy Local needs the same selector")]
    SelectorDiffers,
}

/// An address a Service's status names that it could not keep at a start: another Service
/// reserved it first and the two cannot share it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReserveConflict {
    pub ip: IpAddr,
    pub holder: ServiceKey,
    pub why: ShareRefusal,
}

/// What a Service got from [`Allocator::assign`](super::Allocator::assign).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assigned {
    /// Its addresses, in the order of its families.
    pub ips: Vec<IpAddr>,
    /// Addresses it did not hold before.
    pub new: Vec<IpAddr>,
    /// Addresses it held before and no longer does.
    pub released: Vec<IpAddr>,
    /// For PreferDualStack: why the second family is missing.
    pub partial: Option<AllocError>,
    /// What the Service held before, with its terms, for [`Allocator::undo`].
    pub(super) before: Vec<(IpAddr, AddressHolder)>,
}

/// Addresses of one pool and family: assigned, and still available.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub assigned: u128,
    pub available: u128,
}

/// What a status was written for: the parts of the request that decide whether Services
/// may share an address, and the pool asked for. Recorded with each status vipflow writes,
/// so that a later start holds every address on the terms it was written for, and tells a
/// Service that asked for another pool from a pool that changed under it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Terms {
    pub sharing_key: Option<String>,
    pub ports: BTreeSet<(Protocol, u16)>,
    /// externalTrafficPolicy Local.
    pub local: bool,
    /// The pod selector in a canonical text.
    pub selector: String,
    pub pool: Option<String>,
}

impl Terms {
    pub fn of(r: &AllocRequest) -> Terms {
        Terms {
            sharing_key: r.sharing_key.clone(),
            ports: r.ports.clone(),
            local: r.local,
            selector: r.selector.clone(),
            pool: r.requested_pool.clone(),
        }
    }

    /// Whether Services on these terms may hold one address.
    pub fn can_share(&self, other: &Terms) -> Result<(), ShareRefusal> {
        match (&self.sharing_key, &other.sharing_key) {
            (Some(a), Some(b)) if a == b => {}
            _ => return Err(ShareRefusal::NoSharingKey),
        }
        if let Some(&(p, n)) = self.ports.intersection(&other.ports).next() {
            return Err(ShareRefusal::PortOverlap(p, n));
        }
        if (self.local || other.local) && self.selector != other.selector {
            return Err(ShareRefusal::SelectorDiffers);
        }
        Ok(())
    }
}

/// One holder of an address, on the terms its status was written for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct AddressHolder {
    pub(super) service: ServiceKey,
    pub(super) terms: Terms,
}

impl AddressHolder {
    pub(super) fn of(r: &AllocRequest) -> AddressHolder {
        AddressHolder {
            service: r.service.clone(),
            terms: Terms::of(r),
        }
    }
}
