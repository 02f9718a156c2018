//! Scenario tests for the flow plan: the underlay profile; table, priority and cookies.

use super::support::*;
use super::*;
use crate::config::BridgeConfig;
use crate::decode::parse;
use crate::model::{Model, ModelOptions};
use proptest::prelude::*;

// ---- underlay -------------------------------------------------------------------------------

#[test]
fn underlay_profile_rewrites_to_the_router_mac_and_has_no_return_path() {
    let flows = plan_for(&model(WEB), &underlay());
    assert!(
        flows
            .iter()
            .all(|f| !f.key.to_string().starts_with("return ")),
        "{:?}",
        keys(&flows)
    );
    let into_ovn = [
        PlannedAction::SetEthDst(ROUTER_MAC),
        PlannedAction::Output(PortRef::Patch),
    ];
    for k in [
        "steer 192.0.2.10:80/tcp",
        "steer 192.0.2.10:53/udp",
        "steer [2001:db8::10]:3868/sctp",
        "pmtu 192.0.2.10",
        "pmtu 2001:db8::10",
        "frag 192.0.2.10",
        "frag 2001:db8::10",
    ] {
        let f = flow(&flows, k);
        assert_eq!(f.in_port, PortRef::Uplink, "{k}");
        assert_eq!(f.actions, into_ovn, "{k}");
    }
    assert_eq!(
        flow(&flows, "arp 192.0.2.10").actions,
        [PlannedAction::Output(PortRef::Local)]
    );
    assert_eq!(flows.len(), 2 + 2 + 2 + 6);
}

// ---- table, priority, cookies ---------------------------------------------------------------

#[test]
fn table_and_priority_come_from_the_config() {
    let b = BridgeConfig {
        table: 7,
        priority: 1234,
        ..bridge()
    };
    let flows = plan_for(&model(WEB), &b);
    assert!(!flows.is_empty());
    for f in &flows {
        assert_eq!((f.table, f.priority), (7, 1234), "{}", f.key);
        let fm = f.resolve(&resolved(1));
        assert_eq!((fm.table_id, fm.priority), (7, 1234), "{}", f.key);
    }
}

#[test]
fn cookie_top_16_bits_are_the_prefix() {
    let m = model(WEB);
    let flows = plan(
        &m,
        &PlanInput {
            bridge: &bridge(),
            cookie_prefix: 0xabcd,
        },
    );
    assert!(!flows.is_empty());
    for f in &flows {
        assert_eq!(f.cookie >> 48, 0xabcd, "{}", f.key);
        assert_eq!(f.cookie, cookie(0xabcd, &f.key.to_string()));
    }
}

#[test]
fn cookie_is_fnv1a_of_the_key_and_stable_across_versions() {
    // Pinned: a changed hash would make every running agent rewrite all its flows.
    assert_eq!(cookie(0x7f1f, "arp 172.18.0.100"), 0x7f1f_21c4_cf1d_0758);
    assert_eq!(cookie(0x0001, "arp 172.18.0.100"), 0x0001_21c4_cf1d_0758);
}

