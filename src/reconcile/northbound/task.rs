//! The writer's I/O: sending a session's transactions, the pipelined first sync and the
//! reconnect loop.

use super::ensure;
use crate::reconcile::northbound::NbSettings;
use crate::reconcile::northbound::SETTLE_WAIT;
use crate::reconcile::northbound::UNREACHABLE_WARN_EVERY;
use crate::reconcile::northbound::nb_options;
use crate::reconcile::northbound::take_over;
use ovsdb::Client;
use ovsdb::ClientOptions;
use ovsdb::Event;
use ovsdb::OpResult;
use ovsdb::Transaction;
use retry::Backoff;
use retry::Policy;
use retry::SharedBackoff;
use std::sync::Arc;
use tokio::sync::watch;
use vipflow_core::reconcile::error::{ReconcileError, ReconcileErrorKind};
use vipflow_core::reconcile::northbound::BATCH_OWNERS;
use vipflow_core::reconcile::northbound::Change;
use vipflow_core::reconcile::northbound::DB;
use vipflow_core::reconcile::northbound::DesiredRows;
use vipflow_core::reconcile::northbound::FenceAction;
use vipflow_core::reconcile::northbound::NB_GLOBAL;
use vipflow_core::reconcile::northbound::NorthboundStatus;
use vipflow_core::reconcile::northbound::Observed;
use vipflow_core::reconcile::northbound::Session;
use vipflow_core::reconcile::northbound::TokenHolder;
use vipflow_core::reconcile::northbound::WarnEvery;
use vipflow_core::reconcile::northbound::after_fence_failure;
use vipflow_core::reconcile::northbound::fenced;
use vipflow_core::reconcile::northbound::is_fence_failure;
use vipflow_core::reconcile::northbound::monitor_spec;
use vipflow_core::reconcile::northbound::new_token;
use vipflow_core::reconcile::northbound::token_holder;
use vipflow_core::reconcile::northbound::warn_failed;

/// What [`send`] or [`write_plan`] did.
pub struct Sent {
    /// The monitor to go on with; `None`: it could not be renewed (reconnect).
    pub monitor: Option<ovsdb::Monitor>,
    pub transactions: u64,
    pub result: Result<(), ovsdb::Error>,
    /// When the last reply came, before any resubscription.
    pub written: std::time::Instant,
}

/// Hand `session` `first` and every event the monitor has queued, with its cache.
pub fn absorb_queued(session: &mut Session, monitor: &mut ovsdb::Monitor, first: Option<Event>) {
    let mut events: Vec<Event> = first.into_iter().collect();
    while let Some(ev) = monitor.try_event() {
        events.push(ev);
    }
    session.absorb(events, &monitor.cache());
}

/// Write `changes` and tell the session the outcome. A first sync's batches go out pipelined,
/// as [`write_plan`] sends them; later changes one after the other, stopping at the first
/// failure.
pub async fn send(
    session: &mut Session,
    client: &Client,
    monitor: ovsdb::Monitor,
    plan: &DesiredRows,
    changes: Vec<Change>,
) -> Sent {
    if session.first {
        let (tx, rx) = tokio::sync::mpsc::channel(changes.len().max(1));
        for c in changes {
            let _ = tx.try_send(c);
        }
        drop(tx);
        let out = stream_batches(client.clone(), monitor, session.token.clone(), rx).await;
        return finish_batches(session, client, plan, out, &mut |_, _| {}, None).await;
    }
    let token = session.token.clone();
    let mut sent = 0u64;
    let mut result = Ok(());
    for c in changes {
        let Some(txn) = c.txn else { continue };
        match client.transact(&fenced(txn, token.as_deref())).await {
            Ok(_) => sent += 1,
            Err(e) => {
                warn_failed(&e, c.owners.len());
                result = Err(e);
                break;
            }
        }
    }
    let written = std::time::Instant::now();
    session.done(plan, &result);
    Sent {
        monitor: Some(monitor),
        transactions: sent,
        result,
        written,
    }
}

