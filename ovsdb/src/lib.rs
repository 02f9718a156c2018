//! OVSDB (RFC 7047) client.
//!
//! Sans-IO core, pure and tested in memory:
//! - [`value`]: atoms, sets, maps and their JSON encodings;
//! - [`schema`]: `get_schema` parsing and checks of values against column types;
//! - [`framing`]: the resumable JSON stream splitter (with a message size cap);
//! - [`jsonrpc`]: JSON-RPC 1.0 request/response/notification shapes;
//! - [`txn`]: the transaction builder, pre-send schema check and result decoding;
//! - [`monitor`]: monitor requests, `update2`/`update3` (and RFC 7047 `update`, for whole-row
//!   tables) decoding and the cache state machine.
//!
//! Thin tokio shell:
//! - [`remote`]: `unix:`, `tcp:`, `ssl:` remote strings (comma lists for clusters);
//! - [`tls`]: rustls client configuration from PEM files;
//! - [`connection`]: one JSON-RPC session (request matching, echo replies, dead-peer probe);
//! - [`client`]: reconnecting, leader-seeking client with monitors, transactions and locks.
//!
//! See `README.md` beside this crate for the design.

pub mod client;
pub mod connection;
pub mod error;
pub mod framing;
pub mod jsonrpc;
pub mod monitor;
pub mod remote;
pub mod schema;
pub mod tls;
pub mod txn;
pub mod value;

pub use client::{Client, ClientOptions, LockEvent, Monitor};
pub use connection::{ConnectOptions, Connection};
pub use error::Error;
pub use monitor::{Cache, Event, MonitorSpec};
pub use remote::Remote;
pub use schema::{DatabaseSchema, SchemaError};
pub use tls::TlsFiles;
pub use txn::{
    Condition, ErrorKind, Function, Mutation, Mutator, OpResult, Operation, Transaction, TxnFailure,
};
pub use value::{Atom, Row, Uuid, Value};
