//! An async OpenFlow 1.3 connection: the thin tokio shell around the wire layer.
//!
//! Three pieces share one `Shared` table under a short-held mutex:
//! - a **writer task** that writes pre-encoded buffers in order (callers encode on their own
//!   task, so a 50k-flow bundle is one buffer and one write);
//! - a **reader task** that frames ([`OfCodec`]), decodes and routes each message by xid: to the
//!   waiter of a request, to the collector of a multipart reply until its last part, to the
//!   error list of a batch or bundle; echo requests are answered; everything unsolicited goes
//!   to the [`Event`] stream;
//! - a **keepalive task** that sends ECHO_REQUEST when the peer has been silent for
//!   `echo_interval` and declares it dead after `dead_after` of silence.
//!
//! Waiters are registered before their request is written, so a reply can never race its
//! waiter. When the connection ends for any reason (EOF, I/O error, bad frame, dead peer, drop)
//! every waiter gets the same [`ConnError::Closed`] at once and later calls fail immediately.

use crate::bundle::{BundleCtrl, BundleCtrlType, bundle_flags};
use crate::codec::{FrameError, MAX_MESSAGE_LEN, OfCodec};
use crate::error::DecodeError;
use crate::header::{Header, OFP_VERSION_1_3};
use crate::message::{ErrorMsg, Hello, Message, error_type};
use crate::multipart::{
    Desc, FlowStats, FlowStatsRequest, MultipartReply, MultipartReplyBody, MultipartRequest,
    MultipartRequestBody,
};
use crate::port::Port;
use bytes::Bytes;
use futures::StreamExt;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::codec::FramedRead;

mod open_bundle;
pub use open_bundle::OpenBundle;

/// Default [`Config::max_multipart_bytes`].
pub const DEFAULT_MAX_MULTIPART_BYTES: usize = 32 << 20;

/// Default [`Config::max_multipart_parts`].
pub const DEFAULT_MAX_MULTIPART_PARTS: usize = 4096;

/// Connection settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Send ECHO_REQUEST after this much silence from the peer.
    pub echo_interval: Duration,
    /// Declare the peer dead after this much silence (echoes unanswered).
    pub dead_after: Duration,
    /// Time allowed for connecting and the HELLO exchange.
    pub connect_timeout: Duration,
    /// Give up on a single request's reply after this long (the connection stays up).
    pub request_timeout: Duration,
    /// Largest message accepted from the peer.
    pub max_message_len: usize,
    /// Largest multipart reply (all its parts' bytes together) accepted: a peer that keeps
    /// setting "more" cannot grow the reassembly without bound. The default holds a dump of
    /// about 200,000 of vipflow's flows.
    pub max_multipart_bytes: usize,
    /// Most parts of one multipart reply: tiny parts cost more to keep than their bytes say.
    /// Open vSwitch fills parts to about 64 KiB, so a real dump needs few.
    pub max_multipart_parts: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            echo_interval: Duration::from_secs(5),
            dead_after: Duration::from_secs(15),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(60),
            max_message_len: MAX_MESSAGE_LEN,
            max_multipart_bytes: DEFAULT_MAX_MULTIPART_BYTES,
            max_multipart_parts: DEFAULT_MAX_MULTIPART_PARTS,
        }
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ConnError {
    #[error("bad OpenFlow target {0:?}: expected unix:PATH or tcp:HOST:PORT")]
    Target(String),
    #[error("connect to {target}: {reason}")]
    Connect { target: String, reason: String },
    #[error("OpenFlow version negotiation with {target} failed: {detail}")]
    Version { target: String, detail: String },
    #[error("the switch rejected the request: {0}")]
    Switch(ErrorMsg),
    #[error("connection closed: {0}")]
    Closed(Arc<str>),
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    #[error("unexpected reply: {0}")]
    Protocol(String),
    /// A multipart reply grew past [`Config::max_multipart_bytes`]; the connection is closed.
    #[error(
        "multipart reply over the limit of {limit_bytes} bytes or {limit_parts} parts (after {bytes} bytes in {parts} parts)"
    )]
    ReplyTooLarge {
        limit_bytes: usize,
        limit_parts: usize,
        bytes: usize,
        parts: usize,
    },
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// Some messages of a non-atomic batch failed (the others were applied). Each entry is
    /// the message's index in the batch and the switch's error.
    #[error("{} of the batch's messages failed, first: {}", .0.len(), first_error(.0))]
    Batch(Vec<(usize, ErrorMsg)>),
    /// A bundle was not committed, so none of it was applied. `messages` holds the errors the
    /// switch attributed to individual messages (index in the bundle), `control` the error on
    /// the open/commit itself.
    #[error("bundle not applied: {}", bundle_reason(.control, .messages))]
    Bundle {
        control: Option<ErrorMsg>,
        messages: Vec<(usize, ErrorMsg)>,
    },
}

