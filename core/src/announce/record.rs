//! Who announces a Service's VIPs, on the Service itself: the `vipflow.io/Announced` condition
//! in its status, whose message names each announced VIP's node, and the node it came from
//! when it moved (`192.0.2.1 by node-b (from node-a), 2001:db8::1 by node-c`).
//!
//! Sans-IO. Every announcing node places every VIP ([`super::placement`]) and watches every
//! Service, so each one can tell, for every Service, what its record should say and whether
//! the record on the Service says it. Exactly one node writes each change, so that 2,000
//! nodes do not all write one:
//! - a record that should name nodes is written by the owner of its first VIP whose line
//!   changed (the new owner, on a move), or, when only lines went, by the owner of its first
//!   VIP;
//! - a record that should name no one (no VIP of the Service is announced, or the Service has
//!   no VIP left) is removed by the first node it names that is live (the owner that gave the
//!   VIP up), else by the live node that scores best for the Service (its owner died).
//!
//! The record names the node a VIP moved from as the record said it before, not as this node
//! remembers it: the record outlives restarts, so a node that restarts says the same
//! (and its VipAnnounced Event, made from the same lines, is not said again).

use super::placement::NodeName;
use crate::model::ServiceKey;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

/// The condition's type.
pub const CONDITION: &str = "vipflow.io/Announced";
/// The condition's reason.
pub const REASON: &str = "Announced";
/// The field manager of every node's record writes: one for all, so that any node's write
/// replaces (or removes) the whole condition whoever wrote it before.
pub const FIELD_MANAGER: &str = "vipflow-announce";

/// One VIP's line: the node that answers for it, and the one that did before it moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub vip: IpAddr,
    pub node: NodeName,
    pub from: Option<NodeName>,
}

/// What a record says, a line per announced VIP in VIP order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    pub lines: Vec<Line>,
}

/// Why a record's message cannot be read (written by hand, or by another version).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("{part:?}: expected `VIP by NODE` or `VIP by NODE (from NODE)`")]
    Shape { part: String },
    #[error("{part:?}: {vip:?} is not an IP address")]
    Vip { part: String, vip: String },
    #[error("{part:?}: {node:?} is not a node name")]
    Node { part: String, node: String },
}

impl Record {
    /// The condition's message.
    pub fn message(&self) -> String {
        let mut out = String::new();
        for (i, l) in self.lines.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str(&format!("{} by {}", l.vip, l.node));
            if let Some(f) = &l.from {
                out.push_str(&format!(" (from {f})"));
            }
        }
        out
    }

    /// A message read back.
    pub fn parse(message: &str) -> Result<Record, RecordError> {
        let mut lines = Vec::new();
        for part in message.split(", ").filter(|p| !p.trim().is_empty()) {
            let shape = || RecordError::Shape { part: part.into() };
            let (vip, rest) = part.trim().split_once(" by ").ok_or_else(shape)?;
            let (node, from) = match rest.split_once(" (from ") {
                Some((node, f)) => (node, Some(f.strip_suffix(')').ok_or_else(shape)?)),
                None => (rest, None),
            };
            let vip = vip.parse().map_err(|_| RecordError::Vip {
                part: part.into(),
                vip: vip.into(),
            })?;
            let name = |n: &str| {
                if is_node_name(n) {
                    Ok(NodeName::from(n))
                } else {
                    Err(RecordError::Node {
                        part: part.into(),
                        node: n.into(),
                    })
                }
            };
            lines.push(Line {
                vip,
                node: name(node)?,
                from: from.map(name).transpose()?,
            });
        }
        lines.sort_by_key(|l| l.vip);
        Ok(Record { lines })
    }

    fn line(&self, vip: IpAddr) -> Option<&Line> {
        self.lines
            .binary_search_by_key(&vip, |l| l.vip)
            .ok()
            .map(|i| &self.lines[i])
    }
}

/// A Node's name as Kubernetes allows it (a DNS subdomain), so that it reads back from a
/// message: nothing that separates the message's parts.
fn is_node_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

/// A write this node owes a Service's record: its message, or `None` to remove it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Want {
    pub service: ServiceKey,
    pub message: Option<Arc<str>>,
}

/// The VIPs this node announces of one Service, each with the node it came from.
pub type Here = Vec<(IpAddr, Option<NodeName>)>;

