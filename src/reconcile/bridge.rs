//! Keeps one bridge's flows equal to the plan.
//!
//! - **Identity**: a flow is identified by (table, priority, normalized match), as OpenFlow
//!   itself does; its cookie and instructions are its content. Only flows under vipflow's
//!   cookie prefix are ever read, replaced or deleted (deletes are strict and carry the exact
//!   cookie), so foreign flows are never touched.
//! - **Full sync** (after connecting, and whenever a port number or the bridge MAC changes):
//!   read our flows with one flow-stats request filtered by cookie/mask, diff, apply the
//!   difference in one ONF bundle.
//! - **Incremental** (a new plan while connected): diff the last applied set against the new
//!   one, no read needed, and bundle just the delta.
//! - A bundle the switch rejects is retried without the flows it named (each reported), so one
//!   bad flow never holds back the rest; on any connection loss the reconciler reconnects with
//!   exponential backoff and does a full sync.

use crate::config::BridgeConfig;
use crate::plan::flows::{PlannedFlow, PortRef, Resolved};
use openflow::action::port as ofport;
use openflow::message::PortStatus;
use openflow::multipart::FlowStatsRequest;
use openflow::port::PortReason;
use openflow::{
    Config as OfConfig, ConnError, Connection, Event, FlowMod, Instruction, Match, Message,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// What the reconciler is asked to make true: a plan and its generation number.
#[derive(Debug, Clone, Default)]
pub struct Desired {
    pub generation: u64,
    pub flows: Vec<PlannedFlow>,
}

/// What the reconciler reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub connected: bool,
    /// The generation of the last plan fully applied.
    pub applied_generation: Option<u64>,
    /// Flows of ours on the switch after the last sync.
    pub flows: usize,
    /// Planned flows that could not be written (missing port, rejected by the switch).
    pub skipped: Vec<String>,
    pub last_error: Option<String>,
    pub full_syncs: u64,
    /// Syncs done (full and incremental) and how long the last one took.
    pub syncs: u64,
    pub last_sync: Duration,
}

/// (table, priority, normalized match): how OpenFlow identifies a flow.
pub type FlowId = (u8, u16, Match);

/// A flow's content, compared to decide whether to rewrite it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowBody {
    pub cookie: u64,
    pub instructions: Vec<Instruction>,
}

pub type FlowSet = BTreeMap<FlowId, FlowBody>;

#[derive(Debug, Clone)]
pub struct BridgeSettings {
    pub bridge: BridgeConfig,
    /// OpenFlow target (unix:PATH or tcp:HOST:PORT).
    pub target: String,
    pub cookie_base: u64,
    pub cookie_mask: u64,
    pub openflow: OfConfig,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
}

/// Ports of the bridge by (OpenFlow-truncated) name, and the LOCAL port's MAC.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ports {
    pub by_name: BTreeMap<String, u32>,
    pub local_mac: Option<[u8; 6]>,
}

impl Ports {
    pub fn from_desc(ports: &[openflow::Port]) -> Ports {
        let mut p = Ports::default();
        for port in ports {
            p.apply(PortReason::Add, port);
        }
        p
    }

    pub fn apply(&mut self, reason: PortReason, port: &openflow::Port) {
        if port.port_no == ofport::LOCAL {
            self.local_mac = Some(port.hw_addr);
        }
        match reason {
            PortReason::Delete => {
                if self.by_name.get(&port.name) == Some(&port.port_no) {
                    self.by_name.remove(&port.name);
                }
            }
            _ => {
                self.by_name.insert(port.name.clone(), port.port_no);
            }
        }
    }

    /// Numbers for the bridge's roles; `None` for a role whose port is missing.
    pub fn resolve(&self, b: &BridgeConfig) -> (Option<u32>, Option<u32>, Option<[u8; 6]>) {
        (
            self.by_name.get(&b.uplink).copied(),
            self.by_name.get(&b.patch).copied(),
            b.bridge_mac.or(self.local_mac),
        )
    }
}

