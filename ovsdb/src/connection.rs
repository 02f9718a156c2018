//! One JSON-RPC session with an ovsdb-server over unix, tcp or ssl.
//!
//! A background task owns the socket: it writes queued requests (batched, so pipelined calls
//! share a flush), matches responses to callers by id, answers the server's `echo`, forwards
//! notifications, and probes an idle peer with its own `echo`, closing the session when the
//! peer stays silent for a second interval.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use serde_json::{Value as Json, json};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::error::Error;
use crate::framing::{DEFAULT_MAX_MESSAGE, FrameCodec, FramingError, JsonCodec};
use crate::jsonrpc::{Incoming, IncomingError, Message, parse_frame};
use crate::remote::Remote;

/// Connection settings.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Send our own echo after this much silence; close after twice as long. `None`: never.
    pub probe_interval: Option<Duration>,
    pub connect_timeout: Duration,
    pub max_message: usize,
    /// A request unanswered this long ends the session (the peer is up but not serving us:
    /// it may answer echo and never the transaction, or answer with a wrong id), so the
    /// client connects again. `None`: wait forever.
    pub request_timeout: Option<Duration>,
}

/// Default [`ConnectOptions::request_timeout`].
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            tls: None,
            probe_interval: Some(Duration::from_secs(5)),
            connect_timeout: Duration::from_secs(5),
            max_message: DEFAULT_MAX_MESSAGE,
            request_timeout: Some(DEFAULT_REQUEST_TIMEOUT),
        }
    }
}

/// A notification from the server (`update2`, `update3`, `locked`, `stolen`, ...).
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    pub method: String,
    /// The params, a JSON array, still serialized: a big update is decoded by its consumer,
    /// so the session reads on (e.g. to the transaction reply that follows it).
    pub params: Bytes,
}

impl Notification {
    /// The params as a JSON tree.
    pub fn params_json(&self) -> Result<Json, serde_json::Error> {
        serde_json::from_slice(&self.params)
    }
}

/// How a call ended, from the session task's point of view.
#[derive(Debug)]
enum Reply {
    /// The result, serialized.
    Ok(Bytes),
    /// The server answered with an error.
    Err { error: Json },
    /// The session ended after the request was handed to the socket: it may have run.
    Lost(String),
    /// The session ended before the request was written: it certainly did not run.
    NotSent(String),
}

enum Command {
    Call {
        method: String,
        /// Serialized JSON array.
        params: Bytes,
        id_tx: Option<oneshot::Sender<u64>>,
        reply: oneshot::Sender<Reply>,
    },
    Notify {
        method: String,
        params: Bytes,
    },
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

async fn sleep_until_due(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Handle to a live session; cheap to clone. The session ends when every handle is dropped,
/// on a socket or protocol error, or when the peer stops answering probes.
#[derive(Clone)]
pub struct Connection {
    remote: Arc<str>,
    tx: mpsc::UnboundedSender<Command>,
    closed: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("remote", &self.remote)
            .finish()
    }
}

impl Connection {
    /// Connect to `remote`; notifications arrive on the returned receiver, which ends when the
    /// session does.
    pub async fn connect(
        remote: &Remote,
        opts: &ConnectOptions,
    ) -> Result<(Connection, mpsc::UnboundedReceiver<Notification>), Error> {
        let name = remote.to_string();
        let io = tokio::time::timeout(opts.connect_timeout, open(remote, opts))
            .await
            .map_err(|_| Error::Connect {
                remote: name.clone(),
                reason: "timed out".into(),
            })??;
        let (tx, rx) = mpsc::unbounded_channel();
        let (ntx, nrx) = mpsc::unbounded_channel();
        let closed = Arc::new(Mutex::new(None));
        let task = Session {
            remote: name.clone(),
            probe: opts.probe_interval,
            next_id: 0,
            pending: HashMap::new(),
            due: Default::default(),
            request_timeout: opts.request_timeout,
            notify: ntx,
            closed: closed.clone(),
        };
        let max_message = opts.max_message;
        tokio::spawn(async move {
            let reason = task.run(io, rx, max_message).await;
            tracing::debug!(remote = %reason.0, reason = %reason.1, "ovsdb session closed");
        });
        Ok((
            Connection {
                remote: name.into(),
                tx,
                closed,
            },
            nrx,
        ))
    }

