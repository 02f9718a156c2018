//! How the owner of an IPv4 VIP answers ARP for it from the switch, and tells the network when
//! it takes the VIP.
//!
//! The answer is a flow: the request that came in on the uplink is turned into the reply
//! (Ethernet and ARP addresses swapped, the bridge's MAC as the answer) and sent back out of
//! the port it came in on. No address is put on any host interface, and nothing leaves for OVN
//! or the host. The announcement is a gratuitous ARP request the agent sends out of the uplink
//! by PACKET_OUT.

use super::{copy_field, ethernet_header};
use openflow::action::port;
use openflow::oxm::{MacAddr, eth_type};
use openflow::{Action, OxmField};
use std::net::Ipv4Addr;

/// The actions that turn an ARP request for `vip` into the reply from `mac` and send it back
/// out of the input port. A VLAN tag, if any, stays as it came.
pub fn arp_answer_actions(vip: Ipv4Addr, mac: MacAddr) -> Vec<Action> {
    use openflow::oxm::field as f;
    vec![
        // The requester becomes the destination; the answer comes from the bridge.
        copy_field(f::ETH_SRC, f::ETH_DST, 6),
        Action::SetField(OxmField::eth_src(mac)),
        Action::SetField(OxmField::arp_op(2)),
        copy_field(f::ARP_SHA, f::ARP_THA, 6),
        Action::SetField(OxmField::arp_sha(mac)),
        copy_field(f::ARP_SPA, f::ARP_TPA, 4),
        Action::SetField(OxmField::arp_spa(vip)),
        Action::output(port::IN_PORT),
    ]
}

/// The same actions in `ovs-ofctl` syntax, for `vipflow plan`.
pub fn arp_answer_actions_text(vip: Ipv4Addr, mac: &str) -> String {
    format!(
        "move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[],set_field:{mac}->eth_src,set_field:2->arp_op,\
         move:NXM_NX_ARP_SHA[]->NXM_NX_ARP_THA[],set_field:{mac}->arp_sha,\
         move:NXM_OF_ARP_SPA[]->NXM_OF_ARP_TPA[],set_field:{vip}->arp_spa,IN_PORT"
    )
}

/// A gratuitous ARP request for `vip` from `mac` (sender and target address both the VIP,
/// broadcast), tagged with `vlan` when the uplink is: every neighbor that has the VIP in its
/// cache takes the new MAC, and switches learn where it now is.
pub fn gratuitous_arp(vip: Ipv4Addr, mac: MacAddr, vlan: Option<u16>) -> Vec<u8> {
    let mut f = ethernet_header([0xff; 6], mac, vlan, eth_type::ARP);
    // Ethernet, IPv4, 6- and 4-byte addresses, a request.
    f.extend_from_slice(&[0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x01]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&vip.octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&vip.octets());
    // Padded to the 60 bytes of a minimum frame (without its checksum).
    f.resize(f.len().max(60), 0);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gratuitous_arp_names_the_vip_twice_and_the_bridge_mac() {
        let mac = [0x0a, 0x58, 0xac, 0x12, 0x00, 0x11];
        let vip = Ipv4Addr::new(172, 18, 0, 200);
        let f = gratuitous_arp(vip, mac, None);
        assert_eq!(f.len(), 60);
        assert_eq!(&f[0..6], &[0xff; 6]);
        assert_eq!(&f[6..12], &mac);
        assert_eq!(&f[12..14], &[0x08, 0x06]);
        assert_eq!(&f[20..22], &[0x00, 0x01], "a request");
        assert_eq!(&f[22..28], &mac, "sender MAC");
        assert_eq!(&f[28..32], &vip.octets(), "sender IP");
        assert_eq!(&f[38..42], &vip.octets(), "target IP");
        let tagged = gratuitous_arp(vip, mac, Some(100));
        assert_eq!(&tagged[12..18], &[0x81, 0x00, 0x00, 100, 0x08, 0x06]);
        assert_eq!(&tagged[42..46], &vip.octets());
    }
}
