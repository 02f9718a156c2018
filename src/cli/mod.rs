//! The `vipflow` command's shell: arguments, their merge over the config file, and the status
//! client. Everything else is the library.

pub mod args;
pub mod merge;
pub mod status;