    pub fn remote(&self) -> &str {
        &self.remote
    }

    /// Why the session ended, once it has.
    pub fn close_reason(&self) -> Option<String> {
        self.closed.lock().ok().and_then(|c| c.clone())
    }

    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Send a request and wait for its result.
    pub async fn call(&self, method: &str, params: Json) -> Result<Json, Error> {
        let r = self.call_inner(method, to_bytes(&params), None).await?;
        self.tree(method, &r)
    }

    /// [`Connection::call`] with the result as the server wrote it (valid JSON): for results
    /// too large to hold as a JSON tree, decoded piece by piece by the caller.
    pub async fn call_raw(&self, method: &str, params: Json) -> Result<Bytes, Error> {
        self.call_inner(method, to_bytes(&params), None).await
    }

    /// A result as a JSON tree. The reader checked it is JSON; only a tree too deep for the
    /// parser fails here.
    fn tree(&self, method: &str, result: &Bytes) -> Result<Json, Error> {
        serde_json::from_slice(result).map_err(|e| Error::Lost {
            remote: self.remote.to_string(),
            method: method.to_owned(),
            reason: format!("unreadable result: {e}"),
        })
    }

    /// Send a request whose params are already serialized (a JSON array), e.g. a large
    /// transaction: it is not copied into a JSON tree again, and a retry reuses the bytes.
    pub async fn call_serialized(&self, method: &str, params: Bytes) -> Result<Json, Error> {
        let r = self.call_inner(method, params, None).await?;
        self.tree(method, &r)
    }

    /// Send a request; `id` receives its JSON-RPC id once written (for `cancel`).
    pub async fn call_with_id(
        &self,
        method: &str,
        params: Json,
        id: oneshot::Sender<u64>,
    ) -> Result<Json, Error> {
        let r = self.call_inner(method, to_bytes(&params), Some(id)).await?;
        self.tree(method, &r)
    }

    async fn call_inner(
        &self,
        method: &str,
        params: Bytes,
        id_tx: Option<oneshot::Sender<u64>>,
    ) -> Result<Bytes, Error> {
        let (reply_tx, reply_rx) = oneshot::channel();
        let cmd = Command::Call {
            method: method.to_owned(),
            params,
            id_tx,
            reply: reply_tx,
        };
        if self.tx.send(cmd).is_err() {
            return Err(self.not_sent(
                method,
                self.close_reason().unwrap_or_else(|| "closed".into()),
            ));
        }
        match reply_rx.await {
            Ok(Reply::Ok(r)) => Ok(r),
            Ok(Reply::Err { error }) => Err(Error::rpc(&self.remote, method, &error)),
            Ok(Reply::Lost(reason)) => Err(Error::Lost {
                remote: self.remote.to_string(),
                method: method.to_owned(),
                reason,
            }),
            Ok(Reply::NotSent(reason)) => Err(self.not_sent(method, reason)),
            Err(_) => Err(Error::Lost {
                remote: self.remote.to_string(),
                method: method.to_owned(),
                reason: "session task ended".into(),
            }),
        }
    }

    fn not_sent(&self, method: &str, reason: String) -> Error {
        Error::NotSent {
            remote: self.remote.to_string(),
            method: method.to_owned(),
            reason,
        }
    }

    /// Send a notification (e.g. `cancel`).
    pub fn notify(&self, method: &str, params: Json) -> Result<(), Error> {
        self.tx
            .send(Command::Notify {
                method: method.to_owned(),
                params: to_bytes(&params),
            })
            .map_err(|_| self.not_sent(method, "closed".into()))
    }

