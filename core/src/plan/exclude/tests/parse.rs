//! Tests for excludeIps' readers: the range parser and set, and northd's reading of
//! `exclude_ips`.

use super::test_support::*;
use super::*;

// --- parse_entry -----------------------------------------------------------------------------

#[test]
fn entry_singles_and_ranges_v4_v6() {
    let r = parse_entry("10.0.0.5").unwrap();
    assert_eq!((r.start(), r.end()), (ip("10.0.0.5"), ip("10.0.0.5")));
    let r = parse_entry("10.0.0.10..10.0.0.20").unwrap();
    assert_eq!((r.start(), r.end()), (ip("10.0.0.10"), ip("10.0.0.20")));
    assert_eq!(r.to_string(), "10.0.0.10..10.0.0.20");
    let r = parse_entry("fd00::1").unwrap();
    assert_eq!(r.start(), ip("fd00::1"));
    let r = parse_entry("fd00::10..fd00::ff").unwrap();
    assert!(r.contains(ip("fd00::10")) && r.contains(ip("fd00::ff")));
    assert!(!r.contains(ip("fd00::100")) && !r.contains(ip("10.0.0.16")));
    // A one-address range is allowed.
    assert!(parse_entry("10.0.0.1..10.0.0.1").is_ok());
}

#[test]
fn entry_errors_name_the_bad_part() {
    assert_eq!(
        parse_entry("10.0.0.20..10.0.0.10"),
        Err(RangeError::Reversed {
            token: "10.0.0.20..10.0.0.10".into(),
            start: ip("10.0.0.20"),
            end: ip("10.0.0.10"),
        })
    );
    assert_eq!(
        parse_entry("10.0.0.1..fd00::1"),
        Err(RangeError::MixedFamily {
            token: "10.0.0.1..fd00::1".into()
        })
    );
    let e = parse_entry("10.0.0.1..bogus").unwrap_err();
    assert_eq!(
        e.to_string(),
        "`10.0.0.1..bogus`: `bogus` is not an IP address"
    );
    assert!(matches!(
        parse_entry("10.0.0.1.."),
        Err(RangeError::MissingEnd { .. })
    ));
    assert!(matches!(
        parse_entry("10.0.0.1..2..3"),
        Err(RangeError::BadRangeBound { .. })
    ));
    assert!(matches!(
        parse_entry("10.0.0.0/24"),
        Err(RangeError::NotAnAddress { .. })
    ));
    // Kube-OVN does not trim; neither do we.
    assert!(parse_entry(" 10.0.0.1").is_err());
    assert!(parse_entry("").is_err());
}

// --- RangeSet --------------------------------------------------------------------------------

#[test]
fn set_merges_overlapping_and_adjacent() {
    let set: RangeSet = [
        "10.0.0.1..10.0.0.5",
        "10.0.0.6",
        "10.0.0.3..10.0.0.4",
        "10.0.0.8",
    ]
    .iter()
    .map(|e| parse_entry(e).unwrap())
    .collect();
    let got: Vec<String> = set.ranges().map(|r| r.to_string()).collect();
    assert_eq!(got, ["10.0.0.1..10.0.0.6", "10.0.0.8"]);
    // Edges of each range, and the gap.
    for (a, want) in [
        ("10.0.0.0", false),
        ("10.0.0.1", true),
        ("10.0.0.6", true),
        ("10.0.0.7", false),
        ("10.0.0.8", true),
        ("10.0.0.9", false),
    ] {
        assert_eq!(set.contains(ip(a)), want, "{a}");
    }
}

