//! Helpers shared by the excludeIps tests.

use super::*;
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

pub(super) fn ip(s: &str) -> IpAddr {
    s.parse().expect("test IP")
}

pub(super) fn v4(s: &str) -> Ipv4Addr {
    s.parse().expect("test IPv4")
}

pub(super) fn vips(list: &[&str]) -> BTreeSet<IpAddr> {
    list.iter().map(|s| ip(s)).collect()
}

pub(super) fn switch(
    subnet: Option<&str>,
    exclude: Option<&str>,
    ours: Option<&str>,
) -> LogicalSwitchIpam {
    LogicalSwitchIpam {
        name: "ls0".into(),
        subnet: subnet.map(str::to_owned),
        exclude_ips: exclude.map(str::to_owned),
        ours: ours.map(str::to_owned),
    }
}

/// Write a change back the way the reconciler would.
pub(super) fn apply(sw: &LogicalSwitchIpam, plan: &ExcludePlan) -> LogicalSwitchIpam {
    let mut out = sw.clone();
    if let Some(c) = plan.changes.iter().find(|c| c.name == sw.name) {
        out.exclude_ips = c.exclude_ips.clone();
        out.ours = c.ours_value.clone();
    }
    out
}

pub(super) fn plan1(v: &BTreeSet<IpAddr>, sw: &LogicalSwitchIpam) -> ExcludePlan {
    plan_ovn(v, std::slice::from_ref(sw))
}

pub(super) fn covered(text: Option<&str>, a: &str) -> bool {
    RangeSet::from_ovn_text(text.unwrap_or(""))
        .0
        .contains(ip(a))
}