    /// Ask the server to cancel an outstanding request (RFC 7047 §4.1.4).
    pub fn cancel(&self, id: u64) -> Result<(), Error> {
        self.notify("cancel", json!([id]))
    }
}

async fn open(remote: &Remote, opts: &ConnectOptions) -> Result<Box<dyn Io>, Error> {
    let name = remote.to_string();
    let cerr = |e: std::io::Error| Error::Connect {
        remote: name.clone(),
        reason: e.to_string(),
    };
    match remote {
        Remote::Unix(path) => Ok(Box::new(
            tokio::net::UnixStream::connect(path).await.map_err(cerr)?,
        )),
        Remote::Tcp { host, port } => {
            let s = tokio::net::TcpStream::connect((host.as_str(), *port))
                .await
                .map_err(cerr)?;
            // Small JSON-RPC requests must not wait for Nagle.
            s.set_nodelay(true).map_err(cerr)?;
            Ok(Box::new(s))
        }
        Remote::Ssl { host, port } => {
            let cfg = opts.tls.clone().ok_or_else(|| Error::Connect {
                remote: name.clone(),
                reason: "ssl: remote but no TLS configuration".into(),
            })?;
            let s = tokio::net::TcpStream::connect((host.as_str(), *port))
                .await
                .map_err(cerr)?;
            s.set_nodelay(true).map_err(cerr)?;
            let sn = crate::tls::server_name(host).map_err(|e| Error::Connect {
                remote: name.clone(),
                reason: e.to_string(),
            })?;
            let tls = tokio_rustls::TlsConnector::from(cfg)
                .connect(sn, s)
                .await
                .map_err(cerr)?;
            Ok(Box::new(tls))
        }
    }
}

struct Session {
    remote: String,
    probe: Option<Duration>,
    next_id: u64,
    pending: HashMap<u64, oneshot::Sender<Reply>>,
    /// When each request sent is due, oldest first, with its method (for the message).
    due: std::collections::VecDeque<(Instant, u64, String)>,
    request_timeout: Option<Duration>,
    notify: mpsc::UnboundedSender<Notification>,
    closed: Arc<Mutex<Option<String>>>,
}

impl Session {
    async fn run(
        mut self,
        io: Box<dyn Io>,
        mut rx: mpsc::UnboundedReceiver<Command>,
        max_message: usize,
    ) -> (String, String) {
        let (r, w) = tokio::io::split(io);
        let mut reader = FramedRead::new(r, FrameCodec::new(max_message));
        // Writing runs in its own task: ovsdb-server stops reading while its replies are
        // backed up, so a reader that waits on a blocked write would deadlock with it.
        let (out_tx, out_rx) = mpsc::unbounded_channel::<Bytes>();
        let mut writer = tokio::spawn(write_loop(
            FramedWrite::new(w, JsonCodec::new(max_message)),
            out_rx,
        ));
        let far = Duration::from_secs(365 * 24 * 3600);
        let interval = self.probe.unwrap_or(far);
        let mut deadline = Instant::now() + interval;
        let mut probing = false;
        let reason: String = loop {
            tokio::select! {
                frame = reader.next() => {
                    let f = match frame {
                        None => break "connection closed by peer".into(),
                        Some(Err(e)) => break format!("read: {e}"),
                        Some(Ok(f)) => f,
                    };
                    deadline = Instant::now() + interval;
                    probing = false;
                    let big = f.len() > KEEP_READ_BUFFER;
                    let msg = match parse_frame(&f) {
                        Ok(m) => m,
                        // Worded as when the codec parsed the JSON.
                        Err(IncomingError::Json(e)) => break format!("read: {}", FramingError::Json(e)),
                        Err(IncomingError::Protocol(e)) => break e.to_string(),
                    };
                    self.dispatch(msg, &out_tx);
                    // A big frame (a monitor's snapshot) grew the read buffer: give it back
                    // once read rather than keep that much for the connection's life. The
                    // frame was split off the same allocation, so what is left reports only
                    // the tail's capacity while it keeps the whole allocation: decide by the
                    // frame's size, and copy out what was read past it.
                    let buf = reader.read_buffer();
                    if big || buf.capacity() > KEEP_READ_BUFFER {
                        let rest = bytes::BytesMut::from(&buf[..]);
                        drop(f);
                        *reader.read_buffer_mut() = rest;
                    }
                }
                cmd = rx.recv() => {
                    let Some(cmd) = cmd else { break "closed by client".into() };
                    self.send(cmd, &out_tx);
                }
                w = &mut writer => {
                    break match w {
                        Ok(e) => e,
                        Err(e) => format!("writer task: {e}"),
                    };
                }
                _ = sleep_until_due(self.next_due()) => {
                    if let Some((_, id, method)) = self.due.pop_front()
                        && self.pending.contains_key(&id)
                    {
                        break format!(
                            "no reply to {method} (id {id}) within {:?}",
                            self.request_timeout.unwrap_or_default()
                        );
                    }
                }
                _ = tokio::time::sleep_until(deadline) => {
                    if probing {
                        break format!("peer silent for {:?} (dead-peer probe)", interval * 2);
                    }
                    probing = true;
                    deadline = Instant::now() + interval;
                    let _ = out_tx.send(frame(None, "echo", b"[]", true));
                }
            }
        };
        writer.abort();
        // Recorded before any caller is answered, so a caller can always read it.
        if let Ok(mut c) = self.closed.lock() {
            *c = Some(reason.clone());
        }
        // Requests handed to the writer may have run; those still queued here did not.
        for (_, tx) in self.pending.drain() {
            let _ = tx.send(Reply::Lost(reason.clone()));
        }
        rx.close();
        while let Ok(cmd) = rx.try_recv() {
            if let Command::Call { reply, .. } = cmd {
                let _ = reply.send(Reply::NotSent(reason.clone()));
            }
        }
        (self.remote, reason)
    }

