//! The by-item paths give exactly what the whole-document path gives, and are the paths taken
//! for what kubectl and YAML emitters write.

use super::*;
use crate::decode::yaml_items::unclosed_quote;
use proptest::prelude::*;
use serde_json::json;
use std::sync::Arc;

fn same_as_whole(text: &str) -> String {
    let by_item = format!("{:?}", parse(text));
    let whole = format!("{:?}", parse_whole(text));
    assert_eq!(by_item, whole, "by item and whole differ for:\n{text}");
    // Read again with what the first read left in the cache: the same.
    let mut cache = ItemCache::default();
    let _ = parse_cached(text, &mut cache);
    let again = format!("{:?}", parse_cached(text, &mut cache).map(|(l, _)| l));
    assert_eq!(by_item, again, "a cached read differs for:\n{text}");
    by_item
}

fn service(name: &str, vip: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"externalIPs": [vip], "ports": [{"port": 80, "protocol": "TCP"}]}})
}

fn list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}})
}

/// kubectl's layout: root keys sorted, `kind: List` after the items, items at column 0.
fn kubectl_yaml(v: &Value) -> String {
    serde_yaml_ng::to_string(v).expect("serializes")
}

/// Two versions of a List of three Services: the second changes the middle one.
fn middle_one_changed() -> (Value, Value) {
    let v1 = list(vec![
        service("web", "192.0.2.1"),
        service("api", "192.0.2.2"),
        service("db", "192.0.2.3"),
    ]);
    let mut v2 = v1.clone();
    v2["items"][1] = service("api", "192.0.2.9");
    (v1, v2)
}

#[test]
fn items_unchanged_since_the_last_version_are_not_decoded_again() {
    let (v1, v2) = middle_one_changed();
    let (y1, y2) = (kubectl_yaml(&v1), kubectl_yaml(&v2));
    let mut cache = ItemCache::default();
    let (first, reused) = parse_cached(&y1, &mut cache).unwrap();
    assert_eq!(reused, 0);
    let (second, reused) = parse_cached(&y2, &mut cache).unwrap();
    assert_eq!(reused, 2, "web and db taken as they were");
    let s = |l: &Loaded, i: usize| Arc::clone(&l.objects.services[i]);
    assert!(Arc::ptr_eq(&s(&first, 0), &s(&second, 0)));
    assert!(!Arc::ptr_eq(&s(&first, 1), &s(&second, 1)));
    assert!(Arc::ptr_eq(&s(&first, 2), &s(&second, 2)));
    assert_eq!(format!("{second:?}"), format!("{:?}", parse(&y2).unwrap()));
    // A version that is no snapshot changes nothing: the next read still finds v2's items.
    assert!(parse_cached(&y2[..y2.find("kind: List").unwrap()], &mut cache).is_err());
    let (_, reused) = parse_cached(&y2, &mut cache).unwrap();
    assert_eq!(reused, 3);
}

#[test]
fn json_items_unchanged_since_the_last_version_are_not_decoded_again() {
    let (v1, v2) = middle_one_changed();
    let j = |v: &Value| serde_json::to_string_pretty(v).unwrap();
    let mut cache = ItemCache::default();
    let (first, reused) = parse_cached(&j(&v1), &mut cache).unwrap();
    assert_eq!(reused, 0);
    let (second, reused) = parse_cached(&j(&v2), &mut cache).unwrap();
    assert_eq!(reused, 2, "web and db taken as they were");
    let s = |l: &Loaded, i: usize| Arc::clone(&l.objects.services[i]);
    assert!(Arc::ptr_eq(&s(&first, 0), &s(&second, 0)));
    assert!(!Arc::ptr_eq(&s(&first, 1), &s(&second, 1)));
    assert_eq!(
        format!("{second:?}"),
        format!("{:?}", parse_whole(&j(&v2)).unwrap())
    );
    // The same items under another root (another List kind) are decoded again.
    let mut v3 = v2.clone();
    v3["kind"] = "ServiceList".into();
    let (third, reused) = parse_cached(&j(&v3), &mut cache).unwrap();
    assert_eq!(reused, 0);
    assert_eq!(
        format!("{third:?}"),
        format!("{:?}", parse_whole(&j(&v3)).unwrap())
    );
}

