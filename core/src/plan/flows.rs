//! The desired flows of one bridge: a pure function of the model and the bridge's config.
//!
//! Flows name their ports symbolically ([`PortRef`]): the plan never depends on live port
//! numbers, so `vipflow plan` prints it offline (with port names, as ovs-ofctl accepts them),
//! and the reconciler resolves numbers from PORT_DESC just before writing. The return path's
//! `dl_src` is the bridge MAC, also resolved late unless configured.
//!
//! Cookie = the 16-bit prefix above a 48-bit FNV-1a hash of the flow's key (kind, protocol,
//! VIP, port): stable across restarts and port renumbering, distinct for the same port on TCP
//! and UDP.

use crate::announce::Announcing;
use crate::announce::l2::{MARK, MARK_REG, NEIGHBOR_ADVERT, NEIGHBOR_SOLICIT};
use crate::config::{BridgeConfig, GatewayMode, Profile};
use crate::model::{Model, Protocol};
use openflow::action::port as ofport;
use openflow::oxm::{MacAddr, eth_type, frag, ip_proto};
use openflow::{Action, FlowMod, Instruction, Match, OxmField};
use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

pub use super::flow_key::{FlowKey, PlannedAction, PortRef};

/// One desired flow, before port numbers are known.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PlannedFlow {
    /// What it is for.
    pub key: FlowKey,
    pub cookie: u64,
    pub table: u8,
    pub priority: u16,
    pub in_port: PortRef,
    /// Match `dl_src` = the bridge's own MAC (return path).
    pub dl_src_bridge: bool,
    /// Every other match field, prerequisites first.
    pub match_: Match,
    pub actions: Vec<PlannedAction>,
}

/// Port numbers and the bridge MAC, as learned from the switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub uplink: u32,
    pub patch: u32,
    pub bridge_mac: MacAddr,
    /// The destination MAC of traffic sent into OVN through the patch port, when it must be
    /// rewritten ([`steer_rewrite`]); `None` leaves frames as they came.
    pub steer_dst: Option<MacAddr>,
}

/// The MAC that traffic steered into OVN must be rewritten to on a gateway bridge: the OVN
/// gateway router's (from the Node annotation), when it is known and differs from the bridge's
/// own. Frames from the wire are addressed to the bridge's MAC, and the gateway router only
/// takes frames for its own, which OVN-Kubernetes normally makes equal. `None`: flows stay as
/// they are (equal, either MAC unknown, or not a steering gateway bridge; the underlay
/// profile rewrites to its configured router MAC in the plan itself).
pub fn steer_rewrite(
    b: &BridgeConfig,
    router_mac: Option<MacAddr>,
    bridge_mac: Option<MacAddr>,
) -> Option<MacAddr> {
    match (router_mac, bridge_mac) {
        (Some(r), Some(m)) if steers_to_router(b) && r != m => Some(r),
        _ => None,
    }
}

/// Whether `b` steers VIP traffic into OVN's gateway router (a shared gateway bridge), so
/// that the router's MAC may have to be written into the frames ([`steer_rewrite`]).
pub fn steers_to_router(b: &BridgeConfig) -> bool {
    b.profile == Profile::Gateway && b.gateway_mode == GatewayMode::Shared
}

impl PortRef {
    fn number(self, r: &Resolved) -> u32 {
        match self {
            PortRef::Uplink => r.uplink,
            PortRef::Patch => r.patch,
            PortRef::Local => ofport::LOCAL,
        }
    }
}

