//! frr-k8s's objects (`frrk8s.metallb.io/v1beta1`) as vipflow writes and reads them:
//! `FRRConfiguration` (what vipflow hands frr-k8s to merge into the node's FRR),
//! `FRRNodeState` and `BGPSessionState` (what frr-k8s says it did). Only the fields vipflow
//! writes or reads are typed; unknown ones are ignored on reading.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "frrk8s.metallb.io";
pub const VERSION: &str = "v1beta1";
pub const API_VERSION: &str = "frrk8s.metallb.io/v1beta1";
pub const CONFIGURATION_KIND: &str = "FRRConfiguration";
pub const CONFIGURATION_PLURAL: &str = "frrconfigurations";
pub const NODE_STATE_KIND: &str = "FRRNodeState";
pub const NODE_STATE_PLURAL: &str = "frrnodestates";
pub const SESSION_STATE_KIND: &str = "BGPSessionState";
pub const SESSION_STATE_PLURAL: &str = "bgpsessionstates";
/// The label frr-k8s puts on a `BGPSessionState` naming its node.
pub const SESSION_NODE_LABEL: &str = "frrk8s.metallb.io/node";

/// One piece of a node's FRR configuration; frr-k8s merges every piece whose `nodeSelector`
/// selects the node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FrrConfiguration {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: FrrConfigurationSpec,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FrrConfigurationSpec {
    #[serde(default)]
    pub bgp: FrrBgp,
    /// Empty: every node.
    #[serde(default)]
    pub node_selector: LabelSelector,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FrrBgp {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routers: Vec<FrrRouter>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bfd_profiles: Vec<FrrBfdProfile>,
}

/// One BGP instance (one per VRF on a node; vipflow uses the default VRF).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FrrRouter {
    pub asn: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vrf: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub neighbors: Vec<FrrNeighbor>,
    /// What this instance originates; a neighbor is sent only prefixes listed here (in the
    /// same object).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefixes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FrrNeighbor {
    pub asn: u32,
    pub address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    #[serde(
        default,
        rename = "sourceaddress",
        skip_serializing_if = "Option::is_none"
    )]
    pub source_address: Option<String>,
    /// A Go duration, as `metav1.Duration` takes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keepalive_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_time: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub ebgp_multi_hop: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bfd_profile: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub enable_graceful_restart: bool,
    /// Both address families over this session (frr-k8s's default is the address's own).
    #[serde(default, skip_serializing_if = "is_false")]
    pub dual_stack_address_family: bool,
    #[serde(default)]
    pub to_advertise: ToAdvertise,
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToAdvertise {
    #[serde(default)]
    pub allowed: AllowedPrefixes,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub with_local_pref: Vec<LocalPrefPrefixes>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub with_community: Vec<CommunityPrefixes>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AllowedPrefixes {
    /// `all`: every prefix of the object's router; otherwise `prefixes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefixes: Vec<String>,
}

/// [`AllowedPrefixes::mode`] for every prefix of the router.
pub const ALLOW_ALL: &str = "all";

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalPrefPrefixes {
    pub local_pref: u32,
    #[serde(default)]
    pub prefixes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommunityPrefixes {
    /// `A:B` or `large:A:B:C`, as MetalLB and vipflow write them.
    pub community: String,
    #[serde(default)]
    pub prefixes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FrrBfdProfile {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receive_interval: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transmit_interval: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detect_multiplier: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub echo_interval: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub echo_mode: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passive_mode: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "minimumTtl"
    )]
    pub minimum_ttl: Option<u32>,
}

/// What frr-k8s on one node last did with the merged configuration (cluster-scoped, named
/// after the node; it exists while frr-k8s runs there).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FrrNodeState {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub status: FrrNodeStateStatus,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FrrNodeStateStatus {
    /// `success`, or why the objects could not be merged.
    #[serde(default)]
    pub last_conversion_result: Option<String>,
    /// `success`, or why FRR refused the configuration.
    #[serde(default)]
    pub last_reload_result: Option<String>,
}

/// One BGP session of one node, as frr-k8s reports it (in its namespace, labelled with the
/// node).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BgpSessionState {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub status: BgpSessionStateStatus,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BgpSessionStateStatus {
    #[serde(default)]
    pub bgp_status: Option<String>,
    #[serde(default)]
    pub bfd_status: Option<String>,
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default)]
    pub peer: Option<String>,
}