    /// The deadline of the oldest request still unanswered (answered ones are dropped here).
    fn next_due(&mut self) -> Option<Instant> {
        while let Some((_, id, _)) = self.due.front() {
            if self.pending.contains_key(id) {
                break;
            }
            self.due.pop_front();
        }
        self.due.front().map(|d| d.0)
    }

    fn send(&mut self, cmd: Command, out: &mpsc::UnboundedSender<Bytes>) {
        match cmd {
            Command::Call {
                method,
                params,
                id_tx,
                reply,
            } => {
                self.next_id += 1;
                let id = self.next_id;
                // Registered before writing: a failed write then reports the call as lost.
                self.pending.insert(id, reply);
                if let Some(t) = self.request_timeout {
                    self.due.push_back((Instant::now() + t, id, method.clone()));
                }
                if let Some(t) = id_tx {
                    let _ = t.send(id);
                }
                send_framed(out, Some(id), &method, params);
            }
            Command::Notify { method, params } => {
                send_framed(out, None, &method, params);
            }
        }
    }

    fn dispatch(&mut self, msg: Incoming, out: &mpsc::UnboundedSender<Bytes>) {
        let msg = match msg {
            Incoming::Notification { method, params } => {
                // The receiver may be gone (nobody listens): not a reason to close.
                let _ = self.notify.send(Notification { method, params });
                return;
            }
            Incoming::Response { id, result, error } => return self.respond(id, result, error),
            Incoming::Message(m) => m,
        };
        match msg {
            Message::Response { id, result, error } => self.respond(id, to_bytes(&result), error),
            Message::Request { id, method, params } => {
                let reply = if method == "echo" {
                    json!({"id": id, "result": params, "error": null})
                } else {
                    json!({"id": id, "result": null, "error": "unknown method"})
                };
                let _ = out.send(to_bytes(&reply));
            }
            Message::Notification { method, params } => {
                let _ = self.notify.send(Notification {
                    method,
                    params: to_bytes(&params),
                });
            }
        }
    }

