//! OVSDB values (RFC 7047 §5.1): atoms, sets and maps, with their JSON encodings.
//!
//! Sets and maps are sorted by atom ([`AtomSet`], [`AtomMap`]) so that equality is order-free
//! and the monitor cache can apply symmetric differences in one pass. A set of one element is
//! emitted as a bare atom, as the RFC allows and ovsdb-server does.

mod row;
mod set;

use compact_str::CompactString;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

pub use row::Row;
pub(crate) use set::merge;
pub use set::{AtomMap, AtomSet};

use serde_json::{Value as Json, json};
pub use uuid::Uuid;

/// Why a JSON value is not an OVSDB value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {json}")]
pub struct ValueError {
    pub reason: &'static str,
    /// The offending JSON, shortened.
    pub json: String,
}

impl ValueError {
    pub(crate) fn new(reason: &'static str, json: &Json) -> Self {
        let mut s = json.to_string();
        if s.len() > 200 {
            let mut cut = 200;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s.truncate(cut);
            s.push('…');
        }
        ValueError { reason, json: s }
    }
}

/// One OVSDB atom.
///
/// Texts are boxed `str`s, not `String`s: 8 bytes less for every atom, set element and map
/// pair a cache holds.
#[derive(Debug, Clone)]
pub enum Atom {
    Integer(i64),
    Real(f64),
    Boolean(bool),
    /// Held in place up to 24 bytes: a database's strings are mostly short (names, keys,
    /// addresses, flags), and tens of thousands of them each in an allocation of its own
    /// cost more than the rows around them.
    String(CompactString),
    Uuid(Uuid),
    /// `["named-uuid", name]`: a row inserted earlier in the same transaction.
    NamedUuid(Box<str>),
}

impl Atom {
    pub fn string(s: impl Into<String>) -> Atom {
        Atom::String(CompactString::from(s.into()))
    }

    fn rank(&self) -> u8 {
        match self {
            Atom::Integer(_) => 0,
            Atom::Real(_) => 1,
            Atom::Boolean(_) => 2,
            Atom::String(_) => 3,
            Atom::Uuid(_) => 4,
            Atom::NamedUuid(_) => 5,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Atom::String(s) => Some(s),
            _ => None,
        }
    }

    /// How this atom orders against the string atom `s`, without making one of it.
    pub(crate) fn cmp_str(&self, s: &str) -> Ordering {
        match self {
            Atom::String(a) => (**a).cmp(s),
            _ => self
                .rank()
                .cmp(&Atom::String(CompactString::default()).rank()),
        }
    }

    pub fn as_uuid(&self) -> Option<Uuid> {
        match self {
            Atom::Uuid(u) => Some(*u),
            _ => None,
        }
    }

    pub fn as_integer(&self) -> Option<i64> {
        match self {
            Atom::Integer(i) => Some(*i),
            _ => None,
        }
    }

    pub fn to_json(&self) -> Json {
        match self {
            Atom::Integer(i) => json!(i),
            // Non-finite reals have no JSON form; OVSDB never produces them.
            Atom::Real(r) => serde_json::Number::from_f64(*r)
                .map(Json::Number)
                .unwrap_or(Json::Null),
            Atom::Boolean(b) => json!(b),
            Atom::String(s) => json!(s.as_str()),
            Atom::Uuid(u) => json!(["uuid", u.to_string()]),
            Atom::NamedUuid(n) => json!(["named-uuid", n]),
        }
    }

    pub fn from_json(j: &Json) -> Result<Atom, ValueError> {
        match j {
            Json::Bool(b) => Ok(Atom::Boolean(*b)),
            Json::String(s) => Ok(Atom::string(s.as_str())),
            Json::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Ok(Atom::Integer(i))
                } else if let Some(f) = n.as_f64() {
                    Ok(Atom::Real(f))
                } else {
                    Err(ValueError::new("number out of range", j))
                }
            }
            Json::Array(a) => match a.as_slice() {
                [Json::String(tag), Json::String(s)] if tag == "uuid" => Uuid::parse_str(s)
                    .map(Atom::Uuid)
                    .map_err(|_| ValueError::new("malformed uuid", j)),
                [Json::String(tag), Json::String(s)] if tag == "named-uuid" => {
                    Ok(Atom::NamedUuid(s.as_str().into()))
                }
                _ => Err(ValueError::new("expected an atom", j)),
            },
            _ => Err(ValueError::new("expected an atom", j)),
        }
    }
}