/// Turn a plan into concrete flows. Flows whose ports are missing are left out and named in
/// the returned list of skipped keys.
pub fn resolve_plan(
    flows: &[PlannedFlow],
    b: &BridgeConfig,
    ports: &Ports,
) -> (FlowSet, Vec<String>) {
    let (uplink, patch, mac) = ports.resolve(b);
    let mut set = FlowSet::new();
    let mut skipped = Vec::new();
    for f in flows {
        let needs = |p: PortRef| {
            f.in_port == p
                || f.actions
                    .iter()
                    .any(|a| matches!(a, crate::plan::flows::PlannedAction::Output(q) if *q == p))
        };
        let missing = if uplink.is_none() && needs(PortRef::Uplink) {
            Some(format!("port {} not on {}", b.uplink, b.name))
        } else if patch.is_none() && needs(PortRef::Patch) {
            Some(format!("port {} not on {}", b.patch, b.name))
        } else if f.dl_src_bridge && mac.is_none() {
            Some(format!("MAC of {} unknown", b.name))
        } else {
            None
        };
        if let Some(why) = missing {
            skipped.push(format!("{}: {why}", f.key));
            continue;
        }
        let r = Resolved {
            uplink: uplink.unwrap_or(0),
            patch: patch.unwrap_or(0),
            bridge_mac: mac.unwrap_or_default(),
        };
        let fm = f.resolve(&r);
        set.insert(
            (fm.table_id, fm.priority, fm.match_.clone()),
            FlowBody {
                cookie: fm.cookie,
                instructions: fm.instructions,
            },
        );
    }
    (set, skipped)
}

/// The messages that turn `old` into `new`: strict deletes of what goes, adds of what is new
/// or changed (an ADD over an existing (table, priority, match) replaces it, cookie included).
pub fn diff(old: &FlowSet, new: &FlowSet) -> Vec<Message> {
    // Both maps are sorted by the same key: one merge pass, without a tree lookup (and a Match
    // clone) per flow, keeps an incremental change cheap when tens of thousands are installed.
    let mut deletes = Vec::new();
    let mut adds = Vec::new();
    let delete = |((table, prio, m), body): (&FlowId, &FlowBody)| {
        // Exact cookie: of the flows with this match, only ours can be deleted.
        Message::FlowMod(FlowMod::delete_strict(
            *table,
            *prio,
            m.clone(),
            body.cookie,
            u64::MAX,
        ))
    };
    let add = |((table, prio, m), body): (&FlowId, &FlowBody)| {
        Message::FlowMod(FlowMod::add(
            *table,
            *prio,
            body.cookie,
            m.clone(),
            body.instructions.clone(),
        ))
    };
    let (mut o, mut n) = (old.iter().peekable(), new.iter().peekable());
    loop {
        match (o.peek(), n.peek()) {
            (Some(&a), Some(&b)) => match a.0.cmp(b.0) {
                std::cmp::Ordering::Less => {
                    deletes.push(delete(a));
                    o.next();
                }
                std::cmp::Ordering::Greater => {
                    adds.push(add(b));
                    n.next();
                }
                std::cmp::Ordering::Equal => {
                    if a.1 != b.1 {
                        adds.push(add(b));
                    }
                    o.next();
                    n.next();
                }
            },
            (Some(&a), None) => {
                deletes.push(delete(a));
                o.next();
            }
            (None, Some(&b)) => {
                adds.push(add(b));
                n.next();
            }
            (None, None) => break,
        }
    }
    // Deletes, then adds, each in key order: the same messages in the same order as before.
    deletes.append(&mut adds);
    deletes
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
                    instructions: f.instructions,
                },
            )
        })
        .collect())
}