    /// Hand a response to the request waiting for it.
    fn respond(&mut self, id: Json, result: Bytes, error: Json) {
        let Some(n) = id.as_u64() else {
            // Our probe's answer ("echo" id) or a stray id: nothing waits for it.
            return;
        };
        match self.pending.remove(&n) {
            Some(tx) => {
                let r = if error.is_null() {
                    Reply::Ok(result)
                } else {
                    Reply::Err { error }
                };
                let _ = tx.send(r);
            }
            None => tracing::debug!(remote = %self.remote, id = n, "response to no request"),
        }
    }
}

fn to_bytes(j: &Json) -> Bytes {
    // Serializing a JSON tree cannot fail (its map keys are strings).
    Bytes::from(serde_json::to_vec(j).unwrap_or_default())
}

/// The read buffer's capacity kept between frames.
const KEEP_READ_BUFFER: usize = 1 << 20;

/// Messages from this size on are written straight to the socket, not copied into the
/// writer's buffer (and their params not copied into one frame first).
const BIG_WRITE: usize = 256 * 1024;

/// Queue a request or notification for the writer: one frame, or for big params the head,
/// the params and the closing brace as they are (the writer keeps them in order and together,
/// as this task is its only sender).
fn send_framed(out: &mpsc::UnboundedSender<Bytes>, id: Option<u64>, method: &str, params: Bytes) {
    if params.len() < BIG_WRITE {
        let _ = out.send(frame(id, method, &params, false));
        return;
    }
    let _ = out.send(Bytes::from(frame_head(id, method, false, 0)));
    let _ = out.send(params);
    let _ = out.send(Bytes::from_static(b"}"));
}

/// `{"id":ID,"method":M,"params":` with room for `extra` more bytes.
fn frame_head(id: Option<u64>, method: &str, probe: bool, extra: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(extra + method.len() + 48);
    b.extend_from_slice(b"{\"id\":");
    match id {
        _ if probe => b.extend_from_slice(b"\"echo\""),
        Some(n) => b.extend_from_slice(n.to_string().as_bytes()),
        None => b.extend_from_slice(b"null"),
    }
    b.extend_from_slice(b",\"method\":");
    let _ = serde_json::to_writer(&mut b, method);
    b.extend_from_slice(b",\"params\":");
    b
}

/// One request or notification: `{"id":ID,"method":M,"params":P}` around serialized params.
/// `probe`: our echo, whose id is a string so no caller's reply can match it.
fn frame(id: Option<u64>, method: &str, params: &[u8], probe: bool) -> Bytes {
    let mut b = frame_head(id, method, probe, params.len());
    b.extend_from_slice(params);
    b.push(b'}');
    Bytes::from(b)
}

/// Hand one message to the writer: small ones to its buffer, big ones straight to the socket
/// once what is buffered before them is out.
async fn put<W: AsyncWrite + Unpin>(
    w: &mut FramedWrite<W, JsonCodec>,
    m: Bytes,
) -> Result<(), FramingError> {
    if m.len() < BIG_WRITE {
        return w.feed(m).await;
    }
    SinkExt::<Bytes>::flush(w).await?;
    w.get_mut().write_all(&m).await?;
    Ok(())
}

/// Write queued messages, batching whatever is queued into one flush (cheap pipelining).
/// Returns why it stopped.
async fn write_loop<W>(
    mut w: FramedWrite<W, JsonCodec>,
    mut rx: mpsc::UnboundedReceiver<Bytes>,
) -> String
where
    W: AsyncWrite + Unpin,
{
    while let Some(m) = rx.recv().await {
        let mut res = put(&mut w, m).await;
        while res.is_ok() {
            match rx.try_recv() {
                Ok(m) => res = put(&mut w, m).await,
                Err(_) => break,
            }
        }
        if let Err(e) = res {
            return format!("write: {e}");
        }
        if let Err(e) = SinkExt::<Bytes>::flush(&mut w).await {
            return format!("write: {e}");
        }
    }
    "writer closed".into()
}
