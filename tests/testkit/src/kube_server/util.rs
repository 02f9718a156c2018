//! Query strings, label/field selectors, merge and JSON patches: pure helpers that never panic.

use serde_json::{Map, Value};

/// Decodes an `application/x-www-form-urlencoded` query string into ordered pairs.
pub(crate) fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|s| !s.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(pair), String::new()),
        })
        .collect()
}

/// Percent-decodes `s` (`+` is a space); malformed escapes are kept literally.
pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'+' {
            out.push(b' ');
            i += 1;
            continue;
        }
        if b == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            if let Some(d) = hex {
                out.push(d);
                i += 3;
                continue;
            }
        }
        out.push(b);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// Parses a label selector: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`,
/// comma-separated (all must hold).
pub(crate) fn parse_label_selector(s: &str) -> Result<Vec<LabelReq>, String> {
    let mut reqs = Vec::new();
    for term in split_top_level(s) {
        let term = term.trim();
        if term.is_empty() {
            continue;
        }
        let bad = || format!("unable to parse requirement: {term:?}");
        let req = if let Some(rest) = term.strip_prefix('!') {
            LabelReq::NotExists(rest.trim().to_string())
        } else if let Some(open) = term.find('(') {
            let close = term
                .rfind(')')
                .filter(|c| *c > open && term[c + 1..].trim().is_empty())
                .ok_or_else(bad)?;
            let head = term[..open].trim();
            let (key, op) = head.rsplit_once(char::is_whitespace).ok_or_else(bad)?;
            let values: Vec<String> = term[open + 1..close]
                .split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect();
            if values.iter().any(|v| !valid_value(v)) {
                return Err(bad());
            }
            match op {
                "in" => LabelReq::In(key.trim().to_string(), values),
                "notin" => LabelReq::NotIn(key.trim().to_string(), values),
                _ => return Err(bad()),
            }
        } else if let Some((k, v)) = term.split_once("!=") {
            LabelReq::NotEq(k.trim().to_string(), v.trim().to_string())
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            LabelReq::Eq(k.trim().to_string(), v.trim().to_string())
        } else {
            LabelReq::Exists(term.to_string())
        };
        let (key, value) = match &req {
            LabelReq::Eq(k, v) | LabelReq::NotEq(k, v) => (k, Some(v)),
            LabelReq::Exists(k)
            | LabelReq::NotExists(k)
            | LabelReq::In(k, _)
            | LabelReq::NotIn(k, _) => (k, None),
        };
        if !valid_key(key) || value.is_some_and(|v| !valid_value(v)) {
            return Err(bad());
        }
        reqs.push(req);
    }
    Ok(reqs)
}

/// Whether `obj`'s `metadata.labels` satisfy every requirement.
pub(crate) fn labels_match(reqs: &[LabelReq], obj: &Value) -> bool {
    let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
    let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    reqs.iter().all(|r| match r {
        LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
        LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
        LabelReq::Exists(k) => get(k).is_some(),
        LabelReq::NotExists(k) => get(k).is_none(),
        LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
        LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
    })
}

/// One requirement of a field selector: a dotted path, equal or not equal to a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldReq {
    pub path: Vec<String>,
    pub value: String,
    pub equal: bool,
}

