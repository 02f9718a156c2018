//! Actions (`struct ofp_action_*`), including OXM set-field and the Nicira register move.
//! Unknown action types and unknown experimenter actions are kept raw and re-emitted as-is.

use crate::error::{DecodeError, Result};
use crate::oxm::OxmField;
use crate::wire::{Reader, len16, pad8, patch_u16, put_zeros};

/// `enum ofp_action_type` (1.3).
pub mod action_type {
    pub const OUTPUT: u16 = 0;
    pub const COPY_TTL_OUT: u16 = 11;
    pub const COPY_TTL_IN: u16 = 12;
    pub const SET_MPLS_TTL: u16 = 15;
    pub const DEC_MPLS_TTL: u16 = 16;
    pub const PUSH_VLAN: u16 = 17;
    pub const POP_VLAN: u16 = 18;
    pub const PUSH_MPLS: u16 = 19;
    pub const POP_MPLS: u16 = 20;
    pub const SET_QUEUE: u16 = 21;
    pub const GROUP: u16 = 22;
    pub const SET_NW_TTL: u16 = 23;
    pub const DEC_NW_TTL: u16 = 24;
    pub const SET_FIELD: u16 = 25;
    pub const PUSH_PBB: u16 = 26;
    pub const POP_PBB: u16 = 27;
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// Nicira's experimenter id (`NX_VENDOR_ID`).
pub const NX_VENDOR_ID: u32 = 0x0000_2320;
/// `NXAST_REG_MOVE`.
pub const NXAST_REG_MOVE: u16 = 6;
/// `NXAST_RESUBMIT_TABLE`.
pub const NXAST_RESUBMIT_TABLE: u16 = 14;
/// The 16-bit port number `NXAST_RESUBMIT_TABLE` takes for "the packet's input port".
pub const NX_RESUBMIT_IN_PORT: u16 = 0xfff8;

/// Reserved port numbers (`enum ofp_port_no`).
pub mod port {
    pub const MAX: u32 = 0xffff_ff00;
    pub const IN_PORT: u32 = 0xffff_fff8;
    pub const TABLE: u32 = 0xffff_fff9;
    pub const NORMAL: u32 = 0xffff_fffa;
    pub const FLOOD: u32 = 0xffff_fffb;
    pub const ALL: u32 = 0xffff_fffc;
    pub const CONTROLLER: u32 = 0xffff_fffd;
    pub const LOCAL: u32 = 0xffff_fffe;
    pub const ANY: u32 = 0xffff_ffff;
}

/// `OFPCML_NO_BUFFER`: send the whole packet to the controller.
pub const OFPCML_NO_BUFFER: u16 = 0xffff;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    Output {
        port: u32,
        max_len: u16,
    },
    CopyTtlOut,
    CopyTtlIn,
    SetMplsTtl(u8),
    DecMplsTtl,
    PushVlan(u16),
    PopVlan,
    PushMpls(u16),
    PopMpls(u16),
    SetQueue(u32),
    Group(u32),
    SetNwTtl(u8),
    DecNwTtl,
    SetField(OxmField),
    PushPbb(u16),
    PopPbb,
    /// Nicira `move:SRC[src_ofs..]->DST[dst_ofs..]`; `src`/`dst` are 32-bit NXM/OXM headers.
    RegMove {
        n_bits: u16,
        src_ofs: u16,
        dst_ofs: u16,
        src: u32,
        dst: u32,
    },
    /// Nicira `resubmit(,TABLE)`: look the packet up again, as the actions so far changed it,
    /// in `table` (from the input port when `in_port` is [`NX_RESUBMIT_IN_PORT`]).
    Resubmit {
        in_port: u16,
        table: u8,
    },
    /// An experimenter action we do not interpret: the bytes after the experimenter id.
    Experimenter {
        experimenter: u32,
        data: Vec<u8>,
    },
    /// An action type we do not interpret: the bytes after type and length.
    Unknown {
        action_type: u16,
        data: Vec<u8>,
    },
}

