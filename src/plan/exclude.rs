//! excludeIps: keep Service VIPs out of pod IPAM (DESIGN.md "excludeIps").
//!
//! **OVN native IPAM.** northd hands `dynamic` addresses out of a Logical_Switch's
//! `other_config:subnet` (IPv4 only: IPv6 comes from `ipv6_prefix` + MAC, so only IPv4 VIPs
//! matter) minus `other_config:exclude_ips`. [`plan_ovn`] makes sure every IPv4 VIP inside a
//! switch's subnet is excluded:
//! - The user's text is kept byte for byte. vipflow's entries go **in front** of it, one IPv4
//!   address each, single-space separated, plus one space before the user's text:
//!   `"<ours> <user's text>"`. In front, not behind, because northd stops reading at the first
//!   syntax error (a comma, a CIDR, a name): anything behind a user typo would be ignored.
//! - What vipflow added is recorded in the switch's `external_ids:vipflow.io/exclude-ips`
//!   ([`OURS_KEY`], space-separated IPv4 addresses). The next plan strips exactly those tokens
//!   from the front and rebuilds them, so removal never touches a user byte, and add-then-remove
//!   gives back the original text (an empty result deletes the key).
//! - A VIP the user's own entries already exclude (single or range) is not added; a VIP that is
//!   gone or left the subnet is removed; a switch without a usable subnet gets no additions.
//! - Planning on the output again yields no change.
//!
//! [`parse_ovn_exclude_ips`] reads the text as northd does (northd/ipam.c `init_ipam_ipv4` on
//! the OVN lexer, lib/lex.c): entries are separated by any whitespace (or `//`, `/* */`
//! comments), `a..b` may have spaces around `..`; the first token that is not a number stops
//! northd and the rest is ignored; a reversed or out-of-subnet entry is skipped with a warning.
//!
//! **Kube-OVN.** [`check_kubeovn`] reports every VIP inside a `Subnet`'s `cidrBlock` ("v4",
//! "v6" or "v4,v6") that its `excludeIps` (IPs and `a..b` ranges, v4 or v6) does not cover. The
//! network address, the IPv4 broadcast address and the gateway are never handed out, so they
//! are not reported.

use ipnet::{IpNet, Ipv4Net};
use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::Range;
use thiserror::Error;

/// The Logical_Switch `external_ids` key recording what vipflow added to `exclude_ips`.
pub const OURS_KEY: &str = "vipflow.io/exclude-ips";

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
    start: IpAddr,
    end: IpAddr,
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
trait Bound: Copy + Ord {
    fn next_sat(self) -> Self;
}

impl Bound for u32 {
    fn next_sat(self) -> Self {
        self.saturating_add(1)
    }
}

impl Bound for u128 {
    fn next_sat(self) -> Self {
        self.saturating_add(1)
    }
}

/// Sort, then merge overlapping and adjacent intervals.
fn normalize<T: Bound>(v: &mut Vec<(T, T)>) {
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

fn interval_contains<T: Bound>(v: &[(T, T)], x: T) -> bool {
    let i = v.partition_point(|&(s, _)| s <= x);
    i > 0 && v[i - 1].1 >= x
}

/// A set of addresses as sorted, disjoint, non-adjacent ranges, per family.
/// Containment is a binary search; building is O(n log n).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
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

// ---------------------------------------------------------------------------------------------
// OVN exclude_ips, read as northd reads it.

/// A problem in OVN `exclude_ips` text at byte `offset`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("at byte {offset}: {error}; {}", northd_note(*.stops_northd))]
pub struct OvnTokenError {
    pub offset: usize,
    pub error: RangeError,
    /// northd's parser gives up here: no later entry is excluded.
    pub stops_northd: bool,
}

fn northd_note(stops: bool) -> &'static str {
    if stops {
        "northd ignores everything from here on"
    } else {
        "northd goes on with the next entry"
    }
}

/// One entry northd applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OvnEntry {
    /// Byte span in the text, `..` and its end included.
    pub span: Range<usize>,
    /// Always IPv4.
    pub range: IpRange,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OvnExcludeIps {
    pub entries: Vec<OvnEntry>,
    pub errors: Vec<OvnTokenError>,
}

