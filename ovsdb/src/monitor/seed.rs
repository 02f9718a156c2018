//! Monitor payloads decoded straight from their text, the schema driving serde: every value
//! goes from the text to its atoms without a JSON tree in between, not even one per row.
//!
//! Only what a server sends is taken: any other text (a wrong shape, a table, column or value
//! the schema rejects, a table, row or member given twice) gives `None`, and the caller reads
//! it as a tree for the error that path reports. Where this path succeeds it applies the same
//! checks as the tree's (`ColumnType::normalize`, `check_elements`); nested values go through
//! serde_json's own nesting limit as a tree's do.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::de::{DeserializeSeed, Deserializer, Error, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value as Json;

use super::{RowUpdate, TableUpdates, Update};
use crate::schema::{ColumnType, DatabaseSchema, TableSchema};
use crate::value::{Atom, AtomMap, AtomSet, Row, Uuid, Value};

/// `text` decoded by `seed`: all of it, nothing after it.
fn whole<'de, S: DeserializeSeed<'de>>(text: &'de str, seed: S) -> Option<S::Value> {
    let mut de = serde_json::Deserializer::from_str(text);
    let v = seed.deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some(v)
}

/// `<table-updates2>`.
pub(super) fn table_updates2(text: &str, schema: &DatabaseSchema) -> Option<TableUpdates> {
    whole(text, Tables(schema, Format::Diffs))
}

/// RFC 7047 `<table-updates>`, each new row through `project` as soon as it is read.
pub(super) fn table_updates(
    text: &str,
    schema: &DatabaseSchema,
    project: Project<'_>,
) -> Option<TableUpdates> {
    whole(text, Tables(schema, Format::Rows(project)))
}

/// What a whole-row table's rows are made into as they are read (table, row).
pub(super) type Project<'p> = &'p (dyn Fn(&str, Row) -> Row + Sync);

/// How rows change in a payload: `<row-update2>`s, modifications as diffs (`monitor_cond`), or
/// `<row-update>`s, each with the whole new row (RFC 7047 `monitor`).
#[derive(Clone, Copy)]
enum Format<'p> {
    Diffs,
    Rows(Project<'p>),
}

/// The `monitor_cond_since` reply: `[found, last-txn-id, <table-updates2>]`.
pub(super) fn since_reply(
    text: &str,
    schema: &DatabaseSchema,
) -> Option<(bool, Uuid, TableUpdates)> {
    whole(text, SinceReply(schema))
}

/// The params of an `update` (`[id, <table-updates>]`), `update2` (`[id, <table-updates2>]`)
/// or `update3` (`[id, last-txn-id, <table-updates2>]`) notification.
pub(super) fn notification(
    method: &str,
    text: &str,
    schema: &DatabaseSchema,
    project: Project<'_>,
) -> Option<Update> {
    let (with_txn, format) = match method {
        "update" => (false, Format::Rows(project)),
        "update2" => (false, Format::Diffs),
        "update3" => (true, Format::Diffs),
        _ => return None,
    };
    whole(
        text,
        SeedNotification {
            schema,
            with_txn,
            format,
        },
    )
}

/// Implements `DeserializeSeed` for a seed that is its own visitor, through `$how`.
macro_rules! seed_visits {
    ($seed:ty, $how:ident) => {
        impl<'de> DeserializeSeed<'de> for $seed {
            type Value = <Self as Visitor<'de>>::Value;
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                d.$how(self)
            }
        }
    };
}

/// The next element, which must be there.
fn element<'de, A: SeqAccess<'de>, S: DeserializeSeed<'de>>(
    s: &mut A,
    seed: S,
) -> Result<S::Value, A::Error> {
    s.next_element_seed(seed)?
        .ok_or_else(|| A::Error::custom("too few elements"))
}

/// No element left.
fn end<'de, A: SeqAccess<'de>>(s: &mut A) -> Result<(), A::Error> {
    match s.next_element::<IgnoredAny>()? {
        None => Ok(()),
        Some(_) => Err(A::Error::custom("too many elements")),
    }
}

