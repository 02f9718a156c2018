//! The Northbound writer's core in memory: a replica of the database (the real OVN NB schema,
//! rows and events as the `ovsdb` cache holds them), the planner's hand-over, and the
//! session's transactions checked operation by operation. No server.

use super::*;
use crate::keys::{OWNER_KEY, SCOPE_KEY};
use crate::model::ModelOptions;
use crate::plan::northbound::LbRow;
use crate::plan::northbound::NorthboundConfig;
use crate::plan::planner::Planner;
use crate::reconcile::northbound::CHASSIS_VARS;
use crate::reconcile::northbound::LB;
use crate::reconcile::northbound::lb_row;
use crate::reconcile::northbound::lb_row::insert_columns;
use crate::reconcile::northbound::lb_row::read_lb;
use crate::reconcile::northbound::monitor_spec;
use crate::reconcile::northbound::node_rows_for;
use crate::reconcile::northbound::snapshot_spec;
use ovsdb::monitor::{RowUpdate, TableUpdates};
use ovsdb::schema::DatabaseSchema;
use ovsdb::{Atom, Row};

const OBJECTS: &str = "
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: web, namespace: shop, creationTimestamp: '2026-01-01T00:00:00Z'}
  spec:
    externalIPs: [192.0.2.10]
    ports: [{port: 80, protocol: TCP, targetPort: 8080}]
- apiVersion: v1
  kind: Service
  metadata: {name: api, namespace: shop, creationTimestamp: '2026-01-02T00:00:00Z'}
  spec:
    externalIPs: [192.0.2.11]
    ports: [{port: 443, protocol: TCP, targetPort: 8443}]
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: web-1, namespace: shop, labels: {kubernetes.io/service-name: web}}
  addressType: IPv4
  endpoints: [{addresses: [10.244.1.5]}]
  ports: [{port: 8080, protocol: TCP}]
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: api-1, namespace: shop, labels: {kubernetes.io/service-name: api}}
  addressType: IPv4
  endpoints: [{addresses: [10.244.2.7]}]
  ports: [{port: 8443, protocol: TCP}]
";

fn schema() -> Arc<DatabaseSchema> {
    let path = std::env::var("NB_SCHEMA")
        .unwrap_or_else(|_| "/usr/share/ovn/ovn-nb.ovsschema".to_string());
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e} (scripts/install-deps.sh installs OVN)"));
    Arc::new(DatabaseSchema::from_json(&serde_json::from_str(&text).unwrap()).unwrap())
}

/// The planner's hand-over for OBJECTS.
fn plan() -> DesiredRows {
    plan_of(OBJECTS)
}

/// The planner's hand-over for `objects`.
fn plan_of(objects: &str) -> DesiredRows {
    let loaded = crate::decode::parse(objects).unwrap();
    let mut planner = Planner::new(
        ModelOptions::default(),
        &[],
        0x7f1f,
        Some(NorthboundConfig {
            exclude_ips: false,
            ..NorthboundConfig::default()
        }),
    );
    let plans = planner.update(&loaded.objects);
    DesiredRows::from_rows(plans.generation, plans.northbound.as_ref().unwrap(), false)
}

fn row_of<'a>(d: &'a DesiredRows, ns: &str, name: &str) -> &'a LbRow {
    &d.rows[&ServiceKey::new(ns, name)][0]
}

fn updates(rows: Vec<(Uuid, RowUpdate)>) -> TableUpdates {
    TableUpdates::from([(LB.to_string(), rows.into_iter().collect())])
}

