//! An address pool as written (a `VipPool` object, or the same kind in the objects file) and
//! as vipflow uses it: its address entries parsed, its selectors checked, and the reason it
//! cannot be used, if any.

use super::selector::{self, SelectorError};
use crate::plan::exclude::IpRange;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use thiserror::Error;

/// A pool's spec as written.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolSpec {
    pub name: String,
    /// Entries as written: a CIDR (`10.0.0.0/24`, host bits zero), a range `a-b` of one
    /// family, or one address.
    pub addresses: Vec<String>,
    /// Whether Services that name no pool and no address may get addresses from it.
    pub auto_assign: bool,
    /// Never hand out IPv4 addresses ending in `.0` or `.255` (some clients and middleboxes
    /// treat them as network or broadcast addresses even in a larger subnet).
    pub avoid_buggy_ips: bool,
    pub allocation: AllocationRules,
    /// Nodes that may announce this pool's addresses (used by announcement, not here).
    pub node_selectors: Vec<LabelSelector>,
}

impl PoolSpec {
    /// A pool of `addresses` with the defaults: auto-assign on, nothing avoided, no rules.
    pub fn new(name: &str, addresses: &[&str]) -> PoolSpec {
        PoolSpec {
            name: name.into(),
            addresses: addresses.iter().map(|a| a.to_string()).collect(),
            auto_assign: true,
            avoid_buggy_ips: false,
            allocation: AllocationRules::default(),
            node_selectors: Vec::new(),
        }
    }
}

/// Which Services a pool serves when they name no pool, and how it ranks against the others.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AllocationRules {
    /// Lower is tried first; a pool without a priority comes after every pool with one.
    pub priority: Option<i32>,
    /// Only Services in these namespaces (any, when empty).
    pub namespaces: Vec<String>,
    /// Only Services in a namespace with labels matching one of these (any, when empty).
    pub namespace_selectors: Vec<LabelSelector>,
    /// Only Services with labels matching one of these (any, when empty).
    pub service_selectors: Vec<LabelSelector>,
}

/// Why a pool cannot be used. Addresses it handed out before stay with their Services.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PoolProblem {
    #[error("address entry `{entry}`: {reason}")]
    BadAddress { entry: String, reason: String },
    #[error("{range} overlaps pool `{other}`")]
    Overlap { range: IpRange, other: String },
    #[error("bad selector: {0}")]
    BadSelector(#[from] SelectorError),
    #[error("no addresses")]
    Empty,
}

impl PoolProblem {
    /// A short, stable name for the condition's reason and the metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            PoolProblem::BadAddress { .. } => "BadAddress",
            PoolProblem::Overlap { .. } => "Overlap",
            PoolProblem::BadSelector(_) => "BadSelector",
            PoolProblem::Empty => "NoAddresses",
        }
    }
}

/// One address entry of a pool.
pub fn parse_entry(entry: &str) -> Result<IpRange, PoolProblem> {
    let bad = |reason: String| PoolProblem::BadAddress {
        entry: entry.to_owned(),
        reason,
    };
    let s = entry.trim();
    if let Some((a, b)) = s.split_once('-') {
        let bound = |p: &str| {
            p.trim()
                .parse::<IpAddr>()
                .map_err(|_| bad(format!("`{}` is not an IP address", p.trim())))
        };
        let (start, end) = (bound(a)?, bound(b)?);
        return IpRange::new(start, end).map_err(|e| bad(e.to_string()));
    }
    if s.contains('/') {
        let net: ipnet::IpNet = s
            .parse()
            .map_err(|_| bad("not a CIDR, a range a-b or an address".into()))?;
        if net.trunc() != net {
            return Err(bad(format!(
                "host bits set (the network is {})",
                net.trunc()
            )));
        }
        return IpRange::new(net.network(), net.broadcast()).map_err(|e| bad(e.to_string()));
    }
    s.parse::<IpAddr>()
        .map(IpRange::single)
        .map_err(|_| bad("not a CIDR, a range a-b or an address".into()))
}

/// A pool as the allocator uses it.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    pub spec: PoolSpec,
    /// Its entries parsed, in the order written (empty when one of them is bad).
    pub ranges: Vec<IpRange>,
    /// Why it cannot be used, if it cannot.
    pub problem: Option<PoolProblem>,
}

impl Pool {
    /// Parse `spec`'s entries and check its selectors; overlaps with other pools are found
    /// by the allocator, which sees them all.
    pub fn of(spec: PoolSpec) -> Pool {
        let mut problem = None;
        let mut ranges = Vec::with_capacity(spec.addresses.len());
        for e in &spec.addresses {
            match parse_entry(e) {
                Ok(r) => ranges.push(r),
                Err(p) => {
                    problem = Some(p);
                    ranges.clear();
                    break;
                }
            }
        }
        if problem.is_none() && ranges.is_empty() {
            problem = Some(PoolProblem::Empty);
        }
        let rules = &spec.allocation;
        if problem.is_none() {
            problem = rules
                .namespace_selectors
                .iter()
                .chain(&rules.service_selectors)
                .chain(&spec.node_selectors)
                .find_map(|s| selector::check(s).err())
                .map(PoolProblem::from);
        }
        Pool {
            spec,
            ranges,
            problem,
        }
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        self.ranges.iter().any(|r| r.contains(ip))
    }

