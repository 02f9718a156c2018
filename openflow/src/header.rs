//! The 8-byte OpenFlow header and the 1.3 message type numbers.

use crate::error::{DecodeError, Result};
use crate::wire::Reader;

pub const OFP_VERSION_1_3: u8 = 0x04;
pub const HEADER_LEN: usize = 8;

/// OpenFlow 1.3 message types (`enum ofp_type`).
pub mod msg_type {
    pub const HELLO: u8 = 0;
    pub const ERROR: u8 = 1;
    pub const ECHO_REQUEST: u8 = 2;
    pub const ECHO_REPLY: u8 = 3;
    pub const EXPERIMENTER: u8 = 4;
    pub const FEATURES_REQUEST: u8 = 5;
    pub const FEATURES_REPLY: u8 = 6;
    pub const GET_CONFIG_REQUEST: u8 = 7;
    pub const GET_CONFIG_REPLY: u8 = 8;
    pub const SET_CONFIG: u8 = 9;
    pub const PACKET_IN: u8 = 10;
    pub const FLOW_REMOVED: u8 = 11;
    pub const PORT_STATUS: u8 = 12;
    pub const PACKET_OUT: u8 = 13;
    pub const FLOW_MOD: u8 = 14;
    pub const GROUP_MOD: u8 = 15;
    pub const PORT_MOD: u8 = 16;
    pub const TABLE_MOD: u8 = 17;
    pub const MULTIPART_REQUEST: u8 = 18;
    pub const MULTIPART_REPLY: u8 = 19;
    pub const BARRIER_REQUEST: u8 = 20;
    pub const BARRIER_REPLY: u8 = 21;
    pub const ROLE_REQUEST: u8 = 24;
    pub const ROLE_REPLY: u8 = 25;
    pub const GET_ASYNC_REQUEST: u8 = 26;
    pub const GET_ASYNC_REPLY: u8 = 27;
    pub const SET_ASYNC: u8 = 28;
}

/// `struct ofp_header`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: u8,
    pub msg_type: u8,
    pub length: u16,
    pub xid: u32,
}

impl Header {
    /// Parse the first 8 bytes. Checks only that `length` is at least a header; whether the
    /// buffer holds `length` bytes is the caller's (the framer's) business.
    pub fn parse(buf: &[u8]) -> Result<Header> {
        let mut r = Reader::new(buf, "ofp_header");
        let h = Header {
            version: r.u8()?,
            msg_type: r.u8()?,
            length: r.u16()?,
            xid: r.u32()?,
        };
        if (h.length as usize) < HEADER_LEN {
            return Err(DecodeError::BadLength {
                what: "ofp_header",
                len: h.length as usize,
            });
        }
        Ok(h)
    }

    pub fn emit(&self, out: &mut Vec<u8>) {
        out.push(self.version);
        out.push(self.msg_type);
        out.extend_from_slice(&self.length.to_be_bytes());
        out.extend_from_slice(&self.xid.to_be_bytes());
    }
}