fn first_error(v: &[(usize, ErrorMsg)]) -> String {
    v.first()
        .map_or_else(String::new, |(i, e)| format!("message {i}: {e}"))
}

fn bundle_reason(control: &Option<ErrorMsg>, messages: &[(usize, ErrorMsg)]) -> String {
    match (messages.first(), control) {
        (Some((i, e)), _) => format!("message {i}: {e}"),
        (None, Some(e)) => e.to_string(),
        (None, None) => "unknown".into(),
    }
}

/// Something the switch sent that no request asked for, or the end of the connection.
#[derive(Debug, Clone)]
pub enum Event {
    /// PORT_STATUS, PACKET_IN, FLOW_REMOVED, an ERROR for a fire-and-forget message, ...
    Message(Header, Message),
    /// The connection is over; no further events follow.
    Closed(ConnError),
}

enum Waiter {
    Reply(oneshot::Sender<Result<Message, ConnError>>),
    Multipart(Parts, oneshot::Sender<Result<MultipartReply, ConnError>>),
    /// Each part handed on as it arrives; `Parts` only counts (its `parts` stay empty).
    Stream(Parts, mpsc::Sender<Result<MultipartReply, ConnError>>),
}

impl Waiter {
    fn fail(self, e: ConnError) {
        match self {
            Waiter::Reply(tx) => {
                let _ = tx.send(Err(e));
            }
            Waiter::Multipart(_, tx) => {
                let _ = tx.send(Err(e));
            }
            Waiter::Stream(_, tx) => {
                // Room or not: the receiver learns the connection is gone when the sender is.
                let _ = tx.try_send(Err(e));
            }
        }
    }
}

/// How many bytes of a batch or bundle are encoded before they are written.
const WRITE_CHUNK: usize = 256 << 10;

/// Writes queued for the socket. Encoding outruns the switch, so a large batch fills the
/// queue: its depth, in chunks, is what a batch holds in memory beyond what the switch took
/// (a few chunks keep the socket busy; more only hold encoded flows longer).
const WRITE_QUEUE: usize = 8;

/// Parts of a streamed multipart reply decoded ahead of its caller.
const STREAM_PARTS: usize = 4;

/// A multipart reply being reassembled, with its size on the wire so far.
#[derive(Default)]
struct Parts {
    parts: Vec<MultipartReply>,
    bytes: usize,
    /// Parts received (for a stream, whose parts are not kept).
    count: usize,
}

impl Parts {
    /// Count one more part of `h.length` bytes; the error once the reply is over the limits
    /// (the peer is not to be trusted with more: the caller drops the connection).
    fn count_in(&mut self, h: &Header, config: &Config) -> Option<ConnError> {
        self.bytes += usize::from(h.length);
        self.count += 1;
        let (limit_bytes, limit_parts) = (config.max_multipart_bytes, config.max_multipart_parts);
        (self.bytes > limit_bytes || self.count > limit_parts).then_some(ConnError::ReplyTooLarge {
            limit_bytes,
            limit_parts,
            bytes: self.bytes,
            parts: self.count,
        })
    }
}

/// Errors collected for a contiguous range of xids (a batch or a bundle's messages).
struct Watch {
    xids: Range<u32>,
    errors: Vec<(usize, ErrorMsg)>,
}

#[derive(Default)]
struct Shared {
    waiters: HashMap<u32, Waiter>,
    watches: Vec<Watch>,
    closed: Option<ConnError>,
}

