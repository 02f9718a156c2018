//! Splits a byte stream into JSON-RPC messages (RFC 7047 messages are bare JSON objects with no
//! length prefix or delimiter).
//!
//! The splitter is resumable: it remembers how far it scanned (brace depth, inside-string and
//! escape state), so each byte is looked at once however the stream is cut into reads. It
//! enforces a size cap so a peer cannot make us buffer without bound.

use bytes::{Bytes, BytesMut};

#[cfg(feature = "tokio")]
mod codec;
#[cfg(feature = "tokio")]
pub use codec::{FrameCodec, JsonCodec};

/// Default cap on one message: many times the Northbound monitor reply of 10,000 Services
/// (about 3 MB), and small enough that parsing the worst message stays within a few hundred
/// MiB.
pub const DEFAULT_MAX_MESSAGE: usize = 64 * 1024 * 1024;
/// Deepest nesting accepted in a message: OVSDB's own messages nest about 10 levels.
pub const MAX_DEPTH: u32 = 64;
/// Bytes per JSON value a message must average: each parsed value costs about 32 bytes in
/// memory, so a message of tiny values (`[1,1,1,...]`) would cost 16 times its size. Real
/// OVSDB messages (UUIDs, names, addresses) average far more.
pub const MIN_BYTES_PER_VALUE: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum FramingError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("message exceeds the {limit}-byte cap")]
    TooLarge { limit: usize },
    #[error("unexpected byte {byte:#04x} between messages (expected '{{')")]
    Unexpected { byte: u8 },
    #[error("unbalanced closing bracket")]
    Unbalanced,
    #[error("message nested deeper than {limit} levels")]
    TooDeep { limit: u32 },
    #[error("message holds more than {limit} values (tiny values cost many times their bytes)")]
    TooManyValues { limit: usize },
    #[error("message is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// Resumable splitter state.
#[derive(Debug)]
pub struct Splitter {
    max: usize,
    /// Bytes of the current message already scanned (from the buffer start).
    scanned: usize,
    depth: u32,
    in_string: bool,
    escape: bool,
    /// Separators seen in the current message (about one per value).
    values: usize,
}

impl Default for Splitter {
    fn default() -> Self {
        Splitter::new(DEFAULT_MAX_MESSAGE)
    }
}

impl Splitter {
    pub fn new(max: usize) -> Self {
        Splitter {
            max,
            scanned: 0,
            depth: 0,
            in_string: false,
            escape: false,
            values: 0,
        }
    }

    fn max_values(&self) -> usize {
        (self.max / MIN_BYTES_PER_VALUE).max(4096)
    }

    /// Take the next complete message's bytes out of `buf`, if there is one.
    pub fn split(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, FramingError> {
        if self.depth == 0 {
            // Between messages: drop whitespace so it never counts against the cap.
            let ws = buf.iter().take_while(|b| b.is_ascii_whitespace()).count();
            let _ = buf.split_to(ws);
            self.scanned = 0;
            self.values = 0;
            match buf.first() {
                None => return Ok(None),
                Some(b'{') => {}
                Some(&byte) => return Err(FramingError::Unexpected { byte }),
            }
        }
        let start = self.scanned;
        let mut complete = None;
        for (off, &b) in buf.get(start..).unwrap_or_default().iter().enumerate() {
            if self.in_string {
                if self.escape {
                    self.escape = false;
                } else if b == b'\\' {
                    self.escape = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => {
                    self.depth += 1;
                    if self.depth > MAX_DEPTH {
                        return Err(FramingError::TooDeep { limit: MAX_DEPTH });
                    }
                }
                b',' => {
                    self.values += 1;
                    if self.values > self.max_values() {
                        return Err(FramingError::TooManyValues {
                            limit: self.max_values(),
                        });
                    }
                }
                b'}' | b']' => {
                    self.depth = self.depth.checked_sub(1).ok_or(FramingError::Unbalanced)?;
                    if self.depth == 0 {
                        complete = Some(start + off + 1);
                        break;
                    }
                }
                _ => {}
            }
        }
        if let Some(n) = complete {
            self.scanned = 0;
            if n > self.max {
                return Err(FramingError::TooLarge { limit: self.max });
            }
            return Ok(Some(buf.split_to(n).freeze()));
        }
        let i = buf.len();
        self.scanned = i;
        if self.scanned > self.max {
            return Err(FramingError::TooLarge { limit: self.max });
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value as Json;

    /// Splits and parses as `JsonCodec` does, without the runtime the codec needs.
    fn split_all(chunks: &[&[u8]], max: usize) -> Result<Vec<Json>, FramingError> {
        let mut s = Splitter::new(max);
        let mut buf = BytesMut::new();
        let mut out = vec![];
        for ch in chunks {
            buf.extend_from_slice(ch);
            while let Some(m) = s.split(&mut buf)? {
                out.push(serde_json::from_slice(&m)?);
            }
        }
        Ok(out)
    }

    #[test]
    fn splits_across_reads_with_tricky_strings() {
        let stream = br#" {"a":"}{\"\\"} {"b":[1,{"c":"]"}]}
{"id":null}"#;
        for cut in 0..stream.len() {
            let (x, y) = stream.split_at(cut);
            let msgs = split_all(&[x, y], 1 << 20).unwrap();
            assert_eq!(msgs.len(), 3, "cut at {cut}");
            assert_eq!(msgs[0]["a"], "}{\"\\");
        }
    }

    #[test]
    fn one_byte_at_a_time() {
        let stream = br#"{"method":"echo","params":[],"id":"echo"}{"x":1}"#;
        let chunks: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(split_all(&chunks, 1 << 20).unwrap().len(), 2);
    }

    #[test]
    fn caps_size_and_rejects_garbage() {
        let big = format!("{{\"a\":\"{}\"", "x".repeat(100));
        assert!(matches!(
            split_all(&[big.as_bytes()], 50),
            Err(FramingError::TooLarge { .. })
        ));
        let whole = format!("{{\"a\":\"{}\"}}", "x".repeat(100));
        assert!(matches!(
            split_all(&[whole.as_bytes()], 50),
            Err(FramingError::TooLarge { .. })
        ));
        assert!(matches!(
            split_all(&[b"x{}"], 50),
            Err(FramingError::Unexpected { .. })
        ));
        assert!(matches!(
            split_all(&[b"{]]"], 50),
            Err(FramingError::Unbalanced) | Err(FramingError::Json(_))
        ));
        assert!(matches!(
            split_all(&[b"{\"a\" 1}"], 50),
            Err(FramingError::Json(_))
        ));
    }
}
