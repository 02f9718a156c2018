//! Tests for address pool ranges in excludeIps: the OVN-native plan's range tokens, the Kube-OVN
//! check of pool ranges, and their property.

use super::northd_text::{Lexeme, Lexer};
use super::test_support::*;
use super::*;
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

#[test]
fn kubeovn_pool_ranges_must_be_covered_by_exclude_ips() {
    let sn = subnet(
        "10.16.0.0/16,fd00:10:16::/112",
        &["10.16.0.1..10.16.0.50", "fd00:10:16::1..fd00:10:16::ff"],
    );
    let pool = |name: &str, s: &str, e: &str| PoolRange {
        pool: name.into(),
        range: IpRange::new(ip(s), ip(e)).unwrap(),
    };
    let pools = [
        // Half covered: 10.16.0.51 to .100 are not.
        pool("half", "10.16.0.10", "10.16.0.100"),
        // Covered whole.
        pool("covered", "10.16.0.20", "10.16.0.30"),
        // Outside every cidrBlock.
        pool("elsewhere", "192.0.2.0", "192.0.2.255"),
        // The network address is never handed out: only .1 onwards counts, and it is covered.
        pool("edge", "10.16.0.0", "10.16.0.1"),
    ];
    let f = check_kubeovn_with_pools(&BTreeSet::new(), &pools, std::slice::from_ref(&sn));
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(
        f[0].reason,
        FindingReason::PoolNotExcluded {
            pool: "half".into(),
            cidr: "10.16.0.0/16".parse().unwrap(),
            uncovered: IpRange::new(ip("10.16.0.51"), ip("10.16.0.100")).unwrap(),
            count: 50,
        }
    );
    assert!(
        f[0].to_string().starts_with(
            "Subnet ovn-default: pool `half` has 10.16.0.51..10.16.0.100 inside cidrBlock 10.16.0.0/16"
        ),
        "{}",
        f[0]
    );
    // IPv6, with a gap in the middle of the range.
    let v6 = check_kubeovn_with_pools(
        &BTreeSet::new(),
        &[pool("six", "fd00:10:16::f0", "fd00:10:16::1ff")],
        &[subnet(
            "fd00:10:16::/112",
            &["fd00:10:16::100..fd00:10:16::1ff"],
        )],
    );
    assert!(
        matches!(&v6[0].reason, FindingReason::PoolNotExcluded { uncovered, count: 16, .. }
            if uncovered.start() == ip("fd00:10:16::f0") && uncovered.end() == ip("fd00:10:16::ff")),
        "{v6:?}"
    );
}

// --- address pool ranges ----------------------------------------------------------------------

fn plan_pools(v: &BTreeSet<IpAddr>, pools: &[(&str, &str)], sw: &LogicalSwitchIpam) -> ExcludePlan {
    let pools: Vec<(Ipv4Addr, Ipv4Addr)> = pools.iter().map(|(a, b)| (v4(a), v4(b))).collect();
    plan_ovn_with_pools(v, &pools, std::slice::from_ref(sw))
}

#[test]
fn a_pool_range_goes_in_as_one_token_clamped_to_the_subnet() {
    let user = "10.0.0.2  10.0.0.10..10.0.0.20";
    let sw = switch(Some("10.0.0.0/24"), Some(user), None);
    // A VIP inside the pool needs no token of its own; one outside gets one.
    let plan = plan_pools(
        &vips(&["10.0.0.130", "10.0.0.40"]),
        &[("10.0.0.128", "10.0.1.255")],
        &sw,
    );
    assert!(plan.problems.is_empty(), "{:?}", plan.problems);
    let c = &plan.changes[0];
    assert_eq!(
        c.exclude_ips.as_deref(),
        Some("10.0.0.40 10.0.0.128..10.0.0.255 10.0.0.2  10.0.0.10..10.0.0.20")
    );
    assert_eq!(
        c.ours_value.as_deref(),
        Some("10.0.0.40 10.0.0.128..10.0.0.255")
    );
    assert_eq!(c.ours, [v4("10.0.0.40")].into());
    let s1 = apply(&sw, &plan);
    for a in ["10.0.0.128", "10.0.0.200", "10.0.0.255", "10.0.0.40"] {
        assert!(covered(s1.exclude_ips.as_deref(), a), "{a}");
    }
    // Idempotent; then the pool goes, and the user's bytes are back.
    assert!(
        plan_pools(
            &vips(&["10.0.0.130", "10.0.0.40"]),
            &[("10.0.0.128", "10.0.1.255")],
            &s1
        )
        .changes
        .is_empty()
    );
    let s2 = apply(&s1, &plan_pools(&BTreeSet::new(), &[], &s1));
    assert_eq!(s2.exclude_ips.as_deref(), Some(user));
    assert_eq!(s2.ours, None);
}

