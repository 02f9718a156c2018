//! An objects file read piece by piece and cut into a List's items as it is read, keeping the
//! text of new items only: a block-style YAML List, or a JSON one
//! ([`super::json_stream`]).
//!
//! A changed file is nearly always the last version with an item or two changed. Reading it
//! whole held its whole text (tens of MB at 10,000 Services) beside everything the agent
//! keeps, at every change; here each line is handed to the [`Splitter`] (YAML) or each piece
//! to the JSON cut, each item is hashed when it ends, and an item the
//! [`ItemCache`](super::item_cache::ItemCache) knows is kept as its name alone. The whole file
//! is hashed on the way, as [`super::file`] identifies versions. A text that is no List this
//! can cut (several documents, flow style) is read whole after all, as before.

use super::file::{FileError, read_pieces};
use super::json_stream::JsonCutter;
use std::path::Path;
use vipflow_core::decode::DepthScan;
use vipflow_core::decode::ItemId;
use vipflow_core::decode::MAX_DEPTH;
use vipflow_core::decode::{ListItem, Syntax};
use vipflow_core::decode::{Splitter, other_break};

/// A List as read: how it is written, its root's own text, its items, and the whole
/// content's length and hash.
#[derive(Debug)]
pub(super) struct StreamedList {
    pub(super) syntax: Syntax,
    pub(super) root: String,
    pub(super) items: Vec<StreamedItem>,
    pub(super) len: usize,
    pub(super) hash: u128,
    /// Why the text is refused as it was read (it nests too deep where this says): nothing
    /// after that point was cut, and no item is to be parsed.
    pub(super) refused: Option<String>,
}

/// One item: its name, its text unless it was known, and the line it starts on.
#[derive(Debug)]
pub(super) struct StreamedItem {
    pub(super) id: ItemId,
    pub(super) text: Option<String>,
    pub(super) line: usize,
}

impl StreamedList {
    /// The items as [`super::objects_text::parse_streamed`] takes them.
    pub(super) fn list_items(&self) -> Vec<ListItem<'_>> {
        self.items
            .iter()
            .map(|i| ListItem {
                id: i.id,
                text: i.text.as_deref(),
                line: i.line,
            })
            .collect()
    }
}

/// The cut a text takes, chosen by its first byte that is not blank: `{` is JSON.
enum TextCut<F> {
    Undecided(Vec<u8>),
    /// The whole text's nesting is checked as it is read, so that a file nested too deep
    /// near its start is refused there, not after every line of it was cut and every item
    /// parsed (each item on its own may nest little: a flow collection left open nests
    /// across them). A JSON List's nesting is checked by its cut.
    Yaml(YamlPieces<F>, DepthScan),
    Json(JsonCutter<F>),
    /// Nested too deep: the rest is only hashed.
    Refused(String),
}

/// Read `path` (at most `max` bytes) as a List; an item for which `known` is true keeps no
/// text. `Ok(None)`: the content is no List this can cut, and must be read whole.
pub(super) fn read_list(
    path: &Path,
    max: u64,
    known: impl Fn(&ItemId) -> bool,
) -> Result<Option<StreamedList>, FileError> {
    let rd = |source| FileError::Read {
        path: path.into(),
        source,
    };
    let size = std::fs::metadata(path).map_err(rd)?.len();
    if size > max {
        return Err(FileError::TooLarge {
            path: path.into(),
            size,
            limit: max,
        });
    }
    let mut hash = xxhash_rust::xxh3::Xxh3::new();
    let mut known = Some(known);
    let mut cut = TextCut::Undecided(Vec::new());
    let mut cuttable = true;
    let len = read_pieces(path, max, |data| {
        hash.update(data);
        if let TextCut::Undecided(blank) = &mut cut {
            let Some(first) = data
                .iter()
                .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
            else {
                blank.extend_from_slice(data);
                return Ok(true);
            };
            let blank = std::mem::take(blank);
            let Some(known) = known.take() else {
                return Ok(false);
            };
            cut = if *first == b'{' {
                TextCut::Json(JsonCutter::new(known, MAX_DEPTH))
            } else {
                TextCut::Yaml(YamlPieces::new(known), DepthScan::new(MAX_DEPTH, 1))
            };
            if !blank.is_empty() && !cut.piece(&blank)? {
                cuttable = false;
                return Ok(false);
            }
        }
        if !cut.piece(data)? {
            cuttable = false;
            return Ok(false);
        }
        Ok(true)
    })?;
    if !cuttable {
        return Ok(None);
    }
    let (syntax, cut) = match cut {
        TextCut::Undecided(_) => return Ok(None),
        TextCut::Yaml(y, _) => (Syntax::Yaml, y.finish().map_err(rd)?),
        TextCut::Json(j) => (Syntax::Json, j.finish().map_err(rd)?),
        TextCut::Refused(detail) => {
            return Ok(Some(StreamedList {
                syntax: Syntax::Yaml,
                root: String::new(),
                items: Vec::new(),
                len,
                hash: hash.digest128(),
                refused: Some(detail),
            }));
        }
    };
    let Some((root, items)) = cut else {
        return Ok(None);
    };
    Ok(Some(StreamedList {
        syntax,
        root,
        items,
        len,
        hash: hash.digest128(),
        refused: None,
    }))
}

