//! A JSON List (`kubectl get -o json`) cut into its items as the file is read, keeping the
//! text of new items only: the JSON side of [`super::list_stream`].
//!
//! The bytes are followed through strings, escapes and nesting, piece by piece. The items
//! array is the value of the root object's `items` key; each `{` directly in it starts an
//! item, which ends where its nesting closes. Everything else of the text (the root's other
//! keys, and what stands between items) is kept as a skeleton, with every item written as
//! `{}`. At the end [`split_json_list`] reads the skeleton: it checks all the structure the
//! cut did not (keys, separators, text after the document) by the very rules it applies to a
//! whole text, so a text is cut here only where it would be cut whole, at the same items.
//! Text nested deeper than the file source allows is not cut: the whole read refuses it.

use super::list_stream::{StreamedItem, not_utf8};
use vipflow_core::decode::ItemId;
use vipflow_core::decode::split_json_list;
use vipflow_core::decode::{SPECIAL, past_string};

/// Where the cut is in the List's structure, outside strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InList {
    /// In the root, or in a value of the root's other keys.
    Root,
    /// The root's last string at depth 1 was `"items"`, then only blanks.
    ItemsKey,
    /// Then its `:`.
    ItemsColon,
    /// In the items array, between items.
    Between,
    /// In an item.
    Item,
    /// After the items array.
    After,
}

/// Cuts one JSON List into its root (a skeleton) and its items, a piece at a time.
pub(super) struct JsonCutter<F> {
    known: F,
    max_depth: usize,
    items: Vec<StreamedItem>,
    skeleton: Vec<u8>,
    /// The open item's bytes from earlier pieces.
    spilled: Vec<u8>,
    at: InList,
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// At the root's level, a `:` was the last byte but blanks: a value comes next.
    value_next: bool,
    /// In a value at the root's level that is not quoted, an object or an array (a number,
    /// `null`, or what is no JSON): the whole text's cut reads it up to `,`, `}`, `]` or a
    /// blank, quotes and brackets in it included, and so does this cut.
    in_bare: bool,
    /// The first bytes of the string open at depth 1 (a key is recognised by them).
    key: [u8; 5],
    key_len: usize,
    /// The text is no List this can cut.
    failed: bool,
}

impl<F: Fn(&ItemId) -> bool> JsonCutter<F> {
    pub(super) fn new(known: F, max_depth: usize) -> Self {
        JsonCutter {
            known,
            max_depth,
            items: Vec::new(),
            skeleton: Vec::new(),
            spilled: Vec::new(),
            at: InList::Root,
            depth: 0,
            in_string: false,
            escaped: false,
            value_next: false,
            in_bare: false,
            key: [0; 5],
            key_len: 0,
            failed: false,
        }
    }