impl Action {
    /// `output:PORT`; to the controller the whole packet is sent.
    pub fn output(port: u32) -> Action {
        let max_len = if port == port::CONTROLLER {
            OFPCML_NO_BUFFER
        } else {
            0
        };
        Action::Output { port, max_len }
    }

    pub fn emit(&self, out: &mut Vec<u8>) {
        use action_type as t;
        let start = out.len();
        let u16be = |out: &mut Vec<u8>, v: u16| out.extend_from_slice(&v.to_be_bytes());
        let u32be = |out: &mut Vec<u8>, v: u32| out.extend_from_slice(&v.to_be_bytes());
        // type and a length placeholder, patched at the end.
        let head = |out: &mut Vec<u8>, ty: u16| {
            out.extend_from_slice(&ty.to_be_bytes());
            out.extend_from_slice(&[0, 0]);
        };
        match self {
            Action::Output { port, max_len } => {
                head(out, t::OUTPUT);
                u32be(out, *port);
                u16be(out, *max_len);
                put_zeros(out, 6);
            }
            Action::CopyTtlOut => Self::emit_bare(out, t::COPY_TTL_OUT),
            Action::CopyTtlIn => Self::emit_bare(out, t::COPY_TTL_IN),
            Action::DecMplsTtl => Self::emit_bare(out, t::DEC_MPLS_TTL),
            Action::PopVlan => Self::emit_bare(out, t::POP_VLAN),
            Action::DecNwTtl => Self::emit_bare(out, t::DEC_NW_TTL),
            Action::PopPbb => Self::emit_bare(out, t::POP_PBB),
            Action::SetMplsTtl(ttl) | Action::SetNwTtl(ttl) => {
                let ty = if matches!(self, Action::SetMplsTtl(_)) {
                    t::SET_MPLS_TTL
                } else {
                    t::SET_NW_TTL
                };
                head(out, ty);
                out.push(*ttl);
                put_zeros(out, 3);
            }
            Action::PushVlan(e) | Action::PushMpls(e) | Action::PopMpls(e) | Action::PushPbb(e) => {
                let ty = match self {
                    Action::PushVlan(_) => t::PUSH_VLAN,
                    Action::PushMpls(_) => t::PUSH_MPLS,
                    Action::PopMpls(_) => t::POP_MPLS,
                    _ => t::PUSH_PBB,
                };
                head(out, ty);
                u16be(out, *e);
                put_zeros(out, 2);
            }
            Action::SetQueue(v) | Action::Group(v) => {
                head(
                    out,
                    if matches!(self, Action::SetQueue(_)) {
                        t::SET_QUEUE
                    } else {
                        t::GROUP
                    },
                );
                u32be(out, *v);
            }
            Action::SetField(f) => {
                head(out, t::SET_FIELD);
                f.emit(out);
                let l = out.len() - start;
                put_zeros(out, pad8(l));
            }
            Action::RegMove {
                n_bits,
                src_ofs,
                dst_ofs,
                src,
                dst,
            } => {
                head(out, t::EXPERIMENTER);
                u32be(out, NX_VENDOR_ID);
                u16be(out, NXAST_REG_MOVE);
                u16be(out, *n_bits);
                u16be(out, *src_ofs);
                u16be(out, *dst_ofs);
                u32be(out, *src);
                u32be(out, *dst);
            }
            Action::Resubmit { in_port, table } => {
                head(out, t::EXPERIMENTER);
                u32be(out, NX_VENDOR_ID);
                u16be(out, NXAST_RESUBMIT_TABLE);
                u16be(out, *in_port);
                out.push(*table);
                put_zeros(out, 3);
            }
            Action::Experimenter { experimenter, data } => {
                head(out, t::EXPERIMENTER);
                u32be(out, *experimenter);
                out.extend_from_slice(data);
            }
            Action::Unknown { action_type, data } => {
                head(out, *action_type);
                out.extend_from_slice(data);
            }
        }
        let len = out.len() - start;
        patch_u16(out, start + 2, len16(len));
    }

    fn emit_bare(out: &mut Vec<u8>, ty: u16) {
        out.extend_from_slice(&ty.to_be_bytes());
        out.extend_from_slice(&8u16.to_be_bytes());
        put_zeros(out, 4);
    }

