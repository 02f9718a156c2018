//! The part of YAML that `kubectl get -o yaml` writes, read without libyaml.
//!
//! serde_yaml_ng reads YAML through libyaml, whose scan alone is most of what a `-o yaml` file
//! costs at the agent's start: on two cores it is a large share of the first sync's budget,
//! where the same objects as JSON cost a fraction. kubectl's YAML (Go's emitter, through
//! sigs.k8s.io/yaml) uses a small part of YAML: block mappings and block sequences, a
//! sequence under a key at the key's own column, plain and quoted scalars on one line, `|` and
//! `|-` literal blocks, `{}` and `[]`. That part is read here, straight into
//! `serde_json::Value`, and each scalar resolves by serde_yaml_ng's rules (null, bool, integer,
//! float, else string), so the value is the one serde_yaml_ng gives.
//!
//! Anything else gives up ([`GiveUp`]) and the caller reads the item with serde_yaml_ng:
//! anchors, aliases, tags, flow collections with content, comments, blank lines, tabs, text
//! beyond printable ASCII, scalars over several lines, a sequence directly in a sequence,
//! duplicate keys. Giving up costs time, never a wrong value; taking a text is right only when
//! serde_yaml_ng takes it to the same value, which `yaml_subset_tests` checks against
//! serde_yaml_ng on generated texts, kubectl's shapes and near misses, and the `objects` fuzz
//! target checks through the whole file parse.

use serde_json::{Map, Value};
use std::num::ParseIntError;

/// A text beyond the subset: serde_yaml_ng must read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GiveUp;

type Got<T> = Result<T, GiveUp>;

/// Nesting deeper than this gives up (each level is a call here).
const MAX_NESTING: usize = 64;

/// libyaml looks this far for the `:` of a key, and refuses a longer one.
const MAX_KEY: usize = 1024;

/// How serde_json's own tokens begin: a map whose first key is one (`$serde_json::private::RawValue`)
/// is not a map to serde_json's value, so serde_yaml_ng's reading of it differs.
const SERDE_JSON_TOKEN: &str = "$serde_json::";

/// The one entry of a List item's text (its `- ` and what follows, as
/// [`super::yaml_items`] cuts it), as serde_yaml_ng would read it.
pub fn item(text: &str) -> Got<Value> {
    if !plain_ascii(text.as_bytes()) {
        return Err(GiveUp);
    }
    let mut r = YamlReader::new(text)?;
    let first = r.line.ok_or(GiveUp)?;
    let mut entries = r.seq(first.indent)?;
    if r.line.is_some() || entries.len() != 1 {
        return Err(GiveUp);
    }
    entries.pop().ok_or(GiveUp)
}

/// Whether `b` holds printable ASCII and line feeds only.
fn plain_ascii(b: &[u8]) -> bool {
    // Whole chunks without a branch per byte, so that the check vectorises.
    b.chunks(64).all(|c| {
        c.iter().fold(true, |ok, &x| {
            ok & (x.wrapping_sub(b' ') < 95 || x == b'\n')
        })
    })
}

/// One line: its indentation (spaces), the rest of it, where the next begins, and whether a
/// line feed ends it.
#[derive(Debug, Clone, Copy)]
struct YamlLine<'t> {
    indent: usize,
    content: &'t str,
    next: usize,
    ended: bool,
}

struct YamlReader<'t> {
    text: &'t str,
    /// The line not yet taken; `None` at the end of the text.
    line: Option<YamlLine<'t>>,
    depth: usize,
}

impl<'t> YamlReader<'t> {
    fn new(text: &'t str) -> Got<Self> {
        let mut r = YamlReader {
            text,
            line: None,
            depth: 0,
        };
        r.line = r.line_at(0)?;
        Ok(r)
    }