#[test]
fn a_pool_the_user_excludes_already_or_outside_the_subnet_changes_nothing() {
    let sw = switch(Some("10.0.0.0/24"), Some("10.0.0.100..10.0.0.200"), None);
    for pool in [("10.0.0.120", "10.0.0.130"), ("192.0.2.0", "192.0.2.255")] {
        assert!(
            plan_pools(&BTreeSet::new(), &[pool], &sw)
                .changes
                .is_empty(),
            "{pool:?}"
        );
    }
    // Half covered: the whole part inside the subnet goes in (northd takes overlaps).
    let plan = plan_pools(&BTreeSet::new(), &[("10.0.0.150", "10.0.0.210")], &sw);
    assert_eq!(
        plan.changes[0].ours_ranges,
        [V4Range {
            start: v4("10.0.0.150"),
            end: v4("10.0.0.210")
        }]
        .into()
    );
}

#[test]
fn a_recorded_range_the_text_lost_is_reported_not_forced() {
    let sw = switch(
        Some("10.0.0.0/24"),
        Some("10.0.0.5"),
        Some("10.0.0.128..10.0.0.255"),
    );
    let plan = plan_pools(&BTreeSet::new(), &[("10.0.0.128", "10.0.0.255")], &sw);
    assert!(
        plan.problems.iter().any(|p| p.kind
            == SwitchProblemKind::LostRange(V4Range {
                start: v4("10.0.0.128"),
                end: v4("10.0.0.255")
            })),
        "{:?}",
        plan.problems
    );
}

fn arb_pools() -> impl Strategy<Value = Vec<(Ipv4Addr, Ipv4Addr)>> {
    prop::collection::vec(
        (
            any::<u8>(),
            0u8..64,
            prop_oneof![3 => Just(0u8), 1 => Just(1u8)],
        )
            .prop_map(|(s, len, third)| {
                let e = s.saturating_add(len);
                (
                    Ipv4Addr::new(10, 0, third, s),
                    Ipv4Addr::new(10, 0, third, e),
                )
            }),
        0..3,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// With pools as with VIPs: every pool address inside the subnet ends up excluded as northd
    /// reads the text, the user's text stays intact at the end, planning again changes nothing,
    /// and with no pools and no VIPs left the user's exact text is back.
    #[test]
    fn prop_pools_covered_restored_and_settled(
        user in arb_user_text(),
        v1 in arb_vips(),
        p1 in arb_pools(),
        p2 in arb_pools(),
    ) {
        let placeable = Lexer::new(user.as_deref().unwrap_or("")).next().1 != Lexeme::Ellipsis;
        let sw = switch(Some("10.0.0.0/24"), user.as_deref(), None);
        let plan = |v: &BTreeSet<IpAddr>, p: &[(Ipv4Addr, Ipv4Addr)], s: &LogicalSwitchIpam| {
            plan_ovn_with_pools(v, p, std::slice::from_ref(s))
        };
        let s1 = apply(&sw, &plan(&v1, &p1, &sw));
        if placeable {
            for &(a, b) in &p1 {
                for x in u32::from(a)..=u32::from(b) {
                    let x = Ipv4Addr::from(x);
                    if x.octets()[2] == 0 && x.octets()[3] != 0 {
                        prop_assert!(covered(s1.exclude_ips.as_deref(), &x.to_string()),
                            "{x} not covered by {:?}", s1.exclude_ips);
                    }
                }
            }
        }
        let u = user.as_deref().unwrap_or("");
        prop_assert!(s1.exclude_ips.as_deref().unwrap_or("").ends_with(u));
        let bug = |p: &SwitchProblem| matches!(p.kind,
            SwitchProblemKind::NotCovered(_) | SwitchProblemKind::Lost(_)
            | SwitchProblemKind::LostRange(_) | SwitchProblemKind::RangeNotCovered(_));
        prop_assert!(!plan(&v1, &p1, &s1).problems.iter().any(bug));
        prop_assert_eq!(plan(&v1, &p1, &s1).changes, vec![]);
        let s2 = apply(&s1, &plan(&v1, &p2, &s1));
        prop_assert!(s2.exclude_ips.as_deref().unwrap_or("").ends_with(u));
        prop_assert_eq!(plan(&v1, &p2, &s2).changes, vec![]);
        let s3 = apply(&s2, &plan(&BTreeSet::new(), &[], &s2));
        let norm = |t: Option<String>| t.filter(|t| !t.is_empty());
        prop_assert_eq!(norm(s3.exclude_ips.clone()), norm(user.clone()));
        prop_assert_eq!(s3.ours, None);
    }
}
