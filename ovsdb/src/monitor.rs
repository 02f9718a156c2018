//! Monitor requests and the client-side replica ("cache") they keep (RFC 7047 §4.1.5 and the
//! `monitor_cond`/`monitor_cond_since` extensions of ovsdb-server(7)).
//!
//! Pure state machine: decoded `update2`/`update3` payloads go in, change events come out.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde_json::{Value as Json, json};

use crate::schema::{ColumnType, DatabaseSchema, SchemaError};
use crate::txn::Condition;
use crate::value::{AtomMap, Row, Uuid, Value, merge};

mod seed;
mod wire;

pub use wire::{
    RowUpdate, TableUpdates, Update, parse_notification, parse_notification_projected,
    parse_notification_text, parse_since_reply, parse_since_reply_text, parse_table_updates,
    parse_table_updates_projected, parse_table_updates_text, parse_table_updates2,
    parse_table_updates2_text, utf8,
};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MonitorError {
    #[error("malformed update ({reason}): {excerpt}")]
    Malformed {
        reason: &'static str,
        excerpt: String,
    },
    #[error(transparent)]
    Schema(#[from] SchemaError),
    #[error("table {table}: {op} of row {uuid} that is not in the cache")]
    UnknownRow {
        table: String,
        uuid: Uuid,
        op: &'static str,
    },
    #[error("table {table} is not monitored")]
    NotMonitored { table: String },
}

fn malformed(reason: &'static str, j: &Json) -> MonitorError {
    MonitorError::Malformed {
        reason,
        excerpt: crate::value::ValueError::new("", j).json,
    }
}

/// What to monitor in one table.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TableSelect {
    /// `None`: every column of the table.
    pub columns: Option<Vec<String>>,
    /// Empty: every row.
    pub conditions: Vec<Condition>,
    /// Each change comes with the row's every monitored column (RFC 7047 `monitor`), so the
    /// cache keeps no columns of the table, only which rows exist: the rows are in the events.
    /// For a large table whose consumer keeps what it needs of each row (a digest), where a
    /// copy of every row would cost more. No conditions; not resumed after a reconnect (the
    /// rows come again in full).
    pub whole_rows: bool,
    /// A whole-row table's rows made into what the consumer keeps of them, each as soon as it
    /// is decoded, so a snapshot of every row is never held whole; events carry the result.
    /// Applied to its own output it must change nothing.
    pub project: Option<Projection>,
}

/// What a whole-row table's rows are made into ([`TableSelect::project`]): a plain function
/// (table, row) -> row.
#[derive(Clone, Copy)]
pub struct Projection(pub fn(&str, Row) -> Row);

impl fmt::Debug for Projection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Projection")
    }
}

impl PartialEq for Projection {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::fn_addr_eq(self.0, other.0)
    }
}

/// Tables (and columns) a monitor subscribes to.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MonitorSpec {
    pub tables: BTreeMap<String, TableSelect>,
}

impl MonitorSpec {
    pub fn new() -> Self {
        Self::default()
    }

    /// Monitor all columns of `table`.
    pub fn table(mut self, table: &str) -> Self {
        self.tables.insert(table.to_owned(), TableSelect::default());
        self
    }

    pub fn columns(mut self, table: &str, columns: &[&str]) -> Self {
        self.tables.insert(
            table.to_owned(),
            TableSelect {
                columns: Some(columns.iter().map(|c| (*c).to_owned()).collect()),
                ..TableSelect::default()
            },
        );
        self
    }

    /// Monitor `columns` of `table` with whole rows in every event and none kept in the cache
    /// ([`TableSelect::whole_rows`]).
    pub fn whole_rows(mut self, table: &str, columns: &[&str]) -> Self {
        self = self.columns(table, columns);
        if let Some(sel) = self.tables.get_mut(table) {
            sel.whole_rows = true;
        }
        self
    }

    /// [`MonitorSpec::whole_rows`], each row made into `project`'s as it is decoded.
    pub fn whole_rows_projected(
        mut self,
        table: &str,
        columns: &[&str],
        project: Projection,
    ) -> Self {
        self = self.whole_rows(table, columns);
        if let Some(sel) = self.tables.get_mut(table) {
            sel.project = Some(project);
        }
        self
    }

    /// Whether `table` is monitored with whole rows.
    pub fn is_whole_rows(&self, table: &str) -> bool {
        self.tables.get(table).is_some_and(|s| s.whole_rows)
    }

