//! The text of an objects file, parsed into objects one item at a time.
//!
//! A big List is never held as one parse tree (a `serde_json::Value` of a 50 MB file costs
//! many times its size): each item becomes a small tree, is decoded into its Kubernetes type
//! and dropped before the next is read.
//! - JSON (the text starts with `{`) is read by serde_json's streaming deserializer.
//! - A YAML List in block style, as kubectl and every YAML emitter write it (`items:` at the
//!   root, then one `- ` line per item at a fixed indentation), is cut into its items at those
//!   lines; the root's other lines are parsed on their own, then each item.
//! - Anything else (flow style, several documents, anchors shared between items, text that is
//!   not YAML at all) takes the whole-document path, which gives the same objects and problems
//!   and is the reference the by-item paths are tested against.
//!
//! What makes a file a complete snapshot is decided here as well; see [`super::file`].

use super::file::{Loaded, MAX_DEPTH};
use super::object_decode::{add_item, problem};
use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// Parse the text of an objects file. Only a document that is not YAML/JSON at all, or not a
/// mapping, or that cannot be a complete snapshot is an error; problems with single items are
/// returned in [`Loaded::problems`].
pub fn parse(text: &str) -> Result<Loaded, String> {
    check_depth(text, MAX_DEPTH)?;
    if text.trim_start().starts_with('{')
        && let Some(done) = parse_json_by_item(text)
    {
        return done;
    }
    if let Some(done) = parse_yaml_by_item(text) {
        return done;
    }
    parse_whole_unchecked(text)
}

