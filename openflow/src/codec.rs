//! Framing: split a byte stream into whole OpenFlow messages.
//!
//! The length field is checked before anything is buffered: below 8 (a header) or above the
//! configured cap is a hard error, so a hostile or confused peer can neither make us loop on a
//! zero-length message nor make us buffer without bound.

use crate::header::HEADER_LEN;
use bytes::{Buf, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

/// The largest message OpenFlow can express (16-bit length).
pub const MAX_MESSAGE_LEN: usize = u16::MAX as usize;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("message length {len} is below the 8-byte header")]
    TooShort { len: usize },
    #[error("message length {len} exceeds the cap of {cap} bytes")]
    TooLong { len: usize, cap: usize },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// A framing codec: decodes whole messages (header included) as `BytesMut`; encodes
/// pre-encoded bytes as-is.
#[derive(Debug, Clone)]
pub struct OfCodec {
    max_len: usize,
}

impl OfCodec {
    pub fn new(max_len: usize) -> Self {
        OfCodec {
            max_len: max_len.clamp(HEADER_LEN, MAX_MESSAGE_LEN),
        }
    }
}

impl Default for OfCodec {
    fn default() -> Self {
        OfCodec::new(MAX_MESSAGE_LEN)
    }
}

impl Decoder for OfCodec {
    type Item = BytesMut;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, FrameError> {
        if src.len() < 4 {
            return Ok(None);
        }
        let len = usize::from(u16::from_be_bytes([src[2], src[3]]));
        if len < HEADER_LEN {
            return Err(FrameError::TooShort { len });
        }
        if len > self.max_len {
            return Err(FrameError::TooLong {
                len,
                cap: self.max_len,
            });
        }
        if src.len() < len {
            src.reserve(len - src.len());
            return Ok(None);
        }
        Ok(Some(src.split_to(len)))
    }
}

impl Encoder<bytes::Bytes> for OfCodec {
    type Error = FrameError;

    fn encode(&mut self, item: bytes::Bytes, dst: &mut BytesMut) -> Result<(), FrameError> {
        dst.extend_from_slice(item.chunk());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_back_to_back_messages_and_waits_for_partial_ones() {
        let mut c = OfCodec::default();
        let mut b = BytesMut::new();
        b.extend_from_slice(&[4, 2, 0, 8, 0, 0, 0, 1, 4, 3, 0, 10, 0, 0, 0, 2, 0xaa]);
        assert_eq!(c.decode(&mut b).unwrap().unwrap().len(), 8);
        assert!(c.decode(&mut b).unwrap().is_none());
        b.extend_from_slice(&[0xbb]);
        assert_eq!(&c.decode(&mut b).unwrap().unwrap()[8..], &[0xaa, 0xbb]);
        assert!(b.is_empty());
    }

    #[test]
    fn rejects_lengths_below_header_and_above_cap() {
        let mut c = OfCodec::new(64);
        for len in [0u16, 1, 7] {
            let mut b = BytesMut::from(&[4, 0, (len >> 8) as u8, len as u8, 0, 0, 0, 0][..]);
            assert!(matches!(c.decode(&mut b), Err(FrameError::TooShort { .. })));
        }
        let mut b = BytesMut::from(&[4, 0, 0, 65, 0, 0, 0, 0][..]);
        assert!(matches!(
            c.decode(&mut b),
            Err(FrameError::TooLong { len: 65, cap: 64 })
        ));
    }
}
