//! The OpenFlow 1.3 messages vipflow sends and receives, as one owned enum with `encode` and
//! `decode`. Decoding checks the header length against the buffer once, then parses the body
//! through a bounded reader; anything malformed is a [`DecodeError`], never a panic.

use crate::action::{Action, emit_actions, parse_actions};
use crate::bundle::{
    BundleAdd, BundleCtrl, ONF_EXPERIMENTER_ID, ONFT_BUNDLE_ADD_MESSAGE, ONFT_BUNDLE_CONTROL,
};
use crate::error::{DecodeError, Result};
use crate::flow_mod::FlowMod;
use crate::header::{HEADER_LEN, Header, OFP_VERSION_1_3, msg_type};
use crate::multipart::{MultipartReply, MultipartRequest};
use crate::oxm::Match;
use crate::port::{Port, PortReason};
use crate::wire::{Reader, len16, pad8, patch_u16, put_zeros};

/// `OFPHET_VERSIONBITMAP`.
const HELLO_ELEM_VERSIONBITMAP: u16 = 1;

/// HELLO: the versions the sender supports (a version bitmap element), if it sent one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Hello {
    /// Bitmap words: bit `v` of word `v / 32` is set when version `v` is supported.
    pub version_bitmap: Vec<u32>,
}

impl Hello {
    /// A HELLO announcing exactly OpenFlow 1.3.
    pub fn of13() -> Self {
        Hello {
            version_bitmap: vec![1 << OFP_VERSION_1_3],
        }
    }

    pub fn supports(&self, version: u8) -> bool {
        let word = (version / 32) as usize;
        self.version_bitmap
            .get(word)
            .is_some_and(|w| w & (1 << (version % 32)) != 0)
    }
}

/// ERROR (`struct ofp_error_msg`, or `ofp_error_experimenter_msg` when `err_type` is 0xffff).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ErrorMsg {
    pub err_type: u16,
    /// The code, or for experimenter errors the experimenter's code.
    pub code: u16,
    /// Set for experimenter errors (type 0xffff).
    pub experimenter: Option<u32>,
    /// Usually the start of the request that failed.
    pub data: Vec<u8>,
}

pub const OFPET_EXPERIMENTER: u16 = 0xffff;

/// Error types (`enum ofp_error_type`) used by the connection.
pub mod error_type {
    pub const HELLO_FAILED: u16 = 0;
    pub const BAD_REQUEST: u16 = 1;
    pub const BAD_ACTION: u16 = 2;
    pub const BAD_INSTRUCTION: u16 = 3;
    pub const BAD_MATCH: u16 = 4;
    pub const FLOW_MOD_FAILED: u16 = 5;
}

impl ErrorMsg {
    /// Header of the failed request echoed in `data`, when there is one.
    pub fn failed_request(&self) -> Option<Header> {
        Header::parse(&self.data).ok()
    }
}

impl std::fmt::Display for ErrorMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.experimenter {
            Some(e) => write!(f, "experimenter {e:#010x} error code {}", self.code),
            None => write!(
                f,
                "{} (type {}, code {})",
                error_name(self.err_type, self.code),
                self.err_type,
                self.code
            ),
        }
    }
}

