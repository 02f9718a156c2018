//! The pure cores of the reconcilers: what a bridge holds and what to change on it
//! ([`bridge`]), what the Northbound database holds and which transactions make it match the
//! plan ([`northbound`]), and the typed failures both report ([`error`]). The tasks that
//! connect and write are in the agent crate; these are tested in memory.

pub mod bridge;
pub mod error;
pub mod northbound;