// Total order so atoms can be sorted in sets and maps; reals use IEEE total order.
impl Ord for Atom {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Atom::Integer(a), Atom::Integer(b)) => a.cmp(b),
            (Atom::Real(a), Atom::Real(b)) => a.total_cmp(b),
            (Atom::Boolean(a), Atom::Boolean(b)) => a.cmp(b),
            (Atom::String(a), Atom::String(b)) => a.cmp(b),
            (Atom::Uuid(a), Atom::Uuid(b)) => a.cmp(b),
            (Atom::NamedUuid(a), Atom::NamedUuid(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl PartialOrd for Atom {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Atom {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Atom {}

// Equal atoms hash alike: reals compare by their bits' total order, so hash their bits.
impl Hash for Atom {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.rank().hash(h);
        match self {
            Atom::Integer(i) => i.hash(h),
            Atom::Real(r) => r.to_bits().hash(h),
            Atom::Boolean(b) => b.hash(h),
            Atom::String(s) => s.as_str().hash(h),
            Atom::NamedUuid(s) => s.hash(h),
            Atom::Uuid(u) => u.hash(h),
        }
    }
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Atom::Integer(i) => write!(f, "{i}"),
            Atom::Real(r) => write!(f, "{r}"),
            Atom::Boolean(b) => write!(f, "{b}"),
            Atom::String(s) => write!(f, "{s:?}"),
            Atom::Uuid(u) => write!(f, "{u}"),
            Atom::NamedUuid(n) => write!(f, "@{n}"),
        }
    }
}

impl From<&str> for Atom {
    fn from(s: &str) -> Atom {
        Atom::String(s.into())
    }
}
impl From<String> for Atom {
    fn from(s: String) -> Atom {
        Atom::String(s.into())
    }
}
impl From<i64> for Atom {
    fn from(i: i64) -> Atom {
        Atom::Integer(i)
    }
}
impl From<bool> for Atom {
    fn from(b: bool) -> Atom {
        Atom::Boolean(b)
    }
}
impl From<f64> for Atom {
    fn from(r: f64) -> Atom {
        Atom::Real(r)
    }
}
impl From<Uuid> for Atom {
    fn from(u: Uuid) -> Atom {
        Atom::Uuid(u)
    }
}

/// An OVSDB value: a single atom, a set or a map.
///
/// Without a schema a bare atom on the wire may be a one-element set;
/// [`ColumnType::normalize`](crate::schema::ColumnType::normalize) turns decoded values into the
/// column's canonical shape.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Value {
    Atom(Atom),
    Set(AtomSet),
    Map(AtomMap),
}

impl Value {
    pub fn empty_set() -> Value {
        Value::Set(AtomSet::new())
    }

    pub fn empty_map() -> Value {
        Value::Map(AtomMap::new())
    }

    pub fn set<I: IntoIterator<Item = A>, A: Into<Atom>>(items: I) -> Value {
        Value::Set(items.into_iter().map(Into::into).collect())
    }

