//! MULTIPART request/reply bodies: DESC, FLOW, AGGREGATE and PORT_DESC are interpreted; other
//! types are carried raw. Reassembly of parts flagged MORE is done by [`MultipartReply::merge`]
//! (and by the connection, which collects every part of one xid).

use crate::action::port;
use crate::error::{DecodeError, Result};
use crate::flow_mod::{GROUP_ANY, TABLE_ALL};
use crate::instruction::{Instruction, emit_instructions, parse_instructions};
use crate::oxm::Match;
use crate::port::Port;
use crate::wire::{Reader, c_string, len16, patch_u16, put_c_string, put_zeros};

/// `enum ofp_multipart_type`.
pub mod mp_type {
    pub const DESC: u16 = 0;
    pub const FLOW: u16 = 1;
    pub const AGGREGATE: u16 = 2;
    pub const TABLE: u16 = 3;
    pub const PORT_STATS: u16 = 4;
    pub const PORT_DESC: u16 = 13;
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// `OFPMPF_REQ_MORE` / `OFPMPF_REPLY_MORE`.
pub const MPF_MORE: u16 = 1;

/// Request for flow or aggregate statistics (`struct ofp_flow_stats_request`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FlowStatsRequest {
    pub table_id: u8,
    pub out_port: u32,
    pub out_group: u32,
    pub cookie: u64,
    pub cookie_mask: u64,
    pub match_: Match,
}

impl Default for FlowStatsRequest {
    fn default() -> Self {
        FlowStatsRequest {
            table_id: TABLE_ALL,
            out_port: port::ANY,
            out_group: GROUP_ANY,
            cookie: 0,
            cookie_mask: 0,
            match_: Match::default(),
        }
    }
}

impl FlowStatsRequest {
    /// Every flow in every table whose cookie matches `cookie` under `mask`.
    pub fn by_cookie(cookie: u64, mask: u64) -> Self {
        FlowStatsRequest {
            cookie,
            cookie_mask: mask,
            ..Default::default()
        }
    }

    fn emit(&self, out: &mut Vec<u8>) {
        out.push(self.table_id);
        put_zeros(out, 3);
        out.extend_from_slice(&self.out_port.to_be_bytes());
        out.extend_from_slice(&self.out_group.to_be_bytes());
        put_zeros(out, 4);
        out.extend_from_slice(&self.cookie.to_be_bytes());
        out.extend_from_slice(&self.cookie_mask.to_be_bytes());
        self.match_.emit(out);
    }

    fn parse(r: &mut Reader<'_>) -> Result<Self> {
        let table_id = r.u8()?;
        r.skip(3)?;
        let out_port = r.u32()?;
        let out_group = r.u32()?;
        r.skip(4)?;
        let cookie = r.u64()?;
        let cookie_mask = r.u64()?;
        let match_ = Match::parse(r)?;
        Ok(FlowStatsRequest {
            table_id,
            out_port,
            out_group,
            cookie,
            cookie_mask,
            match_,
        })
    }
}

/// One flow of a FLOW reply (`struct ofp_flow_stats`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FlowStats {
    pub table_id: u8,
    pub duration_sec: u32,
    pub duration_nsec: u32,
    pub priority: u16,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub flags: u16,
    pub cookie: u64,
    pub packet_count: u64,
    pub byte_count: u64,
    pub match_: Match,
    pub instructions: Vec<Instruction>,
}

