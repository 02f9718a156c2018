//! Monitor payloads off the wire: `<table-updates2>`, `update2`/`update3` notifications and
//! the `monitor_cond_since` reply, from a JSON tree or from their text.
//!
//! From text, values are decoded straight into atoms ([`super::seed`]); text the fast path
//! does not take (a wrong shape, a value the schema rejects, a repeated key) is read as a tree
//! after all, so both give the same outcome, errors included.

use std::collections::BTreeMap;

use serde_json::{Value as Json, json};

use super::{MonitorError, malformed, seed};
use crate::schema::DatabaseSchema;
use crate::value::{Row, Uuid};

/// One row's change, values already schema-shaped: a `<row-update2>` (`monitor_cond`), or a
/// `<row-update>` (RFC 7047 `monitor`, whose modifications carry the whole new row).
#[derive(Debug, Clone, PartialEq)]
pub enum RowUpdate {
    Initial(Row),
    Insert(Row),
    Delete,
    /// Only changed columns: sets hold the elements to toggle, maps the changed keys.
    Modify(Row),
    /// A modification as RFC 7047 `monitor` sends it: every monitored column's new value.
    Replace(Row),
}

pub type TableUpdates = BTreeMap<String, BTreeMap<Uuid, RowUpdate>>;

/// Decode `<table-updates2>` using the schema to shape values.
pub fn parse_table_updates2(
    j: &Json,
    schema: &DatabaseSchema,
) -> Result<TableUpdates, MonitorError> {
    let names = [
        "table-updates2 is not an object",
        "table-update2 is not an object",
    ];
    tables_of(j, schema, names, row_update2)
}

/// Table name to row uuid to each row's change, `row` decoding each change; `not_objects` say
/// that the whole or a table's part is not an object.
fn tables_of(
    j: &Json,
    schema: &DatabaseSchema,
    not_objects: [&'static str; 2],
    row: fn(&DatabaseSchema, &str, &Json) -> Result<RowUpdate, MonitorError>,
) -> Result<TableUpdates, MonitorError> {
    let tables = j.as_object().ok_or_else(|| malformed(not_objects[0], j))?;
    let mut out = BTreeMap::new();
    for (table, rows) in tables {
        schema.table(table)?;
        let rows = rows
            .as_object()
            .ok_or_else(|| malformed(not_objects[1], rows))?;
        let mut t = BTreeMap::new();
        for (uuid, upd) in rows {
            let uuid = Uuid::parse_str(uuid)
                .map_err(|_| malformed("row key is not a uuid", &json!(uuid)))?;
            t.insert(uuid, row(schema, table, upd)?);
        }
        out.insert(table.clone(), t);
    }
    Ok(out)
}

/// One `<row-update2>` of `table`.
fn row_update2(
    schema: &DatabaseSchema,
    table: &str,
    upd: &Json,
) -> Result<RowUpdate, MonitorError> {
    let o = upd
        .as_object()
        .ok_or_else(|| malformed("row-update2 is not an object", upd))?;
    let (kind, body) = match o.iter().next() {
        Some(kv) if o.len() == 1 => kv,
        _ => return Err(malformed("row-update2 must have exactly one member", upd)),
    };
    let ru = match kind.as_str() {
        "initial" => RowUpdate::Initial(schema.decode_row(table, body)?),
        "insert" => RowUpdate::Insert(schema.decode_row(table, body)?),
        "modify" => RowUpdate::Modify(schema.decode_row(table, body)?),
        "delete" => RowUpdate::Delete,
        _ => return Err(malformed("unknown row-update2 member", upd)),
    };
    Ok(ru)
}

/// Decode RFC 7047 `<table-updates>` (a `monitor` reply or `update` notification): each row's
/// `old` and `new`, `new` holding every monitored column.
pub fn parse_table_updates(
    j: &Json,
    schema: &DatabaseSchema,
) -> Result<TableUpdates, MonitorError> {
    let names = [
        "table-updates is not an object",
        "table-update is not an object",
    ];
    tables_of(j, schema, names, row_update1)
}

/// One `<row-update>` of `table`: `new` alone is an insert (or a row of the snapshot), `old`
/// alone a delete, both a modification.
fn row_update1(
    schema: &DatabaseSchema,
    table: &str,
    upd: &Json,
) -> Result<RowUpdate, MonitorError> {
    let o = upd
        .as_object()
        .ok_or_else(|| malformed("row-update is not an object", upd))?;
    if o.keys().any(|k| k != "old" && k != "new") {
        return Err(malformed("unknown row-update member", upd));
    }
    let new = o
        .get("new")
        .map(|b| schema.decode_row(table, b))
        .transpose()?;
    match (o.contains_key("old"), new) {
        (false, Some(new)) => Ok(RowUpdate::Insert(new)),
        (true, Some(new)) => Ok(RowUpdate::Replace(new)),
        (true, None) => Ok(RowUpdate::Delete),
        (false, None) => Err(malformed("row-update has neither old nor new", upd)),
    }
}

/// A result's bytes as text. The reader checked they are JSON, so UTF-8.
pub fn utf8(bytes: &[u8]) -> Result<&str, MonitorError> {
    std::str::from_utf8(bytes).map_err(|e| MonitorError::Malformed {
        reason: "not UTF-8",
        excerpt: e.to_string(),
    })
}

/// Text the reader already checked is JSON, as a tree.
fn tree(text: &str) -> Result<Json, MonitorError> {
    serde_json::from_str(text).map_err(|e| MonitorError::Malformed {
        reason: "unreadable JSON",
        excerpt: e.to_string(),
    })
}

/// A decoded monitor notification.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    pub monitor_id: Json,
    /// Present in `update3` (monitor_cond_since): the transaction these changes belong to.
    pub last_txn_id: Option<Uuid>,
    pub updates: TableUpdates,
}

