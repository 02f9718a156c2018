//! `struct ofp_port` (PORT_DESC replies, PORT_STATUS) and its reason codes.

use crate::error::Result;
use crate::oxm::MacAddr;
use crate::wire::{Reader, c_string, put_c_string, put_zeros};

pub const PORT_LEN: usize = 64;
pub const PORT_NAME_LEN: usize = 16;

/// `enum ofp_port_state` bits.
pub mod port_state {
    pub const LINK_DOWN: u32 = 1 << 0;
    pub const BLOCKED: u32 = 1 << 1;
    pub const LIVE: u32 = 1 << 2;
}

/// `enum ofp_port_config` bits.
pub mod port_config {
    pub const PORT_DOWN: u32 = 1 << 0;
    pub const NO_RECV: u32 = 1 << 2;
    pub const NO_FWD: u32 = 1 << 5;
    pub const NO_PACKET_IN: u32 = 1 << 6;
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Port {
    pub port_no: u32,
    pub hw_addr: MacAddr,
    pub name: String,
    pub config: u32,
    pub state: u32,
    pub curr: u32,
    pub advertised: u32,
    pub supported: u32,
    pub peer: u32,
    pub curr_speed: u32,
    pub max_speed: u32,
}

impl Port {
    pub(crate) fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.port_no.to_be_bytes());
        put_zeros(out, 4);
        out.extend_from_slice(&self.hw_addr);
        put_zeros(out, 2);
        put_c_string(out, &self.name, PORT_NAME_LEN);
        for v in [
            self.config,
            self.state,
            self.curr,
            self.advertised,
            self.supported,
            self.peer,
            self.curr_speed,
            self.max_speed,
        ] {
            out.extend_from_slice(&v.to_be_bytes());
        }
    }

    pub(crate) fn parse(r: &mut Reader<'_>) -> Result<Port> {
        let mut p = r.sub(PORT_LEN, "ofp_port")?;
        let port_no = p.u32()?;
        p.skip(4)?;
        let hw_addr = p.array::<6>()?;
        p.skip(2)?;
        let name = c_string(p.bytes(PORT_NAME_LEN)?);
        Ok(Port {
            port_no,
            hw_addr,
            name,
            config: p.u32()?,
            state: p.u32()?,
            curr: p.u32()?,
            advertised: p.u32()?,
            supported: p.u32()?,
            peer: p.u32()?,
            curr_speed: p.u32()?,
            max_speed: p.u32()?,
        })
    }
}

/// `enum ofp_port_reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortReason {
    Add,
    Delete,
    Modify,
    Other(u8),
}

impl PortReason {
    pub fn from_u8(v: u8) -> Self {
        match v {
            0 => PortReason::Add,
            1 => PortReason::Delete,
            2 => PortReason::Modify,
            o => PortReason::Other(o),
        }
    }
    pub fn to_u8(self) -> u8 {
        match self {
            PortReason::Add => 0,
            PortReason::Delete => 1,
            PortReason::Modify => 2,
            PortReason::Other(o) => o,
        }
    }
}
