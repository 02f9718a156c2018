//! vipflow's Load_Balancer rows as OVSDB columns, both ways: read from a row, written for a
//! planned row, and the identity a guarded insert waits on.

use super::*;
use crate::plan::str_map::StrMap;

pub(super) fn str_of(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::Atom(a) => a.as_str().map(str::to_owned),
        Value::Set(s) if s.len() == 1 => {
            s.iter().next().and_then(|a| a.as_str()).map(str::to_owned)
        }
        _ => None,
    }
}

pub(super) fn map_of(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_map)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.as_str()?.to_owned(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

pub(super) fn uuids_of(v: Option<&Value>) -> BTreeSet<Uuid> {
    v.map(|v| v.to_set().iter().filter_map(Atom::as_uuid).collect())
        .unwrap_or_default()
}

/// A row's `protocol` (empty: TCP, as OVN reads it).
pub(super) fn parse_protocol(s: Option<&str>) -> Option<Protocol> {
    Protocol::from_name(s.unwrap_or("tcp"))
}

pub(super) fn parse_key(ext: &BTreeMap<String, String>, protocol: Option<&str>) -> Option<LbKey> {
    let (ns, name) = ext.get(OWNER_KEY)?.split_once('/')?;
    let scope = Scope::parse(ext.get(SCOPE_KEY)?)?;
    Some(LbKey {
        owner: ServiceKey::new(ns, name),
        protocol: parse_protocol(protocol)?,
        scope,
    })
}

/// The string pairs of a map column, in order; other atoms are skipped (as [`map_of`] does).
pub(super) fn str_pairs(v: Option<&Value>) -> impl Iterator<Item = (&str, &str)> + Clone {
    v.and_then(Value::as_map)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.as_str()?, v.as_str()?)))
}

/// One of our rows from its columns; `None` if it is not ours (or ours but unreadable: left
/// alone).
pub(super) fn read_lb(uuid: Uuid, row: &Row) -> Option<ObservedLb> {
    let external_ids = map_of(row.get("external_ids"));
    let protocol = str_of(row.get("protocol"));
    let key = parse_key(&external_ids, protocol.as_deref())?;
    let name = str_of(row.get("name")).unwrap_or_default();
    let vars = if key.scope == Scope::Template {
        super::template_vars::named_in(str_pairs(row.get("vips")))
    } else {
        Vec::new()
    };
    Some(ObservedLb {
        uuid,
        key,
        content: LbDigest::observed(&name, row),
        vars,
    })
}

pub(super) fn smap(m: &BTreeMap<String, String>) -> Value {
    Value::map(m.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

fn strmap(m: &StrMap) -> Value {
    Value::map(m.iter())
}

pub(super) fn lb_columns(d: &LbRow) -> Row {
    let mut row = insert_columns(d);
    // An update must clear mappings that are no longer planned.
    row.insert("ip_port_mappings".to_string(), strmap(&d.ip_port_mappings));
    row
}

/// The columns of a new row: those holding their default (empty) value are left out, which
/// is less for the server to parse and store.
pub(super) fn insert_columns(d: &LbRow) -> Row {
    let mut row = Row::from([
        ("name".to_string(), Value::Atom(Atom::string(&d.name))),
        (
            "protocol".to_string(),
            Value::set([d.key.protocol.as_str()]),
        ),
        ("vips".to_string(), strmap(&d.vips)),
        ("options".to_string(), strmap(&d.options)),
        ("external_ids".to_string(), strmap(&d.external_ids)),
    ]);
    if !d.ip_port_mappings.is_empty() {
        row.insert("ip_port_mappings".to_string(), strmap(&d.ip_port_mappings));
    }
    row
}

pub(super) fn same_content(o: &ObservedLb, d: &LbRow) -> bool {
    o.content == LbDigest::planned(d)
}

/// Conditions selecting the rows with `key`'s identity.
pub(super) fn identity(key: &LbKey) -> Vec<Condition> {
    vec![
        Condition::includes(
            "external_ids",
            Value::map([
                (OWNER_KEY, key.owner.to_string()),
                (SCOPE_KEY, key.scope.to_string()),
            ]),
        ),
        Condition::eq("protocol", Value::set([key.protocol.as_str()])),
    ]
}