/// The whitespace the OVN lexer skips.
fn is_ovn_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lexeme<'a> {
    End,
    Ellipsis,
    /// What the OVN lexer reads as one numeric token (it may still be invalid).
    Word(&'a str),
    /// Anything else (a name, punctuation, a CIDR, an open comment): northd stops here.
    Other(&'a str),
}

struct Lexer<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Lexer<'a> {
    fn new(s: &'a str) -> Self {
        Lexer { s, pos: 0 }
    }

    fn run_to_ws(&self, from: usize) -> usize {
        let b = self.s.as_bytes();
        (from..b.len())
            .find(|&i| is_ovn_ws(b[i]))
            .unwrap_or(b.len())
    }

    /// The next lexeme and its byte offset.
    fn next(&mut self) -> (usize, Lexeme<'a>) {
        let b = self.s.as_bytes();
        loop {
            while self.pos < b.len() && is_ovn_ws(b[self.pos]) {
                self.pos += 1;
            }
            let rest = &b[self.pos..];
            if rest.starts_with(b"//") {
                self.pos = (self.pos..b.len())
                    .find(|&i| b[i] == b'\n')
                    .unwrap_or(b.len());
            } else if rest.starts_with(b"/*") {
                // The lexer rejects a comment that reaches a newline or the end unclosed.
                let body = self.pos + 2;
                let close = (body..b.len())
                    .take_while(|&i| b[i] != b'\n')
                    .find(|&i| b[i..].starts_with(b"*/"));
                match close {
                    Some(i) => self.pos = i + 2,
                    None => {
                        let start = self.pos;
                        self.pos = self.run_to_ws(start);
                        return (start, Lexeme::Other(&self.s[start..self.pos]));
                    }
                }
            } else {
                break;
            }
        }
        let start = self.pos;
        let Some(&c) = b.get(start) else {
            return (start, Lexeme::End);
        };
        if b[start..].starts_with(b"..") {
            self.pos += 2;
            return (start, Lexeme::Ellipsis);
        }
        let hex_then_colon = || {
            let k = (start..b.len())
                .find(|&i| !b[i].is_ascii_hexdigit())
                .unwrap_or(b.len());
            b.get(k) == Some(&b':')
        };
        let numeric = c.is_ascii_digit()
            || (c == b':' && b.get(start + 1) == Some(&b':'))
            || (c.is_ascii_hexdigit() && hex_then_colon());
        if !numeric {
            self.pos = self.run_to_ws(start);
            return (start, Lexeme::Other(&self.s[start..self.pos]));
        }
        // lib/lex.c: alnum, ':' until a '.' was seen, '.' unless it starts "..".
        let mut end = start;
        let mut saw_dot = false;
        while let Some(&ch) = b.get(end) {
            let take = ch.is_ascii_alphanumeric()
                || (ch == b':' && !saw_dot)
                || (ch == b'.' && b.get(end + 1) != Some(&b'.'));
            if !take {
                break;
            }
            saw_dot |= ch == b'.';
            end += 1;
        }
        if b.get(end) == Some(&b'/') {
            // A masked value (CIDR): not an address to northd.
            self.pos = self.run_to_ws(start);
            return (start, Lexeme::Other(&self.s[start..self.pos]));
        }
        self.pos = end;
        (start, Lexeme::Word(&self.s[start..end]))
    }

    fn peek(&self) -> Lexeme<'a> {
        Lexer {
            s: self.s,
            pos: self.pos,
        }
        .next()
        .1
    }
}

/// How northd sees one numeric token.
enum Num {
    V4(Ipv4Addr),
    /// A number the lexer accepts (IPv6, decimal, hex, MAC) that northd silently turns into
    /// an IPv4 address from its low 32 bits; vipflow counts it as excluding nothing.
    Misread,
    /// A lexical error: northd stops.
    Invalid,
}

fn classify(w: &str) -> Num {
    if let Ok(a) = w.parse::<Ipv4Addr>() {
        return Num::V4(a);
    }
    let b = w.as_bytes();
    let is_mac = b.len() == 17
        && b.chunks(3).all(|c| {
            c[0].is_ascii_hexdigit()
                && c[1].is_ascii_hexdigit()
                && c.get(2).is_none_or(|&x| x == b':')
        });
    let decimal = !b.is_empty()
        && b.iter().all(u8::is_ascii_digit)
        && (b.len() == 1 || b[0] != b'0')
        && w.parse::<u64>().is_ok();
    let hex = match w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
        Some(h) => {
            !h.is_empty()
                && h.bytes().all(|x| x.is_ascii_hexdigit())
                && h.trim_start_matches('0').len() <= 32
        }
        None => false,
    };
    if is_mac || decimal || hex || (w.len() < 46 && w.parse::<Ipv6Addr>().is_ok()) {
        Num::Misread
    } else {
        Num::Invalid
    }
}