    /// Take the next piece; `Ok(false)` once the text is no List this can cut (reading may
    /// stop). An item not valid UTF-8 is the read error reading the file whole would give.
    pub(super) fn piece(&mut self, data: &[u8]) -> std::io::Result<bool> {
        if self.failed {
            return Ok(false);
        }
        // Where the part of `data` that is the open item's, or the skeleton's, began.
        let mut from = 0;
        let mut i = 0;
        while i < data.len() {
            if self.in_string {
                i = self.in_string_from(data, i);
                continue;
            }
            if self.at == InList::Item {
                match self.item_from(data, i, from)? {
                    Some(next) => i = next,
                    None => return Ok(self.fail()),
                }
                if self.at == InList::Between {
                    from = i;
                }
                continue;
            }
            let c = data[i];
            let blank = matches!(c, b' ' | b'\t' | b'\n' | b'\r');
            if self.in_bare {
                if !blank && !matches!(c, b',' | b'}' | b']') {
                    i += 1;
                    continue;
                }
                self.in_bare = false;
            }
            // After `"items"` only blanks, its `:`, then the array's `[` keep the key in
            // view; anything else is the root again.
            let keeps_key = matches!(
                (self.at, c),
                (_, b' ' | b'\t' | b'\n' | b'\r')
                    | (InList::ItemsKey, b':')
                    | (InList::ItemsColon, b'[')
            );
            if matches!(self.at, InList::ItemsKey | InList::ItemsColon) && !keeps_key {
                self.at = InList::Root;
            }
            if self.value_next && !blank {
                self.value_next = false;
                if !matches!(c, b'"' | b'{' | b'[') {
                    self.in_bare = true;
                    i += 1;
                    continue;
                }
            }
            match c {
                b'"' => {
                    self.in_string = true;
                    self.key_len = 0;
                }
                b'{' | b'[' => {
                    if c == b'[' && self.at == InList::ItemsColon && self.depth == 1 {
                        self.skeleton.extend_from_slice(&data[from..=i]);
                        from = i + 1;
                        self.at = InList::Between;
                    } else if c == b'{' && self.at == InList::Between {
                        self.skeleton.extend_from_slice(&data[from..i]);
                        self.skeleton.extend_from_slice(b"{}");
                        from = i;
                        self.at = InList::Item;
                    } else if self.at == InList::Between {
                        // An item that is not an object: the whole read says what is wrong.
                        return Ok(self.fail());
                    }
                    self.depth += 1;
                    if self.depth > self.max_depth {
                        return Ok(self.fail());
                    }
                }
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.at == InList::Between && self.depth == 1 {
                        self.at = InList::After;
                    }
                }
                b':' => {
                    self.value_next = self.depth == 1;
                    if self.at == InList::ItemsKey {
                        self.at = InList::ItemsColon;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        match self.at {
            InList::Item => self.spilled.extend_from_slice(&data[from..]),
            _ => self.skeleton.extend_from_slice(&data[from..]),
        }
        Ok(true)
    }

    /// Go on through the open item from `data[i]`, outside strings: where to go on from, or
    /// `None` when it nests too deep. Inside an item only strings and nesting matter, so this
    /// skips the rest in a tight loop; a string that ends in this piece is skipped here too.
    /// `from` is where this piece's part of the item begins.
    fn item_from(
        &mut self,
        data: &[u8],
        mut i: usize,
        from: usize,
    ) -> std::io::Result<Option<usize>> {
        let mut depth = self.depth;
        let next = loop {
            while i < data.len() && !SPECIAL[data[i] as usize] {
                i += 1;
            }
            let Some(&c) = data.get(i) else {
                break data.len();
            };
            i += 1;
            match c {
                b'"' => match past_string(data, i) {
                    Some(end) => i = end,
                    None => {
                        self.in_string = true;
                        break i;
                    }
                },
                b'{' | b'[' => {
                    depth += 1;
                    if depth > self.max_depth {
                        return Ok(None);
                    }
                }
                _ => {
                    depth = depth.saturating_sub(1);
                    if depth == 2 {
                        self.end_item(&data[from..i])?;
                        self.at = InList::Between;
                        break i;
                    }
                }
            }
        };
        self.depth = depth;
        Ok(Some(next))
    }

    /// Go on through the string open at `data[i]`: where to go on from.
    fn in_string_from(&mut self, data: &[u8], mut i: usize) -> usize {
        if self.escaped {
            // The byte after a `\` (in the last piece) is never the string's end.
            self.escaped = false;
            self.take_key(&data[i..=i]);
            i += 1;
        }
        let Some(k) = memchr::memchr2(b'"', b'\\', &data[i..]) else {
            self.take_key(&data[i..]);
            return data.len();
        };
        self.take_key(&data[i..i + k]);
        let at = i + k;
        if data[at] == b'"' {
            self.in_string = false;
            self.string_ended();
            return at + 1;
        }
        match data.get(at + 1) {
            Some(_) => {
                self.take_key(&data[at..at + 2]);
                at + 2
            }
            None => {
                self.take_key(&data[at..=at]);
                self.escaped = true;
                data.len()
            }
        }
    }

    fn take_key(&mut self, bytes: &[u8]) {
        if self.depth == 1 && self.key_len <= self.key.len() {
            for &b in bytes {
                if self.key_len < self.key.len() {
                    self.key[self.key_len] = b;
                }
                self.key_len += 1;
                if self.key_len > self.key.len() {
                    break;
                }
            }
        }
    }

    fn string_ended(&mut self) {
        if self.depth == 1 && self.at == InList::Root && self.key_len == 5 && &self.key == b"items"
        {
            self.at = InList::ItemsKey;
        }
    }

    fn fail(&mut self) -> bool {
        self.failed = true;
        self.skeleton = Vec::new();
        self.spilled = Vec::new();
        false
    }

    /// End the open item, whose text is the spilled bytes then `tail`.
    fn end_item(&mut self, tail: &[u8]) -> std::io::Result<()> {
        let whole: &[u8] = if self.spilled.is_empty() {
            tail
        } else {
            self.spilled.extend_from_slice(tail);
            &self.spilled
        };
        let text = std::str::from_utf8(whole).map_err(|_| not_utf8())?;
        let id = ItemId::of(text);
        let text = (!(self.known)(&id)).then(|| text.to_owned());
        self.spilled.clear();
        // No line: a JSON List's nesting is checked as it is cut, not item by item, and
        // that check is what says lines.
        self.items.push(StreamedItem { id, text, line: 0 });
        Ok(())
    }

    /// The root's text (its items emptied) and the items, or `None` when the text is no List
    /// this can cut, or is cut where the whole text would not be.
    pub(super) fn finish(self) -> std::io::Result<Option<(String, Vec<StreamedItem>)>> {
        if self.failed || self.at != InList::After || self.in_string {
            return Ok(None);
        }
        let skeleton = String::from_utf8(self.skeleton).map_err(|_| not_utf8())?;
        match split_json_list(&skeleton) {
            Some(l) if l.items.len() == self.items.len() => Ok(Some((l.root, self.items))),
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `text` cut in pieces of the sizes in `sizes` (cycled), as [`split_json_list`] would
    /// give it: the root and each item's text.
    fn cut(text: &str, sizes: &[usize], max_depth: usize) -> Option<(String, Vec<String>)> {
        let mut c = JsonCutter::new(|_: &ItemId| false, max_depth);
        let b = text.as_bytes();
        let (mut at, mut k) = (0, 0);
        while at < b.len() {
            let n = sizes[k % sizes.len()].max(1).min(b.len() - at);
            if !c.piece(&b[at..at + n]).expect("UTF-8") {
                return None;
            }
            at += n;
            k += 1;
        }
        let (root, items) = c.finish().expect("UTF-8")?;
        Some((root, items.into_iter().filter_map(|i| i.text).collect()))
    }

    fn whole(text: &str) -> Option<(String, Vec<String>)> {
        let l = split_json_list(text)?;
        Some((l.root, l.items.iter().map(|s| s.to_string()).collect()))
    }

    #[test]
    fn a_kubectl_list_is_cut_as_the_whole_text_is() {
        let mut text = String::from("{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n");
        for i in 0..500 {
            if i > 0 {
                text.push_str(",\n");
            }
            text.push_str(&format!(
                "        {{\n            \"kind\": \"Service\",\n            \"metadata\": {{\"name\": \"s{i}\", \"annotations\": {{\"a\": \"{{\\\"x\\\": [1]}}\"}}}},\n            \"spec\": {{\"ports\": [{{\"port\": {i}}}]}}\n        }}"
            ));
        }
        text.push_str(
            "\n    ],\n    \"kind\": \"List\",\n    \"metadata\": {\"resourceVersion\": \"\"}\n}\n",
        );
        let want = whole(&text).expect("a List");
        assert_eq!(want.1.len(), 500);
        for sizes in [&[1 << 16][..], &[1], &[7, 3, 1000], &[text.len()]] {
            assert_eq!(cut(&text, sizes, 64).as_ref(), Some(&want), "{sizes:?}");
        }
    }

    #[test]
    fn what_the_whole_cut_refuses_is_not_cut() {
        for text in vipflow_core::decode::NOT_LISTS {
            assert_eq!(cut(text, &[3], 64), None, "{text}");
            assert_eq!(whole(text), None, "{text}");
        }
    }

    #[test]
    fn a_bare_value_at_the_roots_level_is_read_as_the_whole_cut_reads_it() {
        // Quotes and brackets in a value that is not quoted do not open anything for the
        // whole text's cut, which reads such a value up to `,`, `}`, `]` or a blank.
        for text in [
            r#"{"a": 1"x, "items": [{"b": 2}], "kind": "List"}"#,
            r#"{"a": x[1, "items": [{}], "kind": "List"}"#,
            "{\"items\": [{}], \"a\":\n1\"}\n",
        ] {
            let want = whole(text);
            assert!(want.is_some(), "{text}");
            assert_eq!(cut(text, &[1], 64), want, "{text}");
            assert_eq!(cut(text, &[text.len()], 64), want, "{text}");
        }
    }

    #[test]
    fn text_nested_deeper_than_allowed_is_not_cut() {
        let text = r#"{"items": [{"a": [[[1]]]}], "kind": "List"}"#;
        assert!(cut(text, &[5], 6).is_some());
        assert_eq!(cut(text, &[5], 5), None);
        assert!(whole(text).is_some());
    }

    #[test]
    fn an_item_not_utf8_is_the_whole_reads_error() {
        let mut c = JsonCutter::new(|_: &ItemId| false, 64);
        let e = c
            .piece(b"{\"items\": [{\"a\": \"\xff\"}]}")
            .expect_err("not UTF-8");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    }

    fn json_text() -> impl Strategy<Value = String> {
        let atom = prop_oneof![
            Just("1".to_string()),
            Just("null".to_string()),
            "\"([a-z{}\\[\\],:]|\\\\\"|\\\\\\\\|\\\\n){0,6}\"".prop_map(|s| s),
        ];
        let value = atom.prop_recursive(3, 20, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec(("[a-z]{1,3}", inner), 0..3).prop_map(|v| {
                    let kv: Vec<String> = v.iter().map(|(k, x)| format!("\"{k}\": {x}")).collect();
                    format!("{{{}}}", kv.join(", "))
                }),
            ]
        });
        let item = prop::collection::vec(("[a-z]{1,3}", value.clone()), 0..3).prop_map(|v| {
            let kv: Vec<String> = v.iter().map(|(k, x)| format!("\"{k}\":{x}")).collect();
            format!("{{{}}}", kv.join(",\n "))
        });
        (
            prop::collection::vec(item, 0..5),
            prop::collection::vec(("[a-z]{1,5}|items", value), 0..3),
            "[ \n]{0,2}",
        )
            .prop_map(|(items, others, ws)| {
                let mut keys: Vec<String> = others
                    .iter()
                    .map(|(k, v)| format!("\"{k}\":{ws}{v}"))
                    .collect();
                let at = keys.len() / 2;
                keys.insert(
                    at,
                    format!("\"items\":{ws}[{ws}{}{ws}]", items.join(&format!(",{ws}"))),
                );
                format!("{ws}{{{}}}{ws}", keys.join(&format!(",{ws}")))
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// In pieces of any sizes, the cut gives what the whole text's cut gives: for Lists,
        /// and for texts one character off one.
        #[test]
        fn pieces_cut_as_the_whole_text(
            text in json_text(),
            sizes in prop::collection::vec(1usize..40, 1..4),
            at in any::<prop::sample::Index>(),
            put in prop::option::of(prop::sample::select(
                vec!['"', '\\', '{', '}', '[', ']', ',', ':', ' ', 'x'],
            )),
            mutated in any::<bool>(),
        ) {
            let text = if mutated {
                let mut chars: Vec<char> = text.chars().collect();
                let i = at.index(chars.len().max(1)).min(chars.len());
                match put {
                    Some(c) => chars.insert(i, c),
                    None if i < chars.len() => { chars.remove(i); }
                    None => {}
                }
                chars.into_iter().collect()
            } else {
                text
            };
            prop_assert_eq!(cut(&text, &sizes, 64), whole(&text), "{:?}", text);
        }
    }
}