impl PlannedFlow {
    /// The flow mod (an ADD) with real port numbers.
    pub fn resolve(&self, r: &Resolved) -> FlowMod {
        let mut m = Match::new().with(OxmField::in_port(self.in_port.number(r)));
        if self.dl_src_bridge {
            m.push(OxmField::eth_src(r.bridge_mac));
        }
        m.fields.extend(self.match_.fields.iter().cloned());
        let mut actions = Vec::with_capacity(self.actions.len() + 1);
        for a in &self.actions {
            match a {
                PlannedAction::Output(p) => {
                    if let (PortRef::Patch, Some(mac)) = (p, r.steer_dst) {
                        actions.push(Action::SetField(OxmField::eth_dst(mac)));
                    }
                    actions.push(Action::output(p.number(r)));
                }
                PlannedAction::PopVlan => actions.push(Action::PopVlan),
                PlannedAction::SetEthDst(mac) => {
                    actions.push(Action::SetField(OxmField::eth_dst(*mac)))
                }
                PlannedAction::AnswerArp(vip) => {
                    actions.extend(crate::announce::l2::arp_answer_actions(*vip, r.bridge_mac))
                }
                PlannedAction::AnswerNd(vip) => actions.extend(
                    crate::announce::l2::nd_answer_actions(*vip, r.bridge_mac, self.table),
                ),
                PlannedAction::AdvertNd => {
                    actions.extend(crate::announce::l2::nd_advert_actions(r.bridge_mac))
                }
            }
        }
        // In the form the switch reports back (no instruction for `drop`, reg moves by NXM
        // header), so that what is read back compares equal to what was planned.
        FlowMod::add(
            self.table,
            self.priority,
            self.cookie,
            m.normalized(),
            openflow::instruction::canonical(vec![Instruction::ApplyActions(actions)]),
        )
    }
}

/// 64-bit FNV-1a: tiny, stable across versions and platforms (unlike std's hasher).
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The cookie for a flow key under a 16-bit prefix.
pub fn cookie(prefix: u16, key: &str) -> u64 {
    (u64::from(prefix) << 48) | (fnv1a(key) & 0x0000_ffff_ffff_ffff)
}

/// Everything about the bridge the plan needs besides the model.
#[derive(Debug, Clone)]
pub struct PlanInput<'a> {
    pub bridge: &'a BridgeConfig,
    pub cookie_prefix: u16,
}

/// The desired flows for one bridge, sorted by key: the flows of every VIP and of every
/// VIP:port/protocol of the model.
pub fn plan(model: &Model, input: &PlanInput<'_>) -> Vec<PlannedFlow> {
    let mut flows = Vec::new();
    for vip in model.vips().into_keys() {
        flows.extend(vip_flows(vip, input));
    }
    let claims: BTreeSet<(IpAddr, u16, Protocol)> = model
        .vip_ports()
        .map(|(_, vp)| (vp.vip, vp.port, vp.protocol))
        .collect();
    for (vip, port, protocol) in claims {
        flows.extend(claim_flows(vip, port, protocol, input));
    }
    // In the order of their text, as `vipflow plan` lists them.
    flows.sort_by_cached_key(|f| f.key.to_string());
    flows
}

/// The keys of the flows a VIP needs once any Service serves it: the ARP or ND bypass, and
/// (when traffic is steered) the path-MTU ICMP and the fragments.
pub fn vip_keys(vip: IpAddr, input: &PlanInput<'_>) -> Vec<FlowKey> {
    let c = Ctx(input);
    let mut keys = vec![match vip {
        IpAddr::V4(ip) => FlowKey::Arp(ip),
        IpAddr::V6(ip) => FlowKey::Nd(ip),
    }];
    if c.steering() {
        keys.extend([FlowKey::Pmtu(vip), FlowKey::Frag(vip)]);
        if input.bridge.profile == Profile::Gateway {
            keys.push(FlowKey::FragReturn(vip));
        }
    }
    keys
}

/// The keys of the flows with which the owner of `vip` answers for it on a bridge that
/// announces: the ARP answer, or the two steps of the ND answer.
pub fn answer_keys(vip: IpAddr) -> Vec<FlowKey> {
    match vip {
        IpAddr::V4(ip) => vec![FlowKey::ArpAnswer(ip)],
        IpAddr::V6(ip) => vec![FlowKey::NdAnswer(ip), FlowKey::NdAdvert(ip)],
    }
}