fn uuid(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

/// Every operation of `changes` as JSON text, one per line.
fn ops(changes: &[Change]) -> Vec<String> {
    changes
        .iter()
        .filter_map(|c| c.txn.as_ref())
        .flat_map(|t| t.ops.iter().map(|o| o.to_json().to_string()))
        .collect()
}

#[test]
fn a_first_sync_repairs_deletes_and_inserts_only_what_is_ours() {
    let d = plan();
    let web = row_of(&d, "shop", "web");
    let mut wrong = insert_columns(web);
    wrong.insert("vips", Value::map([("192.0.2.10:80", "10.9.9.9:1")]));
    let mut gone = web.clone();
    gone.external_ids.insert(OWNER_KEY, "shop/gone");
    gone.name = "vipflow/shop/gone/tcp".into();
    let foreign = Row::from([
        ("name".to_string(), Value::Atom(Atom::string("theirs"))),
        ("protocol".to_string(), Value::set(["tcp"])),
        (
            "vips".to_string(),
            Value::map([("192.0.2.99:80", "10.0.0.1:80")]),
        ),
    ]);
    let mut cache = Cache::new(schema(), snapshot_spec(false));
    cache
        .apply(updates(vec![
            (uuid(1), RowUpdate::Initial(wrong)),
            // The same row twice: the second is a duplicate.
            (uuid(2), RowUpdate::Initial(insert_columns(web))),
            (uuid(3), RowUpdate::Initial(insert_columns(&gone))),
            (uuid(4), RowUpdate::Initial(foreign)),
        ]))
        .unwrap();
    let mut session = Session::new(Observed::from_cache(&cache), Some("tok".into()));
    let changes = session.changes(&d);
    let all = ops(&changes);
    let text = all.join("\n");
    // Every transaction goes out fenced by the writer token (the sender puts the fence first).
    for c in changes.iter().filter_map(|c| c.txn.clone()) {
        let first = fenced(c, session.token.as_deref()).ops[0]
            .to_json()
            .to_string();
        assert!(
            first.contains("\"wait\"") && first.contains("tok"),
            "{first}"
        );
    }
    // The row with the wrong vips is updated; one of the two copies goes; the orphan goes.
    let uuid_text = |n| uuid(n).to_string();
    let updates_of = |n| {
        all.iter()
            .filter(|o| o.contains("\"update\"") && o.contains(&uuid_text(n)))
            .count()
    };
    let deletes_of = |n| {
        all.iter()
            .filter(|o| o.contains("\"delete\"") && o.contains(&uuid_text(n)))
            .count()
    };
    assert_eq!(updates_of(1) + updates_of(2), 1, "{text}");
    assert_eq!(deletes_of(1) + deletes_of(2), 1, "one copy deleted: {text}");
    assert_eq!(deletes_of(3), 1, "orphan deleted: {text}");
    // The missing Service's row is inserted.
    assert!(
        all.iter()
            .any(|o| o.contains("\"insert\"") && o.contains("vipflow/shop/api/tcp")),
        "{text}"
    );
    // Someone else's row is never named.
    assert!(!text.contains(&uuid_text(4)), "{text}");
    assert!(!text.contains("theirs"), "{text}");
}

/// The writer's own subscription keeps no Load_Balancer columns: its session, built from the
/// cache and the snapshot's events as the writer builds it, diffs exactly as one built from a
/// cache that keeps every row; an outside edit's event (a whole row) is written back alike.
#[test]
fn whole_row_events_give_the_same_diff_as_kept_rows() {
    let d = plan();
    let web = row_of(&d, "shop", "web");
    let api = row_of(&d, "shop", "api");
    let mut wrong = insert_columns(web);
    wrong.insert("vips", Value::map([("192.0.2.10:80", "10.9.9.9:1")]));
    let initial = || {
        updates(vec![
            (uuid(1), RowUpdate::Initial(wrong.clone())),
            (uuid(2), RowUpdate::Initial(insert_columns(web))),
            (uuid(3), RowUpdate::Initial(insert_columns(api))),
        ])
    };
    let mut kept = Cache::new(schema(), snapshot_spec(false));
    kept.apply(initial()).unwrap();
    let mut reference = Session::new(Observed::from_cache(&kept), Some("tok".into()));
    let mut whole = Cache::new(schema(), monitor_spec(false));
    let events = whole.apply(initial()).unwrap();
    assert!(
        (whole.table(LB).into_iter().flatten()).all(|(_, r)| r.is_empty()),
        "no Load_Balancer columns kept"
    );
    // Each event's row is what the writer keeps of it: no VIPs, options or names.
    for e in &events {
        if let Event::Insert { new, .. } = e {
            assert!(
                !new.contains_key("vips") && !new.contains_key("name"),
                "{new:?}"
            );
        }
    }
    let mut session = Session::new(Observed::from_cache(&whole), Some("tok".into()));
    session.absorb(events, &whole);
    let want = ops(&reference.changes(&d));
    assert!(!want.is_empty());
    assert_eq!(ops(&session.changes(&d)), want);
    reference.done(&d, &Ok(()));
    session.done(&d, &Ok(()));

    // Someone edits api's vips: the event carries the whole row.
    let mut edited = insert_columns(api);
    edited.insert("vips", Value::map([("192.0.2.11:80", "10.9.9.9:2")]));
    let edit = || updates(vec![(uuid(3), RowUpdate::Replace(edited.clone()))]);
    let ev = kept.apply(edit()).unwrap();
    reference.absorb(ev, &kept);
    let ev = whole.apply(edit()).unwrap();
    session.absorb(ev, &whole);
    let want = ops(&reference.changes(&d));
    assert!(
        want.iter().any(|o| o.contains(&uuid(3).to_string())),
        "{want:?}"
    );
    assert_eq!(ops(&session.changes(&d)), want);
}

#[test]
fn after_the_sync_only_an_outside_edit_is_written_again_and_only_for_its_service() {
    let d = plan();
    let web = row_of(&d, "shop", "web").clone();
    let api = row_of(&d, "shop", "api").clone();
    let mut cache = Cache::new(schema(), snapshot_spec(false));
    cache
        .apply(updates(vec![
            (uuid(1), RowUpdate::Initial(insert_columns(&web))),
            (uuid(2), RowUpdate::Initial(insert_columns(&api))),
        ]))
        .unwrap();
    let mut session = Session::new(Observed::from_cache(&cache), Some("tok".into()));
    assert!(ops(&session.changes(&d)).is_empty(), "already in sync");
    session.done(&d, &Ok(()));
    assert!(
        ops(&session.changes(&d)).is_empty(),
        "nothing new: nothing diffed"
    );

    // Someone edits web's vips: the monitor's event names it, and only web is written.
    let events = cache
        .apply(updates(vec![(
            uuid(1),
            RowUpdate::Modify(Row::from([(
                "vips".to_string(),
                Value::map([("192.0.2.10:80", "10.6.6.6:1")]),
            )])),
        )]))
        .unwrap();
    assert_eq!(events.len(), 1);
    session.absorb(events, &cache);
    let changes = session.changes(&d);
    let owners: Vec<_> = changes.iter().flat_map(|c| c.owners.iter()).collect();
    assert_eq!(owners, [&ServiceKey::new("shop", "web")]);
    let all = ops(&changes).join("\n");
    assert!(
        all.contains("\"update\"") && all.contains("10.244.1.5:8080"),
        "{all}"
    );
    assert!(!all.contains(&uuid(2).to_string()), "api untouched: {all}");

    // Someone deletes api's row: it is put back, and a failed write is retried in full.
    session.done(&d, &Ok(()));
    let events = cache
        .apply(updates(vec![(uuid(2), RowUpdate::Delete)]))
        .unwrap();
    session.absorb(events, &cache);
    let changes = session.changes(&d);
    let all = ops(&changes);
    // Put back, after a wait that no row has its identity (the cache may not yet show a
    // write of this session's own).
    let insert = all
        .iter()
        .position(|o| o.contains("\"insert\"") && o.contains("vipflow/shop/api/tcp"))
        .unwrap_or_else(|| panic!("no insert: {all:?}"));
    assert!(
        all[..insert]
            .iter()
            .any(|o| o.contains("\"wait\"") && o.contains("shop/api")),
        "{all:?}"
    );
    let lost = ovsdb::Error::OutcomeUnknown {
        remote: "test".into(),
        reason: "connection lost".into(),
    };
    session.done(&d, &Err(lost));
    assert!(
        ops(&session.changes(&d))
            .iter()
            .any(|o| o.contains("vipflow/shop/api/tcp")),
        "after a failure the next diff covers everything again"
    );
}

/// OBJECTS-like text with `n` Services, each with an external IP and an endpoint.
fn many(n: usize) -> String {
    let mut s = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for i in 0..n {
        let (hi, lo) = (i / 250, i % 250 + 1);
        s.push_str(&format!(
            "- apiVersion: v1
  kind: Service
  metadata: {{name: s{i}, namespace: shop, creationTimestamp: '2026-01-01T00:00:00Z'}}
  spec:
    externalIPs: [198.18.{hi}.{lo}]
    ports: [{{port: 80, protocol: TCP, targetPort: 8080}}]
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{name: s{i}-1, namespace: shop, labels: {{kubernetes.io/service-name: s{i}}}}}
  addressType: IPv4
  endpoints: [{{addresses: [10.244.{hi}.{lo}]}}]
  ports: [{{port: 8080, protocol: TCP}}]
"
        ));
    }
    s
}

