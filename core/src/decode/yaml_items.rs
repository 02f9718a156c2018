//! Cutting a block-style YAML List into its items, so each is parsed on its own (see
//! [`super::objects_text`]).

/// A single-document YAML List split at its items: the root's own lines (the items replaced
/// by `items: []`) and each item's text, starting with its `- `.
pub struct BlockList<'a> {
    pub root: String,
    pub items: Vec<&'a str>,
}

/// Cut `text` into a `BlockList`, or `None` when it is not one, and the whole-document
/// path must read it (see [`Splitter`]).
pub fn split_block_list(text: &str) -> Option<BlockList<'_>> {
    let b = text.as_bytes();
    if other_break(b) {
        return None;
    }
    let mut split = Splitter::default();
    let mut items = Vec::new();
    if let Some(s) = split.lines(text, |item, _| items.push(item))? {
        items.push(&text[s..]);
    }
    Some(BlockList {
        root: split.finish()?.0,
        items,
    })
}

/// Where one line of a block-style List goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineCut {
    /// The root's (the splitter keeps it); an item open before it ended.
    Root,
    /// A blank line or comment between `items:` and the first item: part of nothing.
    Skip,
    /// The first line of an item; an item open before it ended.
    Start,
    /// One more line of the open item.
    More,
}

#[derive(Debug, Default)]
enum BlockAt {
    #[default]
    Root,
    ItemsKey,
    Items {
        indent: usize,
    },
}

/// Cuts a single-document block-style YAML List into the root's own lines and its items, one
/// line at a time, so that a file is cut as it is read.
///
/// Inside a block sequence every line of an item is indented deeper than the item's `- `,
/// except blank lines and comments; a line back at the `- ` column starts the next item, one
/// at column 0 the next root key. That holds for every emitter's output; what does not fit
/// (tabs, directives, several documents, an item that is not a `- ` entry) is given up on.
#[derive(Debug, Default)]
pub struct Splitter {
    at: BlockAt,
    seen_content: bool,
    found: bool,
    root: String,
    /// Lines taken so far.
    lines: usize,
    /// The line the open item began on, while one is open.
    item_line: Option<usize>,
}

impl Splitter {
    /// Take whole lines (each with its `\n`, but for a text's last), which hold no
    /// [`other_break`] (a text is checked for those at once, not line by line). `ended` gets
    /// each item that ends within them: its text in `text` (from the start of `text` when the
    /// item began in earlier lines) and the line it began on. Returns where in `text` the item
    /// still open begins (0 when it began earlier), or `None` when the text is no List this can
    /// cut.
    pub fn lines<'t>(
        &mut self,
        text: &'t str,
        mut ended: impl FnMut(&'t str, usize),
    ) -> Option<Option<usize>> {
        let b = text.as_bytes();
        // Where the open item's text in `text` starts.
        let mut here = 0;
        let mut start = 0;
        // `split_inclusive('\n')`, by memchr: the lines of a big List are many.
        let ends = memchr::memchr_iter(b'\n', b).map(|i| i + 1);
        let ends = ends.chain((b.last().is_some_and(|&c| c != b'\n')).then_some(b.len()));
        for end in ends {
            self.lines += 1;
            match self.line(&text[start..end])? {
                LineCut::More => {}
                LineCut::Start => {
                    if let Some(line) = self.item_line.replace(self.lines) {
                        ended(&text[here..start], line);
                    }
                    here = start;
                }
                LineCut::Root | LineCut::Skip => {
                    if let Some(line) = self.item_line.take() {
                        ended(&text[here..start], line);
                    }
                }
            }
            start = end;
        }
        Some(self.item_line.map(|_| here))
    }

