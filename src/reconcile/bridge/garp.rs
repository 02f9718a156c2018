//! Announcements for the VIPs this node takes over ([`crate::announce`]): a gratuitous ARP
//! for an IPv4 VIP, an unsolicited neighbor advertisement for an IPv6 one, sent out of the
//! uplink as soon as the answer flow is on the switch, and again a few times on a short
//! backoff, so that a neighbor that missed one copy still moves to the new owner at once
//! instead of waiting for its cache entry to age out.

use crate::announce::l2::announcement;
use crate::plan::flows::FlowKey;
use crate::plan::service_index::FlowIndex;
use openflow::action::port;
use openflow::message::PacketOut;
use openflow::oxm::MacAddr;
use openflow::{Action, Connection, Message};
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
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

/// The VIP a key answers for, if it is an answer flow (for IPv6, its first step).
fn answers(k: &FlowKey) -> Option<IpAddr> {
    match k {
        FlowKey::ArpAnswer(v) => Some(IpAddr::V4(*v)),
        FlowKey::NdAnswer(v) => Some(IpAddr::V6(*v)),
        _ => None,
    }
}

/// The VIPs whose answer flow a write put on the switch: among `touched`, the answers that
/// are in `plan`.
pub fn taken(touched: &[FlowKey], plan: &FlowIndex) -> Vec<IpAddr> {
    touched
        .iter()
        .filter(|k| plan.contains(*k))
        .filter_map(answers)
        .collect()
}

/// Every VIP `plan` answers for (after a full sync: the switch may have restarted, and the
/// neighbors may have moved meanwhile).
pub fn answered(plan: &FlowIndex) -> Vec<IpAddr> {
    let v4 = plan
        .range(FlowKey::ArpAnswer(Ipv4Addr::UNSPECIFIED)..=FlowKey::ArpAnswer(Ipv4Addr::BROADCAST));
    let all_v6 = Ipv6Addr::from(u128::MAX);
    let v6 = plan.range(FlowKey::NdAnswer(Ipv6Addr::UNSPECIFIED)..=FlowKey::NdAnswer(all_v6));
    v4.chain(v6).filter_map(answers).collect()
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

/// The VIPs a bridge may still announce: those whose answer is on the switch, none once the
/// agent stops. A schedule under way checks it before every copy, so a VIP that moved away
/// (or an agent that stops) ends its announcements at once.
pub type Announceable = tokio::sync::watch::Receiver<std::sync::Arc<BTreeSet<IpAddr>>>;

/// Send the announcements for `vips` at [`SEND_AT`], in the background: the reconciler
/// goes on with the next plan meanwhile. A connection that closes ends the sends (the next
/// session's full sync announces again); each copy goes only for the VIPs `allowed` still
/// holds.
pub fn spawn(
    conn: Connection,
    bridge: String,
    uplink: u32,
    mac: MacAddr,
    vlan: Option<u16>,
    vips: Vec<IpAddr>,
    allowed: Announceable,
) {
    if vips.is_empty() {
        return;
    }
    let frames: Vec<(IpAddr, Message)> = vips
        .iter()
        .map(|v| (*v, packet_out(uplink, announcement(*v, mac, vlan))))
        .collect();
    tokio::spawn(async move {
        let start = tokio::time::Instant::now();
        for (round, at) in SEND_AT.iter().enumerate() {
            tokio::time::sleep_until(start + *at).await;
            let now: Vec<&(IpAddr, Message)> = {
                let ok = allowed.borrow();
                frames.iter().filter(|(v, _)| ok.contains(v)).collect()
            };
            if now.is_empty() {
                tracing::debug!(bridge = %bridge, "announcements ended: this node no longer answers for these VIPs");
                return;
            }
            for (_, f) in now {
                if let Err(e) = conn.send(f).await {
                    tracing::debug!(bridge = %bridge, error = %e, "announcement not sent; the connection is gone");
                    return;
                }
            }
            if round == 0 {
                let (v4, v6): (Vec<IpAddr>, Vec<IpAddr>) = {
                    let ok = allowed.borrow();
                    vips.iter()
                        .copied()
                        .filter(|v| ok.contains(v))
                        .partition(|v| v.is_ipv4())
                };
                if !v4.is_empty() {
                    tracing::info!(bridge = %bridge, vips = ?v4, "announced: gratuitous ARP sent");
                }
                if !v6.is_empty() {
                    tracing::info!(bridge = %bridge, vips = ?v6, "announced: unsolicited neighbor advertisement sent");
                }
            }
        }
    });
}
