//! OVSDB (RFC 7047) client.
//!
//! Sans-IO core, pure and tested in memory:
//! - [`value`]: atoms, sets, maps and their JSON encodings;
//! - [`schema`]: `get_schema` parsing and checks of values against column types;
//! - [`framing`]: the resumable JSON stream splitter (with a message size cap);
//! - [`jsonrpc`]: JSON-RPC 1.0 request/response/notification shapes;
//! - [`txn`]: the transaction builder, pre-send schema check and result decoding;
//! - [`monitor`]: monitor requests, `update2`/`update3` (and RFC 7047 `update`, for whole-row
//!   tables) decoding and the cache state machine;
//! - [`remote`]: `unix:`, `tcp:`, `ssl:` remote strings (comma lists for clusters);
//! - [`error`]: the client's error type.
//!
//! Thin tokio shell, behind the `tokio` feature (on by default; the pure core of the agent
//! links the wire formats without an async runtime):
//! - [`tls`]: rustls client configuration from PEM files;
//! - [`connection`]: one JSON-RPC session (request matching, echo replies, dead-peer probe);
//! - [`client`]: reconnecting, leader-seeking client with monitors, transactions and locks.
//!
//! See `README.md` beside this crate for the design.

#[cfg(feature = "tokio")]
pub mod client;
#[cfg(feature = "tokio")]
pub mod connection;
pub mod error;
pub mod framing;
pub mod jsonrpc;
pub mod monitor;
pub mod remote;
pub mod schema;
#[cfg(feature = "tokio")]
pub mod tls;
pub mod txn;
pub mod value;

#[cfg(feature = "tokio")]
pub use client::{Client, ClientOptions, LockEvent, Monitor};
#[cfg(feature = "tokio")]
pub use connection::{ConnectOptions, Connection};
pub use error::Error;
pub use monitor::{Cache, Event, MonitorSpec};
pub use remote::Remote;
pub use schema::{DatabaseSchema, SchemaError};
#[cfg(feature = "tokio")]
pub use tls::TlsFiles;
pub use txn::{
    Condition, ErrorKind, Function, Mutation, Mutator, OpResult, Operation, Transaction, TxnFailure,
};
pub use value::{Atom, Row, Uuid, Value};