    /// Whether `table`'s rows are projected ([`TableSelect::project`]).
    fn is_projected(&self, table: &str) -> bool {
        self.tables.get(table).is_some_and(|s| s.project.is_some())
    }

    /// `row` of `table` as its projection makes it (unchanged for a table without one).
    pub fn project(&self, table: &str, row: Row) -> Row {
        match self.tables.get(table).and_then(|s| s.project) {
            Some(Projection(p)) => p(table, row),
            None => row,
        }
    }

    /// Whether any table is monitored as `monitor_cond` does (its rows kept in the cache).
    pub fn has_kept_rows(&self) -> bool {
        self.tables.values().any(|s| !s.whole_rows)
    }

    /// The subscriptions this spec takes: (`monitor_cond`'s, RFC 7047 `monitor`'s). A spec of
    /// no tables still takes a `monitor_cond` one, as before whole-row tables.
    pub fn subscriptions(&self) -> (bool, bool) {
        let whole = self.has_whole_rows();
        (self.has_kept_rows() || !whole, whole)
    }

    /// Whether any table is monitored with whole rows.
    pub fn has_whole_rows(&self) -> bool {
        self.tables.values().any(|s| s.whole_rows)
    }

    /// Check tables and columns against the schema.
    pub fn check(&self, schema: &DatabaseSchema) -> Result<(), SchemaError> {
        for (t, sel) in &self.tables {
            let ts = schema.table(t)?;
            for c in sel.columns.iter().flatten() {
                ts.column(c)?;
            }
        }
        Ok(())
    }

    /// RFC 7047 `<monitor-requests>` object of the whole-row tables.
    pub fn to_json_whole_rows(&self) -> Json {
        let mut o = serde_json::Map::new();
        for (t, sel) in self.tables.iter().filter(|(_, s)| s.whole_rows) {
            let mut r = serde_json::Map::new();
            if let Some(c) = &sel.columns {
                r.insert("columns".into(), json!(c));
            }
            o.insert(t.clone(), Json::Object(r));
        }
        Json::Object(o)
    }

    /// `<monitor-cond-requests>` object of the tables whose rows are kept.
    pub fn to_json(&self) -> Json {
        let mut o = serde_json::Map::new();
        for (t, sel) in self.tables.iter().filter(|(_, s)| !s.whole_rows) {
            let mut r = serde_json::Map::new();
            if let Some(c) = &sel.columns {
                r.insert("columns".into(), json!(c));
            }
            if !sel.conditions.is_empty() {
                let w: Vec<Json> = sel
                    .conditions
                    .iter()
                    .map(|c| json!([c.column, c.function.as_str(), c.value.to_json()]))
                    .collect();
                r.insert("where".into(), Json::Array(w));
            }
            o.insert(t.clone(), json!([Json::Object(r)]));
        }
        Json::Object(o)
    }
}

/// A change to the cache, as consumers see it.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Insert {
        table: String,
        uuid: Uuid,
        new: Arc<Row>,
    },
    Modify {
        table: String,
        uuid: Uuid,
        old: Arc<Row>,
        new: Arc<Row>,
    },
    Delete {
        table: String,
        uuid: Uuid,
        old: Arc<Row>,
    },
}

/// The replica of the monitored tables.
#[derive(Debug, Clone)]
pub struct Cache {
    schema: Arc<DatabaseSchema>,
    /// As asked for by the consumer.
    requested: MonitorSpec,
    /// With column lists filled in and columns the schema lacks left out. Shared: each
    /// notification's decoding takes it (for the tables' projections) without copying it.
    spec: Arc<MonitorSpec>,
    /// Rows are shared with the events that report them: a snapshot of thousands of rows is
    /// held once, not once in the cache and again in its events.
    tables: BTreeMap<String, BTreeMap<Uuid, Arc<Row>>>,
    last_txn_id: Option<Uuid>,
    /// What a whole-row table's row is in the cache (no columns), shared by all of them.
    placeholder: Arc<Row>,
}

