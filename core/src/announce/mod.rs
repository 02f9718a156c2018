//! L2 announcement: one node answers ARP and neighbor solicitations for each VIP from
//! its own bridge, and the answer moves when that node goes.
//! - [`placement`]: which node answers for each VIP (rendezvous hashing over the live nodes);
//! - [`announcements`]: the placement kept up to date by each snapshot, and the VIPs this node
//!   took or gave up (the planner turns them into answer flows);
//! - [`arp_answer`]: the actions that answer ARP in the switch, and the gratuitous ARP a new
//!   owner sends;
//! - [`nd_answer`]: the same for IPv6: neighbor advertisements built in the switch, and the
//!   unsolicited advertisement a new owner sends;
//! - [`record`]: who announces each VIP, on its Service (the
//!   `vipflow.io/Announced` condition), written by the nodes that announce;
//! - [`Announcing`]: whether this node announces, on which bridges and by which announcer,
//!   read from the configuration in one place.

pub mod announcements;
mod announcing;
pub mod arp_answer;
pub mod nd_answer;
pub mod placement;
pub mod record;

pub use announcing::{AnnouncerKind, Announcing};

use openflow::Action;
use openflow::oxm::{MacAddr, OXM_CLASS_OPENFLOW_BASIC, eth_type, oxm_header};

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
