//! Keeps one bridge's flows equal to the plan.
//!
//! - **Identity**: a flow is identified by (table, priority, normalized match), as OpenFlow
//!   itself does; its cookie and instructions are its content. Only flows under vipflow's
//!   cookie prefix are ever read, replaced or deleted (deletes are strict and carry the exact
//!   cookie), so foreign flows are never touched.
//! - **Ports**: the uplink and patch port are named in the config or found in the node's OVS
//!   database, and their numbers taken from it and checked against PORT_DESC
//!   ([`crate::plan::ports`]); PORT_STATUS and a monitor of the database both trigger a new
//!   resolution.
//! - **Full sync** (after connecting, and whenever a port number or the bridge MAC changes):
//!   read our flows with one flow-stats request filtered by cookie/mask, diff, apply the
//!   difference in one ONF bundle.
//! - **Incremental** (a new plan while connected): diff the last applied set against the new
//!   one, no read needed, and bundle just the delta.
//! - A bundle the switch rejects is retried without the flows it named (each reported), so one
//!   bad flow never holds back the rest; on any connection loss the reconciler reconnects with
//!   exponential backoff and does a full sync.

use crate::config::{BridgeConfig, format_mac};
use crate::plan::flows::{PlannedFlow, PortRef, Resolved, steer_rewrite};
use crate::plan::ports::{self, OvsDb, PortError, Role};
use crate::plan::service_index::{FlowDelta, FlowIndex};
use crate::reconcile::ovs;
use openflow::action::port as ofport;
use openflow::message::PortStatus;
use openflow::multipart::FlowStatsRequest;
use openflow::oxm::MacAddr;
use openflow::port::PortReason;
use openflow::{
    Config as OfConfig, ConnError, Connection, Event, FlowMod, Instruction, Match, Message,
};
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// What the reconciler is asked to make true: a plan and its generation number.
#[derive(Debug, Clone, Default)]
pub struct Desired {
    pub generation: u64,
    /// The whole plan, by flow key (a persistent map: cheap to hand over).
    pub flows: FlowIndex,
    /// What changed since plan `generation - 1`. A reconciler that applied that plan writes
    /// just these keys; any other falls back to a full diff.
    pub delta: Option<FlowDelta>,
    /// This node's OVN gateway router MAC, from its Node annotation
    /// ([`crate::model::gateway_router_mac`]).
    pub router_mac: Option<MacAddr>,
}

/// Something about the bridge that keeps flows from working as planned, reported in the
/// status and the log while it lasts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, thiserror::Error)]
pub enum BridgeProblem {
    /// A role's port could not be found.
    #[error("{0}")]
    Ports(String),
    #[error(
        "{bridge}: the OVS database {remote} is unreachable ({reason}): ports are looked up by name in OpenFlow PORT_DESC only (names of at most 15 bytes; no default uplink/patch)"
    )]
    OvsDbUnreachable {
        bridge: String,
        remote: String,
        reason: String,
    },
    #[error(
        "{bridge}: its MAC {bridge_mac} ({mac_from}) differs from the OVN gateway router's {router_mac} (Node annotation k8s.ovn.org/l3-gateway-config): VIP traffic steered into OVN is rewritten to the router's MAC"
    )]
    RouterMacDiffers {
        bridge: String,
        bridge_mac: String,
        mac_from: &'static str,
        router_mac: String,
    },
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
    /// Times flows changed by someone else were found and put back.
    pub drift_repairs: u64,
    /// What keeps the bridge's flows from working as planned (ports not found, the OVS
    /// database unreachable, a gateway router MAC that differs from the bridge's).
    pub problems: Vec<BridgeProblem>,
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
    /// The node's OVS database (`unix:PATH`, `tcp:HOST:PORT`); `None`: ports by OpenFlow name
    /// only.
    pub ovs_db: Option<String>,
    pub openflow: OfConfig,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// How often to try again while the switch accepts no connection at all (its socket is
    /// missing or refuses). Such a try costs one failed connect, so it is short: flows return
    /// this soon after ovs-vswitchd is back, however long it was gone.
    pub connect_retry: Duration,
    /// A session that lasted this long was healthy: the next one starts with the shortest
    /// wait. One that failed sooner (a peer that drops every session right after the
    /// handshake) waits the current backoff, which doubles, so it is not hammered.
    pub healthy_after: Duration,
    /// How often vipflow's flows are read back and compared with what it wrote (`None`: never).
    pub audit_interval: Option<Duration>,
}