/// Read `exclude_ips` as northd does: the entries it applies and every problem, in order.
pub fn parse_ovn_exclude_ips(text: &str) -> OvnExcludeIps {
    let mut out = OvnExcludeIps::default();
    let mut lx = Lexer::new(text);
    let fatal = |out: &mut OvnExcludeIps, offset, error| {
        out.errors.push(OvnTokenError {
            offset,
            error,
            stops_northd: true,
        })
    };
    loop {
        let (start, first) = match lx.next() {
            (_, Lexeme::End) => break,
            (start, Lexeme::Word(w)) => (start, w),
            (start, Lexeme::Ellipsis) => {
                let token = "..".to_owned();
                fatal(&mut out, start, RangeError::Unexpected { token });
                break;
            }
            (start, Lexeme::Other(t)) => {
                let token = t.to_owned();
                fatal(&mut out, start, RangeError::Unexpected { token });
                break;
            }
        };
        let a = classify(first);
        if let Num::Invalid = a {
            let token = first.to_owned();
            fatal(&mut out, start, RangeError::NotAnAddress { token });
            break;
        }
        let (b, token_end) = if lx.peek() == Lexeme::Ellipsis {
            lx.next();
            match lx.next() {
                (_, Lexeme::Word(w)) => (Some((w, classify(w))), lx.pos),
                (_, Lexeme::End) => {
                    let token = format!("{first}..");
                    fatal(&mut out, start, RangeError::MissingEnd { token });
                    break;
                }
                (_, Lexeme::Ellipsis) | (_, Lexeme::Other(_)) => {
                    let part = text[lx.pos..].split_ascii_whitespace().next().unwrap_or("");
                    let (entry, part) = (format!("{first}..{part}"), part.to_owned());
                    fatal(&mut out, start, RangeError::BadRangeBound { entry, part });
                    break;
                }
            }
        } else {
            (None, start + first.len())
        };
        let token = &text[start..token_end];
        let skip = |out: &mut OvnExcludeIps, error| {
            out.errors.push(OvnTokenError {
                offset: start,
                error,
                stops_northd: false,
            })
        };
        match (a, b) {
            (_, Some((w, Num::Invalid))) => {
                let (entry, part) = (token.to_owned(), w.to_owned());
                fatal(&mut out, start, RangeError::BadRangeBound { entry, part });
                break;
            }
            (Num::V4(x), None) => out.entries.push(OvnEntry {
                span: start..token_end,
                range: IpRange::single(x.into()),
            }),
            (Num::V4(x), Some((_, Num::V4(y)))) => match IpRange::new(x.into(), y.into()) {
                Ok(range) => out.entries.push(OvnEntry {
                    span: start..token_end,
                    range,
                }),
                Err(_) => {
                    let token = token.to_owned();
                    let (start, end) = (x.into(), y.into());
                    skip(&mut out, RangeError::Reversed { token, start, end });
                }
            },
            _ => {
                let token = token.to_owned();
                skip(&mut out, RangeError::NotIpv4 { token });
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// OVN other_config:subnet

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SubnetError {
    #[error("`{0}` is not an IPv4 CIDR (OVN's subnet is IPv4 only; IPv6 uses ipv6_prefix)")]
    Syntax(String),
    #[error("`{0}`: the netmask is not contiguous")]
    NonCidrMask(String),
    #[error("`{0}`: a /32 leaves nothing to allocate; northd ignores it")]
    HostPrefix(String),
}

/// Dotted quad the way northd's `ip_parse_masked` scans it (decimal octets, leading zeros
/// allowed), so a subnet northd accepts is never treated as unusable here.
fn scan_v4(s: &str) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut parts = s.split('.');
    for o in &mut octets {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 3 || !p.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        *o = p.parse().ok()?;
    }
    parts.next().is_none().then_some(Ipv4Addr::from(octets))
}

/// `other_config:subnet`: `a.b.c.d/len` or `a.b.c.d/m.m.m.m`; host bits are dropped.
pub fn parse_ovn_subnet(s: &str) -> Result<Ipv4Net, SubnetError> {
    let syntax = || SubnetError::Syntax(s.to_owned());
    let (addr, mask) = s.split_once('/').ok_or_else(syntax)?;
    let addr = scan_v4(addr).ok_or_else(syntax)?;
    let prefix = if mask.contains('.') {
        let m = u32::from(scan_v4(mask).ok_or_else(syntax)?);
        if m.leading_ones() + m.trailing_zeros() != 32 {
            return Err(SubnetError::NonCidrMask(s.to_owned()));
        }
        m.leading_ones() as u8
    } else if !mask.is_empty() && mask.len() <= 3 && mask.bytes().all(|c| c.is_ascii_digit()) {
        mask.parse::<u8>().map_err(|_| syntax())?
    } else {
        return Err(syntax());
    };
    if prefix == 32 {
        return Err(SubnetError::HostPrefix(s.to_owned()));
    }
    Ipv4Net::new(addr, prefix)
        .map(|n| n.trunc())
        .map_err(|_| syntax())
}

/// The addresses northd's IPAM covers: network + 1 through broadcast.
fn ipam_span(net: &Ipv4Net) -> (u32, u32) {
    (
        u32::from(net.network()).saturating_add(1),
        u32::from(net.broadcast()),
    )
}

// ---------------------------------------------------------------------------------------------
// The OVN native plan

/// One Logical_Switch as observed, raw values as stored in the NB database.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogicalSwitchIpam {
    pub name: String,
    /// `other_config:subnet`.
    pub subnet: Option<String>,
    /// `other_config:exclude_ips`.
    pub exclude_ips: Option<String>,
    /// `external_ids:vipflow.io/exclude-ips` ([`OURS_KEY`]).
    pub ours: Option<String>,
}

/// The new values for one switch that needs a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchChange {
    pub name: String,
    /// New `other_config:exclude_ips`; `None` deletes the key.
    pub exclude_ips: Option<String>,
    /// What vipflow's entries now are.
    pub ours: BTreeSet<Ipv4Addr>,
    /// New `external_ids:vipflow.io/exclude-ips`; `None` deletes the key.
    pub ours_value: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SwitchProblemKind {
    #[error("other_config:subnet {0}; no VIP is excluded here")]
    BadSubnet(SubnetError),
    #[error("other_config:exclude_ips {0}")]
    UserEntry(OvnTokenError),
    #[error(
        "other_config:exclude_ips entry `{entry}` lies outside subnet {subnet}; northd skips it"
    )]
    OutsideSubnet { entry: String, subnet: Ipv4Net },
    #[error("external_ids:vipflow.io/exclude-ips has `{0}`, not an IPv4 address; ignored")]
    BadRecord(String),
    #[error(
        "external_ids:vipflow.io/exclude-ips lists {0} but exclude_ips does not start with it; \
         the text is left as it is"
    )]
    Lost(Ipv4Addr),
    #[error(
        "other_config:exclude_ips begins with `..` (northd ignores the whole value); an address \
         put in front would become a range, so VIPs {} are not excluded",
        join_ips(.0)
    )]
    CannotPlace(Vec<Ipv4Addr>),
    #[error("VIP {0} is not covered by the planned exclude_ips (vipflow bug)")]
    NotCovered(Ipv4Addr),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchProblem {
    pub switch: String,
    pub kind: SwitchProblemKind,
}

