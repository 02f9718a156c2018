//! Transactions (RFC 7047 §5.2): a builder for operations, a schema check run before sending,
//! and decoding of per-operation results and server errors.

use serde_json::{Value as Json, json};

use crate::schema::{AtomicType, ColumnType, DatabaseSchema, SchemaError, TableSchema};
use crate::value::{Atom, Row, Uuid, Value, row_from_json, row_to_json};

/// Condition function (RFC 7047 §5.1 `<condition>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Function {
    Lt,
    Le,
    Eq,
    Ne,
    Ge,
    Gt,
    Includes,
    Excludes,
}

impl Function {
    pub fn as_str(self) -> &'static str {
        match self {
            Function::Lt => "<",
            Function::Le => "<=",
            Function::Eq => "==",
            Function::Ne => "!=",
            Function::Ge => ">=",
            Function::Gt => ">",
            Function::Includes => "includes",
            Function::Excludes => "excludes",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub column: String,
    pub function: Function,
    pub value: Value,
}

impl Condition {
    pub fn new(column: &str, function: Function, value: impl Into<Value>) -> Self {
        Condition {
            column: column.to_owned(),
            function,
            value: value.into(),
        }
    }
    pub fn eq(column: &str, value: impl Into<Value>) -> Self {
        Self::new(column, Function::Eq, value)
    }
    pub fn includes(column: &str, value: impl Into<Value>) -> Self {
        Self::new(column, Function::Includes, value)
    }
    /// `_uuid == u`.
    pub fn uuid(u: Uuid) -> Self {
        Self::eq("_uuid", u)
    }
    fn to_json(&self) -> Json {
        json!([self.column, self.function.as_str(), self.value.to_json()])
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutator {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Insert,
    Delete,
}

impl Mutator {
    pub fn as_str(self) -> &'static str {
        match self {
            Mutator::Add => "+=",
            Mutator::Sub => "-=",
            Mutator::Mul => "*=",
            Mutator::Div => "/=",
            Mutator::Mod => "%=",
            Mutator::Insert => "insert",
            Mutator::Delete => "delete",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Mutation {
    pub column: String,
    pub mutator: Mutator,
    pub value: Value,
}

impl Mutation {
    pub fn new(column: &str, mutator: Mutator, value: impl Into<Value>) -> Self {
        Mutation {
            column: column.to_owned(),
            mutator,
            value: value.into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitUntil {
    Equal,
    NotEqual,
}

/// One operation of a transaction.
#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    Insert {
        table: String,
        row: Row,
        uuid_name: Option<String>,
        uuid: Option<Uuid>,
    },
    Select {
        table: String,
        conditions: Vec<Condition>,
        columns: Option<Vec<String>>,
    },
    Update {
        table: String,
        conditions: Vec<Condition>,
        row: Row,
    },
    Mutate {
        table: String,
        conditions: Vec<Condition>,
        mutations: Vec<Mutation>,
    },
    Delete {
        table: String,
        conditions: Vec<Condition>,
    },
    Wait {
        table: String,
        conditions: Vec<Condition>,
        columns: Vec<String>,
        until: WaitUntil,
        rows: Vec<Row>,
        timeout_ms: Option<u64>,
    },
    Commit {
        durable: bool,
    },
    Abort,
    Comment(String),
    Assert {
        lock: String,
    },
}

impl Operation {
    pub fn name(&self) -> &'static str {
        match self {
            Operation::Insert { .. } => "insert",
            Operation::Select { .. } => "select",
            Operation::Update { .. } => "update",
            Operation::Mutate { .. } => "mutate",
            Operation::Delete { .. } => "delete",
            Operation::Wait { .. } => "wait",
            Operation::Commit { .. } => "commit",
            Operation::Abort => "abort",
            Operation::Comment(_) => "comment",
            Operation::Assert { .. } => "assert",
        }
    }

    pub fn table(&self) -> Option<&str> {
        match self {
            Operation::Insert { table, .. }
            | Operation::Select { table, .. }
            | Operation::Update { table, .. }
            | Operation::Mutate { table, .. }
            | Operation::Delete { table, .. }
            | Operation::Wait { table, .. } => Some(table),
            _ => None,
        }
    }

    pub fn to_json(&self) -> Json {
        let conds = |c: &[Condition]| Json::Array(c.iter().map(Condition::to_json).collect());
        match self {
            Operation::Insert {
                table,
                row,
                uuid_name,
                uuid,
            } => {
                let mut o = json!({"op": "insert", "table": table, "row": row_to_json(row)});
                if let Some(n) = uuid_name {
                    o["uuid-name"] = json!(n);
                }
                if let Some(u) = uuid {
                    o["uuid"] = json!(u.to_string());
                }
                o
            }
            Operation::Select {
                table,
                conditions,
                columns,
            } => {
                let mut o = json!({"op": "select", "table": table, "where": conds(conditions)});
                if let Some(c) = columns {
                    o["columns"] = json!(c);
                }
                o
            }
            Operation::Update {
                table,
                conditions,
                row,
            } => json!({
                "op": "update", "table": table, "where": conds(conditions), "row": row_to_json(row)
            }),
            Operation::Mutate {
                table,
                conditions,
                mutations,
            } => json!({
                "op": "mutate", "table": table, "where": conds(conditions),
                "mutations": mutations.iter()
                    .map(|m| json!([m.column, m.mutator.as_str(), m.value.to_json()]))
                    .collect::<Vec<_>>()
            }),
            Operation::Delete { table, conditions } => {
                json!({"op": "delete", "table": table, "where": conds(conditions)})
            }
            Operation::Wait {
                table,
                conditions,
                columns,
                until,
                rows,
                timeout_ms,
            } => {
                let mut o = json!({
                    "op": "wait", "table": table, "where": conds(conditions), "columns": columns,
                    "until": if *until == WaitUntil::Equal { "==" } else { "!=" },
                    "rows": rows.iter().map(row_to_json).collect::<Vec<_>>()
                });
                if let Some(t) = timeout_ms {
                    o["timeout"] = json!(t);
                }
                o
            }
            Operation::Commit { durable } => json!({"op": "commit", "durable": durable}),
            Operation::Abort => json!({"op": "abort"}),
            Operation::Comment(c) => json!({"op": "comment", "comment": c}),
            Operation::Assert { lock } => json!({"op": "assert", "lock": lock}),
        }
    }

    /// Check this operation against the schema; the error names the table, column and value.
    pub fn check(&self, schema: &DatabaseSchema) -> Result<(), SchemaError> {
        if let Operation::Assert { lock } = self
            && !is_id(lock)
        {
            return Err(SchemaError::BadOperation {
                table: String::new(),
                reason: format!("lock name {lock:?} is not an <id> ([A-Za-z_][A-Za-z0-9_]*)"),
            });
        }
        let Some(tname) = self.table() else {
            return Ok(());
        };
        let t = schema.table(tname)?;
        match self {
            Operation::Insert { row, .. } => check_row(t, row, false),
            Operation::Select {
                conditions,
                columns,
                ..
            } => {
                check_conditions(t, conditions)?;
                columns
                    .iter()
                    .flatten()
                    .try_for_each(|c| t.column(c).map(|_| ()))
            }
            Operation::Update {
                conditions, row, ..
            } => {
                check_conditions(t, conditions)?;
                check_row(t, row, true)
            }
            Operation::Mutate {
                conditions,
                mutations,
                ..
            } => {
                check_conditions(t, conditions)?;
                mutations.iter().try_for_each(|m| check_mutation(t, m))
            }
            Operation::Delete { conditions, .. } => check_conditions(t, conditions),
            Operation::Wait {
                conditions,
                columns,
                rows,
                ..
            } => {
                check_conditions(t, conditions)?;
                columns.iter().try_for_each(|c| t.column(c).map(|_| ()))?;
                rows.iter().try_for_each(|r| check_row(t, r, false))
            }
            _ => Ok(()),
        }
    }
}

/// RFC 7047 `<id>`: lock names and uuid-names.
pub fn is_id(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

fn bad(t: &TableSchema, column: &str, value: &Value, reason: String) -> SchemaError {
    let mut v = value.to_string();
    if v.len() > 200 {
        let mut cut = 200;
        while !v.is_char_boundary(cut) {
            cut -= 1;
        }
        v.truncate(cut);
    }
    SchemaError::BadValue {
        table: t.name.clone(),
        column: column.to_owned(),
        value: v,
        reason,
    }
}

fn check_row(t: &TableSchema, row: &Row, update: bool) -> Result<(), SchemaError> {
    for (col, v) in row {
        if col.starts_with('_') {
            return Err(SchemaError::Immutable {
                table: t.name.clone(),
                column: col.to_owned(),
            });
        }
        let ty = t.column(col)?;
        if update && t.columns.get(col).is_some_and(|c| !c.mutable) {
            return Err(SchemaError::Immutable {
                table: t.name.clone(),
                column: col.to_owned(),
            });
        }
        ty.check(v).map_err(|r| bad(t, col, v, r))?;
    }
    Ok(())
}

fn is_numeric(ty: &ColumnType) -> bool {
    matches!(ty.key.atomic, AtomicType::Integer | AtomicType::Real) && !ty.is_map()
}

fn check_conditions(t: &TableSchema, conds: &[Condition]) -> Result<(), SchemaError> {
    for c in conds {
        let ty = t.column(&c.column)?;
        match c.function {
            Function::Lt | Function::Le | Function::Ge | Function::Gt => {
                if !is_numeric(ty) || !ty.is_scalar() {
                    return Err(bad(
                        t,
                        &c.column,
                        &c.value,
                        format!(
                            "{} needs a scalar integer or real column",
                            c.function.as_str()
                        ),
                    ));
                }
                ty.check(&c.value)
                    .map_err(|r| bad(t, &c.column, &c.value, r))?;
            }
            _ => ty
                .check_elements(&c.value)
                .map_err(|r| bad(t, &c.column, &c.value, r))?,
        }
    }
    Ok(())
}

fn check_mutation(t: &TableSchema, m: &Mutation) -> Result<(), SchemaError> {
    let ty = t.column(&m.column)?;
    if m.column.starts_with('_') || t.columns.get(m.column.as_str()).is_some_and(|c| !c.mutable) {
        return Err(SchemaError::Immutable {
            table: t.name.clone(),
            column: m.column.clone(),
        });
    }
    let err = |r: String| bad(t, &m.column, &m.value, r);
    match m.mutator {
        Mutator::Insert | Mutator::Delete => {
            if ty.is_scalar() {
                return Err(err(format!(
                    "{} needs a set or map column",
                    m.mutator.as_str()
                )));
            }
            // "delete" on a map may name just the keys, as a set.
            if ty.is_map()
                && m.mutator == Mutator::Delete
                && let Value::Set(_) | Value::Atom(_) = &m.value
            {
                return m
                    .value
                    .to_set()
                    .iter()
                    .try_for_each(|k| ty.key.check(k))
                    .map_err(err);
            }
            ty.check_elements(&m.value).map_err(err)
        }
        _ => {
            if !is_numeric(ty) {
                return Err(err(format!(
                    "{} needs an integer or real column",
                    m.mutator.as_str()
                )));
            }
            if m.mutator == Mutator::Mod && ty.key.atomic != AtomicType::Integer {
                return Err(err("%= needs an integer column".into()));
            }
            match m.value.as_atom() {
                Some(Atom::Integer(_)) | Some(Atom::Real(_)) => Ok(()),
                _ => Err(err("arithmetic operand must be a number".into())),
            }
        }
    }
}

/// A transaction under construction.
#[derive(Debug, Clone, PartialEq)]
pub struct Transaction {
    pub db: String,
    pub ops: Vec<Operation>,
    next_name: u32,
}

impl Transaction {
    pub fn new(db: &str) -> Self {
        Transaction {
            db: db.to_owned(),
            ops: vec![],
            next_name: 0,
        }
    }

    pub fn push(&mut self, op: Operation) -> &mut Self {
        self.ops.push(op);
        self
    }

    /// Insert a row; the returned atom (`["named-uuid", ...]`) refers to it elsewhere in
    /// this transaction.
    pub fn insert(&mut self, table: &str, row: Row) -> Atom {
        self.next_name += 1;
        let name = format!("row{}", self.next_name);
        self.ops.push(Operation::Insert {
            table: table.to_owned(),
            row,
            uuid_name: Some(name.clone()),
            uuid: None,
        });
        Atom::NamedUuid(name.into())
    }

    pub fn select(
        &mut self,
        table: &str,
        conditions: Vec<Condition>,
        columns: Option<&[&str]>,
    ) -> &mut Self {
        self.push(Operation::Select {
            table: table.to_owned(),
            conditions,
            columns: columns.map(|c| c.iter().map(|s| (*s).to_owned()).collect()),
        })
    }

    pub fn update(&mut self, table: &str, conditions: Vec<Condition>, row: Row) -> &mut Self {
        self.push(Operation::Update {
            table: table.to_owned(),
            conditions,
            row,
        })
    }

    pub fn mutate(
        &mut self,
        table: &str,
        conditions: Vec<Condition>,
        mutations: Vec<Mutation>,
    ) -> &mut Self {
        self.push(Operation::Mutate {
            table: table.to_owned(),
            conditions,
            mutations,
        })
    }

    pub fn delete(&mut self, table: &str, conditions: Vec<Condition>) -> &mut Self {
        self.push(Operation::Delete {
            table: table.to_owned(),
            conditions,
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub fn wait(
        &mut self,
        table: &str,
        conditions: Vec<Condition>,
        columns: &[&str],
        until: WaitUntil,
        rows: Vec<Row>,
        timeout_ms: Option<u64>,
    ) -> &mut Self {
        self.push(Operation::Wait {
            table: table.to_owned(),
            conditions,
            columns: columns.iter().map(|s| (*s).to_owned()).collect(),
            until,
            rows,
            timeout_ms,
        })
    }

    pub fn comment(&mut self, text: &str) -> &mut Self {
        self.push(Operation::Comment(text.to_owned()))
    }

    pub fn assert_lock(&mut self, lock: &str) -> &mut Self {
        self.push(Operation::Assert {
            lock: lock.to_owned(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Check every operation against the schema before anything is sent.
    pub fn check(&self, schema: &DatabaseSchema) -> Result<(), (usize, SchemaError)> {
        if schema.name != self.db {
            return Err((
                0,
                SchemaError::WrongDatabase {
                    db: self.db.clone(),
                    schema: schema.name.clone(),
                },
            ));
        }
        self.ops
            .iter()
            .enumerate()
            .try_for_each(|(i, op)| op.check(schema).map_err(|e| (i, e)))?;
        self.check_named_uuids()
    }

    /// Every `["named-uuid", n]` must name an insert of this transaction with a valid `<id>`.
    fn check_named_uuids(&self) -> Result<(), (usize, SchemaError)> {
        let mut defined = std::collections::BTreeSet::new();
        for (i, op) in self.ops.iter().enumerate() {
            if let Operation::Insert {
                table,
                uuid_name: Some(n),
                ..
            } = op
            {
                if !is_id(n) {
                    let reason = format!("uuid-name {n:?} is not an <id>");
                    return Err((
                        i,
                        SchemaError::BadOperation {
                            table: table.clone(),
                            reason,
                        },
                    ));
                }
                defined.insert(n.as_str());
            }
        }
        for (i, op) in self.ops.iter().enumerate() {
            // Iterated in place: collecting per op cost allocations on every row of a bulk
            // transaction.
            let (row, mutations): (Option<&Row>, &[Mutation]) = match op {
                Operation::Insert { row, .. } | Operation::Update { row, .. } => (Some(row), &[]),
                Operation::Mutate { mutations, .. } => (None, mutations),
                _ => (None, &[]),
            };
            let values = row
                .into_iter()
                .flatten()
                .chain(mutations.iter().map(|m| (m.column.as_str(), &m.value)));
            for (col, v) in values {
                let check = |a: &Atom| match a {
                    Atom::NamedUuid(n) if !defined.contains(&**n) => Err((
                        i,
                        SchemaError::BadValue {
                            table: op.table().unwrap_or_default().to_owned(),
                            column: col.to_owned(),
                            value: a.to_string(),
                            reason: "no insert in this transaction has this uuid-name".into(),
                        },
                    )),
                    _ => Ok(()),
                };
                match v {
                    Value::Atom(a) => check(a)?,
                    Value::Set(s) => s.iter().try_for_each(check)?,
                    Value::Map(m) => m.iter().try_for_each(|(k, v)| {
                        check(k)?;
                        check(v)
                    })?,
                }
            }
        }
        Ok(())
    }

    /// `params` of the `transact` request.
    pub fn params(&self) -> Json {
        let mut p = vec![json!(self.db)];
        p.extend(self.ops.iter().map(Operation::to_json));
        Json::Array(p)
    }

    /// `params` of the `transact` request, serialized directly (no JSON tree in between).
    pub fn params_bytes(&self) -> Result<Vec<u8>, serde_json::Error> {
        // Sized for a typical insert up front: growing a multi-MB buffer by doubling copies
        // it several times.
        let mut out = Vec::with_capacity(64 + self.ops.len() * 400);
        serde_json::to_writer(&mut out, &TransactParams(self))?;
        Ok(out)
    }

    /// Decode the `transact` result into per-op results, or the failing op's error.
    pub fn decode_result(
        &self,
        result: &Json,
        schema: Option<&DatabaseSchema>,
    ) -> Result<Vec<OpResult>, TxnFailure> {
        decode_results(&self.ops, result, schema)
    }
}

/// Result of one successful operation.
#[derive(Debug, Clone, PartialEq)]
pub enum OpResult {
    Inserted(Uuid),
    Rows(Vec<Row>),
    /// Rows matched by update, mutate or delete.
    Count(u64),
    /// wait, commit, comment, assert.
    Empty,
}

impl OpResult {
    pub fn uuid(&self) -> Option<Uuid> {
        match self {
            OpResult::Inserted(u) => Some(*u),
            _ => None,
        }
    }
    pub fn rows(&self) -> &[Row] {
        match self {
            OpResult::Rows(r) => r,
            _ => &[],
        }
    }
    pub fn count(&self) -> Option<u64> {
        match self {
            OpResult::Count(c) => Some(*c),
            _ => None,
        }
    }
}

/// RFC 7047 error strings, plus those ovsdb-server adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    ConstraintViolation,
    ReferentialIntegrityViolation,
    TimedOut,
    NotOwner,
    ResourcesExhausted,
    IoError,
    DuplicateUuidName,
    DomainError,
    RangeError,
    NotSupported,
    Aborted,
    SyntaxError,
    UnknownDatabase,
    NotLeader,
    Other(String),
}

impl ErrorKind {
    pub fn parse(s: &str) -> ErrorKind {
        match s {
            "constraint violation" => ErrorKind::ConstraintViolation,
            "referential integrity violation" => ErrorKind::ReferentialIntegrityViolation,
            "timed out" => ErrorKind::TimedOut,
            "not owner" => ErrorKind::NotOwner,
            "resources exhausted" => ErrorKind::ResourcesExhausted,
            "I/O error" => ErrorKind::IoError,
            "duplicate uuid-name" => ErrorKind::DuplicateUuidName,
            "domain error" => ErrorKind::DomainError,
            "range error" => ErrorKind::RangeError,
            "not supported" => ErrorKind::NotSupported,
            "aborted" => ErrorKind::Aborted,
            "syntax error" => ErrorKind::SyntaxError,
            "unknown database" => ErrorKind::UnknownDatabase,
            "not leader" => ErrorKind::NotLeader,
            other => ErrorKind::Other(other.to_owned()),
        }
    }
}

/// A transaction the server refused, with the failing op and the server's details.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("transaction failed at {}: {error}{}", .op.as_deref().map(|o| format!("op #{} ({o})", .index)).unwrap_or_else(|| "commit".into()), .details.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
pub struct TxnFailure {
    /// Index of the failing operation; `ops.len()` for a failure at commit time.
    pub index: usize,
    /// Name of the failing operation (`None` at commit time).
    pub op: Option<&'static str>,
    pub table: Option<String>,
    pub kind: ErrorKind,
    pub error: String,
    pub details: Option<String>,
}

fn failure(ops: &[Operation], index: usize, reason: &str, j: &Json) -> TxnFailure {
    TxnFailure {
        index,
        op: ops.get(index).map(|o| o.name()),
        table: ops.get(index).and_then(|o| o.table()).map(str::to_owned),
        kind: ErrorKind::Other(reason.to_owned()),
        error: reason.to_owned(),
        details: Some(crate::value::ValueError::new("", j).json),
    }
}

/// Decode a transact reply for `ops`.
pub fn decode_results(
    ops: &[Operation],
    result: &Json,
    schema: Option<&DatabaseSchema>,
) -> Result<Vec<OpResult>, TxnFailure> {
    let Some(arr) = result.as_array() else {
        return Err(failure(ops, 0, "transact result is not an array", result));
    };
    // An error element anywhere (including the extra commit slot) fails the transaction.
    for (i, r) in arr.iter().enumerate() {
        if let Some(e) = r.get("error") {
            let error = e.as_str().unwrap_or("unknown error").to_owned();
            return Err(TxnFailure {
                index: i,
                op: ops.get(i).map(|o| o.name()),
                table: ops.get(i).and_then(|o| o.table()).map(str::to_owned),
                kind: ErrorKind::parse(&error),
                error,
                details: r.get("details").and_then(Json::as_str).map(str::to_owned),
            });
        }
    }
    if arr.len() < ops.len() {
        return Err(failure(
            ops,
            arr.len(),
            "fewer results than operations",
            result,
        ));
    }
    let mut out = Vec::with_capacity(ops.len());
    for (i, (op, r)) in ops.iter().zip(arr).enumerate() {
        let res = match op {
            Operation::Insert { .. } => {
                let u = r
                    .get("uuid")
                    .and_then(|u| Atom::from_json(u).ok())
                    .and_then(|a| a.as_uuid())
                    .ok_or_else(|| failure(ops, i, "insert result without uuid", r))?;
                OpResult::Inserted(u)
            }
            Operation::Select { table, .. } => {
                let rows = r
                    .get("rows")
                    .and_then(Json::as_array)
                    .ok_or_else(|| failure(ops, i, "select result without rows", r))?;
                let decoded: Result<Vec<Row>, String> = rows
                    .iter()
                    .map(|row| match schema {
                        Some(s) => s.decode_row(table, row).map_err(|e| e.to_string()),
                        None => row_from_json(row).map_err(|e| e.to_string()),
                    })
                    .collect();
                OpResult::Rows(decoded.map_err(|_| failure(ops, i, "undecodable row", r))?)
            }
            Operation::Update { .. } | Operation::Mutate { .. } | Operation::Delete { .. } => {
                OpResult::Count(
                    r.get("count")
                        .and_then(Json::as_u64)
                        .ok_or_else(|| failure(ops, i, "result without count", r))?,
                )
            }
            _ => OpResult::Empty,
        };
        out.push(res);
    }
    Ok(out)
}

/// Serializes as the `transact` params array: the database name, then the operations.
pub struct TransactParams<'a>(pub &'a Transaction);

impl serde::Serialize for TransactParams<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.0.ops.len() + 1))?;
        seq.serialize_element(&self.0.db)?;
        for op in &self.0.ops {
            seq.serialize_element(op)?;
        }
        seq.end()
    }
}

struct Conds<'a>(&'a [Condition]);

impl serde::Serialize for Conds<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(
            self.0
                .iter()
                .map(|c| (&c.column, c.function.as_str(), &c.value)),
        )
    }
}

impl serde::Serialize for Operation {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("op", self.name())?;
        if let Some(t) = self.table() {
            m.serialize_entry("table", t)?;
        }
        match self {
            Operation::Insert {
                row,
                uuid_name,
                uuid,
                ..
            } => {
                m.serialize_entry("row", row)?;
                if let Some(n) = uuid_name {
                    m.serialize_entry("uuid-name", n)?;
                }
                if let Some(u) = uuid {
                    m.serialize_entry("uuid", &u.to_string())?;
                }
            }
            Operation::Select {
                conditions,
                columns,
                ..
            } => {
                m.serialize_entry("where", &Conds(conditions))?;
                if let Some(c) = columns {
                    m.serialize_entry("columns", c)?;
                }
            }
            Operation::Update {
                conditions, row, ..
            } => {
                m.serialize_entry("where", &Conds(conditions))?;
                m.serialize_entry("row", row)?;
            }
            Operation::Mutate {
                conditions,
                mutations,
                ..
            } => {
                m.serialize_entry("where", &Conds(conditions))?;
                let muts: Vec<_> = mutations
                    .iter()
                    .map(|x| (&x.column, x.mutator.as_str(), &x.value))
                    .collect();
                m.serialize_entry("mutations", &muts)?;
            }
            Operation::Delete { conditions, .. } => {
                m.serialize_entry("where", &Conds(conditions))?;
            }
            Operation::Wait {
                conditions,
                columns,
                until,
                rows,
                timeout_ms,
                ..
            } => {
                m.serialize_entry("where", &Conds(conditions))?;
                m.serialize_entry("columns", columns)?;
                m.serialize_entry(
                    "until",
                    if *until == WaitUntil::Equal {
                        "=="
                    } else {
                        "!="
                    },
                )?;
                m.serialize_entry("rows", rows)?;
                if let Some(t) = timeout_ms {
                    m.serialize_entry("timeout", t)?;
                }
            }
            Operation::Commit { durable } => m.serialize_entry("durable", durable)?,
            Operation::Abort => {}
            Operation::Comment(c) => m.serialize_entry("comment", c)?,
            Operation::Assert { lock } => m.serialize_entry("lock", lock)?,
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_and_decodes() {
        let mut t = Transaction::new("DB");
        let lb = t.insert("LB", Row::from([("name", Value::from("a"))]));
        t.mutate(
            "LS",
            vec![Condition::eq("name", "sw")],
            vec![Mutation::new("lbs", Mutator::Insert, lb)],
        );
        t.comment("hi");
        let p = t.params();
        let direct: Json = serde_json::from_slice(&t.params_bytes().unwrap()).unwrap();
        assert_eq!(direct, p);
        assert_eq!(p[1]["uuid-name"], "row1");
        assert_eq!(
            p[2]["mutations"][0],
            json!(["lbs", "insert", ["named-uuid", "row1"]])
        );
        let u = Uuid::new_v4();
        let r = t
            .decode_result(
                &json!([{"uuid": ["uuid", u.to_string()]}, {"count": 1}, {}]),
                None,
            )
            .unwrap();
        assert_eq!(
            r,
            vec![OpResult::Inserted(u), OpResult::Count(1), OpResult::Empty]
        );
        let e = t
            .decode_result(
                &json!([{"uuid": ["uuid", u.to_string()]}, {"count": 1}, {},
                {"error": "referential integrity violation", "details": "x"}]),
                None,
            )
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::ReferentialIntegrityViolation);
        assert_eq!(e.index, 3);
        assert!(e.op.is_none());
        let e = t
            .decode_result(
                &json!([{"error": "constraint violation"}, null, null]),
                None,
            )
            .unwrap_err();
        assert_eq!((e.index, e.op), (0, Some("insert")));
        assert!(t.decode_result(&json!({"x": 1}), None).is_err());
        assert!(
            t.decode_result(&json!([{"uuid": 3}, {}, {}]), None)
                .is_err()
        );
    }
}
