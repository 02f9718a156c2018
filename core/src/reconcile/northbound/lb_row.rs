//! vipflow's Load_Balancer rows as OVSDB columns, both ways: read from a row, written for a
//! planned row, and the identity a guarded insert waits on.

use crate::keys::{OWNER_KEY, SCOPE_KEY};
use crate::model::Protocol;
use crate::model::ServiceKey;
use crate::plan::northbound::LbKey;
use crate::plan::northbound::LbRow;
use crate::plan::northbound::Scope;
use crate::plan::str_map::StrMap;
use crate::reconcile::northbound::observed::LbDigest;
use crate::reconcile::northbound::observed::ObservedLb;
use ovsdb::Atom;
use ovsdb::Condition;
use ovsdb::Row;
use ovsdb::Uuid;
use ovsdb::Value;
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::sync::Arc;

// The Load_Balancer columns vipflow reads and writes, each named once: every list of them below
// and in the writer's monitor is made of these.
pub const NAME: &str = "name";
pub const PROTOCOL: &str = "protocol";
pub const VIPS: &str = "vips";
pub const OPTIONS: &str = "options";
pub const EXTERNAL_IDS: &str = "external_ids";
pub const IP_PORT_MAPPINGS: &str = "ip_port_mappings";

/// Every column vipflow reads: the writer's monitor and snapshot ask for these.
pub const COLUMNS: [&str; 6] = [
    NAME,
    PROTOCOL,
    VIPS,
    OPTIONS,
    EXTERNAL_IDS,
    IP_PORT_MAPPINGS,
];
/// The map columns a row's digest covers (beside its name), in the digest's order.
pub const DIGESTED: [&str; 4] = [VIPS, OPTIONS, EXTERNAL_IDS, IP_PORT_MAPPINGS];

pub fn str_of(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::Atom(a) => a.as_str().map(str::to_owned),
        Value::Set(s) if s.len() == 1 => {
            s.iter().next().and_then(|a| a.as_str()).map(str::to_owned)
        }
        _ => None,
    }
}

pub fn map_of(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_map)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.as_str()?.to_owned(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

pub fn uuids_of(v: Option<&Value>) -> BTreeSet<Uuid> {
    v.map(|v| v.to_set().iter().filter_map(Atom::as_uuid).collect())
        .unwrap_or_default()
}

/// A row's `protocol` (empty: TCP, as OVN reads it).
pub fn parse_protocol(s: Option<&str>) -> Option<Protocol> {
    Protocol::from_name(s.unwrap_or("tcp"))
}

pub fn parse_key(ext: &BTreeMap<String, String>, protocol: Option<&str>) -> Option<LbKey> {
    let (ns, name) = ext.get(OWNER_KEY)?.split_once('/')?;
    let scope = Scope::parse(ext.get(SCOPE_KEY)?)?;
    Some(LbKey {
        owner: ServiceKey::new(ns, name),
        protocol: parse_protocol(protocol)?,
        scope,
    })
}

/// The string pairs of a map column, in order; other atoms are skipped (as [`map_of`] does).
pub fn str_pairs(v: Option<&Value>) -> impl Iterator<Item = (&str, &str)> + Clone {
    v.and_then(Value::as_map)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.as_str()?, v.as_str()?)))
}

/// One of our rows from its columns; `None` if it is not ours (or ours but unreadable: left
/// alone).
pub fn read_lb(uuid: Uuid, row: &Row) -> Option<ObservedLb> {
    let external_ids = map_of(row.get(EXTERNAL_IDS));
    let protocol = str_of(row.get(PROTOCOL));
    let key = parse_key(&external_ids, protocol.as_deref())?;
    let summarized = match (row.get(&DIGEST_A), row.get(&DIGEST_B)) {
        (Some(Value::Atom(Atom::Integer(a))), Some(Value::Atom(Atom::Integer(b)))) => {
            Some(LbDigest::from_parts(*a as u64, *b as u64))
        }
        _ => None,
    };
    let vars = match (key.scope == Scope::Template, row.get(&VARS)) {
        (false, _) => Vec::new(),
        (true, Some(Value::Set(vars))) => vars
            .iter()
            .filter_map(|a| a.as_str().map(str::to_owned))
            .collect(),
        (true, _) => super::template_vars::named_in(str_pairs(row.get(VIPS))),
    };
    let content = match summarized {
        Some(d) => d,
        None => LbDigest::observed(&str_of(row.get(NAME)).unwrap_or_default(), row),
    };
    Some(ObservedLb {
        uuid,
        key,
        content,
        vars,
    })
}