/// What this node has to do about the records, and what it announces per Service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordPlan {
    /// The records this node writes, where they do not say what they should yet, by Service.
    pub writes: Vec<Want>,
    /// The VIPs this node announces, per Service with any, each with the node it came from.
    pub here: Vec<(ServiceKey, Here)>,
}

/// Where the VIPs are, as this node sees them.
pub struct View<'a> {
    /// This node.
    pub node: &'a str,
    /// Every VIP's owner.
    pub owners: &'a imbl::OrdMap<IpAddr, NodeName>,
    /// The live nodes, sorted.
    pub live: &'a [NodeName],
}

/// The records of every Service: `services` gives each Service's VIPs (ascending), `current`
/// the messages on the Services that have a record.
pub fn plan<'a>(
    view: &View<'_>,
    services: impl IntoIterator<Item = (&'a ServiceKey, &'a [IpAddr])>,
    current: &HashMap<ServiceKey, &str>,
) -> RecordPlan {
    let mut out = RecordPlan::default();
    let mut visited: std::collections::HashSet<&ServiceKey> = std::collections::HashSet::new();
    for (key, vips) in services {
        let cur = current.get(key).copied();
        if cur.is_some() {
            visited.insert(key);
        }
        one(view, key, vips, cur, &mut out);
    }
    // Records on Services without a VIP (any more): only a removal can be owed.
    if visited.len() < current.len() {
        let mut rest: Vec<(&ServiceKey, &str)> = (current.iter())
            .filter(|(k, _)| !visited.contains(k))
            .map(|(k, m)| (k, *m))
            .collect();
        rest.sort();
        for (key, msg) in rest {
            one(view, key, &[], Some(msg), &mut out);
        }
    }
    out.writes.sort_by(|a, b| a.service.cmp(&b.service));
    out
}

/// One Service's part of [`plan`].
fn one(
    view: &View<'_>,
    key: &ServiceKey,
    vips: &[IpAddr],
    cur: Option<&str>,
    out: &mut RecordPlan,
) {
    // A record that cannot be read is one to replace (or remove) whole.
    let read: Option<Record> = cur.and_then(|m| Record::parse(m).ok());
    let mut want = Record::default();
    for vip in vips {
        let Some(node) = view.owners.get(vip) else {
            continue;
        };
        let from = match read.as_ref().and_then(|c| c.line(*vip)) {
            Some(l) if &l.node == node => l.from.clone(),
            Some(l) => Some(l.node.clone()),
            None => None,
        };
        want.lines.push(Line {
            vip: *vip,
            node: node.clone(),
            from,
        });
    }
    let here: Here = (want.lines.iter())
        .filter(|l| &*l.node == view.node)
        .map(|l| (l.vip, l.from.clone()))
        .collect();
    if !here.is_empty() {
        out.here.push((key.clone(), here));
    }
    let writer: Option<&str> = if want.lines.is_empty() {
        // Nothing to announce: a record goes, whatever it says.
        cur.and_then(|_| {
            let named_live = (read.iter().flat_map(|r| &r.lines))
                .map(|l| &l.node)
                .find(|n| view.live.binary_search(n).is_ok());
            named_live.or_else(|| scribe(key, view.live)).map(|n| &**n)
        })
    } else if read.as_ref() == Some(&want) {
        None
    } else {
        let changed =
            (want.lines.iter()).find(|l| read.as_ref().and_then(|c| c.line(l.vip)) != Some(*l));
        changed.or(want.lines.first()).map(|l| &*l.node)
    };
    if writer == Some(view.node) {
        out.writes.push(Want {
            service: key.clone(),
            message: (!want.lines.is_empty()).then(|| want.message().into()),
        });
    }
}

/// The live node that scores best for `key` (rendezvous hashing, as VIPs are placed): who
/// removes a record that names no live node.
pub fn scribe<'a>(key: &ServiceKey, live: &'a [NodeName]) -> Option<&'a NodeName> {
    let score = |node: &str| {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        for part in [
            key.namespace.as_bytes(),
            key.name.as_bytes(),
            node.as_bytes(),
        ] {
            h.update(&(part.len() as u64).to_le_bytes());
            h.update(part);
        }
        h.digest()
    };
    live.iter().max_by(|a, b| {
        score(a)
            .cmp(&score(b))
            .then_with(|| b.as_ref().cmp(a.as_ref()))
    })
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
