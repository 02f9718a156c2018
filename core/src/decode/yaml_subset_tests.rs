//! The subset reader gives exactly what serde_yaml_ng gives for every text it takes, and takes
//! what kubectl writes.

use super::*;
use proptest::prelude::*;
use serde_json::json;

/// What serde_yaml_ng makes of an item's text, as the file source reads one.
fn libyaml(text: &str) -> Option<Value> {
    let mut v = serde_yaml_ng::from_str::<Vec<Value>>(text).ok()?;
    if v.len() == 1 { v.pop() } else { None }
}

/// The subset's value of `text`, after checking it is serde_yaml_ng's; `None` if it gave up.
fn agreed(text: &str) -> Option<Value> {
    let v = item(text).ok()?;
    assert_eq!(
        Some(&v),
        libyaml(text).as_ref(),
        "the subset differs for {text:?}"
    );
    Some(v)
}

fn taken(text: &str) -> Value {
    agreed(text).unwrap_or_else(|| panic!("the subset gave up on {text:?}"))
}

const SERVICE: &str = r#"- apiVersion: v1
  kind: Service
  metadata:
    annotations:
      kubectl.kubernetes.io/last-applied-configuration: |
        {"apiVersion":"v1","kind":"Service","metadata":{"annotations":{},"name":"web","namespace":"shop"},"spec":{"ports":[{"port":80}]}}
      note: 'it''s here'
    creationTimestamp: "2026-01-10T08:00:00Z"
    labels:
      app.kubernetes.io/name: web
    name: web
    namespace: shop
    resourceVersion: "1234"
    uid: 6f1c2d3e-0000-4000-8000-000000000001
  spec:
    allocateLoadBalancerNodePorts: true
    clusterIP: 10.96.0.10
    clusterIPs:
    - 10.96.0.10
    - fd00::10
    externalTrafficPolicy: Local
    healthCheckNodePort: 31000
    ipFamilies:
    - IPv4
    ports:
    - name: http
      nodePort: 30080
      port: 80
      protocol: TCP
      targetPort: 8080
    selector:
      app: web
    sessionAffinity: None
    type: LoadBalancer
  status:
    loadBalancer:
      ingress:
      - ip: 172.18.0.5
        ipMode: VIP
"#;

const SLICE: &str = "- addressType: IPv4
  apiVersion: discovery.k8s.io/v1
  endpoints:
  - addresses:
    - 10.244.0.7
    conditions:
      ready: true
      serving: true
      terminating: false
    nodeName: node-a
    targetRef:
      kind: Pod
      name: web-7d9f8b6c5-x2k4p
  kind: EndpointSlice
  metadata:
    creationTimestamp: null
    generateName: web-
    labels:
      kubernetes.io/service-name: web
    name: web-abcde
    namespace: shop
    ownerReferences: []
  ports:
  - name: http
    port: 8080
    protocol: TCP
";

#[test]
fn kubectl_items_are_taken_with_serde_yaml_ngs_values() {
    let svc = taken(SERVICE);
    assert_eq!(svc["metadata"]["annotations"]["note"], json!("it's here"));
    assert_eq!(svc["metadata"]["resourceVersion"], json!("1234"));
    assert_eq!(svc["spec"]["ports"][0]["port"], json!(80));
    assert!(
        svc["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .is_some_and(|s| s.starts_with("{\"apiVersion\"") && s.ends_with("}}\n"))
    );
    let slice = taken(SLICE);
    assert_eq!(slice["metadata"]["creationTimestamp"], Value::Null);
    assert_eq!(slice["metadata"]["ownerReferences"], json!([]));
    assert_eq!(
        slice["endpoints"][0]["conditions"]["terminating"],
        json!(false)
    );
}

#[test]
fn an_item_indented_under_its_list_is_taken() {
    let text = SERVICE
        .lines()
        .map(|l| format!("  {l}\n"))
        .collect::<String>();
    assert_eq!(taken(&text), taken(SERVICE));
}

