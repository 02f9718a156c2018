//! The bridge reconciler's task: the OpenFlow session (connect, port tracking, the flow
//! monitor, full and incremental writes) and the reconnect loop around it.

use crate::announce::Announcing;
use crate::plan::flows::FlowKey;
use crate::reconcile::ovs::DbFeed;
use openflow::message::PortStatus;
use openflow::{ConnError, Connection, Event, Match, Message};
use retry::{Backoff, Policy};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

use super::BridgeSettings;
use super::conn::{apply_bundle, apply_each, read_each};
use super::garp;
use super::programmed::BrIntFlows;
use vipflow_core::reconcile::bridge::Heard;
use vipflow_core::reconcile::bridge::*;
use vipflow_core::reconcile::bridge::{Applied, FullSync, Making};
use vipflow_core::reconcile::error::{ReconcileError, ReconcileErrorKind};

/// Run the reconciler for one bridge until `desired`'s sender is dropped.
///
/// Connects go by one backoff ([`retry`]'s rule): the wait doubles from `backoff_min` to
/// `backoff_max` after every session that was not up `healthy_after`, whatever ended it (a
/// failed handshake, a lost connection, a request that timed out), and only a session up that
/// long starts it over. A connect that nothing accepts (the node's own switch is restarting:
/// its socket is missing or refuses) opens no session: it is tried again every
/// `connect_retry`, cheaply, so that the flows are back as soon as the switch is.
pub async fn run(
    settings: BridgeSettings,
    mut desired: watch::Receiver<Arc<DesiredFlows>>,
    status: watch::Sender<BridgeStatus>,
) {
    let b = &settings.bridge;
    let mut backoff = Backoff::new(
        Policy::new(settings.backoff_min, settings.backoff_max)
            .with_healthy_after(settings.healthy_after),
    );
    // While the switch is away, say so once (and again every minute), not once per try.
    let mut away_since: Option<std::time::Instant> = None;
    let mut last_warn: Option<std::time::Instant> = None;
    let mut db = DbFeed::new(settings.ovs_db.clone());
    loop {
        let session = BridgeSession::connect(&settings, &mut db).await;
        let mut session = match session {
            Ok(s) => s,
            Err(e) => {
                let wait = if matches!(e, ConnError::Connect { .. }) {
                    settings.connect_retry
                } else {
                    backoff.after_failure()
                };
                let since = *away_since.get_or_insert_with(std::time::Instant::now);
                if last_warn.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                    tracing::warn!(bridge = %b.name, target = %settings.target, error = %e, retry_in = ?wait, away_for = ?since.elapsed(), "cannot connect");
                    last_warn = Some(std::time::Instant::now());
                }
                status.send_modify(|s| {
                    s.connected = false;
                    s.last_error =
                        Some(ReconcileError::new(ReconcileErrorKind::OpenflowConnect, &e));
                });
                if !pause(&mut desired, wait).await {
                    return;
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
                let wait = backoff.after_session(began.elapsed());
                tracing::warn!(bridge = %b.name, error = %e, retry_in = ?wait, "connection lost; reconnecting");
                status.send_modify(|s| {
                    s.connected = false;
                    s.last_error =
                        Some(ReconcileError::new(ReconcileErrorKind::OpenflowSession, &e));
                });
                away_since = Some(std::time::Instant::now());
                last_warn = Some(std::time::Instant::now());
                if !pause(&mut desired, wait).await {
                    return;
                }
            }
        }
    }
}

/// Sleep `wait`; false if `desired`'s sender went meanwhile (the agent stops). A new plan does
/// not cut the wait short: it is written once connected.
async fn pause(desired: &mut watch::Receiver<Arc<DesiredFlows>>, wait: Duration) -> bool {
    let sleep = tokio::time::sleep(wait);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            () = &mut sleep => return true,
            r = desired.changed() => if r.is_err() { return false },
        }
    }
}