    /// Where `line` (with its `\n`, unless it is the last) goes; `None` when the text is no
    /// List this can cut.
    fn line(&mut self, line: &str) -> Option<LineCut> {
        if let BlockAt::Items { indent: k } = self.at
            && inside_item(line.as_bytes(), k)
        {
            return Some(LineCut::More);
        }
        let body = line.trim_end_matches(['\n', '\r']);
        let content = body.trim_start_matches([' ', '\t']);
        if content.is_empty() || content.starts_with('#') {
            // Part of whatever it sits in; kept only where it cannot be in a block scalar.
            return match self.at {
                BlockAt::Root => {
                    self.root.push_str(line);
                    Some(LineCut::Root)
                }
                // Dropped: it must not hide what would make the whole text fail (a character
                // YAML refuses, a tab where YAML reads indentation).
                BlockAt::ItemsKey if !printable(line) || line.contains('\t') => None,
                BlockAt::ItemsKey => Some(LineCut::Skip),
                BlockAt::Items { .. } => Some(LineCut::More),
            };
        }
        let indent = body.len() - body.trim_start_matches(' ').len();
        if body[indent..].starts_with('\t') || body.starts_with('%') {
            return None;
        }
        let marker = |m: &str| {
            body.strip_prefix(m)
                .is_some_and(|r| r.is_empty() || r.starts_with([' ', '\t']))
        };
        if marker("---") || marker("...") {
            if self.seen_content {
                return None;
            }
            self.root.push_str(line);
            return Some(LineCut::Root);
        }
        // The root must be a block mapping; a flow one (`{`), a bare scalar or anything
        // fancier is read whole.
        if !self.seen_content
            && body.starts_with(['{', '[', '"', '\'', '?', '!', '&', '*', '|', '>'])
        {
            return None;
        }
        self.seen_content = true;
        let rest = &body[indent..];
        let entry = rest.starts_with("- ");
        if rest == "-" {
            return None;
        }
        // A quoted scalar that goes on to the next lines may hold a line that looks like a key
        // or an item at any column: only a whole parse knows where it ends.
        if matches!(self.at, BlockAt::Root) && unclosed_quote(rest) {
            return None;
        }
        loop {
            match self.at {
                BlockAt::Root => {
                    // `items:` alone, or followed by a comment (`#` after a space: `items:#x`
                    // is a plain scalar, not a key).
                    let key = body.strip_prefix("items:").is_some_and(|r| {
                        let t = r.trim_start_matches([' ', '\t']);
                        t.is_empty() || (t.len() < r.len() && t.starts_with('#'))
                    });
                    if key {
                        if self.found || !printable(line) {
                            return None;
                        }
                        self.found = true;
                        self.at = BlockAt::ItemsKey;
                    } else {
                        self.root.push_str(line);
                    }
                    return Some(LineCut::Root);
                }
                BlockAt::ItemsKey if entry => {
                    self.root.push_str("items: []\n");
                    self.at = BlockAt::Items { indent };
                    return Some(LineCut::Start);
                }
                BlockAt::ItemsKey if indent == 0 => {
                    // `items:` with nothing under it (null): the root says so.
                    self.root.push_str("items:\n");
                    self.at = BlockAt::Root;
                }
                BlockAt::ItemsKey => return None,
                BlockAt::Items { indent: k } => {
                    if indent > k {
                        return Some(LineCut::More);
                    } else if indent == k && entry {
                        return Some(LineCut::Start);
                    } else if indent == 0 {
                        // The item ended; the line is the root's.
                        self.at = BlockAt::Root;
                    } else {
                        return None;
                    }
                }
            }
        }
    }

    /// The root's own lines, the items replaced by `items: []`, once every line was given,
    /// and the line the item still open began on; `None` when there was no `items:`.
    pub fn finish(mut self) -> Option<(String, Option<usize>)> {
        if let BlockAt::ItemsKey = self.at {
            self.root.push_str("items:\n");
        }
        self.found.then_some((self.root, self.item_line))
    }
}

/// Whether text breaks lines other than at `\n`: at a lone `\r` or (libyaml) at NEL, LS or
/// PS. Lines are cut at `\n` only, so such a text is read whole.
pub fn other_break(b: &[u8]) -> bool {
    memchr::memchr3_iter(b'\r', 0xc2, 0xe2, b).any(|i| match b[i] {
        b'\r' => b.get(i + 1) != Some(&b'\n'),
        0xc2 => b.get(i + 1) == Some(&0x85),
        _ => b.get(i + 1) == Some(&0x80) && matches!(b.get(i + 2), Some(0xa8 | 0xa9)),
    })
}

/// Whether `line` is plainly more of an item whose `- ` is at column `k`: indented deeper by
/// spaces, then a character that starts content. The lines of an item are most of a List, so
/// they are told apart here without the general steps below; what this passes over (blank
/// lines, comments, tabs, a bare `-`) takes those steps.
fn inside_item(line: &[u8], k: usize) -> bool {
    let indent = line.iter().take_while(|&&c| c == b' ').count();
    match line.get(indent) {
        Some(b'-') => indent > k && !line[indent + 1..].iter().all(|&c| c == b'\r' || c == b'\n'),
        Some(b'\t' | b'\r' | b'\n' | b'#') | None => false,
        Some(_) => indent > k,
    }
}

/// Whether a line's value (after any `- ` and `key: `) opens a quoted scalar it does not
/// close.
pub fn unclosed_quote(content: &str) -> bool {
    let mut v = content.trim_end();
    while let Some(r) = v.strip_prefix("- ") {
        v = r.trim_start();
    }
    if !v.starts_with(['"', '\'']) {
        match v.find(": ") {
            Some(i) => v = v[i + 2..].trim_start(),
            None => return false,
        }
    }
    let mut chars = v.chars();
    match chars.next() {
        Some('"') => {
            let mut escaped = false;
            for c in chars {
                match (escaped, c) {
                    (true, _) => escaped = false,
                    (false, '\\') => escaped = true,
                    (false, '"') => return false,
                    _ => {}
                }
            }
            true
        }
        Some('\'') => {
            // `''` inside is an escaped quote; a single one closes.
            let rest = chars.as_str();
            let mut it = rest.chars().peekable();
            while let Some(c) = it.next() {
                if c == '\'' {
                    if it.peek() == Some(&'\'') {
                        it.next();
                    } else {
                        return false;
                    }
                }
            }
            true
        }
        _ => false,
    }
}

/// Whether every character of `text` may appear in YAML (the parser refuses the others
/// anywhere, comments included).
fn printable(text: &str) -> bool {
    text.chars().all(|c| {
        matches!(c, '\t' | '\n' | '\r' | ' '..='~' | '\u{85}' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}')
            || c >= '\u{10000}'
    })
}
