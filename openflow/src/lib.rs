//! OpenFlow 1.3 for vipflow: a sans-IO wire layer, the ovs-ofctl text form, and a thin async
//! connection.
//!
//! Design (after smoltcp's `wire` and netlink-packet-route):
//! - Every structure has an owned representation with `emit` (append to a `Vec<u8>`) and a
//!   `parse` that reads through a bounds-checked `wire` reader, so malformed peer bytes give a
//!   [`DecodeError`] and never a panic. Lengths are checked once per structure.
//! - What we do not interpret is kept raw (unknown OXM fields, actions, instructions, message
//!   and multipart types) and re-emitted byte for byte.
//! - [`Message::decode`]/[`Message::encode`] are the only entry points for whole messages; the
//!   connection frames bytes and routes replies by xid.
//!
//! The connection ([`conn`], [`codec`]) is behind the `tokio` feature, on by default: the pure
//! core of the agent links the wire layer and the text form without an async runtime.

pub mod action;
pub mod bundle;
#[cfg(feature = "tokio")]
pub mod codec;
#[cfg(feature = "tokio")]
pub mod conn;
pub mod error;
pub mod flow_mod;
pub mod header;
pub mod instruction;
pub mod message;
pub mod monitor;
pub mod multipart;
pub mod oxm;
pub mod port;
pub mod text;
mod wire;

pub use action::Action;
pub use bundle::{BundleAdd, BundleCtrl, BundleCtrlType};
#[cfg(feature = "tokio")]
pub use conn::{Config, ConnError, Connection, Event, Events, OpenBundle};
pub use error::DecodeError;
pub use flow_mod::{FlowMod, FlowModCommand};
pub use header::Header;
pub use instruction::Instruction;
pub use message::{ErrorMsg, Hello, Message};
pub use multipart::{
    FlowStats, FlowStatsRequest, MultipartReply, MultipartReplyBody, MultipartRequest,
    MultipartRequestBody,
};
pub use oxm::{Match, OxmField};
pub use port::Port;
pub use text::{ActionList, DumpLine, Instructions};