/// The keys of the flows of one VIP:port/protocol, whichever Service owns it: steering into
/// OVN and (on a gateway bridge) the return path. None in local gateway mode.
pub fn claim_keys(
    vip: IpAddr,
    port: u16,
    protocol: Protocol,
    input: &PlanInput<'_>,
) -> Vec<FlowKey> {
    let c = Ctx(input);
    if !c.steering() {
        return Vec::new();
    }
    let mut keys = vec![FlowKey::Steer(vip, port, protocol)];
    if input.bridge.profile == Profile::Gateway {
        keys.push(FlowKey::Return(vip, port, protocol));
    }
    keys
}

/// The flows of [`vip_keys`].
pub fn vip_flows(vip: IpAddr, input: &PlanInput<'_>) -> Vec<PlannedFlow> {
    vip_keys(vip, input)
        .into_iter()
        .map(|k| flow_of(k, input))
        .collect()
}

/// The flows of [`claim_keys`].
pub fn claim_flows(
    vip: IpAddr,
    port: u16,
    protocol: Protocol,
    input: &PlanInput<'_>,
) -> Vec<PlannedFlow> {
    claim_keys(vip, port, protocol, input)
        .into_iter()
        .map(|k| flow_of(k, input))
        .collect()
}

/// The flow a key names on this bridge: a pure function of the two, so a plan keeps keys
/// only and makes a flow again whenever it is written or compared.
pub fn flow_of(key: FlowKey, input: &PlanInput<'_>) -> PlannedFlow {
    let c = Ctx(input);
    let arp_request = |ip| {
        c.with_vlan(
            Match::new()
                .with(OxmField::eth_type(eth_type::ARP))
                .with(OxmField::arp_op(1))
                .with(OxmField::arp_tpa(ip)),
        )
    };
    let nd = |ip, icmp_type| {
        c.with_vlan(
            Match::new()
                .with(OxmField::eth_type(eth_type::IPV6))
                .with(OxmField::ip_proto(ip_proto::ICMPV6))
                .with(OxmField::icmpv6_type(icmp_type))
                .with(OxmField::icmpv6_code(0))
                .with(OxmField::ipv6_nd_target(ip)),
        )
    };
    match key {
        // ARP / ND requests for the VIP go to the host, never into OVN. A bridge that
        // announces drops them: only the owner answers, with the flow below, one priority up.
        FlowKey::Arp(ip) => {
            let actions = if Announcing::l2_on(input.bridge) {
                Vec::new()
            } else {
                c.to_host()
            };
            c.mk(key, PortRef::Uplink, false, arp_request(ip), actions)
        }
        FlowKey::ArpAnswer(ip) => {
            let mut f = c.mk(
                key,
                PortRef::Uplink,
                false,
                arp_request(ip),
                vec![PlannedAction::AnswerArp(ip)],
            );
            f.priority = f.priority.saturating_add(1);
            f
        }
        FlowKey::Nd(ip) => {
            let actions = if Announcing::l2_on(input.bridge) {
                Vec::new()
            } else {
                c.to_host()
            };
            c.mk(
                key,
                PortRef::Uplink,
                false,
                nd(ip, NEIGHBOR_SOLICIT),
                actions,
            )
        }
        FlowKey::NdAnswer(ip) => {
            let actions = vec![PlannedAction::AnswerNd(ip)];
            let mut f = c.mk(
                key,
                PortRef::Uplink,
                false,
                nd(ip, NEIGHBOR_SOLICIT),
                actions,
            );
            f.priority = f.priority.saturating_add(1);
            f
        }
        // Only the advertisement the answer flow marked: one from the wire has no mark.
        FlowKey::NdAdvert(ip) => {
            let mut m = nd(ip, NEIGHBOR_ADVERT);
            m.fields.insert(0, OxmField::reg(MARK_REG, MARK));
            let mut f = c.mk(
                key,
                PortRef::Uplink,
                false,
                m,
                vec![PlannedAction::AdvertNd],
            );
            f.priority = f.priority.saturating_add(1);
            f
        }
        // ICMP "fragmentation needed" / "packet too big" for the VIP must reach OVN too, or
        // path MTU discovery breaks for its connections.
        FlowKey::Pmtu(vip) => {
            let m = match vip {
                IpAddr::V4(ip) => Match::new()
                    .with(OxmField::eth_type(eth_type::IPV4))
                    .with(OxmField::ip_proto(ip_proto::ICMP))
                    .with(OxmField::ipv4_dst(ip))
                    .with(OxmField::icmpv4_type(3))
                    .with(OxmField::icmpv4_code(4)),
                IpAddr::V6(ip) => Match::new()
                    .with(OxmField::eth_type(eth_type::IPV6))
                    .with(OxmField::ip_proto(ip_proto::ICMPV6))
                    .with(OxmField::ipv6_dst(ip))
                    .with(OxmField::icmpv6_type(2))
                    .with(OxmField::icmpv6_code(0)),
            };
            c.mk(key, PortRef::Uplink, false, c.with_vlan(m), c.to_ovn())
        }
        // Fragments carry no L4 ports as OpenFlow sees them (OVS zeroes the ports of every
        // fragment, the first included), so no steer flow matches them: every fragment for
        // the VIP goes into OVN, whose gateway router reassembles before balancing. Large
        // replies come back fragmented the same way.
        FlowKey::Frag(vip) => {
            let (l3, dst, _) = ip_fields(vip);
            c.mk(
                key,
                PortRef::Uplink,
                false,
                c.with_vlan(fragment(l3, dst)),
                c.to_ovn(),
            )
        }
        FlowKey::FragReturn(vip) => {
            let (l3, _, src) = ip_fields(vip);
            c.mk(
                key,
                PortRef::Patch,
                true,
                c.with_vlan(fragment(l3, src)),
                vec![PlannedAction::Output(PortRef::Uplink)],
            )
        }
        FlowKey::Steer(vip, port, protocol) => {
            let (l3, dst, _) = ip_fields(vip);
            let tp_dst = match protocol {
                Protocol::Tcp => OxmField::tcp_dst(port),
                Protocol::Udp => OxmField::udp_dst(port),
                Protocol::Sctp => OxmField::sctp_dst(port),
            };
            c.mk(
                key,
                PortRef::Uplink,
                false,
                c.with_vlan(l4(l3, protocol).with(dst).with(tp_dst)),
                c.to_ovn(),
            )
        }
        FlowKey::Return(vip, port, protocol) => {
            let (l3, _, src) = ip_fields(vip);
            let tp_src = match protocol {
                Protocol::Tcp => OxmField::tcp_src(port),
                Protocol::Udp => OxmField::udp_src(port),
                Protocol::Sctp => OxmField::sctp_src(port),
            };
            c.mk(
                key,
                PortRef::Patch,
                true,
                c.with_vlan(l4(l3, protocol).with(src).with(tp_src)),
                vec![PlannedAction::Output(PortRef::Uplink)],
            )
        }
    }
}

