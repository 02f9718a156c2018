//! The publisher of one sink: it takes the whole current set of statements, and publishes what
//! is due as the rate limit allows, oldest first, waking itself when the next token is there.
//!
//! Before it publishes anything (at its start, and at each new session of the allocator's
//! sink), it learns what it said from the Events the API server keeps ([`Writer::said`]), so
//! a restart or a leader change does not say everything again. A failed list is logged and the
//! sink goes on knowing nothing: saying again is better than never.

use super::queue::{Bucket, Queue};
use super::writer::{EventsError, KubeWriter, Writer};
use kube::Client;
use prometheus_client::metrics::gauge::Gauge;
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::sync::mpsc;
use vipflow_core::events::{ProgrammedVips, Sayings, ServiceEvent};

/// How long one write may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long learning what was said may take (every page).
const LIST_TIMEOUT: Duration = Duration::from_secs(60);

/// Which statements a sink says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkKind {
    /// A node's: its VIPs programmed, announced, skipped.
    Node,
    /// The elected allocator's: its decisions.
    Allocator,
}

impl SinkKind {
    /// The `sink` label of its metrics.
    pub fn label(self) -> &'static str {
        match self {
            SinkKind::Node => "node",
            SinkKind::Allocator => "allocator",
        }
    }
}

/// How a sink runs.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    pub kind: SinkKind,
    /// This agent's node: the Events' reportingInstance, and a node sink's name.
    pub instance: String,
    pub per_second: f64,
    pub burst: u32,
}

/// What happened to the statements a sink had to say (the `vipflow_kube_events` gauges of
/// its `sink` label when it has metrics).
#[derive(Debug, Clone, Default)]
pub struct EventCounters {
    /// Written.
    pub published: Gauge,
    /// Held back by the rate limit at least once.
    pub deferred: Gauge,
    /// Stopped holding before their turn: not published.
    pub dropped: Gauge,
    /// Writes that failed (the statement stays due).
    pub failed: Gauge,
}

impl EventCounters {
    /// The sink's gauges in `metrics`, or its own.
    pub fn of(metrics: Option<&crate::metrics::Metrics>, kind: SinkKind) -> EventCounters {
        let Some(m) = metrics else {
            return EventCounters::default();
        };
        let gauge = |outcome: &str| {
            m.events.get_or_create_owned(&crate::metrics::EventsLabel {
                sink: kind.label().into(),
                kind: outcome.into(),
            })
        };
        EventCounters {
            published: gauge("published"),
            deferred: gauge("deferred"),
            dropped: gauge("dropped"),
            failed: gauge("failed"),
        }
    }
}

enum Msg {
    Say(Sayings),
    NewSession,
}

/// The messages waiting, folded as they are taken: only the newest set counts, after any new
/// session (older sets are let go at once).
#[derive(Default)]
struct Inbox {
    new_session: bool,
    newest: Option<Sayings>,
}

impl Inbox {
    fn put(&mut self, m: Msg) {
        match m {
            Msg::Say(s) => self.newest = Some(s),
            Msg::NewSession => {
                self.new_session = true;
                self.newest = None;
            }
        }
    }
}

/// Sends statements to the API server; only new or changed ones are published.
#[derive(Clone)]
pub struct EventSink {
    tx: mpsc::UnboundedSender<Msg>,
    pub counters: EventCounters,
}

impl EventSink {
    /// Start the publisher, counting in `metrics` under the sink's kind.
    pub fn start(
        client: Client,
        cfg: SinkConfig,
        metrics: Option<&crate::metrics::Metrics>,
    ) -> EventSink {
        let writer = KubeWriter::new(client, cfg.kind, &cfg.instance);
        let counters = EventCounters::of(metrics, cfg.kind);
        Self::start_with(writer, cfg.per_second, cfg.burst, counters)
    }

    /// [`EventSink::start`] through any writer.
    pub(crate) fn start_with<W: Writer>(
        writer: W,
        per_second: f64,
        burst: u32,
        counters: EventCounters,
    ) -> EventSink {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(publish(
            writer,
            rx,
            counters.clone(),
            Bucket::new(per_second, burst),
        ));
        EventSink { tx, counters }
    }

