//! OVN's own text: `exclude_ips` read as northd reads it, and `other_config:subnet`.

use crate::plan::exclude::ranges::IpRange;
use crate::plan::exclude::ranges::RangeError;
use ipnet::Ipv4Net;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::ops::Range;
use thiserror::Error;

// ---------------------------------------------------------------------------------------------
// OVN exclude_ips, read as northd reads it.

/// A problem in OVN `exclude_ips` text at byte `offset`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("at byte {offset}: {error}; {}", northd_note(*.stops_northd))]
pub struct OvnTokenError {
    pub offset: usize,
    pub error: RangeError,
    /// northd's parser gives up here: no later entry is excluded.
    pub stops_northd: bool,
}

pub(crate) fn northd_note(stops: bool) -> &'static str {
    if stops {
        "northd ignores everything from here on"
    } else {
        "northd goes on with the next entry"
    }
}

/// One entry northd applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OvnEntry {
    /// Byte span in the text, `..` and its end included.
    pub span: Range<usize>,
    /// Always IPv4.
    pub range: IpRange,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OvnExcludeIps {
    pub entries: Vec<OvnEntry>,
    pub errors: Vec<OvnTokenError>,
}

/// The whitespace the OVN lexer skips.
pub(crate) fn is_ovn_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lexeme<'a> {
    End,
    Ellipsis,
    /// What the OVN lexer reads as one numeric token (it may still be invalid).
    Word(&'a str),
    /// Anything else (a name, punctuation, a CIDR, an open comment): northd stops here.
    Other(&'a str),
}

pub(crate) struct Lexer<'a> {
    pub(crate) s: &'a str,
    pub(crate) pos: usize,
}

impl<'a> Lexer<'a> {
    pub(crate) fn new(s: &'a str) -> Self {
        Lexer { s, pos: 0 }
    }

    pub(crate) fn run_to_ws(&self, from: usize) -> usize {
        let b = self.s.as_bytes();
        (from..b.len())
            .find(|&i| is_ovn_ws(b[i]))
            .unwrap_or(b.len())
    }

    /// The next lexeme and its byte offset.
    pub(crate) fn next(&mut self) -> (usize, Lexeme<'a>) {
        let b = self.s.as_bytes();
        loop {
            while self.pos < b.len() && is_ovn_ws(b[self.pos]) {
                self.pos += 1;
            }
            let rest = &b[self.pos..];
            if rest.starts_with(b"//") {
                self.pos = (self.pos..b.len())
                    .find(|&i| b[i] == b'\n')
                    .unwrap_or(b.len());
            } else if rest.starts_with(b"/*") {
                // The lexer rejects a comment that reaches a newline or the end unclosed.
                let body = self.pos + 2;
                let close = (body..b.len())
                    .take_while(|&i| b[i] != b'\n')
                    .find(|&i| b[i..].starts_with(b"*/"));
                match close {
                    Some(i) => self.pos = i + 2,
                    None => {
                        let start = self.pos;
                        self.pos = self.run_to_ws(start);
                        return (start, Lexeme::Other(&self.s[start..self.pos]));
                    }
                }
            } else {
                break;
            }
        }
        let start = self.pos;
        let Some(&c) = b.get(start) else {
            return (start, Lexeme::End);
        };
        if b[start..].starts_with(b"..") {
            self.pos += 2;
            return (start, Lexeme::Ellipsis);
        }
        let hex_then_colon = || {
            let k = (start..b.len())
                .find(|&i| !b[i].is_ascii_hexdigit())
                .unwrap_or(b.len());
            b.get(k) == Some(&b':')
        };
        let numeric = c.is_ascii_digit()
            || (c == b':' && b.get(start + 1) == Some(&b':'))
            || (c.is_ascii_hexdigit() && hex_then_colon());
        if !numeric {
            self.pos = self.run_to_ws(start);
            return (start, Lexeme::Other(&self.s[start..self.pos]));
        }
        // lib/lex.c: alnum, ':' until a '.' was seen, '.' unless it starts "..".
        let mut end = start;
        let mut saw_dot = false;
        while let Some(&ch) = b.get(end) {
            let take = ch.is_ascii_alphanumeric()
                || (ch == b':' && !saw_dot)
                || (ch == b'.' && b.get(end + 1) != Some(&b'.'));
            if !take {
                break;
            }
            saw_dot |= ch == b'.';
            end += 1;
        }
        if b.get(end) == Some(&b'/') {
            // A masked value (CIDR): not an address to northd.
            self.pos = self.run_to_ws(start);
            return (start, Lexeme::Other(&self.s[start..self.pos]));
        }
        self.pos = end;
        (start, Lexeme::Word(&self.s[start..end]))
    }