/// Diff `plan` and write the changes ([`Session::changes`] + [`send`]). A first sync is
/// streamed: each batch goes on the wire as soon as it is diffed, so the server commits one
/// while the next is built.
pub async fn write_plan(
    session: &mut Session,
    client: &Client,
    monitor: ovsdb::Monitor,
    plan: &DesiredRows,
) -> Sent {
    write_plan_reporting(session, client, monitor, plan, &mut |_, _| {}, None).await
}

/// [`write_plan`], calling `committed` with the session and the number of transactions as soon
/// as a first sync's batches all committed, before the monitor is taken again: the rows are in
/// the database from then on, and the bridges waiting for them need not wait for the snapshot.
/// With `settle`, the monitor is taken again once it is true ([`NbSettings::settle`]).
pub async fn write_plan_reporting(
    session: &mut Session,
    client: &Client,
    monitor: ovsdb::Monitor,
    plan: &DesiredRows,
    committed: &mut (dyn FnMut(&Session, u64) + Send),
    settle: Option<&watch::Receiver<bool>>,
) -> Sent {
    let ensured = match ensure::ensure_groups(session, client, plan).await {
        Ok(()) => ensure::ensure_planned(session, client, plan).await,
        Err(e) => Err(e),
    };
    if let Err(e) = ensured {
        tracing::warn!(error = %e, "cannot create vipflow's Load_Balancer_Group or a chassis's Chassis_Template_Var; will retry");
        let result = Err(e);
        session.done(plan, &result);
        return Sent {
            monitor: Some(monitor),
            transactions: 0,
            result,
            written: std::time::Instant::now(),
        };
    }
    if !session.first {
        let changes = session.changes(plan);
        return send(session, client, monitor, plan, changes).await;
    }
    // One batch waits while FIRST_SYNC_WINDOW are on the wire and the next is diffed: only
    // those are in memory, not the whole database's worth of transactions.
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let writer = tokio::spawn(stream_batches(
        client.clone(),
        monitor,
        session.token.clone(),
        rx,
    ));
    let mut sync = session.first_sync(plan);
    let mut next = Vec::new();
    'diff: loop {
        let more = session.first_sync_next(plan, &mut sync, &mut |c| next.push(c));
        for c in next.drain(..) {
            if tx.send(c).await.is_err() {
                // The writer stopped (it failed, or was cancelled): it reports why.
                break 'diff;
            }
        }
        if !more {
            break;
        }
    }
    drop(tx);
    let out = writer.await.unwrap_or_else(|e| {
        tracing::error!(error = %e, "Northbound batch writer failed");
        Batches {
            monitor: None,
            transactions: 0,
            result: Err(ovsdb::Error::Shutdown),
            written: std::time::Instant::now(),
        }
    });
    finish_batches(session, client, plan, out, committed, settle).await
}

/// The monitor as the batch writer leaves it.
pub(super) enum Monitored {
    Open(ovsdb::Monitor),
    Cancelled,
}

/// What the batch writer did; `monitor` is `None` when cancelling it failed.
pub(super) struct Batches {
    pub(super) monitor: Option<Monitored>,
    pub(super) transactions: u64,
    pub(super) result: Result<(), ovsdb::Error>,
    pub(super) written: std::time::Instant,
}

/// Transactions of a first sync on the wire at once: enough to keep the server busy while
/// each reply comes back, few enough that the batches in memory stay a handful.
const FIRST_SYNC_WINDOW: usize = 4;

