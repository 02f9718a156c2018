//! Property tests: value and notification round trips; hostile input never panics.

use std::sync::Arc;

use bytes::BytesMut;
use ovsdb::framing::JsonCodec;
use ovsdb::jsonrpc::Message;
use ovsdb::monitor::{self, Cache, MonitorSpec, make_diff};
use ovsdb::schema::ColumnType;
use ovsdb::txn::{Operation, decode_results};
use ovsdb::{Atom, DatabaseSchema, Row, Uuid, Value};
use proptest::prelude::*;
use serde_json::{Value as Json, json};
use tokio_util::codec::Decoder;

fn atom_of(kind: u8) -> BoxedStrategy<Atom> {
    match kind % 5 {
        0 => any::<i64>().prop_map(Atom::Integer).boxed(),
        // Quarter steps: exact in binary, so the JSON round trip is exact too.
        1 => (-4000i32..4000)
            .prop_map(|i| Atom::Real(f64::from(i) / 4.0))
            .boxed(),
        2 => any::<bool>().prop_map(Atom::Boolean).boxed(),
        3 => ".{0,12}".prop_map(Atom::string).boxed(),
        _ => any::<u128>()
            .prop_map(|u| Atom::Uuid(Uuid::from_u128(u)))
            .boxed(),
    }
}

const TYPES: [&str; 5] = ["integer", "real", "boolean", "string", "uuid"];

/// A column type and a value that fits it.
fn typed_value() -> impl Strategy<Value = (ColumnType, Value)> {
    (0u8..5, 0u8..5, 0u8..4).prop_flat_map(|(k, v, shape)| {
        let ty_json = match shape {
            0 => json!(TYPES[k as usize]),
            1 => json!({"key": TYPES[k as usize], "min": 0, "max": 1}),
            2 => json!({"key": TYPES[k as usize], "min": 0, "max": "unlimited"}),
            _ => json!({"key": TYPES[k as usize], "value": TYPES[v as usize], "min": 0, "max": "unlimited"}),
        };
        let ty = ColumnType::parse(&ty_json, "t.c").unwrap();
        let val: BoxedStrategy<Value> = match shape {
            0 => atom_of(k).prop_map(Value::Atom).boxed(),
            1 => proptest::option::of(atom_of(k)).prop_map(|a| Value::Set(a.into_iter().collect())).boxed(),
            2 => proptest::collection::btree_set(atom_of(k), 0..6).prop_map(|s| Value::Set(s.into())).boxed(),
            _ => proptest::collection::btree_map(atom_of(k), atom_of(v), 0..6).prop_map(|m| Value::Map(m.into())).boxed(),
        };
        (Just(ty), val)
    })
}

fn schema() -> Arc<DatabaseSchema> {
    Arc::new(
        DatabaseSchema::from_json(&json!({"name": "D", "version": "1", "tables": {"T": {"columns": {
            "name": {"type": "string"},
            "n": {"type": "integer"},
            "r": {"type": "real"},
            "opt": {"type": {"key": "string", "min": 0, "max": 1}},
            "tags": {"type": {"key": "integer", "min": 0, "max": "unlimited"}},
            "ids": {"type": {"key": "string", "value": "string", "min": 0, "max": "unlimited"}},
            "refs": {"type": {"key": {"type": "uuid", "refTable": "T"}, "min": 0, "max": "unlimited"}}
        }}}}))
        .unwrap(),
    )
}

fn row_strategy() -> impl Strategy<Value = Row> {
    let s = || "[a-c]{0,2}";
    (
        s(),
        -3i64..3,
        (-8i32..8).prop_map(|i| f64::from(i) / 2.0),
        proptest::option::of(s()),
        proptest::collection::btree_set(0i64..6, 0..4),
        proptest::collection::btree_map(s(), s(), 0..4),
        proptest::collection::btree_set(0u128..4, 0..3),
    )
        .prop_map(|(name, n, r, opt, tags, ids, refs)| {
            let mut row = Row::new();
            row.insert("name", Value::from(name));
            row.insert("n", Value::from(n));
            row.insert("r", Value::from(r));
            row.insert("opt", Value::set(opt));
            row.insert("tags", Value::set(tags));
            row.insert("ids", Value::map(ids));
            row.insert("refs", Value::set(refs.into_iter().map(Uuid::from_u128)));
            row
        })
}

