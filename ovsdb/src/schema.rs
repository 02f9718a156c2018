//! Database schemas (RFC 7047 §3.2) as returned by `get_schema`, and value checks against them.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use serde_json::Value as Json;

use crate::value::{Atom, AtomSet, Row, Value, ValueError};

/// A schema that does not parse, or a value that does not fit a column.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SchemaError {
    #[error("malformed schema at {path}: {reason}")]
    Malformed { path: String, reason: String },
    #[error("unknown database {db:?} (schema is {schema:?})")]
    WrongDatabase { db: String, schema: String },
    #[error("unknown table {table:?}")]
    UnknownTable { table: String },
    #[error("table {table}: unknown column {column:?}")]
    UnknownColumn { table: String, column: String },
    #[error("table {table}: column {column} is not mutable")]
    Immutable { table: String, column: String },
    #[error("table {table}, column {column}: value {value} rejected: {reason}")]
    BadValue {
        table: String,
        column: String,
        value: String,
        reason: String,
    },
    #[error("table {table}: {reason}")]
    BadOperation { table: String, reason: String },
}

fn malformed(path: &str, reason: impl Into<String>) -> SchemaError {
    SchemaError::Malformed {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicType {
    Integer,
    Real,
    Boolean,
    String,
    Uuid,
}

impl AtomicType {
    fn parse(s: &str, path: &str) -> Result<AtomicType, SchemaError> {
        Ok(match s {
            "integer" => AtomicType::Integer,
            "real" => AtomicType::Real,
            "boolean" => AtomicType::Boolean,
            "string" => AtomicType::String,
            "uuid" => AtomicType::Uuid,
            other => return Err(malformed(path, format!("unknown atomic type {other:?}"))),
        })
    }

    fn default_atom(self) -> Atom {
        match self {
            AtomicType::Integer => Atom::Integer(0),
            AtomicType::Real => Atom::Real(0.0),
            AtomicType::Boolean => Atom::Boolean(false),
            AtomicType::String => Atom::String(Default::default()),
            AtomicType::Uuid => Atom::Uuid(uuid::Uuid::nil()),
        }
    }
}

/// Key or value type of a column, with its constraints.
#[derive(Debug, Clone, PartialEq)]
pub struct BaseType {
    pub atomic: AtomicType,
    pub enumeration: Option<AtomSet>,
    pub min_integer: Option<i64>,
    pub max_integer: Option<i64>,
    pub min_real: Option<f64>,
    pub max_real: Option<f64>,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    pub ref_table: Option<String>,
    /// `true` for strong references (the default), `false` for weak.
    pub ref_strong: bool,
}

impl BaseType {
    fn simple(atomic: AtomicType) -> BaseType {
        BaseType {
            atomic,
            enumeration: None,
            min_integer: None,
            max_integer: None,
            min_real: None,
            max_real: None,
            min_length: None,
            max_length: None,
            ref_table: None,
            ref_strong: true,
        }
    }

    fn parse(j: &Json, path: &str) -> Result<BaseType, SchemaError> {
        if let Some(s) = j.as_str() {
            return Ok(BaseType::simple(AtomicType::parse(s, path)?));
        }
        let o = j
            .as_object()
            .ok_or_else(|| malformed(path, "base type must be string or object"))?;
        let t = o
            .get("type")
            .and_then(Json::as_str)
            .ok_or_else(|| malformed(path, "no type"))?;
        let mut b = BaseType::simple(AtomicType::parse(t, path)?);
        if let Some(e) = o.get("enum") {
            let v = Value::from_json(e).map_err(|e| malformed(path, e.to_string()))?;
            b.enumeration = Some(v.to_set());
        }
        let int = |k: &str| o.get(k).and_then(Json::as_i64);
        let real = |k: &str| o.get(k).and_then(Json::as_f64);
        let uint = |k: &str| o.get(k).and_then(Json::as_u64);
        b.min_integer = int("minInteger");
        b.max_integer = int("maxInteger");
        b.min_real = real("minReal");
        b.max_real = real("maxReal");
        b.min_length = uint("minLength");
        b.max_length = uint("maxLength");
        b.ref_table = o.get("refTable").and_then(Json::as_str).map(str::to_owned);
        b.ref_strong = o.get("refType").and_then(Json::as_str) != Some("weak");
        Ok(b)
    }

    /// Coerce integers written for real columns; leave everything else as is.
    fn coerce(&self, a: Atom) -> Atom {
        match (self.atomic, a) {
            (AtomicType::Real, Atom::Integer(i)) => Atom::Real(i as f64),
            (_, a) => a,
        }
    }

    /// Why `a` does not fit this type, if it does not.
    pub fn check(&self, a: &Atom) -> Result<(), String> {
        let ok = matches!(
            (self.atomic, a),
            (AtomicType::Integer, Atom::Integer(_))
                | (AtomicType::Real, Atom::Real(_) | Atom::Integer(_))
                | (AtomicType::Boolean, Atom::Boolean(_))
                | (AtomicType::String, Atom::String(_))
                | (AtomicType::Uuid, Atom::Uuid(_) | Atom::NamedUuid(_))
        );
        if !ok {
            return Err(format!("expected {:?}, got {a}", self.atomic));
        }
        if let Some(e) = &self.enumeration
            && !e.contains(a)
        {
            let allowed: Vec<String> = e.iter().map(|a| a.to_string()).collect();
            return Err(format!("{a} is not one of [{}]", allowed.join(", ")));
        }
        match a {
            Atom::Integer(i)
                if (self.min_integer.is_some_and(|m| *i < m)
                    || self.max_integer.is_some_and(|m| *i > m)) =>
            {
                return Err(format!(
                    "{i} outside [{:?}, {:?}]",
                    self.min_integer, self.max_integer
                ));
            }
            Atom::Real(r)
                if (self.min_real.is_some_and(|m| *r < m)
                    || self.max_real.is_some_and(|m| *r > m)) =>
            {
                return Err(format!(
                    "{r} outside [{:?}, {:?}]",
                    self.min_real, self.max_real
                ));
            }
            Atom::String(s) => {
                let n = s.chars().count() as u64;
                if self.min_length.is_some_and(|m| n < m) || self.max_length.is_some_and(|m| n > m)
                {
                    return Err(format!(
                        "length {n} outside [{:?}, {:?}]",
                        self.min_length, self.max_length
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// A column's type: key, optional value (then it is a map), and the element count bounds.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnType {
    pub key: BaseType,
    pub value: Option<BaseType>,
    pub min: u64,
    /// `u64::MAX` stands for "unlimited".
    pub max: u64,
}

impl ColumnType {
    pub fn parse(j: &Json, path: &str) -> Result<ColumnType, SchemaError> {
        if j.is_string() {
            return Ok(ColumnType {
                key: BaseType::parse(j, path)?,
                value: None,
                min: 1,
                max: 1,
            });
        }
        let o = j
            .as_object()
            .ok_or_else(|| malformed(path, "type must be string or object"))?;
        let key = BaseType::parse(o.get("key").ok_or_else(|| malformed(path, "no key"))?, path)?;
        let value = o
            .get("value")
            .map(|v| BaseType::parse(v, path))
            .transpose()?;
        let min = match o.get("min") {
            None => 1,
            Some(m) => m.as_u64().ok_or_else(|| malformed(path, "bad min"))?,
        };
        let max = match o.get("max") {
            None => 1,
            Some(Json::String(s)) if s == "unlimited" => u64::MAX,
            Some(m) => m.as_u64().ok_or_else(|| malformed(path, "bad max"))?,
        };
        if min > 1 || max < 1 || min > max {
            return Err(malformed(path, format!("bad bounds min={min} max={max}")));
        }
        Ok(ColumnType {
            key,
            value,
            min,
            max,
        })
    }

    pub fn is_map(&self) -> bool {
        self.value.is_some()
    }

    /// A plain atom column (exactly one key, no value).
    pub fn is_scalar(&self) -> bool {
        self.value.is_none() && self.min == 1 && self.max == 1
    }

    /// A map, or a set that may hold more than one element: `update2` modifications of such
    /// columns carry a diff, those of other columns the new value.
    pub fn is_composite(&self) -> bool {
        self.is_map() || self.max > 1
    }

    /// The value a row has when the column is not set (what monitors omit).
    pub fn default_value(&self) -> Value {
        if self.is_map() {
            Value::empty_map()
        } else if self.min == 0 {
            Value::empty_set()
        } else {
            Value::Atom(self.key.atomic.default_atom())
        }
    }

    /// Put a decoded value in this column's canonical shape: scalars as atoms, optional and
    /// multi-valued columns as sets, maps as maps. Fails if the shape cannot fit.
    pub fn normalize(&self, v: Value) -> Result<Value, String> {
        if let Some(vt) = &self.value {
            return match v {
                // Only reals coerce: other maps are kept rather than rebuilt.
                Value::Map(m)
                    if self.key.atomic != AtomicType::Real && vt.atomic != AtomicType::Real =>
                {
                    Ok(Value::Map(m))
                }
                Value::Map(m) => Ok(Value::Map(
                    m.into_iter()
                        .map(|(k, val)| (self.key.coerce(k), vt.coerce(val)))
                        .collect(),
                )),
                Value::Set(s) if s.is_empty() => Ok(Value::empty_map()),
                other => Err(format!("expected a map, got {other}")),
            };
        }
        match v {
            Value::Map(_) => Err(format!("expected {:?}, got a map", self.key.atomic)),
            Value::Atom(a) if self.is_scalar() => Ok(Value::Atom(self.key.coerce(a))),
            Value::Atom(a) => Ok(Value::Set(AtomSet::from([self.key.coerce(a)]))),
            Value::Set(s) if self.is_scalar() => match s.len() {
                1 => Ok(Value::Atom(
                    self.key
                        .coerce(s.into_iter().next().unwrap_or(Atom::Integer(0))),
                )),
                n => Err(format!("scalar column given a set of {n}")),
            },
            Value::Set(s) if self.key.atomic != AtomicType::Real => Ok(Value::Set(s)),
            Value::Set(s) => Ok(Value::Set(
                s.into_iter().map(|a| self.key.coerce(a)).collect(),
            )),
        }
    }

    /// Check a full value (as written by insert/update) against the type.
    pub fn check(&self, v: &Value) -> Result<(), String> {
        match v {
            Value::Map(m) => {
                let Some(vt) = &self.value else {
                    return Err("column is not a map".into());
                };
                self.check_len(m.len())?;
                for (k, val) in m {
                    self.key.check(k).map_err(|e| format!("key: {e}"))?;
                    vt.check(val).map_err(|e| format!("value: {e}"))?;
                }
                Ok(())
            }
            Value::Set(s) => {
                if self.is_map() {
                    if s.is_empty() {
                        return self.check_len(0);
                    }
                    return Err("column is a map".into());
                }
                self.check_len(s.len())?;
                s.iter().try_for_each(|a| self.key.check(a))
            }
            Value::Atom(a) => {
                if self.is_map() {
                    return Err("column is a map".into());
                }
                self.check_len(1)?;
                self.key.check(a)
            }
        }
    }

    /// Check the operand of a mutation or a set/map-valued condition: any size is fine.
    pub fn check_elements(&self, v: &Value) -> Result<(), String> {
        match v {
            Value::Map(m) => {
                let Some(vt) = &self.value else {
                    return Err("column is not a map".into());
                };
                m.iter().try_for_each(|(k, val)| {
                    self.key.check(k)?;
                    vt.check(val)
                })
            }
            Value::Set(s) => s.iter().try_for_each(|a| self.key.check(a)),
            Value::Atom(a) => self.key.check(a),
        }
    }

    fn check_len(&self, n: usize) -> Result<(), String> {
        let n = n as u64;
        if n < self.min || n > self.max {
            let max = if self.max == u64::MAX {
                "unlimited".to_owned()
            } else {
                self.max.to_string()
            };
            return Err(format!("{n} elements, allowed {}..{max}", self.min));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ColumnSchema {
    pub ty: ColumnType,
    pub ephemeral: bool,
    pub mutable: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TableSchema {
    pub name: String,
    /// By name; rows decoded with this schema share these names.
    pub columns: BTreeMap<Arc<str>, ColumnSchema>,
    pub max_rows: Option<u64>,
    pub is_root: bool,
    pub indexes: Vec<Vec<String>>,
}

impl TableSchema {
    /// A column, including the implicit `_uuid` and `_version`.
    pub fn column(&self, name: &str) -> Result<&ColumnType, SchemaError> {
        if name == "_uuid" || name == "_version" {
            return Ok(&UUID_COLUMN.ty);
        }
        self.columns
            .get(name)
            .map(|c| &c.ty)
            .ok_or_else(|| SchemaError::UnknownColumn {
                table: self.name.clone(),
                column: name.to_owned(),
            })
    }

    /// [`TableSchema::column`] with the column's shared name, for rows to hold.
    pub fn column_named(&self, name: &str) -> Result<(&Arc<str>, &ColumnType), SchemaError> {
        match name {
            "_uuid" => return Ok((&UUID_NAME, &UUID_COLUMN.ty)),
            "_version" => return Ok((&VERSION_NAME, &UUID_COLUMN.ty)),
            _ => {}
        }
        self.columns
            .get_key_value(name)
            .map(|(k, c)| (k, &c.ty))
            .ok_or_else(|| SchemaError::UnknownColumn {
                table: self.name.clone(),
                column: name.to_owned(),
            })
    }
}

static UUID_NAME: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from("_uuid"));
static VERSION_NAME: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from("_version"));

static UUID_COLUMN: LazyLock<ColumnSchema> = LazyLock::new(|| ColumnSchema {
    ty: ColumnType {
        key: BaseType::simple(AtomicType::Uuid),
        value: None,
        min: 1,
        max: 1,
    },
    ephemeral: false,
    mutable: false,
});

#[derive(Debug, Clone, PartialEq)]
pub struct DatabaseSchema {
    pub name: String,
    pub version: String,
    pub tables: BTreeMap<String, TableSchema>,
}

impl DatabaseSchema {
    pub fn from_json(j: &Json) -> Result<DatabaseSchema, SchemaError> {
        let o = j
            .as_object()
            .ok_or_else(|| malformed("", "schema must be an object"))?;
        let name = o
            .get("name")
            .and_then(Json::as_str)
            .ok_or_else(|| malformed("", "no name"))?;
        let version = o
            .get("version")
            .and_then(Json::as_str)
            .unwrap_or("")
            .to_owned();
        let tables_j = o
            .get("tables")
            .and_then(Json::as_object)
            .ok_or_else(|| malformed("", "no tables"))?;
        let mut tables = BTreeMap::new();
        for (tname, t) in tables_j {
            let cols = t
                .get("columns")
                .and_then(Json::as_object)
                .ok_or_else(|| malformed(tname, "no columns"))?;
            let mut columns = BTreeMap::new();
            for (cname, c) in cols {
                let path = format!("{tname}.{cname}");
                let ty = ColumnType::parse(c.get("type").unwrap_or(&Json::Null), &path)?;
                columns.insert(
                    Arc::from(cname.as_str()),
                    ColumnSchema {
                        ty,
                        ephemeral: c.get("ephemeral").and_then(Json::as_bool).unwrap_or(false),
                        mutable: c.get("mutable").and_then(Json::as_bool).unwrap_or(true),
                    },
                );
            }
            let indexes = t
                .get("indexes")
                .and_then(Json::as_array)
                .map(|ix| {
                    ix.iter()
                        .filter_map(Json::as_array)
                        .map(|cols| {
                            cols.iter()
                                .filter_map(|c| c.as_str().map(str::to_owned))
                                .collect()
                        })
                        .collect()
                })
                .unwrap_or_default();
            tables.insert(
                tname.clone(),
                TableSchema {
                    name: tname.clone(),
                    columns,
                    max_rows: t.get("maxRows").and_then(Json::as_u64),
                    is_root: t.get("isRoot").and_then(Json::as_bool).unwrap_or(false),
                    indexes,
                },
            );
        }
        Ok(DatabaseSchema {
            name: name.to_owned(),
            version,
            tables,
        })
    }

    pub fn table(&self, name: &str) -> Result<&TableSchema, SchemaError> {
        self.tables
            .get(name)
            .ok_or_else(|| SchemaError::UnknownTable {
                table: name.to_owned(),
            })
    }

    /// Decode a row from JSON into canonical shapes using the table's column types.
    pub fn decode_row(&self, table: &str, j: &Json) -> Result<Row, SchemaError> {
        let t = self.table(table)?;
        let obj = j.as_object().ok_or_else(|| SchemaError::BadOperation {
            table: table.to_owned(),
            reason: "row must be a JSON object".into(),
        })?;
        let mut row = Vec::with_capacity(obj.len());
        for (col, v) in obj {
            let (name, ty) = t.column_named(col)?;
            let bad = |reason: String| SchemaError::BadValue {
                table: table.to_owned(),
                column: col.clone(),
                value: ValueError::new("", v).json,
                reason,
            };
            let val = Value::from_json(v).map_err(|e| bad(e.reason.to_owned()))?;
            let val = ty.normalize(val).map_err(bad)?;
            ty.check_elements(&val).map_err(bad)?;
            row.push((Arc::clone(name), val));
        }
        Ok(row.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_nb_style_columns() {
        let s = DatabaseSchema::from_json(&json!({
            "name": "X", "version": "1",
            "tables": {"LB": {"columns": {
                "name": {"type": "string"},
                "protocol": {"type": {"key": {"type": "string", "enum": ["set", ["tcp", "udp"]]},
                                       "min": 0, "max": 1}},
                "vips": {"type": {"key": "string", "value": "string", "min": 0, "max": "unlimited"}},
                "ref": {"type": {"key": {"type": "uuid", "refTable": "LB", "refType": "weak"},
                                  "min": 0, "max": "unlimited"}},
                "prio": {"type": {"key": {"type": "integer", "minInteger": 0, "maxInteger": 10}}}
            }, "isRoot": true}}
        }))
        .unwrap();
        let t = s.table("LB").unwrap();
        let proto = t.column("protocol").unwrap();
        assert!(proto.check(&Value::from("tcp")).is_ok());
        assert!(
            proto
                .check(&Value::from("icmp"))
                .unwrap_err()
                .contains("not one of")
        );
        assert!(
            t.column("prio")
                .unwrap()
                .check(&Value::from(11i64))
                .is_err()
        );
        assert!(
            t.column("vips")
                .unwrap()
                .check(&Value::map([("a", "b")]))
                .is_ok()
        );
        assert!(t.column("vips").unwrap().check(&Value::from("a")).is_err());
        let r = t.column("ref").unwrap();
        assert!(!r.key.ref_strong);
        assert_eq!(r.key.ref_table.as_deref(), Some("LB"));
        assert_eq!(proto.default_value(), Value::empty_set());
        assert!(matches!(
            t.column("nope"),
            Err(SchemaError::UnknownColumn { .. })
        ));
    }
}