impl FlowStats {
    fn emit(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0, 0]);
        out.push(self.table_id);
        out.push(0);
        out.extend_from_slice(&self.duration_sec.to_be_bytes());
        out.extend_from_slice(&self.duration_nsec.to_be_bytes());
        out.extend_from_slice(&self.priority.to_be_bytes());
        out.extend_from_slice(&self.idle_timeout.to_be_bytes());
        out.extend_from_slice(&self.hard_timeout.to_be_bytes());
        out.extend_from_slice(&self.flags.to_be_bytes());
        put_zeros(out, 4);
        out.extend_from_slice(&self.cookie.to_be_bytes());
        out.extend_from_slice(&self.packet_count.to_be_bytes());
        out.extend_from_slice(&self.byte_count.to_be_bytes());
        self.match_.emit(out);
        emit_instructions(&self.instructions, out);
        let len = out.len() - start;
        patch_u16(out, start, len16(len));
    }

    fn parse(r: &mut Reader<'_>) -> Result<Self> {
        let len = r.u16()? as usize;
        if len < 56 {
            return Err(DecodeError::BadLength {
                what: "ofp_flow_stats",
                len,
            });
        }
        let mut b = r.sub(len - 2, "ofp_flow_stats")?;
        let table_id = b.u8()?;
        b.skip(1)?;
        let duration_sec = b.u32()?;
        let duration_nsec = b.u32()?;
        let priority = b.u16()?;
        let idle_timeout = b.u16()?;
        let hard_timeout = b.u16()?;
        let flags = b.u16()?;
        b.skip(4)?;
        let cookie = b.u64()?;
        let packet_count = b.u64()?;
        let byte_count = b.u64()?;
        let match_ = Match::parse(&mut b)?;
        let instructions = parse_instructions(&mut b)?;
        Ok(FlowStats {
            table_id,
            duration_sec,
            duration_nsec,
            priority,
            idle_timeout,
            hard_timeout,
            flags,
            cookie,
            packet_count,
            byte_count,
            match_,
            instructions,
        })
    }
}

/// `struct ofp_aggregate_stats_reply`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct AggregateStats {
    pub packet_count: u64,
    pub byte_count: u64,
    pub flow_count: u32,
}

/// `struct ofp_desc`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Desc {
    pub mfr_desc: String,
    pub hw_desc: String,
    pub sw_desc: String,
    pub serial_num: String,
    pub dp_desc: String,
}

