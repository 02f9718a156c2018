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
    /// the input port ([`crate::announce::arp_answer::answer_actions`]).
    AnswerArp(std::net::Ipv4Addr),
    /// Turn the neighbor solicitation for this VIP into the advertisement, marked and looked
    /// up again in the flow's table ([`crate::announce::nd_answer::answer_actions`]).
    AnswerNd(std::net::Ipv6Addr),
    /// Finish a marked advertisement with the bridge's MAC and send it back out of the input
    /// port ([`crate::announce::nd_answer::advert_actions`]).
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
    /// into the advertisement ([`crate::announce::nd_answer`], step 1).
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