impl fmt::Display for SwitchProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Logical_Switch {}: {}", self.switch, self.kind)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExcludePlan {
    /// Only switches whose `exclude_ips` or record must change, in input order.
    pub changes: Vec<SwitchChange>,
    pub problems: Vec<SwitchProblem>,
}

fn join_ips(ips: &[Ipv4Addr]) -> String {
    let v: Vec<String> = ips.iter().map(Ipv4Addr::to_string).collect();
    v.join(" ")
}

/// Parse the record: space-separated IPv4 addresses; bad tokens returned apart.
pub fn parse_ours(value: &str) -> (BTreeSet<Ipv4Addr>, Vec<String>) {
    let mut bad = Vec::new();
    let set = value
        .split_ascii_whitespace()
        .filter_map(|t| t.parse().map_err(|_| bad.push(t.to_owned())).ok())
        .collect();
    (set, bad)
}

/// The record's value; `None` when empty (the key is deleted).
pub fn format_ours(ours: &BTreeSet<Ipv4Addr>) -> Option<String> {
    (!ours.is_empty()).then(|| join_ips(&ours.iter().copied().collect::<Vec<_>>()))
}

/// Split `text` into vipflow's front tokens (those in `recorded`) and the user's text, which
/// is returned byte for byte. Each recorded address is stripped at most once.
fn strip_ours<'a>(text: &'a str, recorded: &BTreeSet<Ipv4Addr>) -> (BTreeSet<Ipv4Addr>, &'a str) {
    let mut found = BTreeSet::new();
    let mut rest = text;
    loop {
        let word_end = rest.bytes().position(is_ovn_ws).unwrap_or(rest.len());
        let Ok(ip) = rest[..word_end].parse::<Ipv4Addr>() else {
            break;
        };
        if !recorded.contains(&ip) || found.contains(&ip) {
            break;
        }
        let after = &rest[word_end..];
        // We write exactly one space after each token, or none at the very end.
        let next = match after.strip_prefix(' ') {
            Some(n) => n,
            None if after.is_empty() => after,
            None => break,
        };
        // "ip ..x" is the user's range, not our token.
        if Lexer::new(after).next().1 == Lexeme::Ellipsis {
            break;
        }
        found.insert(ip);
        rest = next;
    }
    (found, rest)
}