#[test]
fn kubectl_yaml_and_json_are_read_item_by_item() {
    let v = list(vec![
        service("web", "192.0.2.1"),
        service("api", "192.0.2.2"),
    ]);
    let yaml = kubectl_yaml(&v);
    assert!(yaml.contains("\nitems:\n- "), "{yaml}");
    assert!(
        parse_yaml_by_item(&yaml, &mut ItemCache::default()).is_some(),
        "YAML by item"
    );
    for json in [
        serde_json::to_string(&v).unwrap(),
        serde_json::to_string_pretty(&v).unwrap(),
    ] {
        assert!(parse_json_by_item(&json).is_some(), "JSON by item");
        assert!(
            parse_json_list_by_item(&json, &mut ItemCache::default()).is_some(),
            "JSON List by item"
        );
        same_as_whole(&json);
    }
    let l = parse(&yaml).unwrap();
    assert_eq!(l.objects.services.len(), 2);
    same_as_whole(&yaml);
}

#[test]
fn items_indented_under_their_key_are_read_item_by_item() {
    let text = "apiVersion: v1\nitems:\n  - apiVersion: v1\n    kind: Service\n    metadata: {name: a, namespace: s}\n    spec: {externalIPs: [192.0.2.1], ports: [{port: 80}]}\n  - apiVersion: v1\n    kind: Service\n    metadata: {name: b, namespace: s}\n    spec: {externalIPs: [192.0.2.2], ports: [{port: 80}]}\nkind: List\n";
    assert_eq!(
        split_block_list(text).map(|s| s.items.len()),
        Some(2),
        "two items"
    );
    assert_eq!(parse(text).unwrap().objects.services.len(), 2);
    same_as_whole(text);
}

#[test]
fn block_scalars_comments_and_blank_lines_stay_inside_their_item() {
    // A block scalar whose text has blank lines and lines that look like items, a comment at
    // column 0 inside an item, CRLF line ends: none of it cuts an item.
    let text = "apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata:\n    name: a\n    namespace: s\n    annotations:\n      vipflow.io/note: |\n        first\n\n        - not an item\n        kind: not a key\n# a comment at column 0\n  spec: {externalIPs: [192.0.2.1], ports: [{port: 80}]}\n\n- apiVersion: v1\n  kind: Service\n  metadata: {name: b, namespace: s}\n  spec: {externalIPs: [192.0.2.2], ports: [{port: 80}]}\nkind: List\n";
    assert_eq!(split_block_list(text).map(|s| s.items.len()), Some(2));
    let l = parse(text).unwrap();
    assert_eq!(l.objects.services.len(), 2);
    let note = l.objects.services[0]
        .metadata
        .annotations
        .as_ref()
        // Only vipflow's own annotations are kept.
        .and_then(|a| a.get("vipflow.io/note"))
        .cloned();
    assert_eq!(
        note.as_deref(),
        Some("first\n\n- not an item\nkind: not a key\n")
    );
    same_as_whole(text);
    let crlf = text.replace('\n', "\r\n");
    assert_eq!(parse(&crlf).unwrap().objects.services.len(), 2);
    same_as_whole(&crlf);
}

#[test]
fn what_does_not_cut_cleanly_is_read_whole_with_the_same_result() {
    for text in [
        // An anchor in one item used in another.
        "apiVersion: v1\nitems:\n- &svc\n  apiVersion: v1\n  kind: Service\n  metadata: {name: a, namespace: s}\n  spec: {externalIPs: [192.0.2.1], ports: [{port: 80}]}\n- *svc\nkind: List\n",
        // Two documents.
        "apiVersion: v1\nitems: []\nkind: List\n---\napiVersion: v1\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: n}}\nkind: List\n",
        // Flow style.
        "{apiVersion: v1, kind: List, items: [{apiVersion: v1, kind: Node, metadata: {name: n}}]}\n",
        // A nested block entry.
        "apiVersion: v1\nitems:\n-\n  apiVersion: v1\n  kind: Node\n  metadata: {name: n}\nkind: List\n",
    ] {
        let r = same_as_whole(text);
        assert!(r.starts_with("Ok"), "{text}: {r}");
    }
}

#[test]
fn only_items_colon_alone_or_before_a_comment_is_the_key() {
    // `items:#` is a plain scalar, not the key (a comment needs a space before `#`): not a
    // List at all, whichever way it is read. Found by the fuzzer.
    let plain =
        "apiVersion: v1\nkind: List\nitems:# not a comment\n- apiVersion: v1\n  kind: Node\n";
    assert!(split_block_list(plain).is_none());
    assert!(same_as_whole(plain).starts_with("Err"));
    let comment = "apiVersion: v1\nkind: List\nitems: # a comment\n- apiVersion: v1\n  kind: Node\n  metadata: {name: n}\n";
    assert_eq!(split_block_list(comment).map(|s| s.items.len()), Some(1));
    assert_eq!(parse(comment).unwrap().objects.nodes.len(), 1);
    same_as_whole(comment);
}