const DESC_STR_LEN: usize = 256;
const SERIAL_NUM_LEN: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MultipartRequestBody {
    Desc,
    Flow(FlowStatsRequest),
    Aggregate(FlowStatsRequest),
    PortDesc,
    Other { mp_type: u16, body: Vec<u8> },
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MultipartRequest {
    pub flags: u16,
    pub body: MultipartRequestBody,
}

impl MultipartRequest {
    pub fn new(body: MultipartRequestBody) -> Self {
        MultipartRequest { flags: 0, body }
    }

    pub fn mp_type(&self) -> u16 {
        match &self.body {
            MultipartRequestBody::Desc => mp_type::DESC,
            MultipartRequestBody::Flow(_) => mp_type::FLOW,
            MultipartRequestBody::Aggregate(_) => mp_type::AGGREGATE,
            MultipartRequestBody::PortDesc => mp_type::PORT_DESC,
            MultipartRequestBody::Other { mp_type, .. } => *mp_type,
        }
    }

    pub(crate) fn emit_body(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.mp_type().to_be_bytes());
        out.extend_from_slice(&self.flags.to_be_bytes());
        put_zeros(out, 4);
        match &self.body {
            MultipartRequestBody::Desc | MultipartRequestBody::PortDesc => {}
            MultipartRequestBody::Flow(f) | MultipartRequestBody::Aggregate(f) => f.emit(out),
            MultipartRequestBody::Other { body, .. } => out.extend_from_slice(body),
        }
    }

    pub(crate) fn parse_body(r: &mut Reader<'_>) -> Result<Self> {
        let t = r.u16()?;
        let flags = r.u16()?;
        r.skip(4)?;
        let body = match t {
            mp_type::DESC => MultipartRequestBody::Desc,
            mp_type::PORT_DESC => MultipartRequestBody::PortDesc,
            mp_type::FLOW => MultipartRequestBody::Flow(FlowStatsRequest::parse(r)?),
            mp_type::AGGREGATE => MultipartRequestBody::Aggregate(FlowStatsRequest::parse(r)?),
            _ => MultipartRequestBody::Other {
                mp_type: t,
                body: r.rest().to_vec(),
            },
        };
        Ok(MultipartRequest { flags, body })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MultipartReplyBody {
    Desc(Desc),
    Flow(Vec<FlowStats>),
    Aggregate(AggregateStats),
    PortDesc(Vec<Port>),
    Other { mp_type: u16, body: Vec<u8> },
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MultipartReply {
    pub flags: u16,
    pub body: MultipartReplyBody,
}

impl MultipartReply {
    pub fn mp_type(&self) -> u16 {
        match &self.body {
            MultipartReplyBody::Desc(_) => mp_type::DESC,
            MultipartReplyBody::Flow(_) => mp_type::FLOW,
            MultipartReplyBody::Aggregate(_) => mp_type::AGGREGATE,
            MultipartReplyBody::PortDesc(_) => mp_type::PORT_DESC,
            MultipartReplyBody::Other { mp_type, .. } => *mp_type,
        }
    }

    pub fn more(&self) -> bool {
        self.flags & MPF_MORE != 0
    }

    /// Reassemble the parts of one reply (in arrival order) into one body. Array bodies (FLOW,
    /// PORT_DESC) are concatenated, raw bodies appended; for single-part types the last part
    /// wins. Parts of different types are an error: the peer broke the protocol.
    pub fn merge(parts: Vec<MultipartReply>) -> Result<MultipartReply> {
        let mut it = parts.into_iter();
        let Some(mut acc) = it.next() else {
            return Err(DecodeError::Invalid {
                what: "multipart reply",
                detail: "no parts to merge".into(),
            });
        };
        for p in it {
            if p.mp_type() != acc.mp_type() {
                return Err(DecodeError::Invalid {
                    what: "multipart reply",
                    detail: format!(
                        "part of type {} within a reply of type {}",
                        p.mp_type(),
                        acc.mp_type()
                    ),
                });
            }
            match (&mut acc.body, p.body) {
                (MultipartReplyBody::Flow(a), MultipartReplyBody::Flow(b)) => a.extend(b),
                (MultipartReplyBody::PortDesc(a), MultipartReplyBody::PortDesc(b)) => a.extend(b),
                (
                    MultipartReplyBody::Other { body: a, .. },
                    MultipartReplyBody::Other { body: b, .. },
                ) => a.extend(b),
                (slot, b) => *slot = b,
            }
        }
        acc.flags &= !MPF_MORE;
        Ok(acc)
    }

    pub(crate) fn emit_body(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.mp_type().to_be_bytes());
        out.extend_from_slice(&self.flags.to_be_bytes());
        put_zeros(out, 4);
        match &self.body {
            MultipartReplyBody::Desc(d) => {
                put_c_string(out, &d.mfr_desc, DESC_STR_LEN);
                put_c_string(out, &d.hw_desc, DESC_STR_LEN);
                put_c_string(out, &d.sw_desc, DESC_STR_LEN);
                put_c_string(out, &d.serial_num, SERIAL_NUM_LEN);
                put_c_string(out, &d.dp_desc, DESC_STR_LEN);
            }
            MultipartReplyBody::Flow(flows) => flows.iter().for_each(|f| f.emit(out)),
            MultipartReplyBody::Aggregate(a) => {
                out.extend_from_slice(&a.packet_count.to_be_bytes());
                out.extend_from_slice(&a.byte_count.to_be_bytes());
                out.extend_from_slice(&a.flow_count.to_be_bytes());
                put_zeros(out, 4);
            }
            MultipartReplyBody::PortDesc(ports) => ports.iter().for_each(|p| p.emit(out)),
            MultipartReplyBody::Other { body, .. } => out.extend_from_slice(body),
        }
    }

    pub(crate) fn parse_body(r: &mut Reader<'_>) -> Result<Self> {
        let t = r.u16()?;
        let flags = r.u16()?;
        r.skip(4)?;
        let body = match t {
            mp_type::DESC => MultipartReplyBody::Desc(Desc {
                mfr_desc: c_string(r.bytes(DESC_STR_LEN)?),
                hw_desc: c_string(r.bytes(DESC_STR_LEN)?),
                sw_desc: c_string(r.bytes(DESC_STR_LEN)?),
                serial_num: c_string(r.bytes(SERIAL_NUM_LEN)?),
                dp_desc: c_string(r.bytes(DESC_STR_LEN)?),
            }),
            mp_type::FLOW => {
                let mut flows = Vec::new();
                while !r.is_empty() {
                    flows.push(FlowStats::parse(r)?);
                }
                MultipartReplyBody::Flow(flows)
            }
            mp_type::AGGREGATE => {
                let a = AggregateStats {
                    packet_count: r.u64()?,
                    byte_count: r.u64()?,
                    flow_count: r.u32()?,
                };
                r.skip(4)?;
                MultipartReplyBody::Aggregate(a)
            }
            mp_type::PORT_DESC => {
                let mut ports = Vec::new();
                while !r.is_empty() {
                    ports.push(Port::parse(r)?);
                }
                MultipartReplyBody::PortDesc(ports)
            }
            _ => MultipartReplyBody::Other {
                mp_type: t,
                body: r.rest().to_vec(),
            },
        };
        Ok(MultipartReply { flags, body })
    }
}