/// What is known of the bridge's ports: PORT_DESC (OpenFlow names, cut to 15 bytes, by
/// number), the LOCAL port's MAC, and the OVS database.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ports {
    pub desc: BTreeMap<u32, String>,
    pub local_mac: Option<MacAddr>,
    pub db: OvsDb,
}

impl Ports {
    /// From PORT_DESC alone (the database not consulted).
    pub fn from_desc(ports: &[openflow::Port]) -> Ports {
        let mut p = Ports::default();
        p.set_desc(ports);
        p
    }

    /// Replace what PORT_DESC said, keeping the database's view.
    pub fn set_desc(&mut self, ports: &[openflow::Port]) {
        self.desc.clear();
        self.local_mac = None;
        for port in ports {
            self.apply(PortReason::Add, port);
        }
    }

    pub fn apply(&mut self, reason: PortReason, port: &openflow::Port) {
        if port.port_no == ofport::LOCAL {
            self.local_mac = Some(port.hw_addr);
        }
        match reason {
            PortReason::Delete => {
                if self.desc.get(&port.port_no) == Some(&port.name) {
                    self.desc.remove(&port.port_no);
                }
            }
            _ => {
                self.desc.insert(port.port_no, port.name.clone());
            }
        }
    }
}

/// Port numbers and MACs of a bridge's roles, looked up once for many flows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roles {
    pub uplink: Result<u32, PortError>,
    pub patch: Result<u32, PortError>,
    /// The bridge MAC: configured, else the LOCAL port's.
    pub mac: Option<MacAddr>,
    /// Where traffic into OVN is rewritten to ([`steer_rewrite`]).
    pub steer_dst: Option<MacAddr>,
}

impl Roles {
    /// The roles of bridge `b`, given what is known of its ports and this node's gateway
    /// router MAC.
    pub fn of(b: &BridgeConfig, ports: &Ports, router_mac: Option<MacAddr>) -> Roles {
        let mac = b.bridge_mac.or(ports.local_mac);
        Roles {
            uplink: ports::resolve_role(b, Role::Uplink, &ports.desc, &ports.db),
            patch: ports::resolve_role(b, Role::Patch, &ports.desc, &ports.db),
            mac,
            steer_dst: steer_rewrite(b, router_mac, mac),
        }
    }

    /// What is wrong, for the status and the log.
    pub fn problems(&self, b: &BridgeConfig, ports: &Ports) -> Vec<BridgeProblem> {
        let mut out = Vec::new();
        if let OvsDb::Unreachable { remote, reason } = &ports.db {
            out.push(BridgeProblem::OvsDbUnreachable {
                bridge: b.name.clone(),
                remote: remote.clone(),
                reason: reason.clone(),
            });
        }
        for e in [&self.uplink, &self.patch]
            .into_iter()
            .filter_map(|r| r.as_ref().err())
        {
            if e.is_problem() {
                out.push(BridgeProblem::Ports(e.to_string()));
            }
        }
        if let (Some(router), Some(mac)) = (self.steer_dst, self.mac) {
            out.push(BridgeProblem::RouterMacDiffers {
                bridge: b.name.clone(),
                bridge_mac: format_mac(&mac),
                mac_from: if b.bridge_mac.is_some() {
                    "bridge-mac"
                } else {
                    "LOCAL port"
                },
                router_mac: format_mac(&router),
            });
        }
        out.sort();
        out.dedup();
        out
    }

