//! Kubernetes label selectors (`matchLabels`, `matchExpressions`), evaluated as the API server
//! does: every requirement must hold; an empty selector matches everything.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::BTreeMap;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SelectorError {
    #[error("unknown selector operator `{0}` (In, NotIn, Exists, DoesNotExist)")]
    UnknownOperator(String),
    #[error("selector operator `{operator}` on `{key}` needs values")]
    NoValues { key: String, operator: String },
    #[error("selector operator `{operator}` on `{key}` takes no values")]
    UnexpectedValues { key: String, operator: String },
}

/// Check a selector once, when its pool is read: a bad one makes the pool unusable (with
/// the reason), rather than silently matching nothing.
pub fn check(sel: &LabelSelector) -> Result<(), SelectorError> {
    for e in sel.match_expressions.iter().flatten() {
        let values = e.values.as_ref().map_or(0, |v| v.len());
        match e.operator.as_str() {
            "In" | "NotIn" if values == 0 => {
                return Err(SelectorError::NoValues {
                    key: e.key.clone(),
                    operator: e.operator.clone(),
                });
            }
            "Exists" | "DoesNotExist" if values > 0 => {
                return Err(SelectorError::UnexpectedValues {
                    key: e.key.clone(),
                    operator: e.operator.clone(),
                });
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => return Err(SelectorError::UnknownOperator(other.to_owned())),
        }
    }
    Ok(())
}

/// Whether an advertisement that names `names` and selects `selectors` covers the pool `pool`
/// with `labels`, by MetalLB's rule (its users' objects mean the same here): one that names
/// and selects no pool covers every pool; otherwise a pool it names or one of whose selectors
/// matches (a name no pool has covers none; a selector that cannot be read matches none).
pub fn selects_pool(
    names: &[String],
    selectors: &[LabelSelector],
    pool: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    if names.is_empty() && selectors.is_empty() {
        return true;
    }
    names.iter().any(|n| n == pool)
        || selectors
            .iter()
            .any(|s| check(s).is_ok() && matches(s, labels))
}

/// Whether `labels` satisfy `sel` (checked with [`check`] first: a bad requirement matches
/// nothing).
pub fn matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let exact = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    exact
        && sel.match_expressions.iter().flatten().all(|e| {
            let has = |v: &String| e.values.iter().flatten().any(|x| x == v);
            match e.operator.as_str() {
                "In" => labels.get(&e.key).is_some_and(has),
                "NotIn" => !labels.get(&e.key).is_some_and(has),
                "Exists" => labels.contains_key(&e.key),
                "DoesNotExist" => !labels.contains_key(&e.key),
                _ => false,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn req(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn every_requirement_must_hold() {
        let sel = LabelSelector {
            match_labels: Some(labels(&[("team", "a")])),
            match_expressions: Some(vec![
                req("tier", "In", &["web", "api"]),
                req("legacy", "DoesNotExist", &[]),
                req("env", "NotIn", &["test"]),
            ]),
        };
        assert!(check(&sel).is_ok());
        assert!(matches(&sel, &labels(&[("team", "a"), ("tier", "web")])));
        assert!(!matches(&sel, &labels(&[("team", "b"), ("tier", "web")])));
        assert!(!matches(
            &sel,
            &labels(&[("team", "a"), ("tier", "web"), ("legacy", "")])
        ));
        assert!(!matches(
            &sel,
            &labels(&[("team", "a"), ("tier", "web"), ("env", "test")])
        ));
        assert!(matches(&LabelSelector::default(), &labels(&[])));
    }

    #[test]
    fn bad_requirements_are_named() {
        let bad = |r| LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![r]),
        };
        assert_eq!(
            check(&bad(req("a", "Gt", &["1"]))),
            Err(SelectorError::UnknownOperator("Gt".into()))
        );
        assert!(matches!(
            check(&bad(req("a", "In", &[]))),
            Err(SelectorError::NoValues { .. })
        ));
        assert!(matches!(
            check(&bad(req("a", "Exists", &["x"]))),
            Err(SelectorError::UnexpectedValues { .. })
        ));
    }
}