/// The deepest `[`/`{` nesting of `text` outside double-quoted strings, or an error once it
/// passes `max`. Linear, so a hostile file is refused before a parser spends time on it.
pub(crate) fn check_depth(text: &str, max: usize) -> Result<(), String> {
    let (mut depth, mut in_str, mut escaped) = (0usize, false, false);
    let mut line = 1usize;
    for b in text.bytes() {
        if b == b'\n' {
            line += 1;
        }
        if in_str {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return Err(format!(
                        "line {line}: nested more than {max} levels deep: not a Kubernetes object"
                    ));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Every document of `text` parsed whole: the reference for the by-item paths, and the path
/// for what they do not take. JSON is read as JSON (which allows characters YAML refuses),
/// anything else as YAML.
pub fn parse_whole(text: &str) -> Result<Loaded, String> {
    check_depth(text, MAX_DEPTH)?;
    if text.trim_start().starts_with('{')
        && let Ok(v) = serde_json::from_str::<Value>(text)
    {
        return match Doc::deserialize(v).map_err(|e| format!("document 1: {e}"))? {
            Doc::Map(d) => finish(vec![d]),
            Doc::Null | Doc::NotMapping => Err(not_a_mapping(0)),
        };
    }
    parse_whole_unchecked(text)
}

fn parse_whole_unchecked(text: &str) -> Result<Loaded, String> {
    let mut docs = Vec::new();
    for (i, de) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        match Doc::deserialize(de).map_err(|e| format!("document {}: {e}", i + 1))? {
            Doc::Null => {}
            Doc::NotMapping => return Err(not_a_mapping(i)),
            Doc::Map(d) => docs.push(d),
        }
    }
    finish(docs)
}

/// One JSON document, streamed. `None` when serde_json refuses the text: it may still be
/// YAML (a flow mapping, several documents), and the YAML path says what is wrong with it.
fn parse_json_by_item(text: &str) -> Option<Result<Loaded, String>> {
    let mut de = serde_json::Deserializer::from_str(text);
    let doc = Doc::deserialize(&mut de).ok()?;
    de.end().ok()?;
    match doc {
        Doc::Map(d) => Some(finish(vec![d])),
        Doc::Null | Doc::NotMapping => None,
    }
}

/// A block-style YAML List, item by item. `None` when the text is not one (see
/// [`split_block_list`]) or an item does not parse on its own.
fn parse_yaml_by_item(text: &str) -> Option<Result<Loaded, String>> {
    let split = split_block_list(text)?;
    let mut root = match serde_yaml_ng::from_str::<Doc>(&split.root).ok()? {
        Doc::Map(d) => d,
        Doc::Null | Doc::NotMapping => return None,
    };
    // Said before any item is read: a List cut short costs no more than its root lines.
    if let Err(e) = root.complete(0) {
        return Some(Err(e));
    }
    for item in split.items {
        let mut one = serde_yaml_ng::from_str::<Vec<Value>>(item).ok()?;
        match (one.pop(), one.is_empty()) {
            (Some(v), true) => root.item(v),
            _ => return None,
        }
    }
    Some(finish(vec![root]))
}

fn not_a_mapping(i: usize) -> String {
    format!(
        "document {}: not a mapping (a Kubernetes object or List)",
        i + 1
    )
}

/// A single-document YAML List split at its items: the root's own lines (the items replaced
/// by `items: []`) and each item's text, starting with its `- `.
struct BlockList<'a> {
    root: String,
    items: Vec<&'a str>,
}

/// Cut `text` into a [`BlockList`], or `None` when it is not one, and the whole-document
/// path must read it.
///
/// Inside a block sequence every line of an item is indented deeper than the item's `- `,
/// except blank lines and comments; a line back at the `- ` column starts the next item, one
/// at column 0 the next root key. That holds for every emitter's output; what does not fit
/// (tabs, directives, several documents, an item that is not a `- ` entry) is given up on.
fn split_block_list(text: &str) -> Option<BlockList<'_>> {
    // Lines are cut at `\n` below; YAML also breaks lines at a lone `\r` and (libyaml) at
    // NEL, LS and PS.
    let b = text.as_bytes();
    let other_break = (0..b.len()).any(|i| match b[i] {
        b'\r' => b.get(i + 1) != Some(&b'\n'),
        0xc2 => b.get(i + 1) == Some(&0x85),
        0xe2 => b.get(i + 1) == Some(&0x80) && matches!(b.get(i + 2), Some(0xa8 | 0xa9)),
        _ => false,
    });
    if other_break {
        return None;
    }
    enum At {
        Root,
        ItemsKey,
        Items { indent: usize, start: usize },
    }
    let mut root = String::new();
    let mut items = Vec::new();
    let mut at = At::Root;
    let mut seen_content = false;
    let mut found = false;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        let body = line.trim_end_matches(['\n', '\r']);
        let content = body.trim_start_matches([' ', '\t']);
        if content.is_empty() || content.starts_with('#') {
            // Part of whatever it sits in; kept only where it cannot be in a block scalar.
            match at {
                At::Root => root.push_str(line),
                // Dropped: it must not hide what would make the whole text fail (a character
                // YAML refuses, a tab where YAML reads indentation).
                At::ItemsKey if !printable(line) || line.contains('\t') => return None,
                _ => {}
            }
            continue;
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
            if seen_content {
                return None;
            }
            root.push_str(line);
            continue;
        }
        // The root must be a block mapping; a flow one (`{`), a bare scalar or anything
        // fancier is read whole.
        if !seen_content && body.starts_with(['{', '[', '"', '\'', '?', '!', '&', '*', '|', '>']) {
            return None;
        }
        seen_content = true;
        let rest = &body[indent..];
        let entry = rest.starts_with("- ");
        if rest == "-" {
            return None;
        }
        // A quoted scalar that goes on to the next lines may hold a line that looks like a key
        // or an item at any column: only a whole parse knows where it ends.
        if matches!(at, At::Root) && unclosed_quote(rest) {
            return None;
        }
        loop {
            match at {
                At::Root => {
                    // `items:` alone, or followed by a comment (`#` after a space: `items:#x`
                    // is a plain scalar, not a key).
                    let key = body.strip_prefix("items:").is_some_and(|r| {
                        let t = r.trim_start_matches([' ', '\t']);
                        t.is_empty() || (t.len() < r.len() && t.starts_with('#'))
                    });
                    if key {
                        if found || !printable(line) {
                            return None;
                        }
                        found = true;
                        at = At::ItemsKey;
                    } else {
                        root.push_str(line);
                    }
                }
                At::ItemsKey if entry => {
                    root.push_str("items: []\n");
                    at = At::Items { indent, start };
                }
                At::ItemsKey if indent == 0 => {
                    // `items:` with nothing under it (null): the root says so.
                    root.push_str("items:\n");
                    at = At::Root;
                    continue;
                }
                At::ItemsKey => return None,
                At::Items {
                    indent: k,
                    start: s,
                } => {
                    if indent > k {
                    } else if indent == k && entry {
                        items.push(&text[s..start]);
                        at = At::Items { indent: k, start };
                    } else if indent == 0 {
                        items.push(&text[s..start]);
                        at = At::Root;
                        continue;
                    } else {
                        return None;
                    }
                }
            }
            break;
        }
    }
    match at {
        At::Items { start, .. } => items.push(&text[start..]),
        At::ItemsKey => root.push_str("items:\n"),
        At::Root => {}
    }
    found.then_some(BlockList { root, items })
}

