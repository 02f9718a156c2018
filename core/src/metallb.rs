//! MetalLB's custom resources (`metallb.io`), read as vipflow's own so that a MetalLB user keeps
//! every object when moving over: an `IPAddressPool` is a [`VipPool`], a `BGPPeer` (v1beta2, and
//! the deprecated v1beta1), `BGPAdvertisement` and `BFDProfile` are vipflow's BGP objects of the
//! same kinds, a `Community` gives the aliases a `BGPAdvertisement` may name, and an
//! `L2Advertisement` says which pools the L2 announcer answers for and from which nodes
//! ([`L2Advertisement`]). Each keeps its `apiVersion`, which says where it came from (`vipflow
//! plan` prints what each became).
//!
//! - **Every field is honoured or said.** A field vipflow does not carry out is a problem that
//!   names it; where ignoring it would advertise or peer otherwise than the user asked (a
//!   `vrf`, a `passwordSecret`, `serviceSelectors`), the object is left out, and said. Said on
//!   the object too: in a cluster the elected allocator puts a Warning Event on it
//!   ([`events`]).
//! - **vipflow's object wins.** A `VipPool` and an `IPAddressPool` of one name (or a BGP kind
//!   of vipflow's and MetalLB's of one name): vipflow's is used, MetalLB's is a problem. Two
//!   MetalLB objects of one kind and name (in two namespaces): the first is used.
//! - **Where MetalLB differs from vipflow's defaults, MetalLB's objects mean what they mean
//!   to MetalLB**: a MetalLB `BGPPeer`'s session carries its own address family only unless
//!   `dualStackAddressFamily` (vipflow's carries both unless `disableMP`), and a v1beta1
//!   peer's zero `holdTime`/`keepaliveTime` is no setting, and a pool's CIDR with host bits
//!   set is its network ([`network_of`]).
//!
//! [`VipPool`]: crate::ipam::pool_object::VipPool

use crate::bgp::objects::{
    BfdProfile, BgpAdvertisement, BgpAdvertisementSpec, BgpPeer, BgpPeerSpec,
};
use crate::decode::decode;
use crate::ipam::pool_object::{ServiceAllocation, VipPool, VipPoolSpec};
use crate::ipam::selector;
use crate::model::{Loaded, ObjectRef, Problem, ProblemKind, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// MetalLB's API versions: v1beta1 for every kind, v1beta2 for `BGPPeer` (its stored version).
pub const V1BETA1: &str = "metallb.io/v1beta1";
pub const V1BETA2: &str = "metallb.io/v1beta2";

/// The kinds read, with the API versions each is read in and its plural (as the API server
/// serves them).
pub const KINDS: [(&str, &str, &str); 7] = [
    ("IPAddressPool", V1BETA1, "ipaddresspools"),
    ("L2Advertisement", V1BETA1, "l2advertisements"),
    ("BGPPeer", V1BETA2, "bgppeers"),
    ("BGPPeer", V1BETA1, "bgppeers"),
    ("BGPAdvertisement", V1BETA1, "bgpadvertisements"),
    ("BFDProfile", V1BETA1, "bfdprofiles"),
    ("Community", V1BETA1, "communities"),
];

/// Whether `api`'s group is MetalLB's.
pub fn is_metallb(api: &str) -> bool {
    api.starts_with("metallb.io/")
}

/// Whether vipflow reads `kind` in MetalLB's `api`.
pub fn reads(api: &str, kind: &str) -> bool {
    KINDS.iter().any(|(k, a, _)| *k == kind && *a == api)
}

/// A named community of a MetalLB `Community` object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommunityAlias {
    pub name: String,
    pub value: String,
    /// The object it came from, as its problems name it (`Community namespace/name`).
    pub object: Subject,
}

/// What a problem of a MetalLB object of `kind`, read in `api`, is about: the object by its
/// reference when it has a name (Events go on it), else as the objects file names an unnamed
/// item.
pub fn subject(
    api: &str,
    kind: &str,
    namespace: Option<&str>,
    name: Option<&str>,
    uid: Option<&str>,
) -> Subject {
    match name {
        Some(name) => Subject::Object(Box::new(ObjectRef {
            api_version: api.to_string(),
            kind: kind.to_string(),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
            uid: uid.map(str::to_string),
        })),
        None => Subject::FileItem(match namespace {
            Some(ns) => format!("{kind} {ns}/<unnamed>"),
            None => format!("{kind} <unnamed>"),
        }),
    }
}

