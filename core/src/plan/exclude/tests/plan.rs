//! Tests for excludeIps' plans: the OVN-native plan (byte-for-byte user text, add/remove,
//! idempotence), the Kube-OVN check, and their properties.

use super::northd_text::{Lexeme, Lexer};
use super::test_support::*;
use super::*;
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

// --- the OVN-native plan -----------------------------------------------------------------------

#[test]
fn adds_in_front_and_keeps_user_bytes() {
    let user = "10.0.0.2  10.0.0.10..10.0.0.20";
    let sw = switch(Some("10.0.0.0/24"), Some(user), None);
    let plan = plan1(&vips(&["10.0.0.50", "10.0.0.40"]), &sw);
    assert!(plan.problems.is_empty(), "{:?}", plan.problems);
    let c = &plan.changes[0];
    assert_eq!(
        c.exclude_ips.as_deref(),
        Some("10.0.0.40 10.0.0.50 10.0.0.2  10.0.0.10..10.0.0.20")
    );
    assert_eq!(c.ours_value.as_deref(), Some("10.0.0.40 10.0.0.50"));
    assert_eq!(c.ours, [v4("10.0.0.40"), v4("10.0.0.50")].into());
    assert!(c.exclude_ips.as_deref().unwrap().ends_with(user));
}

#[test]
fn add_then_remove_restores_the_exact_text() {
    for original in [
        None,
        Some("10.0.0.2  10.0.0.10..10.0.0.20 "),
        Some("\t10.0.0.3"),
        Some("  "),
    ] {
        let sw = switch(Some("10.0.0.0/24"), original, None);
        let added = apply(&sw, &plan1(&vips(&["10.0.0.5", "10.0.0.6"]), &sw));
        assert_ne!(added.exclude_ips.as_deref(), original);
        let removed = apply(&added, &plan1(&BTreeSet::new(), &added));
        assert_eq!(removed.exclude_ips.as_deref(), original);
        assert_eq!(removed.ours, None);
    }
}

#[test]
fn vip_covered_by_user_entry_is_not_added() {
    let sw = switch(
        Some("10.0.0.0/24"),
        Some("10.0.0.10..10.0.0.20 10.0.0.30"),
        None,
    );
    for vip in ["10.0.0.10", "10.0.0.20", "10.0.0.15", "10.0.0.30"] {
        assert!(plan1(&vips(&[vip]), &sw).changes.is_empty(), "{vip}");
    }
    // One past the range's end is not covered.
    let plan = plan1(&vips(&["10.0.0.21"]), &sw);
    assert_eq!(plan.changes[0].ours, [v4("10.0.0.21")].into());
}

#[test]
fn user_entry_after_a_typo_does_not_count() {
    // northd stops at the comma, so 10.0.0.5 is not excluded by the user: we add it in front.
    let sw = switch(Some("10.0.0.0/24"), Some("10.0.0.2,10.0.0.5"), None);
    let plan = plan1(&vips(&["10.0.0.5"]), &sw);
    assert_eq!(
        plan.changes[0].exclude_ips.as_deref(),
        Some("10.0.0.5 10.0.0.2,10.0.0.5")
    );
    assert!(matches!(
        plan.problems[..],
        [SwitchProblem {
            kind: SwitchProblemKind::UserEntry(OvnTokenError {
                stops_northd: true,
                ..
            }),
            ..
        }]
    ));
    assert!(covered(plan.changes[0].exclude_ips.as_deref(), "10.0.0.5"));
}

#[test]
fn vip_outside_subnet_or_v6_is_not_added() {
    let sw = switch(Some("10.0.0.0/24"), None, None);
    let plan = plan1(
        &vips(&["10.0.1.5", "fd00::5", "10.0.0.0", "192.168.0.1"]),
        &sw,
    );
    assert_eq!(plan, ExcludePlan::default());
    // The broadcast address is inside northd's range; the network address is not.
    let plan = plan1(&vips(&["10.0.0.255", "10.0.0.1"]), &sw);
    assert_eq!(
        plan.changes[0].exclude_ips.as_deref(),
        Some("10.0.0.1 10.0.0.255")
    );
}

#[test]
fn plan_is_idempotent() {
    let sw = switch(
        Some("10.0.0.0/16"),
        Some("10.0.0.2 10.0.9.0..10.0.9.255"),
        None,
    );
    let v = vips(&["10.0.3.3", "10.0.9.9", "10.0.0.7", "fd00::1", "10.1.0.1"]);
    let once = apply(&sw, &plan1(&v, &sw));
    let again = plan1(&v, &once);
    assert!(again.changes.is_empty(), "{:?}", again.changes);
    assert!(again.problems.is_empty(), "{:?}", again.problems);
}