/// Name the columns: left out, the server also sends `_version` in modifications. Columns the
/// schema does not have (any more) are left out rather than failing the subscription.
fn resolve(schema: &DatabaseSchema, spec: &MonitorSpec) -> MonitorSpec {
    let mut out = spec.clone();
    for (t, sel) in out.tables.iter_mut() {
        let Ok(ts) = schema.table(t) else { continue };
        sel.columns = Some(match sel.columns.take() {
            None => ts.columns.keys().map(|c| c.to_string()).collect(),
            Some(cols) => cols.into_iter().filter(|c| ts.column(c).is_ok()).collect(),
        });
    }
    out
}

impl Cache {
    pub fn new(schema: Arc<DatabaseSchema>, spec: MonitorSpec) -> Self {
        let resolved = resolve(&schema, &spec);
        let tables = spec
            .tables
            .keys()
            .map(|t| (t.clone(), BTreeMap::new()))
            .collect();
        Cache {
            schema,
            requested: spec,
            spec: Arc::new(resolved),
            tables,
            last_txn_id: None,
            placeholder: Arc::new(Row::new()),
        }
    }

    /// The server's schema changed (e.g. converted during an upgrade): re-resolve the columns
    /// and forget the txn id, so the next subscription replaces the whole cache.
    pub fn set_schema(&mut self, schema: Arc<DatabaseSchema>) {
        self.spec = Arc::new(resolve(&schema, &self.requested));
        self.schema = schema;
        self.last_txn_id = None;
    }

    pub fn spec(&self) -> &MonitorSpec {
        &self.spec
    }

    /// [`Cache::spec`], shared.
    pub fn shared_spec(&self) -> Arc<MonitorSpec> {
        Arc::clone(&self.spec)
    }

    pub fn schema(&self) -> &Arc<DatabaseSchema> {
        &self.schema
    }

    /// Last transaction seen (for `monitor_cond_since` on reconnect).
    pub fn last_txn_id(&self) -> Option<Uuid> {
        self.last_txn_id
    }

    pub fn set_last_txn_id(&mut self, id: Option<Uuid>) {
        self.last_txn_id = id;
    }

    /// The rows of `name`; those of a whole-row table have no columns
    /// ([`TableSelect::whole_rows`]).
    pub fn table(&self, name: &str) -> Option<&BTreeMap<Uuid, Arc<Row>>> {
        self.tables.get(name)
    }

    pub fn tables(&self) -> &BTreeMap<String, BTreeMap<Uuid, Arc<Row>>> {
        &self.tables
    }

    pub fn row(&self, table: &str, uuid: &Uuid) -> Option<&Row> {
        self.tables
            .get(table)
            .and_then(|t| t.get(uuid))
            .map(|r| r.as_ref())
    }

    /// Monitored columns of `table` with their (shared) names and types.
    fn columns(&self, table: &str) -> Result<Vec<(Arc<str>, ColumnType)>, MonitorError> {
        let sel = self
            .spec
            .tables
            .get(table)
            .ok_or_else(|| MonitorError::NotMonitored {
                table: table.to_owned(),
            })?;
        let ts = self.schema.table(table)?;
        Ok(match &sel.columns {
            Some(cols) => cols
                .iter()
                .map(|c| {
                    let (name, ty) = ts.column_named(c)?;
                    Ok((Arc::clone(name), ty.clone()))
                })
                .collect::<Result<_, SchemaError>>()?,
            None => ts
                .columns
                .iter()
                .map(|(k, c)| (Arc::clone(k), c.ty.clone()))
                .collect(),
        })
    }

    /// A full row: the server omits columns that hold their default value.
    fn complete(cols: &[(Arc<str>, ColumnType)], row: Row) -> Row {
        let missing = |(c, _): &&(Arc<str>, ColumnType)| !row.contains_key(c);
        if !cols.iter().any(|c| missing(&c)) {
            return row;
        }
        let defaults: Vec<_> = (cols.iter().filter(missing))
            .map(|(c, ty)| (Arc::clone(c), ty.default_value()))
            .collect();
        // Made anew in one piece: inserting one column at a time would reallocate each time.
        row.into_iter().chain(defaults).collect()
    }