#[test]
fn odd_items_give_the_same_problems_either_way() {
    for text in [
        "apiVersion: v1\nitems:\nkind: List\n",
        "apiVersion: v1\nitems: 3\nkind: List\n",
        "apiVersion: v1\nitems: {a: b}\nkind: List\n",
        "apiVersion: v1\nitems: []\nkind: List\n",
        "apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: s}\nitems:\n- 1\n",
        "apiVersion: v1\nkind: ServiceList\nitems:\n- metadata: {name: a, namespace: s}\n  spec: {externalIPs: [192.0.2.1], ports: [{port: 80}]}\n",
        "items:\n- metadata: {name: a, namespace: s}\n  spec: {externalIPs: [192.0.2.1], ports: [{port: 80}]}\napiVersion: v1\nkind: ServiceList\n",
        "items:\n- kind: Service\n  metadata: {name: a, namespace: s}\n- apiVersion: v1\n  kind: Node\n  metadata: {name: n}\nkind: List\n",
        "items:\n- 1\n- [a]\n- x\nkind: List\n",
    ] {
        same_as_whole(text);
    }
}

#[test]
fn items_twice_is_an_error() {
    for text in [
        "apiVersion: v1\nitems: []\nkind: List\nitems: []\n",
        "{\"apiVersion\": \"v1\", \"items\": [], \"kind\": \"List\", \"items\": []}",
    ] {
        let e = parse(text).expect_err(text);
        assert!(
            e.contains("items appears twice") || e.contains("duplicate"),
            "{e}"
        );
    }
}

#[test]
fn a_list_cut_short_is_refused_before_its_items_are_read() {
    let v = list(vec![
        service("web", "192.0.2.1"),
        service("api", "192.0.2.2"),
    ]);
    let yaml = kubectl_yaml(&v);
    let cut = &yaml[..yaml.find("kind: List").unwrap()];
    let e = parse_yaml_by_item(cut, &mut ItemCache::default())
        .expect("cut into items")
        .expect_err("not a snapshot");
    assert!(e.contains("has items but no kind"), "{e}");
}

#[test]
fn unread_fields_are_dropped_before_decoding() {
    let mut svc = service("web", "192.0.2.1");
    svc["metadata"]["annotations"] = json!({
        "kubectl.kubernetes.io/last-applied-configuration": "{\"kind\":\"Service\"}",
        "k8s.ovn.org/prefer-local": "true",
        "vipflow.io/prefer-local": "true",
    });
    // A managedFields entry that would not even decode is not ours to refuse the Service for.
    svc["metadata"]["managedFields"] = json!([{"manager": 7}]);
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
        "status": {"images": [{"names": ["x"], "sizeBytes": 1}],
                   "addresses": [{"type": "InternalIP", "address": "192.168.0.1"}]}});
    let l = parse(&kubectl_yaml(&list(vec![svc, node]))).unwrap();
    assert!(l.problems.is_empty(), "{:?}", l.problems);
    // Only vipflow's own annotations are kept: no other is read.
    let meta = &l.objects.services[0].metadata;
    let ann = meta.annotations.as_ref().unwrap();
    assert_eq!(ann.keys().collect::<Vec<_>>(), ["vipflow.io/prefer-local"]);
    let status = l.objects.nodes[0].status.as_ref().unwrap();
    assert!(status.images.is_none());
    assert_eq!(status.addresses.as_ref().map(Vec::len), Some(1));
}

fn arb_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (0u32..70000).prop_map(Value::from),
        "[a-z0-9.:/ -]{0,12}".prop_map(Value::from),
        Just(Value::from("192.0.2.7")),
        Just(Value::from("line one\n\n- line two\n")),
    ]
}

