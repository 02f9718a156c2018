//! How deep a text nests, checked before any parser reads it.

/// The bytes that open a string or change the nesting: a scan for structure skips every other
/// byte in a tight loop.
pub(super) const SPECIAL: [bool; 256] = {
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
pub(crate) fn check_depth(text: &str, max: usize) -> Result<(), String> {
    check_depth_from(text, max, 1)
}

/// [`check_depth`] for text that starts on line `first_line` of its file.
pub(super) fn check_depth_from(text: &str, max: usize, first_line: usize) -> Result<(), String> {
    let b = text.as_bytes();
    let (mut depth, mut i) = (0usize, 0usize);
    while i < b.len() {
        if depth == 0 {
            // A closer changes nothing at depth 0: what matters is found by memchr (most of
            // a kubectl List is at depth 0).
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
                None => return Ok(()),
            },
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    let line = first_line + memchr::memchr_iter(b'\n', &b[..i]).count();
                    return Err(format!(
                        "line {line}: nested more than {max} levels deep: not a Kubernetes object"
                    ));
                }
            }
            _ => depth = depth.saturating_sub(1),
        }
    }
    Ok(())
}

/// Where the string whose opening `"` is just before `i` ends: just after its closing `"`,
/// past escaped characters. `None` when it does not end.
pub(super) fn past_string(b: &[u8], mut i: usize) -> Option<usize> {
    loop {
        let k = memchr::memchr2(b'"', b'\\', b.get(i..)?)?;
        if b[i + k] == b'"' {
            return Some(i + k + 1);
        }
        i += k + 2;
    }
}