/// Decode the params of an `update`, `update2` or `update3` notification.
pub fn parse_notification(
    method: &str,
    params: &Json,
    schema: &DatabaseSchema,
) -> Result<Update, MonitorError> {
    let p = params
        .as_array()
        .ok_or_else(|| malformed("params is not an array", params))?;
    match (method, p.as_slice()) {
        ("update2", [id, u]) => Ok(Update {
            monitor_id: id.clone(),
            last_txn_id: None,
            updates: parse_table_updates2(u, schema)?,
        }),
        ("update3", [id, txn, u]) => {
            let txn = txn
                .as_str()
                .and_then(|s| Uuid::parse_str(s).ok())
                .ok_or_else(|| malformed("last-txn-id is not a uuid", txn))?;
            Ok(Update {
                monitor_id: id.clone(),
                last_txn_id: Some(txn),
                updates: parse_table_updates2(u, schema)?,
            })
        }
        ("update", [id, u]) => Ok(Update {
            monitor_id: id.clone(),
            last_txn_id: None,
            updates: parse_table_updates(u, schema)?,
        }),
        _ => Err(malformed(
            "not an update, update2 or update3 notification",
            params,
        )),
    }
}

/// Reply of `monitor_cond_since`: `[found, last-txn-id, table-updates2]`.
pub fn parse_since_reply(
    j: &Json,
    schema: &DatabaseSchema,
) -> Result<(bool, Uuid, TableUpdates), MonitorError> {
    match j.as_array().map(Vec::as_slice) {
        Some([Json::Bool(found), Json::String(txn), u]) => {
            let txn =
                Uuid::parse_str(txn).map_err(|_| malformed("last-txn-id is not a uuid", j))?;
            Ok((*found, txn, parse_table_updates2(u, schema)?))
        }
        _ => Err(malformed(
            "monitor_cond_since reply is not [found, txn, updates]",
            j,
        )),
    }
}

