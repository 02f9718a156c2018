//! IP ranges as users write them (`a`, `a..b`, `a-b`, CIDRs), and sets of them.

use crate::plan::exclude::northd_text::OvnTokenError;
use crate::plan::exclude::northd_text::parse_ovn_exclude_ips;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use thiserror::Error;

/// A bad exclude entry; `token`/`entry` is the text as written.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RangeError {
    #[error("`{token}` is not an IP address")]
    NotAnAddress { token: String },
    #[error("`{entry}`: `{part}` is not an IP address")]
    BadRangeBound { entry: String, part: String },
    #[error("`{token}`: range has no end address")]
    MissingEnd { token: String },
    #[error("`{token}`: {start} is after {end}")]
    Reversed {
        token: String,
        start: IpAddr,
        end: IpAddr,
    },
    #[error("`{token}`: mixes IPv4 and IPv6")]
    MixedFamily { token: String },
    #[error("`{token}` is not an IPv4 address (exclude_ips is IPv4 only)")]
    NotIpv4 { token: String },
    #[error("`{token}`: expected an address")]
    Unexpected { token: String },
}

/// An inclusive range of addresses of one family, `start <= end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IpRange {
    pub(crate) start: IpAddr,
    pub(crate) end: IpAddr,
}

impl IpRange {
    pub fn single(ip: IpAddr) -> Self {
        IpRange { start: ip, end: ip }
    }

    pub fn new(start: IpAddr, end: IpAddr) -> Result<Self, RangeError> {
        let token = || format!("{start}..{end}");
        if start.is_ipv4() != end.is_ipv4() {
            return Err(RangeError::MixedFamily { token: token() });
        }
        if start > end {
            return Err(RangeError::Reversed {
                token: token(),
                start,
                end,
            });
        }
        Ok(IpRange { start, end })
    }

    pub fn start(&self) -> IpAddr {
        self.start
    }

    pub fn end(&self) -> IpAddr {
        self.end
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.start.is_ipv4() && self.start <= ip && ip <= self.end
    }
}

impl fmt::Display for IpRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.start == self.end {
            write!(f, "{}", self.start)
        } else {
            write!(f, "{}..{}", self.start, self.end)
        }
    }
}

/// One Kube-OVN `excludeIps` entry: an IP or `a..b` (same family, `a <= b`), nothing around
/// it, as Kube-OVN's webhook accepts.
pub fn parse_entry(s: &str) -> Result<IpRange, RangeError> {
    let Some((a, b)) = s.split_once("..") else {
        return s
            .parse::<IpAddr>()
            .map(IpRange::single)
            .map_err(|_| RangeError::NotAnAddress {
                token: s.to_owned(),
            });
    };
    if b.is_empty() {
        return Err(RangeError::MissingEnd {
            token: s.to_owned(),
        });
    }
    let bound = |part: &str| {
        part.parse::<IpAddr>()
            .map_err(|_| RangeError::BadRangeBound {
                entry: s.to_owned(),
                part: part.to_owned(),
            })
    };
    let (start, end) = (bound(a)?, bound(b)?);
    IpRange::new(start, end).map_err(|e| match e {
        // Report the entry as written, not re-formatted.
        RangeError::Reversed { start, end, .. } => RangeError::Reversed {
            token: s.to_owned(),
            start,
            end,
        },
        _ => RangeError::MixedFamily {
            token: s.to_owned(),
        },
    })
}

/// Inclusive bounds as integers, so v4 and v6 share the sorted-interval code.
pub trait Bound: Copy + Ord {
    fn next(self) -> Option<Self>;
    fn next_sat(self) -> Self {
        self.next().unwrap_or(self)
    }
    /// `self - 1`; only called above the smallest value.
    fn prev(self) -> Self;
}

impl Bound for u32 {
    fn next(self) -> Option<Self> {
        self.checked_add(1)
    }
    fn prev(self) -> Self {
        self - 1
    }
}

impl Bound for u128 {
    fn next(self) -> Option<Self> {
        self.checked_add(1)
    }
    fn prev(self) -> Self {
        self - 1
    }
}

