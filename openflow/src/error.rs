//! Decode errors: every way peer bytes can be wrong, with the structure being read.

/// Why a byte string is not a valid OpenFlow 1.3 message (or part of one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{what}: truncated (need {need} bytes, have {have})")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    #[error("{what}: bad length {len}")]
    BadLength { what: &'static str, len: usize },
    #[error("unsupported OpenFlow version {0:#04x} (only 1.3 = 0x04)")]
    Version(u8),
    #[error("{what}: {detail}")]
    Invalid { what: &'static str, detail: String },
}

pub type Result<T> = std::result::Result<T, DecodeError>;
