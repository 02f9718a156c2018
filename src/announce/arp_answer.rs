//! The flow with which the owner of an IPv4 VIP answers ARP for it in the switch: the request
//! that came in on the uplink is turned into the reply (Ethernet and ARP addresses swapped,
//! the bridge's MAC as the answer) and sent back out of the port it came in on. No address is
//! put on any host interface, and nothing leaves for OVN or the host.

use openflow::action::port;
use openflow::oxm::{MacAddr, OXM_CLASS_OPENFLOW_BASIC, oxm_header};
use openflow::{Action, FlowMod, Instruction, Match, OxmField};
use std::net::Ipv4Addr;

/// EtherType of ARP.
const ETH_TYPE_ARP: u16 = 0x0806;

/// The ARP answer for `vip` with `mac`, for requests that arrive on `uplink`.
pub fn arp_answer(
    vip: Ipv4Addr,
    mac: MacAddr,
    uplink: u32,
    table: u8,
    priority: u16,
    cookie: u64,
) -> FlowMod {
    use openflow::oxm::field as f;
    let m = Match::new()
        .with(OxmField::in_port(uplink))
        .with(OxmField::eth_type(ETH_TYPE_ARP))
        .with(OxmField::arp_op(1))
        .with(OxmField::arp_tpa(vip));
    let basic = |field, len| oxm_header(OXM_CLASS_OPENFLOW_BASIC, field, len);
    let mv = |n_bits, src, dst| Action::RegMove {
        n_bits,
        src_ofs: 0,
        dst_ofs: 0,
        src,
        dst,
    };
    let actions = vec![
        // The requester becomes the destination; the answer comes from the bridge.
        mv(48, basic(f::ETH_SRC, 6), basic(f::ETH_DST, 6)),
        Action::SetField(OxmField::eth_src(mac)),
        Action::SetField(OxmField::arp_op(2)),
        mv(48, basic(f::ARP_SHA, 6), basic(f::ARP_THA, 6)),
        Action::SetField(OxmField::arp_sha(mac)),
        mv(32, basic(f::ARP_SPA, 4), basic(f::ARP_TPA, 4)),
        Action::SetField(OxmField::arp_spa(vip)),
        Action::output(port::IN_PORT),
    ];
    FlowMod::add(
        table,
        priority,
        cookie,
        m,
        vec![Instruction::ApplyActions(actions)],
    )
}