/// [`parse_table_updates2`] from the text of `<table-updates2>`: no JSON tree is built, so a
/// snapshot of tens of thousands of rows costs its decoded rows and little more.
pub fn parse_table_updates2_text(
    text: &str,
    schema: &DatabaseSchema,
) -> Result<TableUpdates, MonitorError> {
    match seed::table_updates2(text, schema) {
        Some(u) => Ok(u),
        None => parse_table_updates2(&tree(text)?, schema),
    }
}

/// [`parse_table_updates`] from its text, decoded as [`parse_table_updates2_text`] does.
pub fn parse_table_updates_text(
    text: &str,
    schema: &DatabaseSchema,
) -> Result<TableUpdates, MonitorError> {
    parse_table_updates_projected(text, schema, &|_, r| r)
}

/// [`parse_table_updates_text`], each new row made into `project(table, row)` as soon as it
/// is read: the decoded rows are never all held whole at once.
pub fn parse_table_updates_projected(
    text: &str,
    schema: &DatabaseSchema,
    project: &(dyn Fn(&str, Row) -> Row + Sync),
) -> Result<TableUpdates, MonitorError> {
    match seed::table_updates(text, schema, project) {
        Some(u) => Ok(u),
        None => Ok(projected(
            parse_table_updates(&tree(text)?, schema)?,
            project,
        )),
    }
}

/// `updates` with each new row made into `project(table, row)`.
fn projected(
    mut updates: TableUpdates,
    project: &(dyn Fn(&str, Row) -> Row + Sync),
) -> TableUpdates {
    for (table, rows) in updates.iter_mut() {
        for ru in rows.values_mut() {
            if let RowUpdate::Insert(r) | RowUpdate::Replace(r) | RowUpdate::Initial(r) = ru {
                *r = project(table, std::mem::take(r));
            }
        }
    }
    updates
}

/// [`parse_since_reply`] from the reply's text, decoded as [`parse_table_updates2_text`] does.
pub fn parse_since_reply_text(
    text: &str,
    schema: &DatabaseSchema,
) -> Result<(bool, Uuid, TableUpdates), MonitorError> {
    match seed::since_reply(text, schema) {
        Some(r) => Ok(r),
        None => parse_since_reply(&tree(text)?, schema),
    }
}

/// [`parse_notification`] from the text of the params, decoded as
/// [`parse_table_updates2_text`] does: a bulk transaction's update is not held as a tree.
pub fn parse_notification_text(
    method: &str,
    text: &str,
    schema: &DatabaseSchema,
) -> Result<Update, MonitorError> {
    parse_notification_projected(method, text, schema, &|_, r| r)
}