    /// The current statements (the whole set; the sink works out what is new).
    pub fn update(&self, now: BTreeSet<ServiceEvent>) {
        let _ = self.tx.send(Msg::Say(Sayings {
            statements: now,
            programmed: ProgrammedVips::default(),
        }));
    }

    /// [`EventSink::update`] with VipProgrammed statements made only as they are published.
    pub fn say(&self, now: Sayings) {
        let _ = self.tx.send(Msg::Say(now));
    }

    /// Another instance may have spoken since (this one stops leading, or starts to): what
    /// is due is forgotten, and before the next set is said, what was said is learned again
    /// from the API server.
    pub fn new_session(&self) {
        let _ = self.tx.send(Msg::NewSession);
    }
}

/// The sink's state between messages.
struct Publisher<W> {
    writer: W,
    queue: Queue,
    /// What was said has been learned since the start or the last new session.
    learned: bool,
    counters: EventCounters,
}

impl<W: Writer> Publisher<W> {
    /// Take in what the messages said.
    async fn absorb(&mut self, inbox: Inbox) {
        if inbox.new_session {
            self.queue.forget();
            self.learned = false;
        }
        let Some(now) = inbox.newest else {
            return;
        };
        if !std::mem::replace(&mut self.learned, true) {
            self.learn().await;
        }
        let dropped = self.queue.update(now);
        self.counters.dropped.inc_by(gauge_value(dropped));
    }

    async fn learn(&mut self) {
        let said = match tokio::time::timeout(LIST_TIMEOUT, self.writer.said()).await {
            Ok(r) => r,
            Err(_) => Err(EventsError::Timeout {
                what: format!("listing the Events said by {}", self.writer.said_by()),
                after: LIST_TIMEOUT,
            }),
        };
        match said {
            Ok(said) => {
                tracing::debug!(
                    said_by = self.writer.said_by(),
                    events = said.len(),
                    "learned what was said"
                );
                self.queue.seed(said);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot learn what was said; what holds is said again")
            }
        }
    }

    /// Publish the statement due longest.
    async fn publish_one(&mut self) {
        let Some(t) = self.queue.take() else {
            return;
        };
        let written =
            match tokio::time::timeout(WRITE_TIMEOUT, self.writer.write(t.id, t.digest, &t.event))
                .await
            {
                Ok(r) => r,
                Err(_) => Err(EventsError::Timeout {
                    what: format!(
                        "publishing {} on Service {}",
                        t.event.reason, t.event.service
                    ),
                    after: WRITE_TIMEOUT,
                }),
            };
        match written {
            Ok(()) => {
                self.counters.published.inc();
                self.queue.said(t);
            }
            Err(e) => {
                self.counters.failed.inc();
                tracing::warn!(error = %e, "cannot publish event; it stays due");
                self.queue.put_back(t);
            }
        }
    }
}

fn gauge_value(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

async fn publish<W: Writer>(
    writer: W,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    counters: EventCounters,
    mut bucket: Bucket,
) {
    let mut p = Publisher {
        writer,
        queue: Queue::default(),
        learned: false,
        counters,
    };
    // Holds a message received while waiting, taken in with those behind it.
    let mut inbox = Inbox::default();
    loop {
        loop {
            match rx.try_recv() {
                Ok(m) => inbox.put(m),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => return,
            }
        }
        // Each statement is checked against the newest set just before it is published.
        p.absorb(std::mem::take(&mut inbox)).await;
        if !p.queue.has_due() {
            match rx.recv().await {
                Some(m) => inbox.put(m),
                None => return,
            }
            continue;
        }
        if bucket.take() {
            p.publish_one().await;
            continue;
        }
        p.counters.deferred.inc_by(gauge_value(p.queue.hold_back()));
        let wake = bucket.ready_at();
        tokio::select! {
            m = rx.recv() => match m {
                Some(m) => inbox.put(m),
                None => return,
            },
            () = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {}
        }
    }
}

#[cfg(test)]
#[path = "sink_tests.rs"]
mod tests;
