//! How deep a text nests, checked before any parser reads it.

/// The bytes that open a string or change the nesting: a scan for structure skips every other
/// byte in a tight loop.
pub const SPECIAL: [bool; 256] = {
    let mut t = [false; 256];
    t[b'"' as usize] = true;
    t[b'[' as usize] = true;
    t[b'{' as usize] = true;
    t[b']' as usize] = true;
    t[b'}' as usize] = true;
    t
};

/// The deepest `[`/`{` nesting of `text` outside double-quoted strings, or an error once it
/// passes `max`. Linear, so a hostile file is refused before a parser spends time on it; it
/// runs on every file version, so it skips the bytes that change nothing in a tight loop and
/// counts lines only for the error.
pub fn check_depth(text: &str, max: usize) -> Result<(), String> {
    check_depth_from(text, max, 1)
}

/// [`check_depth`] for text that starts on line `first_line` of its file.
pub fn check_depth_from(text: &str, max: usize, first_line: usize) -> Result<(), String> {
    DepthScan::new(max, first_line).piece(text.as_bytes())
}

/// [`check_depth`] over a text handed over in pieces, as a file is read: a file nested too
/// deep is refused where it breaks, before the rest of it is read, cut or parsed.
#[derive(Debug)]
pub struct DepthScan {
    max: usize,
    depth: usize,
    /// Inside a double-quoted string, and whether the last piece ended on its `\`.
    string: Quoted,
    /// The line the next piece starts on.
    line: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quoted {
    No,
    Open,
    /// Open, and the byte after the last piece's final `\` is escaped.
    Escape,
}

impl DepthScan {
    pub fn new(max: usize, first_line: usize) -> DepthScan {
        DepthScan {
            max,
            depth: 0,
            string: Quoted::No,
            line: first_line,
        }
    }

    /// Take the next piece of the text; the error names the line where the nesting passed
    /// the limit. Nothing after an error is checked.
    pub fn piece(&mut self, b: &[u8]) -> Result<(), String> {
        if b.is_empty() {
            return Ok(());
        }
        let mut i = 0usize;
        match self.string {
            Quoted::No => {}
            Quoted::Open | Quoted::Escape => {
                let from = usize::from(self.string == Quoted::Escape);
                match past_string(b, from) {
                    Some(end) => {
                        i = end;
                        self.string = Quoted::No;
                    }
                    None => {
                        self.string = open_at_end(b, from);
                        self.line += memchr::memchr_iter(b'\n', b).count();
                        return Ok(());
                    }
                }
            }
        }
        while i < b.len() {
            if self.depth == 0 {
                // A closer changes nothing at depth 0: what matters is found by memchr (most
                // of a kubectl List is at depth 0).
                match memchr::memchr3(b'"', b'[', b'{', &b[i..]) {
                    Some(k) => i += k,
                    None => break,
                }
            } else {
                while i < b.len() && !SPECIAL[b[i] as usize] {
                    i += 1;
                }
            }
            let Some(&c) = b.get(i) else { break };
            i += 1;
            match c {
                b'"' => match past_string(b, i) {
                    Some(end) => i = end,
                    None => {
                        self.string = open_at_end(b, i);
                        break;
                    }
                },
                b'[' | b'{' => {
                    self.depth += 1;
                    if self.depth > self.max {
                        let line = self.line + memchr::memchr_iter(b'\n', &b[..i]).count();
                        return Err(format!(
                            "line {line}: nested more than {} levels deep: not a Kubernetes object",
                            self.max
                        ));
                    }
                }
                _ => self.depth = self.depth.saturating_sub(1),
            }
        }
        self.line += memchr::memchr_iter(b'\n', b).count();
        Ok(())
    }
}

/// How a string that opened at `i` (just past its `"`, or past an escaped byte) and did not
/// end in `b` stands at the end of `b`: open, or open with the next piece's first byte
/// escaped.
fn open_at_end(b: &[u8], mut i: usize) -> Quoted {
    while let Some(k) = b.get(i..).and_then(|rest| memchr::memchr(b'\\', rest)) {
        if i + k + 1 == b.len() {
            return Quoted::Escape;
        }
        i += k + 2;
    }
    Quoted::Open
}

/// Where the string whose opening `"` is just before `i` ends: just after its closing `"`,
/// past escaped characters. `None` when it does not end.
pub fn past_string(b: &[u8], mut i: usize) -> Option<usize> {
    loop {
        let k = memchr::memchr2(b'"', b'\\', b.get(i..)?)?;
        if b[i + k] == b'"' {
            return Some(i + k + 1);
        }
        i += k + 2;
    }
}
