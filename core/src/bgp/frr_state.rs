//! What FRR says of itself, read from its JSON: the prefixes bgpd originates, its BGP sessions
//! and its BFD sessions. FRR's output is a peer's input: a shape vipflow does not know is an
//! error naming what was asked, never a panic, and fields FRR adds are ignored.

use ipnet::IpNet;
use serde_json::Value;
use std::collections::BTreeSet;
use std::net::IpAddr;

/// FRR answered something vipflow cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("FRR's answer to {what} is not what vipflow reads: {detail}")]
pub struct FrrAnswerError {
    pub what: &'static str,
    pub detail: String,
}

fn parse(json: &str, what: &'static str) -> Result<Value, FrrAnswerError> {
    serde_json::from_str(json).map_err(|e| FrrAnswerError {
        what,
        detail: e.to_string(),
    })
}

/// What one `show bgp <family> unicast json` answer says of bgpd's default BGP instance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BgpTable {
    /// The instance's AS; `None` when bgpd has no default instance (it was never configured,
    /// or a restarted bgpd lost its configuration).
    pub local_as: Option<u32>,
    /// The prefixes bgpd originates itself: those with a path of its own (no peer: `peerId`
    /// `(unspec)`), not the routes it learned.
    pub originated: BTreeSet<IpNet>,
}

/// The BGP instance and what it originates, from one `show bgp <family> unicast json` answer.
pub fn bgp_table(json: &str) -> Result<BgpTable, FrrAnswerError> {
    const WHAT: &str = "show bgp unicast json";
    let bad = |detail: String| FrrAnswerError { what: WHAT, detail };
    let v = parse(json, WHAT)?;
    let local_as = v
        .get("localAS")
        .and_then(Value::as_u64)
        .and_then(|a| u32::try_from(a).ok());
    let Some(routes) = v.get("routes") else {
        // An address family with nothing in it is answered without `routes`.
        return Ok(BgpTable {
            local_as,
            originated: BTreeSet::new(),
        });
    };
    let routes = routes
        .as_object()
        .ok_or_else(|| bad("`routes` is not an object".into()))?;
    let mut out = BTreeSet::new();
    for (prefix, paths) in routes {
        let own = paths
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["peerId"] == "(unspec)"));
        if own {
            out.insert(
                prefix
                    .parse()
                    .map_err(|_| bad(format!("{prefix:?} is not a prefix")))?,
            );
        }
    }
    Ok(BgpTable {
        local_as,
        originated: out,
    })
}

/// One BGP session, in one address family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BgpSession {
    pub peer: IpAddr,
    /// `ipv4Unicast`, `ipv6Unicast`, as FRR names the family.
    pub family: String,
    pub remote_as: Option<u32>,
    /// FRR's word for the state (`Established`, `Active`, `Connect`, ...).
    pub state: String,
    pub prefixes_sent: Option<u64>,
    pub prefixes_received: Option<u64>,
}

impl BgpSession {
    pub fn established(&self) -> bool {
        self.state == "Established"
    }
}

/// The sessions in a `show bgp summary json` answer (every family, each under its name) or a
/// `show bgp <family> unicast summary json` one (one family, unnamed: `family` is empty).
pub fn bgp_sessions(json: &str) -> Result<Vec<BgpSession>, FrrAnswerError> {
    const WHAT: &str = "show bgp summary json";
    let bad = |detail: String| FrrAnswerError { what: WHAT, detail };
    let v = parse(json, WHAT)?;
    let top = v
        .as_object()
        .ok_or_else(|| bad("the answer is not an object".into()))?;
    let families: Vec<(&str, &Value)> = if top.contains_key("peers") {
        vec![("", &v)]
    } else {
        top.iter()
            .filter(|(_, f)| f.get("peers").is_some())
            .map(|(name, f)| (name.as_str(), f))
            .collect()
    };
    let mut out = Vec::new();
    for (family, f) in families {
        let peers = f["peers"]
            .as_object()
            .ok_or_else(|| bad(format!("{family}: `peers` is not an object")))?;
        for (peer, p) in peers {
            // A peer group or an interface peer is named, not addressed: not vipflow's.
            let Ok(peer) = peer.parse::<IpAddr>() else {
                continue;
            };
            let num = |k: &str| p.get(k).and_then(Value::as_u64);
            out.push(BgpSession {
                peer,
                family: family.to_string(),
                remote_as: num("remoteAs").and_then(|a| u32::try_from(a).ok()),
                state: p
                    .get("state")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad(format!("{peer}: no `state`")))?
                    .to_string(),
                prefixes_sent: num("pfxSnt"),
                prefixes_received: num("pfxRcd"),
            });
        }
    }
    Ok(out)
}

/// One BFD session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BfdSession {
    pub peer: IpAddr,
    /// FRR's word for the state (`up`, `down`, `init`).
    pub status: String,
    /// The intervals the session runs at, in milliseconds, and its multiplier.
    pub receive_ms: Option<u64>,
    pub transmit_ms: Option<u64>,
    pub multiplier: Option<u64>,
}

impl BfdSession {
    pub fn up(&self) -> bool {
        self.status == "up"
    }
}

/// The sessions in a `show bfd peers json` answer.
pub fn bfd_sessions(json: &str) -> Result<Vec<BfdSession>, FrrAnswerError> {
    const WHAT: &str = "show bfd peers json";
    let bad = |detail: String| FrrAnswerError { what: WHAT, detail };
    let v = parse(json, WHAT)?;
    let peers = v
        .as_array()
        .ok_or_else(|| bad("the answer is not a list".into()))?;
    let mut out = Vec::new();
    for p in peers {
        let peer = p
            .get("peer")
            .and_then(Value::as_str)
            .and_then(|s| s.parse::<IpAddr>().ok())
            .ok_or_else(|| bad(format!("a session without a peer address: {p}")))?;
        let num = |k: &str| p.get(k).and_then(Value::as_u64);
        out.push(BfdSession {
            peer,
            status: p
                .get("status")
                .and_then(Value::as_str)
                .ok_or_else(|| bad(format!("{peer}: no `status`")))?
                .to_string(),
            receive_ms: num("receive-interval"),
            transmit_ms: num("transmit-interval"),
            multiplier: num("detect-multiplier"),
        });
    }
    Ok(out)
}

#[cfg(test)]
#[path = "frr_state_tests.rs"]
mod tests;
