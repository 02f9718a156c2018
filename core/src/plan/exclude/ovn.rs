//! The OVN-native plan: every IPv4 VIP inside a switch's subnet excluded, the user's text
//! kept byte for byte.

use crate::keys::EXCLUDE_IPS_KEY;
use crate::plan::exclude::northd_text::Lexeme;
use crate::plan::exclude::northd_text::Lexer;
use crate::plan::exclude::northd_text::OvnTokenError;
use crate::plan::exclude::northd_text::SubnetError;
use crate::plan::exclude::northd_text::ipam_span;
use crate::plan::exclude::northd_text::is_ovn_ws;
use crate::plan::exclude::northd_text::parse_ovn_exclude_ips;
use crate::plan::exclude::northd_text::parse_ovn_subnet;
use crate::plan::exclude::ranges::RangeSet;
use crate::plan::exclude::ranges::covers;
use crate::plan::exclude::ranges::interval_contains;
use crate::plan::exclude::ranges::normalize;
use ipnet::Ipv4Net;
use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use thiserror::Error;

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
    /// `external_ids` [`EXCLUDE_IPS_KEY`].
    pub ours: Option<String>,
}

/// The new values for one switch that needs a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchChange {
    pub name: String,
    /// New `other_config:exclude_ips`; `None` deletes the key.
    pub exclude_ips: Option<String>,
    /// What vipflow's entries now are: single addresses (VIPs)...
    pub ours: BTreeSet<Ipv4Addr>,
    /// ...and ranges (address pools).
    pub ours_ranges: BTreeSet<V4Range>,
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
    #[error("external_ids:{key} has `{0}`, not an IPv4 address; ignored", key = EXCLUDE_IPS_KEY)]
    BadRecord(String),
    #[error(
        "external_ids:{key} lists {0} but exclude_ips does not start with it; \
         the text is left as it is",
        key = EXCLUDE_IPS_KEY
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
    #[error(
        "external_ids:{key} lists {0} but exclude_ips does not start with it; \
         the text is left as it is",
        key = EXCLUDE_IPS_KEY
    )]
    LostRange(V4Range),
    #[error(
        "other_config:exclude_ips begins with `..` (northd ignores the whole value); pool \
         ranges {} are not excluded",
        .0.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(" ")
    )]
    CannotPlaceRanges(Vec<V4Range>),
    #[error("pool range {0} is not covered by the planned exclude_ips (vipflow bug)")]
    RangeNotCovered(V4Range),
}

/// An inclusive IPv4 range vipflow keeps in `exclude_ips` (an address pool's part inside a
/// switch's subnet), written `a..b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct V4Range {
    pub start: Ipv4Addr,
    pub end: Ipv4Addr,
}

impl fmt::Display for V4Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.start, self.end)
    }
}

impl std::str::FromStr for V4Range {
    type Err = ();