#[derive(Clone, Copy)]
struct SinceReply<'s>(&'s DatabaseSchema);
seed_visits!(SinceReply<'_>, deserialize_seq);

impl<'de> Visitor<'de> for SinceReply<'_> {
    type Value = (bool, Uuid, TableUpdates);
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("[found, last-txn-id, table-updates2]")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
        let found = element(&mut s, std::marker::PhantomData::<bool>)?;
        let txn = element(&mut s, UuidText)?;
        let updates = element(&mut s, Tables(self.0, Format::Diffs))?;
        end(&mut s)?;
        Ok((found, txn, updates))
    }
}

#[derive(Clone, Copy)]
struct SeedNotification<'s> {
    schema: &'s DatabaseSchema,
    with_txn: bool,
    format: Format<'s>,
}
seed_visits!(SeedNotification<'_>, deserialize_seq);

impl<'de> Visitor<'de> for SeedNotification<'_> {
    type Value = Update;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("update, update2 or update3 params")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Update, A::Error> {
        let monitor_id = element(&mut s, std::marker::PhantomData::<Json>)?;
        let last_txn_id = match self.with_txn {
            true => Some(element(&mut s, UuidText)?),
            false => None,
        };
        let updates = element(&mut s, Tables(self.schema, self.format))?;
        end(&mut s)?;
        Ok(Update {
            monitor_id,
            last_txn_id,
            updates,
        })
    }
}

/// `<table-updates2>` or `<table-updates>`: table name to its rows.
#[derive(Clone, Copy)]
struct Tables<'s>(&'s DatabaseSchema, Format<'s>);
seed_visits!(Tables<'_>, deserialize_map);

impl<'de> Visitor<'de> for Tables<'_> {
    type Value = TableUpdates;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("table-updates2")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<TableUpdates, A::Error> {
        let mut out = BTreeMap::new();
        while let Some(name) = m.next_key::<String>()? {
            let table = self.0.table(&name).map_err(A::Error::custom)?;
            let rows = m.next_value_seed(Rows(table, self.1, &name))?;
            if out.insert(name, rows).is_some() {
                return Err(A::Error::custom("table given twice"));
            }
        }
        Ok(out)
    }
}

/// `<table-update2>` or `<table-update>`: row uuid to its change.
#[derive(Clone, Copy)]
struct Rows<'s, 'n>(&'s TableSchema, Format<'s>, &'n str);
seed_visits!(Rows<'_, '_>, deserialize_map);

impl<'de> Visitor<'de> for Rows<'_, '_> {
    type Value = BTreeMap<Uuid, RowUpdate>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("table-update2")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
        let mut out = BTreeMap::new();
        while let Some(uuid) = m.next_key_seed(UuidText)? {
            let change = match self.1 {
                Format::Diffs => m.next_value_seed(Change(self.0))?,
                Format::Rows(project) => {
                    m.next_value_seed(WholeChange(self.0, |r| project(self.2, r)))?
                }
            };
            // Two spellings of one uuid: which one a tree keeps depends on its key order.
            if out.insert(uuid, change).is_some() {
                return Err(A::Error::custom("row given twice"));
            }
        }
        Ok(out)
    }
}

/// `<row-update2>`: exactly one of `initial`, `insert`, `modify` (each a row) or `delete`.
#[derive(Clone, Copy)]
struct Change<'s>(&'s TableSchema);
seed_visits!(Change<'_>, deserialize_map);

impl<'de> Visitor<'de> for Change<'_> {
    type Value = RowUpdate;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("row-update2")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<RowUpdate, A::Error> {
        let Some(kind) = m.next_key::<String>()? else {
            return Err(A::Error::custom("no member"));
        };
        let change = match kind.as_str() {
            "initial" => RowUpdate::Initial(m.next_value_seed(Columns(self.0))?),
            "insert" => RowUpdate::Insert(m.next_value_seed(Columns(self.0))?),
            "modify" => RowUpdate::Modify(m.next_value_seed(Columns(self.0))?),
            "delete" => {
                // Read, not skipped: skipping would not apply the tree's nesting limit.
                m.next_value::<Json>()?;
                RowUpdate::Delete
            }
            _ => return Err(A::Error::custom("unknown member")),
        };
        match m.next_key::<IgnoredAny>()? {
            None => Ok(change),
            Some(_) => Err(A::Error::custom("more than one member")),
        }
    }
}

