//! Flows shared by the live tests and the benchmark: vipflow's ARP bypass, one per VIP.
#![allow(dead_code)]

use openflow::action::port;
use openflow::oxm::eth_type;
use openflow::{Action, FlowMod, Instruction, Match, Message, OxmField};
use std::net::Ipv4Addr;

pub const COOKIE_PREFIX: u64 = 0x7f1f << 48;
pub const COOKIE_MASK: u64 = 0xffff << 48;
pub const UPLINK: u32 = 1;

/// The i-th VIP: 10.x.y.z, distinct for i < 2^24.
pub fn vip(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(0x0a00_0000 | (i & 0x00ff_ffff))
}

/// `in_port=1,arp,arp_op=1,arp_tpa=VIP actions=LOCAL` with cookie prefix|i.
pub fn arp_bypass(i: u32) -> FlowMod {
    let m = Match::new()
        .with(OxmField::in_port(UPLINK))
        .with(OxmField::eth_type(eth_type::ARP))
        .with(OxmField::arp_op(1))
        .with(OxmField::arp_tpa(vip(i)));
    FlowMod::add(
        0,
        100,
        COOKIE_PREFIX | u64::from(i),
        m,
        vec![Instruction::ApplyActions(vec![Action::output(port::LOCAL)])],
    )
}

pub fn arp_bypass_msgs(n: u32) -> Vec<Message> {
    (0..n).map(|i| Message::FlowMod(arp_bypass(i))).collect()
}

/// The same flow in `ovs-ofctl add-flow` syntax.
pub fn arp_bypass_text(i: u32) -> String {
    format!(
        "cookie={:#x},table=0,priority=100,in_port=1,arp,arp_op=1,arp_tpa={} actions=LOCAL",
        COOKIE_PREFIX | u64::from(i),
        vip(i)
    )
}
