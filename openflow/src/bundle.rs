//! The ONF bundle extension for OpenFlow 1.3 (ONF EXT-230), which Open vSwitch accepts: an
//! experimenter message (ONF id, type 2300 control / 2301 add) carrying the OpenFlow 1.4 bundle
//! bodies. A bundle applies many flow mods atomically: all or none.

use crate::error::{DecodeError, Result};
use crate::header::Header;
use crate::message::Message;
use crate::wire::Reader;

/// `ONF_EXPERIMENTER_ID` ("ONF\0").
pub const ONF_EXPERIMENTER_ID: u32 = 0x4f4e_4600;
/// `ONFT_BUNDLE_CONTROL`.
pub const ONFT_BUNDLE_CONTROL: u32 = 2300;
/// `ONFT_BUNDLE_ADD_MESSAGE`.
pub const ONFT_BUNDLE_ADD_MESSAGE: u32 = 2301;

/// `enum ofp14_bundle_ctrl_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BundleCtrlType {
    OpenRequest,
    OpenReply,
    CloseRequest,
    CloseReply,
    CommitRequest,
    CommitReply,
    DiscardRequest,
    DiscardReply,
    Other(u16),
}

impl BundleCtrlType {
    pub fn to_u16(self) -> u16 {
        match self {
            BundleCtrlType::OpenRequest => 0,
            BundleCtrlType::OpenReply => 1,
            BundleCtrlType::CloseRequest => 2,
            BundleCtrlType::CloseReply => 3,
            BundleCtrlType::CommitRequest => 4,
            BundleCtrlType::CommitReply => 5,
            BundleCtrlType::DiscardRequest => 6,
            BundleCtrlType::DiscardReply => 7,
            BundleCtrlType::Other(v) => v,
        }
    }

    pub fn from_u16(v: u16) -> Self {
        match v {
            0 => BundleCtrlType::OpenRequest,
            1 => BundleCtrlType::OpenReply,
            2 => BundleCtrlType::CloseRequest,
            3 => BundleCtrlType::CloseReply,
            4 => BundleCtrlType::CommitRequest,
            5 => BundleCtrlType::CommitReply,
            6 => BundleCtrlType::DiscardRequest,
            7 => BundleCtrlType::DiscardReply,
            o => BundleCtrlType::Other(o),
        }
    }
}

/// `enum ofp14_bundle_flags`.
pub mod bundle_flags {
    pub const ATOMIC: u16 = 1 << 0;
    pub const ORDERED: u16 = 1 << 1;
}

/// Bundle control (`struct ofp14_bundle_ctrl_msg` body).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BundleCtrl {
    pub bundle_id: u32,
    pub ctrl_type: BundleCtrlType,
    pub flags: u16,
    /// Bundle properties, raw.
    pub properties: Vec<u8>,
}

impl BundleCtrl {
    pub fn new(bundle_id: u32, ctrl_type: BundleCtrlType, flags: u16) -> Self {
        BundleCtrl {
            bundle_id,
            ctrl_type,
            flags,
            properties: Vec::new(),
        }
    }

    pub(crate) fn emit_body(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.bundle_id.to_be_bytes());
        out.extend_from_slice(&self.ctrl_type.to_u16().to_be_bytes());
        out.extend_from_slice(&self.flags.to_be_bytes());
        out.extend_from_slice(&self.properties);
    }

    pub(crate) fn parse_body(r: &mut Reader<'_>) -> Result<Self> {
        Ok(BundleCtrl {
            bundle_id: r.u32()?,
            ctrl_type: BundleCtrlType::from_u16(r.u16()?),
            flags: r.u16()?,
            properties: r.rest().to_vec(),
        })
    }
}

/// Bundle add (`struct ofp14_bundle_add_msg` body): one message to apply with the bundle. On
/// the wire the inner message carries the same xid as the outer one (Open vSwitch checks it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BundleAdd {
    pub bundle_id: u32,
    pub flags: u16,
    pub message: Box<Message>,
}

impl BundleAdd {
    pub fn new(bundle_id: u32, flags: u16, message: Message) -> Self {
        BundleAdd {
            bundle_id,
            flags,
            message: Box::new(message),
        }
    }

    pub(crate) fn emit_body(&self, xid: u32, out: &mut Vec<u8>) {
        emit_add_body(self.bundle_id, self.flags, &self.message, xid, out);
    }

    pub(crate) fn parse_body(r: &mut Reader<'_>) -> Result<Self> {
        let bundle_id = r.u32()?;
        r.skip(2)?;
        let flags = r.u16()?;
        let inner = r.rest();
        let h = Header::parse(inner)?;
        if (h.length as usize) > inner.len() {
            return Err(DecodeError::Truncated {
                what: "bundled message",
                need: h.length as usize,
                have: inner.len(),
            });
        }
        // Refuse nesting before decoding, so crafted input cannot recurse deeply.
        let mut peek = Reader::new(inner, "bundled message");
        peek.skip(8)?;
        if h.msg_type == crate::header::msg_type::EXPERIMENTER
            && peek.u32().ok() == Some(ONF_EXPERIMENTER_ID)
            && peek.u32().ok() == Some(ONFT_BUNDLE_ADD_MESSAGE)
        {
            return Err(DecodeError::Invalid {
                what: "bundle add",
                detail: "a bundle add inside a bundle add".into(),
            });
        }
        // Anything after the inner message is bundle properties, which we do not use.
        let (_, message) = Message::decode(&inner[..h.length as usize])?;
        Ok(BundleAdd {
            bundle_id,
            flags,
            message: Box::new(message),
        })
    }
}

/// The body of a bundle add for a borrowed message, so callers adding many messages to a
/// bundle need not clone each into a [`BundleAdd`].
pub(crate) fn emit_add_body(bundle_id: u32, flags: u16, m: &Message, xid: u32, out: &mut Vec<u8>) {
    out.extend_from_slice(&bundle_id.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&flags.to_be_bytes());
    m.encode_into(xid, out);
}