/// `<row-update>`: `old`, `new` or both; `old` is read and dropped (a delete's or a
/// modification's before), `new` is the whole row after.
struct WholeChange<'s, P>(&'s TableSchema, P);

impl<'de, P: Fn(Row) -> Row> DeserializeSeed<'de> for WholeChange<'_, P> {
    type Value = RowUpdate;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, P: Fn(Row) -> Row> Visitor<'de> for WholeChange<'_, P> {
    type Value = RowUpdate;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("row-update")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<RowUpdate, A::Error> {
        let (mut old, mut new) = (false, None);
        while let Some(kind) = m.next_key::<String>()? {
            match kind.as_str() {
                "old" if !old => {
                    // Read, not skipped: skipping would not apply the tree's nesting limit.
                    m.next_value::<Json>()?;
                    old = true;
                }
                "new" if new.is_none() => new = Some((self.1)(m.next_value_seed(Columns(self.0))?)),
                _ => return Err(A::Error::custom("unknown or repeated member")),
            }
        }
        match (old, new) {
            (false, Some(new)) => Ok(RowUpdate::Insert(new)),
            (true, Some(new)) => Ok(RowUpdate::Replace(new)),
            (true, None) => Ok(RowUpdate::Delete),
            (false, None) => Err(A::Error::custom("neither old nor new")),
        }
    }
}

/// `<row>`: column name to value, shaped and checked by the column's type.
#[derive(Clone, Copy)]
struct Columns<'s>(&'s TableSchema);
seed_visits!(Columns<'_>, deserialize_map);

impl<'de> Visitor<'de> for Columns<'_> {
    type Value = Row;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("row")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Row, A::Error> {
        let mut cols = Vec::new();
        while let Some((name, ty)) = m.next_key_seed(Column(self.0))? {
            let v = m.next_value_seed(ValueText)?;
            let v = ty.normalize(v).map_err(A::Error::custom)?;
            ty.check_elements(&v).map_err(A::Error::custom)?;
            cols.push((Arc::clone(name), v));
        }
        // A column given twice keeps its last value, as in a tree.
        Ok(cols.into_iter().collect())
    }
}

/// A column's name: the schema's shared name and the column's type.
#[derive(Clone, Copy)]
struct Column<'s>(&'s TableSchema);
seed_visits!(Column<'_>, deserialize_str);

impl<'s> Visitor<'_> for Column<'s> {
    type Value = (&'s Arc<str>, &'s ColumnType);
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a column name")
    }
    fn visit_str<E: Error>(self, s: &str) -> Result<Self::Value, E> {
        self.0.column_named(s).map_err(E::custom)
    }
}

/// A uuid written as a string (a row's key, a last-txn-id, the text of `["uuid", ...]`).
#[derive(Clone, Copy)]
struct UuidText;
seed_visits!(UuidText, deserialize_str);

impl Visitor<'_> for UuidText {
    type Value = Uuid;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a uuid")
    }
    fn visit_str<E: Error>(self, s: &str) -> Result<Uuid, E> {
        Uuid::parse_str(s).map_err(E::custom)
    }
}

/// A value: an atom, `["set", [atoms]]` or `["map", [[key, value], ...]]` (as
/// `Value::from_json` reads them).
#[derive(Clone, Copy)]
struct ValueText;
seed_visits!(ValueText, deserialize_any);