enum SessionEnd {
    Shutdown,
    Lost(ConnError),
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

/// How long a VIP's answer waits for OVN to program the VIP on the integration bridge before
/// it goes on the switch anyway (with a warning): a sign the integration bridge holds the VIP
/// in a form this does not recognise.
pub const PROGRAMMED_WAIT: Duration = Duration::from_secs(10);

/// How often a held-back answer is checked again.
const RECHECK_EVERY: Duration = Duration::from_millis(50);

struct BridgeSession {
    conn: Connection,
    /// The node's integration bridge, to see that OVN programmed a VIP before answering for it.
    programmed: BrIntFlows,
    /// Whether this session may answer at all yet: it started while this node was in doubt
    /// ([`DesiredFlows::doubt`]) and that did not clear yet.
    opened: bool,
    /// Said that the answers are held back while in doubt.
    told_doubt: bool,
    /// The VIPs whose answers are on the switch (after the last write).
    on_switch: std::collections::BTreeSet<std::net::IpAddr>,
    /// Since when each answer held back waits for OVN.
    held_since: std::collections::BTreeMap<std::net::IpAddr, std::time::Instant>,
    /// What the announcements under way may still announce ([`garp::Announceable`]).
    allowed: watch::Sender<Arc<std::collections::BTreeSet<std::net::IpAddr>>>,
    events: openflow::Events,
    /// The switch reports every change to its flows (the ONF flow monitor): drift is noticed
    /// when it happens, and the periodic read-back is only a safety net.
    monitored: bool,
    /// What the flow monitor reported and is not yet put back.
    heard: Heard,
    ports: Ports,
    /// What we believe is on the switch (after our last successful write).
    applied: Applied,
}

impl BridgeSession {
    async fn connect(s: &BridgeSettings, db: &mut DbFeed) -> Result<BridgeSession, ConnError> {
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
        Ok(BridgeSession {
            conn,
            programmed: BrIntFlows::new(s),
            opened: false,
            told_doubt: false,
            on_switch: Default::default(),
            held_since: Default::default(),
            allowed: watch::channel(Arc::default()).0,
            events,
            monitored,
            heard: Heard::default(),
            ports,
            applied: Applied::default(),
        })
    }

    fn roles(&self, s: &BridgeSettings, plan: &DesiredFlows) -> Roles {
        Roles::of(&s.bridge, &self.ports, plan.router_mac)
    }

    /// Note a flow monitor message ([`Heard::note`]); an unreadable one is said.
    fn hear(
        &mut self,
        s: &BridgeSettings,
        ev: Result<openflow::monitor::MonitorEvent, openflow::DecodeError>,
    ) -> bool {
        if let Err(e) = &ev {
            tracing::warn!(bridge = %s.bridge.name, error = %e, "unreadable flow monitor update; reading vipflow's flows back");
        }
        self.heard
            .note(ev, &self.applied, s.cookie_base, s.cookie_mask)
    }

    /// Put back what the flow monitor reported changed ([`Heard::repair`]), without reading
    /// the table. Returns false when the switch refused part of it, so a full sync must
    /// follow.
    async fn repair_heard(
        &mut self,
        s: &BridgeSettings,
        status: &watch::Sender<BridgeStatus>,
    ) -> Result<bool, ConnError> {
        let msgs = std::mem::take(&mut self.heard).repair(&self.applied);
        if msgs.is_empty() {
            return Ok(true);
        }
        let changes = msgs.len();
        let rejected = apply_bundle(&self.conn, msgs).await?;
        tracing::warn!(bridge = %s.bridge.name, changes, "vipflow's flows were changed by someone else (heard from the switch's flow monitor); put back");
        status.send_modify(|st| st.drift_repairs += 1);
        Ok(rejected.is_empty())
    }

    /// Tell the network about `vips` (the VIPs a write made this node answer for, and those the
    /// plan asks to announce again whose answers are on the switch), by gratuitous ARP or
    /// unsolicited neighbor advertisement ([`garp`]).
    fn announce(&self, s: &BridgeSettings, roles: &Roles, mut vips: Vec<std::net::IpAddr>) {
        vips.sort_unstable();
        vips.dedup();
        if let (Ok(uplink), Some(mac)) = (&roles.uplink, roles.mac) {
            garp::spawn(
                self.conn.clone(),
                s.bridge.name.clone(),
                *uplink,
                mac,
                s.bridge.vlan,
                vips,
                self.allowed.subscribe(),
            );
        }
    }

