//! The client's error type.

#[cfg(feature = "tokio")]
use serde_json::Value as Json;

use crate::monitor::MonitorError;
use crate::schema::SchemaError;
use crate::txn::{ErrorKind, TxnFailure};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("connect {remote}: {reason}")]
    Connect { remote: String, reason: String },
    /// The request was never written: safe to send again.
    #[error("{method} to {remote} not sent: {reason}")]
    NotSent {
        remote: String,
        method: String,
        reason: String,
    },
    /// The session ended after the request was written and before an answer.
    #[error("{method} to {remote}: connection lost before the reply: {reason}")]
    Lost {
        remote: String,
        method: String,
        reason: String,
    },
    /// A transaction was sent but the connection dropped before its reply: it may or may not
    /// have been committed. Never retried automatically; look at the database to find out.
    #[error("transaction on {remote}: outcome unknown ({reason})")]
    OutcomeUnknown { remote: String, reason: String },
    #[error("{method} on {remote}: server error {error:?}{}", .details.as_deref().map(|d| format!(": {d}")).unwrap_or_default())]
    Rpc {
        remote: String,
        method: String,
        kind: ErrorKind,
        error: String,
        details: Option<String>,
    },
    #[error("op #{index}: {source}")]
    Schema { index: usize, source: SchemaError },
    #[error("transaction on {remote}: {source}")]
    Txn {
        remote: String,
        source: Box<TxnFailure>,
    },
    #[error("{method} on {remote}: unexpected reply: {reason}")]
    Reply {
        remote: String,
        method: String,
        reason: String,
    },
    #[error("monitor on {remote}: {source}")]
    Monitor {
        remote: String,
        source: MonitorError,
    },
    #[error("no usable server among {remotes}: {reason}")]
    NoServer { remotes: String, reason: String },
    #[error("{0}")]
    Remote(#[from] crate::remote::RemoteError),
    // Only the connection builds TLS configurations.
    #[cfg(feature = "tokio")]
    #[error("{0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error("client is shut down")]
    Shutdown,
    #[error("timed out after {0:?}")]
    Timeout(std::time::Duration),
}

impl Error {
    #[cfg(feature = "tokio")]
    pub(crate) fn rpc(remote: &str, method: &str, error: &Json) -> Error {
        // ovsdb-server answers either a bare string or {"error": ..., "details": ...}.
        let (e, details) = match error {
            Json::String(s) => (s.clone(), None),
            Json::Object(o) => (
                o.get("error")
                    .and_then(Json::as_str)
                    .unwrap_or("unknown error")
                    .to_owned(),
                o.get("details").and_then(Json::as_str).map(str::to_owned),
            ),
            other => (other.to_string(), None),
        };
        Error::Rpc {
            remote: remote.to_owned(),
            method: method.to_owned(),
            kind: ErrorKind::parse(&e),
            error: e,
            details,
        }
    }

    #[cfg(feature = "tokio")]
    pub(crate) fn reply(remote: &str, method: &str, reason: impl Into<String>) -> Error {
        Error::Reply {
            remote: remote.to_owned(),
            method: method.to_owned(),
            reason: reason.into(),
        }
    }

    /// A transaction error from the server, if this is one.
    pub fn txn_failure(&self) -> Option<&TxnFailure> {
        match self {
            Error::Txn { source, .. } => Some(source),
            _ => None,
        }
    }

    /// True if the server may have executed the request.
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, Error::OutcomeUnknown { .. } | Error::Lost { .. })
    }
}
