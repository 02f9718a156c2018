//! The ONF flow monitor extension for OpenFlow 1.3, as Open vSwitch implements it (3.0 and
//! later): a controller asks to hear of every flow added, deleted or modified in a table, by
//! anyone. The request is an experimenter multipart request (ONF id, type 1870); the switch
//! answers it, then sends updates as unsolicited multipart replies of the same type, and says
//! when it stops sending them because the connection is backed up (PAUSED, type 1871) and when
//! it starts again (RESUMED, type 1872), after which the controller must re-read what it
//! cares about.
//!
//! Changes made by the monitoring connection itself are reported abbreviated (the xid of the
//! request that made them) unless [`flags::OWN`] is asked for.

use crate::bundle::ONF_EXPERIMENTER_ID;
use crate::error::{DecodeError, Result};
use crate::instruction::{Instruction, parse_instructions};
use crate::message::Message;
use crate::multipart::{MultipartReplyBody, MultipartRequestBody};
use crate::oxm::Match;
use crate::wire::{Reader, put_zeros};

/// `ONFST_FLOW_MONITOR` (requests and replies) and `ONFT_FLOW_MONITOR_CANCEL`.
pub const ONF_FLOW_MONITOR: u32 = 1870;
/// `ONFT_FLOW_MONITOR_PAUSED`.
pub const ONFT_FLOW_MONITOR_PAUSED: u32 = 1871;
/// `ONFT_FLOW_MONITOR_RESUMED`.
pub const ONFT_FLOW_MONITOR_RESUMED: u32 = 1872;
/// `OFPMP_EXPERIMENTER`.
pub const MP_EXPERIMENTER: u16 = 0xffff;
/// `OFPP_ANY` as an `out_port`: no output port required.
pub const PORT_ANY: u32 = 0xffff_ffff;
/// All tables.
pub const TABLE_ALL: u8 = 0xff;

/// `ONFFMF_*`: when to send updates and what to put in them.
pub mod flags {
    /// Report the flows that match when the monitor starts.
    pub const INITIAL: u16 = 1 << 0;
    pub const ADD: u16 = 1 << 1;
    pub const DELETE: u16 = 1 << 2;
    pub const MODIFY: u16 = 1 << 3;
    /// Include the instructions.
    pub const ACTIONS: u16 = 1 << 4;
    /// Report this connection's own changes in full too.
    pub const OWN: u16 = 1 << 5;
}

/// `struct onf_flow_monitor_request` and its match.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FlowMonitorRequest {
    /// The controller's id for this monitor.
    pub id: u32,
    /// [`flags`] bits; at least one of ADD, DELETE, MODIFY.
    pub flags: u16,
    /// Only flows that output to this port; [`PORT_ANY`] for all.
    pub out_port: u32,
    /// One table, or [`TABLE_ALL`].
    pub table_id: u8,
    /// Only flows whose match this one covers; empty for all.
    pub match_: Match,
}

impl FlowMonitorRequest {
    /// The multipart request body that starts this monitor.
    pub fn to_multipart(&self) -> MultipartRequestBody {
        let mut body = Vec::with_capacity(32);
        body.extend_from_slice(&ONF_EXPERIMENTER_ID.to_be_bytes());
        body.extend_from_slice(&ONF_FLOW_MONITOR.to_be_bytes());
        body.extend_from_slice(&self.id.to_be_bytes());
        body.extend_from_slice(&self.flags.to_be_bytes());
        let mut m = Vec::new();
        self.match_.emit(&mut m);
        // match_len is the ofp_match's own length field: without its padding.
        body.extend_from_slice(&m[2..4]);
        body.extend_from_slice(&self.out_port.to_be_bytes());
        body.push(self.table_id);
        put_zeros(&mut body, 3);
        body.extend_from_slice(&m);
        MultipartRequestBody::Other {
            mp_type: MP_EXPERIMENTER,
            body,
        }
    }
}

/// What happened to a flow (`ONFFME_ADDED`, `_DELETED`, `_MODIFIED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlowEvent {
    Added,
    Deleted,
    Modified,
}