/// Every fragment to or from an address.
fn fragment(l3: u16, addr: OxmField) -> Match {
    Match::new()
        .with(OxmField::eth_type(l3))
        .with(addr)
        .with(OxmField::ip_frag(frag::ANY, frag::ANY))
}

/// The prerequisites of an L4 match.
fn l4(l3: u16, protocol: Protocol) -> Match {
    Match::new()
        .with(OxmField::eth_type(l3))
        .with(OxmField::ip_proto(protocol.ip_proto()))
}

/// Makes a bridge's planned flows from their keys ([`flow_of`]): the plan hands on keys and
/// this, and the reconciler makes each flow when it writes or compares it.
#[derive(Clone)]
pub struct FlowMaker(std::sync::Arc<dyn Fn(&FlowKey) -> PlannedFlow + Send + Sync>);

impl FlowMaker {
    /// The flows of `bridge` under `cookie_prefix`, as the planner plans them.
    pub fn for_bridge(bridge: BridgeConfig, cookie_prefix: u16) -> FlowMaker {
        FlowMaker::from_fn(move |k| {
            flow_of(
                *k,
                &PlanInput {
                    bridge: &bridge,
                    cookie_prefix,
                },
            )
        })
    }

    /// Any function of the key (tests give flows shapes the planner never makes).
    pub fn from_fn(f: impl Fn(&FlowKey) -> PlannedFlow + Send + Sync + 'static) -> FlowMaker {
        FlowMaker(std::sync::Arc::new(f))
    }

