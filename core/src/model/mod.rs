//! The validated model: which VIPs exist, on which ports, for which Service, with which
//! endpoints — built from raw Kubernetes objects by a pure function.
//!
//! Rules, which VIPs a Service has:
//! - VIPs are `spec.externalIPs` of any Service and `status.loadBalancer.ingress[].ip` of
//!   LoadBalancer Services; ingress entries with `ipMode: Proxy` and hostname-only entries are
//!   skipped (the external LB proxies those). With a `load_balancer_class` filter, ingress IPs
//!   are taken only from Services of that class; externalIPs, which users set by hand and no LB
//!   implementation owns, are always taken.
//! - Bad input is skipped for the smallest unit it spoils (a VIP, a port) and reported as a
//!   [`Problem`]; everything else still goes through. Nothing here panics on peer input.
//! - One VIP:port/protocol claimed by two Services: the oldest (creationTimestamp, then
//!   namespace/name) wins, deterministically, so repeated plans never flap; the loser gets a
//!   Problem.

use k8s_openapi::api::core::v1 as core;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

mod kept;
mod problem;
pub use kept::{
    KeptEndpoint, KeptIngress, KeptLoadBalancerStatus, KeptMeta, KeptService, KeptServicePort,
    KeptServiceSpec, KeptServiceStatus, KeptSlice, KeptSlicePort, Text,
};
pub use problem::{ObjectRef, Problem, ProblemKind, Subject};

/// A source's snapshot: the objects read (from a file or the API), with what was wrong in them.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    pub objects: Objects,
    pub problems: Vec<Problem>,
    /// False only for a source's placeholder before its first complete snapshot: planning it
    /// would delete everything programmed.
    pub complete: bool,
}

/// The raw objects a source delivers.
#[derive(Debug, Clone, Default)]
///
/// Objects are shared (`Arc`): a snapshot costs a pointer per object, and an object that did
/// not change between two snapshots is the same allocation, which the incremental planner
/// uses to skip it.
pub struct Objects {
    pub services: Vec<Arc<KeptService>>,
    pub endpoint_slices: Vec<Arc<KeptSlice>>,
    pub nodes: Vec<Arc<core::Node>>,
    /// Kube-OVN `Subnet`s (kubeovn.io/v1), when the cluster runs Kube-OVN.
    pub subnets: Vec<KubeOvnSubnet>,
    /// vipflow's address pools (`VipPool`, vipflow.io/v1alpha1).
    pub pools: Vec<crate::ipam::pool_object::VipPool>,
    /// vipflow's BGP objects (vipflow.io/v1alpha1).
    pub bgp: BgpObjects,
    /// MetalLB's `L2Advertisement`s: which pools the L2 announcer answers for, and from which
    /// nodes ([`crate::plan::l2_selection`]).
    pub l2_advertisements: Vec<crate::metallb::L2Advertisement>,
}

/// The BGP objects of a snapshot ([`crate::bgp::objects`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BgpObjects {
    pub peers: Vec<crate::bgp::objects::BgpPeer>,
    pub advertisements: Vec<crate::bgp::objects::BgpAdvertisement>,
    pub bfd_profiles: Vec<crate::bgp::objects::BfdProfile>,
    /// The named communities of MetalLB's `Community` objects.
    pub communities: Vec<crate::metallb::CommunityAlias>,
}

impl BgpObjects {
    /// Take `other`'s objects too.
    pub fn extend(&mut self, other: BgpObjects) {
        self.peers.extend(other.peers);
        self.advertisements.extend(other.advertisements);
        self.bfd_profiles.extend(other.bfd_profiles);
        self.communities.extend(other.communities);
    }
}

impl Objects {
    /// Take `previous`'s allocation for every object that is unchanged (same kind, namespace,
    /// name and content): a re-read file then hands the planner the same allocations for what
    /// did not change, and the planner, which tells changes by allocation, re-plans only the
    /// rest. Returns how many objects were new or changed.
    pub fn share_unchanged(&mut self, previous: &Objects) -> usize {
        fn share<T: PartialEq>(
            now: &mut [Arc<T>],
            before: &[Arc<T>],
            key: impl Fn(&T) -> (Option<&str>, Option<&str>),
        ) -> usize {
            // A file's unchanged items come from its item cache already shared: the common
            // case needs no index.
            if now.len() == before.len() && now.iter().zip(before).all(|(n, b)| Arc::ptr_eq(n, b)) {
                return 0;
            }
            let index: std::collections::HashMap<_, &Arc<T>, foldhash::fast::RandomState> =
                before.iter().map(|o| (key(o), o)).collect();
            let mut changed = 0;
            for o in now.iter_mut() {
                match index.get(&key(o)) {
                    Some(old) if Arc::ptr_eq(old, o) || ***old == **o => *o = Arc::clone(old),
                    _ => changed += 1,
                }
            }
            changed
        }
        share(&mut self.services, &previous.services, |o| {
            (o.metadata.namespace.as_deref(), o.metadata.name.as_deref())
        }) + share(&mut self.endpoint_slices, &previous.endpoint_slices, |o| {
            (o.namespace.as_deref(), o.name.as_deref())
        }) + share(&mut self.nodes, &previous.nodes, |o| {
            (o.metadata.namespace.as_deref(), o.metadata.name.as_deref())
        })
    }
}

