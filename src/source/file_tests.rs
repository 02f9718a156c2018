//! Tests for the file source: the shapes `kubectl get -o yaml|json` prints, and bad input that
//! must be reported item by item, never panic.

use super::*;
use crate::model::{Model, ModelOptions};
use proptest::prelude::*;
use vipflow_core::model::Objects;

fn problems(l: &Loaded) -> Vec<String> {
    l.problems.iter().map(ToString::to_string).collect()
}

fn counts(l: &Loaded) -> (usize, usize, usize) {
    (
        l.objects.services.len(),
        l.objects.endpoint_slices.len(),
        l.objects.nodes.len(),
    )
}

const SERVICE: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  externalIPs: [192.0.2.1]
  ports: [{port: 80}]
"#;

#[test]
fn a_yaml_list() {
    let l = parse(include_str!("../../examples/services.yaml")).unwrap();
    assert!(l.problems.is_empty(), "{:?}", l.problems);
    assert_eq!(counts(&l), (2, 1, 1));
    assert_eq!(
        l.objects.services[0].metadata.name.as_deref(),
        Some("web"),
        "items keep their order"
    );
}

#[test]
fn a_json_list() {
    let l = parse(
        r#"{
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"externalIPs": ["192.0.2.1"], "ports": [{"port": 80, "protocol": "TCP"}]}
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": "web-1", "namespace": "shop",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.244.1.5"]}]
        }
    ],
    "metadata": {"resourceVersion": ""}
}"#,
    )
    .unwrap();
    assert!(l.problems.is_empty(), "{:?}", l.problems);
    assert_eq!(counts(&l), (1, 1, 0));
}

#[test]
fn a_typed_list_such_as_service_list() {
    let l = parse(
        r#"
apiVersion: v1
kind: ServiceList
metadata: {resourceVersion: "12345"}
items:
- apiVersion: v1
  kind: Service
  metadata: {name: web, namespace: shop}
  spec: {ports: [{port: 80}]}
"#,
    )
    .unwrap();
    assert!(l.problems.is_empty(), "{:?}", l.problems);
    assert_eq!(counts(&l), (1, 0, 0));
}

#[test]
fn several_yaml_documents() {
    let text = format!(
        "---\n{SERVICE}\n---\n# a comment-only document\n---\n{}\n---\n",
        r#"
apiVersion: v1
kind: Node
metadata: {name: node-a}
status:
  addresses: [{type: InternalIP, address: 192.168.10.11}]
"#
    );
    let l = parse(&text).unwrap();
    assert!(l.problems.is_empty(), "{:?}", l.problems);
    assert_eq!(counts(&l), (1, 0, 1));
}

#[test]
fn a_single_object() {
    let l = parse(SERVICE).unwrap();
    assert!(l.problems.is_empty(), "{:?}", l.problems);
    assert_eq!(counts(&l), (1, 0, 0));
    let spec = l.objects.services[0].spec.as_ref().unwrap();
    assert_eq!(
        spec.external_ips.as_deref(),
        Some(&["192.0.2.1".into()][..])
    );
}

#[test]
fn other_kinds_are_ignored_silently() {
    let l = parse(
        r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: shop}, spec: {containers: []}}
- {apiVersion: v1, kind: Endpoints, metadata: {name: web, namespace: shop}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: shop}, data: {k: v}}
- {apiVersion: kubeovn.io/v1, kind: Subnet, metadata: {name: ovn-default}}
"#,
    )
    .unwrap();
    assert!(l.problems.is_empty(), "{:?}", l.problems);
    assert_eq!(counts(&l), (0, 0, 0));
}

#[test]
fn a_wrong_api_version_is_a_problem() {
    let l = parse(
        r#"
apiVersion: v1
kind: List
items:
- apiVersion: v2
  kind: Service
  metadata: {name: web, namespace: shop}
  spec: {ports: [{port: 80}]}
- apiVersion: discovery.k8s.io/v1beta1
  kind: EndpointSlice
  metadata: {name: web-1, namespace: shop}
  addressType: IPv4
  endpoints: []
- kind: Node
  metadata: {name: node-a}
"#,
    )
    .unwrap();
    assert_eq!(counts(&l), (0, 0, 0));
    assert_eq!(
        problems(&l),
        [
            r#"Service shop/web: apiVersion "v2" is not "v1"; skipped"#,
            r#"EndpointSlice shop/web-1: apiVersion "discovery.k8s.io/v1beta1" is not "discovery.k8s.io/v1"; skipped"#,
            r#"Node node-a: apiVersion "" is not "v1"; skipped"#,
        ]
    );
}