    pub fn encoded_len(&self) -> usize {
        let mut v = Vec::new();
        self.emit(&mut v);
        v.len()
    }

    pub(crate) fn parse(r: &mut Reader<'_>) -> Result<Action> {
        use action_type as t;
        let ty = r.u16()?;
        let len = r.u16()? as usize;
        if len < 8 || !len.is_multiple_of(8) {
            return Err(DecodeError::BadLength {
                what: "action",
                len,
            });
        }
        let mut b = r.sub(len - 4, "action")?;
        let fixed = |want: usize| -> Result<()> {
            if len != want {
                return Err(DecodeError::BadLength {
                    what: "action",
                    len,
                });
            }
            Ok(())
        };
        let a = match ty {
            t::OUTPUT => {
                fixed(16)?;
                let port = b.u32()?;
                let max_len = b.u16()?;
                Action::Output { port, max_len }
            }
            t::COPY_TTL_OUT => Action::CopyTtlOut,
            t::COPY_TTL_IN => Action::CopyTtlIn,
            t::DEC_MPLS_TTL => Action::DecMplsTtl,
            t::POP_VLAN => Action::PopVlan,
            t::DEC_NW_TTL => Action::DecNwTtl,
            t::POP_PBB => Action::PopPbb,
            t::SET_MPLS_TTL => Action::SetMplsTtl(b.u8()?),
            t::SET_NW_TTL => Action::SetNwTtl(b.u8()?),
            t::PUSH_VLAN => Action::PushVlan(b.u16()?),
            t::PUSH_MPLS => Action::PushMpls(b.u16()?),
            t::POP_MPLS => Action::PopMpls(b.u16()?),
            t::PUSH_PBB => Action::PushPbb(b.u16()?),
            t::SET_QUEUE => Action::SetQueue(b.u32()?),
            t::GROUP => Action::Group(b.u32()?),
            t::SET_FIELD => {
                let f = OxmField::parse(&mut b)?;
                if f.mask.is_some() {
                    return Err(DecodeError::Invalid {
                        what: "set_field action",
                        detail: "field carries a mask".into(),
                    });
                }
                // The rest is padding.
                Action::SetField(f)
            }
            t::EXPERIMENTER => {
                let experimenter = b.u32()?;
                let data = b.rest();
                match Self::parse_nx(experimenter, data)? {
                    Some(a) => a,
                    None => Action::Experimenter {
                        experimenter,
                        data: data.to_vec(),
                    },
                }
            }
            _ => Action::Unknown {
                action_type: ty,
                data: b.rest().to_vec(),
            },
        };
        Ok(a)
    }

    fn parse_nx(experimenter: u32, data: &[u8]) -> Result<Option<Action>> {
        if experimenter != NX_VENDOR_ID {
            return Ok(None);
        }
        let mut r = Reader::new(data, "nicira action");
        Ok(match (r.u16()?, data.len()) {
            (NXAST_REG_MOVE, 16) => Some(Action::RegMove {
                n_bits: r.u16()?,
                src_ofs: r.u16()?,
                dst_ofs: r.u16()?,
                src: r.u32()?,
                dst: r.u32()?,
            }),
            (NXAST_RESUBMIT_TABLE, 8) => Some(Action::Resubmit {
                in_port: r.u16()?,
                table: r.u8()?,
            }),
            _ => None,
        })
    }
}

/// Emit a list of actions back to back.
pub fn emit_actions(actions: &[Action], out: &mut Vec<u8>) {
    for a in actions {
        a.emit(out);
    }
}

/// Parse actions until the reader is empty.
pub(crate) fn parse_actions(r: &mut Reader<'_>) -> Result<Vec<Action>> {
    let mut v = Vec::new();
    while !r.is_empty() {
        v.push(Action::parse(r)?);
    }
    Ok(v)
}

/// Decode a standalone action list.
pub fn decode_actions(buf: &[u8]) -> Result<Vec<Action>> {
    parse_actions(&mut Reader::new(buf, "actions"))
}