    /// One planned flow with real port numbers, or why it cannot be written now.
    fn resolve(&self, f: &PlannedFlow) -> Result<(FlowId, FlowBody), String> {
        let needs = |p: PortRef| {
            f.in_port == p
                || f.actions
                    .iter()
                    .any(|a| matches!(a, crate::plan::flows::PlannedAction::Output(q) if *q == p))
        };
        let uplink = match &self.uplink {
            Err(e) if needs(PortRef::Uplink) => return Err(e.to_string()),
            r => r.as_ref().copied().unwrap_or(0),
        };
        let patch = match &self.patch {
            Err(e) if needs(PortRef::Patch) => return Err(e.to_string()),
            r => r.as_ref().copied().unwrap_or(0),
        };
        let bridge_mac = match self.mac {
            None if f.dl_src_bridge => return Err("MAC of the bridge unknown".into()),
            m => m.unwrap_or_default(),
        };
        let r = Resolved {
            uplink,
            patch,
            bridge_mac,
            steer_dst: self.steer_dst,
        };
        let fm = f.resolve(&r);
        Ok((
            (fm.table_id, fm.priority, fm.match_),
            FlowBody {
                cookie: fm.cookie,
                instructions: fm.instructions,
            },
        ))
    }
}

/// Turn a plan into concrete flows. Flows whose ports are missing are left out and named in
/// the returned list of skipped keys.
pub fn resolve_plan<'a>(
    flows: impl IntoIterator<Item = &'a PlannedFlow>,
    roles: &Roles,
) -> (FlowSet, Vec<String>) {
    let mut set = FlowSet::new();
    let mut skipped = Vec::new();
    for f in flows {
        match roles.resolve(f) {
            Ok((id, body)) => {
                set.insert(id, body);
            }
            Err(why) => skipped.push(format!("{}: {why}", f.key)),
        }
    }
    (set, skipped)
}

/// What is on the switch, as far as we know, and which planned flow each entry came from, so
/// a change to a few planned flows is written without looking at the others.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    pub set: FlowSet,
    by_key: HashMap<String, FlowId>,
    /// Planned flows that could not be resolved, with why.
    pub skipped: std::collections::BTreeMap<String, String>,
    /// The plan generation `set` reflects; `None` when unknown (keys must be rebuilt).
    pub generation: Option<u64>,
}

/// The messages for a change to some planned flows, and how [`Applied`] looks once they land.
#[derive(Debug, Default)]
pub struct DeltaPlan {
    pub msgs: Vec<Message>,
    removed: Vec<String>,
    put: Vec<(String, FlowId, FlowBody)>,
    skip: Vec<(String, Option<String>)>,
}