fn arb_item() -> impl Strategy<Value = Value> {
    let kind = prop_oneof![
        Just(None),
        Just(Some("Service")),
        Just(Some("EndpointSlice")),
        Just(Some("Node")),
        Just(Some("ConfigMap")),
    ];
    let api = prop_oneof![
        Just(None),
        Just(Some("v1")),
        Just(Some("discovery.k8s.io/v1"))
    ];
    (
        kind,
        api,
        "[a-z]{1,6}",
        prop::collection::vec(("[a-zA-Z]{1,8}", arb_scalar()), 0..4),
        prop::collection::vec(arb_scalar(), 0..3),
    )
        .prop_map(|(kind, api, name, extra, ips)| {
            let mut o = json!({"metadata": {"name": name, "namespace": "ns"},
                "spec": {"externalIPs": ips, "ports": [{"port": 80}]},
                "endpoints": [{"addresses": ["10.0.0.1"]}], "addressType": "IPv4"});
            if let Some(k) = kind {
                o["kind"] = k.into();
            }
            if let Some(a) = api {
                o["apiVersion"] = a.into();
            }
            for (k, v) in extra {
                o[k] = v;
            }
            o
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn any_list_reads_the_same_by_item_and_whole(
        items in prop::collection::vec(arb_item(), 0..8),
        list_kind in prop_oneof![Just("List"), Just("ServiceList"), Just("NodeList")],
        indented in any::<bool>(),
    ) {
        let mut v = list(items);
        v["kind"] = list_kind.into();
        let mut yaml = kubectl_yaml(&v);
        if indented {
            yaml = yaml
                .lines()
                .scan(false, |in_items, l| {
                    if l == "items:" { *in_items = true; return Some(l.to_string()); }
                    if l.is_empty() { return Some(String::new()); }
                    if !l.starts_with(' ') && !l.starts_with('-') { *in_items = false; }
                    Some(if *in_items { format!("  {l}") } else { l.to_string() })
                })
                .collect::<Vec<_>>()
                .join("\n");
        }
        let nonempty = v["items"].as_array().is_some_and(|a| !a.is_empty());
        prop_assert!(!nonempty || parse_yaml_by_item(&yaml, &mut ItemCache::default()).is_some(), "not cut:\n{}", yaml);
        same_as_whole(&yaml);
        for json in [serde_json::to_string_pretty(&v).unwrap(), serde_json::to_string(&v).unwrap()] {
            prop_assert!(parse_json_by_item(&json).is_some());
            prop_assert!(
                parse_json_list_by_item(&json, &mut ItemCache::default()).is_some(),
                "not cut:\n{}", json
            );
            same_as_whole(&json);
        }
    }
}

#[test]
fn a_control_character_or_a_tab_in_a_line_left_out_fails_the_same_way() {
    // The items key's comment and the comments before the first item are not parsed by the
    // by-item path: a character YAML refuses there must still refuse the file. Found by the
    // fuzzer.
    for text in [
        "apiVersion: v1\nkind: List\nitems: # a \u{0} here\n- apiVersion: v1\n  kind: Node\n  metadata: {name: n}\n",
        "apiVersion: v1\nkind: List\nitems:\n# a \u{7f} here\n- apiVersion: v1\n  kind: Node\n  metadata: {name: n}\n",
        // A lone carriage return: a line break to YAML, inside a comment to a reader of `\n`.
        "apiVersion: v1\nkind: List\nitems: # a comment\rnot: a comment\n- apiVersion: v1\n  kind: Node\n  metadata: {name: n}\n",
        // A line of only a tab between the items key and the first item.
        "apiVersion: v1\nkind: List\nitems:\n\t\n- apiVersion: v1\n  kind: Node\n  metadata: {name: n}\n",
    ] {
        assert!(same_as_whole(text).starts_with("Err"), "{text:?}");
    }
}

#[test]
fn json_is_read_as_json_even_where_yaml_would_refuse_a_character() {
    // JSON allows U+007F in a string; YAML does not. A JSON file is JSON. Found by the fuzzer.
    let text = "{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [{\"apiVersion\": \"v1\", \"kind\": \"Node\", \"metadata\": {\"name\": \"n\", \"labels\": {\"a\": \"x\u{7f}y\"}}}]}";
    assert!(parse_json_by_item(text).is_some());
    let r = same_as_whole(text);
    assert!(r.starts_with("Ok"), "{r}");
    assert_eq!(parse(text).unwrap().objects.nodes.len(), 1);
}

#[test]
fn a_quoted_value_running_over_lines_is_read_whole() {
    // A double-quoted value that goes on over lines holding `items:` and `- ` at column 0:
    // they are text, not the List's items. Found by the fuzzer (as JSON that is not JSON).
    for text in [
        "apiVersion: v1\nkind: List\nnote: \"a\nitems:\n- x\"\nitems: []\n",
        "apiVersion: v1\nkind: List\nnote: 'it''s\nitems:\n- x'\nitems: []\n",
        "{\"apiVersion\": \"v1\", \"kind\": \"List\", \"note\": \"a\nitems:\n- x\", \"items\": []}\n",
    ] {
        assert!(split_block_list(text).is_none(), "{text:?}");
        same_as_whole(text);
    }
    assert!(!unclosed_quote("name: \"web\""));
    assert!(!unclosed_quote("name: 'it''s'"));
    assert!(unclosed_quote("name: 'it''s"));
    assert!(!unclosed_quote("- name: plain, with 'quotes' inside"));
    assert!(unclosed_quote("- \"open"));
}

#[test]
fn a_list_of_many_items_decoded_on_several_cores_reads_as_the_whole_document() {
    // Past PARALLEL_MIN, items are decoded in parts on several threads: the same objects,
    // problems and order as one parse of the whole document.
    let mut items: Vec<Value> = (0..crate::parallel::PARALLEL_MIN + 500)
        .map(|i| {
            service(
                &format!("s{i}"),
                &format!("192.0.{}.{}", i / 250, i % 250 + 1),
            )
        })
        .collect();
    items[1000]["spec"]["ports"] = json!("not a list");
    items[2100]["spec"]["unknownField"] = json!(1);
    let v = list(items);
    same_as_whole(&serde_json::to_string_pretty(&v).unwrap());
    let yaml = kubectl_yaml(&v);
    let text = same_as_whole(&yaml);
    assert!(text.contains("s2547"), "the last item is there");
    let loaded = parse(&yaml).unwrap();
    assert_eq!(
        loaded.objects.services.len(),
        crate::parallel::PARALLEL_MIN + 499
    );
    assert_eq!(loaded.problems.len(), 2, "{:?}", loaded.problems);
}

/// The byte-at-a-time form [`check_depth`] must agree with.
fn check_depth_reference(text: &str, max: usize) -> Result<(), String> {
    let (mut depth, mut in_str, mut escaped) = (0usize, false, false);
    let mut line = 1usize;
    for b in text.bytes() {
        if b == b'\n' {
            line += 1;
        }
        if in_str {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return Err(format!(
                        "line {line}: nested more than {max} levels deep: not a Kubernetes object"
                    ));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Depth, strings, escapes (one at the very end too) and the line of the error: as the
    /// byte-at-a-time reference reads them.
    #[test]
    fn check_depth_is_the_reference(text in "[\\[\\]{}\"\\\\a\\n]{0,40}", max in 0usize..6) {
        prop_assert_eq!(check_depth(&text, max), check_depth_reference(&text, max));
    }

    /// The same text handed over in pieces cut anywhere (inside strings, between a `\` and
    /// what it escapes) is judged as the whole text, error line included.
    #[test]
    fn a_text_in_pieces_is_checked_as_the_whole(
        text in "[\\[\\]{}\"\\\\a\\n]{0,40}",
        max in 0usize..6,
        cuts in proptest::collection::vec(0usize..41, 0..6),
    ) {
        let b = text.as_bytes();
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(b.len())).collect();
        cuts.push(b.len());
        cuts.sort_unstable();
        let mut scan = crate::decode::text_depth::DepthScan::new(max, 1);
        let (mut from, mut got) = (0, Ok(()));
        for to in cuts {
            got = scan.piece(&b[from..to]);
            from = to;
            if got.is_err() {
                break;
            }
        }
        prop_assert_eq!(got, check_depth_reference(&text, max));
    }
}

#[test]
fn bgp_objects_are_read_by_item_and_whole_alike_and_another_group_is_said() {
    let text = "apiVersion: v1\nkind: List\nitems:\n\
- apiVersion: vipflow.io/v1alpha1\n  kind: BGPPeer\n  metadata: {name: tor}\n  spec: {myASN: 64513, peerASN: 64512, peerAddress: 10.9.0.1, passwordSecret: {name: s}}\n\
- apiVersion: vipflow.io/v1alpha1\n  kind: BGPAdvertisement\n  metadata: {name: all}\n  spec: {ipAddressPools: [p]}\n\
- apiVersion: vipflow.io/v1alpha1\n  kind: BFDProfile\n  metadata: {name: fast}\n  spec: {receiveInterval: 300}\n\
- apiVersion: example.com/v1\n  kind: BGPPeer\n  metadata: {name: theirs}\n  spec: {myASN: 1, peerASN: 2, peerAddress: 10.9.0.9}\n";
    same_as_whole(text);
    let loaded = parse(text).expect("parses");
    let bgp = &loaded.objects.bgp;
    assert_eq!(
        (
            bgp.peers.len(),
            bgp.advertisements.len(),
            bgp.bfd_profiles.len()
        ),
        (1, 1, 1)
    );
    assert_eq!(bgp.peers[0].spec.peer_address, "10.9.0.1");
    let said: Vec<String> = loaded.problems.iter().map(|p| p.to_string()).collect();
    // A field vipflow does not read yet is said, as kubectl warns; another API group is skipped.
    assert!(
        said.iter().any(|p| p.contains("passwordSecret")),
        "{said:#?}"
    );
    assert!(
        said.iter()
            .any(|p| p.contains("theirs") && p.contains("example.com/v1")),
        "{said:#?}"
    );
}
