//! What a planned flow is for ([`FlowKey`]), the port roles it names ([`PortRef`]) and its
//! actions before port numbers are known ([`PlannedAction`]).

use crate::model::Protocol;
use openflow::oxm::MacAddr;
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
    /// Turn the ARP request for this VIP into the reply from the bridge's MAC, back out of
    /// the input port ([`crate::announce::l2::arp_answer_actions`]).
    AnswerArp(std::net::Ipv4Addr),
    /// Turn the neighbor solicitation for this VIP into the advertisement, marked and looked
    /// up again in the flow's table ([`crate::announce::l2::nd_answer_actions`]).
    AnswerNd(std::net::Ipv6Addr),
    /// Finish a marked advertisement with the bridge's MAC and send it back out of the input
    /// port ([`crate::announce::l2::nd_advert_actions`]).
    AdvertNd,
}

/// What a planned flow is for. Its text (`arp 192.0.2.10`, `steer 192.0.2.10:80/TCP`,
/// `return [2001:db8::1]:53/UDP`) names it in logs and in `vipflow plan`, and is what its
/// cookie hashes, so the cookies of the text keys of earlier versions stay as they were.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FlowKey {
    /// ARP requests for an IPv4 VIP to the host (dropped when the bridge announces).
    Arp(std::net::Ipv4Addr),
    /// This node answers ARP for an IPv4 VIP it owns (the bridge announces).
    ArpAnswer(std::net::Ipv4Addr),
    /// Neighbor solicitations for an IPv6 VIP to the host (dropped when the bridge announces).
    Nd(std::net::Ipv6Addr),
    /// This node answers neighbor solicitations for an IPv6 VIP it owns: the solicitation made
    /// into the advertisement ([`crate::announce::l2::nd_answer_actions`], step 1).
    NdAnswer(std::net::Ipv6Addr),
    /// The advertisement [`FlowKey::NdAnswer`] made, finished and sent back (step 2).
    NdAdvert(std::net::Ipv6Addr),
    /// ICMP "fragmentation needed" / "packet too big" for the VIP into OVN.
    Pmtu(IpAddr),
    /// Fragments for the VIP into OVN.
    Frag(IpAddr),
    /// Fragments from the VIP back out of the uplink.
    FragReturn(IpAddr),
    /// A VIP:port/protocol steered into OVN.
    Steer(IpAddr, u16, Protocol),
    /// Replies from a VIP:port/protocol back out of the uplink.
    Return(IpAddr, u16, Protocol),
}

impl fmt::Display for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sock = |f: &mut fmt::Formatter<'_>, ip: &IpAddr, port: &u16, p: &Protocol| match ip {
            IpAddr::V4(ip) => write!(f, "{ip}:{port}/{p}"),
            IpAddr::V6(ip) => write!(f, "[{ip}]:{port}/{p}"),
        };
        match self {
            FlowKey::Arp(ip) => write!(f, "arp {ip}"),
            FlowKey::ArpAnswer(ip) => write!(f, "arp answer {ip}"),
            FlowKey::Nd(ip) => write!(f, "nd {ip}"),
            FlowKey::NdAnswer(ip) => write!(f, "nd answer {ip}"),
            FlowKey::NdAdvert(ip) => write!(f, "nd advert {ip}"),
            FlowKey::Pmtu(ip) => write!(f, "pmtu {ip}"),
            FlowKey::Frag(ip) => write!(f, "frag {ip}"),
            FlowKey::FragReturn(ip) => write!(f, "frag return {ip}"),
            FlowKey::Steer(ip, port, p) => {
                f.write_str("steer ")?;
                sock(f, ip, port, p)
            }
            FlowKey::Return(ip, port, p) => {
                f.write_str("return ")?;
                sock(f, ip, port, p)
            }
        }
    }
}

impl FlowKey {
    /// Whether this is one of the flows with which a VIP's owner answers ARP or ND for it
    /// ([`super::flows::answer_keys`]): the flows that depend on who owns the VIP.
    pub fn is_answer(&self) -> bool {
        matches!(
            self,
            FlowKey::ArpAnswer(_) | FlowKey::NdAnswer(_) | FlowKey::NdAdvert(_)
        )
    }

    /// The keys whose flow could have match `m`: read off the address and port it matches
    /// (at most three). Which of them, if any, made it is for the caller to check by making
    /// each one again; this only narrows the search, so a reconciler can find the key of a
    /// flow it reads from the switch without keeping an index from every flow back to its key.
    pub fn candidates(m: &openflow::Match) -> Vec<FlowKey> {
        use openflow::oxm::field;
        use std::net::{Ipv4Addr, Ipv6Addr};
        let value = |f: u8| {
            m.basic(f)
                .filter(|x| x.mask.is_none())
                .map(|x| &x.value[..])
        };
        let v4 = |f: u8| {
            let b: [u8; 4] = value(f)?.try_into().ok()?;
            Some(IpAddr::V4(Ipv4Addr::from(b)))
        };
        let v6 = |f: u8| {
            let b: [u8; 16] = value(f)?.try_into().ok()?;
            Some(IpAddr::V6(Ipv6Addr::from(b)))
        };
        let port = |f: u8| {
            let b: [u8; 2] = value(f)?.try_into().ok()?;
            Some(u16::from_be_bytes(b))
        };
        let l4 = |tcp: u8, udp: u8, sctp: u8| {
            [
                (tcp, Protocol::Tcp),
                (udp, Protocol::Udp),
                (sctp, Protocol::Sctp),
            ]
            .into_iter()
            .find_map(|(f, p)| Some((port(f)?, p)))
        };
        if let Some(IpAddr::V4(ip)) = v4(field::ARP_TPA) {
            return vec![FlowKey::Arp(ip), FlowKey::ArpAnswer(ip)];
        }
        if let Some(IpAddr::V6(ip)) = v6(field::IPV6_ND_TARGET) {
            return vec![
                FlowKey::Nd(ip),
                FlowKey::NdAnswer(ip),
                FlowKey::NdAdvert(ip),
            ];
        }
        if let Some(vip) = v4(field::IPV4_DST).or_else(|| v6(field::IPV6_DST)) {
            return match l4(field::TCP_DST, field::UDP_DST, field::SCTP_DST) {
                Some((port, p)) => vec![FlowKey::Steer(vip, port, p)],
                None => vec![FlowKey::Pmtu(vip), FlowKey::Frag(vip)],
            };
        }
        if let Some(vip) = v4(field::IPV4_SRC).or_else(|| v6(field::IPV6_SRC)) {
            return match l4(field::TCP_SRC, field::UDP_SRC, field::SCTP_SRC) {
                Some((port, p)) => vec![FlowKey::Return(vip, port, p)],
                None => vec![FlowKey::FragReturn(vip)],
            };
        }
        Vec::new()
    }
}
