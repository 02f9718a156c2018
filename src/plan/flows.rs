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

use crate::config::{BridgeConfig, GatewayMode, Profile, format_mac};
use crate::model::{Model, Protocol};
use openflow::action::port as ofport;
use openflow::oxm::{MacAddr, eth_type, ip_proto};
use openflow::{Action, FlowMod, Instruction, Match, OxmField};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

/// A port named by its role on the bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PortRef {
    Uplink,
    Patch,
    Local,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PlannedAction {
    Output(PortRef),
    PopVlan,
    SetEthDst(MacAddr),
}

/// One desired flow, before port numbers are known.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PlannedFlow {
    /// Human-readable identity, e.g. `arp 10.0.0.5` or `steer tcp 10.0.0.5:80`.
    pub key: String,
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
        let actions = self
            .actions
            .iter()
            .map(|a| match a {
                PlannedAction::Output(p) => Action::output(p.number(r)),
                PlannedAction::PopVlan => Action::PopVlan,
                PlannedAction::SetEthDst(mac) => Action::SetField(OxmField::eth_dst(*mac)),
            })
            .collect();
        FlowMod::add(
            self.table,
            self.priority,
            self.cookie,
            m.normalized(),
            vec![Instruction::ApplyActions(actions)],
        )
    }

    /// Text in `ovs-ofctl add-flow` syntax with port names, for `vipflow plan`.
    pub fn display<'a>(&'a self, bridge: &'a BridgeConfig) -> PlannedFlowText<'a> {
        PlannedFlowText { flow: self, bridge }
    }
}

pub struct PlannedFlowText<'a> {
    flow: &'a PlannedFlow,
    bridge: &'a BridgeConfig,
}

impl fmt::Display for PlannedFlowText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (fl, b) = (self.flow, self.bridge);
        let name = |p: PortRef| match p {
            PortRef::Uplink => b.uplink.clone(),
            PortRef::Patch => b.patch.clone(),
            PortRef::Local => "LOCAL".into(),
        };
        write!(
            f,
            "cookie={:#x},table={},priority={},in_port={}",
            fl.cookie,
            fl.table,
            fl.priority,
            name(fl.in_port)
        )?;
        if fl.dl_src_bridge {
            match &b.bridge_mac {
                Some(m) => write!(f, ",dl_src={}", format_mac(m))?,
                None => write!(f, ",dl_src=<{} mac>", b.name)?,
            }
        }
        let rest = fl.match_.to_string();
        if !rest.is_empty() {
            write!(f, ",{rest}")?;
        }
        let acts: Vec<String> = fl
            .actions
            .iter()
            .map(|a| match a {
                PlannedAction::Output(PortRef::Local) => "LOCAL".to_string(),
                PlannedAction::Output(p) => format!("output:{}", name(*p)),
                PlannedAction::PopVlan => "pop_vlan".into(),
                PlannedAction::SetEthDst(m) => format!("mod_dl_dst:{}", format_mac(m)),
            })
            .collect();
        write!(f, " actions={}", acts.join(","))
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