#[test]
fn an_item_without_kind_is_a_problem() {
    let l = parse(
        r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  metadata: {name: web, namespace: shop}
  spec: {ports: [{port: 80}]}
- 42
"#,
    )
    .unwrap();
    assert_eq!(counts(&l), (0, 0, 0));
    assert_eq!(
        problems(&l),
        [
            "object shop/web: has no kind; skipped",
            "object <unnamed>: has no kind; skipped",
        ]
    );
}

#[test]
fn an_item_with_a_wrong_type_is_skipped_and_the_others_loaded() {
    let l = parse(
        r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: bad, namespace: shop}
  spec:
    ports: "x"
- apiVersion: v1
  kind: Service
  metadata: {name: good, namespace: shop}
  spec:
    ports: [{port: 80}]
- apiVersion: v1
  kind: Node
  metadata: {name: node-a}
  status: {addresses: {type: InternalIP}}
"#,
    )
    .unwrap();
    assert_eq!(counts(&l), (1, 0, 0));
    assert_eq!(l.objects.services[0].metadata.name.as_deref(), Some("good"));
    let p = problems(&l);
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(
        p[0].starts_with("Service shop/bad: invalid: ") && p[0].ends_with("; skipped"),
        "{p:?}"
    );
    assert!(p[1].starts_with("Node node-a: invalid: "), "{p:?}");
}

#[test]
fn unknown_fields_are_reported_and_the_object_still_loaded() {
    let l = parse(
        r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  externalIPs: [192.0.2.1]
  colour: blue
  ports: [{port: 80, protocl: UDP}]
"#,
    )
    .unwrap();
    assert_eq!(counts(&l), (1, 0, 0));
    assert_eq!(
        problems(&l),
        [
            "Service shop/web: unknown field spec.colour ignored",
            "Service shop/web: unknown field spec.ports.0.protocl ignored",
        ]
    );
}

#[test]
fn a_list_without_items_is_cut_short() {
    let e = parse("apiVersion: v1\nkind: List\n").expect_err("no snapshot");
    assert!(e.contains("List without items"), "{e}");
}

#[test]
fn an_empty_list_is_empty() {
    let l = parse("apiVersion: v1\nitems: []\nkind: List\nmetadata: {resourceVersion: \"\"}\n")
        .unwrap();
    assert!(l.problems.is_empty(), "{:?}", l.problems);
    assert_eq!(counts(&l), (0, 0, 0));
}

#[test]
fn text_that_is_not_yaml_is_an_error() {
    for text in [
        "items: [unclosed",
        "{\"apiVersion\": \"v1\",",
        "a: b\n c: d\n- e",
        "key: \"unterminated",
    ] {
        assert!(parse(text).is_err(), "{text:?} parsed");
    }
}

#[test]
fn a_document_that_is_not_a_mapping_is_an_error() {
    // Plain text, an HTML error page, a bare list: none of them is objects, and reading them
    // as "no objects" would remove every flow.
    for text in [
        "this is not a kubernetes objects file",
        "<html><body>502 Bad Gateway</body></html>",
        "- apiVersion: v1\n  kind: Service\n",
        "42",
        &format!("{SERVICE}\n---\njust text\n"),
    ] {
        let e = parse(text).expect_err(text);
        assert!(e.contains("not a mapping"), "{e}");
    }
}

#[test]
fn an_empty_or_comment_only_file_is_not_a_snapshot() {
    // What a reader sees of a file being rewritten in place: planning it would delete every
    // flow and row. Zero objects is said with an empty List (see an_empty_list_is_empty).
    for text in [
        "",
        "\n\n",
        "# nothing here\n",
        "---\n",
        "---\n---\n",
        "null\n",
        "~\n",
    ] {
        let e = parse(text).expect_err(text);
        assert!(e.contains("no objects at all"), "{text:?}: {e}");
    }
}