/// Write the batches of a first sync as they come, pipelined ([`FIRST_SYNC_WINDOW`] at a
/// time), each fenced with `token`.
///
/// When the first batch is a full one (a large sync), the monitor is cancelled before it is
/// sent: while any monitor covers the table, ovsdb-server builds the whole update of the
/// inserted rows before it replies (3 MB and some 140 ms of its CPU for 10,000 rows). The
/// caller takes the monitor again after ([`finish_batches`]).
pub(super) async fn stream_batches(
    client: Client,
    monitor: ovsdb::Monitor,
    token: Option<String>,
    mut changes: tokio::sync::mpsc::Receiver<Change>,
) -> Batches {
    use futures::StreamExt;
    let mut monitor = Some(Monitored::Open(monitor));
    let mut inflight = futures::stream::FuturesUnordered::new();
    let mut first = true;
    let mut open = true;
    let mut sent = 0u64;
    let mut result = Ok(());
    loop {
        tokio::select! {
            c = changes.recv(), if open && inflight.len() < FIRST_SYNC_WINDOW => {
                let Some(c) = c else {
                    open = false;
                    continue;
                };
                if std::mem::take(&mut first)
                    && c.owners.len() >= BATCH_OWNERS
                    && let Some(Monitored::Open(m)) = monitor.take()
                {
                    if let Err(e) = client.monitor_cancel(m).await {
                        return Batches {
                            monitor: None,
                            transactions: 0,
                            result: Err(e),
                            written: std::time::Instant::now(),
                        };
                    }
                    monitor = Some(Monitored::Cancelled);
                }
                let Some(txn) = c.txn else { continue };
                let txn = fenced(txn, token.as_deref());
                let client = client.clone();
                let services = c.owners.len();
                inflight.push(async move { (services, client.transact(&txn).await) });
            }
            Some((services, r)) = inflight.next(), if !inflight.is_empty() => match r {
                Ok(_) => sent += 1,
                Err(e) => {
                    warn_failed(&e, services);
                    if result.is_ok() {
                        result = Err(e);
                    }
                }
            },
            else => break,
        }
    }
    Batches {
        monitor,
        transactions: sent,
        result,
        written: std::time::Instant::now(),
    }
}

/// Tell the session how a first sync went and take the monitor again if it was cancelled: its
/// snapshot, built after the commit, replaces the observed state, and the next diff checks
/// everything against it.
pub(super) async fn finish_batches(
    session: &mut Session,
    client: &Client,
    plan: &DesiredRows,
    out: Batches,
    committed: &mut (dyn FnMut(&Session, u64) + Send),
    settle: Option<&watch::Receiver<bool>>,
) -> Sent {
    session.done(plan, &out.result);
    if out.result.is_ok() {
        committed(session, out.transactions);
    }
    if let (Some(Monitored::Cancelled), Some(settle)) = (&out.monitor, settle) {
        let mut settle = settle.clone();
        if tokio::time::timeout(SETTLE_WAIT, settle.wait_for(|s| *s))
            .await
            .is_err()
        {
            tracing::debug!(waited = ?SETTLE_WAIT, "the bridges have not synced; taking the Northbound monitor again without them");
        }
    }
    let monitor = match out.monitor {
        Some(Monitored::Open(m)) => Some(m),
        Some(Monitored::Cancelled) => match client
            .monitor(monitor_spec(plan.template_chassis.is_some()))
            .await
        {
            Ok(mut m) => {
                tracing::debug!(since_written = ?out.written.elapsed(), "Northbound monitored again after the first sync");
                session.resubscribed(Observed::from_cache(&m.cache()));
                // The rows are in the snapshot's events, not in the cache.
                absorb_queued(session, &mut m, None);
                Some(m)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot monitor the Northbound database again");
                None
            }
        },
        None => None,
    };
    Sent {
        monitor,
        transactions: out.transactions,
        result: out.result,
        written: out.written,
    }
}