impl Applied {
    /// The state after fully applying `flows` (keys rebuilt).
    pub fn from_plan<'a>(
        flows: impl IntoIterator<Item = &'a PlannedFlow>,
        roles: &Roles,
        generation: u64,
    ) -> Applied {
        let mut a = Applied {
            generation: Some(generation),
            ..Default::default()
        };
        for f in flows {
            match roles.resolve(f) {
                Ok((id, body)) => {
                    a.by_key.insert(f.key.clone(), id.clone());
                    a.set.insert(id, body);
                }
                Err(why) => {
                    a.skipped.insert(f.key.clone(), why);
                }
            }
        }
        a
    }

    /// The writes for the planned flows named in `touched`, looked up in `flows`.
    pub fn delta(&self, flows: &FlowIndex, touched: &[String], roles: &Roles) -> DeltaPlan {
        let mut d = DeltaPlan::default();
        let mut adds = Vec::new();
        for key in touched {
            let old = self.by_key.get(key);
            let delete = |id: &FlowId, msgs: &mut Vec<Message>| {
                let cookie = self.set.get(id).map_or(0, |b| b.cookie);
                msgs.push(Message::FlowMod(FlowMod::delete_strict(
                    id.0,
                    id.1,
                    id.2.clone(),
                    cookie,
                    u64::MAX,
                )));
            };
            match flows.get(key).map(|f| roles.resolve(f)) {
                Some(Ok((id, body))) => {
                    let same = old == Some(&id) && self.set.get(&id) == Some(&body);
                    if !same {
                        if let Some(o) = old.filter(|o| **o != id) {
                            delete(o, &mut d.msgs);
                        }
                        adds.push(Message::FlowMod(FlowMod::add(
                            id.0,
                            id.1,
                            body.cookie,
                            id.2.clone(),
                            body.instructions.clone(),
                        )));
                    }
                    d.put.push((key.clone(), id, body));
                    d.skip.push((key.clone(), None));
                }
                Some(Err(why)) => {
                    if let Some(o) = old {
                        delete(o, &mut d.msgs);
                    }
                    d.removed.push(key.clone());
                    d.skip.push((key.clone(), Some(why)));
                }
                None => {
                    if let Some(o) = old {
                        delete(o, &mut d.msgs);
                    }
                    d.removed.push(key.clone());
                    d.skip.push((key.clone(), None));
                }
            }
        }
        // Deletes first: within the bundle order is kept.
        d.msgs.extend(adds);
        d
    }

    /// Record a delta the switch accepted.
    pub fn commit(&mut self, d: DeltaPlan, generation: u64) {
        for key in d.removed {
            if let Some(id) = self.by_key.remove(&key) {
                self.set.remove(&id);
            }
        }
        for (key, id, body) in d.put {
            if let Some(old) = self.by_key.insert(key, id.clone())
                && old != id
            {
                self.set.remove(&old);
            }
            self.set.insert(id, body);
        }
        for (key, why) in d.skip {
            match why {
                Some(w) => {
                    self.skipped.insert(key, w);
                }
                None => {
                    self.skipped.remove(&key);
                }
            }
        }
        self.generation = Some(generation);
    }

    pub fn skipped_list(&self) -> Vec<String> {
        self.skipped
            .iter()
            .map(|(k, w)| format!("{k}: {w}"))
            .collect()
    }
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
    // While the switch is away, say so once (and again every minute), not once per try.
    let mut away_since: Option<std::time::Instant> = None;
    let mut last_warn: Option<std::time::Instant> = None;
    let mut db = DbFeed::new(settings.ovs_db.clone());
    loop {
        let session = Session::connect(&settings, &mut db).await;
        let mut session = match session {
            Ok(s) => s,
            Err(e) => {
                // Nothing accepts: retry soon and cheaply. Anything else (a handshake that
                // fails) backs off, so a broken peer is not hammered.
                let refused = matches!(e, ConnError::Connect { .. });
                let wait = if refused {
                    settings.connect_retry
                } else {
                    backoff
                };
                let since = *away_since.get_or_insert_with(std::time::Instant::now);
                if last_warn.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                    tracing::warn!(bridge = %b.name, target = %settings.target, error = %e, retry_every = ?wait, away_for = ?since.elapsed(), "cannot connect");
                    last_warn = Some(std::time::Instant::now());
                }
                status.send_modify(|s| {
                    s.connected = false;
                    s.last_error = Some(e.to_string());
                });
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    r = desired.changed() => if r.is_err() { return },
                }
                if !refused {
                    backoff = (backoff * 2).min(settings.backoff_max);
                }
                continue;
            }
        };
        match away_since.take() {
            Some(t) => {
                tracing::info!(bridge = %b.name, target = %settings.target, away_for = ?t.elapsed(), "connected")
            }
            None => tracing::info!(bridge = %b.name, target = %settings.target, "connected"),
        }
        let began = std::time::Instant::now();
        let end = session
            .serve(&settings, &mut desired, &status, &mut db)
            .await;
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
                away_since = Some(std::time::Instant::now());
                last_warn = Some(std::time::Instant::now());
                let (wait, next) = backoff_after_session(&settings, began.elapsed(), backoff);
                backoff = next;
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// The pause before the next connect after a session ended, and the backoff after that. A
/// healthy session (one that lasted `healthy_after`) is followed by the short `connect_retry`
/// pause (a switch that is restarting is back soon) and a reset backoff; a short-lived one by
/// the current backoff, doubled for the next time.
fn backoff_after_session(
    s: &BridgeSettings,
    lasted: Duration,
    backoff: Duration,
) -> (Duration, Duration) {
    if lasted >= s.healthy_after {
        (s.connect_retry, s.backoff_min)
    } else {
        (backoff, (backoff * 2).min(s.backoff_max))
    }
}