    pub fn flow(&self, key: &FlowKey) -> PlannedFlow {
        (self.0)(key)
    }

    /// Whether two makers are the same one (a clone): then a key makes the same flow in both.
    pub fn same(&self, other: &FlowMaker) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Default for FlowMaker {
    fn default() -> Self {
        FlowMaker::for_bridge(BridgeConfig::default(), 0)
    }
}

impl fmt::Debug for FlowMaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FlowMaker")
    }
}

/// A VIP's eth_type and its match fields as destination and as source.
fn ip_fields(vip: IpAddr) -> (u16, OxmField, OxmField) {
    match vip {
        IpAddr::V4(ip) => (
            eth_type::IPV4,
            OxmField::ipv4_dst(ip),
            OxmField::ipv4_src(ip),
        ),
        IpAddr::V6(ip) => (
            eth_type::IPV6,
            OxmField::ipv6_dst(ip),
            OxmField::ipv6_src(ip),
        ),
    }
}

/// The bridge settings the flow builders share.
struct Ctx<'a, 'b>(&'a PlanInput<'b>);

impl Ctx<'_, '_> {
    fn mk(
        &self,
        key: FlowKey,
        in_port: PortRef,
        dl_src_bridge: bool,
        match_: Match,
        actions: Vec<PlannedAction>,
    ) -> PlannedFlow {
        let b = self.0.bridge;
        PlannedFlow {
            cookie: cookie(self.0.cookie_prefix, &key.to_string()),
            key,
            table: b.table,
            priority: b.priority,
            in_port,
            dl_src_bridge,
            match_,
            actions,
        }
    }

    /// A VLAN-tagged uplink: everything from or to the wire carries the tag.
    fn with_vlan(&self, m: Match) -> Match {
        match self.0.bridge.vlan {
            Some(v) => Match::new().with(OxmField::vlan_vid(v)).with_all(m),
            None => m,
        }
    }

    fn to_host(&self) -> Vec<PlannedAction> {
        let mut a = Vec::new();
        if self.0.bridge.vlan.is_some() {
            a.push(PlannedAction::PopVlan);
        }
        a.push(PlannedAction::Output(PortRef::Local));
        a
    }

    fn to_ovn(&self) -> Vec<PlannedAction> {
        let b = self.0.bridge;
        match (b.profile, b.router_mac) {
            (Profile::Underlay, Some(mac)) => {
                vec![
                    PlannedAction::SetEthDst(mac),
                    PlannedAction::Output(PortRef::Patch),
                ]
            }
            _ => vec![PlannedAction::Output(PortRef::Patch)],
        }
    }

    fn steering(&self) -> bool {
        let b = self.0.bridge;
        b.profile == Profile::Underlay || b.gateway_mode == GatewayMode::Shared
    }
}

/// Small builder helper used above.
trait MatchExt {
    fn with_all(self, other: Match) -> Match;
}

impl MatchExt for Match {
    fn with_all(mut self, other: Match) -> Match {
        self.fields.extend(other.fields);
        self
    }
}

#[cfg(test)]
#[path = "flows_tests/mod.rs"]
mod tests;