    /// The line at `pos`. A blank line or a comment gives up: they are rare in what kubectl
    /// writes, and inside a literal block they would be content.
    fn line_at(&self, pos: usize) -> Got<Option<YamlLine<'t>>> {
        let rest = self.text.get(pos..).ok_or(GiveUp)?;
        if rest.is_empty() {
            return Ok(None);
        }
        let (end, ended) = match memchr::memchr(b'\n', rest.as_bytes()) {
            Some(e) => (e, true),
            None => (rest.len(), false),
        };
        let line = &rest[..end];
        let indent = line.bytes().take_while(|&b| b == b' ').count();
        let content = &line[indent..];
        if content.is_empty() || content.starts_with('#') {
            return Err(GiveUp);
        }
        Ok(Some(YamlLine {
            indent,
            content,
            next: pos + end + usize::from(ended),
            ended,
        }))
    }

    fn advance(&mut self) -> Got<()> {
        if let Some(l) = self.line {
            self.line = self.line_at(l.next)?;
        }
        Ok(())
    }

    fn enter(&mut self) -> Got<()> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(GiveUp);
        }
        Ok(())
    }

    /// A block sequence whose `- ` are at column `n`.
    fn seq(&mut self, n: usize) -> Got<Vec<Value>> {
        self.enter()?;
        let mut out = Vec::new();
        while let Some(l) = self.line {
            if l.indent < n {
                break;
            }
            if l.indent > n {
                return Err(GiveUp);
            }
            let Some(rest) = l.content.strip_prefix("- ") else {
                if l.content == "-" {
                    return Err(GiveUp);
                }
                // A key at the column of a sequence under it: the sequence ends.
                break;
            };
            let pad = rest.bytes().take_while(|&b| b == b' ').count();
            let rest = &rest[pad..];
            if rest.is_empty() {
                return Err(GiveUp);
            }
            self.advance()?;
            out.push(self.entry(n + 2 + pad, rest)?);
        }
        self.depth -= 1;
        Ok(out)
    }

    /// A sequence entry's node, which starts at column `col` of a line already taken, with
    /// `text` the rest of that line.
    fn entry(&mut self, col: usize, text: &'t str) -> Got<Value> {
        if text.starts_with("- ") || text == "-" {
            return Err(GiveUp);
        }
        match key(text)? {
            Some(first) => Ok(Value::Object(self.map(col, Some(first))?)),
            None => scalar(text.trim_end_matches(' ')),
        }
    }

    /// A block mapping whose keys are at column `n`; `first` is its first key and the rest of
    /// that key's line when that line is already taken.
    fn map(&mut self, n: usize, first: Option<(String, &'t str)>) -> Got<Map<String, Value>> {
        self.enter()?;
        let mut out = Map::new();
        let mut next = first;
        loop {
            let (k, rest) = match next.take() {
                Some(kv) => kv,
                None => {
                    let Some(l) = self.line else { break };
                    if l.indent < n {
                        break;
                    }
                    if l.indent > n {
                        return Err(GiveUp);
                    }
                    let kv = key(l.content)?.ok_or(GiveUp)?;
                    self.advance()?;
                    kv
                }
            };
            let v = self.value(n, rest)?;
            if out.insert(k, v).is_some() {
                return Err(GiveUp);
            }
        }
        self.depth -= 1;
        Ok(out)
    }

    /// The value of a key at column `n`, with `rest` what follows its `:` on its line.
    fn value(&mut self, n: usize, rest: &'t str) -> Got<Value> {
        let rest = rest.trim_end_matches(' ');
        if rest.is_empty() {
            return match self.line {
                Some(l) if l.indent > n || (l.indent == n && l.content.starts_with("- ")) => {
                    if l.content.starts_with("- ") {
                        Ok(Value::Array(self.seq(l.indent)?))
                    } else {
                        Ok(Value::Object(self.map(l.indent, None)?))
                    }
                }
                _ => Ok(Value::Null),
            };
        }
        if rest.starts_with('|') {
            return self.literal(n, rest);
        }
        scalar(rest)
    }

    /// A literal block (`|` keeps one final line feed, `|-` none) under a key at column `n`.
    fn literal(&mut self, n: usize, header: &str) -> Got<Value> {
        let strip = match header {
            "|" => false,
            "|-" => true,
            _ => return Err(GiveUp),
        };
        let first = self.line.ok_or(GiveUp)?;
        if first.indent <= n {
            return Err(GiveUp);
        }
        let at = first.indent;
        let mut out = String::new();
        while let Some(l) = self.line {
            if l.indent <= n {
                break;
            }
            if l.indent < at || !l.ended {
                return Err(GiveUp);
            }
            out.extend(std::iter::repeat_n(' ', l.indent - at));
            out.push_str(l.content);
            out.push('\n');
            self.advance()?;
        }
        if strip {
            out.pop();
        }
        Ok(Value::String(out))
    }
}

