//! The reconnecting client: one database, one or more remotes (a cluster), the leader found
//! through `_Server`, monitors resumed with `monitor_cond_since` (a monitor's whole-row tables
//! by RFC 7047 `monitor`, under the monitor's id with `.rows` appended, taken afresh),
//! transactions never retried once they may have run.
//!
//! A driver task owns the session lifecycle and the monitors (so an initial reply and the
//! updates that follow it are applied in stream order); transactions go straight to the
//! current session, so they pipeline.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use serde_json::{Value as Json, json};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::connection::{ConnectOptions, Connection, Notification};
use crate::error::Error;
use crate::monitor::{self, Cache, Event, MonitorError, MonitorSpec};
use crate::remote::Remote;
use crate::schema::DatabaseSchema;
use crate::txn::{ErrorKind, OpResult, Transaction};
use crate::value::Uuid;
use retry::{Backoff, Policy, SharedBackoff};

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub remotes: Vec<Remote>,
    pub database: String,
    pub connect: ConnectOptions,
    /// Use only the cluster leader (as `ovn-nbctl` does by default).
    pub leader_only: bool,
    /// The reconnect backoff's first and longest wait ([`retry`]'s rule: doubling after every
    /// session that was not useful for `healthy_after`, whatever ended it).
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// How long a request waits for a usable session.
    pub wait_timeout: Duration,
    /// How long [`Client::connect`] keeps trying before it gives up; `None`: `wait_timeout`.
    /// It always tries once, after whatever wait `shared_backoff` still asks for.
    pub connect_timeout: Option<Duration>,
    /// A session resets the reconnect backoff only if it was up (set up, monitors resumed)
    /// this long: a peer that fails right after each connect is not redialled (each a full
    /// monitor load) at `backoff_min`.
    pub healthy_after: Duration,
    /// The backoff this client's dials share with other dialers of the same peer (the task
    /// that makes clients again when one fails, a one-shot read before it): every dial waits
    /// for what is left of the last wait any of them was given, and the end of every session
    /// counts once. `None`: a backoff of the client's own, from `backoff_min`, `backoff_max`
    /// and `healthy_after`.
    pub shared_backoff: Option<SharedBackoff>,
}

impl ClientOptions {
    /// `remotes` as `ovn-nbctl --db` takes it: `unix:...`, or `tcp:a:6641,tcp:b:6641,...`.
    pub fn new(remotes: &str, database: &str) -> Result<Self, Error> {
        Ok(ClientOptions {
            remotes: Remote::parse_list(remotes)?,
            database: database.to_owned(),
            connect: ConnectOptions::default(),
            leader_only: true,
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_secs(2),
            wait_timeout: Duration::from_secs(30),
            connect_timeout: None,
            healthy_after: HEALTHY_AFTER,
            shared_backoff: None,
        })
    }

    /// The reconnect policy of `backoff_min`, `backoff_max` and `healthy_after`.
    pub fn backoff_policy(&self) -> Policy {
        Policy::new(self.backoff_min, self.backoff_max).with_healthy_after(self.healthy_after)
    }

    /// The backoff the client's dials go by: the shared one, else a new one of its own.
    fn backoff(&self) -> SharedBackoff {
        self.shared_backoff
            .clone()
            .unwrap_or_else(|| SharedBackoff::new(Backoff::new(self.backoff_policy())))
    }
}

/// Default [`ClientOptions::healthy_after`].
pub const HEALTHY_AFTER: Duration = retry::HEALTHY_AFTER;

/// Now, on the runtime's clock (paused in tests that pause it), as the backoff takes it.
fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

/// Lock notifications (`locked`, `stolen`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockEvent {
    Locked(String),
    Stolen(String),
}

/// A subscription: its cache, and the events applied to it.
pub struct Monitor {
    id: String,
    cache: Arc<Mutex<Cache>>,
    events: mpsc::UnboundedReceiver<Event>,
}

impl Monitor {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The cache as it is now; don't hold it across an await.
    pub fn cache(&self) -> MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Next change event (`None` once the client is gone).
    pub async fn next_event(&mut self) -> Option<Event> {
        self.events.recv().await
    }

    pub fn try_event(&mut self) -> Option<Event> {
        self.events.try_recv().ok()
    }
}

struct MonitorState {
    id: String,
    cache: Arc<Mutex<Cache>>,
    events: mpsc::UnboundedSender<Event>,
}

enum DriverCmd {
    AddMonitor {
        spec: MonitorSpec,
        reply: oneshot::Sender<Result<Monitor, Error>>,
    },
    CancelMonitor {
        id: String,
        reply: oneshot::Sender<Result<(), Error>>,
    },
    Reconnect,
}

