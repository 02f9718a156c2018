//! The L2 announcer's wire: the switch answers ARP and neighbor solicitations for the VIPs
//! placed on this node, and a node that takes a VIP tells its neighbors.
//! - `arp`: the actions that answer ARP in the switch, and the gratuitous ARP a new owner
//!   sends;
//! - `nd`: the same for IPv6: neighbor advertisements built in the switch, and the
//!   unsolicited advertisement a new owner sends;
//! - [`L2Announcer`]: the L2 announcer through the [`super::Announcer`] contract: one owner
//!   per VIP ([`super::placement`]), its answer flows and its takeovers.

mod announcer;
mod arp;
mod nd;

pub use announcer::{L2Announcer, L2Emits};
pub use arp::{arp_answer_actions, arp_answer_actions_text, gratuitous_arp};
pub use nd::{
    MARK, MARK_REG, NEIGHBOR_ADVERT, NEIGHBOR_SOLICIT, nd_advert_actions, nd_advert_actions_text,
    nd_answer_actions, nd_answer_actions_text, unsolicited_na,
};

use openflow::Action;
use openflow::oxm::{MacAddr, OXM_CLASS_OPENFLOW_BASIC, eth_type, oxm_header};
use std::net::IpAddr;

/// What a node that takes `vip` sends out of the uplink, from `mac` (tagged with `vlan` when
/// the uplink is): a gratuitous ARP for an IPv4 VIP, an unsolicited neighbor advertisement for
/// an IPv6 one.
pub fn announcement(vip: IpAddr, mac: MacAddr, vlan: Option<u16>) -> Vec<u8> {
    match vip {
        IpAddr::V4(v) => gratuitous_arp(v, mac, vlan),
        IpAddr::V6(v) => unsolicited_na(v, mac, vlan),
    }
}

/// Copy the whole of the basic field `src` (`len` bytes) into `dst` (a Nicira reg move).
fn copy_field(src: u8, dst: u8, len: u8) -> Action {
    Action::RegMove {
        n_bits: u16::from(len) * 8,
        src_ofs: 0,
        dst_ofs: 0,
        src: oxm_header(OXM_CLASS_OPENFLOW_BASIC, src, len),
        dst: oxm_header(OXM_CLASS_OPENFLOW_BASIC, dst, len),
    }
}

/// The Ethernet header of an announcement, with an 802.1Q tag when the uplink has one.
fn ethernet_header(dst: MacAddr, src: MacAddr, vlan: Option<u16>, ethertype: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(90);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    if let Some(v) = vlan {
        f.extend_from_slice(&eth_type::VLAN.to_be_bytes());
        f.extend_from_slice(&(v & 0x0fff).to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}
