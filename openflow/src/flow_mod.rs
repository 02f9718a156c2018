//! FLOW_MOD (`struct ofp_flow_mod`).

use crate::action::port;
use crate::error::{DecodeError, Result};
use crate::instruction::{Instruction, emit_instructions, parse_instructions};
use crate::oxm::Match;
use crate::wire::Reader;

/// `OFP_NO_BUFFER`.
pub const NO_BUFFER: u32 = 0xffff_ffff;
/// `OFPG_ANY`.
pub const GROUP_ANY: u32 = 0xffff_ffff;
/// `OFPTT_ALL`: every table (delete and stats requests).
pub const TABLE_ALL: u8 = 0xff;

/// `enum ofp_flow_mod_command`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FlowModCommand {
    Add,
    Modify,
    ModifyStrict,
    Delete,
    DeleteStrict,
}

impl FlowModCommand {
    pub fn to_u8(self) -> u8 {
        match self {
            FlowModCommand::Add => 0,
            FlowModCommand::Modify => 1,
            FlowModCommand::ModifyStrict => 2,
            FlowModCommand::Delete => 3,
            FlowModCommand::DeleteStrict => 4,
        }
    }

    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => FlowModCommand::Add,
            1 => FlowModCommand::Modify,
            2 => FlowModCommand::ModifyStrict,
            3 => FlowModCommand::Delete,
            4 => FlowModCommand::DeleteStrict,
            _ => return None,
        })
    }
}

/// `enum ofp_flow_mod_flags`.
pub mod flow_mod_flags {
    pub const SEND_FLOW_REM: u16 = 1 << 0;
    pub const CHECK_OVERLAP: u16 = 1 << 1;
    pub const RESET_COUNTS: u16 = 1 << 2;
    pub const NO_PKT_COUNTS: u16 = 1 << 3;
    pub const NO_BYT_COUNTS: u16 = 1 << 4;
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FlowMod {
    pub cookie: u64,
    pub cookie_mask: u64,
    pub table_id: u8,
    pub command: FlowModCommand,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub priority: u16,
    pub buffer_id: u32,
    pub out_port: u32,
    pub out_group: u32,
    pub flags: u16,
    pub match_: Match,
    pub instructions: Vec<Instruction>,
}

impl Default for FlowMod {
    fn default() -> Self {
        FlowMod {
            cookie: 0,
            cookie_mask: 0,
            table_id: 0,
            command: FlowModCommand::Add,
            idle_timeout: 0,
            hard_timeout: 0,
            priority: 0x8000,
            buffer_id: NO_BUFFER,
            out_port: port::ANY,
            out_group: GROUP_ANY,
            flags: 0,
            match_: Match::default(),
            instructions: Vec::new(),
        }
    }
}

impl FlowMod {
    /// An ADD of one flow.
    pub fn add(
        table_id: u8,
        priority: u16,
        cookie: u64,
        match_: Match,
        instructions: Vec<Instruction>,
    ) -> Self {
        FlowMod {
            cookie,
            table_id,
            priority,
            match_,
            instructions,
            ..FlowMod::default()
        }
    }

    /// A DELETE of every flow (any table) whose cookie matches `cookie` under `mask`.
    pub fn delete_by_cookie(cookie: u64, mask: u64) -> Self {
        FlowMod {
            cookie,
            cookie_mask: mask,
            table_id: TABLE_ALL,
            command: FlowModCommand::Delete,
            ..FlowMod::default()
        }
    }

    /// A DELETE_STRICT of exactly one flow, by (table, priority, match), limited to flows
    /// carrying `cookie` under `mask` so a foreign flow with the same match is left alone.
    pub fn delete_strict(
        table_id: u8,
        priority: u16,
        match_: Match,
        cookie: u64,
        mask: u64,
    ) -> Self {
        FlowMod {
            cookie,
            cookie_mask: mask,
            table_id,
            priority,
            match_,
            command: FlowModCommand::DeleteStrict,
            ..FlowMod::default()
        }
    }

    pub(crate) fn emit_body(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.cookie.to_be_bytes());
        out.extend_from_slice(&self.cookie_mask.to_be_bytes());
        out.push(self.table_id);
        out.push(self.command.to_u8());
        out.extend_from_slice(&self.idle_timeout.to_be_bytes());
        out.extend_from_slice(&self.hard_timeout.to_be_bytes());
        out.extend_from_slice(&self.priority.to_be_bytes());
        out.extend_from_slice(&self.buffer_id.to_be_bytes());
        out.extend_from_slice(&self.out_port.to_be_bytes());
        out.extend_from_slice(&self.out_group.to_be_bytes());
        out.extend_from_slice(&self.flags.to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        self.match_.emit(out);
        emit_instructions(&self.instructions, out);
    }

    pub(crate) fn parse_body(r: &mut Reader<'_>) -> Result<FlowMod> {
        let cookie = r.u64()?;
        let cookie_mask = r.u64()?;
        let table_id = r.u8()?;
        let cmd = r.u8()?;
        let command = FlowModCommand::from_u8(cmd).ok_or_else(|| DecodeError::Invalid {
            what: "flow_mod",
            detail: format!("unknown command {cmd}"),
        })?;
        let idle_timeout = r.u16()?;
        let hard_timeout = r.u16()?;
        let priority = r.u16()?;
        let buffer_id = r.u32()?;
        let out_port = r.u32()?;
        let out_group = r.u32()?;
        let flags = r.u16()?;
        r.skip(2)?;
        let match_ = Match::parse(r)?;
        let instructions = parse_instructions(r)?;
        Ok(FlowMod {
            cookie,
            cookie_mask,
            table_id,
            command,
            idle_timeout,
            hard_timeout,
            priority,
            buffer_id,
            out_port,
            out_group,
            flags,
            match_,
            instructions,
        })
    }
}