/// Run the NB reconciler until `desired`'s sender is dropped.
///
/// Every connection to the database goes by one backoff ([`retry`]'s rule), shared with the
/// client's own reconnects ([`ovsdb::ClientOptions::shared_backoff`]): a failed take-over or
/// monitor drops the client, which counts that session, and the next [`Client::connect`] waits
/// out the backoff before it dials. A session that fails right after each connect is therefore
/// not redialled faster than a refused connect. Writes that fail on a working session are
/// retried with a backoff of their own, reset by the next write that succeeds.
pub async fn run(
    settings: NbSettings,
    mut desired: watch::Receiver<Arc<DesiredRows>>,
    status: watch::Sender<NorthboundStatus>,
) {
    let policy = Policy::new(settings.backoff_min, settings.backoff_max);
    let backoff = settings
        .shared_backoff
        .clone()
        .unwrap_or_else(|| SharedBackoff::new(Backoff::new(policy)));
    let mut write_retry = Backoff::new(policy);
    let mut unreachable_warn = WarnEvery::new(UNREACHABLE_WARN_EVERY);
    'connect: loop {
        let opts = match ClientOptions::new(&settings.remotes, DB)
            .map(|o| writer_options(o, &settings, &backoff))
        {
            Ok(o) => o,
            Err(e) => {
                tracing::error!(remotes = %settings.remotes, error = %e, "bad Northbound remote; not writing rows");
                status.send_modify(|s| {
                    s.last_error = Some(ReconcileError::new(ReconcileErrorKind::Northbound, &e))
                });
                return;
            }
        };
        // Waits out the backoff first, then tries for CONNECT_TIMEOUT.
        let connected = tokio::select! {
            c = Client::connect(opts) => c,
            () = closed(&mut desired) => return,
        };
        let client = match connected {
            Ok(c) => {
                unreachable_warn.reset();
                c
            }
            Err(e) => {
                let retry_in = backoff.remaining(tokio::time::Instant::now().into_std());
                if unreachable_warn.due(std::time::Instant::now()) {
                    tracing::warn!(remotes = %settings.remotes, error = %e, ?retry_in, "cannot connect to the Northbound database");
                } else {
                    tracing::debug!(remotes = %settings.remotes, error = %e, ?retry_in, "cannot connect to the Northbound database");
                }
                status.send_modify(|s| {
                    s.connected = false;
                    s.last_error = Some(ReconcileError::new(ReconcileErrorKind::Northbound, &e));
                });
                continue;
            }
        };
        // One writer token per pass: a token that disappeared is taken back on the same
        // connection (see `after_fence_failure`).
        'session: loop {
            // Become the writer first, then read: everything an earlier writer committed is in
            // the snapshot, and anything it still sends fails its fence.
            let token = new_token();
            // On failure the client goes (that counts the session) and the next connect waits.
            if let Err(e) = take_over(&client, &token).await {
                tracing::warn!(error = %e, "cannot take over as Northbound writer");
                status.send_modify(|s| {
                    s.last_error = Some(ReconcileError::new(ReconcileErrorKind::Northbound, &e))
                });
                continue 'connect;
            }
            let mut monitor = match client.monitor(monitor_spec(settings.templates)).await {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot monitor the Northbound database");
                    continue 'connect;
                }
            };
            tracing::info!(remotes = %settings.remotes, "Northbound connected");
            // Load_Balancer rows are only in the queued events (the loop absorbs them before
            // any diff); the other tables' are in the cache too, and applying them again
            // changes nothing.
            let mut s = Session::new(Observed::from_cache(&monitor.cache()), Some(token.clone()));
            let mut event = None;
            // A whole check is being written (see below).
            let mut checking = false;
            loop {
                absorb_queued(&mut s, &mut monitor, event.take());
                let plan = desired.borrow_and_update().clone();
                if plan.generation == 0 {
                    // No plan yet (the placeholder): writing it would delete every row of ours.
                    tokio::select! {
                        r = desired.changed() => if r.is_err() { return },
                        ev = monitor.next_event() => match ev {
                            None => continue 'connect,
                            Some(ev) => event = Some(ev),
                        },
                    }
                    continue;
                }
                let started = std::time::Instant::now();
                // A first sync reports its rows as soon as they are committed (see
                // `write_plan_reporting`); anything else once the write is over.
                let mut published = false;
                let Sent {
                    monitor: m,
                    transactions: sent,
                    result,
                    ..
                } = write_plan_reporting(
                    &mut s,
                    &client,
                    monitor,
                    &plan,
                    &mut |s, sent| {
                        publish(&status, &plan, sent, started, s.problems(), &Ok(()));
                        published = true;
                    },
                    settings.settle.as_ref(),
                )
                .await;
                let Some(m) = m else { continue 'connect };
                monitor = m;
                if let Err(e) = &result
                    && is_fence_failure(e)
                    && fence_lost(&client, &token, settings.leading.as_ref()).await
                        == FenceAction::TakeOver
                {
                    // The old monitor's snapshot belongs to the old token: read again after.
                    let _ = client.monitor_cancel(monitor).await;
                    continue 'session;
                }
                let ok = result.is_ok();
                let retry_in = if ok {
                    write_retry.reset();
                    None
                } else {
                    Some(write_retry.after_failure())
                };
                if !published {
                    publish(&status, &plan, sent, started, s.problems(), &result);
                }
                if ok && s.whole_diff_due() {
                    // The monitor was taken again after a batched first sync: check every
                    // Service now, while nothing waits, not in front of the next change.
                    checking = true;
                    continue;
                }
                if std::mem::take(&mut checking) {
                    // The start's transients are over (the batched sync, the snapshot taken
                    // again, the check): their pages go back now, not at the next report.
                    let _ = tokio::task::spawn_blocking(crate::memory::give_back).await;
                }
                // Wait for a new plan, a change in the database, or (after a failure) the
                // write's backoff.
                let retry = async {
                    match retry_in {
                        Some(wait) => tokio::time::sleep(wait).await,
                        None => std::future::pending::<()>().await,
                    }
                };
                tokio::select! {
                    r = desired.changed() => if r.is_err() { return },
                    ev = monitor.next_event() => match ev {
                        None => continue 'connect,
                        Some(ev) => event = Some(ev),
                    },
                    _ = retry => {}
                }
            }
        }
    }
}