/// What ovsdb-server sends: defaults left out.
fn initial_json(schema: &DatabaseSchema, row: &Row) -> Json {
    let t = schema.table("T").unwrap();
    let mut o = serde_json::Map::new();
    for (k, v) in row {
        if *v != t.column(k).unwrap().default_value() {
            o.insert(k.to_owned(), v.to_json());
        }
    }
    Json::Object(o)
}

/// update2 "modify": changed columns only, diffs for composite columns.
fn modify_json(schema: &DatabaseSchema, old: &Row, new: &Row) -> Json {
    let t = schema.table("T").unwrap();
    let mut o = serde_json::Map::new();
    for (k, nv) in new {
        let ov = &old[k];
        if ov != nv {
            let ty = t.column(k).unwrap();
            let d = if ty.is_composite() {
                make_diff(ov, nv)
            } else {
                nv.clone()
            };
            o.insert(k.to_owned(), d.to_json());
        }
    }
    Json::Object(o)
}

fn arb_json() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        any::<f64>().prop_map(|f| json!(f)),
        "[a-z_\\-]{0,8}".prop_map(Json::String),
        prop_oneof![
            Just("set"),
            Just("map"),
            Just("uuid"),
            Just("named-uuid"),
            Just("update3"),
            Just("T"),
            Just("insert"),
            Just("modify")
        ]
        .prop_map(|s| json!(s)),
        Just(json!(Uuid::nil().to_string())),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Json::Array),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("T".to_owned()),
                    Just("id".to_owned()),
                    Just("method".to_owned()),
                    Just("params".to_owned()),
                    Just("result".to_owned()),
                    Just("error".to_owned()),
                    Just("insert".to_owned()),
                    Just("modify".to_owned()),
                    Just("initial".to_owned()),
                    Just("delete".to_owned()),
                    Just(Uuid::nil().to_string()),
                    "[a-z]{1,4}"
                ],
                inner,
                0..5
            )
            .prop_map(|m| Json::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn value_json_round_trip((ty, v) in typed_value()) {
        prop_assert!(ty.check(&v).is_ok(), "{v} does not fit");
        let j = v.to_json();
        // The direct serializer (used to send) writes the same encoding.
        prop_assert_eq!(&serde_json::to_value(&v).unwrap(), &j);
        let back = ty.normalize(Value::from_json(&j).unwrap()).unwrap();
        prop_assert_eq!(&back, &v);
        // Single-element sets travel as bare atoms.
        if let Value::Set(s) = &v
            && s.len() == 1
        {
            prop_assert!(!j.is_array() || matches!(s.iter().next(), Some(Atom::Uuid(_))));
        }
    }

    #[test]
    fn notifications_round_trip(rows in proptest::collection::vec((row_strategy(), row_strategy(), any::<bool>()), 1..6)) {
        let s = schema();
        let mut cache = Cache::new(s.clone(), MonitorSpec::new().table("T"));
        let uuids: Vec<Uuid> = (0..rows.len()).map(|i| Uuid::from_u128(1000 + i as u128)).collect();
        let mut init = serde_json::Map::new();
        for (u, (a, _, _)) in uuids.iter().zip(&rows) {
            init.insert(u.to_string(), json!({"initial": initial_json(&s, a)}));
        }
        let init = json!({"T": init});
        // Read from its text, row by row, a snapshot decodes as its tree does.
        let from_text = monitor::parse_since_reply_text(&json!([false, Uuid::nil().to_string(), init]).to_string(), &s);
        prop_assert_eq!(&from_text, &monitor::parse_since_reply(&json!([false, Uuid::nil().to_string(), init]), &s));
        prop_assert!(from_text.is_ok());
        cache.apply(monitor::parse_table_updates2(&init, &s).unwrap()).unwrap();
        let mut upd = serde_json::Map::new();
        for (u, (a, b, delete)) in uuids.iter().zip(&rows) {
            prop_assert_eq!(cache.row("T", u).unwrap(), a);
            let body = if *delete { json!({"delete": null}) } else { json!({"modify": modify_json(&s, a, b)}) };
            upd.insert(u.to_string(), body);
        }
        let txn = Uuid::from_u128(7);
        let params = json!(["m1", txn.to_string(), {"T": upd}]);
        let u = monitor::parse_notification("update3", &params, &s).unwrap();
        prop_assert_eq!(u.last_txn_id, Some(txn));
        // From its text, straight to atoms: the same update.
        prop_assert_eq!(monitor::parse_notification_text("update3", &params.to_string(), &s), Ok(u.clone()));
        cache.apply(u.updates).unwrap();
        for (u, (_, b, delete)) in uuids.iter().zip(&rows) {
            if *delete {
                prop_assert!(cache.row("T", u).is_none());
            } else {
                prop_assert_eq!(cache.row("T", u).unwrap(), b);
            }
        }
    }

    #[test]
    fn splitter_never_panics(data in proptest::collection::vec(any::<u8>(), 0..400), cuts in proptest::collection::vec(0usize..400, 0..6)) {
        let mut codec = JsonCodec::new(256);
        let mut buf = BytesMut::new();
        let mut cuts = cuts;
        cuts.push(data.len());
        cuts.sort_unstable();
        let mut at = 0;
        'outer: for c in cuts {
            let c = c.min(data.len());
            if c < at { continue; }
            buf.extend_from_slice(&data[at..c]);
            at = c;
            loop {
                match codec.decode(&mut buf) {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => break 'outer,
                }
            }
        }
    }

    #[test]
    fn splitter_splits_what_serde_writes(msgs in proptest::collection::vec(arb_json(), 1..5), cut in 0usize..2000) {
        let objs: Vec<Json> = msgs.into_iter().map(|m| json!({"id": 1, "result": m, "error": null})).collect();
        let text: String = objs.iter().map(|o| format!("{o}\n")).collect();
        let bytes = text.as_bytes();
        let cut = cut.min(bytes.len());
        let mut codec = JsonCodec::new(1 << 20);
        let mut buf = BytesMut::new();
        let mut got = vec![];
        for part in [&bytes[..cut], &bytes[cut..]] {
            buf.extend_from_slice(part);
            while let Some(m) = codec.decode(&mut buf).unwrap() {
                got.push(m);
            }
        }
        prop_assert_eq!(got, objs);
    }

    #[test]
    fn hostile_json_never_panics(j in arb_json()) {
        let s = schema();
        let _ = Value::from_json(&j);
        let _ = Message::from_json(j.clone());
        let _ = monitor::parse_table_updates2(&j, &s);
        let _ = monitor::parse_notification("update2", &j, &s);
        let _ = monitor::parse_notification("update3", &j, &s);
        let _ = monitor::parse_since_reply(&j, &s);
        // From text, the same outcome as from a tree, errors included.
        let text = j.to_string();
        prop_assert_eq!(monitor::parse_table_updates2_text(&text, &s), monitor::parse_table_updates2(&j, &s));
        prop_assert_eq!(monitor::parse_since_reply_text(&text, &s), monitor::parse_since_reply(&j, &s));
        for method in ["update2", "update3", "other"] {
            prop_assert_eq!(
                monitor::parse_notification_text(method, &text, &s),
                monitor::parse_notification(method, &j, &s)
            );
        }
        let nested = json!([true, Uuid::nil().to_string(), {"T": j.clone()}]);
        prop_assert_eq!(
            monitor::parse_since_reply_text(&nested.to_string(), &s),
            monitor::parse_since_reply(&nested, &s)
        );
        let _ = DatabaseSchema::from_json(&j);
        let _ = s.decode_row("T", &j);
        let ops = vec![
            Operation::Insert { table: "T".into(), row: Row::new(), uuid_name: None, uuid: None },
            Operation::Select { table: "T".into(), conditions: vec![], columns: None },
            Operation::Delete { table: "T".into(), conditions: vec![] },
        ];
        let _ = decode_results(&ops, &j, Some(&s));
        let _ = decode_results(&ops, &json!([j.clone(), j.clone(), j]), Some(&s));
        let mut c = Cache::new(s.clone(), MonitorSpec::new().table("T"));
        if let Ok(u) = monitor::parse_table_updates2(&json!({"T": {Uuid::nil().to_string(): {"modify": {"tags": 1}}}}), &s) {
            let _ = c.apply(u);
        }
    }
}

#[test]
fn diff_helpers_agree() {
    let a = Value::set([1i64, 2, 3]);
    let b = Value::set([3i64, 4]);
    assert_eq!(monitor::apply_diff(a.clone(), make_diff(&a, &b)), b);
    let m1 = Value::map([("a", "1"), ("b", "2")]);
    let m2 = Value::map([("b", "3"), ("c", "4")]);
    assert_eq!(monitor::apply_diff(m1.clone(), make_diff(&m1, &m2)), m2);
}