    /// The plan as this session may write it: the answers for VIPs this node may not announce
    /// yet left out. Those are every answer while a session that started in doubt stays in
    /// doubt (the switch came back while this node could not see the others, who may have
    /// taken its VIPs), and a VIP's answer until OVN has programmed the VIP on the
    /// integration bridge (a switch that restarted has no flows until ovn-controller puts
    /// them back; a node that answers before would draw the traffic into a half-programmed
    /// pipeline). Returns the plan and whether something was left out.
    async fn gate(
        &mut self,
        s: &BridgeSettings,
        plan: Arc<DesiredFlows>,
    ) -> (Arc<DesiredFlows>, bool) {
        let answers = garp::answered(&plan.flows);
        let mut hold: Vec<std::net::IpAddr> = Vec::new();
        if !self.opened && plan.doubt {
            if !answers.is_empty() && !self.told_doubt {
                tracing::info!(bridge = %s.bridge.name, vips = answers.len(), "answers held back: this node sees fewer than half of the nodes, which may have taken its VIPs");
                self.told_doubt = true;
            }
            hold = answers;
        } else {
            self.opened = true;
            let new: Vec<std::net::IpAddr> = answers
                .into_iter()
                .filter(|v| !self.on_switch.contains(v))
                .collect();
            self.held_since.retain(|v, _| new.contains(v));
            if !new.is_empty() {
                let integration = match &self.ports.db {
                    vipflow_core::reconcile::bridge::ports::OvsDb::Known(v) => {
                        v.integration_bridge.clone()
                    }
                    _ => None,
                };
                let ready = self.programmed.ready(integration.as_deref(), &new).await;
                for v in new {
                    if ready.contains(&v) {
                        self.held_since.remove(&v);
                        continue;
                    }
                    let since = *self.held_since.entry(v).or_insert_with(|| {
                        tracing::info!(bridge = %s.bridge.name, vip = %v, "answer held back until OVN has programmed the VIP on the integration bridge");
                        std::time::Instant::now()
                    });
                    if since.elapsed() < PROGRAMMED_WAIT {
                        hold.push(v);
                    } else {
                        tracing::warn!(bridge = %s.bridge.name, vip = %v, waited = ?PROGRAMMED_WAIT, "OVN has not programmed the VIP on the integration bridge; answering for it anyway");
                    }
                }
            }
        }
        if hold.is_empty() {
            return (plan, false);
        }
        let mut flows = plan.flows.clone();
        for v in &hold {
            for k in crate::plan::flows::answer_keys(*v) {
                flows.remove(&k);
            }
        }
        let gated = DesiredFlows {
            flows,
            delta: None,
            ..(*plan).clone()
        };
        (Arc::new(gated), true)
    }