/// `o` for the writer: its connect and request timeouts, its reconnect waits, `backoff`.
fn writer_options(
    o: ClientOptions,
    settings: &NbSettings,
    backoff: &SharedBackoff,
) -> ClientOptions {
    let mut o = nb_options(o, settings.request_timeout);
    o.backoff_min = settings.backoff_min;
    o.backoff_max = settings.backoff_max;
    o.shared_backoff = Some(backoff.clone());
    o
}

/// Resolves once `desired`'s sender is gone (the agent stops); a new plan meanwhile is left
/// for the writer's loop, which reads the latest when it gets there.
async fn closed<T>(desired: &mut watch::Receiver<T>) {
    while desired.changed().await.is_ok() {}
}

/// Say what one write of `plan` did: the INFO line once rows went out, and the status the
/// planner (make before break) and `/status` read.
fn publish(
    status: &watch::Sender<NorthboundStatus>,
    plan: &DesiredRows,
    sent: u64,
    started: std::time::Instant,
    problems: Vec<String>,
    result: &Result<(), ovsdb::Error>,
) {
    let ok = result.is_ok();
    if ok && sent > 0 {
        tracing::info!(
            generation = plan.generation,
            transactions = sent,
            rows = plan.row_count,
            "Northbound synced"
        );
    }
    let failed = result
        .as_ref()
        .err()
        .map(|e| ReconcileError::new(ReconcileErrorKind::Northbound, e));
    status.send_if_modified(|st| {
        let before = st.clone();
        st.connected = true;
        st.transactions += sent;
        if sent > 0 {
            st.syncs += 1;
            st.last_sync = started.elapsed();
        }
        st.problems = problems;
        if ok {
            st.applied_step = Some(plan.step);
            if plan.complete {
                st.applied_generation = Some(plan.generation);
            }
            st.rows = plan.row_count;
            st.last_error = None;
        } else {
            st.last_error = failed;
        }
        *st != before
    });
}

/// After this session's fence failed: who holds the token now, and what to do about it.
pub(super) async fn fence_lost(
    client: &Client,
    token: &str,
    leading: Option<&watch::Receiver<bool>>,
) -> FenceAction {
    let mut txn = Transaction::new(DB);
    txn.select(NB_GLOBAL, vec![], Some(&["external_ids"]));
    let holder = match client.transact(&txn).await {
        Ok(r) => match r.into_iter().next() {
            Some(OpResult::Rows(rows)) => token_holder(&rows, token),
            _ => TokenHolder::Us,
        },
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the Northbound writer token");
            return FenceAction::Retry;
        }
    };
    let leading = leading.is_none_or(|l| *l.borrow());
    let action = after_fence_failure(&holder, leading);
    match (&holder, action) {
        (_, FenceAction::TakeOver) => {
            tracing::warn!(
                "Northbound writer token gone (database replaced or key removed); taking over again"
            );
        }
        (TokenHolder::Other(t), _) => {
            tracing::warn!(holder = %t, "another writer holds the Northbound database; not writing");
        }
        (TokenHolder::Nobody, _) => {
            tracing::warn!(
                "Northbound writer token gone, but this agent no longer leads; not taking it back"
            );
        }
        _ => {}
    }
    action
}