struct Inner {
    shared: Mutex<Shared>,
    next_xid: AtomicU32,
    next_bundle: AtomicU32,
    writer: mpsc::Sender<Bytes>,
    events: mpsc::UnboundedSender<Event>,
    config: Config,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for t in lock(&self.tasks).drain(..) {
            t.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding this lock cannot leave the tables inconsistent in a way that
    // matters more than losing the connection, so poisoning is ignored.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Inner {
    /// Fail every waiter and every later call with `err`; tell the event stream once.
    fn close(&self, err: ConnError) {
        let waiters = {
            let mut s = lock(&self.shared);
            if s.closed.is_some() {
                return;
            }
            s.closed = Some(err.clone());
            s.watches.clear();
            std::mem::take(&mut s.waiters)
        };
        for (_, w) in waiters {
            w.fail(err.clone());
        }
        let _ = self.events.send(Event::Closed(err));
    }
}

/// A handle on one OpenFlow connection. Cheap to clone; the connection closes when the last
/// handle is dropped (or on [`Connection::close`]).
#[derive(Clone)]
pub struct Connection {
    inner: Arc<Inner>,
    target: Arc<str>,
    features: crate::message::SwitchFeatures,
}

/// Unsolicited messages and the closing reason, in arrival order.
pub type Events = mpsc::UnboundedReceiver<Event>;

trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

impl Connection {
    /// Connect to `unix:PATH` or `tcp:HOST:PORT`, negotiate OpenFlow 1.3 and learn the
    /// switch's features.
    pub async fn connect(target: &str, config: Config) -> Result<(Connection, Events), ConnError> {
        let stream = tokio::time::timeout(config.connect_timeout, open(target))
            .await
            .map_err(|_| ConnError::Connect {
                target: target.into(),
                reason: format!("timed out after {:?}", config.connect_timeout),
            })??;
        Self::handshake(target, stream, config).await
    }

    /// Run the connection over an already open stream (tests, custom transports).
    pub async fn from_stream<S>(
        target: &str,
        stream: S,
        config: Config,
    ) -> Result<(Connection, Events), ConnError>
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        Self::handshake(target, Box::new(stream), config).await
    }

    async fn handshake(
        target: &str,
        stream: Box<dyn Stream>,
        config: Config,
    ) -> Result<(Connection, Events), ConnError> {
        let (rd, mut wr) = tokio::io::split(stream);
        let mut frames = FramedRead::new(rd, OfCodec::new(config.max_message_len));
        let io_err = |e: std::io::Error| ConnError::Connect {
            target: target.into(),
            reason: e.to_string(),
        };
        let verr = |detail: String| ConnError::Version {
            target: target.into(),
            detail,
        };

        wr.write_all(&Message::Hello(Hello::of13()).encode(0))
            .await
            .map_err(io_err)?;
        let first = tokio::time::timeout(config.connect_timeout, frames.next())
            .await
            .map_err(|_| verr(format!("no HELLO within {:?}", config.connect_timeout)))?;
        let frame = match first {
            Some(Ok(f)) => f,
            Some(Err(e)) => return Err(verr(e.to_string())),
            None => return Err(verr("peer closed before HELLO".into())),
        };
        let (h, m) = Message::decode(&frame).map_err(|e| verr(e.to_string()))?;
        let hello = match m {
            Message::Hello(hello) => hello,
            Message::Error(e) => return Err(verr(format!("peer sent an error: {e}"))),
            other => {
                return Err(verr(format!(
                    "expected HELLO, got message type {}",
                    other.msg_type()
                )));
            }
        };
        // With bitmaps on both sides the highest common version wins; without one, the lower
        // of the two header versions (OpenFlow 1.3, section 6.3.1).
        let shared = if hello.version_bitmap.is_empty() {
            h.version >= OFP_VERSION_1_3
        } else {
            hello.supports(OFP_VERSION_1_3)
        };
        if !shared {
            let err = Message::Error(ErrorMsg {
                err_type: error_type::HELLO_FAILED,
                code: 0,
                experimenter: None,
                data: b"only OpenFlow 1.3 is supported".to_vec(),
            });
            let _ = wr.write_all(&err.encode(h.xid)).await;
            return Err(verr(format!(
                "peer speaks version {:#04x} (bitmap {:?}), we need 1.3 (0x04)",
                h.version, hello.version_bitmap
            )));
        }

        let (wtx, wrx) = mpsc::channel::<Bytes>(WRITE_QUEUE);
        let (etx, erx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            shared: Mutex::new(Shared::default()),
            next_xid: AtomicU32::new(1),
            next_bundle: AtomicU32::new(1),
            writer: wtx,
            events: etx,
            config: config.clone(),
            tasks: Mutex::new(Vec::new()),
        });
        let last_rx = Arc::new(Mutex::new(Instant::now()));
        let weak = Arc::downgrade(&inner);
        let reader = tokio::spawn(read_loop(frames, weak.clone(), last_rx.clone()));
        let writer = tokio::spawn(write_loop(wr, wrx, weak.clone()));
        let keepalive = tokio::spawn(keepalive_loop(weak, last_rx, config));
        lock(&inner.tasks).extend([reader, writer, keepalive]);