/// Sort, then merge overlapping and adjacent intervals.
pub(crate) fn normalize<T: Bound>(v: &mut Vec<(T, T)>) {
    v.sort_unstable();
    let mut out: Vec<(T, T)> = Vec::with_capacity(v.len());
    for &(s, e) in v.iter() {
        match out.last_mut() {
            Some(last) if s <= last.1.next_sat() => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    *v = out;
}

pub(crate) fn interval_contains<T: Bound>(v: &[(T, T)], x: T) -> bool {
    covers(v, x, x)
}

/// Whether sorted, merged intervals `v` hold every value of `[a, b]`.
pub(crate) fn covers<T: Bound>(v: &[(T, T)], a: T, b: T) -> bool {
    let i = v.partition_point(|&(s, _)| s <= a);
    i > 0 && v[i - 1].1 >= b
}

/// The parts of `[lo, hi]` that sorted, merged intervals `covered` leave out.
pub fn gaps<T: Bound>(covered: &[(T, T)], lo: T, hi: T) -> Vec<(T, T)> {
    let mut out = Vec::new();
    if lo > hi {
        return out;
    }
    let mut at = lo;
    for &(s, e) in covered {
        if e < at {
            continue;
        }
        if s > hi {
            break;
        }
        if s > at {
            out.push((at, s.prev()));
        }
        match e.next() {
            Some(n) if n <= hi => at = n,
            _ => return out,
        }
    }
    out.push((at, hi));
    out
}

/// A set of addresses as sorted, disjoint, non-adjacent ranges, per family.
/// Containment is a binary search; building is O(n log n).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    pub v4: Vec<(u32, u32)>,
    pub(crate) v6: Vec<(u128, u128)>,
}

impl RangeSet {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    pub fn insert(&mut self, r: IpRange) {
        self.extend(std::iter::once(r));
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => interval_contains(&self.v4, u32::from(a)),
            IpAddr::V6(a) => interval_contains(&self.v6, u128::from(a)),
        }
    }

    pub fn union(&self, other: &RangeSet) -> RangeSet {
        let mut u = self.clone();
        u.extend(other.ranges());
        u
    }

    /// The merged ranges, IPv4 first, ascending.
    pub fn ranges(&self) -> impl Iterator<Item = IpRange> + '_ {
        let v4 = self.v4.iter().map(|&(s, e)| IpRange {
            start: Ipv4Addr::from(s).into(),
            end: Ipv4Addr::from(e).into(),
        });
        let v6 = self.v6.iter().map(|&(s, e)| IpRange {
            start: Ipv6Addr::from(s).into(),
            end: Ipv6Addr::from(e).into(),
        });
        v4.chain(v6)
    }

    /// What northd excludes from OVN `exclude_ips` text (before clamping to the subnet), and
    /// every problem found. Entries after a token that stops northd are not included.
    pub fn from_ovn_text(text: &str) -> (RangeSet, Vec<OvnTokenError>) {
        let p = parse_ovn_exclude_ips(text);
        (p.entries.iter().map(|e| e.range).collect(), p.errors)
    }

    /// Kube-OVN `spec.excludeIps`; a bad entry is reported and the others still count.
    pub fn from_kubeovn<S: AsRef<str>>(entries: &[S]) -> (RangeSet, Vec<RangeError>) {
        let mut errors = Vec::new();
        let set = entries
            .iter()
            .filter_map(|e| parse_entry(e.as_ref()).map_err(|x| errors.push(x)).ok())
            .collect();
        (set, errors)
    }
}

impl Extend<IpRange> for RangeSet {
    fn extend<I: IntoIterator<Item = IpRange>>(&mut self, iter: I) {
        for r in iter {
            match (r.start, r.end) {
                (IpAddr::V4(s), IpAddr::V4(e)) => self.v4.push((s.into(), e.into())),
                (IpAddr::V6(s), IpAddr::V6(e)) => self.v6.push((s.into(), e.into())),
                // IpRange's constructors never mix families.
                _ => {}
            }
        }
        normalize(&mut self.v4);
        normalize(&mut self.v6);
    }
}

impl FromIterator<IpRange> for RangeSet {
    fn from_iter<I: IntoIterator<Item = IpRange>>(iter: I) -> Self {
        let mut s = RangeSet::new();
        s.extend(iter);
        s
    }
}
