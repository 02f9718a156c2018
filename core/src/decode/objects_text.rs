//! The text of an objects file, parsed into objects one item at a time.
//!
//! A big List is never held as one parse tree (a `serde_json::Value` of a 50 MB file costs
//! many times its size): each item becomes a small tree, is decoded into its Kubernetes type
//! and dropped before the next is read.
//! - JSON (the text starts with `{`) is read by serde_json's streaming deserializer.
//! - A YAML List in block style, as kubectl and every YAML emitter write it (`items:` at the
//!   root, then one `- ` line per item at a fixed indentation), is cut into its items at those
//!   lines; the root's other lines are parsed on their own, then each item: by
//!   `source::yaml_subset` when it keeps to what kubectl writes, else by serde_yaml_ng.
//! - Anything else (flow style, several documents, anchors shared between items, text that is
//!   not YAML at all) takes the whole-document path, which gives the same objects and problems
//!   and is the reference the by-item paths are tested against.
//!
//! What makes a file a complete snapshot is decided here as well; the file source in the agent crate acts on it.

use super::MAX_DEPTH;
use super::item_cache::{Decoded, ItemCache, ItemId};
use super::json_items::split_json_list;
use super::object_decode::{add_item, problem};
pub use super::text_depth::check_depth;
use super::text_depth::check_depth_from;
use super::yaml_items::split_block_list;
use super::yaml_subset;
use crate::model::Loaded;
use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// Parse the text of an objects file. Only a document that is not YAML/JSON at all, or not a
/// mapping, or that cannot be a complete snapshot is an error; problems with single items are
/// returned in [`Loaded::problems`].
pub fn parse(text: &str) -> Result<Loaded, String> {
    parse_cached(text, &mut ItemCache::default()).map(|(loaded, _)| loaded)
}

/// [`parse`], taking from `cache` every item of a block-style YAML List that the previous
/// version of the file had too, and leaving this version's items in it. Returns how many
/// items were taken from the cache.
pub fn parse_cached(text: &str, cache: &mut ItemCache) -> Result<(Loaded, usize), String> {
    let r = parse_with(text, cache);
    match r {
        Ok(loaded) => Ok((loaded, cache.finish())),
        Err(e) => {
            cache.abandon();
            Err(e)
        }
    }
}

fn parse_with(text: &str, cache: &mut ItemCache) -> Result<Loaded, String> {
    check_depth(text, MAX_DEPTH)?;
    if text.trim_start().starts_with('{')
        && let Some(done) =
            parse_json_list_by_item(text, cache).or_else(|| parse_json_by_item(text))
    {
        return done;
    }
    if let Some(done) = parse_yaml_by_item(text, cache) {
        return done;
    }
    parse_whole_unchecked(text)
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
            Doc::Map(d) => finish(vec![*d]),
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
            Doc::Map(d) => docs.push(*d),
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
        Doc::Map(d) => Some(finish(vec![*d])),
        Doc::Null | Doc::NotMapping => None,
    }
}

/// A JSON List, item by item. `None` when the text is not one (see [`split_json_list`]) or
/// an item does not parse on its own.
fn parse_json_list_by_item(text: &str, cache: &mut ItemCache) -> Option<Result<Loaded, String>> {
    let split = split_json_list(text)?;
    parse_cut_list(Syntax::Json, &split.root, &split.items, cache)
}

/// A block-style YAML List, item by item. `None` when the text is not one (see
/// [`split_block_list`]) or an item does not parse on its own.
fn parse_yaml_by_item(text: &str, cache: &mut ItemCache) -> Option<Result<Loaded, String>> {
    let split = split_block_list(text)?;
    parse_cut_list(Syntax::Yaml, &split.root, &split.items, cache)
}

/// A List cut at its items, `root` its own text: each item by its text.
fn parse_cut_list(
    syntax: Syntax,
    root: &str,
    items: &[&str],
    cache: &mut ItemCache,
) -> Option<Result<Loaded, String>> {
    let items: Vec<ListItem<'_>> = (items.iter())
        .map(|item| ListItem {
            id: ItemId::of(item),
            text: Some(item),
            line: 0,
        })
        .collect();
    // The whole text's depth was checked.
    parse_items(syntax, root, &items, cache, false)
}

/// One item of a block-style List: its name, its text unless the item cache has it, and the
/// line it starts on (for errors).
pub struct ListItem<'a> {
    pub id: ItemId,
    pub text: Option<&'a str>,
    pub line: usize,
}