#[test]
fn plain_scalars_resolve_as_serde_yaml_ng_resolves_them() {
    let taken_as = [
        ("80", json!(80)),
        ("-3", json!(-3)),
        ("-0", json!(0)),
        ("+7", json!(7)),
        ("0x1F", json!(31)),
        ("0o17", json!(15)),
        ("0b101", json!(5)),
        ("-0x10", json!(-16)),
        ("0123", json!("0123")),
        ("-007", json!("-007")),
        ("1e3", json!(1000.0)),
        ("1.5", json!(1.5)),
        (".5", json!(0.5)),
        (".inf", Value::Null),
        ("-.Inf", Value::Null),
        (".NaN", Value::Null),
        ("inf", json!("inf")),
        ("nan", json!("nan")),
        ("Infinity", json!("Infinity")),
        ("~", Value::Null),
        ("null", Value::Null),
        ("NULL", Value::Null),
        ("True", json!(true)),
        ("FALSE", json!(false)),
        ("yes", json!("yes")),
        ("off", json!("off")),
        ("10.96.0.1", json!("10.96.0.1")),
        ("6e1c2d3e-0000", json!("6e1c2d3e-0000")),
        ("1_000", json!("1_000")),
        ("12:30", json!("12:30")),
        ("http://a:80/b", json!("http://a:80/b")),
        ("a#b", json!("a#b")),
        ("-x", json!("-x")),
        ("---", json!("---")),
        ("...", json!("...")),
        ("a 'b' \"c\"", json!("a 'b' \"c\"")),
        ("'q'", json!("q")),
        ("''", json!("")),
        ("\"\"", json!("")),
        ("\"a\\tb\\u00e9\\x41\\N\"", json!("a\tbéA\u{85}")),
        ("{}", json!({})),
        ("[]", json!([])),
    ];
    for (scalar, want) in taken_as {
        let text = format!("- k: {scalar}\n");
        assert_eq!(taken(&text)["k"], want, "{scalar}");
        let text = format!("- {scalar}\n");
        assert_eq!(taken(&text), want, "{scalar} as an entry");
    }
}

#[test]
fn what_is_beyond_the_subset_is_given_up() {
    let beyond = [
        "- 18446744073709551616\n",
        "- -9223372036854775809\n",
        "- k: &a 1\n",
        "- k: *a\n",
        "- k: !!str 1\n",
        "- k: [1, 2]\n",
        "- k: {a: 1}\n",
        "- k: a, b\n",
        "- k: 1 # c\n",
        "- k: 1\n  # c\n  j: 2\n",
        "- k: 1\n\n  j: 2\n",
        "- k:\t1\n",
        "- k: é\n",
        "- k: a\n    b\n",
        "- k: 'a\n    b'\n",
        "- k: \"a\\qb\"\n",
        "- k: \"\\ud800\"\n",
        "- k: |+\n    a\n",
        "- k: >\n    a\n",
        "- k: |\n    a",
        "- - a\n",
        "- k: 1\n  k: 2\n",
        "- ? k\n  : 1\n",
        "- k: a: b\n",
        "- k: a:\n",
        "- a\n- b\n",
        "- a\nb: 1\n",
        "- k: 1\r\n",
        "- $serde_json::private::RawValue: 1\n",
        "- '$serde_json::private::RawValue': 1\n",
    ];
    for text in beyond {
        assert_eq!(item(text), Err(GiveUp), "{text:?}");
    }
}

/// A document tree to write as kubectl would.
#[derive(Debug, Clone)]
enum Node {
    Scalar(String),
    Literal(Vec<String>, bool),
    Map(Vec<(String, Node)>),
    Seq(Vec<Node>),
}

const TOKENS: &[&str] = &[
    "80",
    "0",
    "-0",
    "007",
    "+1",
    "0x1F",
    "-0o7",
    "0b2",
    "1e3",
    "1.5",
    ".5",
    "5.",
    "-.inf",
    ".nan",
    "inf",
    "null",
    "Null",
    "~",
    "true",
    "TRUE",
    "yes",
    "10.96.0.1",
    "fd00::1",
    "1_0",
    "99999999999999999999",
    "-9223372036854775808",
    "a b",
    "a#b",
    "a #b",
    "a:b",
    "a: b",
    "a:",
    "-a",
    "- a",
    "-",
    "--",
    "---",
    "...",
    "?a",
    ":a",
    "a,b",
    "[a]",
    "{}",
    "[]",
    "'q'",
    "'it''s'",
    "'open",
    "\"d\\n\"",
    "\"\\u00e9\"",
    "\"\\q\"",
    "|",
    "|-",
    "|+",
    ">",
    "&a b",
    "*a",
    "!t x",
    "%x",
    "@x",
    "`x",
    "a\"b",
    "\"2026-01-10T08:00:00Z\"",
    "1:20",
    "0.0.0.0/0",
    "=",
    "<<",
    "",
    " ",
    "x ",
    "é",
    "a\tb",
];