#[test]
fn vip_change_rebuilds_only_our_part() {
    let sw = switch(Some("10.0.0.0/24"), Some("10.0.0.2"), None);
    let s1 = apply(&sw, &plan1(&vips(&["10.0.0.5", "10.0.0.6"]), &sw));
    let s2 = apply(&s1, &plan1(&vips(&["10.0.0.6", "10.0.0.7"]), &s1));
    assert_eq!(
        s2.exclude_ips.as_deref(),
        Some("10.0.0.6 10.0.0.7 10.0.0.2")
    );
    assert_eq!(s2.ours.as_deref(), Some("10.0.0.6 10.0.0.7"));
}

#[test]
fn subnet_gone_or_bad_removes_our_entries() {
    let sw = switch(Some("10.0.0.0/24"), Some("10.0.0.2"), None);
    let added = apply(&sw, &plan1(&vips(&["10.0.0.5"]), &sw));
    let mut gone = added.clone();
    gone.subnet = None;
    let plan = plan1(&vips(&["10.0.0.5"]), &gone);
    assert_eq!(plan.changes[0].exclude_ips.as_deref(), Some("10.0.0.2"));
    assert!(plan.problems.is_empty());
    let mut bad = added;
    bad.subnet = Some("10.0.0.0/33".into());
    let plan = plan1(&vips(&["10.0.0.5"]), &bad);
    assert_eq!(plan.changes[0].exclude_ips.as_deref(), Some("10.0.0.2"));
    assert!(matches!(
        plan.problems[0].kind,
        SwitchProblemKind::BadSubnet(_)
    ));
    assert!(
        plan.problems[0]
            .to_string()
            .starts_with("Logical_Switch ls0: other_config:subnet")
    );
}

#[test]
fn user_now_covers_a_vip_we_added() {
    // The user extended their range over our VIP: our token goes, theirs stays.
    let sw = switch(
        Some("10.0.0.0/24"),
        Some("10.0.0.5 10.0.0.1..10.0.0.9"),
        Some("10.0.0.5"),
    );
    let plan = plan1(&vips(&["10.0.0.5"]), &sw);
    assert_eq!(
        plan.changes[0].exclude_ips.as_deref(),
        Some("10.0.0.1..10.0.0.9")
    );
    assert_eq!(plan.changes[0].ours_value, None);
}

#[test]
fn record_not_matching_the_text_is_reported_not_forced() {
    // The user moved our token; we do not hunt for it inside their text.
    let sw = switch(
        Some("10.0.0.0/24"),
        Some("10.0.0.2 10.0.0.5"),
        Some("10.0.0.5 bogus"),
    );
    let plan = plan1(&vips(&[]), &sw);
    assert_eq!(
        plan.changes[0].exclude_ips.as_deref(),
        Some("10.0.0.2 10.0.0.5")
    );
    assert_eq!(plan.changes[0].ours_value, None);
    let kinds: Vec<_> = plan.problems.iter().map(|p| &p.kind).collect();
    assert_eq!(
        kinds,
        [
            &SwitchProblemKind::BadRecord("bogus".into()),
            &SwitchProblemKind::Lost(v4("10.0.0.5"))
        ]
    );
}

#[test]
fn user_range_starting_our_token_is_not_stripped() {
    // "10.0.0.5 ..10.0.0.9" is one range to northd; it is the user's, not our token.
    let sw = switch(
        Some("10.0.0.0/24"),
        Some("10.0.0.5 ..10.0.0.9"),
        Some("10.0.0.5"),
    );
    let plan = plan1(&vips(&["10.0.0.5"]), &sw);
    assert_eq!(
        plan.changes[0].exclude_ips.as_deref(),
        Some("10.0.0.5 ..10.0.0.9")
    );
    assert_eq!(plan.changes[0].ours_value, None);
}

#[test]
fn text_starting_with_ellipsis_cannot_take_additions() {
    let sw = switch(Some("10.0.0.0/24"), Some(" ..10.0.0.9"), None);
    let plan = plan1(&vips(&["10.0.0.5"]), &sw);
    assert!(plan.changes.is_empty());
    assert!(
        plan.problems
            .iter()
            .any(|p| p.kind == SwitchProblemKind::CannotPlace(vec![v4("10.0.0.5")]))
    );
}