/// A readable name for the common error codes (as OVS's OFPERR_* names).
pub fn error_name(err_type: u16, code: u16) -> &'static str {
    match (err_type, code) {
        (0, 0) => "OFPHFC_INCOMPATIBLE",
        (0, 1) => "OFPHFC_EPERM",
        (1, 0) => "OFPBRC_BAD_VERSION",
        (1, 1) => "OFPBRC_BAD_TYPE",
        (1, 2) => "OFPBRC_BAD_MULTIPART",
        (1, 3) => "OFPBRC_BAD_EXPERIMENTER",
        (1, 4) => "OFPBRC_BAD_EXP_TYPE",
        (1, 5) => "OFPBRC_EPERM",
        (1, 6) => "OFPBRC_BAD_LEN",
        (1, 8) => "OFPBRC_BUFFER_UNKNOWN",
        (1, 9) => "OFPBRC_BAD_TABLE_ID",
        (1, 11) => "OFPBRC_BAD_PORT",
        (2, 0) => "OFPBAC_BAD_TYPE",
        (2, 1) => "OFPBAC_BAD_LEN",
        (2, 4) => "OFPBAC_BAD_OUT_PORT",
        (2, 5) => "OFPBAC_BAD_ARGUMENT",
        (2, 13) => "OFPBAC_MATCH_INCONSISTENT",
        (2, 15) => "OFPBAC_BAD_SET_TYPE",
        (3, 0) => "OFPBIC_UNKNOWN_INST",
        (3, 2) => "OFPBIC_BAD_TABLE_ID",
        (4, 0) => "OFPBMC_BAD_TYPE",
        (4, 1) => "OFPBMC_BAD_LEN",
        (4, 3) => "OFPBMC_BAD_DL_ADDR_MASK",
        (4, 4) => "OFPBMC_BAD_NW_ADDR_MASK",
        (4, 5) => "OFPBMC_BAD_WILDCARDS",
        (4, 6) => "OFPBMC_BAD_FIELD",
        (4, 7) => "OFPBMC_BAD_VALUE",
        (4, 8) => "OFPBMC_BAD_MASK",
        (4, 9) => "OFPBMC_BAD_PREREQ",
        (4, 10) => "OFPBMC_DUP_FIELD",
        (5, 0) => "OFPFMFC_UNKNOWN",
        (5, 1) => "OFPFMFC_TABLE_FULL",
        (5, 2) => "OFPFMFC_BAD_TABLE_ID",
        (5, 3) => "OFPFMFC_OVERLAP",
        (5, 4) => "OFPFMFC_EPERM",
        (5, 5) => "OFPFMFC_BAD_TIMEOUT",
        (5, 6) => "OFPFMFC_BAD_COMMAND",
        (5, 7) => "OFPFMFC_BAD_FLAGS",
        _ => "error",
    }
}

/// FEATURES_REPLY (`struct ofp_switch_features`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SwitchFeatures {
    pub datapath_id: u64,
    pub n_buffers: u32,
    pub n_tables: u8,
    pub auxiliary_id: u8,
    pub capabilities: u32,
}

/// GET_CONFIG_REPLY / SET_CONFIG (`struct ofp_switch_config`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SwitchConfig {
    pub flags: u16,
    pub miss_send_len: u16,
}

/// SET_ASYNC / GET_ASYNC_REPLY (`struct ofp_async_config`): which asynchronous messages this
/// connection receives, by reason bit; index 0 applies in the master/equal role, 1 as slave.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct AsyncConfig {
    pub packet_in_mask: [u32; 2],
    pub port_status_mask: [u32; 2],
    pub flow_removed_mask: [u32; 2],
}

impl AsyncConfig {
    /// PORT_STATUS for every reason (add, delete, modify), nothing else.
    pub fn port_status_only() -> Self {
        AsyncConfig {
            port_status_mask: [0b111, 0b111],
            ..Default::default()
        }
    }
}

/// PACKET_IN (`struct ofp_packet_in`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PacketIn {
    pub buffer_id: u32,
    pub total_len: u16,
    pub reason: u8,
    pub table_id: u8,
    pub cookie: u64,
    pub match_: Match,
    pub data: Vec<u8>,
}

/// PACKET_OUT (`struct ofp_packet_out`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PacketOut {
    pub buffer_id: u32,
    pub in_port: u32,
    pub actions: Vec<Action>,
    pub data: Vec<u8>,
}

/// PORT_STATUS (`struct ofp_port_status`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PortStatus {
    pub reason: PortReason,
    pub port: Port,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Message {
    Hello(Hello),
    Error(ErrorMsg),
    EchoRequest(Vec<u8>),
    EchoReply(Vec<u8>),
    FeaturesRequest,
    FeaturesReply(SwitchFeatures),
    GetConfigRequest,
    GetConfigReply(SwitchConfig),
    SetConfig(SwitchConfig),
    GetAsyncRequest,
    GetAsyncReply(AsyncConfig),
    SetAsync(AsyncConfig),
    PacketIn(PacketIn),
    PortStatus(PortStatus),
    PacketOut(PacketOut),
    FlowMod(FlowMod),
    MultipartRequest(MultipartRequest),
    MultipartReply(MultipartReply),
    BarrierRequest,
    BarrierReply,
    BundleControl(BundleCtrl),
    BundleAdd(BundleAdd),
    /// An experimenter message we do not interpret.
    Experimenter {
        experimenter: u32,
        exp_type: u32,
        data: Vec<u8>,
    },
    /// A message type we do not interpret: the body after the header.
    Other {
        msg_type: u8,
        body: Vec<u8>,
    },
}