#[test]
fn a_first_sync_is_diffed_one_batch_per_step_and_adds_up_to_the_whole() {
    let d = plan_of(&many(250));
    let cache = Cache::new(schema(), snapshot_spec(false));

    let mut at_once = Session::new(Observed::from_cache(&cache), None);
    let whole = at_once.changes(&d);

    let mut session = Session::new(Observed::from_cache(&cache), None);
    let mut sync = session.first_sync(&d);
    let mut steps: Vec<Vec<Change>> = Vec::new();
    loop {
        let mut step = Vec::new();
        let more = session.first_sync_next(&d, &mut sync, &mut |c| step.push(c));
        steps.push(step);
        if !more {
            break;
        }
    }
    // Only one batch is built per step: that is what bounds the memory of a large sync.
    let sizes: Vec<Vec<usize>> = steps
        .iter()
        .map(|s| s.iter().map(|c| c.owners.len()).collect())
        .collect();
    assert_eq!(sizes, [vec![100], vec![100], vec![50]]);
    let stepped: Vec<Change> = steps.into_iter().flatten().collect();
    assert_eq!(ops(&stepped), ops(&whole));
    // No target is configured: every Service's row is reported unattached, as at once.
    let problems = session.problems();
    assert_eq!(problems.len(), 250);
    assert!(problems == at_once.problems(), "the problems differ");
}

