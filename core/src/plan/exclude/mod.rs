//! excludeIps: keep Service VIPs out of pod IPAM.
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
//!   ([`EXCLUDE_IPS_KEY`](crate::keys::EXCLUDE_IPS_KEY), space-separated IPv4 addresses). The next plan strips exactly those tokens
//!   from the front and rebuilds them, so removal never touches a user byte, and add-then-remove
//!   gives back the original text (an empty result deletes the key).
//! - A VIP the user's own entries already exclude (single or range) is not added; a VIP that is
//!   gone or left the subnet is removed; a switch without a usable subnet gets no additions.
//! - Planning on the output again yields no change.
//! - Address pools ([`plan_ovn_with_pools`]): each pool's part inside the subnet goes in as one
//!   `a..b` token (after vipflow's addresses, before the user's text), unless the user's
//!   entries cover it already; VIPs inside it need no token of their own. Ranges are recorded
//!   and stripped like addresses.
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

mod kubeovn;
mod northd_text;
mod ovn;
mod ranges;

pub use kubeovn::{
    Finding, FindingReason, KubeOvnSubnetIpam, PoolRange, check_kubeovn, check_kubeovn_with_pools,
};
pub use northd_text::ipam_span;
pub use northd_text::{
    OvnEntry, OvnExcludeIps, OvnTokenError, SubnetError, parse_ovn_exclude_ips, parse_ovn_subnet,
};
pub use ovn::{
    ExcludePlan, LogicalSwitchIpam, SwitchChange, SwitchProblem, SwitchProblemKind, V4Range,
    format_ours, format_record, parse_our_ranges, parse_ours, plan_ovn, plan_ovn_with_pools,
};
pub use ranges::gaps;
pub use ranges::{IpRange, RangeError, RangeSet, parse_entry};

#[cfg(test)]
mod tests;
