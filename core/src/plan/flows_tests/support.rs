//! Helpers and fixtures shared by the tests of this module.

use super::*;
use crate::config::{BridgeConfig, Profile};
use crate::decode::parse;
use crate::model::{Model, ModelOptions};

pub(super) const PREFIX: u16 = 0x7f1f;
pub(super) const BR_MAC: MacAddr = [0x02, 0, 0, 0, 0, 0x01];
pub(super) const ROUTER_MAC: MacAddr = [0x0a, 0x58, 0x0a, 0xf4, 0, 0x01];

pub(super) fn model(yaml: &str) -> Model {
    let l = parse(yaml).expect("fixture parses");
    assert!(l.problems.is_empty(), "fixture problems: {:?}", l.problems);
    let m = Model::build(&l.objects, &ModelOptions::default());
    assert!(m.problems.is_empty(), "model problems: {:?}", m.problems);
    m
}

/// One Service, dual-stack, on TCP, UDP and SCTP.
pub(super) const WEB: &str = r#"
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
pub(super) const SMALL: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  externalIPs: [192.0.2.10]
  ports: [{port: 80}]
"#;

/// br-ex with its ports named (the default leaves them to the OVS database).
pub(super) fn bridge() -> BridgeConfig {
    BridgeConfig {
        uplink: Some("eth0".into()),
        patch: Some("patch-ex-to-int".into()),
        ..BridgeConfig::default()
    }
}

pub(super) fn plan_for(m: &Model, b: &BridgeConfig) -> Vec<PlannedFlow> {
    plan(
        m,
        &PlanInput {
            bridge: b,
            cookie_prefix: PREFIX,
        },
    )
}

pub(super) fn keys(flows: &[PlannedFlow]) -> Vec<String> {
    flows.iter().map(|f| f.key.to_string()).collect()
}

pub(super) fn flow<'a>(flows: &'a [PlannedFlow], key: &str) -> &'a PlannedFlow {
    flows
        .iter()
        .find(|f| f.key.to_string() == key)
        .unwrap_or_else(|| panic!("no flow {key:?} in {:?}", keys(flows)))
}

pub(super) fn resolved(uplink: u32) -> Resolved {
    Resolved {
        uplink,
        patch: 2,
        bridge_mac: BR_MAC,
        steer_dst: None,
    }
}

pub(super) fn underlay() -> BridgeConfig {
    BridgeConfig {
        name: "br-provider".into(),
        profile: Profile::Underlay,
        uplink: Some("ens4".into()),
        patch: Some("patch-prov".into()),
        router_mac: Some(ROUTER_MAC),
        ..bridge()
    }
}