    /// Apply one notification or initial reply; returns the resulting events.
    pub fn apply(&mut self, updates: TableUpdates) -> Result<Vec<Event>, MonitorError> {
        let mut events = Vec::with_capacity(updates.values().map(BTreeMap::len).sum());
        for (table, rows) in updates {
            // Looked up once per table, not per row: a bulk insert brings thousands.
            let col_list = self.columns(&table)?;
            if self.spec.is_whole_rows(&table) {
                // A projected row holds what its projection makes of it, not every column
                // (made as it was decoded; made again, it stays the same).
                let spec = &self.spec;
                let projected = spec.is_projected(&table);
                let make = |r: Row| match projected {
                    true => spec.project(&table, r),
                    false => Self::complete(&col_list, r),
                };
                let kept = self.tables.entry(table.clone()).or_default();
                whole_rows(&table, rows, &make, kept, &self.placeholder, &mut events)?;
                continue;
            }
            let cols: BTreeMap<&str, &ColumnType> =
                col_list.iter().map(|(c, t)| (&**c, t)).collect();
            let t = self.tables.entry(table.clone()).or_default();
            for (uuid, ru) in rows {
                match ru {
                    RowUpdate::Initial(r) | RowUpdate::Insert(r) | RowUpdate::Replace(r) => {
                        let new = Arc::new(Self::complete(&col_list, r));
                        match t.insert(uuid, Arc::clone(&new)) {
                            // A re-sent row (e.g. an initial after reconnect): a modify.
                            Some(old) if old != new => events.push(Event::Modify {
                                table: table.clone(),
                                uuid,
                                old,
                                new,
                            }),
                            Some(_) => {}
                            None => events.push(Event::Insert {
                                table: table.clone(),
                                uuid,
                                new,
                            }),
                        }
                    }
                    RowUpdate::Delete => {
                        let old = t.remove(&uuid).ok_or(MonitorError::UnknownRow {
                            table: table.clone(),
                            uuid,
                            op: "delete",
                        })?;
                        events.push(Event::Delete {
                            table: table.clone(),
                            uuid,
                            old,
                        });
                    }
                    RowUpdate::Modify(diff) => {
                        let entry = t.get_mut(&uuid).ok_or(MonitorError::UnknownRow {
                            table: table.clone(),
                            uuid,
                            op: "modify",
                        })?;
                        let old = Arc::clone(entry);
                        let mut row: Row = (*old).clone();
                        for (col, d) in diff {
                            // Only maps and sets that may hold more than one element carry
                            // a diff; other columns carry their new value.
                            let ty = cols.get(&*col);
                            let scalar = ty.is_none_or(|t| !t.is_composite());
                            let new = |cur| if scalar { d } else { apply_diff(cur, d) };
                            match row.get_mut(&col) {
                                Some(v) => *v = new(std::mem::replace(v, Value::empty_set())),
                                None => {
                                    let cur = ty.map_or(Value::empty_set(), |t| t.default_value());
                                    row.insert(col, new(cur));
                                }
                            }
                        }
                        let new = Arc::new(row);
                        *entry = Arc::clone(&new);
                        events.push(Event::Modify {
                            table: table.clone(),
                            uuid,
                            old,
                            new,
                        });
                    }
                }
            }
        }
        Ok(events)
    }