/// Counters a test or an operator can look at.
#[derive(Debug, Default)]
pub struct Stats {
    pub connects: AtomicU64,
    pub resumed: AtomicU64,
    pub full_resyncs: AtomicU64,
}

/// A handle to the client; clones share it. The driver stops when the last clone is dropped.
#[derive(Clone)]
pub struct Client {
    opts: Arc<ClientOptions>,
    cmds: mpsc::UnboundedSender<DriverCmd>,
    current: watch::Receiver<Option<Connection>>,
    schema: Arc<RwLock<Arc<DatabaseSchema>>>,
    locks: broadcast::Sender<LockEvent>,
    wanted_locks: Arc<Mutex<Vec<String>>>,
    asked_locks: Arc<Mutex<std::collections::BTreeSet<String>>>,
    stats: Arc<Stats>,
    /// Counts the dial in progress when the last handle goes (see [`Dials`]).
    _last: Arc<LastHandle>,
}

/// The client's dials, shared by its driver and its handles: the end of each dial's session is
/// counted in the backoff once, by whichever sees it first (the driver when it fails or is
/// lost, or the last handle when it is dropped), and before that one can dial again. A caller
/// that drops a client and connects a new one at once is held back as the driver would be.
struct Dials {
    backoff: SharedBackoff,
    /// The dial in progress, and since when its session is useful (set up).
    current: Mutex<Option<Option<tokio::time::Instant>>>,
}