/// Parses a field selector: `metadata.name=x`, `metadata.namespace==y`, `spec.nodeName!=z`.
/// Any dotted path is accepted (the real apiserver allows only a few per resource).
pub(crate) fn parse_field_selector(s: &str) -> Result<Vec<FieldReq>, String> {
    let mut reqs = Vec::new();
    for term in s.split(',') {
        let term = term.trim();
        if term.is_empty() {
            continue;
        }
        let (path, value, equal) = if let Some((p, v)) = term.split_once("!=") {
            (p, v, false)
        } else if let Some((p, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            (p, v, true)
        } else {
            return Err(format!(
                "invalid selector: '{term}'; can't understand '{term}'"
            ));
        };
        let path: Vec<String> = path.trim().split('.').map(str::to_string).collect();
        if path.iter().any(String::is_empty) {
            return Err(format!("invalid field selector: {term:?}"));
        }
        reqs.push(FieldReq {
            path,
            value: value.trim().to_string(),
            equal,
        });
    }
    Ok(reqs)
}

/// Whether `obj` satisfies every field requirement (a missing field reads as "").
pub(crate) fn fields_match(reqs: &[FieldReq], obj: &Value) -> bool {
    reqs.iter().all(|r| {
        let mut cur = Some(obj);
        for seg in &r.path {
            cur = cur.and_then(|c| c.get(seg));
        }
        let actual = match cur {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        (actual == r.value) == r.equal
    })
}

/// RFC 7386 JSON merge patch (also used for strategic merge and apply patches; `$`-prefixed
/// strategic-merge directives are ignored).
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if k.starts_with('$') {
                continue;
            }
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// A server-side apply patch by `manager` (on the status subresource with `status`): a JSON
/// merge patch, except for `status.conditions`, which is a list keyed by `type` as in
/// Kubernetes: each applied condition replaces the one of its type or is added, and a condition
/// the manager applied before and no longer names is removed, unless another manager applied
/// it too. What each manager applied is kept in `metadata.managedFields`, in the API server's
/// shape (`f:status` / `f:conditions` / `k:{"type":...}`), for the conditions alone.
pub(crate) fn apply_patch(target: &mut Value, patch: &Value, manager: &str, status: bool) {
    let applied: Vec<Value> = patch
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut rest = patch.clone();
    if let Some(st) = rest.get_mut("status").and_then(Value::as_object_mut) {
        st.remove("conditions");
    }
    merge_patch(target, &rest);
    let type_of = |c: &Value| c.get("type").and_then(Value::as_str).map(String::from);
    let now: std::collections::BTreeSet<String> = applied.iter().filter_map(type_of).collect();
    let subresource = if status { "status" } else { "" };
    let mut entries: Vec<Value> = target
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let is_mine = |e: &Value| {
        e.get("manager").and_then(Value::as_str) == Some(manager)
            && e.get("operation").and_then(Value::as_str) == Some("Apply")
            && e.get("subresource").and_then(Value::as_str).unwrap_or("") == subresource
    };
    let mut before = std::collections::BTreeSet::new();
    let mut others = std::collections::BTreeSet::new();
    for e in &entries {
        let types = condition_keys(e);
        if is_mine(e) {
            before.extend(types);
        } else {
            others.extend(types);
        }
    }
    if !now.is_empty() || !before.is_empty() {
        let mut conditions: Vec<Value> = target
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        conditions.retain(|c| {
            type_of(c)
                .is_none_or(|t| now.contains(&t) || !before.contains(&t) || others.contains(&t))
        });
        for c in applied {
            match conditions.iter_mut().find(|x| type_of(x) == type_of(&c)) {
                Some(x) => *x = c,
                None => conditions.push(c),
            }
        }
        if !target.get("status").is_some_and(Value::is_object) {
            target["status"] = Value::Object(Map::new());
        }
        if let Some(st) = target.get_mut("status").and_then(Value::as_object_mut) {
            if conditions.is_empty() {
                st.remove("conditions");
            } else {
                st.insert("conditions".into(), Value::Array(conditions));
            }
        }
    }
    entries.retain(|e| !is_mine(e));
    if !now.is_empty() {
        let keys: Map<String, Value> = now
            .iter()
            .map(|t| {
                let key = serde_json::json!({ "type": t }).to_string();
                (format!("k:{key}"), Value::Object(Map::new()))
            })
            .collect();
        entries.push(serde_json::json!({
            "manager": manager,
            "operation": "Apply",
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "subresource": subresource,
            "fieldsV1": {"f:status": {"f:conditions": keys}},
        }));
    }
    if !target.get("metadata").is_some_and(Value::is_object) {
        target["metadata"] = Value::Object(Map::new());
    }
    if let Some(m) = target.get_mut("metadata").and_then(Value::as_object_mut) {
        if entries.is_empty() {
            m.remove("managedFields");
        } else {
            m.insert("managedFields".into(), Value::Array(entries));
        }
    }
}

/// The condition types a managedFields entry owns.
fn condition_keys(entry: &Value) -> Vec<String> {
    entry
        .pointer("/fieldsV1/f:status/f:conditions")
        .and_then(Value::as_object)
        .map(|keys| {
            keys.keys()
                .filter_map(|k| k.strip_prefix("k:"))
                .filter_map(|k| serde_json::from_str::<Value>(k).ok())
                .filter_map(|k| k.get("type").and_then(Value::as_str).map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn pointer_tokens(ptr: &str) -> Result<Vec<String>, String> {
    if ptr.is_empty() {
        return Ok(Vec::new());
    }
    let rest = ptr
        .strip_prefix('/')
        .ok_or_else(|| format!("invalid JSON pointer {ptr:?}"))?;
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn array_index(tok: &str, len: usize, allow_end: bool) -> Result<usize, String> {
    if allow_end && tok == "-" {
        return Ok(len);
    }
    let i: usize = tok
        .parse()
        .map_err(|_| format!("invalid array index {tok:?}"))?;
    let max = if allow_end {
        len
    } else {
        len.saturating_sub(1)
    };
    if i > max || (!allow_end && len == 0) {
        return Err(format!("array index {i} out of bounds"));
    }
    Ok(i)
}

fn parent_mut<'a>(doc: &'a mut Value, toks: &[String]) -> Result<&'a mut Value, String> {
    let mut cur = doc;
    for t in toks {
        cur = match cur {
            Value::Object(m) => m
                .get_mut(t)
                .ok_or_else(|| format!("missing path element {t:?}"))?,
            Value::Array(a) => {
                let i = array_index(t, a.len(), false)?;
                &mut a[i]
            }
            _ => return Err(format!("path element {t:?} is not in a container")),
        };
    }
    Ok(cur)
}

fn get_at(doc: &Value, ptr: &str) -> Result<Value, String> {
    doc.pointer(ptr)
        .cloned()
        .ok_or_else(|| format!("doc is missing path {ptr:?}"))
}

fn add_at(doc: &mut Value, ptr: &str, value: Value) -> Result<(), String> {
    let toks = pointer_tokens(ptr)?;
    let Some((last, parents)) = toks.split_last() else {
        *doc = value;
        return Ok(());
    };
    match parent_mut(doc, parents)? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
        }
        Value::Array(a) => {
            let i = array_index(last, a.len(), true)?;
            a.insert(i, value);
        }
        _ => return Err(format!("cannot add at {ptr:?}")),
    }
    Ok(())
}

fn remove_at(doc: &mut Value, ptr: &str) -> Result<Value, String> {
    let toks = pointer_tokens(ptr)?;
    let Some((last, parents)) = toks.split_last() else {
        return Err("cannot remove the whole document".into());
    };
    match parent_mut(doc, parents)? {
        Value::Object(m) => m
            .remove(last)
            .ok_or_else(|| format!("doc is missing path {ptr:?}")),
        Value::Array(a) => {
            let i = array_index(last, a.len(), false)?;
            Ok(a.remove(i))
        }
        _ => Err(format!("cannot remove at {ptr:?}")),
    }
}

/// RFC 6902 JSON patch: add, remove, replace, move, copy, test.
pub(crate) fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), String> {
    let ops = ops
        .as_array()
        .ok_or("a JSON patch must be an array of operations")?;
    for op in ops {
        let name = op
            .get("op")
            .and_then(Value::as_str)
            .ok_or("operation without \"op\"")?;
        let path = op
            .get("path")
            .and_then(Value::as_str)
            .ok_or("operation without \"path\"")?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| format!("{name} operation without \"value\""))
        };
        let from = || {
            op.get("from")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("{name} operation without \"from\""))
        };
        match name {
            "add" => add_at(doc, path, value()?)?,
            "remove" => {
                remove_at(doc, path)?;
            }
            "replace" => {
                let v = value()?;
                get_at(doc, path)?;
                if path.is_empty() {
                    *doc = v;
                } else {
                    remove_at(doc, path)?;
                    add_at(doc, path, v)?;
                }
            }
            "move" => {
                let v = remove_at(doc, from()?)?;
                add_at(doc, path, v)?;
            }
            "copy" => {
                let v = get_at(doc, from()?)?;
                add_at(doc, path, v)?;
            }
            "test" => {
                if get_at(doc, path)? != value()? {
                    return Err(format!("testing value {path} failed"));
                }
            }
            other => return Err(format!("unknown JSON patch operation {other:?}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn query_and_decoding() {
        let q = parse_query("a=1&labelSelector=app%3Dweb%2Ctier+in+%28x%2Cy%29&bad=%zz%&flag");
        assert_eq!(q[0], ("a".into(), "1".into()));
        assert_eq!(q[1].1, "app=web,tier in (x,y)");
        assert_eq!(q[2].1, "%zz%");
        assert_eq!(q[3], ("flag".into(), String::new()));
    }

    #[test]
    fn label_selectors() {
        let obj = json!({"metadata": {"labels": {"app": "web", "tier": "x"}}});
        let ok = |s: &str| labels_match(&parse_label_selector(s).unwrap(), &obj);
        assert!(ok("app=web"));
        assert!(ok("app==web,tier"));
        assert!(ok("app!=db,!missing"));
        assert!(ok("tier in (x, y),app notin (db)"));
        assert!(!ok("app=db"));
        assert!(!ok("missing"));
        assert!(!ok("tier notin (x)"));
        assert!(ok(""));
        assert!(parse_label_selector("a b=c").is_err());
        assert!(parse_label_selector("a in (x").is_err());
        assert!(parse_label_selector("=x").is_err());
    }

    #[test]
    fn field_selectors() {
        let obj = json!({"metadata": {"name": "a", "namespace": "ns"}, "spec": {"port": 80}});
        let ok = |s: &str| fields_match(&parse_field_selector(s).unwrap(), &obj);
        assert!(ok("metadata.name=a,metadata.namespace==ns"));
        assert!(ok("metadata.name!=b"));
        assert!(ok("spec.port=80"));
        assert!(ok("spec.missing="));
        assert!(!ok("metadata.name=b"));
        assert!(parse_field_selector("metadata.name").is_err());
    }

    #[test]
    fn apply_merges_conditions_by_type_and_drops_what_a_manager_no_longer_applies() {
        let cond = |t: &str, m: &str| json!({"type": t, "status": "True", "message": m});
        let types = |doc: &Value| -> Vec<String> {
            doc["status"]["conditions"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|c| {
                            format!(
                                "{}={}",
                                c["type"].as_str().unwrap(),
                                c["message"].as_str().unwrap()
                            )
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut doc = json!({"metadata": {"name": "web"}, "status": {"loadBalancer": {}}});
        let by = |c: Value| json!({"apiVersion": "v1", "kind": "Service", "status": {"conditions": [c]}});
        apply_patch(&mut doc, &by(cond("A", "1")), "alloc", true);
        apply_patch(&mut doc, &by(cond("B", "x")), "announce", true);
        assert_eq!(types(&doc), ["A=1", "B=x"]);
        // Each manager's apply replaces its own condition, leaving the other's.
        apply_patch(&mut doc, &by(cond("B", "y")), "announce", true);
        apply_patch(&mut doc, &by(cond("A", "2")), "alloc", true);
        assert_eq!(types(&doc), ["A=2", "B=y"]);
        // An apply without its condition removes it; the other stays.
        apply_patch(
            &mut doc,
            &json!({"apiVersion": "v1", "kind": "Service"}),
            "announce",
            true,
        );
        assert_eq!(types(&doc), ["A=2"]);
        assert_eq!(
            doc["metadata"]["managedFields"].as_array().map(Vec::len),
            Some(1)
        );
        assert!(doc["status"]["loadBalancer"].is_object());
        // A condition another manager applied too stays when one stops applying it.
        apply_patch(&mut doc, &by(cond("A", "3")), "other", true);
        apply_patch(
            &mut doc,
            &json!({"apiVersion": "v1", "kind": "Service"}),
            "alloc",
            true,
        );
        assert_eq!(types(&doc), ["A=3"]);
        apply_patch(
            &mut doc,
            &json!({"apiVersion": "v1", "kind": "Service"}),
            "other",
            true,
        );
        assert!(types(&doc).is_empty());
        assert!(doc["metadata"].get("managedFields").is_none());
    }

    #[test]
    fn patches() {
        let mut doc = json!({"a": {"b": 1, "c": [1, 2]}, "d": "x"});
        merge_patch(
            &mut doc,
            &json!({"a": {"b": null, "e": 2}, "$retainKeys": ["a"], "d": [1]}),
        );
        assert_eq!(doc, json!({"a": {"c": [1, 2], "e": 2}, "d": [1]}));
        json_patch(
            &mut doc,
            &json!([
                {"op": "test", "path": "/a/e", "value": 2},
                {"op": "add", "path": "/a/c/-", "value": 3},
                {"op": "replace", "path": "/d", "value": "y"},
                {"op": "copy", "from": "/d", "path": "/f~1g"},
                {"op": "move", "from": "/a/e", "path": "/h"},
                {"op": "remove", "path": "/a/c/0"}
            ]),
        )
        .unwrap();
        assert_eq!(
            doc,
            json!({"a": {"c": [2, 3]}, "d": "y", "f/g": "y", "h": 2})
        );
        assert!(
            json_patch(
                &mut doc,
                &json!([{"op": "test", "path": "/d", "value": "z"}])
            )
            .is_err()
        );
        assert!(json_patch(&mut doc, &json!([{"op": "remove", "path": "/nope"}])).is_err());
        assert!(
            json_patch(
                &mut doc,
                &json!([{"op": "add", "path": "/a/c/9", "value": 1}])
            )
            .is_err()
        );
        assert!(json_patch(&mut doc, &json!({"op": "add"})).is_err());
    }
}