const KEYS: &[&str] = &[
    "a",
    "name",
    "app.kubernetes.io/name",
    "80",
    "'q k'",
    "\"d k\"",
    "null",
    "~",
    "true",
    "a b",
    "a:b",
    "?x",
    "-x",
    "- x",
    "dup",
    "dup",
    "",
    "#k",
    "<<",
    "'a'b",
];

fn token(loose: bool) -> BoxedStrategy<String> {
    if loose {
        prop_oneof![
            3 => prop::sample::select(TOKENS).prop_map(String::from),
            1 => "[ -~]{0,10}",
            1 => "[a-z0-9.:/ -]{1,10}",
        ]
        .boxed()
    } else {
        prop_oneof![
            "[a-z][a-z0-9./-]{0,10}",
            "[1-9][0-9]{0,5}",
            "'[ -&(-~]{0,8}'"
        ]
        .boxed()
    }
}

fn key(loose: bool) -> BoxedStrategy<String> {
    if loose {
        prop_oneof![
            3 => prop::sample::select(KEYS).prop_map(String::from),
            1 => "[ -~]{0,6}",
        ]
        .boxed()
    } else {
        "[a-z][a-z0-9./-]{0,8}".boxed()
    }
}

fn node(loose: bool) -> impl Strategy<Value = Node> {
    let line = if loose {
        "[ -~]{0,12}".boxed()
    } else {
        "[!-\"$-~][ -~]{0,12}".boxed()
    };
    let leaf = prop_oneof![
        4 => token(loose).prop_map(Node::Scalar),
        1 => (prop::collection::vec(line, 1..3), any::<bool>())
            .prop_map(|(l, strip)| Node::Literal(l, strip)),
    ];
    leaf.prop_recursive(5, 40, 4, move |inner| {
        prop_oneof![
            prop::collection::vec((key(loose), inner.clone()), 0..4).prop_map(move |mut es| {
                if !loose {
                    let mut seen = std::collections::HashSet::new();
                    es.retain(|(k, _)| seen.insert(k.clone()));
                }
                Node::Map(es)
            }),
            prop::collection::vec(inner, 0..4).prop_map(Node::Seq),
        ]
    })
}

fn pad(out: &mut String, n: usize) {
    out.extend(std::iter::repeat_n(' ', n));
}

/// `node` as the value of a key at column `n`, from just after the key's `:`.
fn write_value(node: &Node, n: usize, out: &mut String) {
    match node {
        Node::Scalar(s) => {
            out.push(' ');
            out.push_str(s);
            out.push('\n');
        }
        Node::Literal(lines, strip) => {
            out.push_str(if *strip { " |-\n" } else { " |\n" });
            for l in lines {
                pad(out, n + 2);
                out.push_str(l);
                out.push('\n');
            }
        }
        Node::Map(es) if es.is_empty() => out.push_str(" {}\n"),
        Node::Seq(xs) if xs.is_empty() => out.push_str(" []\n"),
        Node::Map(es) => {
            out.push('\n');
            write_map(es, n + 2, out, false);
        }
        Node::Seq(xs) => {
            out.push('\n');
            write_seq(xs, n, out);
        }
    }
}

fn write_map(es: &[(String, Node)], n: usize, out: &mut String, first_inline: bool) {
    for (i, (k, v)) in es.iter().enumerate() {
        if i > 0 || !first_inline {
            pad(out, n);
        }
        out.push_str(k);
        out.push(':');
        write_value(v, n, out);
    }
}

fn write_seq(xs: &[Node], n: usize, out: &mut String) {
    for x in xs {
        pad(out, n);
        out.push_str("- ");
        write_entry(x, n + 2, out);
    }
}