impl Message {
    pub fn msg_type(&self) -> u8 {
        use msg_type as t;
        match self {
            Message::Hello(_) => t::HELLO,
            Message::Error(_) => t::ERROR,
            Message::EchoRequest(_) => t::ECHO_REQUEST,
            Message::EchoReply(_) => t::ECHO_REPLY,
            Message::FeaturesRequest => t::FEATURES_REQUEST,
            Message::FeaturesReply(_) => t::FEATURES_REPLY,
            Message::GetConfigRequest => t::GET_CONFIG_REQUEST,
            Message::GetConfigReply(_) => t::GET_CONFIG_REPLY,
            Message::SetConfig(_) => t::SET_CONFIG,
            Message::GetAsyncRequest => t::GET_ASYNC_REQUEST,
            Message::GetAsyncReply(_) => t::GET_ASYNC_REPLY,
            Message::SetAsync(_) => t::SET_ASYNC,
            Message::PacketIn(_) => t::PACKET_IN,
            Message::PortStatus(_) => t::PORT_STATUS,
            Message::PacketOut(_) => t::PACKET_OUT,
            Message::FlowMod(_) => t::FLOW_MOD,
            Message::MultipartRequest(_) => t::MULTIPART_REQUEST,
            Message::MultipartReply(_) => t::MULTIPART_REPLY,
            Message::BarrierRequest => t::BARRIER_REQUEST,
            Message::BarrierReply => t::BARRIER_REPLY,
            Message::BundleControl(_) | Message::BundleAdd(_) | Message::Experimenter { .. } => {
                t::EXPERIMENTER
            }
            Message::Other { msg_type, .. } => *msg_type,
        }
    }

    /// Encode as a complete message with `xid`, appended to `out` (so many messages can share
    /// one write buffer).
    pub fn encode_into(&self, xid: u32, out: &mut Vec<u8>) {
        Self::frame_into(self.msg_type(), xid, out, |out| self.emit_body(xid, out));
    }

    /// Frame a body written by `body` as a message of type `msg_type` (header and length).
    pub(crate) fn frame_into(
        msg_type: u8,
        xid: u32,
        out: &mut Vec<u8>,
        body: impl FnOnce(&mut Vec<u8>),
    ) {
        let start = out.len();
        Header {
            version: OFP_VERSION_1_3,
            msg_type,
            length: 0,
            xid,
        }
        .emit(out);
        body(out);
        let len = out.len() - start;
        patch_u16(out, start + 2, len16(len));
    }

