//! Helpers and fixtures shared by the tests of this module.

use super::*;
use crate::decode::parse;

/// Parse fixture text; the fixtures themselves must be clean.
pub(super) fn load(yaml: &str) -> Objects {
    let l = parse(yaml).expect("fixture parses");
    assert!(l.problems.is_empty(), "fixture problems: {:?}", l.problems);
    l.objects
}

pub(super) fn build(yaml: &str) -> Model {
    Model::build(&load(yaml), &ModelOptions::default())
}

pub(super) fn build_class(yaml: &str, class: &str) -> Model {
    Model::build(
        &load(yaml),
        &ModelOptions {
            load_balancer_class: Some(class.into()),
        },
    )
}

/// Every VIP:port/proto as `ns/name VIP:port/proto`.
pub(super) fn vip_ports(m: &Model) -> Vec<String> {
    m.vip_ports()
        .map(|(k, vp)| format!("{k} {}", SocketLike::of(vp)))
        .collect()
}

pub(super) fn problems(m: &Model) -> Vec<String> {
    m.problems.iter().map(ToString::to_string).collect()
}

pub(super) fn service<'a>(m: &'a Model, ns: &str, name: &str) -> &'a Service {
    &m.services[&ServiceKey::new(ns, name)]
}

pub(super) fn list(items: &[String]) -> String {
    format!("apiVersion: v1\nkind: List\nitems:\n{}", items.concat())
}