/// [`subject`] of a decoded object with `meta`.
fn subject_of(api: &str, kind: &str, meta: &ObjectMeta) -> Subject {
    subject(
        api,
        kind,
        meta.namespace.as_deref(),
        meta.name.as_deref(),
        meta.uid.as_deref(),
    )
}

/// A MetalLB `L2Advertisement`, as the L2 announcer carries it out
/// ([`crate::plan::l2_selection`]): once the snapshot has one, a VIP of a pool is announced
/// over L2 only when an advertisement selects its pool, and only by the nodes such an
/// advertisement admits. vipflow has no kind of its own for it: a `VipPool`'s `nodeSelectors`
/// say the same for one pool.
#[derive(Debug, Clone, PartialEq)]
pub struct L2Advertisement {
    /// Always MetalLB's ([`V1BETA1`]).
    pub api_version: Option<String>,
    pub metadata: ObjectMeta,
    pub spec: L2AdvertisementSpec,
}

/// What an `L2Advertisement` says that vipflow carries out.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct L2AdvertisementSpec {
    /// Pools by name; with `ip_address_pool_selectors` both empty, every pool.
    pub ip_address_pools: Vec<String>,
    /// Pools by label (ORed with the names).
    pub ip_address_pool_selectors: Vec<LabelSelector>,
    /// The nodes that may announce (ORed); empty: every node.
    pub node_selectors: Vec<LabelSelector>,
}

impl L2AdvertisementSpec {
    /// Whether the advertisement selects the pool `name` with `labels` (MetalLB's rule: one
    /// that names and selects no pool selects every pool; a name no pool has selects none).
    pub fn selects_pool(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        selector::selects_pool(
            &self.ip_address_pools,
            &self.ip_address_pool_selectors,
            name,
            labels,
        )
    }

