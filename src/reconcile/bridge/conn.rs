//! The bridge reconciler's OpenFlow I/O: reading vipflow's flows back and writing changes in
//! one bundle, one message made at a time.

use super::BridgeSettings;
use openflow::multipart::FlowStatsRequest;
use openflow::{ConnError, Connection, Message};
use vipflow_core::reconcile::bridge::{FlowBody, FlowSet};

/// Hand each of vipflow's flows on the switch to `each`, as they arrive.
pub(super) async fn read_each(
    conn: &Connection,
    s: &BridgeSettings,
    each: impl FnMut(openflow::multipart::FlowStats),
) -> Result<(), ConnError> {
    conn.flow_stats_each(
        FlowStatsRequest::by_cookie(s.cookie_base, s.cookie_mask),
        each,
    )
    .await
}

/// Our flows as the switch has them.
pub async fn read_flows(
    conn: &Connection,
    cookie_base: u64,
    cookie_mask: u64,
) -> Result<FlowSet, ConnError> {
    let stats = conn
        .flow_stats(FlowStatsRequest::by_cookie(cookie_base, cookie_mask))
        .await?;
    Ok(stats
        .into_iter()
        .map(|f| {
            (
                (f.table_id, f.priority, f.match_.normalized()),
                FlowBody {
                    cookie: f.cookie,
                    // As the plan makes them: a switch that reports an equivalent form
                    // (OXM headers in a reg move, an empty apply-actions) holds the same flow.
                    instructions: openflow::instruction::canonical(f.instructions),
                },
            )
        })
        .collect())
}

/// Apply `msgs` in one bundle. Flows the switch rejects are dropped and the bundle retried
/// without them, so the rest still lands; returns the rejected flows' descriptions.
pub async fn apply_bundle(conn: &Connection, msgs: Vec<Message>) -> Result<Vec<String>, ConnError> {
    let rejected = apply_each(conn, msgs.len(), |i| msgs.get(i).cloned()).await?;
    Ok(rejected.into_iter().map(|(_, why)| why).collect())
}

/// [`apply_bundle`] for `count` messages made one at a time by `message` (`None`: nothing to
/// send for that index), each made when it is encoded and not before. Returns the indices
/// the switch rejected, each with a description.
pub async fn apply_each(
    conn: &Connection,
    count: usize,
    message: impl Fn(usize) -> Option<Message> + Sync,
) -> Result<Vec<(usize, String)>, ConnError> {
    let mut rejected = Vec::new();
    // The indices still to send: made again for every try, never held as messages.
    let mut live: Vec<usize> = (0..count).collect();
    let described = |i: usize, e: &openflow::ErrorMsg| {
        message(i).map_or_else(
            || format!("message {i}: rejected by the switch: {e}"),
            |m| describe(&m, e),
        )
    };
    // Each retry removes at least one message, so this ends; the cap only bounds the worst
    // case of a switch rejecting flow after flow.
    for _ in 0..8 {
        if live.is_empty() {
            return Ok(rejected);
        }
        match conn.bundle_each(live.len(), |j| message(live[j])).await {
            Ok(()) => return Ok(rejected),
            Err(ConnError::Bundle { messages, control }) if !messages.is_empty() => {
                let mut bad: Vec<usize> = messages
                    .iter()
                    .map(|(i, _)| *i)
                    .filter(|&i| i < live.len())
                    .collect();
                bad.sort_unstable();
                bad.dedup();
                for (j, e) in messages.iter().filter(|(j, _)| *j < live.len()) {
                    rejected.push((live[*j], described(live[*j], e)));
                }
                if bad.is_empty() {
                    return Err(ConnError::Bundle { messages, control });
                }
                for j in bad.into_iter().rev() {
                    live.remove(j);
                }
            }
            Err(e) => return Err(e),
        }
    }
    // Still failing: fall back to a non-atomic batch so the good flows land.
    match conn.apply_each(live.len(), |j| message(live[j])).await {
        Ok(()) => Ok(rejected),
        Err(ConnError::Batch(errs)) => {
            rejected.extend(
                errs.into_iter()
                    .filter(|(j, _)| *j < live.len())
                    .map(|(j, e)| (live[j], described(live[j], &e))),
            );
            Ok(rejected)
        }
        Err(e) => Err(e),
    }
}

fn describe(m: &Message, e: &openflow::ErrorMsg) -> String {
    let what = match m {
        Message::FlowMod(f) => format!(
            "flow cookie={:#x} priority={} {}",
            f.cookie, f.priority, f.match_
        ),
        _ => "message".into(),
    };
    format!("{what}: rejected by the switch: {e}")
}
