//! Scenario tests for the flow plan (DESIGN.md "Flows on br-ex"). Fixtures are
//! `kubectl get -o yaml` shaped text, parsed by the file source and built into a model.

use super::*;
use crate::config::{BridgeConfig, GatewayMode, Profile};
use crate::model::{Model, ModelOptions};
use crate::source::file::parse;
use proptest::prelude::*;

const PREFIX: u16 = 0x7f1f;
const BR_MAC: MacAddr = [0x02, 0, 0, 0, 0, 0x01];
const ROUTER_MAC: MacAddr = [0x0a, 0x58, 0x0a, 0xf4, 0, 0x01];

fn model(yaml: &str) -> Model {
    let l = parse(yaml).expect("fixture parses");
    assert!(l.problems.is_empty(), "fixture problems: {:?}", l.problems);
    let m = Model::build(&l.objects, &ModelOptions::default());
    assert!(m.problems.is_empty(), "model problems: {:?}", m.problems);
    m
}

/// One Service, dual-stack, on TCP, UDP and SCTP.
const WEB: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop, creationTimestamp: "2026-01-10T08:00:00Z"}
spec:
  type: LoadBalancer
  ports:
  - {name: http, port: 80, protocol: TCP, targetPort: 8080}
  - {name: dns, port: 53, protocol: UDP}
  - {name: diameter, port: 3868, protocol: SCTP}
status:
  loadBalancer:
    ingress: [{ip: 192.0.2.10}, {ip: "2001:db8::10"}]
"#;

/// One Service, one IPv4 VIP, one TCP port.
const SMALL: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  externalIPs: [192.0.2.10]
  ports: [{port: 80}]
"#;

/// br-ex with its ports named (the default leaves them to the OVS database).
fn bridge() -> BridgeConfig {
    BridgeConfig {
        uplink: Some("eth0".into()),
        patch: Some("patch-ex-to-int".into()),
        ..BridgeConfig::default()
    }
}

fn plan_for(m: &Model, b: &BridgeConfig) -> Vec<PlannedFlow> {
    plan(
        m,
        &PlanInput {
            bridge: b,
            cookie_prefix: PREFIX,
        },
    )
}

fn keys(flows: &[PlannedFlow]) -> Vec<&str> {
    flows.iter().map(|f| f.key.as_str()).collect()
}

fn flow<'a>(flows: &'a [PlannedFlow], key: &str) -> &'a PlannedFlow {
    flows
        .iter()
        .find(|f| f.key == key)
        .unwrap_or_else(|| panic!("no flow {key:?} in {:?}", keys(flows)))
}

fn resolved(uplink: u32) -> Resolved {
    Resolved {
        uplink,
        patch: 2,
        bridge_mac: BR_MAC,
        steer_dst: None,
    }
}

// ---- bypass ---------------------------------------------------------------------------------

#[test]
fn arp_bypass_one_flow_per_ipv4_vip() {
    let flows = plan_for(&model(WEB), &bridge());
    let arp: Vec<&PlannedFlow> = flows.iter().filter(|f| f.key.starts_with("arp ")).collect();
    assert_eq!(arp.len(), 1);
    let f = arp[0];
    assert_eq!(f.key, "arp 192.0.2.10");
    assert_eq!(f.in_port, PortRef::Uplink);
    assert!(!f.dl_src_bridge);
    assert_eq!(
        f.match_,
        Match::new()
            .with(OxmField::eth_type(eth_type::ARP))
            .with(OxmField::arp_op(1))
            .with(OxmField::arp_tpa("192.0.2.10".parse().unwrap()))
    );
    assert_eq!(f.actions, [PlannedAction::Output(PortRef::Local)]);
}

#[test]
fn nd_bypass_one_flow_per_ipv6_vip() {
    let flows = plan_for(&model(WEB), &bridge());
    let f = flow(&flows, "nd 2001:db8::10");
    assert_eq!(f.in_port, PortRef::Uplink);
    assert_eq!(
        f.match_,
        Match::new()
            .with(OxmField::eth_type(eth_type::IPV6))
            .with(OxmField::ip_proto(ip_proto::ICMPV6))
            .with(OxmField::icmpv6_type(135))
            .with(OxmField::icmpv6_code(0))
            .with(OxmField::ipv6_nd_target("2001:db8::10".parse().unwrap()))
    );
    assert_eq!(f.actions, [PlannedAction::Output(PortRef::Local)]);
    assert_eq!(flows.iter().filter(|f| f.key.starts_with("nd ")).count(), 1);
}