impl<'de> Visitor<'de> for ValueText {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an OVSDB value")
    }
    fn visit_bool<E: Error>(self, b: bool) -> Result<Value, E> {
        AtomText.visit_bool(b).map(Value::Atom)
    }
    fn visit_i64<E: Error>(self, i: i64) -> Result<Value, E> {
        AtomText.visit_i64(i).map(Value::Atom)
    }
    fn visit_u64<E: Error>(self, u: u64) -> Result<Value, E> {
        AtomText.visit_u64(u).map(Value::Atom)
    }
    fn visit_f64<E: Error>(self, r: f64) -> Result<Value, E> {
        AtomText.visit_f64(r).map(Value::Atom)
    }
    fn visit_str<E: Error>(self, s: &str) -> Result<Value, E> {
        AtomText.visit_str(s).map(Value::Atom)
    }
    fn visit_string<E: Error>(self, s: String) -> Result<Value, E> {
        AtomText.visit_string(s).map(Value::Atom)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Value, A::Error> {
        let v = match element(&mut s, std::marker::PhantomData::<String>)?.as_str() {
            "set" => Value::Set(element(&mut s, Atoms)?),
            "map" => Value::Map(element(&mut s, SeedPairs)?),
            "uuid" => Value::Atom(Atom::Uuid(element(&mut s, UuidText)?)),
            "named-uuid" => Value::Atom(named_uuid(element(&mut s, std::marker::PhantomData)?)),
            _ => return Err(A::Error::custom("unknown tag")),
        };
        end(&mut s)?;
        Ok(v)
    }
}

fn named_uuid(name: String) -> Atom {
    Atom::NamedUuid(name.into_boxed_str())
}

/// An atom: a boolean, number or string, `["uuid", text]` or `["named-uuid", name]` (as
/// `Atom::from_json` reads them).
#[derive(Clone, Copy)]
struct AtomText;
seed_visits!(AtomText, deserialize_any);

impl<'de> Visitor<'de> for AtomText {
    type Value = Atom;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an OVSDB atom")
    }
    fn visit_bool<E: Error>(self, b: bool) -> Result<Atom, E> {
        Ok(Atom::Boolean(b))
    }
    fn visit_i64<E: Error>(self, i: i64) -> Result<Atom, E> {
        Ok(Atom::Integer(i))
    }
    // Beyond i64, a JSON tree's number is only an f64, which becomes a real.
    fn visit_u64<E: Error>(self, u: u64) -> Result<Atom, E> {
        Ok(i64::try_from(u).map_or(Atom::Real(u as f64), Atom::Integer))
    }
    fn visit_f64<E: Error>(self, r: f64) -> Result<Atom, E> {
        Ok(Atom::Real(r))
    }
    fn visit_str<E: Error>(self, s: &str) -> Result<Atom, E> {
        Ok(Atom::String(s.into()))
    }
    fn visit_string<E: Error>(self, s: String) -> Result<Atom, E> {
        Ok(Atom::String(s.into()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Atom, A::Error> {
        let a = match element(&mut s, std::marker::PhantomData::<String>)?.as_str() {
            "uuid" => Atom::Uuid(element(&mut s, UuidText)?),
            "named-uuid" => named_uuid(element(&mut s, std::marker::PhantomData)?),
            _ => return Err(A::Error::custom("expected an atom")),
        };
        end(&mut s)?;
        Ok(a)
    }
}

/// The atoms of `["set", [...]]`.
#[derive(Clone, Copy)]
struct Atoms;
seed_visits!(Atoms, deserialize_seq);

impl<'de> Visitor<'de> for Atoms {
    type Value = AtomSet;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a set's atoms")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<AtomSet, A::Error> {
        let mut atoms = Vec::new();
        while let Some(a) = s.next_element_seed(AtomText)? {
            atoms.push(a);
        }
        Ok(atoms.into_iter().collect())
    }
}

/// The pairs of `["map", [...]]`.
#[derive(Clone, Copy)]
struct SeedPairs;
seed_visits!(SeedPairs, deserialize_seq);

impl<'de> Visitor<'de> for SeedPairs {
    type Value = AtomMap;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map's pairs")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<AtomMap, A::Error> {
        let mut pairs = Vec::new();
        while let Some(p) = s.next_element_seed(Pair)? {
            pairs.push(p);
        }
        // A key given twice keeps its last value, as repeated inserts do.
        Ok(pairs.into_iter().collect())
    }
}

/// `[key, value]`.
#[derive(Clone, Copy)]
struct Pair;
seed_visits!(Pair, deserialize_seq);

impl<'de> Visitor<'de> for Pair {
    type Value = (Atom, Atom);
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("[key, value]")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<(Atom, Atom), A::Error> {
        let k = element(&mut s, AtomText)?;
        let v = element(&mut s, AtomText)?;
        end(&mut s)?;
        Ok((k, v))
    }
}