    pub fn map<I, K, V>(items: I) -> Value
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<Atom>,
        V: Into<Atom>,
    {
        Value::Map(
            items
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }

    pub fn as_atom(&self) -> Option<&Atom> {
        match self {
            Value::Atom(a) => Some(a),
            Value::Set(s) if s.len() == 1 => s.first(),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        self.as_atom().and_then(Atom::as_str)
    }

    pub fn as_map(&self) -> Option<&AtomMap> {
        match self {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }

    /// Elements of a set (or the single atom) as a set; a map gives the empty set.
    pub fn to_set(&self) -> AtomSet {
        match self {
            Value::Atom(a) => AtomSet::from([a.clone()]),
            Value::Set(s) => s.clone(),
            Value::Map(_) => AtomSet::new(),
        }
    }

    /// [`Value::to_set`] without copying.
    pub fn into_set(self) -> AtomSet {
        match self {
            Value::Atom(a) => AtomSet::from([a]),
            Value::Set(s) => s,
            Value::Map(_) => AtomSet::new(),
        }
    }

    pub fn to_json(&self) -> Json {
        match self {
            Value::Atom(a) => a.to_json(),
            Value::Set(s) if s.len() == 1 => s.first().map(Atom::to_json).unwrap_or(Json::Null),
            Value::Set(s) => json!(["set", s.iter().map(Atom::to_json).collect::<Vec<_>>()]),
            Value::Map(m) => json!([
                "map",
                m.iter()
                    .map(|(k, v)| json!([k.to_json(), v.to_json()]))
                    .collect::<Vec<_>>()
            ]),
        }
    }

    pub fn from_json(j: &Json) -> Result<Value, ValueError> {
        if let Json::Array(a) = j {
            match a.as_slice() {
                [Json::String(tag), Json::Array(items)] if tag == "set" => {
                    let set = items
                        .iter()
                        .map(Atom::from_json)
                        .collect::<Result<_, _>>()?;
                    return Ok(Value::Set(set));
                }
                [Json::String(tag), Json::Array(pairs)] if tag == "map" => {
                    let map = pairs
                        .iter()
                        .map(|p| match p.as_array().map(Vec::as_slice) {
                            Some([k, v]) => Ok((Atom::from_json(k)?, Atom::from_json(v)?)),
                            _ => Err(ValueError::new("map pair must be [key, value]", p)),
                        })
                        .collect::<Result<_, _>>()?;
                    return Ok(Value::Map(map));
                }
                _ => {}
            }
        }
        Atom::from_json(j).map(Value::Atom)
    }
}

impl<A: Into<Atom>> From<A> for Value {
    fn from(a: A) -> Value {
        Value::Atom(a.into())
    }
}

// Direct serialization (no intermediate JSON tree), used to send transactions; same encoding
// as `to_json`.
impl serde::Serialize for Atom {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Atom::Integer(i) => s.serialize_i64(*i),
            Atom::Real(r) => s.serialize_f64(*r),
            Atom::Boolean(b) => s.serialize_bool(*b),
            Atom::String(v) => s.serialize_str(v),
            Atom::Uuid(u) => {
                let mut buf = uuid::Uuid::encode_buffer();
                ("uuid", &*u.hyphenated().encode_lower(&mut buf)).serialize(s)
            }
            Atom::NamedUuid(n) => ("named-uuid", n).serialize(s),
        }
    }
}

struct Pairs<'a>(&'a AtomMap);

impl serde::Serialize for Pairs<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter())
    }
}

impl serde::Serialize for Value {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Atom(a) => a.serialize(s),
            Value::Set(set) if set.len() == 1 => match set.first() {
                Some(a) => a.serialize(s),
                None => s.serialize_unit(),
            },
            Value::Set(set) => ("set", set).serialize(s),
            Value::Map(m) => ("map", Pairs(m)).serialize(s),
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_json())
    }
}

/// Decode a JSON object of column values (as in a `<row>`).
pub fn row_from_json(j: &Json) -> Result<Row, ValueError> {
    let obj = j
        .as_object()
        .ok_or_else(|| ValueError::new("row must be an object", j))?;
    obj.iter()
        .map(|(k, v)| Ok((k.as_str(), Value::from_json(v)?)))
        .collect()
}

pub fn row_to_json(row: &Row) -> Json {
    Json::Object(
        row.iter()
            .map(|(k, v)| (k.to_owned(), v.to_json()))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings() {
        let u = Uuid::parse_str("36bdbd1c-0f30-4b02-b1a3-2ef0b5d16c2b").unwrap();
        assert_eq!(Value::from(u).to_json(), json!(["uuid", u.to_string()]));
        assert_eq!(Value::set(["a"]).to_json(), json!("a"));
        assert_eq!(Value::set(Vec::<Atom>::new()).to_json(), json!(["set", []]));
        assert_eq!(Value::set([1i64, 2]).to_json(), json!(["set", [1, 2]]));
        assert_eq!(
            Value::map([("k", "v")]).to_json(),
            json!(["map", [["k", "v"]]])
        );
        assert_eq!(
            Value::from_json(&json!(["named-uuid", "row1"])).unwrap(),
            Value::Atom(Atom::NamedUuid("row1".into()))
        );
        assert!(Value::from_json(&json!(["uuid", "nope"])).is_err());
        assert!(Value::from_json(&json!(["map", [["k"]]])).is_err());
        assert!(Value::from_json(&json!({"a": 1})).is_err());
        assert!(Value::from_json(&json!(null)).is_err());
    }
}