        let mut conn = Connection {
            inner,
            target: target.into(),
            features: Default::default(),
        };
        match conn.request(&Message::FeaturesRequest).await? {
            Message::FeaturesReply(f) => conn.features = f,
            other => {
                return Err(ConnError::Protocol(format!(
                    "FEATURES_REQUEST answered with message type {}",
                    other.msg_type()
                )));
            }
        }
        Ok((conn, erx))
    }

    pub fn target(&self) -> &str {
        &self.target
    }

    /// The switch's FEATURES_REPLY (datapath id, tables, capabilities).
    pub fn features(&self) -> crate::message::SwitchFeatures {
        self.features
    }

    /// Whether the connection has ended (and why).
    pub fn closed(&self) -> Option<ConnError> {
        lock(&self.inner.shared).closed.clone()
    }

    /// Close the connection: pending requests fail, the event stream ends.
    pub fn close(&self) {
        self.inner.close(ConnError::Closed("closed by us".into()));
        for t in lock(&self.inner.tasks).drain(..) {
            t.abort();
        }
    }

    /// Allocate `n` consecutive xids (never 0, never wrapping inside the range).
    fn xids(&self, n: u32) -> Range<u32> {
        loop {
            let start = self.inner.next_xid.fetch_add(n, Ordering::Relaxed);
            if start != 0 && start.checked_add(n).is_some() {
                return start..start + n;
            }
            // Wrapped: start over at 1 and allocate again.
            let _ = self.inner.next_xid.compare_exchange(
                start.wrapping_add(n),
                1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    fn check_open(&self) -> Result<(), ConnError> {
        match &lock(&self.inner.shared).closed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    async fn write(&self, buf: Vec<u8>) -> Result<(), ConnError> {
        self.inner.writer.send(Bytes::from(buf)).await.map_err(|_| {
            self.closed()
                .unwrap_or_else(|| ConnError::Closed("writer stopped".into()))
        })
    }

    /// Register `waiter` for `xid` unless the connection is already closed.
    fn register(&self, xid: u32, waiter: Waiter) -> Result<(), ConnError> {
        let mut s = lock(&self.inner.shared);
        if let Some(e) = &s.closed {
            return Err(e.clone());
        }
        s.waiters.insert(xid, waiter);
        Ok(())
    }

    fn unregister(&self, xid: u32) {
        lock(&self.inner.shared).waiters.remove(&xid);
    }

    async fn wait<T>(
        &self,
        xid: u32,
        rx: oneshot::Receiver<Result<T, ConnError>>,
    ) -> Result<T, ConnError> {
        let t = self.inner.config.request_timeout;
        match tokio::time::timeout(t, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(self
                .closed()
                .unwrap_or_else(|| ConnError::Closed("dropped".into()))),
            Err(_) => {
                self.unregister(xid);
                Err(ConnError::Timeout(t))
            }
        }
    }

    /// Send a message without waiting for anything. An ERROR the switch sends for it arrives
    /// on the event stream. Returns the xid used.
    pub async fn send(&self, msg: &Message) -> Result<u32, ConnError> {
        self.check_open()?;
        let xid = self.xids(1).start;
        self.write(msg.encode(xid)).await?;
        Ok(xid)
    }

    /// Send a request and wait for its reply. An ERROR for it is returned as
    /// [`ConnError::Switch`].
    pub async fn request(&self, msg: &Message) -> Result<Message, ConnError> {
        let xid = self.xids(1).start;
        let (tx, rx) = oneshot::channel();
        self.register(xid, Waiter::Reply(tx))?;
        if let Err(e) = self.write(msg.encode(xid)).await {
            self.unregister(xid);
            return Err(e);
        }
        self.wait(xid, rx).await
    }

    /// A multipart request; all parts of the reply are collected and merged.
    pub async fn multipart(&self, body: MultipartRequestBody) -> Result<MultipartReply, ConnError> {
        let xid = self.xids(1).start;
        let (tx, rx) = oneshot::channel();
        self.register(xid, Waiter::Multipart(Parts::default(), tx))?;
        let msg = Message::MultipartRequest(MultipartRequest::new(body));
        if let Err(e) = self.write(msg.encode(xid)).await {
            self.unregister(xid);
            return Err(e);
        }
        self.wait(xid, rx).await
    }

    /// BARRIER: returns once the switch has processed everything sent before it.
    pub async fn barrier(&self) -> Result<(), ConnError> {
        match self.request(&Message::BarrierRequest).await? {
            Message::BarrierReply => Ok(()),
            other => Err(unexpected("BARRIER_REQUEST", &other)),
        }
    }

    /// Ask for PORT_STATUS messages (and no other asynchronous message) on the event stream.
    ///
    /// Open vSwitch sends nothing asynchronous to a service connection (its `<bridge>.mgmt`
    /// socket, `ptcp:`/`punix:` listeners) until that connection sets a nonzero
    /// `miss_send_len`; the async config then keeps packet-ins and flow-removed messages off.
    /// Returns once the switch has applied both (a barrier), so no port change after it is
    /// missed.
    pub async fn subscribe_port_status(&self) -> Result<(), ConnError> {
        use crate::message::{AsyncConfig, SwitchConfig};
        self.send(&Message::SetConfig(SwitchConfig {
            flags: 0,
            miss_send_len: 128,
        }))
        .await?;
        self.send(&Message::SetAsync(AsyncConfig::port_status_only()))
            .await?;
        self.barrier().await
    }

    pub async fn echo(&self, data: Vec<u8>) -> Result<Vec<u8>, ConnError> {
        match self.request(&Message::EchoRequest(data)).await? {
            Message::EchoReply(d) => Ok(d),
            other => Err(unexpected("ECHO_REQUEST", &other)),
        }
    }

    pub async fn desc(&self) -> Result<Desc, ConnError> {
        match self.multipart(MultipartRequestBody::Desc).await?.body {
            MultipartReplyBody::Desc(d) => Ok(d),
            other => Err(ConnError::Protocol(format!("DESC answered with {other:?}"))),
        }
    }

    /// Every port of the switch (PORT_DESC), LOCAL included.
    pub async fn port_desc(&self) -> Result<Vec<Port>, ConnError> {
        match self.multipart(MultipartRequestBody::PortDesc).await?.body {
            MultipartReplyBody::PortDesc(p) => Ok(p),
            other => Err(ConnError::Protocol(format!(
                "PORT_DESC answered with {other:?}"
            ))),
        }
    }

    /// Flow statistics (e.g. [`FlowStatsRequest::by_cookie`] for the flows we own).
    pub async fn flow_stats(&self, req: FlowStatsRequest) -> Result<Vec<FlowStats>, ConnError> {
        match self.multipart(MultipartRequestBody::Flow(req)).await?.body {
            MultipartReplyBody::Flow(f) => Ok(f),
            other => Err(ConnError::Protocol(format!(
                "FLOW stats answered with {other:?}"
            ))),
        }
    }

    /// FLOW stats, handed to `each` part by part as the switch sends them: a large table is
    /// never held whole (unlike [`Connection::flow_stats`]). The same size limits apply; a
    /// part late by more than the request timeout fails the request.
    pub async fn flow_stats_each(
        &self,
        req: FlowStatsRequest,
        mut each: impl FnMut(FlowStats),
    ) -> Result<(), ConnError> {
        let xid = self.xids(1).start;
        let (tx, mut rx) = mpsc::channel(STREAM_PARTS);
        self.register(xid, Waiter::Stream(Parts::default(), tx))?;
        let msg = Message::MultipartRequest(MultipartRequest::new(MultipartRequestBody::Flow(req)));
        if let Err(e) = self.write(msg.encode(xid)).await {
            self.unregister(xid);
            return Err(e);
        }
        let t = self.inner.config.request_timeout;
        loop {
            let part = match tokio::time::timeout(t, rx.recv()).await {
                Ok(Some(p)) => p?,
                Ok(None) => {
                    return Err(self
                        .closed()
                        .unwrap_or_else(|| ConnError::Closed("dropped".into())));
                }
                Err(_) => {
                    self.unregister(xid);
                    return Err(ConnError::Timeout(t));
                }
            };
            let more = part.more();
            match part.body {
                MultipartReplyBody::Flow(flows) => flows.into_iter().for_each(&mut each),
                other => {
                    self.unregister(xid);
                    return Err(ConnError::Protocol(format!(
                        "FLOW stats answered with {other:?}"
                    )));
                }
            }
            if !more {
                return Ok(());
            }
        }
    }

    /// Send messages in one write followed by a barrier; not atomic: messages the switch
    /// rejects are reported (by index) in [`ConnError::Batch`], the rest are applied.
    pub async fn apply(&self, msgs: &[Message]) -> Result<(), ConnError> {
        self.apply_with(msgs.len(), |i, xid, buf| msgs[i].encode_into(xid, buf))
            .await
    }

    /// [`Connection::apply`] for `count` messages made one at a time by `message`: many
    /// messages cost their bytes, not their typed form. An index whose `message` is `None`
    /// sends nothing (errors still name messages by index).
    pub async fn apply_each(
        &self,
        count: usize,
        mut message: impl FnMut(usize) -> Option<Message> + Send,
    ) -> Result<(), ConnError> {
        self.apply_with(count, |i, xid, buf| {
            if let Some(m) = message(i) {
                m.encode_into(xid, buf);
            }
        })
        .await
    }

    async fn apply_with(
        &self,
        count: usize,
        mut encode: impl FnMut(usize, u32, &mut Vec<u8>) + Send,
    ) -> Result<(), ConnError> {
        if count == 0 {
            return Ok(());
        }
        let n = u32::try_from(count).map_err(|_| ConnError::Protocol("batch too large".into()))?;
        let xids = self.xids(n);
        let errors = self.watched(xids, &mut encode).await?;
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ConnError::Batch(errors))
        }
    }

    /// Write the messages with xids in `xids`, then a barrier; return the errors the switch
    /// sent for those xids before the barrier reply.
    async fn watched(
        &self,
        xids: Range<u32>,
        encode: &mut (dyn FnMut(usize, u32, &mut Vec<u8>) + Send),
    ) -> Result<Vec<(usize, ErrorMsg)>, ConnError> {
        let res = match self.write_watched(xids.clone(), encode).await {
            Ok(()) => self.barrier().await,
            Err(e) => Err(e),
        };
        let errors = self.take_watch(&xids);
        res.map(|()| errors)
    }

    /// Watch `xids` for errors and write the messages with those xids, without waiting for
    /// the switch. The watch stays until [`Connection::take_watch`].
    async fn write_watched(
        &self,
        xids: Range<u32>,
        encode: &mut (dyn FnMut(usize, u32, &mut Vec<u8>) + Send),
    ) -> Result<(), ConnError> {
        {
            let mut s = lock(&self.inner.shared);
            if let Some(e) = &s.closed {
                return Err(e.clone());
            }
            s.watches.push(Watch {
                xids: xids.clone(),
                errors: Vec::new(),
            });
        }
        // Written a chunk at a time as it is encoded: the switch works on the first messages
        // while the rest are made.
        let mut buf = Vec::with_capacity(WRITE_CHUNK + 4096);
        for (i, xid) in xids.enumerate() {
            encode(i, xid, &mut buf);
            if buf.len() >= WRITE_CHUNK {
                self.write(std::mem::replace(
                    &mut buf,
                    Vec::with_capacity(WRITE_CHUNK + 4096),
                ))
                .await?;
            }
        }
        if !buf.is_empty() {
            self.write(buf).await?;
        }
        Ok(())
    }

    /// Stop watching `xids` and return the errors collected for them.
    fn take_watch(&self, xids: &Range<u32>) -> Vec<(usize, ErrorMsg)> {
        let mut s = lock(&self.inner.shared);
        let pos = s.watches.iter().position(|w| w.xids == *xids);
        pos.map(|p| s.watches.swap_remove(p).errors)
            .unwrap_or_default()
    }

    /// Apply messages atomically with an ONF bundle (open, add each, commit): either all take
    /// effect or none does. On failure, [`ConnError::Bundle`] says which message the switch
    /// rejected.
    pub async fn bundle(&self, msgs: &[Message]) -> Result<(), ConnError> {
        self.bundle_with(msgs.len(), |i, f| f(&msgs[i])).await
    }

    /// [`Connection::bundle`] for `count` messages made one at a time by `message`: a bundle
    /// of many flows costs their encoded bytes, not their typed form as well. An index whose
    /// `message` is `None` adds nothing (errors still name messages by index).
    pub async fn bundle_each(
        &self,
        count: usize,
        message: impl FnMut(usize) -> Option<Message> + Send,
    ) -> Result<(), ConnError> {
        self.bundle_with(count, open_bundle::each_made(message))
            .await
    }

    async fn bundle_with(
        &self,
        count: usize,
        with: impl FnMut(usize, &mut dyn FnMut(&Message)) + Send,
    ) -> Result<(), ConnError> {
        if count == 0 {
            return Ok(());
        }
        let mut bundle = self.open_bundle().await?;
        bundle.add_with(count, with).await?;
        bundle.commit().await
    }
}

fn unexpected(what: &str, m: &Message) -> ConnError {
    ConnError::Protocol(format!(
        "{what} answered with message type {}",
        m.msg_type()
    ))
}

/// A bundle add for a borrowed message (same bytes as `Message::BundleAdd`).
fn encode_bundle_add(bundle_id: u32, flags: u16, m: &Message, xid: u32, out: &mut Vec<u8>) {
    use crate::bundle::{ONF_EXPERIMENTER_ID, ONFT_BUNDLE_ADD_MESSAGE, emit_add_body};
    Message::frame_into(crate::header::msg_type::EXPERIMENTER, xid, out, |out| {
        out.extend_from_slice(&ONF_EXPERIMENTER_ID.to_be_bytes());
        out.extend_from_slice(&ONFT_BUNDLE_ADD_MESSAGE.to_be_bytes());
        emit_add_body(bundle_id, flags, m, xid, out);
    });
}

async fn open(target: &str) -> Result<Box<dyn Stream>, ConnError> {
    let cerr = |e: std::io::Error| ConnError::Connect {
        target: target.into(),
        reason: e.to_string(),
    };
    if let Some(path) = target.strip_prefix("unix:") {
        let s = tokio::net::UnixStream::connect(path).await.map_err(cerr)?;
        Ok(Box::new(s))
    } else if let Some(addr) = target.strip_prefix("tcp:") {
        if addr.is_empty() {
            return Err(ConnError::Target(target.into()));
        }
        let s = tokio::net::TcpStream::connect(addr).await.map_err(cerr)?;
        let _ = s.set_nodelay(true);
        Ok(Box::new(s))
    } else {
        Err(ConnError::Target(target.into()))
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut wr: W,
    mut rx: mpsc::Receiver<Bytes>,
    inner: std::sync::Weak<Inner>,
) {
    while let Some(buf) = rx.recv().await {
        if let Err(e) = wr.write_all(&buf).await {
            if let Some(inner) = inner.upgrade() {
                inner.close(ConnError::Closed(format!("write failed: {e}").into()));
            }
            return;
        }
    }
    let _ = wr.shutdown().await;
}

async fn read_loop<R: AsyncRead + Unpin>(
    mut frames: FramedRead<R, OfCodec>,
    inner: std::sync::Weak<Inner>,
    last_rx: Arc<Mutex<Instant>>,
) {
    let reason: Arc<str> = loop {
        let next = frames.next().await;
        let Some(inner) = inner.upgrade() else { return };
        match next {
            None => break "the switch closed the connection".into(),
            Some(Err(FrameError::Io(e))) => break format!("read failed: {e}").into(),
            Some(Err(e)) => break format!("bad frame from the switch: {e}").into(),
            Some(Ok(frame)) => {
                *lock(&last_rx) = Instant::now();
                dispatch(&inner, &frame).await;
            }
        }
    };
    if let Some(inner) = inner.upgrade() {
        inner.close(ConnError::Closed(reason));
    }
}

/// Route one received message.
async fn dispatch(inner: &Inner, frame: &[u8]) {
    let (h, msg) = match Message::decode(frame) {
        Ok(v) => v,
        Err(e) => {
            // A message we cannot decode fails its waiter (if any) and is otherwise reported;
            // the connection itself is still in sync thanks to framing.
            let xid = Header::parse(frame).map(|h| h.xid).ok();
            let w = xid.and_then(|x| lock(&inner.shared).waiters.remove(&x));
            match w {
                Some(w) => w.fail(e.into()),
                None => tracing::warn!(error = %e, "undecodable message from the switch"),
            }
            return;
        }
    };
    if let Message::EchoRequest(data) = &msg {
        let _ = inner
            .writer
            .send(Bytes::from(Message::EchoReply(data.clone()).encode(h.xid)))
            .await;
        return;
    }
    if let Some((tx, item)) = route(inner, &h, msg) {
        // A bounded channel: the reader waits for the caller, so a large reply is never
        // decoded faster than it is consumed and held whole in between.
        let _ = tx.send(item).await;
    }
}

/// The part of a streamed reply and where it goes.
type StreamPart = (
    mpsc::Sender<Result<MultipartReply, ConnError>>,
    Result<MultipartReply, ConnError>,
);

/// Hand `msg` to whoever waits for it (under the lock); a part of a streamed reply is
/// returned, to be sent once the lock is let go.
fn route(inner: &Inner, h: &Header, msg: Message) -> Option<StreamPart> {
    let mut s = lock(&inner.shared);
    if let Message::Error(e) = &msg
        && let Some(w) = s.watches.iter_mut().find(|w| w.xids.contains(&h.xid))
    {
        let idx = (h.xid - w.xids.start) as usize;
        w.errors.push((idx, e.clone()));
        return None;
    }
    match s.waiters.remove(&h.xid) {
        Some(Waiter::Reply(tx)) => {
            drop(s);
            let r = match msg {
                Message::Error(e) => Err(ConnError::Switch(e)),
                m => Ok(m),
            };
            let _ = tx.send(r);
            None
        }
        Some(Waiter::Multipart(mut parts, tx)) => match msg {
            Message::MultipartReply(part) => {
                let more = part.more();
                parts.parts.push(part);
                if let Some(e) = parts.count_in(h, &inner.config) {
                    drop(s);
                    let _ = tx.send(Err(e.clone()));
                    // The peer is not to be trusted with more: drop the connection.
                    inner.close(e);
                } else if more {
                    s.waiters.insert(h.xid, Waiter::Multipart(parts, tx));
                } else {
                    drop(s);
                    let _ = tx.send(MultipartReply::merge(parts.parts).map_err(ConnError::from));
                }
                None
            }
            Message::Error(e) => {
                drop(s);
                let _ = tx.send(Err(ConnError::Switch(e)));
                None
            }
            other => {
                drop(s);
                let _ = tx.send(Err(unexpected("MULTIPART_REQUEST", &other)));
                None
            }
        },
        Some(Waiter::Stream(mut parts, tx)) => match msg {
            Message::MultipartReply(part) => {
                let more = part.more();
                if let Some(e) = parts.count_in(h, &inner.config) {
                    drop(s);
                    let _ = tx.try_send(Err(e.clone()));
                    inner.close(e);
                    None
                } else {
                    // The receiver may be gone (its caller gave up): the rest is dropped.
                    if more && !tx.is_closed() {
                        s.waiters.insert(h.xid, Waiter::Stream(parts, tx.clone()));
                    }
                    drop(s);
                    Some((tx, Ok(part)))
                }
            }
            Message::Error(e) => Some((tx, Err(ConnError::Switch(e)))),
            other => Some((tx, Err(unexpected("MULTIPART_REQUEST", &other)))),
        },
        None => {
            drop(s);
            if !matches!(msg, Message::EchoReply(_)) {
                let _ = inner.events.send(Event::Message(*h, msg));
            }
            None
        }
    }
}

async fn keepalive_loop(inner: std::sync::Weak<Inner>, last_rx: Arc<Mutex<Instant>>, cfg: Config) {
    let tick = (cfg.echo_interval / 2).max(Duration::from_millis(10));
    let mut last_echo = Instant::now();
    loop {
        tokio::time::sleep(tick).await;
        let Some(inner) = inner.upgrade() else { return };
        if lock(&inner.shared).closed.is_some() {
            return;
        }
        let silent = lock(&last_rx).elapsed();
        if silent >= cfg.dead_after {
            inner.close(ConnError::Closed(
                format!("the switch did not answer for {silent:?} (dead peer)").into(),
            ));
            return;
        }
        if silent >= cfg.echo_interval && last_echo.elapsed() >= cfg.echo_interval {
            last_echo = Instant::now();
            // xid 0 is never allocated to a request, so the reply is recognized as ours.
            let _ = inner
                .writer
                .try_send(Bytes::from(Message::EchoRequest(Vec::new()).encode(0)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::BundleAdd;
    use crate::flow_mod::FlowMod;

    #[test]
    fn borrowed_bundle_add_encodes_like_the_owned_message() {
        let fm = Message::FlowMod(FlowMod::default());
        let mut a = Vec::new();
        encode_bundle_add(7, 3, &fm, 42, &mut a);
        assert_eq!(a, Message::BundleAdd(BundleAdd::new(7, 3, fm)).encode(42));
    }
}