impl Dials {
    fn new(backoff: SharedBackoff) -> Dials {
        Dials {
            backoff,
            current: Mutex::new(None),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<Option<tokio::time::Instant>>> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What is left of the last wait: no dial goes before it.
    fn remaining(&self) -> Duration {
        self.backoff.remaining(now())
    }

    fn dialling(&self) {
        *self.lock() = Some(None);
    }

    /// The dial's session is set up: useful from now.
    fn up(&self) {
        if let Some(useful) = self.lock().as_mut() {
            *useful = Some(tokio::time::Instant::now());
        }
    }

    /// The dial in progress ended, however: count it (once).
    fn end(&self) {
        let ended = self.lock().take();
        if let Some(useful) = ended {
            let useful = useful.map_or(Duration::ZERO, |t| t.elapsed());
            self.backoff.after_session(useful, now());
        }
    }
}

/// Held by every handle of a client; dropped with the last one.
struct LastHandle(Arc<Dials>);

impl Drop for LastHandle {
    fn drop(&mut self) {
        self.0.end();
    }
}

impl Client {
    /// Start the client and wait for its first usable session.
    pub async fn connect(opts: ClientOptions) -> Result<Client, Error> {
        let opts = Arc::new(opts);
        let all = remotes_str(&opts);
        let stats = Arc::new(Stats::default());
        // The first session also fetches the schema.
        let deadline =
            tokio::time::Instant::now() + opts.connect_timeout.unwrap_or(opts.wait_timeout);
        let mut start = 0;
        let dials = Arc::new(Dials::new(opts.backoff()));
        let mut failed: Option<Error> = None;
        let (first, notes, schema) = loop {
            // Another dialer of this peer may have left a wait to finish first.
            let wait = dials.remaining();
            if let Some(e) = failed.take_if(|_| tokio::time::Instant::now() + wait > deadline) {
                return Err(Error::NoServer {
                    remotes: all,
                    reason: e.to_string(),
                });
            }
            tokio::time::sleep(wait).await;
            dials.dialling();
            match connect_any(&opts, None, &mut start).await {
                Ok(x) => break x,
                Err(e) => {
                    dials.end();
                    failed = Some(e);
                }
            }
        };
        let (cur_tx, cur_rx) = watch::channel(None);
        let (cmds, cmd_rx) = mpsc::unbounded_channel();
        let (locks, _) = broadcast::channel(64);
        let client = Client {
            opts: opts.clone(),
            cmds,
            current: cur_rx,
            schema: Arc::new(RwLock::new(schema.clone())),
            locks: locks.clone(),
            wanted_locks: Arc::new(Mutex::new(vec![])),
            asked_locks: Arc::default(),
            stats: stats.clone(),
            _last: Arc::new(LastHandle(dials.clone())),
        };
        let driver = Driver {
            opts,
            dials,
            schema,
            shared_schema: client.schema.clone(),
            current: cur_tx,
            monitors: vec![],
            locks,
            wanted_locks: client.wanted_locks.clone(),
            next_monitor: 0,
            start,
            stats,
        };
        tokio::spawn(driver.run(first, notes, cmd_rx));
        client.ready().await?;
        Ok(client)
    }

    /// The database schema (refreshed when the server's changes).
    pub fn schema(&self) -> Arc<DatabaseSchema> {
        self.schema
            .read()
            .map(|s| s.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    pub fn options(&self) -> &ClientOptions {
        &self.opts
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The remote of the current session, if there is one.
    pub fn current_remote(&self) -> Option<String> {
        self.current
            .borrow()
            .as_ref()
            .filter(|c| !c.is_closed())
            .map(|c| c.remote().to_owned())
    }

    /// A usable session, waiting for a reconnect if needed.
    pub async fn ready(&self) -> Result<Connection, Error> {
        // Fast path, no timer: the common case on every request.
        if let Some(c) = self.current.borrow().as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let mut rx = self.current.clone();
        let wait = async {
            loop {
                if let Some(c) = rx.borrow_and_update().as_ref().filter(|c| !c.is_closed()) {
                    return Ok(c.clone());
                }
                if rx.changed().await.is_err() {
                    return Err(Error::Shutdown);
                }
            }
        };
        tokio::time::timeout(self.opts.wait_timeout, wait)
            .await
            .map_err(|_| Error::Timeout(self.opts.wait_timeout))?
    }

    /// Drop the current session and connect again (e.g. after "not leader").
    pub fn reconnect(&self) {
        let _ = self.cmds.send(DriverCmd::Reconnect);
    }

    /// A raw call on the current session; a request that was never written is sent again on
    /// the next session, one that may have run is reported as lost.
    pub async fn call(&self, method: &str, params: Json) -> Result<Json, Error> {
        for _ in 0..8 {
            let conn = self.ready().await?;
            match conn.call(method, params.clone()).await {
                Err(Error::NotSent { .. }) => continue,
                other => return other,
            }
        }
        Err(Error::NoServer {
            remotes: remotes_str(&self.opts),
            reason: "sessions keep closing".into(),
        })
    }

    pub async fn list_dbs(&self) -> Result<Vec<String>, Error> {
        let r = self.call("list_dbs", json!([])).await?;
        serde_json::from_value(r.clone())
            .map_err(|_| Error::reply(&remotes_str(&self.opts), "list_dbs", r.to_string()))
    }

    pub async fn get_schema(&self, db: &str) -> Result<DatabaseSchema, Error> {
        let r = self.call("get_schema", json!([db])).await?;
        DatabaseSchema::from_json(&r)
            .map_err(|e| Error::reply(&remotes_str(&self.opts), "get_schema", e.to_string()))
    }

    pub async fn echo(&self, params: Json) -> Result<Json, Error> {
        self.call("echo", params).await
    }

    /// Check `tx` against the schema, send it, decode per-op results or the server's error.
    ///
    /// If the session drops after the request was written the result is
    /// [`Error::OutcomeUnknown`]: the transaction may have committed and is not sent again.
    pub async fn transact(&self, tx: &Transaction) -> Result<Vec<OpResult>, Error> {
        let schema = self.schema();
        tx.check(&schema)
            .map_err(|(index, source)| Error::Schema { index, source })?;
        // Serialized once; a resend after "not sent" reuses the bytes.
        let params = bytes::Bytes::from(tx.params_bytes().map_err(|e| Error::NotSent {
            remote: remotes_str(&self.opts),
            method: "transact".into(),
            reason: format!("serialize: {e}"),
        })?);
        for _ in 0..8 {
            let conn = self.ready().await?;
            match conn.call_serialized("transact", params.clone()).await {
                Ok(r) => {
                    return tx
                        .decode_result(&r, Some(&schema))
                        .map_err(|source| Error::Txn {
                            remote: conn.remote().to_owned(),
                            source: Box::new(source),
                        });
                }
                // Never written: sending it on the next session cannot duplicate it.
                Err(Error::NotSent { .. }) => continue,
                Err(Error::Lost { remote, reason, .. }) => {
                    return Err(Error::OutcomeUnknown { remote, reason });
                }
                Err(
                    e @ Error::Rpc {
                        kind: ErrorKind::NotLeader,
                        ..
                    },
                ) => {
                    self.reconnect();
                    return Err(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(Error::NoServer {
            remotes: remotes_str(&self.opts),
            reason: "sessions keep closing".into(),
        })
    }

    /// Subscribe to tables/columns; the returned monitor's cache holds the initial rows.
    pub async fn monitor(&self, spec: MonitorSpec) -> Result<Monitor, Error> {
        spec.check(&self.schema())
            .map_err(|source| Error::Schema { index: 0, source })?;
        let (reply, rx) = oneshot::channel();
        self.cmds
            .send(DriverCmd::AddMonitor { spec, reply })
            .map_err(|_| Error::Shutdown)?;
        rx.await.map_err(|_| Error::Shutdown)?
    }

    pub async fn monitor_cancel(&self, m: Monitor) -> Result<(), Error> {
        let (reply, rx) = oneshot::channel();
        self.cmds
            .send(DriverCmd::CancelMonitor { id: m.id, reply })
            .map_err(|_| Error::Shutdown)?;
        rx.await.map_err(|_| Error::Shutdown)?
    }

    /// Lock notifications (`locked` once a queued `lock` is granted, `stolen`).
    pub fn lock_events(&self) -> broadcast::Receiver<LockEvent> {
        self.locks.subscribe()
    }

    /// `lock`: true if granted now; otherwise a `Locked` event follows when it is. The lock is
    /// asked for again after a reconnect.
    pub async fn lock(&self, name: &str) -> Result<bool, Error> {
        self.want_lock(name, true);
        self.lock_call("lock", name).await
    }

    /// `steal`: take the lock from its owner (who gets `stolen`).
    pub async fn steal(&self, name: &str) -> Result<bool, Error> {
        self.want_lock(name, true);
        self.lock_call("steal", name).await
    }

    pub async fn unlock(&self, name: &str) -> Result<(), Error> {
        self.want_lock(name, false);
        self.asked_locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        self.call("unlock", json!([name])).await.map(|_| ())
    }

    fn want_lock(&self, name: &str, want: bool) {
        let mut w = self.wanted_locks.lock().unwrap_or_else(|p| p.into_inner());
        w.retain(|n| n != name);
        if want {
            w.push(name.to_owned());
        }
    }

    async fn lock_call(&self, method: &str, name: &str) -> Result<bool, Error> {
        if !crate::txn::is_id(name) {
            return Err(Error::Schema {
                index: 0,
                source: crate::schema::SchemaError::BadOperation {
                    table: String::new(),
                    reason: format!("lock name {name:?} is not an <id> ([A-Za-z_][A-Za-z0-9_]*)"),
                },
            });
        }
        // The server wants an unlock before a new lock/steal of a lock this session asked for.
        if self
            .asked_locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(name)
        {
            let _ = self.call("unlock", json!([name])).await;
        }
        self.asked_locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_owned());
        let r = self.call(method, json!([name])).await?;
        r.get("locked")
            .and_then(Json::as_bool)
            .ok_or_else(|| Error::reply(&remotes_str(&self.opts), method, r.to_string()))
    }
}

fn remotes_str(opts: &ClientOptions) -> String {
    opts.remotes
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

type Session = (
    Connection,
    mpsc::UnboundedReceiver<Notification>,
    Arc<DatabaseSchema>,
);

/// Try each remote once, from `start`; return the first usable session.
async fn connect_any(
    opts: &ClientOptions,
    schema: Option<&Arc<DatabaseSchema>>,
    start: &mut usize,
) -> Result<Session, Error> {
    let n = opts.remotes.len();
    let mut last = Error::NoServer {
        remotes: remotes_str(opts),
        reason: "no remote".into(),
    };
    for k in 0..n {
        let i = (*start + k) % n;
        let Some(remote) = opts.remotes.get(i) else {
            continue;
        };
        match connect_one(opts, remote, schema).await {
            Ok(s) => {
                *start = i;
                return Ok(s);
            }
            Err(e) => {
                tracing::debug!(%remote, error = %e, "remote not usable");
                last = e;
            }
        }
    }
    // Next round starts with the one after the last tried.
    *start = (*start + 1) % n.max(1);
    Err(last)
}

async fn connect_one(
    opts: &ClientOptions,
    remote: &Remote,
    schema: Option<&Arc<DatabaseSchema>>,
) -> Result<Session, Error> {
    let (conn, notes) = Connection::connect(remote, &opts.connect).await?;
    let db = &opts.database;
    let name = remote.to_string();
    if opts.leader_only {
        // `_Server` says whether this member is connected to the cluster and its leader.
        let q = json!(["_Server", {"op": "select", "table": "Database",
            "where": [["name", "==", db]], "columns": ["model", "connected", "leader"]}]);
        match conn.call("transact", q).await {
            Ok(r) => {
                let row = r.get(0).and_then(|x| x.get("rows")).and_then(|x| x.get(0));
                let Some(row) = row else {
                    return Err(Error::Connect {
                        remote: name,
                        reason: format!("no database {db}"),
                    });
                };
                let clustered = row.get("model").and_then(Json::as_str) == Some("clustered");
                let ok = row.get("connected").and_then(Json::as_bool) == Some(true)
                    && row.get("leader").and_then(Json::as_bool) == Some(true);
                if clustered && !ok {
                    return Err(Error::Connect {
                        remote: name,
                        reason: "not the cluster leader".into(),
                    });
                }
            }
            // Servers without `_Server` (very old) are standalone.
            Err(Error::Rpc { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    let schema = match schema {
        Some(s) => s.clone(),
        None => {
            let r = conn.call("get_schema", json!([db])).await?;
            Arc::new(
                DatabaseSchema::from_json(&r)
                    .map_err(|e| Error::reply(&name, "get_schema", e.to_string()))?,
            )
        }
    };
    // Ask the server to tell us (by closing) rather than silently changing the schema.
    let _ = conn.call("set_db_change_aware", json!([true])).await;
    Ok((conn, notes, schema))
}

struct Driver {
    opts: Arc<ClientOptions>,
    dials: Arc<Dials>,
    schema: Arc<DatabaseSchema>,
    shared_schema: Arc<RwLock<Arc<DatabaseSchema>>>,
    current: watch::Sender<Option<Connection>>,
    monitors: Vec<MonitorState>,
    locks: broadcast::Sender<LockEvent>,
    wanted_locks: Arc<Mutex<Vec<String>>>,
    next_monitor: u64,
    start: usize,
    stats: Arc<Stats>,
}

const SERVER_MONITOR: &str = "_server";

impl Driver {
    async fn run(
        mut self,
        first: Connection,
        first_notes: mpsc::UnboundedReceiver<Notification>,
        mut cmds: mpsc::UnboundedReceiver<DriverCmd>,
    ) {
        let mut session = Some((first, first_notes));
        loop {
            let (conn, notes) = match session.take() {
                Some(s) => s,
                None => {
                    // Every dial waits out the backoff, whichever dialer of this peer set it.
                    tokio::time::sleep(self.dials.remaining()).await;
                    if self.cmds_closed(&cmds) {
                        return;
                    }
                    self.dials.dialling();
                    // The schema is fetched again: it may have been converted meanwhile.
                    match connect_any(&self.opts, None, &mut self.start).await {
                        Ok((c, n, schema)) => {
                            self.update_schema(schema);
                            (c, n)
                        }
                        Err(e) => {
                            self.dials.end();
                            tracing::debug!(error = %e, retry_in = ?self.dials.remaining(), "reconnect failed");
                            continue;
                        }
                    }
                }
            };
            self.stats.connects.fetch_add(1, Ordering::Relaxed);
            let served = self.serve(conn, notes, &mut cmds).await;
            // However it ended (unless the last handle counted it first).
            self.dials.end();
            match served {
                Served::Shutdown => return,
                Served::Lost => {
                    let _ = self.current.send(None);
                    // A dead leader's successor needs an election: try the next remote first.
                    self.start += 1;
                }
            }
        }
    }

    /// Adopt a changed schema: callers check against it, monitors resubscribe in full.
    fn update_schema(&mut self, schema: Arc<DatabaseSchema>) {
        if *schema == *self.schema {
            return;
        }
        tracing::info!(version = %schema.version, "database schema changed");
        if let Ok(mut s) = self.shared_schema.write() {
            *s = schema.clone();
        }
        for m in &self.monitors {
            m.cache
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .set_schema(schema.clone());
        }
        self.schema = schema;
    }

    fn cmds_closed(&self, cmds: &mpsc::UnboundedReceiver<DriverCmd>) -> bool {
        cmds.is_closed()
    }

    /// Set up a session (server monitor, resumed monitors, locks), then serve it until it
    /// ends.
    async fn serve(
        &mut self,
        conn: Connection,
        mut notes: mpsc::UnboundedReceiver<Notification>,
        cmds: &mut mpsc::UnboundedReceiver<DriverCmd>,
    ) -> Served {
        if let Err(e) = self.setup(&conn).await {
            tracing::warn!(remote = conn.remote(), error = %e, "session setup failed");
            return Served::Lost;
        }
        // Useful from here: set up, monitors resumed, locks asked for.
        self.dials.up();
        let _ = self.current.send(Some(conn.clone()));
        loop {
            tokio::select! {
                n = notes.recv() => {
                    let Some(n) = n else {
                        tracing::warn!(remote = conn.remote(), reason = ?conn.close_reason(), "session lost");
                        return Served::Lost;
                    };
                    if let Err(e) = self.notification(n, conn.remote()).await {
                        tracing::warn!(remote = conn.remote(), error = %e, "dropping session");
                        return Served::Lost;
                    }
                }
                c = cmds.recv() => match c {
                    None => return Served::Shutdown,
                    Some(DriverCmd::Reconnect) => return Served::Lost,
                    Some(DriverCmd::AddMonitor { spec, reply }) => {
                        let r = self.add_monitor(&conn, spec).await;
                        let lost = matches!(r, Err(Error::Lost { .. } | Error::NotSent { .. }));
                        if lost {
                            // Counted before the caller hears of it, in case it dials again.
                            self.dials.end();
                        }
                        let _ = reply.send(r);
                        if lost {
                            return Served::Lost;
                        }
                    }
                    Some(DriverCmd::CancelMonitor { id, reply }) => {
                        let (kept, whole) = match self.monitors.iter().find(|m| m.id == id) {
                            Some(m) => m.cache.lock().unwrap_or_else(|p| p.into_inner()).spec().subscriptions(),
                            None => (true, false),
                        };
                        self.monitors.retain(|m| m.id != id);
                        let mut r = Ok(());
                        if kept {
                            r = conn.call("monitor_cancel", json!([id])).await.map(|_| ());
                        }
                        if whole && r.is_ok() {
                            r = conn
                                .call("monitor_cancel", json!([whole_rows_id(&id)]))
                                .await
                                .map(|_| ());
                        }
                        let _ = reply.send(r);
                    }
                }
            }
        }
    }

    async fn setup(&mut self, conn: &Connection) -> Result<(), Error> {
        let db = &self.opts.database;
        if self.opts.leader_only {
            // Learn of a lost leadership or cluster disconnection without waiting for an error.
            let req = json!({"Database": [{"columns": ["name", "model", "connected", "leader"],
                "where": [["name", "==", db]]}]});
            match conn
                .call("monitor_cond", json!(["_Server", SERVER_MONITOR, req]))
                .await
            {
                Ok(_) | Err(Error::Rpc { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        for i in 0..self.monitors.len() {
            self.resume(conn, i).await?;
        }
        let locks = self
            .wanted_locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for l in locks {
            conn.call("lock", json!([l])).await?;
        }
        Ok(())
    }

    /// (Re)subscribe monitor `i`: its kept tables from their last transaction id, its
    /// whole-row tables afresh.
    async fn resume(&mut self, conn: &Connection, i: usize) -> Result<(), Error> {
        let Some(m) = self.monitors.get(i) else {
            return Ok(());
        };
        let (kept, whole) = (m.cache.lock())
            .unwrap_or_else(|p| p.into_inner())
            .spec()
            .subscriptions();
        if kept {
            self.resume_kept(conn, i).await?;
        }
        if whole {
            self.resume_whole_rows(conn, i).await?;
        }
        Ok(())
    }

    /// Subscribe monitor `i`'s whole-row tables (RFC 7047 `monitor`, under the monitor's id
    /// with [`WHOLE_ROWS`] appended): the reply holds every row, which replace the tables.
    async fn resume_whole_rows(&mut self, conn: &Connection, i: usize) -> Result<(), Error> {
        let Some(m) = self.monitors.get(i) else {
            return Ok(());
        };
        let spec = m
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .shared_spec();
        let params = json!([
            self.opts.database,
            whole_rows_id(&m.id),
            spec.to_json_whole_rows()
        ]);
        let merr = |source| Error::Monitor {
            remote: conn.remote().to_owned(),
            source,
        };
        let r = conn.call_raw("monitor", params).await?;
        let project = |table: &str, row| spec.project(table, row);
        let updates = monitor::utf8(&r)
            .and_then(|t| monitor::parse_table_updates_projected(t, &self.schema, &project))
            .map_err(merr)?;
        drop(r);
        let events = {
            let mut c = m.cache.lock().unwrap_or_else(|p| p.into_inner());
            c.replace(updates, true).map_err(merr)?
        };
        for e in events {
            let _ = m.events.send(e);
        }
        Ok(())
    }

    /// (Re)subscribe monitor `i`'s kept tables from their last transaction id.
    async fn resume_kept(&mut self, conn: &Connection, i: usize) -> Result<(), Error> {
        let Some(m) = self.monitors.get(i) else {
            return Ok(());
        };
        let (spec, last) = {
            let c = m.cache.lock().unwrap_or_else(|p| p.into_inner());
            (c.spec().to_json(), c.last_txn_id())
        };
        let last = last.unwrap_or(Uuid::nil()).to_string();
        let params = json!([self.opts.database, m.id, spec.clone(), last]);
        let merr = |source| Error::Monitor {
            remote: conn.remote().to_owned(),
            source,
        };
        // The reply holds every monitored row: decoded from its text one row at a time.
        let (found, txn, updates) = match conn.call_raw("monitor_cond_since", params).await {
            Ok(r) => monitor::utf8(&r)
                .and_then(|t| monitor::parse_since_reply_text(t, &self.schema))
                .map_err(merr)?,
            // Servers before monitor_cond_since: a plain monitor_cond and a full load.
            Err(Error::Rpc { error, .. }) if error == "unknown method" => {
                let params = json!([self.opts.database, m.id, spec]);
                let r = conn.call_raw("monitor_cond", params).await?;
                let u = monitor::utf8(&r)
                    .and_then(|t| monitor::parse_table_updates2_text(t, &self.schema))
                    .map_err(merr)?;
                (false, Uuid::nil(), u)
            }
            Err(e) => return Err(e),
        };
        let mut c = m.cache.lock().unwrap_or_else(|p| p.into_inner());
        let events = if found {
            self.stats.resumed.fetch_add(1, Ordering::Relaxed);
            c.apply(updates)
        } else {
            self.stats.full_resyncs.fetch_add(1, Ordering::Relaxed);
            c.replace(updates, false)
        }
        .map_err(|source| Error::Monitor {
            remote: conn.remote().to_owned(),
            source,
        })?;
        c.set_last_txn_id((!txn.is_nil()).then_some(txn));
        drop(c);
        for e in events {
            let _ = m.events.send(e);
        }
        Ok(())
    }

    async fn add_monitor(
        &mut self,
        conn: &Connection,
        spec: MonitorSpec,
    ) -> Result<Monitor, Error> {
        self.next_monitor += 1;
        let id = format!("m{}", self.next_monitor);
        let cache = Arc::new(Mutex::new(Cache::new(self.schema.clone(), spec)));
        let (tx, rx) = mpsc::unbounded_channel();
        self.monitors.push(MonitorState {
            id: id.clone(),
            cache: cache.clone(),
            events: tx,
        });
        let i = self.monitors.len() - 1;
        if let Err(e) = self.resume(conn, i).await {
            self.monitors.retain(|m| m.id != id);
            return Err(e);
        }
        Ok(Monitor {
            id,
            cache,
            events: rx,
        })
    }

    async fn notification(&mut self, n: Notification, remote: &str) -> Result<(), Error> {
        if let "update" | "update2" | "update3" = n.method.as_str() {
            return self.update(n, remote).await;
        }
        // The session checked the params are a JSON array: this parse cannot fail.
        let params = n.params_json().unwrap_or(Json::Null);
        let name = || {
            params
                .get(0)
                .and_then(Json::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        match n.method.as_str() {
            // A db_change_aware session gets this when the schema is converted (or the
            // database removed): start over, fetching the schema again.
            "monitor_canceled" => {
                return Err(Error::Reply {
                    remote: remote.to_owned(),
                    method: "monitor_canceled".into(),
                    reason: format!("server canceled monitor {params}"),
                });
            }
            "locked" => {
                let _ = self.locks.send(LockEvent::Locked(name()));
            }
            "stolen" => {
                let _ = self.locks.send(LockEvent::Stolen(name()));
            }
            other => tracing::debug!(method = other, "ignored notification"),
        }
        Ok(())
    }

    /// An `update`/`update2`/`update3` notification: decode it and apply it to its monitor's
    /// cache (an `update` is for the monitor's whole-row tables).
    async fn update(&mut self, n: Notification, remote: &str) -> Result<(), Error> {
        let id = first_string(&n.params).unwrap_or_default();
        if id == SERVER_MONITOR {
            let params = n.params_json().unwrap_or(Json::Null);
            return self.server_update(&params);
        }
        let id = match n.method.as_str() {
            "update" => id.strip_suffix(WHOLE_ROWS).unwrap_or_default().to_owned(),
            _ => id,
        };
        let Some(m) = self.monitors.iter().find(|m| m.id == id) else {
            return Ok(());
        };
        let (cache, events_tx) = (m.cache.clone(), m.events.clone());
        let schema = self.schema.clone();
        let big = n.params.len() >= BIG_UPDATE;
        let work = move || apply_notification(&n, &schema, &cache);
        // A big update (a bulk transaction's) takes tens of ms to decode and apply: on a
        // runtime worker it would hold up the session task on the same worker, and with it
        // the transaction's reply that follows the update on the socket.
        let events = if big {
            tokio::task::spawn_blocking(work)
                .await
                .map_err(|e| Error::Reply {
                    remote: remote.to_owned(),
                    method: "update".into(),
                    reason: format!("update task: {e}"),
                })?
        } else {
            work()
        }
        .map_err(|source| Error::Monitor {
            remote: remote.to_owned(),
            source,
        })?;
        for e in events {
            let _ = events_tx.send(e);
        }
        Ok(())
    }

    /// `_Server.Database` changed: leave a member that lost leadership or the cluster.
    fn server_update(&self, params: &Json) -> Result<(), Error> {
        let rows = params
            .get(1)
            .and_then(|u| u.get("Database"))
            .and_then(Json::as_object);
        for upd in rows.into_iter().flat_map(|r| r.values()) {
            let Some(body) = upd.as_object().and_then(|o| o.values().next()) else {
                continue;
            };
            let flag = |k: &str| body.get(k).and_then(Json::as_bool);
            if flag("leader") == Some(false) || flag("connected") == Some(false) {
                return Err(Error::NoServer {
                    remotes: remotes_str(&self.opts),
                    reason: "this member is no longer the connected leader".into(),
                });
            }
        }
        Ok(())
    }
}

/// Size (bytes) of an update from which decoding and applying it leaves the runtime's
/// workers (some 800 Load_Balancer rows).
const BIG_UPDATE: usize = 256 * 1024;

/// Appended to a monitor's id to name its whole-row tables' subscription (ids are the
/// client's: "m1", "m2", ...).
const WHOLE_ROWS: &str = ".rows";

/// The id of monitor `id`'s whole-row subscription.
fn whole_rows_id(id: &str) -> String {
    format!("{id}{WHOLE_ROWS}")
}

/// The first element of a serialized JSON array, if it is a string (a monitor's id), read
/// without parsing the rest.
fn first_string(params: &[u8]) -> Option<String> {
    let rest = params.trim_ascii_start().strip_prefix(b"[")?;
    match serde_json::Deserializer::from_slice(rest)
        .into_iter::<Json>()
        .next()?
    {
        Ok(Json::String(s)) => Some(s),
        _ => None,
    }
}

/// Decode an update notification and apply it to the monitor's cache.
fn apply_notification(
    n: &Notification,
    schema: &DatabaseSchema,
    cache: &Mutex<Cache>,
) -> Result<Vec<Event>, MonitorError> {
    let spec = cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .shared_spec();
    let project = |table: &str, row| spec.project(table, row);
    let u = match std::str::from_utf8(&n.params) {
        // Decoded from the text: a bulk transaction's update is never one JSON tree.
        Ok(text) => monitor::parse_notification_projected(&n.method, text, schema, &project)?,
        // Not text, so not JSON either: serde_json's error says where.
        Err(_) => {
            let params: Json =
                serde_json::from_slice(&n.params).map_err(|e| MonitorError::Malformed {
                    reason: "params are not JSON",
                    excerpt: e.to_string(),
                })?;
            // Never reached with rows: text that is not UTF-8 is not JSON either.
            monitor::parse_notification(&n.method, &params, schema)?
        }
    };
    let mut c = cache.lock().unwrap_or_else(|p| p.into_inner());
    let events = c.apply(u.updates)?;
    if u.last_txn_id.is_some() {
        c.set_last_txn_id(u.last_txn_id);
    }
    Ok(events)
}

/// How a session ended.
enum Served {
    /// Every handle of the client was dropped.
    Shutdown,
    Lost,
}

/// Rows of one table of a monitor's cache by uuid (a convenience for consumers and tests).
pub fn table_rows(m: &Monitor, table: &str) -> BTreeMap<Uuid, crate::value::Row> {
    use crate::value::Row;
    m.cache()
        .table(table)
        .map(|t| t.iter().map(|(u, r)| (*u, Row::clone(r))).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reconnect_policy_is_the_options_and_a_shared_backoff_is_used_as_given() {
        let mut o = ClientOptions::new("unix:/x", "db").unwrap_or_else(|e| panic!("{e}"));
        o.backoff_min = Duration::from_millis(100);
        o.backoff_max = Duration::from_secs(5);
        o.healthy_after = Duration::from_secs(3);
        let p = o.backoff_policy();
        assert_eq!(
            (p.min, p.max, p.healthy_after),
            (o.backoff_min, o.backoff_max, o.healthy_after)
        );
        // Without a shared backoff each client has its own: nothing to wait at first.
        assert_eq!(o.backoff().remaining(now()), Duration::ZERO);
        assert_ne!(o.backoff().policy().min, Duration::ZERO);
        // With one, a wait another dialer was given holds this client's dials too.
        let shared = SharedBackoff::new(Backoff::seeded(p.with_jitter_percent(0), 1));
        o.shared_backoff = Some(shared.clone());
        let t = now();
        shared.after_failure(t);
        assert_eq!(o.backoff().remaining(t), Duration::from_millis(100));
    }

    fn dials() -> (SharedBackoff, Arc<Dials>) {
        let p =
            Policy::new(Duration::from_millis(100), Duration::from_secs(5)).with_jitter_percent(0);
        let shared = SharedBackoff::new(Backoff::seeded(p, 1));
        (shared.clone(), Arc::new(Dials::new(shared)))
    }

    #[tokio::test]
    async fn each_dial_is_counted_once_by_whoever_sees_its_end_first() {
        let (shared, d) = dials();
        // Nothing dialled, nothing counted.
        d.end();
        assert_eq!(shared.remaining(now()), Duration::ZERO);
        // A dial that failed: the driver counts it, the last handle finds nothing left.
        d.dialling();
        d.end();
        let first = shared.remaining(now());
        assert!(first > Duration::ZERO && first <= Duration::from_millis(100));
        drop(LastHandle(d.clone()));
        assert!(shared.remaining(now()) <= first, "not counted twice");
        // A session the last handle ended: counted at the drop, before any new dial.
        d.dialling();
        d.up();
        drop(LastHandle(d.clone()));
        let second = shared.remaining(now());
        assert!(
            second > Duration::from_millis(100),
            "the wait grew: {second:?}"
        );
        d.end();
        assert!(shared.remaining(now()) <= second, "not counted twice");
    }
}
