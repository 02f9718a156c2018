//! The cache: applying updates, replacing a snapshot, whole-row tables.
use super::*;

fn schema() -> Arc<DatabaseSchema> {
    Arc::new(
        DatabaseSchema::from_json(
            &json!({"name": "D", "version": "1", "tables": {"T": {"columns": {
                "name": {"type": "string"},
                "n": {"type": "integer"},
                "opt": {"type": {"key": "string", "min": 0, "max": 1}},
                "tags": {"type": {"key": "string", "min": 0, "max": "unlimited"}},
                "ids": {"type": {"key": "string", "value": "string", "min": 0, "max": "unlimited"}}
            }}}}),
        )
        .unwrap(),
    )
}

#[test]
fn applies_initial_modify_delete() {
    let s = schema();
    let mut c = Cache::new(s.clone(), MonitorSpec::new().table("T"));
    let u = Uuid::new_v4();
    let key = u.to_string();
    let init = parse_table_updates2(
        &json!({"T": {key.clone(): {"initial": {"name": "a", "tags": "x"}}}}),
        &s,
    )
    .unwrap();
    let ev = c.apply(init).unwrap();
    assert_eq!(ev.len(), 1);
    let row = c.row("T", &u).unwrap();
    assert_eq!(row["n"], Value::from(0i64));
    assert_eq!(row["opt"], Value::empty_set());
    assert_eq!(row["tags"], Value::set(["x"]));
    assert_eq!(row["ids"], Value::empty_map());
    let m = parse_table_updates2(
        &json!({"T": {key.clone(): {"modify": {"tags": ["set", ["x", "y"]], "ids": ["map", [["k", "v"]]], "opt": "o", "n": 5}}}}),
        &s,
    )
    .unwrap();
    c.apply(m).unwrap();
    let row = c.row("T", &u).unwrap();
    assert_eq!(row["tags"], Value::set(["y"]));
    assert_eq!(row["ids"], Value::map([("k", "v")]));
    assert_eq!(row["opt"], Value::set(["o"]));
    assert_eq!(row["n"], Value::from(5i64));
    let m = parse_table_updates2(
        &json!({"T": {key.clone(): {"modify": {"ids": ["map", [["k", "v"]]]}}}}),
        &s,
    )
    .unwrap();
    c.apply(m).unwrap();
    assert_eq!(c.row("T", &u).unwrap()["ids"], Value::empty_map());
    let d = parse_table_updates2(&json!({"T": {key.clone(): {"delete": null}}}), &s).unwrap();
    assert!(matches!(c.apply(d).unwrap()[0], Event::Delete { .. }));
    let d = parse_table_updates2(&json!({"T": {key: {"delete": null}}}), &s).unwrap();
    assert!(matches!(c.apply(d), Err(MonitorError::UnknownRow { .. })));
}

#[test]
fn replace_reports_differences() {
    let s = schema();
    let mut c = Cache::new(s.clone(), MonitorSpec::new().table("T"));
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    c.apply(
        parse_table_updates2(
            &json!({"T": {a.to_string(): {"initial": {"name": "a"}}}}),
            &s,
        )
        .unwrap(),
    )
    .unwrap();
    let ev = c
        .replace(
            parse_table_updates2(
                &json!({"T": {b.to_string(): {"initial": {"name": "b"}}}}),
                &s,
            )
            .unwrap(),
            false,
        )
        .unwrap();
    assert_eq!(ev.len(), 2);
    assert!(c.row("T", &a).is_none() && c.row("T", &b).is_some());
}