    pub(crate) fn peek(&self) -> Lexeme<'a> {
        Lexer {
            s: self.s,
            pos: self.pos,
        }
        .next()
        .1
    }
}

/// How northd sees one numeric token.
pub(crate) enum Num {
    V4(Ipv4Addr),
    /// A number the lexer accepts (IPv6, decimal, hex, MAC) that northd silently turns into
    /// an IPv4 address from its low 32 bits; vipflow counts it as excluding nothing.
    Misread,
    /// A lexical error: northd stops.
    Invalid,
}

pub(crate) fn classify(w: &str) -> Num {
    if let Ok(a) = w.parse::<Ipv4Addr>() {
        return Num::V4(a);
    }
    let b = w.as_bytes();
    let is_mac = b.len() == 17
        && b.chunks(3).all(|c| {
            c[0].is_ascii_hexdigit()
                && c[1].is_ascii_hexdigit()
                && c.get(2).is_none_or(|&x| x == b':')
        });
    let decimal = !b.is_empty()
        && b.iter().all(u8::is_ascii_digit)
        && (b.len() == 1 || b[0] != b'0')
        && w.parse::<u64>().is_ok();
    let hex = match w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
        Some(h) => {
            !h.is_empty()
                && h.bytes().all(|x| x.is_ascii_hexdigit())
                && h.trim_start_matches('0').len() <= 32
        }
        None => false,
    };
    if is_mac || decimal || hex || (w.len() < 46 && w.parse::<Ipv6Addr>().is_ok()) {
        Num::Misread
    } else {
        Num::Invalid
    }
}