impl<F: Fn(&ItemId) -> bool> TextCut<F> {
    fn piece(&mut self, data: &[u8]) -> std::io::Result<bool> {
        match self {
            TextCut::Undecided(_) => Ok(false),
            TextCut::Yaml(y, depth) => match depth.piece(data) {
                Ok(()) => y.piece(data),
                Err(detail) => {
                    *self = TextCut::Refused(detail);
                    Ok(true)
                }
            },
            TextCut::Json(j) => j.piece(data),
            TextCut::Refused(_) => Ok(true),
        }
    }
}

/// A YAML List's pieces cut at whole lines for the [`Cutter`].
struct YamlPieces<F> {
    cutter: Cutter<F>,
    /// The start of a line that the last piece cut.
    carry: Vec<u8>,
}

impl<F: Fn(&ItemId) -> bool> YamlPieces<F> {
    fn new(known: F) -> Self {
        YamlPieces {
            cutter: Cutter::new(known),
            carry: Vec::new(),
        }
    }

    /// Take the next piece; `Ok(false)` once the text is no List this can cut.
    fn piece(&mut self, data: &[u8]) -> std::io::Result<bool> {
        let YamlPieces { cutter, carry } = self;
        let Some(last) = memchr::memrchr(b'\n', data) else {
            carry.extend_from_slice(data);
            return Ok(true);
        };
        // The line the last piece began, then this piece's other whole lines.
        let (first, rest) = match memchr::memchr(b'\n', data) {
            Some(i) if !carry.is_empty() => {
                carry.extend_from_slice(&data[..=i]);
                (Some(std::mem::take(carry)), &data[i + 1..=last])
            }
            _ => (None, &data[..=last]),
        };
        for lines in first.as_deref().into_iter().chain([rest]) {
            if !cutter.lines(lines)? {
                return Ok(false);
            }
        }
        if let Some(mut c) = first {
            // Its allocation is kept for the next piece's cut line.
            c.clear();
            *carry = c;
        }
        carry.extend_from_slice(&data[last + 1..]);
        Ok(true)
    }

    fn finish(self) -> std::io::Result<Option<(String, Vec<StreamedItem>)>> {
        let YamlPieces { mut cutter, carry } = self;
        if !carry.is_empty() && !cutter.lines(&carry)? {
            return Ok(None);
        }
        Ok(cutter.finish())
    }
}

/// A cut piece that is not UTF-8: the read error, as `read_to_string` says it.
pub(super) fn not_utf8() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        "stream did not contain valid UTF-8",
    )
}

/// The [`Splitter`] and the items read.
struct Cutter<F> {
    split: Splitter,
    known: F,
    items: Vec<StreamedItem>,
    /// The open item's text from earlier pieces.
    spilled: String,
}

impl<F: Fn(&ItemId) -> bool> Cutter<F> {
    fn new(known: F) -> Self {
        Cutter {
            split: Splitter::default(),
            known,
            items: Vec::new(),
            spilled: String::new(),
        }
    }

    /// Take whole lines (each with its `\n`, but for the file's last); `false` when the text
    /// is no List this can cut. An item that ends within them is hashed where it lies, and
    /// copied only if it is new.
    fn lines(&mut self, bytes: &[u8]) -> Result<bool, std::io::Error> {
        if other_break(bytes) {
            return Ok(false);
        }
        let text = std::str::from_utf8(bytes).map_err(|_| not_utf8())?;
        let Cutter {
            split,
            known,
            items,
            spilled,
        } = self;
        match split.lines(text, |tail, line| {
            end_item(known, items, spilled, tail, line)
        }) {
            None => Ok(false),
            Some(open) => {
                if let Some(here) = open {
                    spilled.push_str(&text[here..]);
                }
                Ok(true)
            }
        }
    }

    fn finish(self) -> Option<(String, Vec<StreamedItem>)> {
        let Cutter {
            split,
            known,
            mut items,
            mut spilled,
        } = self;
        let (root, open) = split.finish()?;
        if let Some(line) = open {
            end_item(&known, &mut items, &mut spilled, "", line);
        }
        Some((root, items))
    }
}