    async fn serve(
        &mut self,
        s: &BridgeSettings,
        desired: &mut watch::Receiver<Arc<DesiredFlows>>,
        status: &watch::Sender<BridgeStatus>,
        db: &mut DbFeed,
    ) -> SessionEnd {
        let mut need_full = true;
        let mut silent = s.silent.clone();
        let is_silent = |r: &Option<watch::Receiver<bool>>| r.as_ref().is_some_and(|r| *r.borrow());
        loop {
            let plan = desired.borrow_and_update().clone();
            if plan.generation == 0 {
                // No plan yet (the placeholder): touch nothing until the first one arrives.
                if desired.changed().await.is_err() {
                    return SessionEnd::Shutdown;
                }
                continue;
            }
            // Answers this node may not give yet are left out of what is written; they are
            // checked again shortly.
            let answers = Announcing::l2_on(&s.bridge);
            let (plan, held) = if answers {
                self.gate(s, plan).await
            } else {
                (plan, false)
            };
            let making = Making {
                maker: plan.maker.clone(),
                roles: self.roles(s, &plan),
            };
            // What a bridge that announces tells the network once this write is in: every VIP
            // it answers after a full sync, else those the write made it answer.
            let roles = answers.then(|| making.roles.clone());
            let mut taken: Vec<std::net::IpAddr> = Vec::new();
            let r = if need_full {
                if roles.is_some() {
                    taken = garp::answered(&plan.flows);
                }
                self.full_sync(s, &plan, status).await
            } else {
                let touched = self.applied.touched(&plan, &making);
                if roles.is_some() {
                    taken = garp::taken(&touched, &plan.flows);
                }
                self.write_delta(s, &plan, making, touched, status).await
            };
            if let Err(e) = r {
                return SessionEnd::Lost(e);
            }
            if held {
                self.applied.left_out();
            }
            if let Some(roles) = &roles {
                self.on_switch = garp::answered(&plan.flows).into_iter().collect();
                let quiet = is_silent(&silent);
                self.allowed.send_replace(Arc::new(if quiet {
                    Default::default()
                } else {
                    self.on_switch.clone()
                }));
                let mut vips = taken;
                vips.extend(
                    plan.announce
                        .iter()
                        .copied()
                        .filter(|v| self.on_switch.contains(v)),
                );
                if !quiet && !vips.is_empty() {
                    // The switch has applied everything before this barrier: the answers and
                    // the VIPs' flows into OVN are in place before anyone is told.
                    if let Err(e) = self.conn.barrier().await {
                        return SessionEnd::Lost(e);
                    }
                    self.announce(s, roles, vips);
                }
            }
            let mut recheck_at = held.then(|| tokio::time::Instant::now() + RECHECK_EVERY);
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
                    // The agent stops: announcements under way end at once.
                    () = silent_changed(&mut silent) => {
                        if is_silent(&silent) {
                            self.allowed.send_replace(Arc::default());
                        }
                    }
                    // Answers held back: check again whether they may go on.
                    _ = sleep_until(recheck_at) => {
                        recheck_at = None;
                        break;
                    }
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
                        let mut check = FullSync::new(&self.applied);
                        if let Err(e) = read_each(&self.conn, s, |f| check.observe(f)).await {
                            return SessionEnd::Lost(e);
                        }
                        let fixes = check.finish().len();
                        let cost = started.elapsed();
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

    /// Read vipflow's flows from the switch and write what differs from `plan`.
    async fn full_sync(
        &mut self,
        s: &BridgeSettings,
        plan: &DesiredFlows,
        status: &watch::Sender<BridgeStatus>,
    ) -> Result<(), ConnError> {
        let started = std::time::Instant::now();
        // Port numbers may have changed while we were not looking.
        self.ports.set_desc(&self.conn.port_desc().await?);
        let making = Making {
            maker: plan.maker.clone(),
            roles: self.roles(s, plan),
        };
        let mut next = Applied::from_plan(&plan.flows, making, plan.generation);
        let mut sync = FullSync::new(&next);
        read_each(&self.conn, s, |f| sync.observe(f)).await?;
        let ops = sync.finish();
        let changes = ops.len();
        let rejected = apply_each(&self.conn, ops.len(), |i| next.message(&ops[i])).await?;
        next.refused(&ops, &rejected);
        self.applied = next;
        self.report(s, plan, status, true, started, changes, &rejected);
        Ok(())
    }

    /// Write only the planned flows named in `touched`, as `making` makes them.
    async fn write_delta(
        &mut self,
        s: &BridgeSettings,
        plan: &DesiredFlows,
        making: Making,
        touched: Vec<FlowKey>,
        status: &watch::Sender<BridgeStatus>,
    ) -> Result<(), ConnError> {
        let started = std::time::Instant::now();
        let d = self.applied.delta(&plan.flows, making, touched);
        let changes = d.ops.len();
        let applied = &self.applied;
        let rejected = apply_each(&self.conn, changes, |i| d.message(i, applied)).await?;
        self.applied.commit(d, &rejected, plan.generation);
        self.report(s, plan, status, false, started, changes, &rejected);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn report(
        &self,
        s: &BridgeSettings,
        plan: &DesiredFlows,
        status: &watch::Sender<BridgeStatus>,
        full: bool,
        started: std::time::Instant,
        changes: usize,
        rejected: &[(usize, String)],
    ) {
        for (_, r) in rejected {
            tracing::warn!(bridge = %s.bridge.name, "{r}");
        }
        let skipped = self.applied.skipped_list();
        let flows = self.applied.len();
        publish_problems(
            s,
            status,
            self.roles(s, plan).problems(&s.bridge, &self.ports),
        );
        if full || changes > 0 {
            tracing::info!(bridge = %s.bridge.name, generation = plan.generation, full, changes, flows, skipped = skipped.len(), "synced");
        }
        let integration = match &self.ports.db {
            vipflow_core::reconcile::bridge::ports::OvsDb::Known(v) => v.integration_bridge.clone(),
            _ => None,
        };
        status.send_modify(|st| {
            st.connected = true;
            st.integration_bridge = integration;
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

/// The stop signal changed; never when there is none (or its sender went).
async fn silent_changed(r: &mut Option<watch::Receiver<bool>>) {
    match r {
        Some(r) => {
            if r.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

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
    status: &watch::Sender<BridgeStatus>,
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