#[test]
fn set_keeps_families_apart_and_handles_extremes() {
    let mut set = RangeSet::new();
    set.insert(parse_entry("::..::ffff:ffff").unwrap());
    set.insert(
        parse_entry(
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fff0..ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        )
        .unwrap(),
    );
    set.insert(parse_entry("255.255.255.255").unwrap());
    // ::a00:1 is 10.0.0.1's bits, but another family.
    assert!(!set.contains(ip("10.0.0.1")));
    assert!(set.contains(ip("::a00:1")));
    assert!(set.contains(ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")));
    assert!(set.contains(ip("255.255.255.255")));
    assert!(!set.contains(ip("255.255.255.254")));
    let other: RangeSet = [parse_entry("255.255.255.254").unwrap()]
        .into_iter()
        .collect();
    let u = set.union(&other);
    assert!(u.contains(ip("255.255.255.254")));
    assert_eq!(u.ranges().filter(|r| r.start().is_ipv4()).count(), 1);
}

#[test]
fn set_from_kubeovn_reports_bad_entries_and_keeps_the_rest() {
    let (set, errs) =
        RangeSet::from_kubeovn(&["10.0.0.1", "nope", "fd00::1..fd00::9", "10.0.0.9..10.0.0.2"]);
    assert!(set.contains(ip("10.0.0.1")) && set.contains(ip("fd00::5")));
    assert_eq!(errs.len(), 2);
    assert!(matches!(errs[0], RangeError::NotAnAddress { .. }));
    assert!(matches!(errs[1], RangeError::Reversed { .. }));
}

// --- northd's reading of exclude_ips -----------------------------------------------------------

#[test]
fn ovn_text_odd_spacing_and_spaced_ellipsis() {
    let p = parse_ovn_exclude_ips("  10.0.0.2  10.0.0.10..10.0.0.20\t10.0.0.30 .. 10.0.0.31\n");
    assert!(p.errors.is_empty(), "{:?}", p.errors);
    let got: Vec<String> = p.entries.iter().map(|e| e.range.to_string()).collect();
    assert_eq!(
        got,
        ["10.0.0.2", "10.0.0.10..10.0.0.20", "10.0.0.30..10.0.0.31"]
    );
    assert_eq!(p.entries[1].span, 12..32);
    let (set, _) = RangeSet::from_ovn_text("/* vips */ 10.0.0.7 // trailing\n10.0.0.8");
    assert!(set.contains(ip("10.0.0.7")) && set.contains(ip("10.0.0.8")));
}

#[test]
fn ovn_text_syntax_error_stops_like_northd() {
    // A comma is not a separator for northd: it stops there and ignores the rest.
    let p = parse_ovn_exclude_ips("10.0.0.2,10.0.0.3 10.0.0.4");
    assert_eq!(p.entries.len(), 1);
    assert_eq!(p.errors.len(), 1);
    assert!(p.errors[0].stops_northd);
    assert_eq!(p.errors[0].offset, 8);
    assert!(
        p.errors[0].to_string().contains("ignores everything"),
        "{}",
        p.errors[0]
    );
    for text in [
        "10.0.0.0/28 10.0.0.4",
        "gw 10.0.0.4",
        "10.0.0.256 10.0.0.4",
        ".. 10.0.0.4",
        "10.0.0.4..",
        "10.0.0.4.. ..",
        "10.0.0.1..x 10.0.0.4",
        "/* open 10.0.0.4",
        "010.0.0.4",
    ] {
        let p = parse_ovn_exclude_ips(text);
        assert!(
            !p.entries.iter().any(|e| e.range.contains(ip("10.0.0.4"))),
            "{text}: {:?}",
            p.entries
        );
        assert!(
            p.errors.last().is_some_and(|e| e.stops_northd),
            "{text}: {:?}",
            p.errors
        );
    }
    let p = parse_ovn_exclude_ips("10.0.0.1..");
    assert_eq!(
        p.errors[0].error,
        RangeError::MissingEnd {
            token: "10.0.0.1..".into()
        }
    );
}

#[test]
fn ovn_text_skipped_entries_do_not_stop() {
    // Reversed ranges and non-IPv4 numbers: northd warns (or misreads) and goes on.
    let p = parse_ovn_exclude_ips("10.0.0.9..10.0.0.2 fd00::1 42 0x0a000005 10.0.0.4");
    let got: Vec<String> = p.entries.iter().map(|e| e.range.to_string()).collect();
    assert_eq!(got, ["10.0.0.4"]);
    assert_eq!(p.errors.len(), 4);
    assert!(p.errors.iter().all(|e| !e.stops_northd));
    assert!(matches!(p.errors[0].error, RangeError::Reversed { .. }));
    assert!(matches!(p.errors[1].error, RangeError::NotIpv4 { .. }));
}

#[test]
fn ovn_subnet_forms() {
    assert_eq!(
        parse_ovn_subnet("10.0.0.0/24").unwrap().to_string(),
        "10.0.0.0/24"
    );
    assert_eq!(
        parse_ovn_subnet("10.0.0.7/24").unwrap().to_string(),
        "10.0.0.0/24"
    );
    assert_eq!(
        parse_ovn_subnet("10.0.0.0/255.255.255.0")
            .unwrap()
            .to_string(),
        "10.0.0.0/24"
    );
    assert!(matches!(
        parse_ovn_subnet("10.0.0.0/255.0.255.0"),
        Err(SubnetError::NonCidrMask(_))
    ));
    assert!(matches!(
        parse_ovn_subnet("10.0.0.1/32"),
        Err(SubnetError::HostPrefix(_))
    ));
    for bad in [
        "10.0.0.1",
        "fd00::/64",
        "10.0.0.0/33",
        "10.0.0.0/",
        "x/24",
        "10.0.0.0/24 ",
    ] {
        assert!(
            matches!(parse_ovn_subnet(bad), Err(SubnetError::Syntax(_))),
            "{bad}"
        );
    }
}