/// Read `exclude_ips` as northd does: the entries it applies and every problem, in order.
pub fn parse_ovn_exclude_ips(text: &str) -> OvnExcludeIps {
    let mut out = OvnExcludeIps::default();
    let mut lx = Lexer::new(text);
    let fatal = |out: &mut OvnExcludeIps, offset, error| {
        out.errors.push(OvnTokenError {
            offset,
            error,
            stops_northd: true,
        })
    };
    loop {
        let (start, first) = match lx.next() {
            (_, Lexeme::End) => break,
            (start, Lexeme::Word(w)) => (start, w),
            (start, Lexeme::Ellipsis) => {
                let token = "..".to_owned();
                fatal(&mut out, start, RangeError::Unexpected { token });
                break;
            }
            (start, Lexeme::Other(t)) => {
                let token = t.to_owned();
                fatal(&mut out, start, RangeError::Unexpected { token });
                break;
            }
        };
        let a = classify(first);
        if let Num::Invalid = a {
            let token = first.to_owned();
            fatal(&mut out, start, RangeError::NotAnAddress { token });
            break;
        }
        let (b, token_end) = if lx.peek() == Lexeme::Ellipsis {
            lx.next();
            match lx.next() {
                (_, Lexeme::Word(w)) => (Some((w, classify(w))), lx.pos),
                (_, Lexeme::End) => {
                    let token = format!("{first}..");
                    fatal(&mut out, start, RangeError::MissingEnd { token });
                    break;
                }
                (_, Lexeme::Ellipsis) | (_, Lexeme::Other(_)) => {
                    let part = text[lx.pos..].split_ascii_whitespace().next().unwrap_or("");
                    let (entry, part) = (format!("{first}..{part}"), part.to_owned());
                    fatal(&mut out, start, RangeError::BadRangeBound { entry, part });
                    break;
                }
            }
        } else {
            (None, start + first.len())
        };
        let token = &text[start..token_end];
        let skip = |out: &mut OvnExcludeIps, error| {
            out.errors.push(OvnTokenError {
                offset: start,
                error,
                stops_northd: false,
            })
        };
        match (a, b) {
            (_, Some((w, Num::Invalid))) => {
                let (entry, part) = (token.to_owned(), w.to_owned());
                fatal(&mut out, start, RangeError::BadRangeBound { entry, part });
                break;
            }
            (Num::V4(x), None) => out.entries.push(OvnEntry {
                span: start..token_end,
                range: IpRange::single(x.into()),
            }),
            (Num::V4(x), Some((_, Num::V4(y)))) => match IpRange::new(x.into(), y.into()) {
                Ok(range) => out.entries.push(OvnEntry {
                    span: start..token_end,
                    range,
                }),
                Err(_) => {
                    let token = token.to_owned();
                    let (start, end) = (x.into(), y.into());
                    skip(&mut out, RangeError::Reversed { token, start, end });
                }
            },
            _ => {
                let token = token.to_owned();
                skip(&mut out, RangeError::NotIpv4 { token });
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// OVN other_config:subnet

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SubnetError {
    #[error("`{0}` is not an IPv4 CIDR (OVN's subnet is IPv4 only; IPv6 uses ipv6_prefix)")]
    Syntax(String),
    #[error("`{0}`: the netmask is not contiguous")]
    NonCidrMask(String),
    #[error("`{0}`: a /32 leaves nothing to allocate; northd ignores it")]
    HostPrefix(String),
}

/// Dotted quad the way northd's `ip_parse_masked` scans it (decimal octets, leading zeros
/// allowed), so a subnet northd accepts is never treated as unusable here.
pub(crate) fn scan_v4(s: &str) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut parts = s.split('.');
    for o in &mut octets {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 3 || !p.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        *o = p.parse().ok()?;
    }
    parts.next().is_none().then_some(Ipv4Addr::from(octets))
}

/// `other_config:subnet`: `a.b.c.d/len` or `a.b.c.d/m.m.m.m`; host bits are dropped.
pub fn parse_ovn_subnet(s: &str) -> Result<Ipv4Net, SubnetError> {
    let syntax = || SubnetError::Syntax(s.to_owned());
    let (addr, mask) = s.split_once('/').ok_or_else(syntax)?;
    let addr = scan_v4(addr).ok_or_else(syntax)?;
    let prefix = if mask.contains('.') {
        let m = u32::from(scan_v4(mask).ok_or_else(syntax)?);
        if m.leading_ones() + m.trailing_zeros() != 32 {
            return Err(SubnetError::NonCidrMask(s.to_owned()));
        }
        m.leading_ones() as u8
    } else if !mask.is_empty() && mask.len() <= 3 && mask.bytes().all(|c| c.is_ascii_digit()) {
        mask.parse::<u8>().map_err(|_| syntax())?
    } else {
        return Err(syntax());
    };
    if prefix == 32 {
        return Err(SubnetError::HostPrefix(s.to_owned()));
    }
    Ipv4Net::new(addr, prefix)
        .map(|n| n.trunc())
        .map_err(|_| syntax())
}

/// The addresses northd's IPAM covers: network + 1 through broadcast.
pub fn ipam_span(net: &Ipv4Net) -> (u32, u32) {
    (
        u32::from(net.network()).saturating_add(1),
        u32::from(net.broadcast()),
    )
}