#[test]
fn vlan_bypass_matches_the_vid_and_pops_the_tag_before_local() {
    let b = BridgeConfig {
        vlan: Some(100),
        ..bridge()
    };
    let flows = plan_for(&model(WEB), &b);
    for key in ["arp 192.0.2.10", "nd 2001:db8::10"] {
        let f = flow(&flows, key);
        assert_eq!(f.match_.fields[0], OxmField::vlan_vid(100), "{key}");
        assert_eq!(
            f.actions,
            [
                PlannedAction::PopVlan,
                PlannedAction::Output(PortRef::Local)
            ],
            "{key}"
        );
    }
    // Traffic steered into OVN keeps its tag.
    let steer = flow(&flows, "steer 192.0.2.10:80/tcp");
    assert_eq!(steer.match_.fields[0], OxmField::vlan_vid(100));
    assert_eq!(steer.actions, [PlannedAction::Output(PortRef::Patch)]);
    assert_eq!(
        flow(&flows, "arp 192.0.2.10").display(&b).to_string(),
        "cookie=0x7f1f6d4095d9508b,table=0,priority=500,in_port=eth0,arp,dl_vlan=100,\
         arp_tpa=192.0.2.10,arp_op=1 actions=pop_vlan,LOCAL"
    );
}

#[test]
fn no_vlan_means_no_vlan_match_and_no_pop() {
    let flows = plan_for(&model(WEB), &bridge());
    for f in &flows {
        assert!(
            f.match_.basic(openflow::oxm::field::VLAN_VID).is_none(),
            "{}",
            f.key
        );
        assert!(!f.actions.contains(&PlannedAction::PopVlan), "{}", f.key);
    }
}

// ---- shared gateway -------------------------------------------------------------------------

#[test]
fn shared_gateway_steers_returns_and_passes_pmtu_for_every_protocol() {
    let flows = plan_for(&model(WEB), &bridge());
    assert_eq!(
        keys(&flows),
        [
            "arp 192.0.2.10",
            "frag 192.0.2.10",
            "frag 2001:db8::10",
            "frag return 192.0.2.10",
            "frag return 2001:db8::10",
            "nd 2001:db8::10",
            "pmtu 192.0.2.10",
            "pmtu 2001:db8::10",
            "return 192.0.2.10:3868/sctp",
            "return 192.0.2.10:53/udp",
            "return 192.0.2.10:80/tcp",
            "return [2001:db8::10]:3868/sctp",
            "return [2001:db8::10]:53/udp",
            "return [2001:db8::10]:80/tcp",
            "steer 192.0.2.10:3868/sctp",
            "steer 192.0.2.10:53/udp",
            "steer 192.0.2.10:80/tcp",
            "steer [2001:db8::10]:3868/sctp",
            "steer [2001:db8::10]:53/udp",
            "steer [2001:db8::10]:80/tcp",
        ]
    );
    let text = |k: &str| flow(&flows, k).match_.to_string();
    assert_eq!(
        text("steer 192.0.2.10:80/tcp"),
        "tcp,nw_dst=192.0.2.10,tp_dst=80"
    );
    assert_eq!(
        text("steer 192.0.2.10:53/udp"),
        "udp,nw_dst=192.0.2.10,tp_dst=53"
    );
    assert_eq!(
        text("steer 192.0.2.10:3868/sctp"),
        "sctp,nw_dst=192.0.2.10,tp_dst=3868"
    );
    assert_eq!(
        text("steer [2001:db8::10]:80/tcp"),
        "tcp6,ipv6_dst=2001:db8::10,tp_dst=80"
    );
    assert_eq!(
        text("return 192.0.2.10:80/tcp"),
        "tcp,nw_src=192.0.2.10,tp_src=80"
    );
    assert_eq!(
        text("return [2001:db8::10]:3868/sctp"),
        "sctp6,ipv6_src=2001:db8::10,tp_src=3868"
    );
    assert_eq!(text("frag 192.0.2.10"), "ip,nw_dst=192.0.2.10,nw_frag=yes");
    assert_eq!(
        text("frag return 2001:db8::10"),
        "ipv6,ipv6_src=2001:db8::10,nw_frag=yes"
    );
    for f in &flows {
        let kind = f.key.rsplit_once(' ').map_or("", |(k, _)| k);
        let (in_port, dl_src, actions) = match kind {
            "steer" | "pmtu" | "frag" => (
                PortRef::Uplink,
                false,
                vec![PlannedAction::Output(PortRef::Patch)],
            ),
            "return" | "frag return" => (
                PortRef::Patch,
                true,
                vec![PlannedAction::Output(PortRef::Uplink)],
            ),
            _ => (
                PortRef::Uplink,
                false,
                vec![PlannedAction::Output(PortRef::Local)],
            ),
        };
        assert_eq!(f.in_port, in_port, "{}", f.key);
        assert_eq!(f.dl_src_bridge, dl_src, "{}", f.key);
        assert_eq!(f.actions, actions, "{}", f.key);
    }
}