    /// Whether this pool may hand `ip` out at all (not a `.0` / `.255` it avoids).
    pub fn allows(&self, ip: IpAddr) -> bool {
        !(self.spec.avoid_buggy_ips && is_buggy(ip))
    }

    /// Whether this pool's rules let a Service use it: one that names the pool or one of its
    /// addresses; one that names neither also needs auto-assign.
    pub fn permits(
        &self,
        namespace: &str,
        namespace_labels: &std::collections::BTreeMap<String, String>,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> bool {
        let r = &self.spec.allocation;
        (r.namespaces.is_empty() || r.namespaces.iter().any(|n| n == namespace))
            && (r.namespace_selectors.is_empty()
                || r.namespace_selectors
                    .iter()
                    .any(|s| selector::matches(s, namespace_labels)))
            && (r.service_selectors.is_empty()
                || r.service_selectors
                    .iter()
                    .any(|s| selector::matches(s, labels)))
    }
}

/// Every address range of `pools` (a pool with a bad entry has none: it hands nothing out).
pub fn pool_ranges(
    pools: impl IntoIterator<Item = PoolSpec>,
) -> Vec<crate::plan::exclude::PoolRange> {
    pools
        .into_iter()
        .flat_map(|spec| {
            let pool = Pool::of(spec);
            let name = pool.spec.name;
            pool.ranges
                .into_iter()
                .map(move |range| crate::plan::exclude::PoolRange {
                    pool: name.clone(),
                    range,
                })
        })
        .collect()
}

/// What to say about pools whose addresses a Kube-OVN Subnet could hand to pods: (pool, note)
/// for each such pool and Subnet (the Event the elected agent posts on the pool).
pub fn exposed_to_pods(
    pools: &[PoolSpec],
    subnets: &[crate::plan::exclude::KubeOvnSubnetIpam],
) -> std::collections::BTreeSet<(String, String)> {
    use crate::plan::exclude::{FindingReason, check_kubeovn_with_pools};
    let ranges = pool_ranges(pools.iter().cloned());
    check_kubeovn_with_pools(&Default::default(), &ranges, subnets)
        .into_iter()
        .filter_map(|f| match &f.reason {
            FindingReason::PoolNotExcluded { pool, .. } => Some((pool.clone(), f.to_string())),
            _ => None,
        })
        .collect()
}

/// An IPv4 address ending in `.0` or `.255`.
pub fn is_buggy(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V4(a) if matches!(a.octets()[3], 0 | 255))
}

/// An address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn of(ip: IpAddr) -> Family {
        if ip.is_ipv4() { Family::V4 } else { Family::V6 }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        })
    }
}

/// An address as an integer (IPv4 widened), for the free spaces.
pub(super) fn num(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u32::from(a).into(),
        IpAddr::V6(a) => a.into(),
    }
}

/// The address of family `f` that [`num`] gave `x` for.
pub(super) fn addr(f: Family, x: u128) -> IpAddr {
    match f {
        // Only IPv4 ranges fill an IPv4 free space: every value fits.
        Family::V4 => Ipv4Addr::from(x as u32).into(),
        Family::V6 => Ipv6Addr::from(x).into(),
    }
}

/// How many addresses in `[s, e]` end in `.0` or `.255` (IPv4 as integers).
pub(super) fn buggy_in(s: u128, e: u128) -> u128 {
    // Count x with x % 256 == 0 or 255 in [s, e]: the values below e+1 minus those below s.
    let below = |n: u128| n / 256 * 2 + u128::from(!n.is_multiple_of(256));
    below(e + 1) - below(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_as_users_write_them() {
        let r = |s| parse_entry(s).map(|r| r.to_string());
        assert_eq!(r("10.0.0.0/30"), Ok("10.0.0.0..10.0.0.3".into()));
        assert_eq!(r("10.0.0.1-10.0.0.9"), Ok("10.0.0.1..10.0.0.9".into()));
        assert_eq!(r(" fd00::1 - fd00::3 "), Ok("fd00::1..fd00::3".into()));
        assert_eq!(r("10.0.0.7"), Ok("10.0.0.7".into()));
        assert_eq!(r("10.0.0.7/32"), Ok("10.0.0.7".into()));
        for bad in [
            "10.0.0.1/24",
            "10.0.0.9-10.0.0.1",
            "10.0.0.1-fd00::1",
            "x",
            "10.0.0.0/33",
        ] {
            assert!(
                matches!(parse_entry(bad), Err(PoolProblem::BadAddress { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_bad_entry_makes_the_pool_unusable() {
        let p = Pool::of(PoolSpec::new("a", &["10.0.0.0/24", "nope"]));
        assert_eq!(p.problem.as_ref().map(|p| p.reason()), Some("BadAddress"));
        assert!(p.ranges.is_empty());
        let p = Pool::of(PoolSpec::new("b", &[]));
        assert_eq!(p.problem, Some(PoolProblem::Empty));
    }

    #[test]
    fn buggy_addresses() {
        assert!(is_buggy("10.0.1.0".parse().unwrap()));
        assert!(is_buggy("10.0.1.255".parse().unwrap()));
        assert!(!is_buggy("10.0.1.1".parse().unwrap()));
        assert!(!is_buggy("fd00::ff".parse().unwrap()));
    }
}