/// Two nodes and `web`, an externalTrafficPolicy Local Service with its one endpoint on
/// `on`.
fn local_objects(on: &str) -> String {
    format!(
        "
apiVersion: v1
kind: List
items:
- {{apiVersion: v1, kind: Node, metadata: {{name: n1}}}}
- {{apiVersion: v1, kind: Node, metadata: {{name: n2}}}}
- apiVersion: v1
  kind: Service
  metadata: {{name: web, namespace: shop}}
  spec:
    externalIPs: [192.0.2.10]
    externalTrafficPolicy: Local
    ports: [{{port: 80, protocol: TCP, targetPort: 8080}}]
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{name: web-1, namespace: shop, labels: {{kubernetes.io/service-name: web}}}}
  addressType: IPv4
  endpoints: [{{addresses: [10.244.1.5], nodeName: {on}, conditions: {{ready: true}}}}]
  ports: [{{port: 8080, protocol: TCP}}]
"
    )
}

fn template_plan(on: &str) -> DesiredRows {
    let loaded = crate::decode::parse(&local_objects(on)).unwrap();
    let mut planner = Planner::new(
        ModelOptions::default(),
        &[],
        0x7f1f,
        Some(NorthboundConfig {
            exclude_ips: false,
            node_router: Some("GR_{node}".into()),
            node_rows: crate::plan::node_template::NodeRows::Template,
            ..NorthboundConfig::default()
        }),
    );
    let plans = planner.update(&loaded.objects);
    DesiredRows::from_rows(plans.generation, plans.northbound.as_ref().unwrap(), false)
}

