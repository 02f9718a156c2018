//! How the owner of an IPv6 VIP answers neighbor solicitations for it from the switch, and
//! tells the network when it takes the VIP.
//!
//! Open vSwitch can turn a solicitation into an advertisement by itself: the ICMPv6 type, the
//! flags word (`nd_reserved`) and the type of the first option (`nd_options_type`) are writable
//! fields (OVS 2.11+), and OVS recomputes the checksum for every field it writes. One thing
//! needs two steps: OVS only lets a flow write the target link-layer address (`nd_tll`) of a
//! packet its match says is an advertisement, so the answer is two flows.
//! 1. The solicitation for the VIP from the uplink (`nd answer`) is rewritten into the
//!    advertisement (addresses swapped, the VIP as source, type 136, Solicited and Override
//!    set, the requester's source link-layer option turned into the target option), marked in
//!    a register, and looked up again in the same table.
//! 2. The marked advertisement (`nd advert`) gets the bridge's MAC as its target link-layer
//!    address and goes back out of the port it came in on. An advertisement from the wire
//!    never carries the mark, so it never matches.
//!
//! Nothing goes to a controller, so the answer costs what an ARP answer costs. The
//! announcement is an unsolicited advertisement (Override set) to all nodes, sent out of the
//! uplink by PACKET_OUT.

use super::{copy_field, ethernet_header};
use openflow::action::{NX_RESUBMIT_IN_PORT, port};
use openflow::oxm::{MacAddr, eth_type};
use openflow::{Action, OxmField};
use std::net::Ipv6Addr;

/// The register that marks an advertisement the answer flow made ([`MARK`]).
pub const MARK_REG: u8 = 0;
/// The value of [`MARK_REG`] on an advertisement the answer flow made ("VFNA").
pub const MARK: u32 = 0x5646_4e41;
/// ICMPv6 type of a neighbor solicitation.
pub const NEIGHBOR_SOLICIT: u8 = 135;
/// ICMPv6 type of a neighbor advertisement.
pub const NEIGHBOR_ADVERT: u8 = 136;
/// The flags word of an answer: Solicited and Override.
const SOLICITED_OVERRIDE: u32 = 0x6000_0000;
/// The flags word of an announcement: Override only.
const OVERRIDE: u32 = 0x2000_0000;
/// ND option type of a target link-layer address.
const OPTION_TARGET_LLA: u8 = 2;
/// Next header of ICMPv6.
const NEXT_HEADER_ICMPV6: u8 = 58;
/// The all-nodes multicast group and its Ethernet address.
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
const ALL_NODES_MAC: MacAddr = [0x33, 0x33, 0, 0, 0, 1];

/// Step 1: the actions that turn a solicitation for `vip` into the advertisement from `mac`,
/// mark it and look it up again in `table` (where [`nd_advert_actions`] finishes it).
pub fn nd_answer_actions(vip: Ipv6Addr, mac: MacAddr, table: u8) -> Vec<Action> {
    use openflow::oxm::field as f;
    vec![
        copy_field(f::ETH_SRC, f::ETH_DST, 6),
        Action::SetField(OxmField::eth_src(mac)),
        copy_field(f::IPV6_SRC, f::IPV6_DST, 16),
        Action::SetField(OxmField::ipv6_src(vip)),
        Action::SetField(OxmField::icmpv6_type(NEIGHBOR_ADVERT)),
        Action::SetField(OxmField::nd_reserved(SOLICITED_OVERRIDE)),
        Action::SetField(OxmField::nd_options_type(OPTION_TARGET_LLA)),
        Action::SetField(OxmField::reg(MARK_REG, MARK)),
        Action::Resubmit {
            in_port: NX_RESUBMIT_IN_PORT,
            table,
        },
    ]
}

/// Step 2: the marked advertisement gets `mac` as its target link-layer address and goes back
/// out of the input port.
pub fn nd_advert_actions(mac: MacAddr) -> Vec<Action> {
    vec![
        Action::SetField(OxmField::ipv6_nd_tll(mac)),
        Action::output(port::IN_PORT),
    ]
}

/// [`nd_answer_actions`] in `ovs-ofctl` syntax, for `vipflow plan`.
pub fn nd_answer_actions_text(vip: Ipv6Addr, mac: &str, table: u8) -> String {
    format!(
        "move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[],set_field:{mac}->eth_src,\
         move:NXM_NX_IPV6_SRC[]->NXM_NX_IPV6_DST[],set_field:{vip}->ipv6_src,\
         set_field:{NEIGHBOR_ADVERT}->icmpv6_type,set_field:{SOLICITED_OVERRIDE}->nd_reserved,\
         set_field:{OPTION_TARGET_LLA}->nd_options_type,set_field:{MARK:#x}->reg{MARK_REG},\
         resubmit(,{table})"
    )
}

/// [`nd_advert_actions`] in `ovs-ofctl` syntax.
pub fn nd_advert_actions_text(mac: &str) -> String {
    format!("set_field:{mac}->nd_tll,IN_PORT")
}