/// One entry of an update.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FlowUpdate {
    /// `struct onf_flow_update_full`: a flow someone else (or, with [`flags::OWN`], this
    /// connection) added, deleted or modified.
    Full {
        event: FlowEvent,
        /// `OFPRR_*` for a deletion, else 0.
        reason: u16,
        priority: u16,
        idle_timeout: u16,
        hard_timeout: u16,
        table_id: u8,
        cookie: u64,
        match_: Match,
        /// Only with [`flags::ACTIONS`], and never for a deletion.
        instructions: Vec<Instruction>,
    },
    /// `struct onf_flow_update_abbrev`: a change this connection made, by the xid of its
    /// request.
    Abbrev { xid: u32 },
}

/// What a monitoring connection hears.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MonitorEvent {
    /// A reply or an unsolicited update: entries in order.
    Updates(Vec<FlowUpdate>),
    /// The switch stopped sending updates (its queue to us is full): what happened meanwhile
    /// is unknown until [`MonitorEvent::Resumed`].
    Paused,
    /// Updates flow again; changes made while paused were not reported.
    Resumed,
}

/// The monitor event `msg` carries, if it is one. `None` for any other message; an error for
/// a monitor message whose body does not parse.
pub fn monitor_event(msg: &Message) -> Option<Result<MonitorEvent>> {
    match msg {
        Message::MultipartReply(rep) => match &rep.body {
            MultipartReplyBody::Other {
                mp_type: MP_EXPERIMENTER,
                body,
            } => {
                let mut r = Reader::new(body, "flow monitor reply");
                let (Ok(exp), Ok(ty)) = (r.u32(), r.u32()) else {
                    return None;
                };
                (exp == ONF_EXPERIMENTER_ID && ty == ONF_FLOW_MONITOR)
                    .then(|| parse_updates(&mut r).map(MonitorEvent::Updates))
            }
            _ => None,
        },
        Message::Experimenter {
            experimenter: ONF_EXPERIMENTER_ID,
            exp_type,
            ..
        } => match *exp_type {
            ONFT_FLOW_MONITOR_PAUSED => Some(Ok(MonitorEvent::Paused)),
            ONFT_FLOW_MONITOR_RESUMED => Some(Ok(MonitorEvent::Resumed)),
            _ => None,
        },
        _ => None,
    }
}