/// End the item that began on `line` and whose text is `spilled` then `tail`: hashed, and
/// kept unless `known`.
fn end_item(
    known: &impl Fn(&ItemId) -> bool,
    items: &mut Vec<StreamedItem>,
    spilled: &mut String,
    tail: &str,
    line: usize,
) {
    let whole = if spilled.is_empty() {
        tail
    } else {
        spilled.push_str(tail);
        spilled.as_str()
    };
    let id = ItemId::of(whole);
    let text = (!known(&id)).then(|| whole.to_owned());
    // The buffer is kept for the next item that spans pieces.
    spilled.clear();
    items.push(StreamedItem { id, text, line });
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};
    use std::sync::Arc;
    use vipflow_core::decode::{
        ItemCache, parse, parse_cached, parse_streamed, parse_whole, split_block_list,
    };

    fn write(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        std::io::Write::write_all(&mut f, text.as_bytes()).expect("write");
        f
    }

    fn list(n: usize) -> String {
        let mut t = String::from("apiVersion: v1\nitems:\n");
        for i in 0..n {
            t.push_str(&format!(
                "- apiVersion: v1\n  kind: Service\n  metadata:\n    name: s{i}\n    # note\n\n  spec:\n    ports:\n    - port: {}\n",
                80 + i
            ));
        }
        t.push_str("kind: List\nmetadata:\n  resourceVersion: \"\"\n");
        t
    }

    #[test]
    fn a_list_read_in_pieces_is_cut_as_the_whole_text_is() {
        let text = list(3000);
        let f = write(&text);
        let got = read_list(f.path(), u64::MAX, |_| false)
            .expect("read")
            .expect("a block list");
        assert_eq!(got.syntax, Syntax::Yaml);
        let whole = split_block_list(&text).expect("a block list");
        assert_eq!(got.root, whole.root);
        let texts: Vec<&str> = got.items.iter().filter_map(|i| i.text.as_deref()).collect();
        assert_eq!(texts, whole.items);
        assert_eq!(got.len, text.len());
        assert_eq!(got.hash, xxhash_rust::xxh3::xxh3_128(text.as_bytes()));
        // Each item starts on its `- ` line.
        let first = got.items[0].line;
        assert_eq!(text.lines().nth(first - 1), Some("- apiVersion: v1"));
    }

    #[test]
    fn known_items_keep_no_text() {
        let text = list(10);
        let f = write(&text);
        let whole = split_block_list(&text).expect("a block list");
        let known = ItemId::of(whole.items[4]);
        let got = read_list(f.path(), u64::MAX, |id| *id == known)
            .expect("read")
            .expect("a block list");
        assert_eq!(got.items.len(), 10);
        assert!(got.items[4].text.is_none());
        assert_eq!(got.items[4].id, known);
        assert!(
            got.items
                .iter()
                .enumerate()
                .all(|(i, it)| i == 4 || it.text.is_some())
        );
    }

    #[test]
    fn a_json_list_is_cut_by_the_json_cut() {
        let mut text = String::from(" \n{\"apiVersion\": \"v1\", \"items\": [\n");
        for i in 0..3000 {
            let sep = if i > 0 { ",\n" } else { "" };
            text.push_str(&format!(
                "{sep}  {{\"kind\": \"Service\", \"metadata\": {{\"name\": \"s{i}\"}}, \"spec\": {{\"ports\": [{{\"port\": {i}}}]}}}}"
            ));
        }
        text.push_str("\n], \"kind\": \"List\"}\n");
        let f = write(&text);
        let whole = vipflow_core::decode::split_json_list(&text).expect("a List");
        let known = ItemId::of(whole.items[7]);
        let got = read_list(f.path(), u64::MAX, |id| *id == known)
            .expect("read")
            .expect("a JSON List");
        assert_eq!(got.syntax, Syntax::Json);
        assert_eq!(got.root, whole.root);
        assert!(got.items[7].text.is_none());
        let texts: Vec<&str> = got
            .items
            .iter()
            .map(|i| i.text.as_deref().unwrap_or(whole.items[7]))
            .collect();
        assert_eq!(texts, whole.items);
        assert_eq!(got.len, text.len());
        assert_eq!(got.hash, xxhash_rust::xxh3::xxh3_128(text.as_bytes()));
        let f = write("{\"kind\": \"List\", \"items\": []}");
        let empty = read_list(f.path(), u64::MAX, |_| false)
            .expect("read")
            .expect("a List");
        assert!(empty.items.is_empty());
    }

    #[test]
    fn what_is_no_block_list_is_left_to_the_whole_read() {
        for text in [
            "{\"kind\": \"List\", \"items\": [1]}",
            "kind: List\nitems: [{}]\n",
            "kind: Service\n---\nkind: Service\n",
            "kind: List\nitems:\n- a: 1\r- b: 2\n",
        ] {
            let f = write(text);
            assert!(
                read_list(f.path(), u64::MAX, |_| false)
                    .expect("read")
                    .is_none(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn invalid_utf8_and_size_are_read_errors() {
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        std::io::Write::write_all(&mut f, b"kind: List\nitems:\n- a: \xff\n").expect("write");
        let e = read_list(f.path(), u64::MAX, |_| false).expect_err("not UTF-8");
        assert!(e.to_string().contains("valid UTF-8"), "{e}");
        let f = write(&list(5));
        let e = read_list(f.path(), 100, |_| false).expect_err("too large");
        assert!(matches!(e, FileError::TooLarge { .. }), "{e}");
    }

    proptest! {
        /// However the text is made of lines (blank lines, comments, a last line without
        /// its `\n`, lines longer than a read), the pieces give what the whole text gives.
        #[test]
        fn pieces_equal_the_whole(
            items in proptest::collection::vec(("[a-z]{1,8}", 0usize..3, 0usize..70_000, any::<bool>()), 0..12),
            tail in any::<bool>(),
        ) {
            let mut text = String::from("# head\nkind: List\nitems:\n");
            for (word, blanks, long, comment) in &items {
                text.push_str(&format!("- name: {word}\n"));
                for _ in 0..*blanks {
                    text.push('\n');
                }
                if *comment {
                    text.push_str("  # c\n");
                }
                text.push_str(&format!("  v: {}\n", "x".repeat(*long)));
            }
            if tail {
                text.push_str("metadata: {}");
            }
            let f = write(&text);
            let got = read_list(f.path(), u64::MAX, |_| false).expect("read");
            let whole = split_block_list(&text);
            prop_assert_eq!(got.is_some(), whole.is_some());
            if let (Some(got), Some(whole)) = (got, whole) {
                prop_assert_eq!(&got.root, &whole.root);
                let texts: Vec<&str> = got.items.iter().filter_map(|i| i.text.as_deref()).collect();
                prop_assert_eq!(texts, whole.items);
            }
        }
    }

    fn service(name: &str, vip: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"externalIPs": [vip], "ports": [{"port": 80, "protocol": "TCP"}]}})
    }

    fn list_of(items: Vec<Value>) -> Value {
        json!({"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}})
    }

    /// kubectl's layout: root keys sorted, `kind: List` after the items, items at column 0.
    fn kubectl_yaml(v: &Value) -> String {
        serde_yaml_ng::to_string(v).expect("serializes")
    }

    /// A version read in pieces ([`super::read_list`]): its known items are taken from
    /// the cache; when its root changed, the cache's items do not stand for it, and the whole
    /// text is asked for.
    #[test]
    fn a_version_read_in_pieces_takes_known_items_and_asks_for_the_whole_when_its_root_changed() {
        let read = |text: &str, cache: &ItemCache| {
            let mut f = tempfile::NamedTempFile::new().expect("temp file");
            std::io::Write::write_all(&mut f, text.as_bytes()).expect("write");
            read_list(f.path(), u64::MAX, |id| cache.knows(id))
                .expect("read")
                .expect("a block list")
        };
        let v1 = list_of(vec![
            service("web", "192.0.2.1"),
            service("api", "192.0.2.2"),
        ]);
        let mut v2 = v1.clone();
        v2["items"][1] = service("api", "192.0.2.9");
        let mut v3 = v2.clone();
        v3["kind"] = json!("ServiceList");
        let (y1, y2, y3) = (kubectl_yaml(&v1), kubectl_yaml(&v2), kubectl_yaml(&v3));
        let mut cache = ItemCache::default();
        let (first, _) = parse_cached(&y1, &mut cache).unwrap();

        let l2 = read(&y2, &cache);
        assert!(l2.items[0].text.is_none(), "web is known: no text kept");
        assert!(l2.items[1].text.is_some());
        let (second, reused) = parse_streamed(l2.syntax, &l2.root, &l2.list_items(), &mut cache)
            .expect("taken by items")
            .unwrap();
        assert_eq!(reused, 1);
        assert!(Arc::ptr_eq(
            &first.objects.services[0],
            &second.objects.services[0]
        ));
        assert_eq!(format!("{second:?}"), format!("{:?}", parse(&y2).unwrap()));

        // Same items, another root (a typed List lends its items their kind).
        let l3 = read(&y3, &cache);
        assert!(l3.items.iter().all(|i| i.text.is_none()));
        assert!(parse_streamed(l3.syntax, &l3.root, &l3.list_items(), &mut cache).is_none());
        let (third, _) = parse_cached(&y3, &mut cache).unwrap();
        assert_eq!(
            format!("{third:?}"),
            format!("{:?}", parse_whole(&y3).unwrap())
        );
    }
}
