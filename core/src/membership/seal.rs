//! Every membership datagram carries a keyed BLAKE3 tag over a timestamp and its payload: a
//! node without the shared key can neither join nor speak for a member, and a datagram
//! recorded and played back later is refused once it is older than [`MAX_SKEW_MS`]. The nodes'
//! clocks must agree within that (NTP does far better).
//!
//! Three kinds of datagram share the socket: SWIM's (foca's, [`Channel::Swim`]), the
//! successors' watch of the owners ([`Channel::Watch`], [`super::watch`]) and the owners' claims
//! to their VIPs ([`Channel::Claims`], [`super::claims`]). Each kind has its own
//! key derived from the secret, so the tag tells them apart and foca never sees a watch
//! datagram; SWIM's datagrams are sealed exactly as before the watch existed, so agents of
//! either version keep one membership during a rolling upgrade (an older agent refuses a watch
//! datagram as unsigned, and goes on).

use thiserror::Error;

/// How far a datagram's timestamp may be from the receiver's clock.
pub const MAX_SKEW_MS: u64 = 10_000;

/// Bytes in front of the payload: the tag, then the sender's clock in milliseconds.
pub const OVERHEAD: usize = 32 + 8;

/// The key all members share: one derived key per [`Channel`].
#[derive(Clone)]
pub struct Key {
    swim: [u8; 32],
    watch: [u8; 32],
    claims: [u8; 32],
}

/// Which protocol a datagram belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// foca's SWIM.
    Swim,
    /// The watch of owners by their successors ([`super::watch`]).
    Watch,
    /// The owners' claims to their VIPs ([`super::claims`]).
    Claims,
}

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
        Ok(Key {
            swim: blake3::derive_key("vipflow membership datagram v1", s),
            watch: blake3::derive_key("vipflow membership watch datagram v1", s),
            claims: blake3::derive_key("vipflow membership claims datagram v1", s),
        })
    }

    fn key(&self, channel: Channel) -> &[u8; 32] {
        match channel {
            Channel::Swim => &self.swim,
            Channel::Watch => &self.watch,
            Channel::Claims => &self.claims,
        }
    }

    fn tag(&self, channel: Channel, time: &[u8; 8], payload: &[u8]) -> blake3::Hash {
        let mut h = blake3::Hasher::new_keyed(self.key(channel));
        h.update(time);
        h.update(payload);
        h.finalize()
    }

    /// A SWIM `payload` with its header, stamped `now_ms`.
    pub fn seal(&self, now_ms: u64, payload: &[u8]) -> Vec<u8> {
        self.seal_as(Channel::Swim, now_ms, payload)
    }

    /// `payload` of `channel` with its header, stamped `now_ms`.
    pub fn seal_as(&self, channel: Channel, now_ms: u64, payload: &[u8]) -> Vec<u8> {
        let time = now_ms.to_be_bytes();
        let mut out = Vec::with_capacity(OVERHEAD + payload.len());
        out.extend_from_slice(self.tag(channel, &time, payload).as_bytes());
        out.extend_from_slice(&time);
        out.extend_from_slice(payload);
        out
    }

    /// The payload of a SWIM `datagram`, if this key signed it within [`MAX_SKEW_MS`] of
    /// `now_ms`.
    pub fn open<'a>(&self, now_ms: u64, datagram: &'a [u8]) -> Result<&'a [u8], SealError> {
        match self.open_any(now_ms, datagram)? {
            (Channel::Swim, p) => Ok(p),
            (Channel::Watch | Channel::Claims, _) => Err(SealError::Forged),
        }
    }

    /// The channel and payload of `datagram`, if this key signed it (for any channel)
    /// within [`MAX_SKEW_MS`] of `now_ms`.
    pub fn open_any<'a>(
        &self,
        now_ms: u64,
        datagram: &'a [u8],
    ) -> Result<(Channel, &'a [u8]), SealError> {
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
        let tag = blake3::Hash::from(tag);
        let channel = [Channel::Swim, Channel::Watch, Channel::Claims]
            .into_iter()
            .find(|c| self.tag(*c, &time, payload) == tag)
            .ok_or(SealError::Forged)?;
        let skew_ms = now_ms.abs_diff(u64::from_be_bytes(time));
        if skew_ms > MAX_SKEW_MS {
            return Err(SealError::Stale { skew_ms });
        }
        Ok((channel, payload))
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

    #[test]
    fn each_channel_opens_as_itself_and_swim_alone_opens_as_swim() {
        let k = Key::from_secret(b"0123456789abcdef0123").unwrap();
        let w = k.seal_as(Channel::Watch, 5_000, b"beat");
        assert_eq!(k.open_any(5_000, &w), Ok((Channel::Watch, &b"beat"[..])));
        // foca is never handed a watch datagram.
        assert_eq!(k.open(5_000, &w), Err(SealError::Forged));
        let s = k.seal(5_000, b"swim");
        assert_eq!(k.open_any(5_000, &s), Ok((Channel::Swim, &b"swim"[..])));
        let other = Key::from_secret(b"fedcba9876543210fedc").unwrap();
        assert_eq!(other.open_any(5_000, &w), Err(SealError::Forged));
    }
}