/// A database holding both chassis's rows (n1's with a variable of OVN-Kubernetes') and,
/// when given, `rows` and vipflow's variables as a writer left them.
fn template_cache(rows: &[&LbRow], n1_vars: &[(&str, &str)]) -> Cache {
    let mut cache = Cache::new(schema(), snapshot_spec(true));
    let mut n1: Vec<(&str, &str)> = vec![("NODEIP", "192.168.0.1")];
    n1.extend_from_slice(n1_vars);
    let chassis = |name: &str, vars: &[(&str, &str)]| {
        Row::from([
            ("chassis".to_string(), Value::Atom(Atom::string(name))),
            ("variables".to_string(), Value::map(vars.iter().copied())),
        ])
    };
    let mut all = TableUpdates::from([(
        CHASSIS_VARS.to_string(),
        [
            (uuid(101), RowUpdate::Initial(chassis("n1", &n1))),
            (uuid(102), RowUpdate::Initial(chassis("n2", &[]))),
        ]
        .into_iter()
        .collect(),
    )]);
    all.insert(
        LB.to_string(),
        rows.iter()
            .enumerate()
            .map(|(i, r)| (uuid(200 + i as u128), RowUpdate::Initial(insert_columns(r))))
            .collect(),
    );
    cache.apply(all).unwrap();
    cache
}

#[test]
fn a_template_row_and_its_variables_go_in_one_transaction_and_an_endpoint_move_touches_two_chassis()
{
    let d = template_plan("n1");
    let t = d.rows[&ServiceKey::new("shop", "web")]
        .iter()
        .find(|r| r.key.scope == crate::plan::northbound::Scope::Template)
        .expect("a template row")
        .clone();
    let var = &t.template_vars[0].name;
    assert_eq!(
        d.template_chassis.as_deref(),
        Some(&BTreeSet::from(["n1".to_string(), "n2".to_string()]))
    );

    // First sync on an empty database: the row, and n1's value in the same transaction.
    let mut session = Session::new(
        Observed::from_cache(&template_cache(&[], &[])),
        Some("tok".into()),
    );
    let changes = session.changes(&d);
    let per_txn: Vec<Vec<String>> = changes
        .iter()
        .filter_map(|c| c.txn.as_ref())
        .map(|t| t.ops.iter().map(|o| o.to_json().to_string()).collect())
        .collect();
    let with_row: Vec<&Vec<String>> = per_txn
        .iter()
        .filter(|ops| ops.iter().any(|o| o.contains("/template")))
        .collect();
    assert_eq!(with_row.len(), 1, "{per_txn:#?}");
    let mutations: Vec<&String> = with_row[0]
        .iter()
        .filter(|o| o.contains(CHASSIS_VARS))
        .collect();
    assert_eq!(mutations.len(), 1, "{mutations:#?}");
    assert!(
        mutations[0].contains(&format!("{:?}", uuid(101).to_string()))
            && mutations[0].contains("\"insert\"")
            && mutations[0].contains(var)
            && mutations[0].contains("10.244.1.5:8080")
            && !mutations[0].contains("NODEIP"),
        "{}",
        mutations[0]
    );

    // Written, and the endpoint moves to n2: the row stays; n1 loses the value, n2 gets it.
    let written = template_cache(&[&t], &[(var, "10.244.1.5:8080")]);
    let mut session = Session::new(Observed::from_cache(&written), Some("tok".into()));
    let moved = template_plan("n2");
    let all = ops(&session.changes(&moved));
    assert!(
        !all.iter().any(|o| o.contains("\"Load_Balancer\"")),
        "{all:#?}"
    );
    let n1 = uuid(101).to_string();
    let n2 = uuid(102).to_string();
    let on = |u: &str| all.iter().filter(|o| o.contains(u)).collect::<Vec<_>>();
    assert_eq!(on(&n1).len(), 1, "{all:#?}");
    assert!(on(&n1)[0].contains("\"delete\"") && !on(&n1)[0].contains("\"insert\""));
    assert_eq!(on(&n2).len(), 1, "{all:#?}");
    assert!(on(&n2)[0].contains("\"insert\"") && on(&n2)[0].contains("10.244.1.5:8080"));

    // Nothing changed: nothing to write.
    let written = template_cache(&[&t], &[(var, "10.244.1.5:8080")]);
    let mut session = Session::new(Observed::from_cache(&written), Some("tok".into()));
    assert!(ops(&session.changes(&d)).is_empty());
}