#[test]
fn cookies_are_distinct_for_the_same_port_on_tcp_and_udp() {
    let m = model(
        r#"
apiVersion: v1
kind: Service
metadata: {name: dns, namespace: infra}
spec:
  externalIPs: [172.18.0.53]
  ports:
  - {name: dns-udp, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
"#,
    );
    let flows = plan_for(&m, &bridge());
    let tcp = flow(&flows, "steer 172.18.0.53:53/tcp").cookie;
    let udp = flow(&flows, "steer 172.18.0.53:53/udp").cookie;
    assert_ne!(tcp, udp);
    let all: BTreeSet<u64> = flows.iter().map(|f| f.cookie).collect();
    assert_eq!(all.len(), flows.len(), "every flow has its own cookie");
}

#[test]
fn cookies_are_stable_across_calls() {
    let m = model(WEB);
    let a = plan_for(&m, &bridge());
    let b = plan_for(&m, &bridge());
    assert_eq!(a, b);
}

#[test]
fn cookie_and_match_identity_survive_an_uplink_renumbering() {
    let flows = plan_for(&model(SMALL), &bridge());
    let f = flow(&flows, "steer 192.0.2.10:80/tcp");
    let before = f.resolve(&resolved(1));
    let after = f.resolve(&resolved(7));
    assert_eq!(before.cookie, after.cookie);
    assert_eq!(before.match_.fields[0], OxmField::in_port(1));
    assert_eq!(after.match_.fields[0], OxmField::in_port(7));
    assert_eq!(before.match_.fields[1..], after.match_.fields[1..]);
    // The return flow's output follows the uplink too.
    let r = flow(&flows, "return 192.0.2.10:80/tcp");
    assert_eq!(
        r.resolve(&resolved(1)).cookie,
        r.resolve(&resolved(7)).cookie
    );
    assert_eq!(
        r.resolve(&resolved(7)).instructions,
        [Instruction::ApplyActions(vec![Action::output(7)])]
    );
}

#[test]
fn a_vip_shared_by_two_services_gets_one_arp_flow() {
    let m = model(
        r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: web, namespace: shop}
  spec:
    externalIPs: [192.0.2.10]
    ports: [{port: 80}]
- apiVersion: v1
  kind: Service
  metadata: {name: mail, namespace: shop}
  spec:
    externalIPs: [192.0.2.10]
    ports: [{port: 25}]
"#,
    );
    let flows = plan_for(&m, &bridge());
    assert_eq!(
        keys(&flows),
        [
            "arp 192.0.2.10",
            "frag 192.0.2.10",
            "frag return 192.0.2.10",
            "pmtu 192.0.2.10",
            "return 192.0.2.10:25/tcp",
            "return 192.0.2.10:80/tcp",
            "steer 192.0.2.10:25/tcp",
            "steer 192.0.2.10:80/tcp",
        ]
    );
}

#[test]
fn no_vips_no_flows() {
    let m = model(
        r#"
apiVersion: v1
kind: Service
metadata: {name: internal, namespace: shop}
spec:
  clusterIP: 10.96.0.7
  ports: [{port: 80}]
"#,
    );
    assert!(plan_for(&m, &bridge()).is_empty());
    assert!(plan_for(&Model::default(), &bridge()).is_empty());
}

/// Several Services, v4 and v6, shared VIPs and a contested port.
fn services() -> Vec<String> {
    let one = |ns: &str, name: &str, created: &str, ips: &str, ports: &str| {
        format!(
            r#"
- apiVersion: v1
  kind: Service
  metadata: {{name: {name}, namespace: {ns}, creationTimestamp: "{created}"}}
  spec:
    externalIPs: {ips}
    ports: {ports}
"#
        )
    };
    vec![
        one(
            "a",
            "web",
            "2026-01-01T00:00:00Z",
            "[192.0.2.1]",
            "[{port: 80}]",
        ),
        one(
            "b",
            "web",
            "2026-01-02T00:00:00Z",
            "[192.0.2.1]",
            "[{port: 80}, {port: 443}]",
        ),
        one(
            "a",
            "dns",
            "2026-01-01T00:00:00Z",
            r#"[192.0.2.53, "2001:db8::53"]"#,
            "[{port: 53, protocol: UDP}, {port: 53, protocol: TCP, name: t}]",
        ),
        one(
            "c",
            "sip",
            "2026-01-03T00:00:00Z",
            r#"["2001:db8::53", 192.0.2.2]"#,
            "[{port: 5060, protocol: SCTP}]",
        ),
    ]
}

fn plan_of(items: &[String]) -> Vec<PlannedFlow> {
    let text = format!("apiVersion: v1\nkind: List\nitems:\n{}", items.concat());
    let l = parse(&text).unwrap();
    let m = Model::build(&l.objects, &ModelOptions::default());
    plan_for(&m, &bridge())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn the_plan_does_not_depend_on_input_order(shuffled in Just(services()).prop_shuffle()) {
        prop_assert_eq!(plan_of(&services()), plan_of(&shuffled));
    }
}

#[test]
fn the_plan_is_sorted_by_unique_keys() {
    let flows = plan_of(&services());
    let ks = keys(&flows);
    let mut sorted = ks.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(ks, sorted);
}