/// `Some((key, rest))` when `text` is a `key: ...` line's content (`rest` after the `:` and
/// its spaces); `None` when it holds no key.
fn key(text: &str) -> Got<Option<(String, &str)>> {
    if text.starts_with(['\'', '"']) {
        let (k, after) = quoted(text)?;
        return match after.strip_prefix(':') {
            Some(rest) if rest.is_empty() || rest.starts_with(' ') => {
                if k.starts_with(SERDE_JSON_TOKEN) {
                    return Err(GiveUp);
                }
                Ok(Some((k, rest.trim_start_matches(' '))))
            }
            Some(_) => Err(GiveUp),
            None => Ok(None),
        };
    }
    let b = text.as_bytes();
    let mut from = 0;
    let at = loop {
        let Some(i) = memchr::memchr(b':', &b[from..]).map(|i| from + i) else {
            return Ok(None);
        };
        if i + 1 == b.len() || b[i + 1] == b' ' {
            break i;
        }
        from = i + 1;
    };
    let k = &text[..at];
    if k.len() > MAX_KEY || k.ends_with(' ') || !plain_ok(k) || k.starts_with(SERDE_JSON_TOKEN) {
        return Err(GiveUp);
    }
    // A key is taken as written: serde_json's map asks for a string, which serde_yaml_ng gives
    // without resolving it.
    Ok(Some((k.to_owned(), text[at + 1..].trim_start_matches(' '))))
}

/// A scalar on one line: quoted, `{}`, `[]`, or plain.
fn scalar(text: &str) -> Got<Value> {
    if text.starts_with(['\'', '"']) {
        let (s, after) = quoted(text)?;
        if !after.trim_start_matches(' ').is_empty() {
            return Err(GiveUp);
        }
        return Ok(Value::String(s));
    }
    match text {
        "{}" => Ok(Value::Object(Map::new())),
        "[]" => Ok(Value::Array(Vec::new())),
        _ if plain_ok(text) && !text.ends_with(':') => plain(text),
        _ => Err(GiveUp),
    }
}

/// Whether `text` is a plain scalar this reads on one line: no indicator first (a `-` is one
/// only before a space), no `: ` or ` #` inside, no flow indicators (libyaml takes those in
/// block context, but they are rare enough here not to reason about).
fn plain_ok(text: &str) -> bool {
    let b = text.as_bytes();
    let Some(&first) = b.first() else {
        return false;
    };
    let starts_ok = match first {
        b'-' => b.get(1).is_some_and(|&c| c != b' '),
        b'?' | b':' | b'#' | b'&' | b'*' | b'!' | b'|' | b'>' | b'\'' | b'"' | b'%' | b'@'
        | b'`' => false,
        _ => true,
    };
    starts_ok
        && !b
            .iter()
            .any(|&c| matches!(c, b',' | b'[' | b']' | b'{' | b'}'))
        && !b.windows(2).any(|w| w == b": " || w == b" #")
}

/// A quoted scalar at the start of `text`, closed on this line: its value and what follows
/// the closing quote.
fn quoted(text: &str) -> Got<(String, &str)> {
    let (q, body) = text.split_at(1);
    if q == "'" { single(body) } else { double(body) }
}

fn single(body: &str) -> Got<(String, &str)> {
    let b = body.as_bytes();
    let mut out = String::new();
    let mut from = 0;
    loop {
        let i = memchr::memchr(b'\'', &b[from..]).ok_or(GiveUp)? + from;
        out.push_str(&body[from..i]);
        if b.get(i + 1) == Some(&b'\'') {
            out.push('\'');
            from = i + 2;
        } else {
            return Ok((out, &body[i + 1..]));
        }
    }
}

fn double(body: &str) -> Got<(String, &str)> {
    let b = body.as_bytes();
    let mut out = String::new();
    let mut from = 0;
    loop {
        let i = memchr::memchr2(b'"', b'\\', &b[from..]).ok_or(GiveUp)? + from;
        out.push_str(&body[from..i]);
        if b[i] == b'"' {
            return Ok((out, &body[i + 1..]));
        }
        let e = *b.get(i + 1).ok_or(GiveUp)?;
        let hex = |len: usize| -> Got<char> {
            let digits = body.get(i + 2..i + 2 + len).ok_or(GiveUp)?;
            if !digits.bytes().all(|d| d.is_ascii_hexdigit()) {
                return Err(GiveUp);
            }
            let code = u32::from_str_radix(digits, 16).map_err(|_| GiveUp)?;
            char::from_u32(code).ok_or(GiveUp)
        };
        let (c, len) = match e {
            b'0' => ('\0', 0),
            b'a' => ('\u{7}', 0),
            b'b' => ('\u{8}', 0),
            b't' => ('\t', 0),
            b'n' => ('\n', 0),
            b'v' => ('\u{b}', 0),
            b'f' => ('\u{c}', 0),
            b'r' => ('\r', 0),
            b'e' => ('\u{1b}', 0),
            b' ' => (' ', 0),
            b'"' => ('"', 0),
            b'/' => ('/', 0),
            b'\\' => ('\\', 0),
            b'N' => ('\u{85}', 0),
            b'_' => ('\u{a0}', 0),
            b'L' => ('\u{2028}', 0),
            b'P' => ('\u{2029}', 0),
            b'x' => (hex(2)?, 2),
            b'u' => (hex(4)?, 4),
            b'U' => (hex(8)?, 8),
            _ => return Err(GiveUp),
        };
        out.push(c);
        from = i + 2 + len;
    }
}