#[test]
fn pmtu_ipv4_is_fragmentation_needed() {
    let flows = plan_for(&model(WEB), &bridge());
    let f = flow(&flows, "pmtu 192.0.2.10");
    assert_eq!(
        f.match_,
        Match::new()
            .with(OxmField::eth_type(eth_type::IPV4))
            .with(OxmField::ip_proto(ip_proto::ICMP))
            .with(OxmField::ipv4_dst("192.0.2.10".parse().unwrap()))
            .with(OxmField::icmpv4_type(3))
            .with(OxmField::icmpv4_code(4))
    );
}

#[test]
fn pmtu_ipv6_is_packet_too_big() {
    let flows = plan_for(&model(WEB), &bridge());
    let f = flow(&flows, "pmtu 2001:db8::10");
    assert_eq!(
        f.match_,
        Match::new()
            .with(OxmField::eth_type(eth_type::IPV6))
            .with(OxmField::ip_proto(ip_proto::ICMPV6))
            .with(OxmField::ipv6_dst("2001:db8::10".parse().unwrap()))
            .with(OxmField::icmpv6_type(2))
            .with(OxmField::icmpv6_code(0))
    );
}

#[test]
fn local_gateway_mode_has_only_the_bypass_flows() {
    let b = BridgeConfig {
        gateway_mode: GatewayMode::Local,
        ..bridge()
    };
    let flows = plan_for(&model(WEB), &b);
    assert_eq!(keys(&flows), ["arp 192.0.2.10", "nd 2001:db8::10"]);
}

// ---- underlay -------------------------------------------------------------------------------

fn underlay() -> BridgeConfig {
    BridgeConfig {
        name: "br-provider".into(),
        profile: Profile::Underlay,
        uplink: Some("ens4".into()),
        patch: Some("patch-prov".into()),
        router_mac: Some(ROUTER_MAC),
        ..bridge()
    }
}