/// The entries of a flow monitor reply body (after the experimenter header).
fn parse_updates(r: &mut Reader<'_>) -> Result<Vec<FlowUpdate>> {
    let mut out = Vec::new();
    while !r.is_empty() {
        let len = r.u16()? as usize;
        let event = r.u16()?;
        if len < 4 {
            return Err(DecodeError::BadLength {
                what: "flow update",
                len,
            });
        }
        let mut e = r.sub(len - 4, "flow update")?;
        out.push(match event {
            0..=2 => {
                let reason = e.u16()?;
                let priority = e.u16()?;
                let idle_timeout = e.u16()?;
                let hard_timeout = e.u16()?;
                let _match_len = e.u16()?;
                let table_id = e.u8()?;
                e.skip(1)?;
                let cookie = e.u64()?;
                let match_ = Match::parse(&mut e)?;
                let instructions = parse_instructions(&mut e)?;
                FlowUpdate::Full {
                    event: match event {
                        0 => FlowEvent::Added,
                        1 => FlowEvent::Deleted,
                        _ => FlowEvent::Modified,
                    },
                    reason,
                    priority,
                    idle_timeout,
                    hard_timeout,
                    table_id,
                    cookie,
                    match_,
                    instructions,
                }
            }
            3 => FlowUpdate::Abbrev { xid: e.u32()? },
            other => {
                return Err(DecodeError::Invalid {
                    what: "flow update",
                    detail: format!("unknown event {other}"),
                });
            }
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oxm::OxmField;

    fn hex(s: &str) -> Vec<u8> {
        s.split_whitespace()
            .map(|b| u8::from_str_radix(b, 16).unwrap())
            .collect()
    }

    #[test]
    fn a_request_encodes_as_open_vswitch_prints_it() {
        // tests/ofp-print.at, "FLOW_MONITOR request", OpenFlow 1.3: the first entry,
        // `id=4096 flags=initial,add,delete,modify,actions,own out_port=LOCAL table=1`.
        let want = hex("04 12 00 30 00 00 00 06 ff ff 00 00 00 00 00 00 \
             4f 4e 46 00 00 00 07 4e \
             00 00 10 00 00 3f 00 04 ff ff ff fe 01 00 00 00 00 01 00 04 00 00 00 00");
        let req = FlowMonitorRequest {
            id: 4096,
            flags: 0x3f,
            out_port: 0xffff_fffe,
            table_id: 1,
            match_: Match::new(),
        };
        let msg = Message::MultipartRequest(crate::MultipartRequest::new(req.to_multipart()));
        assert_eq!(msg.encode(6), want);
    }

    #[test]
    fn a_request_with_a_match_counts_the_match_without_padding() {
        let req = FlowMonitorRequest {
            id: 1,
            flags: flags::ADD | flags::DELETE | flags::MODIFY,
            out_port: PORT_ANY,
            table_id: TABLE_ALL,
            match_: Match::new().with(OxmField::in_port(1)),
        };
        let MultipartRequestBody::Other { body, .. } = req.to_multipart() else {
            panic!("experimenter body");
        };
        // experimenter header (8), request (16), ofp_match of 12 bytes padded to 16.
        assert_eq!(body.len(), 8 + 16 + 16);
        assert_eq!(&body[14..16], &[0, 12], "match_len");
    }

    #[test]
    fn a_reply_decodes_as_open_vswitch_prints_it() {
        // tests/ofp-print.at, "FLOW_MONITOR reply", OpenFlow 1.3:
        //  event=DELETED reason=eviction table=0 cookie=0x123456789abcdef0 in_port=1
        //  event=ABBREV xid=0x186a0
        let bytes = hex(
            "04 13 00 48 00 00 00 06 ff ff 00 00 00 00 00 00 4f 4e 46 00 00 00 07 4e \
             00 28 00 01 00 05 80 00 00 00 00 00 00 0c 00 00 \
             12 34 56 78 9a bc de f0 00 01 00 0c 80 00 00 04 \
             00 00 00 01 00 00 00 00 \
             00 08 00 03 00 01 86 a0",
        );
        let (h, msg) = Message::decode(&bytes).unwrap();
        assert_eq!(h.xid, 6);
        let ev = monitor_event(&msg).expect("a monitor message").unwrap();
        assert_eq!(
            ev,
            MonitorEvent::Updates(vec![
                FlowUpdate::Full {
                    event: FlowEvent::Deleted,
                    reason: 5,
                    priority: 0x8000,
                    idle_timeout: 0,
                    hard_timeout: 0,
                    table_id: 0,
                    cookie: 0x1234_5678_9abc_def0,
                    match_: Match::new().with(OxmField::in_port(1)),
                    instructions: vec![],
                },
                FlowUpdate::Abbrev { xid: 0x186a0 },
            ])
        );
    }

    #[test]
    fn paused_and_resumed_decode() {
        let paused = hex("04 04 00 10 00 00 00 03 4f 4e 46 00 00 00 07 4F");
        let resumed = hex("04 04 00 10 00 00 00 03 4f 4e 46 00 00 00 07 50");
        let ev = |b: &[u8]| monitor_event(&Message::decode(b).unwrap().1).map(|r| r.unwrap());
        assert_eq!(ev(&paused), Some(MonitorEvent::Paused));
        assert_eq!(ev(&resumed), Some(MonitorEvent::Resumed));
        assert_eq!(monitor_event(&Message::BarrierReply), None);
    }

    #[test]
    fn broken_updates_are_errors_not_panics() {
        for body in [
            // An entry shorter than its header.
            "00 02 00 00",
            // A length past the end.
            "00 40 00 00 00 00",
            // An unknown event.
            "00 08 00 09 00 00 00 00",
            // A full entry cut inside its match.
            "00 20 00 00 00 00 80 00 00 00 00 00 00 0c 00 00 12 34 56 78 9a bc de f0 00 01 00 0c",
        ] {
            let mut b = hex("4f 4e 46 00 00 00 07 4e");
            b.extend(hex(body));
            let msg = Message::MultipartReply(crate::MultipartReply {
                flags: 0,
                body: MultipartReplyBody::Other {
                    mp_type: MP_EXPERIMENTER,
                    body: b,
                },
            });
            assert!(
                matches!(monitor_event(&msg), Some(Err(_))),
                "{body}: {:?}",
                monitor_event(&msg)
            );
        }
    }
}