/// A whole-row table: every event has the row's every column, the cache none of them,
/// and a kept table beside it is left alone by the whole-row snapshot and vice versa.
#[test]
fn whole_row_tables_keep_no_columns_and_send_whole_rows() {
    let s = Arc::new(
        DatabaseSchema::from_json(&json!({"name": "D", "version": "1", "tables": {
            "T": {"columns": {"name": {"type": "string"}, "n": {"type": "integer"}}},
            "K": {"columns": {"name": {"type": "string"}}}}}))
        .unwrap(),
    );
    let spec = MonitorSpec::new()
        .whole_rows("T", &["name", "n"])
        .table("K");
    assert!(spec.has_whole_rows() && spec.has_kept_rows());
    assert_eq!(
        spec.to_json(),
        json!({"K": [{}]}),
        "the whole-row table is not in it"
    );
    assert_eq!(
        spec.to_json_whole_rows(),
        json!({"T": {"columns": ["name", "n"]}})
    );
    let mut c = Cache::new(s.clone(), spec);
    let (a, b, k) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let kept = parse_table_updates2(
        &json!({"K": {k.to_string(): {"initial": {"name": "k"}}}}),
        &s,
    );
    c.replace(kept.unwrap(), false).unwrap();
    let snap = json!({"T": {a.to_string(): {"new": {"name": "a", "n": 1}}}});
    let ev = c
        .replace(parse_table_updates(&snap, &s).unwrap(), true)
        .unwrap();
    assert!(matches!(&ev[..], [Event::Insert { new, .. }] if new["n"] == Value::from(1i64)));
    assert!(
        c.row("T", &a).is_some_and(|r| r.is_empty()),
        "no columns kept"
    );
    assert!(
        c.row("K", &k)
            .is_some_and(|r| r["name"] == Value::from("k"))
    );
    // A modification carries the whole new row; a delete what there is of the old.
    let m = json!({"T": {
        a.to_string(): {"old": {"n": 1}, "new": {"name": "a", "n": 2}},
        b.to_string(): {"new": {"name": "b", "n": 3}}}});
    let ev = c.apply(parse_table_updates(&m, &s).unwrap()).unwrap();
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Modify { uuid, new, .. }
        if *uuid == a && new["name"] == Value::from("a") && new["n"] == Value::from(2i64)))
    );
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Insert { uuid, .. } if *uuid == b))
    );
    let d = json!({"T": {b.to_string(): {"old": {"name": "b", "n": 3}}}});
    let ev = c.apply(parse_table_updates(&d, &s).unwrap()).unwrap();
    assert!(matches!(&ev[..], [Event::Delete { uuid, .. }] if *uuid == b));
    // A diff is not what a whole-row monitor sends.
    let diff = json!({"T": {a.to_string(): {"modify": {"n": 5}}}});
    assert!(c.apply(parse_table_updates2(&diff, &s).unwrap()).is_err());
    // The whole-row snapshot again: what is still there is a modification (its content
    // before is not known), what went is deleted; the kept table is untouched.
    let ev = c
        .replace(parse_table_updates(&snap, &s).unwrap(), true)
        .unwrap();
    assert!(matches!(&ev[..], [Event::Modify { uuid, .. }] if *uuid == a));
    let ev = c
        .replace(parse_table_updates(&json!({}), &s).unwrap(), true)
        .unwrap();
    assert!(matches!(&ev[..], [Event::Delete { uuid, .. }] if *uuid == a));
    assert!(c.row("K", &k).is_some());
}

#[test]
fn rejects_bad_shapes() {
    let s = schema();
    for bad in [
        json!([1]),
        json!({"T": 1}),
        json!({"T": {"not-a-uuid": {"insert": {}}}}),
        json!({"T": {Uuid::nil().to_string(): {"insert": {}, "delete": null}}}),
        json!({"T": {Uuid::nil().to_string(): {"insert": {"n": "str"}}}}),
        json!({"Nope": {}}),
    ] {
        assert!(parse_table_updates2(&bad, &s).is_err(), "{bad}");
    }
}

/// A projected whole-row table: rows are made into the projection's as they are decoded, from
/// text or from a tree alike, and the cache gives events the projected rows (made again, the
/// same).
#[test]
fn projected_rows_are_made_as_they_are_decoded() {
    fn names_only(_table: &str, row: Row) -> Row {
        row.into_iter().filter(|(c, _)| &**c == "name").collect()
    }
    let s = Arc::new(
        DatabaseSchema::from_json(&json!({"name": "D", "version": "1", "tables": {
            "T": {"columns": {"name": {"type": "string"}, "n": {"type": "integer"}}}}}))
        .unwrap(),
    );
    let spec = MonitorSpec::new().whole_rows_projected("T", &["name", "n"], Projection(names_only));
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let text = format!(
        r#"{{"T":{{"{a}":{{"new":{{"name":"a","n":1}}}},"{b}":{{"old":{{"n":1}},"new":{{"name":"b","n":2}}}}}}}}"#
    );
    let project = |t: &str, r| spec.project(t, r);
    let fast = parse_table_updates_projected(&text, &s, &project).unwrap();
    let tree: Json = serde_json::from_str(&text).unwrap();
    let slow = parse_table_updates(&tree, &s).unwrap();
    for (ru, whole) in fast["T"].values().zip(slow["T"].values()) {
        let (RowUpdate::Insert(r) | RowUpdate::Replace(r)) = ru else {
            panic!("{ru:?}")
        };
        assert_eq!(r.keys().collect::<Vec<_>>(), ["name"]);
        let (RowUpdate::Insert(w) | RowUpdate::Replace(w)) = whole else {
            panic!("{whole:?}")
        };
        assert_eq!(*r, names_only("T", w.clone()));
    }
    let mut c = Cache::new(s.clone(), spec.clone());
    let snapshot = json!({"T": {a.to_string(): {"new": {"name": "a", "n": 1}}}});
    let ev = c
        .replace(parse_table_updates(&snapshot, &s).unwrap(), true)
        .unwrap();
    let ev2 = c.apply(fast).unwrap();
    assert_eq!((ev.len(), ev2.len()), (1, 2));
    for e in ev.iter().chain(&ev2) {
        let (Event::Insert { new, .. } | Event::Modify { new, .. }) = e else {
            panic!("{e:?}")
        };
        assert_eq!(new.keys().collect::<Vec<_>>(), ["name"], "{e:?}");
    }
    drop(slow);
}