    pub fn encode(&self, xid: u32) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        self.encode_into(xid, &mut out);
        out
    }

    fn emit_body(&self, xid: u32, out: &mut Vec<u8>) {
        match self {
            Message::Hello(h) => {
                if !h.version_bitmap.is_empty() {
                    let start = out.len();
                    out.extend_from_slice(&HELLO_ELEM_VERSIONBITMAP.to_be_bytes());
                    out.extend_from_slice(&len16(4 + 4 * h.version_bitmap.len()).to_be_bytes());
                    for w in &h.version_bitmap {
                        out.extend_from_slice(&w.to_be_bytes());
                    }
                    put_zeros(out, pad8(out.len() - start));
                }
            }
            Message::Error(e) => {
                out.extend_from_slice(&e.err_type.to_be_bytes());
                out.extend_from_slice(&e.code.to_be_bytes());
                if let Some(exp) = e.experimenter {
                    out.extend_from_slice(&exp.to_be_bytes());
                }
                out.extend_from_slice(&e.data);
            }
            Message::EchoRequest(d) | Message::EchoReply(d) => out.extend_from_slice(d),
            Message::FeaturesRequest
            | Message::GetConfigRequest
            | Message::GetAsyncRequest
            | Message::BarrierRequest
            | Message::BarrierReply => {}
            Message::FeaturesReply(f) => {
                out.extend_from_slice(&f.datapath_id.to_be_bytes());
                out.extend_from_slice(&f.n_buffers.to_be_bytes());
                out.push(f.n_tables);
                out.push(f.auxiliary_id);
                put_zeros(out, 2);
                out.extend_from_slice(&f.capabilities.to_be_bytes());
                put_zeros(out, 4);
            }
            Message::GetConfigReply(c) | Message::SetConfig(c) => {
                out.extend_from_slice(&c.flags.to_be_bytes());
                out.extend_from_slice(&c.miss_send_len.to_be_bytes());
            }
            Message::GetAsyncReply(a) | Message::SetAsync(a) => {
                for w in a
                    .packet_in_mask
                    .iter()
                    .chain(&a.port_status_mask)
                    .chain(&a.flow_removed_mask)
                {
                    out.extend_from_slice(&w.to_be_bytes());
                }
            }
            Message::PacketIn(p) => {
                out.extend_from_slice(&p.buffer_id.to_be_bytes());
                out.extend_from_slice(&p.total_len.to_be_bytes());
                out.push(p.reason);
                out.push(p.table_id);
                out.extend_from_slice(&p.cookie.to_be_bytes());
                p.match_.emit(out);
                put_zeros(out, 2);
                out.extend_from_slice(&p.data);
            }
            Message::PortStatus(s) => {
                out.push(s.reason.to_u8());
                put_zeros(out, 7);
                s.port.emit(out);
            }
            Message::PacketOut(p) => {
                out.extend_from_slice(&p.buffer_id.to_be_bytes());
                out.extend_from_slice(&p.in_port.to_be_bytes());
                let len_at = out.len();
                out.extend_from_slice(&[0, 0]);
                put_zeros(out, 6);
                let actions_start = out.len();
                emit_actions(&p.actions, out);
                let alen = out.len() - actions_start;
                patch_u16(out, len_at, len16(alen));
                out.extend_from_slice(&p.data);
            }
            Message::FlowMod(f) => f.emit_body(out),
            Message::MultipartRequest(m) => m.emit_body(out),
            Message::MultipartReply(m) => m.emit_body(out),
            Message::BundleControl(b) => {
                out.extend_from_slice(&ONF_EXPERIMENTER_ID.to_be_bytes());
                out.extend_from_slice(&ONFT_BUNDLE_CONTROL.to_be_bytes());
                b.emit_body(out);
            }
            Message::BundleAdd(b) => {
                out.extend_from_slice(&ONF_EXPERIMENTER_ID.to_be_bytes());
                out.extend_from_slice(&ONFT_BUNDLE_ADD_MESSAGE.to_be_bytes());
                b.emit_body(xid, out);
            }
            Message::Experimenter {
                experimenter,
                exp_type,
                data,
            } => {
                out.extend_from_slice(&experimenter.to_be_bytes());
                out.extend_from_slice(&exp_type.to_be_bytes());
                out.extend_from_slice(data);
            }
            Message::Other { body, .. } => out.extend_from_slice(body),
        }
    }

    /// Decode one complete message from the front of `buf` (which must hold at least the
    /// header's length; bytes after it are ignored). HELLO and ERROR are accepted in any
    /// version, as version negotiation needs them; every other message must be 1.3.
    pub fn decode(buf: &[u8]) -> Result<(Header, Message)> {
        let h = Header::parse(buf)?;
        let len = h.length as usize;
        if buf.len() < len {
            return Err(DecodeError::Truncated {
                what: "message",
                need: len,
                have: buf.len(),
            });
        }
        if h.version != OFP_VERSION_1_3
            && h.msg_type != msg_type::HELLO
            && h.msg_type != msg_type::ERROR
        {
            return Err(DecodeError::Version(h.version));
        }
        let mut r = Reader::new(&buf[HEADER_LEN..len], "message body");
        let m = Self::parse_body(h.msg_type, &mut r)?;
        Ok((h, m))
    }

    fn parse_body(ty: u8, r: &mut Reader<'_>) -> Result<Message> {
        use msg_type as t;
        Ok(match ty {
            t::HELLO => {
                let mut version_bitmap = Vec::new();
                // Elements are TLVs; unknown ones are skipped, as the spec requires.
                while r.remaining() >= 4 {
                    let et = r.u16()?;
                    let el = r.u16()? as usize;
                    if el < 4 {
                        return Err(DecodeError::BadLength {
                            what: "hello element",
                            len: el,
                        });
                    }
                    let mut e = r.sub(el - 4, "hello element")?;
                    if et == HELLO_ELEM_VERSIONBITMAP {
                        while e.remaining() >= 4 {
                            version_bitmap.push(e.u32()?);
                        }
                    }
                    let pad = pad8(el).min(r.remaining());
                    r.skip(pad)?;
                }
                Message::Hello(Hello { version_bitmap })
            }
            t::ERROR => {
                let err_type = r.u16()?;
                let code = r.u16()?;
                let experimenter = if err_type == OFPET_EXPERIMENTER {
                    Some(r.u32()?)
                } else {
                    None
                };
                Message::Error(ErrorMsg {
                    err_type,
                    code,
                    experimenter,
                    data: r.rest().to_vec(),
                })
            }
            t::ECHO_REQUEST => Message::EchoRequest(r.rest().to_vec()),
            t::ECHO_REPLY => Message::EchoReply(r.rest().to_vec()),
            t::FEATURES_REQUEST => Message::FeaturesRequest,
            t::FEATURES_REPLY => {
                let datapath_id = r.u64()?;
                let n_buffers = r.u32()?;
                let n_tables = r.u8()?;
                let auxiliary_id = r.u8()?;
                r.skip(2)?;
                let capabilities = r.u32()?;
                r.skip(4)?;
                Message::FeaturesReply(SwitchFeatures {
                    datapath_id,
                    n_buffers,
                    n_tables,
                    auxiliary_id,
                    capabilities,
                })
            }
            t::GET_CONFIG_REQUEST => Message::GetConfigRequest,
            t::GET_ASYNC_REQUEST => Message::GetAsyncRequest,
            t::GET_ASYNC_REPLY | t::SET_ASYNC => {
                let mut w = [0u32; 6];
                for v in &mut w {
                    *v = r.u32()?;
                }
                let a = AsyncConfig {
                    packet_in_mask: [w[0], w[1]],
                    port_status_mask: [w[2], w[3]],
                    flow_removed_mask: [w[4], w[5]],
                };
                if ty == t::SET_ASYNC {
                    Message::SetAsync(a)
                } else {
                    Message::GetAsyncReply(a)
                }
            }
            t::GET_CONFIG_REPLY | t::SET_CONFIG => {
                let c = SwitchConfig {
                    flags: r.u16()?,
                    miss_send_len: r.u16()?,
                };
                if ty == t::SET_CONFIG {
                    Message::SetConfig(c)
                } else {
                    Message::GetConfigReply(c)
                }
            }
            t::PACKET_IN => {
                let buffer_id = r.u32()?;
                let total_len = r.u16()?;
                let reason = r.u8()?;
                let table_id = r.u8()?;
                let cookie = r.u64()?;
                let match_ = Match::parse(r)?;
                r.skip(2)?;
                Message::PacketIn(PacketIn {
                    buffer_id,
                    total_len,
                    reason,
                    table_id,
                    cookie,
                    match_,
                    data: r.rest().to_vec(),
                })
            }
            t::PORT_STATUS => {
                let reason = PortReason::from_u8(r.u8()?);
                r.skip(7)?;
                Message::PortStatus(PortStatus {
                    reason,
                    port: Port::parse(r)?,
                })
            }
            t::PACKET_OUT => {
                let buffer_id = r.u32()?;
                let in_port = r.u32()?;
                let alen = r.u16()? as usize;
                r.skip(6)?;
                let actions = parse_actions(&mut r.sub(alen, "packet_out actions")?)?;
                Message::PacketOut(PacketOut {
                    buffer_id,
                    in_port,
                    actions,
                    data: r.rest().to_vec(),
                })
            }
            t::FLOW_MOD => Message::FlowMod(FlowMod::parse_body(r)?),
            t::MULTIPART_REQUEST => Message::MultipartRequest(MultipartRequest::parse_body(r)?),
            t::MULTIPART_REPLY => Message::MultipartReply(MultipartReply::parse_body(r)?),
            t::BARRIER_REQUEST => Message::BarrierRequest,
            t::BARRIER_REPLY => Message::BarrierReply,
            t::EXPERIMENTER => {
                let experimenter = r.u32()?;
                let exp_type = r.u32()?;
                match (experimenter, exp_type) {
                    (ONF_EXPERIMENTER_ID, ONFT_BUNDLE_CONTROL) => {
                        Message::BundleControl(BundleCtrl::parse_body(r)?)
                    }
                    (ONF_EXPERIMENTER_ID, ONFT_BUNDLE_ADD_MESSAGE) => {
                        Message::BundleAdd(BundleAdd::parse_body(r)?)
                    }
                    _ => Message::Experimenter {
                        experimenter,
                        exp_type,
                        data: r.rest().to_vec(),
                    },
                }
            }
            _ => Message::Other {
                msg_type: ty,
                body: r.rest().to_vec(),
            },
        })
    }
}
