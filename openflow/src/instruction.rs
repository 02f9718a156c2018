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

/// `instructions` as Open vSwitch stores and reports them: an apply-actions instruction with no
/// action is no instruction (both are `drop`), and reg moves name their fields as OVS reports
/// them ([`crate::oxm::canonical_header`]). Flows compared in this form are equal exactly when
/// the switch holds the same flow, whichever of the equivalent forms was written.
pub fn canonical(mut instructions: Vec<Instruction>) -> Vec<Instruction> {
    instructions.retain(|i| !matches!(i, Instruction::ApplyActions(a) if a.is_empty()));
    for i in &mut instructions {
        if let Instruction::ApplyActions(actions) | Instruction::WriteActions(actions) = i {
            for a in actions {
                if let Action::RegMove { src, dst, .. } = a {
                    *src = crate::oxm::canonical_header(*src);
                    *dst = crate::oxm::canonical_header(*dst);
                }
            }
        }
    }
    instructions
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oxm::{OXM_CLASS_OPENFLOW_BASIC, canonical_header, field, oxm_header};

    #[test]
    fn canonical_is_the_form_ovs_reports() {
        let basic = |f, len| oxm_header(OXM_CLASS_OPENFLOW_BASIC, f, len);
        // The headers OVS reports for the moves vipflow writes.
        assert_eq!(canonical_header(basic(field::ETH_SRC, 6)), 0x0000_0406);
        assert_eq!(canonical_header(basic(field::ETH_DST, 6)), 0x0000_0206);
        assert_eq!(canonical_header(basic(field::ARP_SPA, 4)), 0x0000_2004);
        assert_eq!(canonical_header(basic(field::ARP_TPA, 4)), 0x0000_2204);
        assert_eq!(canonical_header(basic(field::ARP_SHA, 6)), 0x0001_2206);
        assert_eq!(canonical_header(basic(field::ARP_THA, 6)), 0x0001_2406);
        assert_eq!(canonical_header(basic(field::IPV6_SRC, 16)), 0x0001_2610);
        assert_eq!(canonical_header(basic(field::IPV6_DST, 16)), 0x0001_2810);
        // No NXM twin, a masked header, an NXM header: unchanged.
        for h in [
            basic(field::VLAN_VID, 2),
            basic(field::ETH_SRC, 6) | 0x100,
            0x0000_0406,
        ] {
            assert_eq!(canonical_header(h), h);
        }
        let mv = Action::RegMove {
            n_bits: 48,
            src_ofs: 0,
            dst_ofs: 0,
            src: basic(field::ETH_SRC, 6),
            dst: basic(field::ETH_DST, 6),
        };
        let got = canonical(vec![
            Instruction::ApplyActions(vec![]),
            Instruction::ApplyActions(vec![mv, Action::output(1)]),
            Instruction::GotoTable(3),
        ]);
        assert_eq!(
            got,
            [
                Instruction::ApplyActions(vec![
                    Action::RegMove {
                        n_bits: 48,
                        src_ofs: 0,
                        dst_ofs: 0,
                        src: 0x0000_0406,
                        dst: 0x0000_0206,
                    },
                    Action::output(1)
                ]),
                Instruction::GotoTable(3),
            ]
        );
        assert_eq!(canonical(vec![Instruction::ApplyActions(vec![])]), []);
    }
}
