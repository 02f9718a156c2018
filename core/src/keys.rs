//! Every annotation and label key vipflow reads or writes on Kubernetes objects, and every key
//! it reads or writes in OVN's and Open vSwitch's `external_ids`. They are vipflow's interface
//! with users and with the other controllers on a cluster, so each is spelled once, here.

// Any object.

/// Every annotation the model reads starts with this: an object is kept with these
/// annotations only, the others (some large) are dropped.
pub const VIPFLOW_ANNOTATION_PREFIX: &str = "vipflow.io/";
/// kubectl's copy of the whole object: dropped as an objects file is decoded, never read.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

// Service annotations.

/// Turns on prefer-local for one Service: `"true"` or `"false"`.
pub const PREFER_LOCAL_ANNOTATION: &str = "vipflow.io/prefer-local";
/// The addresses a Service asks the allocator for (a comma-separated list, at most one per
/// family): vipflow's first, then MetalLB's, so that Services move over unedited.
pub const IPS_ANNOTATIONS: [&str; 3] = [
    "vipflow.io/load-balancer-ips",
    "metallb.io/loadBalancerIPs",
    "metallb.universe.tf/loadBalancerIPs",
];
/// The pool a Service asks the allocator for: vipflow's first, then MetalLB's and Antrea's.
pub const POOL_ANNOTATIONS: [&str; 4] = [
    "vipflow.io/address-pool",
    "metallb.io/address-pool",
    "metallb.universe.tf/address-pool",
    "service.antrea.io/external-ip-pool",
];
/// A Service's sharing key: Services with the same key may share an address. vipflow's
/// first, then MetalLB's.
pub const SHARING_ANNOTATIONS: [&str; 3] = [
    "vipflow.io/allow-shared-ip",
    "metallb.io/allow-shared-ip",
    "metallb.universe.tf/allow-shared-ip",
];

// EndpointSlice labels.

/// Ties an EndpointSlice to its Service (set by Kubernetes; the watch selects on it).
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

// Node annotations and labels.

/// OVN-Kubernetes' per-node gateway settings: `{"default": {"mode": ..., "mac-address": ...}}`
/// (ovn-kubernetes `go-controller/pkg/util/node_annotations.go`).
pub const L3_GATEWAY_CONFIG_ANNOTATION: &str = "k8s.ovn.org/l3-gateway-config";
/// The node's OVN chassis (its system-id), as OVN-Kubernetes names it.
pub const CHASSIS_ID_ANNOTATION: &str = "k8s.ovn.org/node-chassis-id";
/// Moves a node's VIPs to others before it goes away (maintenance): any value but `false`.
pub const DRAIN_ANNOTATION: &str = "vipflow.io/drain";
/// Kubernetes' well-known label for a node that carries no load-balancer traffic: such a node
/// advertises no VIP over BGP ([`crate::plan::bgp::BgpNode::excluded`]).
pub const EXCLUDE_FROM_LOAD_BALANCERS_LABEL: &str =
    "node.kubernetes.io/exclude-from-external-load-balancers";

// OVN Northbound external_ids.

/// On vipflow's Load_Balancer rows: the Service a row is for, `namespace/name`.
pub const OWNER_KEY: &str = "vipflow.io/owner";
/// On vipflow's Load_Balancer rows: where a row applies ([`crate::plan::northbound::Scope`]:
/// `cluster`, `switches`, `node/NAME`, `template`).
pub const SCOPE_KEY: &str = "vipflow.io/scope";
/// On every row vipflow writes (value `true`): one condition selects them all (owner and
/// scope vary per row), e.g. `ovn-nbctl find Load_Balancer external_ids:vipflow.io/managed=true`.
pub const MANAGED_KEY: &str = "vipflow.io/managed";
/// On `NB_Global`: the token of the writer session allowed to write.
pub const WRITER_KEY: &str = "vipflow.io/writer";
/// On a Logical_Switch: what vipflow added to `other_config:exclude_ips`, space-separated
/// IPv4 addresses.
pub const EXCLUDE_IPS_KEY: &str = "vipflow.io/exclude-ips";

// Open vSwitch external_ids that OVN sets on the node (read only).

/// On `Open_vSwitch`: the physical networks' bridges, `NETWORK:BRIDGE,...`.
pub const OVN_BRIDGE_MAPPINGS_KEY: &str = "ovn-bridge-mappings";
/// On `Open_vSwitch`: the Southbound database ovn-controller connects to; set on an OVN node.
pub const OVN_REMOTE_KEY: &str = "ovn-remote";
/// On `Open_vSwitch`: the integration bridge, when not `br-int`.
pub const OVN_BRIDGE_KEY: &str = "ovn-bridge";
/// On a Port (or its Interface): the localnet port ovn-controller created it for.
pub const OVN_LOCALNET_PORT_KEY: &str = "ovn-localnet-port";

// Event labels and annotations.

/// The label naming the sink that said an Event.
pub const SAID_BY_LABEL: &str = "vipflow.io/said-by";
/// The annotation carrying the digest of an Event's statement (16 hex digits).
pub const STATEMENT_ANNOTATION: &str = "vipflow.io/statement";