/// What `kubectl get svc,endpointslices -A -o yaml` prints: keys in order, `kind: List` after
/// the items.
const KUBECTL_LIST: &str = "apiVersion: v1
items:
- apiVersion: v1
  kind: Service
  metadata:
    name: web
    namespace: shop
  spec:
    externalIPs:
    - 192.0.2.10
    ports:
    - port: 80
      protocol: TCP
- apiVersion: v1
  kind: Service
  metadata:
    name: api
    namespace: shop
  spec:
    externalIPs:
    - 192.0.2.11
    ports:
    - port: 443
      protocol: TCP
kind: List
metadata:
  resourceVersion: \"\"
";

#[test]
fn a_kubectl_list_cut_short_anywhere_is_not_a_snapshot() {
    assert_eq!(counts(&parse(KUBECTL_LIST).unwrap()), (2, 0, 0));
    let kind_at = KUBECTL_LIST.find("kind: List").unwrap();
    // Every cut before the List's kind, at any byte (as a reader racing the writer sees it).
    for cut in 0..kind_at {
        if !KUBECTL_LIST.is_char_boundary(cut) {
            continue;
        }
        let text = &KUBECTL_LIST[..cut];
        assert!(
            parse(text).is_err(),
            "cut at byte {cut} taken as a snapshot:\n{text}"
        );
    }
    // The same as JSON: a cut never parses.
    let json: serde_json::Value = serde_yaml_ng::from_str(KUBECTL_LIST).unwrap();
    let json = serde_json::to_string_pretty(&json).unwrap();
    for cut in 0..json.len() {
        assert!(parse(&json[..cut]).is_err(), "JSON cut at byte {cut} taken");
    }
}

#[test]
fn a_top_level_document_without_kind_is_not_a_snapshot() {
    let e = parse("apiVersion: v1\nmetadata: {name: web}\n").expect_err("no kind");
    assert!(e.contains("has no kind"), "{e}");
    let e = parse(&format!("{SERVICE}\n---\napiVersion: v1\n")).expect_err("second cut");
    assert!(e.contains("document 2 has no kind"), "{e}");
}

#[test]
fn load_reads_a_file_and_names_it_in_errors() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("objects.yaml");
    std::fs::write(&good, SERVICE).unwrap();
    assert_eq!(counts(&load(&good, DEFAULT_MAX_BYTES).unwrap()), (1, 0, 0));

    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "items: [unclosed").unwrap();
    let e = load(&bad, DEFAULT_MAX_BYTES).unwrap_err();
    assert!(matches!(e, FileError::Parse { .. }), "{e}");
    assert!(e.to_string().contains("bad.yaml"), "{e}");

    let missing = dir.path().join("missing.yaml");
    let e = load(&missing, DEFAULT_MAX_BYTES).unwrap_err();
    assert!(matches!(e, FileError::Read { .. }), "{e}");
    assert!(e.to_string().contains("missing.yaml"), "{e}");
}

// ---- hostile input never panics -------------------------------------------------------------

fn arb_json() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "[ -~]{0,12}".prop_map(Value::String),
        // Values that mean something somewhere in a Service.
        prop::sample::select(vec![
            "v1",
            "List",
            "Service",
            "EndpointSlice",
            "Node",
            "LoadBalancer",
            "TCP",
            "Proxy",
            "192.0.2.1",
            "2001:db8::1",
            "2026-01-01T00:00:00Z",
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "apiVersion",
                    "kind",
                    "items",
                    "metadata",
                    "name",
                    "namespace",
                    "labels",
                    "spec",
                    "status",
                    "ports",
                    "port",
                    "targetPort",
                    "protocol",
                    "externalIPs",
                    "loadBalancer",
                    "ingress",
                    "ip",
                    "endpoints",
                    "addresses",
                    "conditions",
                    "x",
                ])
                .prop_map(String::from),
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// An object of a kind we decode, with random contents.
fn arb_object() -> impl Strategy<Value = serde_json::Value> {
    (
        prop::sample::select(vec![
            ("v1", "Service"),
            ("v1", "Node"),
            ("discovery.k8s.io/v1", "EndpointSlice"),
        ]),
        arb_json(),
        arb_json(),
        arb_json(),
    )
        .prop_map(|((api, kind), metadata, spec, status)| {
            serde_json::json!({
                "apiVersion": api, "kind": kind, "metadata": metadata,
                "spec": spec, "status": status, "endpoints": status, "ports": spec,
            })
        })
}

