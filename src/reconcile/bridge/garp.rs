//! Gratuitous ARP for the VIPs this node takes over ([`crate::announce`]): sent out of the
//! uplink as soon as the answer flow is on the switch, and again a few times on a short
//! backoff, so that a neighbor that missed one copy still moves to the new owner at once
//! instead of waiting for its cache entry to age out.

use crate::announce::arp_answer::gratuitous_arp;
use crate::plan::flows::FlowKey;
use crate::plan::service_index::FlowIndex;
use openflow::action::port;
use openflow::message::PacketOut;
use openflow::oxm::MacAddr;
use openflow::{Action, Connection, Message};
use std::net::Ipv4Addr;
use std::time::Duration;

/// When each copy goes, counted from the flow's barrier: at once, then with a doubling gap.
pub const SEND_AT: [Duration; 4] = [
    Duration::ZERO,
    Duration::from_millis(100),
    Duration::from_millis(300),
    Duration::from_millis(700),
];

/// `OFP_NO_BUFFER`: the packet is in the message.
const NO_BUFFER: u32 = 0xffff_ffff;

/// The VIPs whose answer flow a write put on the switch: among `touched`, the answers that
/// are in `plan`.
pub fn taken(touched: &[FlowKey], plan: &FlowIndex) -> Vec<Ipv4Addr> {
    touched
        .iter()
        .filter_map(|k| match k {
            FlowKey::ArpAnswer(v) if plan.contains(k) => Some(*v),
            _ => None,
        })
        .collect()
}

/// Every VIP `plan` answers for (after a full sync: the switch may have restarted, and the
/// neighbors may have moved meanwhile).
pub fn answered(plan: &FlowIndex) -> Vec<Ipv4Addr> {
    let lo = FlowKey::ArpAnswer(Ipv4Addr::UNSPECIFIED);
    let hi = FlowKey::ArpAnswer(Ipv4Addr::BROADCAST);
    plan.range(lo..=hi)
        .filter_map(|k| match k {
            FlowKey::ArpAnswer(v) => Some(*v),
            _ => None,
        })
        .collect()
}

/// The PACKET_OUT that sends `frame` out of `uplink`.
pub fn packet_out(uplink: u32, frame: Vec<u8>) -> Message {
    Message::PacketOut(PacketOut {
        buffer_id: NO_BUFFER,
        in_port: port::CONTROLLER,
        actions: vec![Action::output(uplink)],
        data: frame,
    })
}

/// Send the gratuitous ARPs for `vips` at [`SEND_AT`], in the background: the reconciler
/// goes on with the next plan meanwhile. A connection that closes ends the sends (the next
/// session's full sync announces again).
pub fn spawn(
    conn: Connection,
    bridge: String,
    uplink: u32,
    mac: MacAddr,
    vlan: Option<u16>,
    vips: Vec<Ipv4Addr>,
) {
    if vips.is_empty() {
        return;
    }
    let frames: Vec<Message> = vips
        .iter()
        .map(|v| packet_out(uplink, gratuitous_arp(*v, mac, vlan)))
        .collect();
    tokio::spawn(async move {
        let start = tokio::time::Instant::now();
        for (round, at) in SEND_AT.iter().enumerate() {
            tokio::time::sleep_until(start + *at).await;
            for f in &frames {
                if let Err(e) = conn.send(f).await {
                    tracing::debug!(bridge = %bridge, error = %e, "gratuitous ARP not sent; the connection is gone");
                    return;
                }
            }
            if round == 0 {
                tracing::info!(bridge = %bridge, vips = ?vips, "announced: gratuitous ARP sent");
            }
        }
    });
}