/// Whether a line's value (after any `- ` and `key: `) opens a quoted scalar it does not
/// close.
fn unclosed_quote(content: &str) -> bool {
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

/// One top-level document: a mapping read field by field, its `items` (if any) one at a time.
enum Doc {
    /// An empty document (only comments, `~`, `null`).
    Null,
    /// A scalar or a sequence: not objects at all.
    NotMapping,
    Map(DocReader),
}

/// What one mapping document held: its fields but `items`, and its items, decoded as they
/// came where their kind was known, kept as small trees where it was not yet.
#[derive(Default)]
struct DocReader {
    fields: Map<String, Value>,
    items: Option<Items>,
    /// Items decoded so far, taken only if the document turns out to be a List.
    staged: Loaded,
    /// Items whose kind or apiVersion may come from the List's (a typed List such as
    /// `ServiceList` whose `kind` comes after its items); every later item waits too, so
    /// items keep their order.
    pending: Vec<Value>,
}

enum Items {
    Array,
    NotArray,
}

impl DocReader {
    fn item(&mut self, item: Value) {
        let own = item.get("kind").is_some() && item.get("apiVersion").is_some();
        // A plain `List` gives its items nothing; a typed one gives only what they lack.
        let list_known = self
            .fields
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| {
                k == "List" || (k.ends_with("List") && self.fields.contains_key("apiVersion"))
            });
        if self.pending.is_empty() && (own || list_known) {
            let item = self.with_list_defaults(item);
            add_item(item, &mut self.staged);
        } else {
            self.pending.push(item);
        }
    }

    fn kind(&self) -> Option<&str> {
        self.fields.get("kind").and_then(Value::as_str)
    }

    fn is_list(&self) -> bool {
        self.kind()
            .is_some_and(|k| k == "List" || k.ends_with("List"))
    }

    /// Items of a typed list (`ServiceList`, as the API server returns it) carry no kind or
    /// apiVersion of their own: they take the list's.
    fn with_list_defaults(&self, mut item: Value) -> Value {
        let item_kind = self
            .kind()
            .and_then(|k| k.strip_suffix("List"))
            .filter(|k| !k.is_empty());
        if let (Some(kind), Some(obj)) = (item_kind, item.as_object_mut()) {
            obj.entry("kind")
                .or_insert_with(|| Value::String(kind.into()));
            if let Some(api) = self.fields.get("apiVersion") {
                obj.entry("apiVersion").or_insert_with(|| api.clone());
            }
        }
        item
    }

    /// Whether the document can be part of a complete snapshot: a file being written is
    /// seen empty or cut short, and planning that would delete what is programmed.
    fn complete(&self, i: usize) -> Result<(), String> {
        let cut = match self.kind() {
            None if self.items.is_some() => Some("has items but no kind: a List cut short?"),
            None => Some("has no kind: cut short?"),
            Some(_) if self.is_list() && self.items.is_none() => {
                Some("is a List without items: cut short?")
            }
            _ => None,
        };
        match cut {
            Some(why) => Err(format!(
                "document {} {why} (not taken as a snapshot; the last complete one stays)",
                i + 1
            )),
            None => Ok(()),
        }
    }

    /// The document's objects and problems, added to `out`.
    fn finish_into(mut self, out: &mut Loaded) {
        if !self.is_list() {
            // An object that is no List: a field called `items` is just an unknown field.
            if self.items.is_some() {
                self.fields.insert("items".into(), Value::Array(Vec::new()));
            }
            add_item(Value::Object(self.fields), out);
            return;
        }
        if let Some(Items::NotArray) = self.items {
            out.problems
                .push(problem("List", "items is not an array".into()));
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        for item in pending {
            let item = self.with_list_defaults(item);
            add_item(item, &mut self.staged);
        }
        let Loaded {
            objects, problems, ..
        } = self.staged;
        out.objects.services.extend(objects.services);
        out.objects.endpoint_slices.extend(objects.endpoint_slices);
        out.objects.nodes.extend(objects.nodes);
        out.objects.subnets.extend(objects.subnets);
        out.problems.extend(problems);
    }
}

/// The snapshot of `docs`: refused unless there is at least one and each is complete.
fn finish(docs: Vec<DocReader>) -> Result<Loaded, String> {
    if docs.is_empty() {
        return Err(
            "no objects at all (empty, or only comments): not taken as a snapshot; \
                    write an empty List (kind: List, items: []) to mean no objects"
                .into(),
        );
    }
    for (i, doc) in docs.iter().enumerate() {
        doc.complete(i)?;
    }
    let mut out = Loaded::default();
    for doc in docs {
        doc.finish_into(&mut out);
    }
    out.complete = true;
    Ok(out)
}

impl<'de> Deserialize<'de> for Doc {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Doc, D::Error> {
        d.deserialize_any(DocVisitor)
    }
}

struct DocVisitor;

macro_rules! not_a_mapping {
    ($($name:ident: $t:ty),*) => {$(
        fn $name<E: de::Error>(self, _: $t) -> Result<Doc, E> {
            Ok(Doc::NotMapping)
        }
    )*};
}

impl<'de> Visitor<'de> for DocVisitor {
    type Value = Doc;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Kubernetes object or List")
    }

    not_a_mapping!(visit_bool: bool, visit_i64: i64, visit_u64: u64, visit_f64: f64,
        visit_str: &str, visit_bytes: &[u8]);

    fn visit_unit<E: de::Error>(self) -> Result<Doc, E> {
        Ok(Doc::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Doc, E> {
        Ok(Doc::Null)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Doc, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Doc, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Doc::NotMapping)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Doc, A::Error> {
        let mut doc = DocReader::default();
        while let Some(key) = map.next_key::<String>()? {
            if key == "items" {
                if doc.items.is_some() {
                    return Err(de::Error::custom("the key items appears twice"));
                }
                doc.items = Some(map.next_value_seed(ItemsSeed(&mut doc))?);
            } else {
                let v = map.next_value::<Value>()?;
                doc.fields.insert(key, v);
            }
        }
        Ok(Doc::Map(doc))
    }
}

/// A List's `items`, handed to the document one at a time.
struct ItemsSeed<'a>(&'a mut DocReader);

impl<'de> de::DeserializeSeed<'de> for ItemsSeed<'_> {
    type Value = Items;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Items, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ItemsSeed<'_> {
    type Value = Items;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a List's items")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Items, A::Error> {
        while let Some(item) = seq.next_element::<Value>()? {
            self.0.item(item);
        }
        Ok(Items::Array)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Items, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Items::NotArray)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Items, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_none<E: de::Error>(self) -> Result<Items, E> {
        Ok(Items::NotArray)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Items, E> {
        Ok(Items::NotArray)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Items, E> {
        Ok(Items::NotArray)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Items, E> {
        Ok(Items::NotArray)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Items, E> {
        Ok(Items::NotArray)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Items, E> {
        Ok(Items::NotArray)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Items, E> {
        Ok(Items::NotArray)
    }

    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Items, E> {
        Ok(Items::NotArray)
    }
}

#[cfg(test)]
#[path = "objects_text_tests.rs"]
mod tests;
