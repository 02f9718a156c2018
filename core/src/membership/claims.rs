//! The owners' claims on the wire: each node tells the others which VIPs it owns and at which
//! epoch ([`crate::announce::placement::Claim`]), in datagrams of their own beside foca's,
//! sealed with a key of their own derived from the membership secret
//! ([`super::seal::Channel::Claims`]), so an agent that does not know them refuses them as it
//! refuses any datagram it cannot check.
//!
//! A datagram holds one node's claims (all of them when `complete`, else some that changed);
//! more than fit in one go out in several. Claims are upserts: a claim that lost is superseded
//! by the winner's later epoch, so no message ever has to take one back.
//!
//! Layout: version (1), flags (bit 0: complete), name length, name (UTF-8), count (u16), then
//! per claim the family (4 or 6), the address and the epoch (u64), all big-endian.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use thiserror::Error;

const VERSION: u8 = 1;
const COMPLETE: u8 = 1;

/// One node's claims, as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimsMessage {
    /// The sender's node name.
    pub node: String,
    /// Whether these are all the sender's claims (sent to a node that just joined, and from
    /// time to time to one member): the receiver then knows it heard the sender out.
    pub complete: bool,
    pub claims: Vec<(IpAddr, u64)>,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ClaimsError {
    #[error("claims datagram cut short at byte {0}")]
    Short(usize),
    #[error("claims datagram of version {0}, this agent reads version {VERSION}")]
    Version(u8),
    #[error("claims datagram names address family {0}")]
    Family(u8),
    #[error("claims datagram names its node in invalid UTF-8")]
    Name,
    #[error("claims datagram has {0} bytes past its last claim")]
    Trailing(usize),
}

/// Bytes one claim takes at most (an IPv6 one).
const MAX_CLAIM: usize = 1 + 16 + 8;

impl ClaimsMessage {
    /// The datagrams' payloads for `claims` of `node`, each at most `budget` bytes (every one
    /// but an empty set's holds at least one claim). `complete` marks each.
    pub fn encode_all(
        node: &str,
        complete: bool,
        claims: &[(IpAddr, u64)],
        budget: usize,
    ) -> Vec<Vec<u8>> {
        let name = &node.as_bytes()[..node.len().min(255)];
        let head = 3 + name.len() + 2;
        let per = (budget.saturating_sub(head) / MAX_CLAIM).clamp(1, usize::from(u16::MAX));
        let mut out = Vec::new();
        let mut chunks = claims.chunks(per).peekable();
        if chunks.peek().is_none() {
            out.push(Self::encode_one(name, complete, &[]));
        }
        for c in chunks {
            out.push(Self::encode_one(name, complete, c));
        }
        out
    }

    fn encode_one(name: &[u8], complete: bool, claims: &[(IpAddr, u64)]) -> Vec<u8> {
        let mut b = Vec::with_capacity(5 + name.len() + claims.len() * MAX_CLAIM);
        b.push(VERSION);
        b.push(if complete { COMPLETE } else { 0 });
        b.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
        b.extend_from_slice(name);
        let n = u16::try_from(claims.len()).unwrap_or(u16::MAX);
        b.extend_from_slice(&n.to_be_bytes());
        for (vip, epoch) in claims.iter().take(usize::from(n)) {
            match vip {
                IpAddr::V4(a) => {
                    b.push(4);
                    b.extend_from_slice(&a.octets());
                }
                IpAddr::V6(a) => {
                    b.push(6);
                    b.extend_from_slice(&a.octets());
                }
            }
            b.extend_from_slice(&epoch.to_be_bytes());
        }
        b
    }

    /// Read one datagram's payload.
    pub fn decode(b: &[u8]) -> Result<ClaimsMessage, ClaimsError> {
        let mut r = ClaimsReader { b, at: 0 };
        let version = r.take(1)?[0];
        if version != VERSION {
            return Err(ClaimsError::Version(version));
        }
        let flags = r.take(1)?[0];
        let len = usize::from(r.take(1)?[0]);
        let node = std::str::from_utf8(r.take(len)?)
            .map_err(|_| ClaimsError::Name)?
            .to_string();
        let count = r.array::<2>()?;
        let count = u16::from_be_bytes(count);
        let mut claims = Vec::with_capacity(usize::from(count).min(b.len() / 13 + 1));
        for _ in 0..count {
            let vip = match r.take(1)?[0] {
                4 => IpAddr::V4(Ipv4Addr::from(r.array::<4>()?)),
                6 => IpAddr::V6(Ipv6Addr::from(r.array::<16>()?)),
                f => return Err(ClaimsError::Family(f)),
            };
            claims.push((vip, u64::from_be_bytes(r.array::<8>()?)));
        }
        if r.at != b.len() {
            return Err(ClaimsError::Trailing(b.len() - r.at));
        }
        Ok(ClaimsMessage {
            node,
            complete: flags & COMPLETE != 0,
            claims,
        })
    }
}

/// Reads a datagram front to back.
struct ClaimsReader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> ClaimsReader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ClaimsError> {
        let s = self
            .b
            .get(self.at..self.at.saturating_add(n))
            .ok_or(ClaimsError::Short(self.at))?;
        self.at += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], ClaimsError> {
        let at = self.at;
        self.take(N)?.try_into().map_err(|_| ClaimsError::Short(at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_round_trip_in_datagrams_that_fit() {
        let claims: Vec<(IpAddr, u64)> = (0..200u32)
            .map(|i| {
                let vip = if i % 2 == 0 {
                    IpAddr::V4(Ipv4Addr::from(0xc633_6400 + i))
                } else {
                    IpAddr::V6(Ipv6Addr::from(0xfd00_u128 << 112 | u128::from(i)))
                };
                (vip, u64::from(i) * 1_000_000_007)
            })
            .collect();
        let parts = ClaimsMessage::encode_all("node-a", true, &claims, 1000);
        assert!(parts.len() > 1);
        let mut back = Vec::new();
        for p in &parts {
            assert!(p.len() <= 1000, "{}", p.len());
            let m = ClaimsMessage::decode(p).unwrap();
            assert_eq!(m.node, "node-a");
            assert!(m.complete);
            back.extend(m.claims);
        }
        assert_eq!(back, claims);
        // No claims: one datagram that says so.
        let none = ClaimsMessage::encode_all("n", false, &[], 1000);
        assert_eq!(
            ClaimsMessage::decode(&none[0]).unwrap(),
            ClaimsMessage {
                node: "n".into(),
                complete: false,
                claims: vec![]
            }
        );
    }

    #[test]
    fn a_bad_datagram_is_an_error_not_a_panic() {
        let good = ClaimsMessage::encode_all("n", true, &[("10.0.0.1".parse().unwrap(), 3)], 100)
            .remove(0);
        for cut in 0..good.len() {
            assert!(ClaimsMessage::decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut v = good.clone();
        v[0] = 9;
        assert_eq!(ClaimsMessage::decode(&v), Err(ClaimsError::Version(9)));
        let mut f = good.clone();
        f[6] = 5;
        assert_eq!(ClaimsMessage::decode(&f), Err(ClaimsError::Family(5)));
        let mut t = good.clone();
        t.push(0);
        assert_eq!(ClaimsMessage::decode(&t), Err(ClaimsError::Trailing(1)));
        let mut n = good;
        n[3] = 0xff;
        assert_eq!(ClaimsMessage::decode(&n), Err(ClaimsError::Name));
    }
}