/// [`parse_notification_text`], an `update`'s new rows made into `project(table, row)` as they
/// are read ([`parse_table_updates_projected`]).
pub fn parse_notification_projected(
    method: &str,
    text: &str,
    schema: &DatabaseSchema,
    project: &(dyn Fn(&str, Row) -> Row + Sync),
) -> Result<Update, MonitorError> {
    if let Some(u) = seed::notification(method, text, schema, project) {
        return Ok(u);
    }
    let params: Json = serde_json::from_str(text).map_err(|e| MonitorError::Malformed {
        reason: "params are not JSON",
        excerpt: e.to_string(),
    })?;
    let mut u = parse_notification(method, &params, schema)?;
    if method == "update" {
        u.updates = projected(u.updates, project);
    }
    Ok(u)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> DatabaseSchema {
        let map = |k: &str, v: &str| json!({"key": k, "value": v, "min": 0, "max": "unlimited"});
        let j = json!({"name": "D", "version": "1", "tables": {"T": {"columns": {
            "name": {"type": "string"},
            "n": {"type": "integer"},
            "r": {"type": "real"},
            "opt": {"type": {"key": "string", "min": 0, "max": 1}},
            "tags": {"type": {"key": "string", "min": 0, "max": "unlimited"}},
            "ids": {"type": map("string", "string")},
            "weights": {"type": map("real", "integer")},
            "refs": {"type": {"key": {"type": "uuid", "refTable": "T"}, "min": 0, "max": "unlimited"}}
        }}}});
        DatabaseSchema::from_json(&j).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `got` from text is `want` from its tree; `None`: the text is no tree (too deep).
    fn check<T: PartialEq + std::fmt::Debug>(
        text: &str,
        got: Result<T, MonitorError>,
        want: Option<Result<T, MonitorError>>,
    ) {
        match want {
            Some(want) => assert_eq!(got, want, "{text}"),
            None => assert!(
                matches!(&got, Err(MonitorError::Malformed { reason, .. })
                    if ["unreadable JSON", "params are not JSON"].contains(reason)),
                "{text}: {got:?}"
            ),
        }
    }

    /// Text decodes as its tree does, errors included; what a server sends takes the fast
    /// path, and text it would not send (repeated keys, too deep) only gives the same outcome.
    #[test]
    fn text_decodes_as_its_tree() {
        let s = schema();
        let u = "36bdbd1c-0f30-4b02-b1a3-2ef0b5d16c2b";
        let upper = u.to_uppercase();
        let deep = format!("{}{}", "[".repeat(130), "]".repeat(130));
        let row = |body: &str| format!(r#"{{"T":{{"{u}":{body}}}}}"#);
        let cases: Vec<(String, Option<bool>)> = vec![
            ("{}".into(), Some(true)),
            (r#"{"T":{}}"#.into(), Some(true)),
            (
                row(
                    r#"{"initial":{"name":"a\"\u00e9\n","n":-3,"r":2,"opt":["set",[]],"tags":["set",["b","a","b"]],"ids":["map",[["k","1"],["a","2"],["k","3"]]],"weights":["map",[[1,2],[0.5,-1]]],"refs":["uuid","36bdbd1c-0f30-4b02-b1a3-2ef0b5d16c2b"]}}"#,
                ),
                Some(true),
            ),
            (
                row(
                    r#"{"modify":{"r":1.5e300,"tags":"x","opt":"o","refs":["set",[["uuid","36bdbd1c-0f30-4b02-b1a3-2ef0b5d16c2b"]]]}}"#,
                ),
                Some(true),
            ),
            (row(r#"{"delete":null}"#), Some(true)),
            (
                row(
                    r#"{"insert":{"name":"x","name":"y","r":18446744073709551615,"n":9223372036854775807}}"#,
                ),
                Some(true),
            ),
            (row(r#"{"insert":{"n":-0,"r":-0.0}}"#), None),
            (row(r#"{"insert":{},"delete":null}"#), Some(false)),
            (row(r#"{"insert":{"n":1},"insert":{"n":2}}"#), Some(false)),
            (row(r#"{"insert":{"n":"str"}}"#), Some(false)),
            (row(r#"{"insert":{"n":"bad","n":1}}"#), Some(false)),
            (row(r#"{"insert":{"refs":["uuid","nope"]}}"#), Some(false)),
            (
                row(r#"{"insert":{"refs":["named-uuid","r1"]}}"#),
                Some(true),
            ),
            (row(r#"{"insert":{"tags":["set",["a"],1]}}"#), Some(false)),
            (row(r#"{"insert":{"ids":["map",[["k"]]]}}"#), Some(false)),
            (row(r#"{"insert":{"nope":1}}"#), Some(false)),
            (row(r#"{"upsert":{}}"#), Some(false)),
            (row(&format!(r#"{{"delete":{deep}}}"#)), Some(false)),
            (
                format!(r#"{{"T":{{"{u}":{{"insert":{{}}}},"{u}":{{"delete":null}}}}}}"#),
                Some(false),
            ),
            (
                format!(r#"{{"T":{{"{upper}":{{"delete":null}},"{u}":{{"insert":{{}}}}}}}}"#),
                Some(false),
            ),
            (
                format!(r#"{{"T":{{}},"T":{{"{u}":{{"delete":null}}}}}}"#),
                Some(false),
            ),
            (r#"{"Nope":{}}"#.into(), Some(false)),
            ("[1]".into(), Some(false)),
        ];
        for (text, fast) in cases {
            let tree = serde_json::from_str::<Json>(&text).ok();
            check(
                &text,
                parse_table_updates2_text(&text, &s),
                tree.as_ref().map(|j| parse_table_updates2(j, &s)),
            );
            let reply = format!(r#"[true,"{u}",{text}]"#);
            let reply_tree = serde_json::from_str::<Json>(&reply).ok();
            check(
                &reply,
                parse_since_reply_text(&reply, &s),
                reply_tree.as_ref().map(|j| parse_since_reply(j, &s)),
            );
            let params = format!(r#"["m1",{text}]"#);
            let params_tree = serde_json::from_str::<Json>(&params).ok();
            check(
                &params,
                parse_notification_text("update2", &params, &s),
                params_tree
                    .as_ref()
                    .map(|j| parse_notification("update2", j, &s)),
            );
            if let Some(fast) = fast {
                assert_eq!(seed::table_updates2(&text, &s).is_some(), fast, "{text}");
                assert_eq!(seed::since_reply(&reply, &s).is_some(), fast, "{reply}");
                assert_eq!(
                    seed::notification("update2", &params, &s, &|_, r| r).is_some(),
                    fast,
                    "{params}"
                );
            }
        }
    }

    /// RFC 7047 `<table-updates>` text decodes as its tree does: `new` alone an insert, both a
    /// whole-row modification, `old` alone a delete; anything else an error either way.
    #[test]
    fn whole_row_updates_decode_as_their_tree() {
        let s = schema();
        let u = "36bdbd1c-0f30-4b02-b1a3-2ef0b5d16c2b";
        let row = |body: &str| format!(r#"{{"T":{{"{u}":{body}}}}}"#);
        let cases: Vec<(String, Option<RowUpdate>)> = vec![
            (
                row(r#"{"new":{"name":"a","n":1}}"#),
                Some(RowUpdate::Insert(Row::new())),
            ),
            (
                row(r#"{"old":{"n":1},"new":{"name":"a","n":2}}"#),
                Some(RowUpdate::Replace(Row::new())),
            ),
            (
                row(r#"{"old":{"name":"a","n":2}}"#),
                Some(RowUpdate::Delete),
            ),
            (row(r#"{}"#), None),
            (row(r#"{"insert":{}}"#), None),
            (row(r#"{"new":{"n":"str"}}"#), None),
        ];
        for (text, want) in cases {
            let tree = serde_json::from_str::<Json>(&text).unwrap();
            let from_tree = parse_table_updates(&tree, &s);
            assert_eq!(parse_table_updates_text(&text, &s), from_tree, "{text}");
            let params = format!(r#"["m1.rows",{text}]"#);
            let p_tree = serde_json::from_str::<Json>(&params).unwrap();
            assert_eq!(
                parse_notification_text("update", &params, &s),
                parse_notification("update", &p_tree, &s),
                "{params}"
            );
            match (want, from_tree) {
                (None, got) => assert!(got.is_err(), "{text}: {got:?}"),
                (Some(want), Ok(got)) => {
                    let got = &got["T"].values().next().cloned();
                    let same = matches!(
                        (&want, got),
                        (RowUpdate::Insert(_), Some(RowUpdate::Insert(_)))
                            | (RowUpdate::Replace(_), Some(RowUpdate::Replace(_)))
                            | (RowUpdate::Delete, Some(RowUpdate::Delete))
                    );
                    assert!(same, "{text}: {got:?}");
                }
                (Some(_), Err(e)) => panic!("{text}: {e}"),
            }
            assert_eq!(
                seed::table_updates(&text, &s, &|_, r| r).is_some(),
                parse_table_updates(&tree, &s).is_ok(),
                "{text}"
            );
        }
    }
}