/// vipflow's tokens in front of the user's text.
fn compose(ours: &BTreeSet<Ipv4Addr>, user: &str) -> String {
    let mut s = join_ips(&ours.iter().copied().collect::<Vec<_>>());
    if !s.is_empty() && !user.is_empty() {
        s.push(' ');
    }
    s.push_str(user);
    s
}

/// The OVN-native plan: which switches' `exclude_ips` must change so that every IPv4 VIP in
/// their subnet is excluded, and only vipflow's own entries are ever added or removed.
pub fn plan_ovn(vips: &BTreeSet<IpAddr>, switches: &[LogicalSwitchIpam]) -> ExcludePlan {
    let v4: BTreeSet<Ipv4Addr> = vips
        .iter()
        .filter_map(|ip| match ip {
            IpAddr::V4(a) => Some(*a),
            IpAddr::V6(_) => None,
        })
        .collect();
    let mut plan = ExcludePlan::default();
    for sw in switches {
        let mut problem = |kind| {
            plan.problems.push(SwitchProblem {
                switch: sw.name.clone(),
                kind,
            })
        };
        let (recorded, bad) = parse_ours(sw.ours.as_deref().unwrap_or(""));
        bad.into_iter()
            .for_each(|t| problem(SwitchProblemKind::BadRecord(t)));
        let text = sw.exclude_ips.as_deref().unwrap_or("");
        let (stripped, user) = strip_ours(text, &recorded);
        recorded
            .difference(&stripped)
            .for_each(|&ip| problem(SwitchProblemKind::Lost(ip)));

        let subnet = match sw.subnet.as_deref().map(parse_ovn_subnet) {
            None => None,
            Some(Ok(n)) => Some(n),
            Some(Err(e)) => {
                problem(SwitchProblemKind::BadSubnet(e));
                None
            }
        };
        let mut wanted = BTreeSet::new();
        let mut in_subnet = BTreeSet::new();
        if let Some(net) = subnet {
            // northd reads exclude_ips only when the subnet is valid; so do we.
            let parsed = parse_ovn_exclude_ips(user);
            for e in &parsed.errors {
                problem(SwitchProblemKind::UserEntry(e.clone()));
            }
            let (lo, hi) = ipam_span(&net);
            for e in &parsed.entries {
                let (s, t) = match (e.range.start, e.range.end) {
                    (IpAddr::V4(s), IpAddr::V4(t)) => (u32::from(s), u32::from(t)),
                    _ => continue,
                };
                if t < lo || s > hi {
                    let entry = user[e.span.clone()].to_owned();
                    problem(SwitchProblemKind::OutsideSubnet { entry, subnet: net });
                }
            }
            let user_set: RangeSet = parsed.entries.iter().map(|e| e.range).collect();
            in_subnet = v4
                .iter()
                .copied()
                .filter(|&a| (lo..=hi).contains(&u32::from(a)))
                .collect();
            wanted = in_subnet
                .iter()
                .copied()
                .filter(|&a| !user_set.contains(a.into()))
                .collect();
        }
        let placeable = Lexer::new(user).next().1 != Lexeme::Ellipsis;
        if !wanted.is_empty() && !placeable {
            problem(SwitchProblemKind::CannotPlace(
                wanted.iter().copied().collect(),
            ));
            wanted.clear();
        }

        // Unchanged text unless we add or remove something, so Some("") stays Some("").
        let new_text = if wanted.is_empty() && stripped.is_empty() {
            sw.exclude_ips.clone()
        } else {
            Some(compose(&wanted, user)).filter(|t| !t.is_empty())
        };
        // Belt and braces: read the result back as northd will.
        if placeable {
            let (effective, _) = RangeSet::from_ovn_text(new_text.as_deref().unwrap_or(""));
            for &a in in_subnet.iter().filter(|&&a| !effective.contains(a.into())) {
                problem(SwitchProblemKind::NotCovered(a));
            }
        }
        let ours_value = format_ours(&wanted);
        if new_text != sw.exclude_ips || ours_value != sw.ours {
            plan.changes.push(SwitchChange {
                name: sw.name.clone(),
                exclude_ips: new_text,
                ours: wanted,
                ours_value,
            });
        }
    }
    plan
}