    /// Replace the tables whose rows are kept (`whole_rows` false: monitor_cond_since answered
    /// found=false) or the whole-row tables (`whole_rows`: a `monitor` reply) with a fresh
    /// initial state; events describe the difference from what the cache held (a whole-row
    /// table's row that was there and still is: a modification, its content unknown before).
    pub fn replace(
        &mut self,
        initial: TableUpdates,
        whole_rows: bool,
    ) -> Result<Vec<Event>, MonitorError> {
        let mut fresh: BTreeMap<String, BTreeMap<Uuid, Arc<Row>>> = (self.spec.tables.iter())
            .filter(|(_, sel)| sel.whole_rows == whole_rows)
            .map(|(t, _)| (t.clone(), BTreeMap::new()))
            .collect();
        for (table, rows) in initial {
            if rows.is_empty() {
                continue;
            }
            if self.spec.is_whole_rows(&table) != whole_rows {
                return Err(malformed("a table of the other monitor", &json!(table)));
            }
            let projected = self.spec.is_projected(&table);
            let cols = self.columns(&table)?;
            let f = fresh.entry(table.clone()).or_default();
            for (uuid, ru) in rows {
                match ru {
                    RowUpdate::Initial(r) | RowUpdate::Insert(r) => {
                        let row = match projected {
                            true => self.spec.project(&table, r),
                            false => Self::complete(&cols, r),
                        };
                        f.insert(uuid, Arc::new(row));
                    }
                    _ => {
                        return Err(MonitorError::UnknownRow {
                            table,
                            uuid,
                            op: "modify/delete in initial",
                        });
                    }
                }
            }
        }
        let mut events = vec![];
        let old: BTreeMap<String, BTreeMap<Uuid, Arc<Row>>> = fresh
            .keys()
            .map(|t| (t.clone(), self.tables.remove(t).unwrap_or_default()))
            .collect();
        for (table, rows) in &fresh {
            let before = old.get(table);
            for (uuid, new) in rows {
                match before.and_then(|b| b.get(uuid)) {
                    None => events.push(Event::Insert {
                        table: table.clone(),
                        uuid: *uuid,
                        new: Arc::clone(new),
                    }),
                    Some(o) if whole_rows || o != new => events.push(Event::Modify {
                        table: table.clone(),
                        uuid: *uuid,
                        old: Arc::clone(o),
                        new: Arc::clone(new),
                    }),
                    Some(_) => {}
                }
            }
        }
        for (table, rows) in old {
            for (uuid, o) in rows {
                if !fresh.get(&table).is_some_and(|f| f.contains_key(&uuid)) {
                    events.push(Event::Delete {
                        table: table.clone(),
                        uuid,
                        old: o,
                    });
                }
            }
        }
        for (table, rows) in fresh {
            let rows = if whole_rows {
                (rows.into_keys())
                    .map(|u| (u, Arc::clone(&self.placeholder)))
                    .collect()
            } else {
                rows
            };
            self.tables.insert(table, rows);
        }
        Ok(events)
    }
}

/// Apply a whole-row table's changes: each event carries the row's every monitored column;
/// `kept` only which rows exist (as `placeholder`).
fn whole_rows(
    table: &str,
    rows: BTreeMap<Uuid, RowUpdate>,
    make: &dyn Fn(Row) -> Row,
    kept: &mut BTreeMap<Uuid, Arc<Row>>,
    placeholder: &Arc<Row>,
    events: &mut Vec<Event>,
) -> Result<(), MonitorError> {
    for (uuid, ru) in rows {
        let table = table.to_owned();
        match ru {
            RowUpdate::Initial(r) | RowUpdate::Insert(r) | RowUpdate::Replace(r) => {
                let new = Arc::new(make(r));
                events.push(match kept.insert(uuid, Arc::clone(placeholder)) {
                    Some(old) => Event::Modify {
                        table,
                        uuid,
                        old,
                        new,
                    },
                    None => Event::Insert { table, uuid, new },
                });
            }
            RowUpdate::Delete => {
                let old = kept.remove(&uuid).ok_or(MonitorError::UnknownRow {
                    table: table.clone(),
                    uuid,
                    op: "delete",
                })?;
                events.push(Event::Delete { table, uuid, old });
            }
            RowUpdate::Modify(_) => {
                return Err(malformed("a diff for a whole-row table", &json!(table)));
            }
        }
    }
    Ok(())
}

/// Apply an update2 "modify" diff to a set or map value: a map's keys in the diff are added,
/// replaced, or removed when the diff repeats their value; a set's elements are toggled.
pub fn apply_diff(cur: Value, diff: Value) -> Value {
    match (cur, diff) {
        (Value::Map(m), Value::Map(d)) => Value::Map(AtomMap::from_sorted(merge(
            m,
            d,
            |a, b| a.0.cmp(&b.0),
            |old, new| (old.1 != new.1).then_some(new),
        ))),
        (cur, diff) => Value::Set(cur.into_set().symmetric_difference(diff.into_set())),
    }
}

/// Inverse of [`apply_diff`]: the diff ovsdb-server would send to turn `old` into `new` in a
/// composite column (see [`ColumnType::is_composite`]).
pub fn make_diff(old: &Value, new: &Value) -> Value {
    match (old, new) {
        // Keys only in `old` are removed by repeating their value; keys in `new` (not in `old`
        // or with another value there) carry their new value.
        (Value::Map(o), Value::Map(n)) => Value::Map(AtomMap::from_sorted(merge(
            o.as_slice().iter().cloned(),
            n.as_slice().iter().cloned(),
            |a, b| a.0.cmp(&b.0),
            |old, new| (old.1 != new.1).then_some(new),
        ))),
        _ => Value::Set(old.to_set().symmetric_difference(new.to_set())),
    }
}

#[cfg(test)]
mod tests;
