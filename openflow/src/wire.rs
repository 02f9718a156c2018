//! Bounds-checked big-endian reading and padding helpers shared by every structure.
//!
//! Every read goes through [`Reader`], which returns [`DecodeError::Truncated`] instead of
//! indexing past the end, so no decoder can panic on short input.

use crate::error::{DecodeError, Result};
use bytes::BufMut;

pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, pos: 0, what }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.remaining() < n {
            return Err(DecodeError::Truncated {
                what: self.what,
                need: self.pos + n,
                have: self.buf.len(),
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    pub(crate) fn skip(&mut self, n: usize) -> Result<()> {
        self.bytes(n).map(|_| ())
    }

    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }

    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// Read a sub-structure of `len` bytes as its own reader.
    pub(crate) fn sub(&mut self, len: usize, what: &'static str) -> Result<Reader<'a>> {
        Ok(Reader::new(self.bytes(len)?, what))
    }
}

/// Bytes needed to pad `len` up to a multiple of 8.
pub(crate) fn pad8(len: usize) -> usize {
    (8 - len % 8) % 8
}

pub(crate) fn put_zeros(out: &mut Vec<u8>, n: usize) {
    out.put_bytes(0, n);
}

/// Overwrite the big-endian u16 at `at` (used to fill in lengths after emitting a body).
pub(crate) fn patch_u16(out: &mut [u8], at: usize, v: u16) {
    out[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// A length that must fit the 16-bit length fields of OpenFlow.
pub(crate) fn len16(len: usize) -> u16 {
    // Messages are capped at 64 KiB by the protocol; callers building larger bodies get a
    // truncated length field, which the switch rejects with an error rather than us panicking.
    u16::try_from(len).unwrap_or(u16::MAX)
}

/// A fixed-size, NUL-padded string field (port names, descriptions).
pub(crate) fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

pub(crate) fn put_c_string(out: &mut Vec<u8>, s: &str, width: usize) {
    let b = s.as_bytes();
    // Keep the NUL terminator, and cut on a character boundary so the field stays valid
    // UTF-8 and reads back as exactly the string written.
    let mut n = b.len().min(width.saturating_sub(1));
    while n > 0 && !s.is_char_boundary(n) {
        n -= 1;
    }
    out.extend_from_slice(&b[..n]);
    put_zeros(out, width - n);
}