#[test]
fn underlay_profile_rewrites_to_the_router_mac_and_has_no_return_path() {
    let flows = plan_for(&model(WEB), &underlay());
    assert!(
        flows.iter().all(|f| !f.key.starts_with("return ")),
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
        assert_eq!(f.cookie, cookie(0xabcd, &f.key));
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

// ---- resolve() and display(): literal ovs-ofctl text ----------------------------------------

/// Each kind of flow: (key, display() text, resolve() text with uplink 1, patch 2). Every text
/// was fed to `ovs-ofctl -O OpenFlow13 parse-flow` (with numbers for port names), which
/// accepted it and printed the same match and actions; cookies were computed independently.
#[test]
fn each_kind_of_flow_in_ovs_ofctl_syntax() {
    let b = BridgeConfig {
        bridge_mac: Some(BR_MAC),
        ..bridge()
    };
    let flows = plan_for(&model(WEB), &b);
    let cases = [
        (
            "arp 192.0.2.10",
            "cookie=0x7f1f6d4095d9508b,table=0,priority=500,in_port=eth0,arp,arp_tpa=192.0.2.10,arp_op=1 \
             actions=LOCAL",
            "cookie=0x7f1f6d4095d9508b,table=0,priority=500,arp,in_port=1,arp_tpa=192.0.2.10,arp_op=1,\
             actions=LOCAL",
        ),
        (
            "nd 2001:db8::10",
            "cookie=0x7f1f17cd90e66fed,table=0,priority=500,in_port=eth0,icmp6,icmp_type=135,icmp_code=0,\
             nd_target=2001:db8::10 actions=LOCAL",
            "cookie=0x7f1f17cd90e66fed,table=0,priority=500,icmp6,in_port=1,icmp_type=135,icmp_code=0,\
             nd_target=2001:db8::10,actions=LOCAL",
        ),
        (
            "pmtu 192.0.2.10",
            "cookie=0x7f1fc51a7ce20992,table=0,priority=500,in_port=eth0,icmp,nw_dst=192.0.2.10,\
             icmp_type=3,icmp_code=4 actions=output:patch-ex-to-int",
            "cookie=0x7f1fc51a7ce20992,table=0,priority=500,icmp,in_port=1,nw_dst=192.0.2.10,\
             icmp_type=3,icmp_code=4,actions=output:2",
        ),
        (
            "pmtu 2001:db8::10",
            "cookie=0x7f1f8f010b6c3887,table=0,priority=500,in_port=eth0,icmp6,ipv6_dst=2001:db8::10,\
             icmp_type=2,icmp_code=0 actions=output:patch-ex-to-int",
            "cookie=0x7f1f8f010b6c3887,table=0,priority=500,icmp6,in_port=1,ipv6_dst=2001:db8::10,\
             icmp_type=2,icmp_code=0,actions=output:2",
        ),
        (
            "steer 192.0.2.10:80/tcp",
            "cookie=0x7f1ff1ef727a35a3,table=0,priority=500,in_port=eth0,tcp,nw_dst=192.0.2.10,tp_dst=80 \
             actions=output:patch-ex-to-int",
            "cookie=0x7f1ff1ef727a35a3,table=0,priority=500,tcp,in_port=1,nw_dst=192.0.2.10,tp_dst=80,\
             actions=output:2",
        ),
        (
            "return [2001:db8::10]:53/udp",
            "cookie=0x7f1fa0f458990b3d,table=0,priority=500,in_port=patch-ex-to-int,\
             dl_src=02:00:00:00:00:01,udp6,ipv6_src=2001:db8::10,tp_src=53 actions=output:eth0",
            "cookie=0x7f1fa0f458990b3d,table=0,priority=500,udp6,in_port=2,dl_src=02:00:00:00:00:01,\
             ipv6_src=2001:db8::10,tp_src=53,actions=output:1",
        ),
    ];
    for (key, display, resolved_text) in cases {
        let f = flow(&flows, key);
        assert_eq!(f.display(&b).to_string(), display, "{key}");
        assert_eq!(f.resolve(&resolved(1)).to_string(), resolved_text, "{key}");
    }
}

#[test]
fn underlay_steering_in_ovs_ofctl_syntax() {
    let b = underlay();
    let flows = plan_for(&model(WEB), &b);
    let f = flow(&flows, "steer 192.0.2.10:3868/sctp");
    assert_eq!(
        f.display(&b).to_string(),
        "cookie=0x7f1f5e8c1809a0b5,table=0,priority=500,in_port=ens4,sctp,nw_dst=192.0.2.10,\
         tp_dst=3868 actions=mod_dl_dst:0a:58:0a:f4:00:01,output:patch-prov"
    );
    assert_eq!(
        f.resolve(&resolved(1)).to_string(),
        "cookie=0x7f1f5e8c1809a0b5,table=0,priority=500,sctp,in_port=1,nw_dst=192.0.2.10,\
         tp_dst=3868,actions=set_field:0a:58:0a:f4:00:01->eth_dst,output:2"
    );
}

#[test]
fn return_path_without_a_configured_mac_names_the_bridge_and_resolves_late() {
    let b = bridge();
    let flows = plan_for(&model(SMALL), &b);
    let f = flow(&flows, "return 192.0.2.10:80/tcp");
    assert!(
        f.display(&b)
            .to_string()
            .contains(",in_port=patch-ex-to-int,dl_src=<br-ex mac>,tcp,"),
        "{}",
        f.display(&b)
    );
    let fm = f.resolve(&resolved(1));
    assert_eq!(
        fm.match_.basic(openflow::oxm::field::ETH_SRC),
        Some(&OxmField::eth_src(BR_MAC))
    );
}

#[test]
fn resolve_builds_an_add_with_a_normalized_match() {
    let flows = plan_for(&model(SMALL), &bridge());
    let f = flow(&flows, "return 192.0.2.10:80/tcp");
    let fm = f.resolve(&resolved(1));
    assert_eq!(fm.command, openflow::FlowModCommand::Add);
    assert_eq!(fm.cookie, f.cookie);
    assert_eq!(fm.cookie_mask, 0);
    assert_eq!(fm.match_, fm.match_.normalized());
    // in_port first, eth_src before eth_type, as OXM field numbers order them.
    assert_eq!(fm.match_.fields[0], OxmField::in_port(2));
    assert_eq!(fm.match_.fields[1], OxmField::eth_src(BR_MAC));
    assert_eq!(
        fm.instructions,
        [Instruction::ApplyActions(vec![Action::output(1)])]
    );
    let arp = flow(&flows, "arp 192.0.2.10").resolve(&resolved(1));
    assert_eq!(
        arp.instructions,
        [Instruction::ApplyActions(vec![Action::output(
            ofport::LOCAL
        )])]
    );
}

// ---- the gateway router's MAC ----------------------------------------------------------------

#[test]
fn steered_traffic_is_rewritten_only_when_the_router_mac_differs() {
    let gw = bridge();
    let other: MacAddr = [0x0a, 0x58, 0x64, 0x40, 0, 0x05];
    assert_eq!(steer_rewrite(&gw, Some(other), Some(BR_MAC)), Some(other));
    assert_eq!(
        steer_rewrite(&gw, Some(BR_MAC), Some(BR_MAC)),
        None,
        "equal"
    );
    assert_eq!(
        steer_rewrite(&gw, None, Some(BR_MAC)),
        None,
        "no annotation"
    );
    assert_eq!(
        steer_rewrite(&gw, Some(other), None),
        None,
        "bridge MAC unknown"
    );
    let local = BridgeConfig {
        gateway_mode: GatewayMode::Local,
        ..bridge()
    };
    assert_eq!(steer_rewrite(&local, Some(other), Some(BR_MAC)), None);
    assert_eq!(steer_rewrite(&underlay(), Some(other), Some(BR_MAC)), None);
}

#[test]
fn a_rewrite_adds_set_field_before_the_patch_port_and_keeps_the_cookie() {
    let other: MacAddr = [0x0a, 0x58, 0x64, 0x40, 0, 0x05];
    let flows = plan_for(&model(SMALL), &bridge());
    let r = Resolved {
        steer_dst: Some(other),
        ..resolved(1)
    };
    let steer = flow(&flows, "steer 192.0.2.10:80/tcp");
    assert_eq!(
        steer.resolve(&r).to_string(),
        "cookie=0x7f1ff1ef727a35a3,table=0,priority=500,tcp,in_port=1,nw_dst=192.0.2.10,tp_dst=80,\
         actions=set_field:0a:58:64:40:00:05->eth_dst,output:2"
    );
    let pmtu = flow(&flows, "pmtu 192.0.2.10").resolve(&r);
    assert_eq!(
        pmtu.instructions,
        [Instruction::ApplyActions(vec![
            Action::SetField(OxmField::eth_dst(other)),
            Action::output(2)
        ])]
    );
    // Bypass and return flows do not go into OVN: untouched.
    for key in ["arp 192.0.2.10", "return 192.0.2.10:80/tcp"] {
        let f = flow(&flows, key);
        assert_eq!(f.resolve(&r), f.resolve(&resolved(1)), "{key}");
    }
}

#[test]
fn plan_names_ports_left_to_the_ovs_database_by_role() {
    let b = BridgeConfig::default();
    let flows = plan_for(&model(SMALL), &b);
    let steer = flow(&flows, "steer 192.0.2.10:80/tcp")
        .display(&b)
        .to_string();
    assert!(
        steer.contains(",in_port=<br-ex uplink>,")
            && steer.ends_with("actions=output:<br-ex patch>"),
        "{steer}"
    );
    // Same flows and cookies as with the ports named.
    assert_eq!(flows, plan_for(&model(SMALL), &bridge()));
}