fn build_all(l: &Loaded) {
    let _ = Model::build(&l.objects, &ModelOptions::default());
    let _ = Model::build(
        &l.objects,
        &ModelOptions {
            load_balancer_class: Some("x".into()),
        },
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        if let Ok(l) = parse(&text) {
            build_all(&l);
        }
    }

    #[test]
    fn yaml_like_text_never_panics(
        text in "(apiVersion: v1\n|kind: (List|Service|Node)\n|items:\n|- |  |---\n|[a-z]{1,5}: [-\\[\\]{}:,0-9a-z.\" ]{0,10}\n){0,12}"
    ) {
        if let Ok(l) = parse(&text) {
            build_all(&l);
        }
    }

    #[test]
    fn random_json_values_never_panic(v in arb_json()) {
        if let Ok(l) = parse(&v.to_string()) {
            build_all(&l);
        }
    }

    #[test]
    fn random_objects_in_a_list_never_panic(items in prop::collection::vec(arb_object(), 0..6)) {
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
        let l = parse(&list.to_string()).expect("a JSON List parses");
        build_all(&l);
    }
}

#[test]
fn items_of_a_typed_list_take_its_kind_and_api_version() {
    // As the API server returns a list: items without kind/apiVersion.
    let l = parse(
        r#"{"kind": "ServiceList", "apiVersion": "v1", "items": [
            {"metadata": {"name": "web", "namespace": "shop"}, "spec": {"externalIPs": ["172.18.0.100"], "ports": [{"port": 80}]}}
        ]}"#,
    )
    .unwrap();
    assert_eq!(l.objects.services.len(), 1);
    assert!(l.problems.is_empty(), "{:?}", l.problems);
}

#[test]
fn a_reread_file_shares_every_unchanged_object_with_the_last_version() {
    let before = parse(KUBECTL_LIST).unwrap();
    let mut after = parse(&KUBECTL_LIST.replace("192.0.2.11", "192.0.2.12")).unwrap();
    assert_eq!(
        after.objects.share_unchanged(&before.objects),
        1,
        "one changed"
    );
    let (b, a) = (&before.objects.services, &after.objects.services);
    assert!(
        Arc::ptr_eq(&a[0], &b[0]),
        "web unchanged: the same allocation"
    );
    assert!(!Arc::ptr_eq(&a[1], &b[1]), "api changed: its own");
    assert_eq!(
        a[1].spec.as_ref().unwrap().external_ips.as_deref(),
        Some(&[crate::model::Text::from("192.0.2.12")][..])
    );
    // Nothing in common with an empty previous version.
    let mut again = parse(KUBECTL_LIST).unwrap();
    assert_eq!(again.objects.share_unchanged(&Objects::default()), 2);
}

#[tokio::test]
async fn the_watcher_hands_on_unchanged_objects_as_the_same_allocations() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("objects.yaml");
    std::fs::write(&path, KUBECTL_LIST).unwrap();
    let (mut rx, task) = watch(path.clone(), Duration::from_millis(10)).unwrap();
    let first = rx.borrow_and_update().clone();
    let tmp = dir.path().join("objects.tmp");
    std::fs::write(&tmp, KUBECTL_LIST.replace("192.0.2.11", "192.0.2.12")).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    tokio::time::timeout(Duration::from_secs(10), rx.changed())
        .await
        .expect("the change is picked up")
        .unwrap();
    let second = rx.borrow().clone();
    let (b, a) = (&first.objects.services, &second.objects.services);
    assert!(Arc::ptr_eq(&a[0], &b[0]));
    assert!(!Arc::ptr_eq(&a[1], &b[1]));
    task.abort();
}

#[test]
fn a_file_read_in_pieces_has_the_digest_of_its_text() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("objects.yaml");
    // Longer than one piece, and not a multiple of one.
    let text: String = (0..200_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    std::fs::write(&path, &text).unwrap();
    assert_eq!(
        digest_bounded(&path, DEFAULT_MAX_BYTES).unwrap(),
        Digest::of(text.as_bytes())
    );
    assert!(matches!(
        digest_bounded(&path, 1000),
        Err(FileError::TooLarge { .. })
    ));
}