#[test]
fn a_full_sync_deletes_template_values_no_row_names_and_leaves_other_writers_variables() {
    let d = template_plan("n1");
    let orphan = "vf_00000000deadbeef";
    let db = template_cache(&[], &[(orphan, "10.9.9.9:80")]);
    let mut session = Session::new(Observed::from_cache(&db), Some("tok".into()));
    let all = ops(&session.changes(&d));
    let n1 = uuid(101).to_string();
    let deletes: Vec<&String> = all
        .iter()
        .filter(|o| o.contains(&n1) && o.contains("\"delete\"") && o.contains(orphan))
        .collect();
    assert_eq!(deletes.len(), 1, "{all:#?}");
    assert!(!all.iter().any(|o| o.contains("NODEIP")), "{all:#?}");
}

/// `--node-rows auto` is templates on an NB schema with Chassis_Template_Var (Debian's OVN
/// 23.03), per-node rows on one without (an OVN before 22.12: the same schema less that table).
#[test]
fn auto_node_rows_follow_the_schema() {
    use crate::plan::node_template::NodeRows;
    let path = std::env::var("OVN_NB_SCHEMA")
        .unwrap_or_else(|_| "/usr/share/ovn/ovn-nb.ovsschema".to_string());
    let mut j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let with = DatabaseSchema::from_json(&j).unwrap();
    assert_eq!(node_rows_for(&with), NodeRows::Template);
    let tables = j["tables"].as_object_mut().unwrap();
    assert!(tables.remove(CHASSIS_VARS).is_some());
    let without = DatabaseSchema::from_json(&j).unwrap();
    assert_eq!(node_rows_for(&without), NodeRows::PerNode);
}

/// The writer's summary of a row reads as the row itself: the same identity, digest and
/// template variables, for a cluster row and a template row; made again, it is the same; a row
/// not ours is summarized to nothing.
#[test]
fn a_summarized_row_reads_as_the_whole_row() {
    let d = plan();
    let web = row_of(&d, "shop", "web");
    let mut rows = vec![insert_columns(web)];
    let mut template = insert_columns(web);
    template.insert(
        "external_ids",
        Value::map([(OWNER_KEY, "shop/web"), (SCOPE_KEY, "template")]),
    );
    template.insert(
        "vips",
        Value::map([("192.0.2.10:80", "^vf_00112233aabbccdd")]),
    );
    rows.push(template);
    for row in rows {
        let summary = lb_row::lb_summary(LB, row.clone());
        for kept_out in ["name", "vips", "options"] {
            assert!(!summary.contains_key(kept_out), "{summary:?}");
        }
        assert_eq!(read_lb(uuid(1), &summary), read_lb(uuid(1), &row));
        assert_eq!(lb_row::lb_summary(LB, summary.clone()), summary);
    }
    let theirs = Row::from([("name".to_string(), Value::Atom(Atom::string("theirs")))]);
    assert!(lb_row::lb_summary(LB, theirs).is_empty());
}