/// The desired flows for one bridge, sorted by key.
pub fn plan(model: &Model, input: &PlanInput<'_>) -> Vec<PlannedFlow> {
    let b = input.bridge;
    let mut flows = Vec::new();
    let mk = |key: String,
              in_port: PortRef,
              dl_src_bridge: bool,
              match_: Match,
              actions: Vec<PlannedAction>| {
        PlannedFlow {
            cookie: cookie(input.cookie_prefix, &key),
            key,
            table: b.table,
            priority: b.priority,
            in_port,
            dl_src_bridge,
            match_,
            actions,
        }
    };
    // A VLAN-tagged uplink: everything from or to the wire carries the tag.
    let with_vlan = |m: Match| match b.vlan {
        Some(v) => Match::new().with(OxmField::vlan_vid(v)).with_all(m),
        None => m,
    };
    let to_host = || {
        let mut a = Vec::new();
        if b.vlan.is_some() {
            a.push(PlannedAction::PopVlan);
        }
        a.push(PlannedAction::Output(PortRef::Local));
        a
    };
    let into_ovn = || match (b.profile, b.router_mac) {
        (Profile::Underlay, Some(mac)) => {
            vec![
                PlannedAction::SetEthDst(mac),
                PlannedAction::Output(PortRef::Patch),
            ]
        }
        _ => vec![PlannedAction::Output(PortRef::Patch)],
    };
    let steering = b.profile == Profile::Underlay || b.gateway_mode == GatewayMode::Shared;

    let vips: BTreeSet<IpAddr> = model.vips().into_keys().collect();
    for vip in &vips {
        // ARP / ND requests for the VIP go to the host, never into OVN.
        match vip {
            IpAddr::V4(ip) => flows.push(mk(
                format!("arp {ip}"),
                PortRef::Uplink,
                false,
                with_vlan(
                    Match::new()
                        .with(OxmField::eth_type(eth_type::ARP))
                        .with(OxmField::arp_op(1))
                        .with(OxmField::arp_tpa(*ip)),
                ),
                to_host(),
            )),
            IpAddr::V6(ip) => flows.push(mk(
                format!("nd {ip}"),
                PortRef::Uplink,
                false,
                with_vlan(
                    Match::new()
                        .with(OxmField::eth_type(eth_type::IPV6))
                        .with(OxmField::ip_proto(ip_proto::ICMPV6))
                        .with(OxmField::icmpv6_type(135))
                        .with(OxmField::icmpv6_code(0))
                        .with(OxmField::ipv6_nd_target(*ip)),
                ),
                to_host(),
            )),
        }
        if steering {
            // ICMP "fragmentation needed" / "packet too big" for the VIP must reach OVN too,
            // or path MTU discovery breaks for its connections.
            let m = match vip {
                IpAddr::V4(ip) => Match::new()
                    .with(OxmField::eth_type(eth_type::IPV4))
                    .with(OxmField::ip_proto(ip_proto::ICMP))
                    .with(OxmField::ipv4_dst(*ip))
                    .with(OxmField::icmpv4_type(3))
                    .with(OxmField::icmpv4_code(4)),
                IpAddr::V6(ip) => Match::new()
                    .with(OxmField::eth_type(eth_type::IPV6))
                    .with(OxmField::ip_proto(ip_proto::ICMPV6))
                    .with(OxmField::ipv6_dst(*ip))
                    .with(OxmField::icmpv6_type(2))
                    .with(OxmField::icmpv6_code(0)),
            };
            flows.push(mk(
                format!("pmtu {vip}"),
                PortRef::Uplink,
                false,
                with_vlan(m),
                into_ovn(),
            ));
        }
    }

    if steering {
        // One steering (and return) flow per VIP:port/protocol, whichever Service owns it.
        let mut seen: BTreeMap<(IpAddr, u16, Protocol), ()> = BTreeMap::new();
        for (_, vp) in model.vip_ports() {
            if seen.insert((vp.vip, vp.port, vp.protocol), ()).is_some() {
                continue;
            }
            let (l3, dst, src) = match vp.vip {
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
            };
            let (tp_dst, tp_src) = match vp.protocol {
                Protocol::Tcp => (OxmField::tcp_dst(vp.port), OxmField::tcp_src(vp.port)),
                Protocol::Udp => (OxmField::udp_dst(vp.port), OxmField::udp_src(vp.port)),
                Protocol::Sctp => (OxmField::sctp_dst(vp.port), OxmField::sctp_src(vp.port)),
            };
            let base = || {
                Match::new()
                    .with(OxmField::eth_type(l3))
                    .with(OxmField::ip_proto(vp.protocol.ip_proto()))
            };
            let sock = crate::model::SocketLike(vp);
            flows.push(mk(
                format!("steer {sock}"),
                PortRef::Uplink,
                false,
                with_vlan(base().with(dst).with(tp_dst)),
                into_ovn(),
            ));
            if b.profile == Profile::Gateway {
                flows.push(mk(
                    format!("return {sock}"),
                    PortRef::Patch,
                    true,
                    with_vlan(base().with(src).with(tp_src)),
                    vec![PlannedAction::Output(PortRef::Uplink)],
                ));
            }
        }
    }
    flows.sort_by(|a, b| a.key.cmp(&b.key));
    flows
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
#[path = "flows_tests.rs"]
mod tests;