/// A List read item by item as the file was read (`super::list_stream`): `root` is its own
/// text, and `items` have their text only where `cache` did not know them. Like
/// [`parse_cached`], or `None` when the whole text is needed after all (an item not in the
/// cache, which holds another root's items; a List whose items must be read in order). A YAML
/// item's nesting is checked here; a JSON List's was checked as it was cut.
pub fn parse_streamed(
    syntax: Syntax,
    root: &str,
    items: &[ListItem<'_>],
    cache: &mut ItemCache,
) -> Option<Result<(Loaded, usize), String>> {
    let check = syntax == Syntax::Yaml;
    match parse_items(syntax, root, items, cache, check) {
        Some(Ok(loaded)) => Some(Ok((loaded, cache.finish()))),
        Some(Err(e)) => {
            cache.abandon();
            Some(Err(e))
        }
        None => {
            cache.abandon();
            None
        }
    }
}

/// The items of a block-style List with root text `root`; with `check`, each new item's
/// nesting is checked first (the whole text's was not). `None` when this path cannot take
/// them (see [`parse_yaml_by_item`], [`parse_streamed`]).
fn parse_items(
    syntax: Syntax,
    root_text: &str,
    items: &[ListItem<'_>],
    cache: &mut ItemCache,
    check: bool,
) -> Option<Result<Loaded, String>> {
    if check {
        let texts = std::iter::once((root_text, 1))
            .chain(items.iter().filter_map(|i| Some((i.text?, i.line))));
        for (text, line) in texts {
            if let Err(e) = check_depth_from(text, MAX_DEPTH, line) {
                return Some(Err(e));
            }
        }
    }
    let root = match syntax {
        Syntax::Yaml => serde_yaml_ng::from_str::<Doc>(root_text).ok(),
        Syntax::Json => serde_json::from_str::<Doc>(root_text).ok(),
    };
    let mut root = match root? {
        Doc::Map(d) => *d,
        Doc::Null | Doc::NotMapping => return None,
    };
    // Said before any item is read: a List cut short costs no more than its root lines.
    if let Err(e) = root.complete(0) {
        return Some(Err(e));
    }
    let one = |item: &str| match syntax {
        // A YAML item is cut with its `- `: a sequence of one. What kubectl writes is read
        // without libyaml; anything else still with it.
        Syntax::Yaml => {
            if let Ok(v) = yaml_subset::item(item) {
                return Some(v);
            }
            let mut one = serde_yaml_ng::from_str::<Vec<Value>>(item).ok()?;
            match (one.pop(), one.is_empty()) {
                (Some(v), true) => Some(v),
                _ => None,
            }
        }
        Syntax::Json => serde_json::from_str::<Value>(item).ok(),
    };
    if !root.takes_items_at_once() {
        for item in items {
            root.item(one(item.text?)?);
        }
        return Some(finish(vec![root]));
    }
    // Each item decoded on its own: what the last version of the file had is not decoded
    // again, and many new items (a first read) are decoded on several cores.
    cache.in_root(root_text);
    let mut decoded: Vec<Option<Decoded>> = items.iter().map(|i| cache.take(i.id)).collect();
    let missing: Vec<usize> = (0..items.len()).filter(|&i| decoded[i].is_none()).collect();
    if missing.iter().any(|&i| items[i].text.is_none()) {
        return None;
    }
    // One item that does not parse on its own sends the whole text to the whole read: the
    // items after it are not parsed for nothing (a broken file may have millions).
    let gave_up = std::sync::atomic::AtomicBool::new(false);
    let made = crate::parallel::map_split(&missing, |&i| {
        use std::sync::atomic::Ordering::Relaxed;
        if gave_up.load(Relaxed) {
            return None;
        }
        let d = one(items[i].text?).map(|v| root.decode_alone(v));
        if d.is_none() {
            gave_up.store(true, Relaxed);
        }
        d
    });
    for (i, d) in missing.into_iter().zip(made) {
        let d = d?;
        cache.put(items[i].id, d.clone());
        decoded[i] = Some(d);
    }
    for d in decoded.into_iter().flatten() {
        d.add_to(&mut root.staged);
    }
    Some(finish(vec![root]))
}

/// How a List's root and items are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    Yaml,
    Json,
}

fn not_a_mapping(i: usize) -> String {
    format!(
        "document {}: not a mapping (a Kubernetes object or List)",
        i + 1
    )
}

/// One top-level document: a mapping read field by field, its `items` (if any) one at a time.
enum Doc {
    /// An empty document (only comments, `~`, `null`).
    Null,
    /// A scalar or a sequence: not objects at all.
    NotMapping,
    Map(Box<DocReader>),
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

    /// Whether an item is decoded as soon as it is read, with nothing of it or of later items
    /// needed first: the List's kind is known and no earlier item waits.
    fn takes_items_at_once(&self) -> bool {
        self.pending.is_empty()
            && self.kind().is_some_and(|k| {
                k == "List" || (k.ends_with("List") && self.fields.contains_key("apiVersion"))
            })
    }

    /// What `item` decodes to in this List, on its own.
    fn decode_alone(&self, item: Value) -> Decoded {
        let mut one = Loaded::default();
        add_item(self.with_list_defaults(item), &mut one);
        Decoded::from_one(one)
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
        // Every field named: a kind added to Objects must be carried here too.
        let crate::model::Objects {
            services,
            endpoint_slices,
            nodes,
            subnets,
            pools,
            bgp,
            l2_advertisements,
        } = objects;
        out.objects.services.extend(services);
        out.objects.endpoint_slices.extend(endpoint_slices);
        out.objects.nodes.extend(nodes);
        out.objects.subnets.extend(subnets);
        out.objects.pools.extend(pools);
        out.objects.bgp.extend(bgp);
        out.objects.l2_advertisements.extend(l2_advertisements);
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
    crate::metallb::settle(&mut out);
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
        Ok(Doc::Map(Box::new(doc)))
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