    /// Whether a node with `labels` may announce under this advertisement.
    pub fn admits_node(&self, labels: &BTreeMap<String, String>) -> bool {
        self.node_selectors.is_empty()
            || self
                .node_selectors
                .iter()
                .any(|s| selector::check(s).is_ok() && selector::matches(s, labels))
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Object<S> {
    #[serde(default)]
    #[allow(dead_code)]
    api_version: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    kind: Option<String>,
    #[serde(default)]
    metadata: ObjectMeta,
    spec: S,
    /// MetalLB writes some kinds' status; vipflow plans from the spec.
    #[serde(default)]
    #[allow(dead_code)]
    status: Option<serde::de::IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PoolSpec {
    addresses: Vec<String>,
    #[serde(default = "yes")]
    auto_assign: bool,
    #[serde(default, rename = "avoidBuggyIPs")]
    avoid_buggy_ips: bool,
    #[serde(default)]
    service_allocation: Option<ServiceAllocation>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PeerSpec {
    #[serde(rename = "myASN")]
    my_asn: u32,
    #[serde(default, rename = "peerASN")]
    peer_asn: Option<u32>,
    #[serde(default, rename = "dynamicASN")]
    dynamic_asn: Option<String>,
    #[serde(default, rename = "localASN")]
    local_asn: Option<u32>,
    #[serde(default)]
    peer_address: Option<String>,
    #[serde(default)]
    interface: Option<String>,
    #[serde(default)]
    source_address: Option<String>,
    #[serde(default)]
    peer_port: Option<u16>,
    #[serde(default)]
    hold_time: Option<String>,
    #[serde(default)]
    keepalive_time: Option<String>,
    #[serde(default)]
    connect_time: Option<String>,
    #[serde(default, rename = "routerID")]
    router_id: Option<String>,
    #[serde(default)]
    node_selectors: Vec<LabelSelector>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    password_secret: Option<Value>,
    #[serde(default)]
    bfd_profile: Option<String>,
    #[serde(default)]
    enable_graceful_restart: bool,
    #[serde(default)]
    ebgp_multi_hop: bool,
    #[serde(default)]
    vrf: Option<String>,
    #[serde(default, rename = "disableMP")]
    disable_mp: bool,
    #[serde(default)]
    dual_stack_address_family: bool,
}

/// [`BgpAdvertisementSpec`]'s fields, and MetalLB's `serviceSelectors`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AdvertisementSpec {
    #[serde(default)]
    aggregation_length: Option<u8>,
    #[serde(default, rename = "aggregationLengthV6")]
    aggregation_length_v6: Option<u8>,
    #[serde(default)]
    local_pref: Option<u32>,
    #[serde(default)]
    communities: Vec<String>,
    #[serde(default)]
    ip_address_pools: Vec<String>,
    #[serde(default)]
    ip_address_pool_selectors: Vec<LabelSelector>,
    #[serde(default)]
    node_selectors: Vec<LabelSelector>,
    #[serde(default)]
    peers: Vec<String>,
    #[serde(default)]
    service_selectors: Vec<LabelSelector>,
}

/// [`L2AdvertisementSpec`]'s fields, and those vipflow does not carry out.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct L2Spec {
    #[serde(default)]
    ip_address_pools: Vec<String>,
    #[serde(default)]
    ip_address_pool_selectors: Vec<LabelSelector>,
    #[serde(default)]
    node_selectors: Vec<LabelSelector>,
    #[serde(default)]
    interfaces: Vec<String>,
    #[serde(default)]
    service_selectors: Vec<LabelSelector>,
    /// Only said: read as values so that its own fields are not reported as unknown.
    #[serde(default)]
    preferred_node_selectors: Vec<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CommunitySpec {
    #[serde(default)]
    communities: Vec<CommunityEntry>,
}

#[derive(Debug, Deserialize)]
struct CommunityEntry {
    name: String,
    value: String,
}

/// Decode MetalLB object `item` (of `kind` in `api`, its problems about `what`) into `out`, as
/// vipflow's own kind, with every field vipflow does not carry out said.
pub(crate) fn add_item(item: Value, kind: &str, api: &str, what: &Subject, out: &mut Loaded) {
    let mut unknown = Vec::new();
    let mut unsupported: Vec<String> = Vec::new();
    // Parts that cannot be used; the object is used without them.
    let mut invalid: Vec<String> = Vec::new();
    // A reason the object is left out altogether.
    let mut left_out: Option<String> = None;
    let decoded: Result<(), String> = match kind {
        "IPAddressPool" => decode::<Object<PoolSpec>>(item, &mut unknown).map(|o| {
            out.objects.pools.push(VipPool {
                api_version: Some(api.to_string()),
                kind: Some(kind.to_string()),
                metadata: o.metadata,
                spec: VipPoolSpec {
                    addresses: o.spec.addresses.iter().map(|a| network_of(a)).collect(),
                    auto_assign: o.spec.auto_assign,
                    avoid_buggy_ips: o.spec.avoid_buggy_ips,
                    service_allocation: o.spec.service_allocation,
                    node_selectors: Vec::new(),
                },
            })
        }),
        "BGPPeer" => decode::<Object<PeerSpec>>(item, &mut unknown).map(|o| {
            let s = o.spec;
            let mut leave = |why: String| {
                left_out.get_or_insert(why);
            };
            if s.dynamic_asn.is_some() {
                leave("dynamicASN is not supported (give peerASN)".into());
            }
            if s.interface.is_some() {
                leave("interface (unnumbered BGP) is not supported (give peerAddress)".into());
            }
            if s.vrf.as_deref().is_some_and(|v| !v.is_empty()) {
                leave("vrf is not supported: vipflow peers from the default VRF".into());
            }
            if s.password_secret.is_some() {
                leave(
                    "passwordSecret is not supported: give the password in password (a session without it would fail)"
                        .into(),
                );
            }
            if s.local_asn.is_some() {
                leave("localASN is not supported".into());
            }
            if s.disable_mp {
                unsupported.push(
                    "disableMP is deprecated in MetalLB and has no effect there: none here either (dualStackAddressFamily says which families a session carries)"
                        .into(),
                );
            }
            let (Some(peer_asn), Some(peer_address)) = (s.peer_asn, s.peer_address) else {
                leave("it names no peerASN or no peerAddress".into());
                return;
            };
            // A v1beta1 peer writes its unset durations as 0s.
            let set = |d: Option<String>| d.filter(|v| go_zero(v).is_none_or(|zero| !zero));
            out.objects.bgp.peers.push(BgpPeer {
                api_version: Some(api.to_string()),
                kind: Some(kind.to_string()),
                metadata: o.metadata,
                spec: BgpPeerSpec {
                    my_asn: s.my_asn,
                    peer_asn,
                    peer_address,
                    source_address: s.source_address,
                    peer_port: s.peer_port,
                    hold_time: set(s.hold_time),
                    keepalive_time: set(s.keepalive_time),
                    connect_time: s.connect_time,
                    router_id: s.router_id,
                    node_selectors: s.node_selectors,
                    password: s.password,
                    bfd_profile: s.bfd_profile,
                    enable_graceful_restart: s.enable_graceful_restart,
                    ebgp_multi_hop: s.ebgp_multi_hop,
                    // MetalLB: one family per session unless dualStackAddressFamily.
                    disable_mp: !s.dual_stack_address_family,
                },
            });
        }),
        "BGPAdvertisement" => decode::<Object<AdvertisementSpec>>(item, &mut unknown).map(|o| {
            if !o.spec.service_selectors.is_empty() {
                left_out.get_or_insert(
                    "serviceSelectors is not supported: the advertisement would cover every Service of its pools"
                        .into(),
                );
                return;
            }
            let s = o.spec;
            out.objects.bgp.advertisements.push(BgpAdvertisement {
                api_version: Some(api.to_string()),
                kind: Some(kind.to_string()),
                metadata: o.metadata,
                spec: BgpAdvertisementSpec {
                    aggregation_length: s.aggregation_length,
                    aggregation_length_v6: s.aggregation_length_v6,
                    local_pref: s.local_pref,
                    communities: s.communities,
                    ip_address_pools: s.ip_address_pools,
                    ip_address_pool_selectors: s.ip_address_pool_selectors,
                    node_selectors: s.node_selectors,
                    peers: s.peers,
                },
            });
        }),
        // An advertisement of every pool from every node may have no spec at all (MetalLB's
        // docs write it so).
        "L2Advertisement" => decode::<Object<Option<L2Spec>>>(item, &mut unknown).map(|o| {
            let s = o.spec.unwrap_or_default();
            if !s.service_selectors.is_empty() {
                left_out.get_or_insert(
                    "serviceSelectors is not supported: the advertisement would cover every Service of its pools"
                        .into(),
                );
                return;
            }
            if !s.interfaces.is_empty() {
                unsupported.push(format!(
                    "interfaces ({}) is not supported: vipflow answers ARP/ND in the switch of each announcing bridge, on the port a request came in by; the advertisement is used without it",
                    s.interfaces.join(", ")
                ));
            }
            if !s.preferred_node_selectors.is_empty() {
                unsupported.push(
                    "preferredNodeSelectors (in no MetalLB release yet) is not supported: ignored; the owner is chosen among the nodes nodeSelectors admit"
                        .into(),
                );
            }
            for (field, selectors) in [
                ("ipAddressPoolSelectors", &s.ip_address_pool_selectors),
                ("nodeSelectors", &s.node_selectors),
            ] {
                for (i, sel) in selectors.iter().enumerate() {
                    if let Err(e) = selector::check(sel) {
                        invalid.push(format!("{field}[{i}]: {e}; it selects nothing"));
                    }
                }
            }
            out.objects.l2_advertisements.push(L2Advertisement {
                api_version: Some(api.to_string()),
                metadata: o.metadata,
                spec: L2AdvertisementSpec {
                    ip_address_pools: s.ip_address_pools,
                    ip_address_pool_selectors: s.ip_address_pool_selectors,
                    node_selectors: s.node_selectors,
                },
            });
        }),
        "BFDProfile" => decode::<BfdProfile>(item, &mut unknown).map(|mut o| {
            o.api_version = Some(api.to_string());
            out.objects.bgp.bfd_profiles.push(o);
        }),
        "Community" => decode::<Object<CommunitySpec>>(item, &mut unknown).map(|o| {
            let object = subject_of(api, kind, &o.metadata);
            for c in o.spec.communities {
                out.objects.bgp.communities.push(CommunityAlias {
                    name: c.name,
                    value: c.value,
                    object: object.clone(),
                });
            }
        }),
        _ => return,
    };
    let problem = |kind, reason| Problem::new(what.clone(), kind, reason);
    if let Err(e) = decoded {
        out.problems.push(problem(
            ProblemKind::Invalid,
            format!("invalid: {e}; skipped"),
        ));
        return;
    }
    for path in unknown {
        out.problems.push(problem(
            ProblemKind::UnknownField,
            format!("unknown field {path} ignored"),
        ));
    }
    for u in unsupported {
        out.problems.push(problem(ProblemKind::Unsupported, u));
    }
    for i in invalid {
        out.problems.push(problem(ProblemKind::Invalid, i));
    }
    if let Some(why) = left_out {
        out.problems.push(problem(
            ProblemKind::UnsupportedObject,
            format!("{why}; skipped"),
        ));
    }
}

/// A pool entry as MetalLB reads it: a CIDR with host bits set is its network (MetalLB parses
/// it with Go's `net.ParseCIDR`, which keeps the network; its docs write `198.51.100.10/24`),
/// where vipflow's own pools refuse it.
pub fn network_of(entry: &str) -> String {
    match entry.trim().parse::<ipnet::IpNet>() {
        Ok(net) => net.trunc().to_string(),
        Err(_) => entry.to_string(),
    }
}

/// `Some(true)` when Go duration `v` is zero (`0s`, `0`), `Some(false)` when it is another
/// duration, `None` when it is none.
fn go_zero(v: &str) -> Option<bool> {
    let digits: String = v.chars().filter(char::is_ascii_digit).collect();
    if digits.is_empty() {
        return None;
    }
    Some(digits.chars().all(|c| c == '0'))
}

/// Settle a complete snapshot's MetalLB objects among vipflow's: a MetalLB object that a
/// vipflow object of its kind and name shadows (or an earlier MetalLB one) goes, and is said;
/// and community aliases are replaced by their values.
pub fn settle(loaded: &mut Loaded) {
    let problems = &mut loaded.problems;
    let o = &mut loaded.objects;
    shadow(
        &mut o.pools,
        |p| (&p.api_version, &p.metadata),
        "IPAddressPool",
        "VipPool",
        problems,
    );
    shadow(
        &mut o.bgp.peers,
        |p| (&p.api_version, &p.metadata),
        "BGPPeer",
        "BGPPeer",
        problems,
    );
    shadow(
        &mut o.bgp.advertisements,
        |a| (&a.api_version, &a.metadata),
        "BGPAdvertisement",
        "BGPAdvertisement",
        problems,
    );
    shadow(
        &mut o.l2_advertisements,
        |a| (&a.api_version, &a.metadata),
        "L2Advertisement",
        "L2Advertisement",
        problems,
    );
    shadow(
        &mut o.bgp.bfd_profiles,
        |b| (&b.api_version, &b.metadata),
        "BFDProfile",
        "BFDProfile",
        problems,
    );
    // Aliases: the first definition of a name counts.
    let mut aliases: BTreeMap<&str, &CommunityAlias> = BTreeMap::new();
    for c in &o.bgp.communities {
        if let Some(first) = aliases.get(c.name.as_str()) {
            problems.push(Problem::new(
                c.object.clone(),
                ProblemKind::Duplicate,
                format!(
                    "community alias {} is defined in {} already; that one is used",
                    c.name, first.object
                ),
            ));
            continue;
        }
        aliases.insert(&c.name, c);
    }
    for a in &mut o.bgp.advertisements {
        let what = match a.api_version.as_deref() {
            Some(api) if is_metallb(api) => subject_of(api, "BGPAdvertisement", &a.metadata),
            _ => Subject::FileItem(format!("BGPAdvertisement {}", described(&a.metadata))),
        };
        let mut resolved = Vec::with_capacity(a.spec.communities.len());
        for c in &a.spec.communities {
            if c.contains(':') {
                resolved.push(c.clone());
            } else if let Some(alias) = aliases.get(c.as_str()) {
                resolved.push(alias.value.clone());
            } else {
                problems.push(Problem::new(
                    what.clone(),
                    ProblemKind::Invalid,
                    format!("community {c:?} is neither a value (A:B, large:A:B:C) nor an alias a Community defines; left out"),
                ));
            }
        }
        a.spec.communities = resolved;
    }
}

fn described(m: &ObjectMeta) -> String {
    match m.namespace.as_deref() {
        Some(ns) => format!("{ns}/{}", m.name.as_deref().unwrap_or_default()),
        None => m.name.as_deref().unwrap_or_default().to_string(),
    }
}

/// Keep one object per name in `list`: vipflow's over MetalLB's, the first MetalLB one over
/// later ones; each MetalLB object that goes is a problem.
fn shadow<T>(
    list: &mut Vec<T>,
    of: impl Fn(&T) -> (&Option<String>, &ObjectMeta),
    metallb_kind: &str,
    our_kind: &str,
    problems: &mut Vec<Problem>,
) {
    let from_metallb = |t: &T| of(t).0.as_deref().is_some_and(is_metallb);
    if !list.iter().any(from_metallb) {
        return;
    }
    let name = |t: &T| of(t).1.name.clone().unwrap_or_default();
    let ours: BTreeSet<String> = list.iter().filter(|t| !from_metallb(t)).map(name).collect();
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    list.retain(|t| {
        if !from_metallb(t) {
            return true;
        }
        let n = name(t);
        let (api, meta) = of(t);
        let what = subject_of(api.as_deref().unwrap_or_default(), metallb_kind, meta);
        if ours.contains(&n) {
            problems.push(Problem::new(
                what,
                ProblemKind::Duplicate,
                format!("vipflow's {our_kind} {n} is used instead; skipped"),
            ));
            return false;
        }
        if let Some(first) = seen.get(&n) {
            problems.push(Problem::new(
                what,
                ProblemKind::Duplicate,
                format!("{metallb_kind} {first} has the same name and is used; skipped"),
            ));
            return false;
        }
        seen.insert(n, described(of(t).1));
        true
    });
}

/// What each MetalLB object of a settled snapshot became, one line each (`vipflow plan`):
/// `IPAddressPool metallb-system/first-pool -> VipPool first-pool`. Objects left out are
/// among the snapshot's problems instead.
pub fn became(objects: &crate::model::Objects) -> Vec<String> {
    let mut out = Vec::new();
    let mut line = |api: &Option<String>, m: &ObjectMeta, from: &str, to: &str| {
        if api.as_deref().is_some_and(is_metallb) {
            out.push(format!(
                "{from} {} -> {to} {}",
                described(m),
                m.name.as_deref().unwrap_or_default()
            ));
        }
    };
    for p in &objects.pools {
        line(&p.api_version, &p.metadata, "IPAddressPool", "VipPool");
    }
    for p in &objects.bgp.peers {
        line(&p.api_version, &p.metadata, "BGPPeer", "BGPPeer");
    }
    for a in &objects.bgp.advertisements {
        line(
            &a.api_version,
            &a.metadata,
            "BGPAdvertisement",
            "BGPAdvertisement",
        );
    }
    for b in &objects.bgp.bfd_profiles {
        line(&b.api_version, &b.metadata, "BFDProfile", "BFDProfile");
    }
    for c in &objects.bgp.communities {
        out.push(format!(
            "{} -> community alias {} = {}",
            c.object, c.name, c.value
        ));
    }
    for a in &objects.l2_advertisements {
        out.push(format!(
            "L2Advertisement {} -> L2 announcement of {} from {}",
            described(&a.metadata),
            l2_pools_said(&a.spec),
            match a.spec.node_selectors.len() {
                0 => "every node".to_string(),
                1 => "the nodes its nodeSelector matches".to_string(),
                n => format!("the nodes one of its {n} nodeSelectors matches"),
            }
        ));
    }
    out
}

/// The pools an L2Advertisement selects, in words.
fn l2_pools_said(s: &L2AdvertisementSpec) -> String {
    let mut parts = Vec::new();
    if !s.ip_address_pools.is_empty() {
        let plural = if s.ip_address_pools.len() == 1 {
            ""
        } else {
            "s"
        };
        parts.push(format!("pool{plural} {}", s.ip_address_pools.join(", ")));
    }
    match s.ip_address_pool_selectors.len() {
        0 => {}
        1 => parts.push("the pools its ipAddressPoolSelector matches".into()),
        n => parts.push(format!(
            "the pools one of its {n} ipAddressPoolSelectors matches"
        )),
    }
    if parts.is_empty() {
        "every pool".into()
    } else {
        parts.join(" and ")
    }
}

pub mod events;

#[cfg(test)]
#[path = "metallb_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "metallb_l2_tests.rs"]
mod l2_tests;