enum SessionEnd {
    Shutdown,
    Lost(ConnError),
}

/// What the flow monitor reported since vipflow's flows were last made right.
#[derive(Default)]
struct Heard {
    /// Per slot, the last state reported: `None` deleted, `Some(cookie)` there, with content
    /// vipflow did not write.
    slots: BTreeMap<FlowId, Option<u64>>,
    /// Updates were lost (a pause, an unreadable one): only a read-back tells what is there.
    lost: bool,
}

/// With the flow monitor on, the read-back is a safety net and runs at most this often.
const MONITORED_AUDIT: Duration = Duration::from_secs(30);

/// How long after a flow monitor update the flows are read back: the rest of a burst (one
/// `del-flows` is reported flow by flow) arrives meanwhile, and one read answers all of it.
const DRIFT_SETTLE: Duration = Duration::from_millis(10);

/// The flow monitor vipflow keeps on a bridge: every flow added, deleted or modified in its
/// table, by anyone; its own changes come back abbreviated and are ignored.
fn monitor_request(s: &BridgeSettings) -> openflow::monitor::FlowMonitorRequest {
    use openflow::monitor::{FlowMonitorRequest, PORT_ANY, flags};
    FlowMonitorRequest {
        id: 1,
        flags: flags::ADD | flags::DELETE | flags::MODIFY,
        out_port: PORT_ANY,
        table_id: s.bridge.table,
        match_: Match::new(),
    }
}

/// How long a starting reconciler waits for the OVS database's first answer before it goes
/// on without it.
const DB_FIRST_ANSWER: Duration = Duration::from_secs(5);

/// The OVS database as the reconciler follows it.
struct DbFeed {
    rx: watch::Receiver<Option<OvsDb>>,
    _watcher: Option<ovs::Watcher>,
}

impl DbFeed {
    fn new(remote: Option<String>) -> DbFeed {
        match remote {
            Some(r) => {
                let (rx, w) = ovs::watch(r);
                DbFeed {
                    rx,
                    _watcher: Some(w),
                }
            }
            // A fixed value whose sender is gone: `changed` never fires.
            None => DbFeed {
                rx: watch::channel(Some(OvsDb::NotUsed)).1,
                _watcher: None,
            },
        }
    }

    /// The database's first answer (view or unreachable), waited for a bounded time.
    async fn first(&mut self) {
        let _ = tokio::time::timeout(DB_FIRST_ANSWER, self.rx.wait_for(Option::is_some)).await;
    }

    fn current(&mut self) -> OvsDb {
        self.rx
            .borrow_and_update()
            .clone()
            .unwrap_or(OvsDb::Unreachable {
                remote: "the OVS database".into(),
                reason: format!("no answer within {} s", DB_FIRST_ANSWER.as_secs()),
            })
    }