/// An unsolicited neighbor advertisement for `vip` from `mac` to all nodes (Override set, so
/// that every neighbor that has the VIP in its cache takes the new MAC), tagged with `vlan`
/// when the uplink is.
pub fn unsolicited_na(vip: Ipv6Addr, mac: MacAddr, vlan: Option<u16>) -> Vec<u8> {
    let mut icmp = Vec::with_capacity(32);
    icmp.extend_from_slice(&[NEIGHBOR_ADVERT, 0, 0, 0]);
    icmp.extend_from_slice(&OVERRIDE.to_be_bytes());
    icmp.extend_from_slice(&vip.octets());
    icmp.extend_from_slice(&[OPTION_TARGET_LLA, 1]);
    icmp.extend_from_slice(&mac);
    let sum = icmpv6_checksum(vip, ALL_NODES, &icmp);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());

    let mut f = ethernet_header(ALL_NODES_MAC, mac, vlan, eth_type::IPV6);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    // `icmp` is 32 bytes.
    f.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
    // Hop limit 255: receivers drop ND that crossed a router.
    f.extend_from_slice(&[NEXT_HEADER_ICMPV6, 255]);
    f.extend_from_slice(&vip.octets());
    f.extend_from_slice(&ALL_NODES.octets());
    f.extend_from_slice(&icmp);
    f
}

/// The ICMPv6 checksum of `msg` (its checksum field zero) between `src` and `dst`: the ones'
/// complement sum over the pseudo-header and the message (RFC 8200 section 8.1).
fn icmpv6_checksum(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut add = |bytes: &[u8]| {
        for pair in bytes.chunks(2) {
            let hi = u32::from(pair[0]) << 8;
            sum += hi | pair.get(1).map_or(0, |lo| u32::from(*lo));
        }
    };
    add(&src.octets());
    add(&dst.octets());
    add(&(msg.len() as u32).to_be_bytes());
    add(&[0, 0, 0, NEXT_HEADER_ICMPV6]);
    add(msg);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sum of a whole packet's ICMPv6 part with its pseudo-header: 0xffff when the checksum
    /// in it is right.
    fn verifies(frame: &[u8], ip_at: usize) -> bool {
        let src: [u8; 16] = frame[ip_at + 8..ip_at + 24].try_into().unwrap();
        let dst: [u8; 16] = frame[ip_at + 24..ip_at + 40].try_into().unwrap();
        let mut msg = frame[ip_at + 40..].to_vec();
        let want = u16::from_be_bytes([msg[2], msg[3]]);
        msg[2] = 0;
        msg[3] = 0;
        icmpv6_checksum(src.into(), dst.into(), &msg) == want
    }

    #[test]
    fn an_unsolicited_advertisement_names_the_vip_and_the_bridge_mac_with_override() {
        let mac = [0x0a, 0x58, 0xac, 0x12, 0x00, 0x11];
        let vip: Ipv6Addr = "fd00:18::100".parse().unwrap();
        let f = unsolicited_na(vip, mac, None);
        assert_eq!(f.len(), 14 + 40 + 32);
        assert_eq!(&f[0..6], &ALL_NODES_MAC);
        assert_eq!(&f[6..12], &mac);
        assert_eq!(&f[12..14], &[0x86, 0xdd]);
        assert_eq!(f[14] >> 4, 6, "IPv6");
        assert_eq!(&f[18..20], &[0, 32], "payload length");
        assert_eq!((f[20], f[21]), (58, 255), "ICMPv6, hop limit 255");
        assert_eq!(&f[22..38], &vip.octets(), "from the VIP");
        assert_eq!(&f[38..54], &ALL_NODES.octets(), "to all nodes");
        assert_eq!(f[54], NEIGHBOR_ADVERT);
        assert_eq!(&f[58..62], &[0x20, 0, 0, 0], "Override only");
        assert_eq!(&f[62..78], &vip.octets(), "target");
        assert_eq!(&f[78..80], &[2, 1], "target link-layer option");
        assert_eq!(&f[80..86], &mac);
        assert!(verifies(&f, 14));
        let tagged = unsolicited_na(vip, mac, Some(100));
        assert_eq!(&tagged[12..18], &[0x81, 0x00, 0x00, 100, 0x86, 0xdd]);
        assert!(verifies(&tagged, 18));
    }

    #[test]
    fn with_its_checksum_a_message_sums_to_all_ones() {
        // An NA from fe80::1 to ff02::1 for fe80::1, Override, target link-layer
        // 02:00:00:00:00:01; summed here word by word, as a receiver checks it.
        let src: Ipv6Addr = "fe80::1".parse().unwrap();
        let mut msg = vec![136, 0, 0, 0, 0x20, 0, 0, 0];
        msg.extend_from_slice(&src.octets());
        msg.extend_from_slice(&[2, 1, 2, 0, 0, 0, 0, 1]);
        let sum = icmpv6_checksum(src, ALL_NODES, &msg);
        // Adding the checksum back makes the whole sum 0xffff (its complement 0).
        msg[2..4].copy_from_slice(&sum.to_be_bytes());
        let mut total: u32 = 0;
        for b in [&src.octets()[..], &ALL_NODES.octets()[..], &msg[..]] {
            for p in b.chunks(2) {
                total += (u32::from(p[0]) << 8) | u32::from(p[1]);
            }
        }
        total += msg.len() as u32 + 58;
        while total > 0xffff {
            total = (total & 0xffff) + (total >> 16);
        }
        assert_eq!(total, 0xffff);
    }
}
