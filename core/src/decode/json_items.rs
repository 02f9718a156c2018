//! Cutting a JSON List (`kubectl get -o json`) into its items, so each is parsed on its own
//! (see [`super::objects_text`]): on several cores the first time, and from the item cache
//! for every item an earlier version of the file had.
//!
//! The cut only finds where each value ends (strings, escapes and nesting); what the values
//! hold is left to serde_json. Whatever it does not expect (no `items` array, an item that
//! is not an object, a key with an escape, text after the document) gives the text back to
//! the whole-document path, which says what is wrong with it.

use super::text_depth::{SPECIAL, past_string};

/// A JSON List cut at its items: the root's own text (its `items` emptied) and each item's.
#[derive(Debug)]
pub struct JsonList<'a> {
    pub root: String,
    pub items: Vec<&'a str>,
}

/// Cut `text` into a [`JsonList`], or `None` when it is not one this can cut.
pub fn split_json_list(text: &str) -> Option<JsonList<'_>> {
    let b = text.as_bytes();
    let mut i = skip_ws(b, 0);
    if *b.get(i)? != b'{' {
        return None;
    }
    i = skip_ws(b, i + 1);
    // `{}` too is no List: its first key is missing.
    let mut found: Option<(usize, usize, Vec<&str>)> = None;
    loop {
        if *b.get(i)? != b'"' {
            return None;
        }
        let key_end = end_of_string(b, i)?;
        let key = &b[i + 1..key_end - 1];
        if key.contains(&b'\\') {
            return None;
        }
        i = skip_ws(b, key_end);
        if *b.get(i)? != b':' {
            return None;
        }
        i = skip_ws(b, i + 1);
        if key == b"items" {
            if found.is_some() {
                return None;
            }
            let (end, items) = items_of(text, i)?;
            found = Some((i, end, items));
            i = end;
        } else {
            i = end_of_value(b, i)?;
        }
        i = skip_ws(b, i);
        match *b.get(i)? {
            b',' => i = skip_ws(b, i + 1),
            b'}' => break,
            _ => return None,
        }
    }
    if skip_ws(b, i + 1) != b.len() {
        return None;
    }
    let (start, end, items) = found?;
    let mut root = String::with_capacity(text.len() - (end - start) + 2);
    root.push_str(&text[..start]);
    root.push_str("[]");
    root.push_str(&text[end..]);
    Some(JsonList { root, items })
}

/// The items of the array at `i`, each an object; and where the array ends.
fn items_of(text: &str, mut i: usize) -> Option<(usize, Vec<&str>)> {
    let b = text.as_bytes();
    if *b.get(i)? != b'[' {
        return None;
    }
    let mut items = Vec::new();
    i = skip_ws(b, i + 1);
    if *b.get(i)? == b']' {
        return Some((i + 1, items));
    }
    loop {
        if *b.get(i)? != b'{' {
            return None;
        }
        let end = end_of_value(b, i)?;
        items.push(text.get(i..end)?);
        i = skip_ws(b, end);
        match *b.get(i)? {
            b',' => i = skip_ws(b, i + 1),
            b']' => return Some((i + 1, items)),
            _ => return None,
        }
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(i) {
        i += 1;
    }
    i
}

/// Where the string starting at `i` (its `"`) ends: just after its closing `"`.
fn end_of_string(b: &[u8], i: usize) -> Option<usize> {
    past_string(b, i + 1)
}

/// Where the value starting at `i` ends: just after it.
fn end_of_value(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => end_of_string(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                while !SPECIAL[*b.get(j)? as usize] {
                    j += 1;
                }
                match b[j] {
                    b'"' => {
                        j = end_of_string(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while let Some(c) = b.get(j) {
                if matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                    break;
                }
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

/// Texts that are no JSON List this can cut: for the tests of this cut and of the agent's
/// streamed one, which must refuse the same.
pub const NOT_LISTS: &[&str] = &[
    "",
    "[]",
    "{}",
    r#"{"kind": "Service"}"#,
    r#"{"items": [1, 2]}"#,
    r#"{"items": {"a": 1}}"#,
    r#"{"items": [], "items": []}"#,
    r#"{"it\u0065ms": [{}]}"#,
    r#"{"items": [{}]} {"items": []}"#,
    r#"{"items": [{"a": 1}"#,
    r#"{"items": [{"a": "open}]}"#,
    r#"{"items" [{}]}"#,
    r#"{"items": [{}] "kind": "List"}"#,
    r#"{"items": [{},]}"#,
    r#"{"items": [{} {}]}"#,
    r#"{"a": "items": [{}]}"#,
    r#"{"items": [{}}"#,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_is_cut_at_its_items_and_its_root_keeps_the_rest() {
        let text = r#" {"apiVersion": "v1", "items": [ {"a": "x,}]\"{"}, {"b": [1, {"c": 2}]} ],
            "kind": "List", "metadata": {"resourceVersion": ""}} "#;
        let l = split_json_list(text).expect("a List");
        assert_eq!(l.items, [r#"{"a": "x,}]\"{"}"#, r#"{"b": [1, {"c": 2}]}"#]);
        let root: serde_json::Value = serde_json::from_str(&l.root).expect("root");
        assert_eq!(
            root,
            serde_json::json!({"apiVersion": "v1", "items": [], "kind": "List",
                "metadata": {"resourceVersion": ""}})
        );
    }

    #[test]
    fn an_empty_list_has_no_items() {
        let l = split_json_list(r#"{"items":[],"kind":"List"}"#).expect("a List");
        assert!(l.items.is_empty());
        assert_eq!(l.root, r#"{"items":[],"kind":"List"}"#);
    }

    #[test]
    fn what_it_cannot_cut_goes_to_the_whole_document_path() {
        for text in NOT_LISTS {
            assert!(split_json_list(text).is_none(), "{text}");
        }
    }

    #[test]
    fn cutting_never_panics_on_any_prefix() {
        let text =
            r#"{"apiVersion":"v1","items":[{"a":"\"x\\","b":[{}]},{"c":null}],"kind":"List"}"#;
        for end in 0..=text.len() {
            let _ = split_json_list(&text[..end]);
        }
    }
}