/// What serde_yaml_ng makes of a plain scalar: null, a bool, an integer, a finite float, else
/// the text. An integer that only a 128-bit type holds gives up (serde_json's value takes
/// none).
fn plain(s: &str) -> Got<Value> {
    match s {
        "~" | "null" | "Null" | "NULL" => return Ok(Value::Null),
        "true" | "True" | "TRUE" => return Ok(Value::Bool(true)),
        "false" | "False" | "FALSE" => return Ok(Value::Bool(false)),
        _ => {}
    }
    // Neither an integer nor a finite float starts with a letter.
    if s.as_bytes()[0].is_ascii_alphabetic() {
        return Ok(Value::String(s.to_owned()));
    }
    if let Some(u) = unsigned(s, u64::from_str_radix) {
        return Ok(Value::from(u));
    }
    if let Some(i) = negative(s, i64::from_str_radix) {
        return Ok(Value::from(i));
    }
    if unsigned(s, u128::from_str_radix).is_some() || negative(s, i128::from_str_radix).is_some() {
        return Err(GiveUp);
    }
    if !leading_zero_digits(s)
        && let Some(f) = float(s)
    {
        return Ok(Value::from(f));
    }
    Ok(Value::String(s.to_owned()))
}

/// Digits after a leading zero (`0123`, `-007`): a string in YAML 1.2, not an octal number.
fn leading_zero_digits(s: &str) -> bool {
    let d = s.strip_prefix(['-', '+']).unwrap_or(s);
    d.len() > 1 && d.starts_with('0') && d[1..].bytes().all(|b| b.is_ascii_digit())
}

type Radix<T> = fn(&str, u32) -> Result<T, ParseIntError>;

/// A non-negative integer: decimal, `0x`, `0o` or `0b`, with an optional `+`.
fn unsigned<T>(s: &str, parse: Radix<T>) -> Option<T> {
    let u = s.strip_prefix('+').unwrap_or(s);
    for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] {
        if let Some(rest) = u.strip_prefix(prefix) {
            if rest.starts_with(['+', '-']) {
                return None;
            }
            if let Ok(v) = parse(rest, radix) {
                return Some(v);
            }
        }
    }
    if u.starts_with(['+', '-']) || leading_zero_digits(s) {
        return None;
    }
    parse(u, 10).ok()
}

/// A negative integer (or `-0`): decimal, `-0x`, `-0o` or `-0b`.
fn negative<T>(s: &str, parse: Radix<T>) -> Option<T> {
    for (prefix, radix) in [("-0x", 16), ("-0o", 8), ("-0b", 2)] {
        if let Some(rest) = s.strip_prefix(prefix)
            && let Ok(v) = parse(&format!("-{rest}"), radix)
        {
            return Some(v);
        }
    }
    if leading_zero_digits(s) {
        return None;
    }
    parse(s, 10).ok()
}

/// A float as YAML 1.2's core schema writes it, or as Rust reads it; only finite values but
/// for the named infinities (NaN comes out as JSON's null).
fn float(s: &str) -> Option<f64> {
    let u = match s.strip_prefix('+') {
        Some(u) if u.starts_with(['+', '-']) => return None,
        Some(u) => u,
        None => s,
    };
    match u {
        ".inf" | ".Inf" | ".INF" => return Some(f64::INFINITY),
        _ => {}
    }
    match s {
        "-.inf" | "-.Inf" | "-.INF" => return Some(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Some(f64::NAN),
        _ => {}
    }
    u.parse::<f64>().ok().filter(|f| f.is_finite())
}

#[cfg(test)]
#[path = "yaml_subset_tests.rs"]
mod tests;