/// Apply `msgs` in one bundle. Flows the switch rejects are dropped and the bundle retried
/// without them, so the rest still lands; returns the rejected flows' descriptions.
pub async fn apply_bundle(
    conn: &Connection,
    mut msgs: Vec<Message>,
) -> Result<Vec<String>, ConnError> {
    let mut rejected = Vec::new();
    // Each retry removes at least one message, so this ends; the cap only bounds the worst
    // case of a switch rejecting flow after flow.
    for _ in 0..8 {
        if msgs.is_empty() {
            return Ok(rejected);
        }
        match conn.bundle(&msgs).await {
            Ok(()) => return Ok(rejected),
            Err(ConnError::Bundle { messages, control }) if !messages.is_empty() => {
                let mut bad: Vec<usize> = messages
                    .iter()
                    .map(|(i, _)| *i)
                    .filter(|&i| i < msgs.len())
                    .collect();
                bad.sort_unstable();
                bad.dedup();
                for (i, e) in messages.iter().filter(|(i, _)| *i < msgs.len()) {
                    let what = match &msgs[*i] {
                        Message::FlowMod(f) => format!(
                            "flow cookie={:#x} priority={} {}",
                            f.cookie, f.priority, f.match_
                        ),
                        _ => "message".into(),
                    };
                    rejected.push(format!("{what}: rejected by the switch: {e}"));
                }
                if bad.is_empty() {
                    return Err(ConnError::Bundle { messages, control });
                }
                for i in bad.into_iter().rev() {
                    msgs.remove(i);
                }
            }
            Err(e) => return Err(e),
        }
    }
    // Still failing: fall back to a non-atomic batch so the good flows land.
    match conn.apply(&msgs).await {
        Ok(()) => Ok(rejected),
        Err(ConnError::Batch(errs)) => {
            rejected.extend(
                errs.into_iter()
                    .map(|(i, e)| format!("message {i}: rejected by the switch: {e}")),
            );
            Ok(rejected)
        }
        Err(e) => Err(e),
    }
}

/// Run the reconciler for one bridge until `desired`'s sender is dropped.
pub async fn run(
    settings: BridgeSettings,
    mut desired: watch::Receiver<Arc<Desired>>,
    status: watch::Sender<Status>,
) {
    let b = &settings.bridge;
    let mut backoff = settings.backoff_min;
    loop {
        let session = Session::connect(&settings).await;
        let mut session = match session {
            Ok(s) => {
                backoff = settings.backoff_min;
                s
            }
            Err(e) => {
                tracing::warn!(bridge = %b.name, target = %settings.target, error = %e, retry_in = ?backoff, "cannot connect");
                status.send_modify(|s| {
                    s.connected = false;
                    s.last_error = Some(e.to_string());
                });
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    r = desired.changed() => if r.is_err() { return },
                }
                backoff = (backoff * 2).min(settings.backoff_max);
                continue;
            }
        };
        tracing::info!(bridge = %b.name, target = %settings.target, "connected");
        let end = session.serve(&settings, &mut desired, &status).await;
        match end {
            SessionEnd::Shutdown => {
                session.conn.close();
                return;
            }
            SessionEnd::Lost(e) => {
                tracing::warn!(bridge = %b.name, error = %e, "connection lost; reconnecting");
                status.send_modify(|s| {
                    s.connected = false;
                    s.last_error = Some(e.to_string());
                });
                // A short pause so a switch that is restarting has time to come back.
                tokio::time::sleep(settings.backoff_min).await;
            }
        }
    }
}

enum SessionEnd {
    Shutdown,
    Lost(ConnError),
}

struct Session {
    conn: Connection,
    events: openflow::Events,
    ports: Ports,
    /// What we believe is on the switch (after our last successful write).
    applied: FlowSet,
}

impl Session {
    async fn connect(s: &BridgeSettings) -> Result<Session, ConnError> {
        let (conn, events) = Connection::connect(&s.target, s.openflow.clone()).await?;
        // Subscribe before reading the ports, so no change falls between the two.
        conn.subscribe_port_status().await?;
        let ports = Ports::from_desc(&conn.port_desc().await?);
        Ok(Session {
            conn,
            events,
            ports,
            applied: FlowSet::new(),
        })
    }

