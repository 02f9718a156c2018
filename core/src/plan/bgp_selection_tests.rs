//! Tests of [`super`]: which pools BGPAdvertisements select, which nodes advertise under them and
//! as which prefixes.

use super::*;

const POOLS: &str = r#"
apiVersion: vipflow.io/v1alpha1
kind: VipPool
metadata: {name: blue, labels: {tier: web}}
spec: {addresses: [198.51.100.0/24, "2001:db8:100::/64"]}
---
apiVersion: vipflow.io/v1alpha1
kind: VipPool
metadata: {name: green}
spec: {addresses: [203.0.113.0/24]}
---
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {rack: r1}}
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {rack: r2}}
"#;

fn pools(advertisements: &str) -> BgpPools {
    let loaded = crate::decode::parse(&format!("{POOLS}---\n{advertisements}")).expect("parses");
    // What FRR is not given yet (communities, local preference, peers) is said; the terms
    // still carry it.
    let wrong: Vec<_> = loaded
        .problems
        .iter()
        .filter(|p| p.kind != crate::model::ProblemKind::Unsupported)
        .collect();
    assert!(wrong.is_empty(), "{wrong:?}");
    BgpPools::of(&loaded.objects)
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an address")
}

fn nets(v: &[&str]) -> Vec<IpNet> {
    v.iter().map(|s| s.parse().expect("a prefix")).collect()
}

#[test]
fn an_advertisement_that_names_no_pool_selects_every_pool() {
    let p =
        pools("apiVersion: vipflow.io/v1alpha1\nkind: BGPAdvertisement\nmetadata: {name: all}\n");
    assert!(p.advertises(ip("198.51.100.7")));
    assert!(p.advertises(ip("203.0.113.7")));
    assert!(p.advertises(ip("2001:db8:100::7")));
    assert!(!p.advertises(ip("192.0.2.7")), "outside every pool");
}

#[test]
fn pools_are_selected_by_name_or_by_label_and_no_others() {
    let by_name = pools(
        "apiVersion: vipflow.io/v1alpha1\nkind: BGPAdvertisement\nmetadata: {name: g}\nspec: {ipAddressPools: [green]}\n",
    );
    assert!(by_name.advertises(ip("203.0.113.7")));
    assert!(!by_name.advertises(ip("198.51.100.7")));
    let by_label = pools(
        "apiVersion: vipflow.io/v1alpha1\nkind: BGPAdvertisement\nmetadata: {name: w}\nspec: {ipAddressPoolSelectors: [{matchLabels: {tier: web}}]}\n",
    );
    assert!(by_label.advertises(ip("198.51.100.7")));
    assert!(!by_label.advertises(ip("203.0.113.7")));
}

#[test]
fn without_an_advertisement_nothing_goes_out_over_bgp() {
    let p = pools("apiVersion: v1\nkind: List\nitems: []\n");
    assert!(!p.advertises(ip("198.51.100.7")));
    assert!(p.prefixes(ip("198.51.100.7"), false, "n1").is_empty());
}

#[test]
fn node_selectors_narrow_the_nodes_that_advertise() {
    let p = pools(
        "apiVersion: vipflow.io/v1alpha1\nkind: BGPAdvertisement\nmetadata: {name: r1}\nspec: {nodeSelectors: [{matchLabels: {rack: r1}}]}\n",
    );
    assert_eq!(
        p.prefixes(ip("198.51.100.7"), false, "n1"),
        nets(&["198.51.100.7/32"])
    );
    assert!(p.prefixes(ip("198.51.100.7"), false, "n2").is_empty());
}

#[test]
fn cluster_vips_go_out_aggregated_and_local_ones_as_host_routes() {
    let p = pools(
        "apiVersion: vipflow.io/v1alpha1\nkind: BGPAdvertisement\nmetadata: {name: agg}\nspec: {aggregationLength: 24, aggregationLengthV6: 120}\n",
    );
    assert_eq!(
        p.prefixes(ip("198.51.100.7"), false, "n1"),
        nets(&["198.51.100.0/24"])
    );
    assert_eq!(
        p.prefixes(ip("2001:db8:100::1:7"), false, "n1"),
        nets(&["2001:db8:100::1:0/120"])
    );
    assert_eq!(
        p.prefixes(ip("198.51.100.7"), true, "n1"),
        nets(&["198.51.100.7/32"]),
        "externalTrafficPolicy Local: only its own route"
    );
    assert_eq!(
        p.prefixes(ip("2001:db8:100::1:7"), true, "n1"),
        nets(&["2001:db8:100::1:7/128"])
    );
}

#[test]
fn each_advertisement_that_selects_a_pool_adds_its_terms() {
    let p = pools(
        "apiVersion: vipflow.io/v1alpha1\nkind: BGPAdvertisement\nmetadata: {name: host}\nspec: {localPref: 100, communities: [\"64512:1\"]}\n---\napiVersion: vipflow.io/v1alpha1\nkind: BGPAdvertisement\nmetadata: {name: agg}\nspec: {ipAddressPools: [blue], aggregationLength: 24, peers: [tor]}\n",
    );
    let terms = p.terms(ip("198.51.100.7"));
    let names: Vec<&str> = terms.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["host", "agg"]);
    assert_eq!(terms[0].local_pref, Some(100));
    assert_eq!(terms[0].communities, ["64512:1"]);
    assert_eq!(terms[1].peers, ["tor"]);
    assert_eq!(
        p.prefixes(ip("198.51.100.7"), false, "n2"),
        nets(&["198.51.100.0/24", "198.51.100.7/32"])
    );
    assert_eq!(p.terms(ip("203.0.113.7")).len(), 1, "green: only `host`");
}

#[test]
fn a_pool_that_cannot_be_used_advertises_nothing() {
    let with = |addresses: &str| {
        let loaded = crate::decode::parse(&format!(
            "apiVersion: vipflow.io/v1alpha1\nkind: VipPool\nmetadata: {{name: p}}\nspec: {{addresses: [{addresses}]}}\n---\napiVersion: vipflow.io/v1alpha1\nkind: BGPAdvertisement\nmetadata: {{name: all}}\n"
        ))
        .expect("parses");
        BgpPools::of(&loaded.objects)
    };
    assert!(with("198.51.100.0/24").advertises(ip("198.51.100.7")));
    assert!(
        !with("198.51.100.0/24, not-an-address").advertises(ip("198.51.100.7")),
        "one bad entry makes the pool unusable"
    );
}