/// The part of a Kube-OVN `Subnet` vipflow reads. Kube-OVN's other fields are many and not
/// ours, so they are ignored without comment.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
pub struct KubeOvnSubnet {
    #[serde(default)]
    pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    #[serde(default)]
    pub spec: KubeOvnSubnetSpec,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeOvnSubnetSpec {
    /// One CIDR, or "v4cidr,v6cidr" for dual stack.
    #[serde(default)]
    pub cidr_block: String,
    /// IPs and `a..b` ranges kept out of the subnet's IPAM.
    #[serde(default)]
    pub exclude_ips: Vec<String>,
    /// "gw4" or "gw4,gw6"; Kube-OVN excludes it itself.
    #[serde(default)]
    pub gateway: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelOptions {
    /// Take LoadBalancer ingress IPs only from Services of this class.
    pub load_balancer_class: Option<String>,
}

impl ModelOptions {
    /// The options the agent's configuration sets.
    pub fn from_config(cfg: &crate::config::Config) -> ModelOptions {
        ModelOptions {
            load_balancer_class: cfg.load_balancer_class.clone(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    pub fn parse(s: Option<&str>) -> Option<Protocol> {
        match s.unwrap_or("TCP") {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// The protocol [`Protocol::as_str`] names (lower case, as OVN writes it).
    pub fn from_name(s: &str) -> Option<Protocol> {
        match s {
            "tcp" => Some(Protocol::Tcp),
            "udp" => Some(Protocol::Udp),
            "sctp" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// Lower-case name, as OVN and ovs-ofctl write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }

    pub fn ip_proto(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// namespace/name. Shared strings: the planners copy keys into several indexes, and a copy
/// is then a reference count, not two allocations; keys made from the same text anew (a
/// Service's, its slices', its rows' read back) share it too (`interned.rs`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceKey {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
}

impl ServiceKey {
    pub fn new(namespace: &str, name: &str) -> Self {
        ServiceKey {
            namespace: interned::interned(namespace),
            name: interned::interned(name),
        }
    }
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Written as `namespace/name`.
impl serde::Serialize for ServiceKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ServiceKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ServiceKey, D::Error> {
        let text = String::deserialize(d)?;
        match text.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() => Ok(ServiceKey::new(ns, name)),
            _ => Err(serde::de::Error::custom(format!(
                "{text:?} is not namespace/name"
            ))),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TargetPort {
    Number(u16),
    Name(Text),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TrafficPolicy {
    #[default]
    Cluster,
    Local,
}

/// Where a VIP came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum VipSource {
    ExternalIp,
    Ingress,
}

/// One VIP:port/protocol a Service serves (after validation and conflict resolution).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VipPort {
    pub vip: IpAddr,
    pub port: u16,
    pub protocol: Protocol,
    pub target: TargetPort,
    /// The Service port's name (matches EndpointSlice port names).
    pub port_name: Option<Text>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    pub key: ServiceKey,
    /// Its creation time: the oldest Service wins a contested VIP:port.
    pub created: Option<k8s_openapi::jiff::Timestamp>,
    pub traffic_policy: TrafficPolicy,
    pub prefer_local: bool,
    /// Every VIP:port/protocol this Service owns, sorted.
    pub vip_ports: Vec<VipPort>,
}

impl Service {
    /// The distinct VIPs of this Service.
    pub fn vips(&self) -> BTreeSet<IpAddr> {
        self.vip_ports.iter().map(|v| v.vip).collect()
    }
}

/// One endpoint of an EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub addresses: Vec<IpAddr>,
    pub node: Option<Text>,
    /// The Pod behind it, by name in the slice's namespace (its `targetRef`).
    pub pod: Option<Text>,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointPort {
    pub name: Option<Text>,
    pub port: u16,
    pub protocol: Protocol,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointSlice {
    pub name: Text,
    pub ports: Vec<EndpointPort>,
    pub endpoints: Vec<Endpoint>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub addresses: Vec<IpAddr>,
    /// Its OVN chassis's name, when a Node annotation gives one
    /// ([`crate::keys::CHASSIS_ID_ANNOTATION`]); otherwise the chassis is named as the node.
    pub chassis: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Model {
    pub services: BTreeMap<ServiceKey, Service>,
    pub endpoint_slices: BTreeMap<ServiceKey, Vec<EndpointSlice>>,
    pub nodes: BTreeMap<String, Node>,
    pub problems: Vec<Problem>,
}

impl Model {
    /// Every VIP with at least one valid port, with the Services that serve it.
    pub fn vips(&self) -> BTreeMap<IpAddr, BTreeSet<&ServiceKey>> {
        let mut m: BTreeMap<IpAddr, BTreeSet<&ServiceKey>> = BTreeMap::new();
        for s in self.services.values() {
            for vp in &s.vip_ports {
                m.entry(vp.vip).or_default().insert(&s.key);
            }
        }
        m
    }

    /// Every VIP:port/protocol, sorted, with its Service.
    pub fn vip_ports(&self) -> impl Iterator<Item = (&ServiceKey, &VipPort)> {
        self.services
            .values()
            .flat_map(|s| s.vip_ports.iter().map(move |vp| (&s.key, vp)))
    }

    pub fn build(objects: &Objects, opts: &ModelOptions) -> Model {
        Model::build_with(objects, opts, true)
    }

    /// [`Model::build`] with no EndpointSlices kept (their problems are still reported): for
    /// what reads only Services, VIPs and problems (`agent --once`'s problem list; the
    /// reference the running agent's reports are tested against).
    pub fn build_without_slices(objects: &Objects, opts: &ModelOptions) -> Model {
        Model::build_with(objects, opts, false)
    }

    fn build_with(objects: &Objects, opts: &ModelOptions, slices: bool) -> Model {
        let mut problems = Vec::new();
        let nodes = build_nodes(&objects.nodes, &mut problems);
        let node_ips: BTreeSet<IpAddr> = nodes
            .values()
            .flat_map(|n| n.addresses.iter().copied())
            .collect();
        // The first object of each key is the Service; a later one with the same key is
        // reported and otherwise ignored (its cluster IP included), valid or not. So is an
        // object without a name.
        let mut keys = std::collections::HashSet::new();
        let mut firsts = Vec::with_capacity(objects.services.len());
        for svc in &objects.services {
            match svc.key() {
                Some(k) if !keys.insert(k.clone()) => problems.push(Problem::new(
                    Subject::Service(k),
                    ProblemKind::Duplicate,
                    "listed twice; the first one is used",
                )),
                _ => firsts.push(svc),
            }
        }
        let cluster_ips: BTreeSet<IpAddr> = (firsts.iter())
            .filter(|s| s.key().is_some())
            .flat_map(|s| cluster_ips_of(s))
            .collect();

        // Candidate services with every valid VIP:port they claim.
        let mut candidates: BTreeMap<ServiceKey, Service> = BTreeMap::new();
        for svc in firsts {
            let Some(s) = build_service(svc, opts, &node_ips, &cluster_ips, &mut problems) else {
                continue;
            };
            candidates.insert(s.key.clone(), s);
        }

        resolve_conflicts(&mut candidates, &mut problems);
        let endpoint_slices = if slices {
            build_slices(&objects.endpoint_slices, &mut problems)
        } else {
            slice_problems(&objects.endpoint_slices, &mut problems);
            BTreeMap::new()
        };
        problems.sort();
        problems.dedup();
        Model {
            services: candidates,
            endpoint_slices,
            nodes,
            problems,
        }
    }
}

/// `VIP:port/proto`, with brackets around IPv6.
pub struct SocketLike(pub IpAddr, pub u16, pub Protocol);

impl SocketLike {
    pub fn of(vp: &VipPort) -> SocketLike {
        SocketLike(vp.vip, vp.port, vp.protocol)
    }
}

impl fmt::Display for SocketLike {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let SocketLike(vip, port, protocol) = self;
        match vip {
            IpAddr::V4(ip) => write!(f, "{ip}:{port}/{protocol}"),
            IpAddr::V6(ip) => write!(f, "[{ip}]:{port}/{protocol}"),
        }
    }
}

mod interned;
mod validate;

pub use validate::{Rank, gateway_router_mac, node_gateway_router_mac, slice_problems};
pub(crate) use validate::{
    build_nodes, build_service, build_slices, cluster_ips_of, meta_key, rank, resolve_conflicts,
    slice_service_key,
};

/// Addresses no VIP can be: link-local (ARP and ND for them never leave the segment in a way a
/// load balancer can use) and the IPv4 limited broadcast.
fn not_routable(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.is_link_local() || a.is_broadcast(),
        IpAddr::V6(a) => (a.segments()[0] & 0xffc0) == 0xfe80,
    }
}

#[cfg(test)]
mod tests;