/// The columns [`lb_summary`] adds: the digest's halves and the template variables.
static DIGEST_A: std::sync::LazyLock<Arc<str>> =
    std::sync::LazyLock::new(|| Arc::from("_vipflow_digest_a"));
static DIGEST_B: std::sync::LazyLock<Arc<str>> =
    std::sync::LazyLock::new(|| Arc::from("_vipflow_digest_b"));
static VARS: std::sync::LazyLock<Arc<str>> =
    std::sync::LazyLock::new(|| Arc::from("_vipflow_vars"));

/// A Load_Balancer row as the writer's monitor keeps it (its [`ovsdb::monitor::Projection`]):
/// for one of ours, its protocol, its owner and scope, the digest of what a diff compares and
/// the template variables its VIPs name, which is all `read_lb` reads; for another's,
/// nothing. Each row is made so as it is decoded: the snapshot the writer takes after a large
/// first sync never holds every row whole. Applied to its own output, it changes nothing.
pub fn lb_summary(_table: &str, row: Row) -> Row {
    if row.contains_key(&DIGEST_A) || row.is_empty() {
        return row;
    }
    let Some(o) = read_lb(Uuid::nil(), &row) else {
        return Row::new();
    };
    let (a, b) = o.content.parts();
    let mut cols: Vec<(Arc<str>, Value)> = Vec::with_capacity(5);
    for (name, v) in row {
        match &*name {
            PROTOCOL => cols.push((name, v)),
            EXTERNAL_IDS => {
                let ours = str_pairs(Some(&v)).filter(|(k, _)| *k == OWNER_KEY || *k == SCOPE_KEY);
                cols.push((name, Value::map(ours)));
            }
            _ => {}
        }
    }
    // Stored as integers: the halves' bits as they are.
    cols.push((Arc::clone(&DIGEST_A), Value::Atom(Atom::Integer(a as i64))));
    cols.push((Arc::clone(&DIGEST_B), Value::Atom(Atom::Integer(b as i64))));
    if !o.vars.is_empty() {
        cols.push((
            Arc::clone(&VARS),
            Value::set(o.vars.iter().map(String::as_str)),
        ));
    }
    cols.into_iter().collect()
}

pub fn smap(m: &BTreeMap<String, String>) -> Value {
    Value::map(m.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

fn strmap(m: &StrMap) -> Value {
    Value::map(m.iter())
}

pub fn lb_columns(d: &LbRow) -> Row {
    let mut row = insert_columns(d);
    // An update must clear mappings that are no longer planned.
    row.insert(IP_PORT_MAPPINGS.to_string(), strmap(&d.ip_port_mappings));
    row
}

/// The columns of a new row: those holding their default (empty) value are left out, which
/// is less for the server to parse and store.
pub fn insert_columns(d: &LbRow) -> Row {
    let mut row = Row::from([
        (NAME.to_string(), Value::Atom(Atom::string(&d.name))),
        (PROTOCOL.to_string(), Value::set([d.key.protocol.as_str()])),
        (VIPS.to_string(), strmap(&d.vips)),
        (OPTIONS.to_string(), strmap(&d.options)),
        (EXTERNAL_IDS.to_string(), strmap(&d.external_ids)),
    ]);
    if !d.ip_port_mappings.is_empty() {
        row.insert(IP_PORT_MAPPINGS.to_string(), strmap(&d.ip_port_mappings));
    }
    row
}

pub fn same_content(o: &ObservedLb, d: &LbRow) -> bool {
    o.content == LbDigest::planned(d)
}

/// Conditions selecting the rows with `key`'s identity.
pub fn identity(key: &LbKey) -> Vec<Condition> {
    vec![
        Condition::includes(
            EXTERNAL_IDS,
            Value::map([
                (OWNER_KEY, key.owner.to_string()),
                (SCOPE_KEY, key.scope.to_string()),
            ]),
        ),
        Condition::eq(PROTOCOL, Value::set([key.protocol.as_str()])),
    ]
}