    async fn serve(
        &mut self,
        s: &BridgeSettings,
        desired: &mut watch::Receiver<Arc<Desired>>,
        status: &watch::Sender<Status>,
    ) -> SessionEnd {
        let mut need_full = true;
        loop {
            let plan = desired.borrow_and_update().clone();
            let r = if need_full {
                self.full_sync(s, &plan, status).await
            } else {
                self.incremental(s, &plan, status).await
            };
            if let Err(e) = r {
                return SessionEnd::Lost(e);
            }
            need_full = false;
            // Wait for a new plan or a port change.
            loop {
                tokio::select! {
                    r = desired.changed() => {
                        if r.is_err() { return SessionEnd::Shutdown; }
                        break;
                    }
                    ev = self.events.recv() => match ev {
                        Some(Event::Message(_, Message::PortStatus(PortStatus { reason, port }))) => {
                            let before = self.ports.resolve(&s.bridge);
                            self.ports.apply(reason, &port);
                            if self.ports.resolve(&s.bridge) != before {
                                tracing::info!(bridge = %s.bridge.name, port = %port.name, port_no = port.port_no, ?reason, "port change; full resync");
                                need_full = true;
                                break;
                            }
                        }
                        Some(Event::Message(h, Message::Error(e))) => {
                            tracing::warn!(bridge = %s.bridge.name, xid = h.xid, error = %e, "unsolicited error from the switch");
                        }
                        Some(Event::Message(..)) => {}
                        Some(Event::Closed(e)) => return SessionEnd::Lost(e),
                        None => return SessionEnd::Lost(ConnError::Closed("event stream ended".into())),
                    },
                }
            }
        }
    }

    async fn full_sync(
        &mut self,
        s: &BridgeSettings,
        plan: &Desired,
        status: &watch::Sender<Status>,
    ) -> Result<(), ConnError> {
        let started = std::time::Instant::now();
        // Port numbers may have changed while we were not looking.
        self.ports = Ports::from_desc(&self.conn.port_desc().await?);
        let observed = read_flows(&self.conn, s.cookie_base, s.cookie_mask).await?;
        self.applied = observed;
        self.write(s, plan, status, true, started).await
    }

    async fn incremental(
        &mut self,
        s: &BridgeSettings,
        plan: &Desired,
        status: &watch::Sender<Status>,
    ) -> Result<(), ConnError> {
        self.write(s, plan, status, false, std::time::Instant::now())
            .await
    }

    async fn write(
        &mut self,
        s: &BridgeSettings,
        plan: &Desired,
        status: &watch::Sender<Status>,
        full: bool,
        started: std::time::Instant,
    ) -> Result<(), ConnError> {
        let (want, mut skipped) = resolve_plan(&plan.flows, &s.bridge, &self.ports);
        let msgs = diff(&self.applied, &want);
        let changes = msgs.len();
        let rejected = apply_bundle(&self.conn, msgs).await?;
        let rejected_any = !rejected.is_empty();
        for r in &rejected {
            tracing::warn!(bridge = %s.bridge.name, "{r}");
        }
        skipped.extend(rejected);
        if rejected_any {
            // We no longer know exactly what landed: read it back.
            self.applied = read_flows(&self.conn, s.cookie_base, s.cookie_mask).await?;
        } else {
            self.applied = want;
        }
        tracing::info!(bridge = %s.bridge.name, generation = plan.generation, full, changes, flows = self.applied.len(), skipped = skipped.len(), "synced");
        status.send_modify(|st| {
            st.connected = true;
            st.applied_generation = Some(plan.generation);
            st.flows = self.applied.len();
            st.skipped = skipped;
            st.last_error = None;
            if full {
                st.full_syncs += 1;
            }
            st.syncs += 1;
            st.last_sync = started.elapsed();
        });
        Ok(())
    }
}
