//! Every membership datagram carries a keyed BLAKE3 tag over a timestamp and its payload: a
//! node without the shared key can neither join nor speak for a member, and a datagram
//! recorded and played back later is refused once it is older than [`MAX_SKEW_MS`]. The nodes'
//! clocks must agree within that (NTP does far better).

use thiserror::Error;

/// How far a datagram's timestamp may be from the receiver's clock.
pub const MAX_SKEW_MS: u64 = 10_000;

/// Bytes in front of the payload: the tag, then the sender's clock in milliseconds.
pub const OVERHEAD: usize = 32 + 8;

/// The key all members share.
#[derive(Clone)]
pub struct Key([u8; 32]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum KeyError {
    #[error(
        "the membership secret is {0} bytes; it needs at least 16 (e.g. `head -c 32 /dev/urandom`)"
    )]
    TooShort(usize),
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum SealError {
    #[error("datagram of {0} bytes is shorter than its authentication header")]
    Short(usize),
    #[error("datagram not signed with the membership key")]
    Forged,
    #[error(
        "datagram timestamped {skew_ms} ms away from this node's clock (at most {MAX_SKEW_MS})"
    )]
    Stale { skew_ms: u64 },
}

impl Key {
    /// The key for a secret of any length (at least 16 bytes), e.g. a Secret's file as
    /// mounted. Surrounding whitespace (a trailing newline) is not part of it.
    pub fn from_secret(secret: &[u8]) -> Result<Key, KeyError> {
        let s = secret.trim_ascii();
        if s.len() < 16 {
            return Err(KeyError::TooShort(s.len()));
        }
        Ok(Key(blake3::derive_key("vipflow membership datagram v1", s)))
    }

    fn tag(&self, time: &[u8; 8], payload: &[u8]) -> blake3::Hash {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(time);
        h.update(payload);
        h.finalize()
    }

    /// `payload` with its header, stamped `now_ms`.
    pub fn seal(&self, now_ms: u64, payload: &[u8]) -> Vec<u8> {
        let time = now_ms.to_be_bytes();
        let mut out = Vec::with_capacity(OVERHEAD + payload.len());
        out.extend_from_slice(self.tag(&time, payload).as_bytes());
        out.extend_from_slice(&time);
        out.extend_from_slice(payload);
        out
    }

    /// The payload of `datagram`, if this key signed it within [`MAX_SKEW_MS`] of `now_ms`.
    pub fn open<'a>(&self, now_ms: u64, datagram: &'a [u8]) -> Result<&'a [u8], SealError> {
        if datagram.len() < OVERHEAD {
            return Err(SealError::Short(datagram.len()));
        }
        let (tag, rest) = datagram.split_at(32);
        let (time, payload) = rest.split_at(8);
        let time: [u8; 8] = time
            .try_into()
            .map_err(|_| SealError::Short(datagram.len()))?;
        let tag: [u8; 32] = tag
            .try_into()
            .map_err(|_| SealError::Short(datagram.len()))?;
        // blake3::Hash compares in constant time.
        if self.tag(&time, payload) != blake3::Hash::from(tag) {
            return Err(SealError::Forged);
        }
        let skew_ms = now_ms.abs_diff(u64::from_be_bytes(time));
        if skew_ms > MAX_SKEW_MS {
            return Err(SealError::Stale { skew_ms });
        }
        Ok(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_opens_and_anything_else_does_not() {
        let k = Key::from_secret(b"0123456789abcdef0123\n").unwrap();
        let d = k.seal(1_000_000, b"hello");
        assert_eq!(k.open(1_000_500, &d), Ok(&b"hello"[..]));
        // Another key, a flipped bit, a cut datagram, a replay much later.
        let other = Key::from_secret(b"fedcba9876543210fedc").unwrap();
        assert_eq!(other.open(1_000_500, &d), Err(SealError::Forged));
        let mut flipped = d.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(k.open(1_000_500, &flipped), Err(SealError::Forged));
        assert_eq!(k.open(1_000_500, &d[..10]), Err(SealError::Short(10)));
        assert_eq!(
            k.open(1_020_000, &d),
            Err(SealError::Stale { skew_ms: 20_000 })
        );
        assert_eq!(
            Key::from_secret(b" short \n").unwrap_err(),
            KeyError::TooShort(5)
        );
    }
}
