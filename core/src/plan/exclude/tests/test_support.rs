//! Helpers shared by the excludeIps tests.

use super::*;
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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

pub(super) fn subnet(cidr: &str, exclude: &[&str]) -> KubeOvnSubnetIpam {
    KubeOvnSubnetIpam {
        name: "ovn-default".into(),
        cidr_block: cidr.into(),
        exclude_ips: exclude.iter().map(|s| s.to_string()).collect(),
        gateway: None,
    }
}

// --- strategies for the property tests ---------------------------------------------------------

// --- properties --------------------------------------------------------------------------------

pub(super) fn arb_v4() -> impl Strategy<Value = Ipv4Addr> {
    // Mostly inside 10.0.0.0/24, sometimes just outside it.
    prop_oneof![
        8 => (0u8..=255).prop_map(|x| Ipv4Addr::new(10, 0, 0, x)),
        1 => (0u8..=3).prop_map(|x| Ipv4Addr::new(10, 0, 1, x)),
    ]
}

pub(super) fn arb_token() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => arb_v4().prop_map(|a| a.to_string()),
        3 => (arb_v4(), arb_v4(), prop_oneof![Just(".."), Just(" .. "), Just(".. ")])
            .prop_map(|(a, b, sep)| format!("{a}{sep}{b}")),
        1 => prop_oneof![
            Just(",".to_owned()),
            Just("10.0.0.0/28".to_owned()),
            Just("fd00::1".to_owned()),
            Just("bogus".to_owned()),
            Just("10.0.0.256".to_owned()),
            Just("7".to_owned()),
            Just("/* c */".to_owned()),
            Just("..".to_owned()),
        ],
    ]
}

pub(super) fn arb_sep() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        4 => Just(" "),
        1 => Just("  "),
        1 => Just("\t"),
        1 => Just("\n"),
        1 => Just(" \t "),
    ]
}

pub(super) fn arb_user_text() -> impl Strategy<Value = Option<String>> {
    let text = (
        arb_sep(),
        prop::collection::vec((arb_token(), arb_sep()), 0..6),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(lead, toks, with_lead, with_trail)| {
            let mut s = String::new();
            if with_lead {
                s.push_str(lead);
            }
            for (i, (t, sep)) in toks.iter().enumerate() {
                if i > 0 {
                    s.push_str(sep);
                }
                s.push_str(t);
            }
            if with_trail {
                s.push_str(lead);
            }
            s
        });
    prop_oneof![1 => Just(None), 6 => text.prop_map(Some)]
}

pub(super) fn arb_vips() -> impl Strategy<Value = BTreeSet<IpAddr>> {
    prop::collection::btree_set(
        prop_oneof![
            8 => arb_v4().prop_map(IpAddr::V4),
            1 => (0u16..16).prop_map(|x| IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, x))),
        ],
        0..8,
    )
}
