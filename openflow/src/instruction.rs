//! Instructions (`struct ofp_instruction_*`). Unknown types are kept raw.

use crate::action::{Action, emit_actions, parse_actions};
use crate::error::{DecodeError, Result};
use crate::wire::{Reader, len16, patch_u16, put_zeros};

pub mod instruction_type {
    pub const GOTO_TABLE: u16 = 1;
    pub const WRITE_METADATA: u16 = 2;
    pub const WRITE_ACTIONS: u16 = 3;
    pub const APPLY_ACTIONS: u16 = 4;
    pub const CLEAR_ACTIONS: u16 = 5;
    pub const METER: u16 = 6;
    pub const EXPERIMENTER: u16 = 0xffff;
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Instruction {
    GotoTable(u8),
    WriteMetadata {
        metadata: u64,
        mask: u64,
    },
    WriteActions(Vec<Action>),
    ApplyActions(Vec<Action>),
    ClearActions,
    Meter(u32),
    /// An instruction type we do not interpret: the bytes after type and length.
    Unknown {
        instruction_type: u16,
        data: Vec<u8>,
    },
}

impl Instruction {
    pub fn emit(&self, out: &mut Vec<u8>) {
        use instruction_type as t;
        let start = out.len();
        let head = |out: &mut Vec<u8>, ty: u16| {
            out.extend_from_slice(&ty.to_be_bytes());
            out.extend_from_slice(&[0, 0]);
        };
        match self {
            Instruction::GotoTable(table) => {
                head(out, t::GOTO_TABLE);
                out.push(*table);
                put_zeros(out, 3);
            }
            Instruction::WriteMetadata { metadata, mask } => {
                head(out, t::WRITE_METADATA);
                put_zeros(out, 4);
                out.extend_from_slice(&metadata.to_be_bytes());
                out.extend_from_slice(&mask.to_be_bytes());
            }
            Instruction::WriteActions(a) | Instruction::ApplyActions(a) => {
                let ty = if matches!(self, Instruction::WriteActions(_)) {
                    t::WRITE_ACTIONS
                } else {
                    t::APPLY_ACTIONS
                };
                head(out, ty);
                put_zeros(out, 4);
                emit_actions(a, out);
            }
            Instruction::ClearActions => {
                head(out, t::CLEAR_ACTIONS);
                put_zeros(out, 4);
            }
            Instruction::Meter(id) => {
                head(out, t::METER);
                out.extend_from_slice(&id.to_be_bytes());
            }
            Instruction::Unknown {
                instruction_type,
                data,
            } => {
                head(out, *instruction_type);
                out.extend_from_slice(data);
            }
        }
        let len = out.len() - start;
        patch_u16(out, start + 2, len16(len));
    }

    pub(crate) fn parse(r: &mut Reader<'_>) -> Result<Instruction> {
        use instruction_type as t;
        let ty = r.u16()?;
        let len = r.u16()? as usize;
        if len < 8 || !len.is_multiple_of(8) {
            return Err(DecodeError::BadLength {
                what: "instruction",
                len,
            });
        }
        let mut b = r.sub(len - 4, "instruction")?;
        let fixed = |want: usize| -> Result<()> {
            if len != want {
                return Err(DecodeError::BadLength {
                    what: "instruction",
                    len,
                });
            }
            Ok(())
        };
        Ok(match ty {
            t::GOTO_TABLE => {
                fixed(8)?;
                Instruction::GotoTable(b.u8()?)
            }
            t::WRITE_METADATA => {
                fixed(24)?;
                b.skip(4)?;
                Instruction::WriteMetadata {
                    metadata: b.u64()?,
                    mask: b.u64()?,
                }
            }
            t::WRITE_ACTIONS | t::APPLY_ACTIONS => {
                b.skip(4)?;
                let actions = parse_actions(&mut b)?;
                if ty == t::WRITE_ACTIONS {
                    Instruction::WriteActions(actions)
                } else {
                    Instruction::ApplyActions(actions)
                }
            }
            t::CLEAR_ACTIONS => {
                fixed(8)?;
                Instruction::ClearActions
            }
            t::METER => {
                fixed(8)?;
                Instruction::Meter(b.u32()?)
            }
            _ => Instruction::Unknown {
                instruction_type: ty,
                data: b.rest().to_vec(),
            },
        })
    }
}

pub fn emit_instructions(ins: &[Instruction], out: &mut Vec<u8>) {
    for i in ins {
        i.emit(out);
    }
}

pub(crate) fn parse_instructions(r: &mut Reader<'_>) -> Result<Vec<Instruction>> {
    let mut v = Vec::new();
    while !r.is_empty() {
        v.push(Instruction::parse(r)?);
    }
    Ok(v)
}