#[test]
fn empty_key_stays_unless_we_touched_it() {
    let sw = switch(Some("10.0.0.0/24"), Some(""), None);
    assert!(plan1(&vips(&["10.0.1.1"]), &sw).changes.is_empty());
    let added = apply(&sw, &plan1(&vips(&["10.0.0.5"]), &sw));
    assert_eq!(added.exclude_ips.as_deref(), Some("10.0.0.5"));
    // Emptiness cannot be told apart from absence afterwards: the key is deleted.
    assert_eq!(apply(&added, &plan1(&vips(&[]), &added)).exclude_ips, None);
}

#[test]
fn out_of_subnet_user_entry_is_reported() {
    let sw = switch(
        Some("10.0.0.0/24"),
        Some("10.0.0.0 10.0.1.1..10.0.1.9 10.0.0.250..10.0.1.2"),
        None,
    );
    let plan = plan1(&vips(&[]), &sw);
    let entries: Vec<_> = plan
        .problems
        .iter()
        .filter_map(|p| match &p.kind {
            SwitchProblemKind::OutsideSubnet { entry, .. } => Some(entry.as_str()),
            _ => None,
        })
        .collect();
    // The partial overlap is clamped by northd without a warning.
    assert_eq!(entries, ["10.0.0.0", "10.0.1.1..10.0.1.9"]);
}

#[test]
fn several_switches_each_get_their_vips() {
    let a = LogicalSwitchIpam {
        name: "a".into(),
        subnet: Some("10.0.0.0/24".into()),
        ..Default::default()
    };
    let b = LogicalSwitchIpam {
        name: "b".into(),
        subnet: Some("10.0.1.0/24".into()),
        exclude_ips: Some("10.0.1.1".into()),
        ..Default::default()
    };
    let c = LogicalSwitchIpam {
        name: "c".into(),
        ..Default::default()
    };
    let plan = plan_ovn(&vips(&["10.0.0.5", "10.0.1.5", "10.0.2.5"]), &[a, b, c]);
    let got: Vec<_> = plan
        .changes
        .iter()
        .map(|c| (c.name.as_str(), c.exclude_ips.as_deref()))
        .collect();
    assert_eq!(
        got,
        [("a", Some("10.0.0.5")), ("b", Some("10.0.1.5 10.0.1.1"))]
    );
}

// --- Kube-OVN ----------------------------------------------------------------------------------

#[test]
fn kubeovn_dual_stack_findings() {
    let sn = subnet(
        "10.16.0.0/16,fd00:10:16::/112",
        &[
            "10.16.0.1",
            "10.16.0.100..10.16.0.200",
            "fd00:10:16::1..fd00:10:16::ff",
        ],
    );
    let v = vips(&[
        "10.16.0.150",
        "10.16.5.5",
        "fd00:10:16::80",
        "fd00:10:16::1000",
        "192.168.1.1",
        "fd00::1",
    ]);
    let f = check_kubeovn(&v, &[sn]);
    let got: Vec<_> = f.iter().map(|f| f.vip).collect();
    assert_eq!(got, [Some(ip("10.16.5.5")), Some(ip("fd00:10:16::1000"))]);
    assert_eq!(
        f[1].reason,
        FindingReason::NotExcluded {
            cidr: "fd00:10:16::/112".parse().unwrap()
        }
    );
    assert!(
        f[0].to_string()
            .starts_with("Subnet ovn-default: VIP 10.16.5.5: inside cidrBlock 10.16.0.0/16")
    );
}

#[test]
fn kubeovn_bad_entries_are_findings_and_exclude_nothing() {
    let sn = subnet(
        "10.16.0.0/16,bogus",
        &["10.16.0.9..10.16.0.1", "10.16.0.5", "x"],
    );
    let f = check_kubeovn(&vips(&["10.16.0.5", "10.16.0.3"]), &[sn]);
    assert!(matches!(&f[0].reason, FindingReason::BadCidr { cidr } if cidr == "bogus"));
    assert!(matches!(
        f[1].reason,
        FindingReason::BadExcludeIp(RangeError::Reversed { .. })
    ));
    assert!(matches!(
        f[2].reason,
        FindingReason::BadExcludeIp(RangeError::NotAnAddress { .. })
    ));
    assert_eq!(f[3].vip, Some(ip("10.16.0.3")));
    assert_eq!(f.len(), 4);
}

