//! What a reconciler's last attempt failed on, typed: the status shows its text, the
//! `vipflow_errors_total` metric counts it under its kind's label.

use std::fmt;

/// The last failure of a reconciler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconcileError {
    pub kind: ReconcileErrorKind,
    pub message: String,
}

/// Where it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReconcileErrorKind {
    /// The switch could not be reached or the OpenFlow handshake failed.
    OpenflowConnect,
    /// An OpenFlow session broke while reading or writing flows.
    OpenflowSession,
    /// The Northbound database could not be reached or read, or a write failed.
    Northbound,
}

impl ReconcileErrorKind {
    /// The `kind` label of `vipflow_errors_total`.
    pub fn metric_label(self) -> &'static str {
        match self {
            ReconcileErrorKind::OpenflowConnect => "openflow_connect",
            ReconcileErrorKind::OpenflowSession => "openflow_write",
            ReconcileErrorKind::Northbound => "northbound",
        }
    }
}

impl ReconcileError {
    pub fn new(kind: ReconcileErrorKind, e: impl fmt::Display) -> ReconcileError {
        ReconcileError {
            kind,
            message: e.to_string(),
        }
    }
}

impl fmt::Display for ReconcileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_counts_under_its_own_label_and_shows_its_text() {
        use ReconcileErrorKind::*;
        let labels: Vec<_> = [OpenflowConnect, OpenflowSession, Northbound]
            .map(ReconcileErrorKind::metric_label)
            .into();
        assert_eq!(labels, ["openflow_connect", "openflow_write", "northbound"]);
        let e = ReconcileError::new(Northbound, "no reply to transact within 10s");
        assert_eq!(e.to_string(), "no reply to transact within 10s");
    }
}