    /// `a..b` with `a < b`, nothing around: the form vipflow writes.
    fn from_str(t: &str) -> Result<V4Range, ()> {
        let (a, b) = t.split_once("..").ok_or(())?;
        let (start, end): (Ipv4Addr, Ipv4Addr) =
            (a.parse().map_err(|_| ())?, b.parse().map_err(|_| ())?);
        (start < end).then_some(V4Range { start, end }).ok_or(())
    }
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

pub(crate) fn join_ips(ips: &[Ipv4Addr]) -> String {
    let v: Vec<String> = ips.iter().map(Ipv4Addr::to_string).collect();
    v.join(" ")
}

/// Parse the record: space-separated IPv4 addresses and `a..b` ranges; the addresses, and
/// bad tokens apart (ranges are read by [`parse_our_ranges`]).
pub fn parse_ours(value: &str) -> (BTreeSet<Ipv4Addr>, Vec<String>) {
    let mut bad = Vec::new();
    let set = value
        .split_ascii_whitespace()
        .filter(|t| t.parse::<V4Range>().is_err())
        .filter_map(|t| t.parse().map_err(|_| bad.push(t.to_owned())).ok())
        .collect();
    (set, bad)
}

/// The record's ranges.
pub fn parse_our_ranges(value: &str) -> BTreeSet<V4Range> {
    value
        .split_ascii_whitespace()
        .filter_map(|t| t.parse().ok())
        .collect()
}

/// The record's value; `None` when empty (the key is deleted).
pub fn format_ours(ours: &BTreeSet<Ipv4Addr>) -> Option<String> {
    format_record(ours, &BTreeSet::new())
}

/// The record's value with ranges too; `None` when empty.
pub fn format_record(ours: &BTreeSet<Ipv4Addr>, ranges: &BTreeSet<V4Range>) -> Option<String> {
    let s = tokens(ours, ranges);
    (!s.is_empty()).then_some(s)
}

/// vipflow's tokens: the addresses, then the ranges, single-space separated.
fn tokens(ours: &BTreeSet<Ipv4Addr>, ranges: &BTreeSet<V4Range>) -> String {
    let mut s = join_ips(&ours.iter().copied().collect::<Vec<_>>());
    for r in ranges {
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(&r.to_string());
    }
    s
}

/// Split `text` into vipflow's front tokens (those in `recorded`) and the user's text, which
/// is returned byte for byte. Each recorded address is stripped at most once.
pub(crate) fn strip_ours<'a>(
    text: &'a str,
    recorded: &BTreeSet<Ipv4Addr>,
    recorded_ranges: &BTreeSet<V4Range>,
) -> (BTreeSet<Ipv4Addr>, BTreeSet<V4Range>, &'a str) {
    let mut found = BTreeSet::new();
    let mut found_ranges = BTreeSet::new();
    let mut rest = text;
    loop {
        let word_end = rest.bytes().position(is_ovn_ws).unwrap_or(rest.len());
        let word = &rest[..word_end];
        if let Ok(r) = word.parse::<V4Range>() {
            if !recorded_ranges.contains(&r) || found_ranges.contains(&r) {
                break;
            }
            let after = &rest[word_end..];
            let next = match after.strip_prefix(' ') {
                Some(n) => n,
                None if after.is_empty() => after,
                None => break,
            };
            found_ranges.insert(r);
            rest = next;
            continue;
        }
        let Ok(ip) = word.parse::<Ipv4Addr>() else {
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
    (found, found_ranges, rest)
}

/// vipflow's tokens (addresses, then ranges) in front of the user's text.
pub(crate) fn compose(ours: &BTreeSet<Ipv4Addr>, ranges: &BTreeSet<V4Range>, user: &str) -> String {
    let mut s = tokens(ours, ranges);
    if !s.is_empty() && !user.is_empty() {
        s.push(' ');
    }
    s.push_str(user);
    s
}

/// The OVN-native plan: which switches' `exclude_ips` must change so that every IPv4 VIP in
/// their subnet is excluded, and only vipflow's own entries are ever added or removed.
pub fn plan_ovn(vips: &BTreeSet<IpAddr>, switches: &[LogicalSwitchIpam]) -> ExcludePlan {
    plan_ovn_with_pools(vips, &[], switches)
}

/// [`plan_ovn`], and every address pool range (inclusive IPv4 bounds) kept out of the IPAM of
/// the switches whose subnet it meets: the part inside the subnet goes in as one `a..b`
/// token, unless the user's own entries cover it already; VIPs inside such a range need no
/// token of their own.
pub fn plan_ovn_with_pools(
    vips: &BTreeSet<IpAddr>,
    pools: &[(Ipv4Addr, Ipv4Addr)],
    switches: &[LogicalSwitchIpam],
) -> ExcludePlan {
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
        let record = sw.ours.as_deref().unwrap_or("");
        let (recorded, bad) = parse_ours(record);
        let recorded_ranges = parse_our_ranges(record);
        bad.into_iter()
            .for_each(|t| problem(SwitchProblemKind::BadRecord(t)));
        let text = sw.exclude_ips.as_deref().unwrap_or("");
        let (stripped, stripped_ranges, user) = strip_ours(text, &recorded, &recorded_ranges);
        recorded
            .difference(&stripped)
            .for_each(|&ip| problem(SwitchProblemKind::Lost(ip)));
        recorded_ranges
            .difference(&stripped_ranges)
            .for_each(|&r| problem(SwitchProblemKind::LostRange(r)));

        let subnet = match sw.subnet.as_deref().map(parse_ovn_subnet) {
            None => None,
            Some(Ok(n)) => Some(n),
            Some(Err(e)) => {
                problem(SwitchProblemKind::BadSubnet(e));
                None
            }
        };
        let mut wanted = BTreeSet::new();
        let mut wanted_ranges: BTreeSet<V4Range> = BTreeSet::new();
        let mut in_subnet = BTreeSet::new();
        let mut ranges_in_subnet: Vec<(u32, u32)> = Vec::new();
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
            // Each pool's part inside the subnet (northd skips an entry that leaves it).
            ranges_in_subnet = pools
                .iter()
                .map(|&(a, b)| (u32::from(a).max(lo), u32::from(b).min(hi)))
                .filter(|(a, b)| a <= b)
                .collect();
            normalize(&mut ranges_in_subnet);
            for &(a, b) in &ranges_in_subnet {
                if covers(&user_set.v4, a, b) {
                    continue;
                }
                if a == b {
                    wanted.insert(Ipv4Addr::from(a));
                } else {
                    wanted_ranges.insert(V4Range {
                        start: Ipv4Addr::from(a),
                        end: Ipv4Addr::from(b),
                    });
                }
            }
            in_subnet = v4
                .iter()
                .copied()
                .filter(|&a| (lo..=hi).contains(&u32::from(a)))
                .collect();
            wanted.extend(in_subnet.iter().copied().filter(|&a| {
                !user_set.contains(a.into()) && !interval_contains(&ranges_in_subnet, u32::from(a))
            }));
        }
        let placeable = Lexer::new(user).next().1 != Lexeme::Ellipsis;
        if !placeable {
            if !wanted.is_empty() {
                problem(SwitchProblemKind::CannotPlace(
                    wanted.iter().copied().collect(),
                ));
                wanted.clear();
            }
            if !wanted_ranges.is_empty() {
                problem(SwitchProblemKind::CannotPlaceRanges(
                    wanted_ranges.iter().copied().collect(),
                ));
                wanted_ranges.clear();
            }
        }

        // Unchanged text unless we add or remove something, so Some("") stays Some("").
        let new_text = if wanted.is_empty()
            && wanted_ranges.is_empty()
            && stripped.is_empty()
            && stripped_ranges.is_empty()
        {
            sw.exclude_ips.clone()
        } else {
            Some(compose(&wanted, &wanted_ranges, user)).filter(|t| !t.is_empty())
        };
        // Belt and braces: read the result back as northd will.
        if placeable {
            let (effective, _) = RangeSet::from_ovn_text(new_text.as_deref().unwrap_or(""));
            for &a in in_subnet.iter().filter(|&&a| !effective.contains(a.into())) {
                problem(SwitchProblemKind::NotCovered(a));
            }
            for &(a, b) in &ranges_in_subnet {
                if !covers(&effective.v4, a, b) {
                    problem(SwitchProblemKind::RangeNotCovered(V4Range {
                        start: Ipv4Addr::from(a),
                        end: Ipv4Addr::from(b),
                    }));
                }
            }
        }
        let ours_value = format_record(&wanted, &wanted_ranges);
        if new_text != sw.exclude_ips || ours_value != sw.ours {
            plan.changes.push(SwitchChange {
                name: sw.name.clone(),
                exclude_ips: new_text,
                ours: wanted,
                ours_ranges: wanted_ranges,
                ours_value,
            });
        }
    }
    plan
}