/// `node` as a sequence entry at column `col`, from just after its `- `.
fn write_entry(node: &Node, col: usize, out: &mut String) {
    match node {
        Node::Scalar(s) => {
            out.push_str(s);
            out.push('\n');
        }
        Node::Literal(..) | Node::Map(_) | Node::Seq(_) if is_empty(node) => {
            out.push_str(if matches!(node, Node::Map(_)) {
                "{}\n"
            } else {
                "[]\n"
            });
        }
        Node::Literal(lines, strip) => {
            out.push_str(if *strip { "|-\n" } else { "|\n" });
            for l in lines {
                pad(out, col);
                out.push_str(l);
                out.push('\n');
            }
        }
        Node::Map(es) => write_map(es, col, out, true),
        Node::Seq(xs) => {
            out.push_str("- ");
            write_entry(&xs[0], col + 2, out);
            write_seq(&xs[1..], col, out);
        }
    }
}

fn is_empty(node: &Node) -> bool {
    match node {
        Node::Map(es) => es.is_empty(),
        Node::Seq(xs) => xs.is_empty(),
        _ => false,
    }
}

fn write_item(root: &Node) -> String {
    let mut out = String::from("- ");
    write_entry(root, 2, &mut out);
    out
}

/// `node` with every literal block or sequence that is a sequence's entry put under a key, as
/// kubectl never writes either there.
fn kubectl_shaped(node: Node, entry: bool) -> Node {
    let node = match node {
        Node::Map(es) => Node::Map(
            es.into_iter()
                .map(|(k, v)| (k, kubectl_shaped(v, false)))
                .collect(),
        ),
        Node::Seq(xs) => Node::Seq(xs.into_iter().map(|x| kubectl_shaped(x, true)).collect()),
        other => other,
    };
    match node {
        Node::Literal(..) | Node::Seq(_) if entry => Node::Map(vec![("x".into(), node)]),
        other => other,
    }
}

/// One character put in, or one taken out, somewhere in `text`.
fn mutate(text: &str, at: prop::sample::Index, put: Option<char>) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return text.to_owned();
    }
    let i = at.index(chars.len());
    match put {
        Some(c) => chars.insert(i, c),
        None => {
            chars.remove(i);
        }
    }
    chars.into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Whatever the subset takes, serde_yaml_ng takes to the same value: kubectl's shapes with
    /// any scalars and keys, and near misses one character off.
    #[test]
    fn the_subset_agrees_with_serde_yaml_ng(
        root in node(true),
        at in any::<prop::sample::Index>(),
        put in prop::option::of(prop::sample::select(
            vec![' ', ':', '-', '#', '\'', '"', '\n', '\t', '|', '{', '[', ',', '&', '!', 'é', '0'],
        )),
        mutated in any::<bool>(),
    ) {
        let text = write_item(&root);
        let text = if mutated { mutate(&text, at, put) } else { text };
        agreed(&text);
    }

    /// What kubectl's emitter writes (plain names and numbers, quoted strings, literal blocks,
    /// empty collections, unique keys) is always taken.
    #[test]
    fn kubectl_shapes_are_taken(root in node(false)) {
        let text = write_item(&kubectl_shaped(root, true));
        prop_assert!(agreed(&text).is_some(), "gave up on {:?}", text);
    }
}

/// The `yaml_item` fuzz target's corpus (`fuzz/corpus/yaml_item/`), replayed through the same
/// check, so CI covers it without nightly. `seed-*` files are kubectl's shapes: taken.
#[test]
fn the_fuzz_corpus_agrees() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/yaml_item");
    let (mut seeds, mut n) = (0, 0);
    for entry in std::fs::read_dir(dir).expect("the corpus") {
        let path = entry.expect("a corpus entry").path();
        let data = std::fs::read(&path).expect("a corpus file");
        let Ok(text) = std::str::from_utf8(&data) else {
            continue;
        };
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if name.is_some_and(|n| n.starts_with("seed-")) {
            taken(text);
            seeds += 1;
        } else {
            agreed(text);
        }
        n += 1;
    }
    assert!(seeds >= 3 && n > seeds, "{seeds} seeds of {n}");
}