#[test]
fn kubeovn_gateway_network_and_broadcast_are_never_allocated() {
    let mut sn = subnet("10.16.0.0/24,fd00::/120", &[]);
    sn.gateway = Some("10.16.0.1,fd00::1".into());
    let v = vips(&[
        "10.16.0.0",
        "10.16.0.1",
        "10.16.0.255",
        "fd00::",
        "fd00::1",
        "fd00::ff",
    ]);
    let got: Vec<_> = check_kubeovn(&v, &[sn])
        .into_iter()
        .map(|f| f.vip)
        .collect();
    assert_eq!(got, [Some(ip("fd00::ff"))]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn prop_plan_covers_restores_and_settles(
        user in arb_user_text(),
        v1 in arb_vips(),
        v2 in arb_vips(),
        subnet in prop_oneof![
            6 => Just(Some("10.0.0.0/24")),
            1 => Just(None),
            1 => Just(Some("bad")),
        ],
    ) {
        let placeable = Lexer::new(user.as_deref().unwrap_or("")).next().1 != Lexeme::Ellipsis;
        let sw = switch(subnet, user.as_deref(), None);

        // After applying, every in-subnet IPv4 VIP is excluded as northd reads the text, and
        // the user's text is intact at the end.
        let s1 = apply(&sw, &plan1(&v1, &sw));
        if subnet == Some("10.0.0.0/24") && placeable {
            let in_subnet = v1.iter().filter_map(|v| match v {
                IpAddr::V4(a) if a.octets()[..3] == [10, 0, 0] && a.octets()[3] != 0 => Some(a),
                _ => None,
            });
            for a in in_subnet {
                prop_assert!(covered(s1.exclude_ips.as_deref(), &a.to_string()),
                    "{a} not covered by {:?}", s1.exclude_ips);
            }
        }
        let u = user.as_deref().unwrap_or("");
        prop_assert!(s1.exclude_ips.as_deref().unwrap_or("").ends_with(u));
        let ours_bug = |p: &SwitchProblem| {
            matches!(p.kind, SwitchProblemKind::NotCovered(_) | SwitchProblemKind::Lost(_))
        };
        prop_assert!(!plan1(&v1, &s1).problems.iter().any(ours_bug));

        // Idempotent.
        prop_assert_eq!(plan1(&v1, &s1).changes, vec![]);

        // A different VIP set, then none: the user's exact text is back.
        let s2 = apply(&s1, &plan1(&v2, &s1));
        prop_assert!(s2.exclude_ips.as_deref().unwrap_or("").ends_with(u));
        prop_assert_eq!(plan1(&v2, &s2).changes, vec![]);
        let s3 = apply(&s2, &plan1(&BTreeSet::new(), &s2));
        let norm = |t: Option<String>| t.filter(|t| !t.is_empty());
        prop_assert_eq!(norm(s3.exclude_ips.clone()), norm(user.clone()));
        prop_assert_eq!(s3.ours, None);
    }

    #[test]
    fn prop_set_contains_matches_a_linear_scan(
        ranges in prop::collection::vec((any::<u8>(), 0u8..12), 0..12),
        probes in prop::collection::vec(any::<u8>(), 1..32),
    ) {
        let rs: Vec<IpRange> = ranges
            .iter()
            .map(|&(s, len)| {
                let e = s.saturating_add(len);
                IpRange::new(Ipv4Addr::new(10, 0, 0, s).into(), Ipv4Addr::new(10, 0, 0, e).into())
                    .expect("start <= end")
            })
            .collect();
        let set: RangeSet = rs.iter().copied().collect();
        // Disjoint and non-adjacent after merging.
        let merged: Vec<IpRange> = set.ranges().collect();
        for w in merged.windows(2) {
            let (IpAddr::V4(a), IpAddr::V4(b)) = (w[0].end(), w[1].start()) else { unreachable!() };
            prop_assert!(u32::from(a) + 1 < u32::from(b));
        }
        for p in probes {
            let a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, p));
            prop_assert_eq!(set.contains(a), rs.iter().any(|r| r.contains(a)));
        }
    }

    #[test]
    fn prop_ovn_parser_never_panics(text in "[0-9a-f.:/*, \t\n-]{0,40}") {
        let p = parse_ovn_exclude_ips(&text);
        for e in &p.entries {
            prop_assert!(e.range.start().is_ipv4());
            prop_assert!(text.get(e.span.clone()).is_some());
        }
        prop_assert!(p.errors.iter().filter(|e| e.stops_northd).count() <= 1);
    }
}