// ---------------------------------------------------------------------------------------------
// The Kube-OVN check

/// The parts of a Kube-OVN `Subnet` (kubeovn.io/v1) this check reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeOvnSubnet {
    pub name: String,
    /// `spec.cidrBlock`: "v4cidr", "v6cidr" or "v4cidr,v6cidr".
    pub cidr_block: String,
    /// `spec.excludeIps`.
    pub exclude_ips: Vec<String>,
    /// `spec.gateway` ("gw4" or "gw4,gw6"); Kube-OVN's controller adds it to excludeIps itself,
    /// so a VIP equal to it is not reported even before that happened.
    pub gateway: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FindingReason {
    #[error("inside cidrBlock {cidr} but not in excludeIps: Kube-OVN may give it to a pod")]
    NotExcluded { cidr: IpNet },
    #[error("cidrBlock entry `{cidr}` is not a CIDR")]
    BadCidr { cidr: String },
    #[error("excludeIps: {0}")]
    BadExcludeIp(RangeError),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub subnet: String,
    /// The VIP concerned, if the finding is about one.
    pub vip: Option<IpAddr>,
    pub reason: FindingReason,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.vip {
            Some(v) => write!(f, "Subnet {}: VIP {}: {}", self.subnet, v, self.reason),
            None => write!(f, "Subnet {}: {}", self.subnet, self.reason),
        }
    }
}

/// Kube-OVN never allocates the network address nor the IPv4 broadcast address.
fn allocatable(net: &IpNet, ip: IpAddr) -> bool {
    net.contains(&ip) && ip != net.network() && !(ip.is_ipv4() && ip == net.broadcast())
}

/// Every VIP inside a Subnet's CIDR that its excludeIps does not cover, plus every bad CIDR or
/// excludeIps entry (a bad entry excludes nothing).
pub fn check_kubeovn(vips: &BTreeSet<IpAddr>, subnets: &[KubeOvnSubnet]) -> Vec<Finding> {
    let mut findings = Vec::new();
    for sn in subnets {
        let mut finding = |vip, reason| {
            findings.push(Finding {
                subnet: sn.name.clone(),
                vip,
                reason,
            })
        };
        let mut cidrs = Vec::new();
        for c in sn.cidr_block.split(',') {
            match c.parse::<IpNet>() {
                Ok(n) => cidrs.push(n.trunc()),
                Err(_) => finding(None, FindingReason::BadCidr { cidr: c.to_owned() }),
            }
        }
        let (mut excluded, errors) = RangeSet::from_kubeovn(&sn.exclude_ips);
        for e in errors {
            finding(None, FindingReason::BadExcludeIp(e));
        }
        let gateways = sn.gateway.as_deref().unwrap_or("").split(',');
        excluded.extend(gateways.filter_map(|g| g.parse().ok().map(IpRange::single)));
        for &vip in vips {
            let hit = cidrs.iter().find(|n| allocatable(n, vip));
            if let Some(&cidr) = hit.filter(|_| !excluded.contains(vip)) {
                finding(Some(vip), FindingReason::NotExcluded { cidr });
            }
        }
    }
    findings
}

#[cfg(test)]
#[path = "exclude_tests.rs"]
mod tests;
