//! vipflow's BGP objects (`vipflow.io/v1alpha1`): `BGPPeer`, `BGPAdvertisement` and
//! `BFDProfile`, with the field names of MetalLB's objects of the same kinds, so that moving
//! over is a change of API group. As the API server serves them and as the objects file holds
//! them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::{Deserialize, Serialize};

pub const API_VERSION: &str = "vipflow.io/v1alpha1";

/// A BGP router that nodes peer with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BgpPeer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: BgpPeerSpec,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BgpPeerSpec {
    /// The nodes' own AS number.
    #[serde(rename = "myASN")]
    pub my_asn: u32,
    #[serde(rename = "peerASN")]
    pub peer_asn: u32,
    pub peer_address: String,
    #[serde(default)]
    pub source_address: Option<String>,
    #[serde(default)]
    pub peer_port: Option<u16>,
    /// A Go duration (`90s`, `3m`): the session's hold time.
    #[serde(default)]
    pub hold_time: Option<String>,
    #[serde(default)]
    pub keepalive_time: Option<String>,
    /// How long to wait before trying the session again.
    #[serde(default)]
    pub connect_time: Option<String>,
    #[serde(default, rename = "routerID")]
    pub router_id: Option<String>,
    /// The nodes that peer with it; none: every node.
    #[serde(default)]
    pub node_selectors: Vec<LabelSelector>,
    #[serde(default)]
    pub password: Option<String>,
    #[serde(default)]
    pub bfd_profile: Option<String>,
    #[serde(default)]
    pub enable_graceful_restart: bool,
    #[serde(default)]
    pub ebgp_multi_hop: bool,
    /// One session carries one address family only (IPv4 prefixes over an IPv4 peer address,
    /// IPv6 over IPv6); by default both go over it.
    #[serde(default, rename = "disableMP")]
    pub disable_mp: bool,
}

/// Which pools' VIPs are advertised, to which peers, from which nodes, and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BgpAdvertisement {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: BgpAdvertisementSpec,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BgpAdvertisementSpec {
    #[serde(default)]
    pub aggregation_length: Option<u8>,
    #[serde(default, rename = "aggregationLengthV6")]
    pub aggregation_length_v6: Option<u8>,
    #[serde(default)]
    pub local_pref: Option<u32>,
    #[serde(default)]
    pub communities: Vec<String>,
    /// The `VipPool`s by name; with no pool named or selected, every pool.
    #[serde(default)]
    pub ip_address_pools: Vec<String>,
    #[serde(default)]
    pub ip_address_pool_selectors: Vec<LabelSelector>,
    #[serde(default)]
    pub node_selectors: Vec<LabelSelector>,
    /// The `BGPPeer`s by name; none: every peer.
    #[serde(default)]
    pub peers: Vec<String>,
}

/// BFD timers for the sessions that name it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BfdProfile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: BfdProfileSpec,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BfdProfileSpec {
    /// Milliseconds.
    #[serde(default)]
    pub receive_interval: Option<u32>,
    /// Milliseconds.
    #[serde(default)]
    pub transmit_interval: Option<u32>,
    #[serde(default)]
    pub detect_multiplier: Option<u32>,
    /// Milliseconds.
    #[serde(default)]
    pub echo_interval: Option<u32>,
    #[serde(default)]
    pub echo_mode: bool,
    #[serde(default)]
    pub passive_mode: bool,
    #[serde(default)]
    pub minimum_ttl: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metallb_shaped_objects_read_as_they_are_written() {
        let peer: BgpPeer = serde_yaml_ng::from_str(
            "apiVersion: vipflow.io/v1alpha1\nkind: BGPPeer\nmetadata: {name: tor}\nspec:\n  myASN: 64513\n  peerASN: 64512\n  peerAddress: 10.9.0.1\n  holdTime: 9s\n  bfdProfile: fast\n  routerID: 10.9.0.2\n  disableMP: true\n  nodeSelectors: [{matchLabels: {rack: r1}}]\n",
        )
        .expect("a BGPPeer");
        assert_eq!(
            (peer.spec.my_asn, peer.spec.peer_asn),
            (64513, 64512),
            "{peer:?}"
        );
        assert_eq!(peer.spec.router_id.as_deref(), Some("10.9.0.2"));
        assert!(peer.spec.disable_mp);
        assert_eq!(peer.spec.node_selectors.len(), 1);
        let adv: BgpAdvertisement = serde_yaml_ng::from_str(
            "kind: BGPAdvertisement\nmetadata: {name: a}\nspec:\n  ipAddressPools: [p]\n  aggregationLengthV6: 124\n  localPref: 50\n  communities: [\"64512:1\"]\n",
        )
        .expect("a BGPAdvertisement");
        assert_eq!(adv.spec.aggregation_length_v6, Some(124));
        let bfd: BfdProfile = serde_yaml_ng::from_str(
            "kind: BFDProfile\nmetadata: {name: fast}\nspec: {receiveInterval: 300, transmitInterval: 300, detectMultiplier: 3}\n",
        )
        .expect("a BFDProfile");
        assert_eq!(bfd.spec.detect_multiplier, Some(3));
    }

    /// Each CRD's schema and the type name the same fields, and the CRD requires what the type
    /// cannot do without.
    #[test]
    fn the_crd_schemas_name_these_fields() {
        use std::collections::BTreeSet;
        let schema = |file: &str| -> serde_json::Value {
            let path = format!("{}/../deploy/{file}", env!("CARGO_MANIFEST_DIR"));
            let crd: serde_json::Value =
                serde_yaml_ng::from_str(&std::fs::read_to_string(&path).expect("the CRD"))
                    .expect("YAML");
            crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
        };
        let keys = |v: &serde_json::Value| -> BTreeSet<String> {
            v.as_object().expect("an object").keys().cloned().collect()
        };
        let required = |v: &serde_json::Value| -> BTreeSet<String> {
            v["required"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        let peer = schema("bgppeer-crd.yaml");
        let ours = serde_json::to_value(BgpPeerSpec::default()).expect("JSON");
        assert_eq!(keys(&peer["properties"]), keys(&ours));
        assert_eq!(
            required(&peer),
            ["myASN", "peerASN", "peerAddress"].map(String::from).into()
        );
        for field in required(&peer) {
            let mut partial = ours.clone();
            partial.as_object_mut().expect("an object").remove(&field);
            assert!(
                serde_json::from_value::<BgpPeerSpec>(partial).is_err(),
                "{field} is required by the CRD, and by the type"
            );
        }
        let adv = schema("bgpadvertisement-crd.yaml");
        let ours = serde_json::to_value(BgpAdvertisementSpec::default()).expect("JSON");
        assert_eq!(keys(&adv["properties"]), keys(&ours));
        assert!(required(&adv).is_empty());
        let bfd = schema("bfdprofile-crd.yaml");
        let ours = serde_json::to_value(BfdProfileSpec::default()).expect("JSON");
        assert_eq!(keys(&bfd["properties"]), keys(&ours));
        assert!(required(&bfd).is_empty());
    }
}