    async fn changed(&mut self) {
        if self.rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

struct Session {
    conn: Connection,
    events: openflow::Events,
    /// The switch reports every change to its flows (the ONF flow monitor): drift is noticed
    /// when it happens, and the periodic read-back is only a safety net.
    monitored: bool,
    /// What the flow monitor reported and is not yet put back.
    heard: Heard,
    ports: Ports,
    /// What we believe is on the switch (after our last successful write).
    applied: Applied,
    /// The gateway router MAC `applied` was resolved with.
    router_mac: Option<MacAddr>,
}

impl Session {
    async fn connect(s: &BridgeSettings, db: &mut DbFeed) -> Result<Session, ConnError> {
        let (conn, events) = Connection::connect(&s.target, s.openflow.clone()).await?;
        // Subscribe before reading the ports, so no change falls between the two.
        conn.subscribe_port_status().await?;
        let mut ports = Ports::from_desc(&conn.port_desc().await?);
        db.first().await;
        ports.db = db.current();
        // Before the first read of our flows, so no change falls between the two.
        let monitored = match conn.multipart(monitor_request(s).to_multipart()).await {
            Ok(_) => true,
            Err(ConnError::Switch(e)) => {
                tracing::info!(bridge = %s.bridge.name, error = %e, "the switch keeps no flow monitor; vipflow's flows are read back every flow-audit-ms instead");
                false
            }
            Err(e) => return Err(e),
        };
        Ok(Session {
            conn,
            events,
            monitored,
            heard: Heard::default(),
            ports,
            applied: Applied::default(),
            router_mac: None,
        })
    }

    fn roles(&self, s: &BridgeSettings, plan: &Desired) -> Roles {
        Roles::of(&s.bridge, &self.ports, plan.router_mac)
    }

    /// Note what a flow monitor message says about vipflow's flows: a change in one of its
    /// (table, priority, match) slots (deleted, modified, or taken by someone else's flow), a
    /// flow carrying its cookie that it did not write, or updates lost (resumed after a
    /// pause, unreadable). Returns whether there is something to check.
    fn hear(
        &mut self,
        s: &BridgeSettings,
        ev: Result<openflow::monitor::MonitorEvent, openflow::DecodeError>,
    ) -> bool {
        use openflow::monitor::{FlowEvent, FlowUpdate, MonitorEvent};
        match ev {
            Ok(MonitorEvent::Updates(updates)) => {
                let mut any = false;
                for u in updates {
                    // Abbreviated entries are this connection's own writes.
                    let FlowUpdate::Full {
                        event,
                        table_id,
                        priority,
                        cookie,
                        match_,
                        ..
                    } = u
                    else {
                        continue;
                    };
                    let id = (table_id, priority, match_.normalized());
                    if cookie & s.cookie_mask != s.cookie_base
                        && !self.applied.set.contains_key(&id)
                    {
                        continue;
                    }
                    let now = (event != FlowEvent::Deleted).then_some(cookie);
                    self.heard.slots.insert(id, now);
                    any = true;
                }
                any
            }
            Ok(MonitorEvent::Paused) => false,
            Ok(MonitorEvent::Resumed) => {
                self.heard.lost = true;
                true
            }
            Err(e) => {
                tracing::warn!(bridge = %s.bridge.name, error = %e, "unreadable flow monitor update; reading vipflow's flows back");
                self.heard.lost = true;
                true
            }
        }
    }

    /// Put back what the flow monitor reported changed, without reading the table: each slot
    /// heard of gets vipflow's flow again (a flow changed without its actions reported cannot
    /// be told from an unchanged one, and writing it again is harmless), and a flow with
    /// vipflow's cookie that it did not write is deleted. Returns false when the switch
    /// refused part of it, so a full sync must follow.
    async fn repair_heard(
        &mut self,
        s: &BridgeSettings,
        status: &watch::Sender<Status>,
    ) -> Result<bool, ConnError> {
        let heard = std::mem::take(&mut self.heard);
        let (mut live, mut want) = (FlowSet::new(), FlowSet::new());
        for (id, now) in heard.slots {
            if let Some(ours) = self.applied.set.get(&id) {
                want.insert(id.clone(), ours.clone());
            }
            if let Some(cookie) = now {
                live.insert(
                    id,
                    FlowBody {
                        cookie,
                        instructions: Vec::new(),
                    },
                );
            }
        }
        let msgs = diff(&live, &want);
        if msgs.is_empty() {
            return Ok(true);
        }
        let changes = msgs.len();
        let rejected = apply_bundle(&self.conn, msgs).await?;
        tracing::warn!(bridge = %s.bridge.name, changes, "vipflow's flows were changed by someone else (heard from the switch's flow monitor); put back");
        status.send_modify(|st| st.drift_repairs += 1);
        Ok(rejected.is_empty())
    }

    async fn serve(
        &mut self,
        s: &BridgeSettings,
        desired: &mut watch::Receiver<Arc<Desired>>,
        status: &watch::Sender<Status>,
        db: &mut DbFeed,
    ) -> SessionEnd {
        let mut need_full = true;
        loop {
            let plan = desired.borrow_and_update().clone();
            if plan.generation == 0 {
                // No plan yet (the placeholder): touch nothing until the first one arrives.
                if desired.changed().await.is_err() {
                    return SessionEnd::Shutdown;
                }
                continue;
            }
            // A new gateway router MAC changes every flow into OVN: a full diff.
            let follows = plan
                .generation
                .checked_sub(1)
                .is_some_and(|g| self.applied.generation == Some(g))
                && plan.router_mac == self.router_mac;
            let r = match &plan.delta {
                _ if need_full => self.full_sync(s, &plan, status).await,
                // The plan right after the one on the switch: write just what changed.
                Some(d) if follows => self.write_delta(s, &plan, d, status).await,
                _ => self.incremental(s, &plan, status).await,
            };
            if let Err(e) = r {
                return SessionEnd::Lost(e);
            }
            need_full = false;
            let monitored = self.monitored;
            let audit_every = |base: Duration| {
                if monitored {
                    base.max(MONITORED_AUDIT)
                } else {
                    base
                }
            };
            let mut audit_at = s
                .audit_interval
                .map(|d| tokio::time::Instant::now() + audit_every(d));
            // A change the flow monitor reported, checked once the burst it belongs to is in.
            let mut check_at: Option<tokio::time::Instant> = None;
            // Wait for a new plan or a port change (on the switch or in the database).
            loop {
                tokio::select! {
                    _ = sleep_until(earliest(audit_at, check_at)) => {
                        let heard_of = check_at.is_some_and(|t| t <= tokio::time::Instant::now());
                        check_at = None;
                        if heard_of && !self.heard.lost {
                            match self.repair_heard(s, status).await {
                                Ok(true) => continue,
                                Ok(false) => {
                                    need_full = true;
                                    break;
                                }
                                Err(e) => return SessionEnd::Lost(e),
                            }
                        }
                        self.heard = Heard::default();
                        let started = std::time::Instant::now();
                        let live = match read_flows(&self.conn, s.cookie_base, s.cookie_mask).await {
                            Ok(l) => l,
                            Err(e) => return SessionEnd::Lost(e),
                        };
                        let cost = started.elapsed();
                        let fixes = diff(&live, &self.applied.set).len();
                        if fixes > 0 {
                            tracing::warn!(bridge = %s.bridge.name, changes = fixes, "vipflow's flows were changed by someone else; putting them back");
                            status.send_modify(|st| st.drift_repairs += 1);
                            need_full = true;
                            break;
                        }
                        // A big table is read less often: at most 5% of the time.
                        audit_at = s
                            .audit_interval
                            .map(|base| tokio::time::Instant::now() + audit_every(base).max(cost * 20));
                    }
                    r = desired.changed() => {
                        if r.is_err() { return SessionEnd::Shutdown; }
                        break;
                    }
                    _ = db.changed() => {
                        let before = self.roles(s, &plan);
                        self.ports.db = db.current();
                        let after = self.roles(s, &plan);
                        if after != before {
                            tracing::info!(bridge = %s.bridge.name, "OVS database change moved a port; full resync");
                            need_full = true;
                            break;
                        }
                        publish_problems(s, status, after.problems(&s.bridge, &self.ports));
                    }
                    ev = self.events.recv() => match ev {
                        Some(Event::Message(h, m)) => {
                            if let Some(ev) = openflow::monitor::monitor_event(&m) {
                                if self.hear(s, ev) {
                                    check_at.get_or_insert_with(|| tokio::time::Instant::now() + DRIFT_SETTLE);
                                }
                                continue;
                            }
                            match m {
                                Message::PortStatus(PortStatus { reason, port }) => {
                                    let before = self.roles(s, &plan);
                                    self.ports.apply(reason, &port);
                                    if self.roles(s, &plan) != before {
                                        tracing::info!(bridge = %s.bridge.name, port = %port.name, port_no = port.port_no, ?reason, "port change; full resync");
                                        need_full = true;
                                        break;
                                    }
                                }
                                Message::Error(e) => {
                                    tracing::warn!(bridge = %s.bridge.name, xid = h.xid, error = %e, "unsolicited error from the switch");
                                }
                                _ => {}
                            }
                        }
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
        self.ports.set_desc(&self.conn.port_desc().await?);
        let observed = read_flows(&self.conn, s.cookie_base, s.cookie_mask).await?;
        self.applied = Applied {
            set: observed,
            ..Applied::default()
        };
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
        let roles = self.roles(s, plan);
        let next = Applied::from_plan(plan.flows.values(), &roles, plan.generation);
        let msgs = diff(&self.applied.set, &next.set);
        let changes = msgs.len();
        let rejected = apply_bundle(&self.conn, msgs).await?;
        for r in &rejected {
            tracing::warn!(bridge = %s.bridge.name, "{r}");
        }
        let mut skipped = next.skipped_list();
        skipped.extend(rejected.iter().cloned());
        self.router_mac = plan.router_mac;
        if rejected.is_empty() {
            self.applied = next;
        } else {
            // We no longer know exactly what landed: read it back (and diff in full next time).
            let set = read_flows(&self.conn, s.cookie_base, s.cookie_mask).await?;
            self.applied = Applied {
                set,
                ..Applied::default()
            };
        }
        self.report(s, plan, status, full, started, changes, skipped);
        Ok(())
    }

    /// Write only the planned flows that changed since the plan on the switch.
    async fn write_delta(
        &mut self,
        s: &BridgeSettings,
        plan: &Desired,
        delta: &FlowDelta,
        status: &watch::Sender<Status>,
    ) -> Result<(), ConnError> {
        let started = std::time::Instant::now();
        let mut d = self
            .applied
            .delta(&plan.flows, &delta.touched, &self.roles(s, plan));
        let msgs = std::mem::take(&mut d.msgs);
        let changes = msgs.len();
        let rejected = apply_bundle(&self.conn, msgs).await?;
        for r in &rejected {
            tracing::warn!(bridge = %s.bridge.name, "{r}");
        }
        if rejected.is_empty() {
            self.applied.commit(d, plan.generation);
        } else {
            let set = read_flows(&self.conn, s.cookie_base, s.cookie_mask).await?;
            self.applied = Applied {
                set,
                ..Applied::default()
            };
        }
        let mut skipped = self.applied.skipped_list();
        skipped.extend(rejected);
        self.report(s, plan, status, false, started, changes, skipped);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn report(
        &self,
        s: &BridgeSettings,
        plan: &Desired,
        status: &watch::Sender<Status>,
        full: bool,
        started: std::time::Instant,
        changes: usize,
        skipped: Vec<String>,
    ) {
        let flows = self.applied.set.len();
        publish_problems(
            s,
            status,
            self.roles(s, plan).problems(&s.bridge, &self.ports),
        );
        if full || changes > 0 {
            tracing::info!(bridge = %s.bridge.name, generation = plan.generation, full, changes, flows, skipped = skipped.len(), "synced");
        }
        status.send_modify(|st| {
            st.connected = true;
            st.applied_generation = Some(plan.generation);
            st.flows = flows;
            st.skipped = skipped;
            st.last_error = None;
            if full {
                st.full_syncs += 1;
            }
            st.syncs += 1;
            st.last_sync = started.elapsed();
        });
    }
}

/// Sleep until `at`, or forever when there is no `at`.
/// The earlier of two optional deadlines.
fn earliest(
    a: Option<tokio::time::Instant>,
    b: Option<tokio::time::Instant>,
) -> Option<tokio::time::Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Put the bridge's problems in its status, logging those that are new.
fn publish_problems(
    s: &BridgeSettings,
    status: &watch::Sender<Status>,
    problems: Vec<BridgeProblem>,
) {
    status.send_if_modified(|st| {
        if st.problems == problems {
            return false;
        }
        for p in problems.iter().filter(|p| !st.problems.contains(p)) {
            tracing::warn!(bridge = %s.bridge.name, problem = %p, "bridge problem");
        }
        for p in st.problems.iter().filter(|p| !problems.contains(p)) {
            tracing::info!(bridge = %s.bridge.name, problem = %p, "bridge problem resolved");
        }
        st.problems = problems;
        true
    });
}
