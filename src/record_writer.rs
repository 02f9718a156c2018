//! Writes the records this node owes ([`crate::announce::record`]) to the Services' status, paced like
//! the Events: it takes the whole set each time (only the newest counts), writes what is due
//! oldest first as a token bucket allows, and wakes itself when the next token is there.
//!
//! A record is written with server-side apply on the status subresource under
//! [`FIELD_MANAGER`], forced: the condition is that manager's alone, so a write replaces what
//! any node wrote before, and a write without it removes it.
//!
//! A write is not repeated while the Service's watch catches up: after writing a record the
//! node trusts its write for [`REPAIR_AFTER`], and writes the same again only if the Service
//! still says otherwise then (another node that saw the VIPs differently wrote last). Two
//! nodes that keep disagreeing (a partition) so write at most once each per that period.

use crate::announce::record::{CONDITION, FIELD_MANAGER, REASON, Want};
use crate::event_sink::Bucket;
use crate::model::ServiceKey;
use k8s_openapi::api::core::v1::Service;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use prometheus_client::metrics::counter::Counter;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How long one write may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a written record is trusted while the Service still says otherwise.
pub const REPAIR_AFTER: Duration = Duration::from_secs(30);
/// How long after a failed write the same is tried again.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum RecordWriteError {
    #[error("cannot write the {CONDITION} condition of Service {service}: {source}")]
    Write {
        service: ServiceKey,
        source: kube::Error,
    },
    #[error("writing the {CONDITION} condition of Service {service}: no answer in {after:?}")]
    Timeout {
        service: ServiceKey,
        after: Duration,
    },
}

/// Where records go; the API server in production, a record in tests.
pub(crate) trait Apply: Send + 'static {
    fn apply(&mut self, want: &Want) -> impl Future<Output = Result<(), RecordWriteError>> + Send;
}

/// The status patch that says `message`, or (`None`) removes the condition.
pub fn record_patch(message: Option<&str>) -> serde_json::Value {
    match message {
        Some(m) => serde_json::json!({
            "apiVersion": "v1",
            "kind": "Service",
            "status": {"conditions": [{
                "type": CONDITION,
                "status": "True",
                "reason": REASON,
                "message": m,
                // When the record last changed: the owners named in it.
                "lastTransitionTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::now()
                ),
            }]},
        }),
        // The manager's whole intent: no condition.
        None => serde_json::json!({"apiVersion": "v1", "kind": "Service"}),
    }
}

/// Records through the API server.
pub(crate) struct KubeApply {
    client: Client,
}

impl Apply for KubeApply {
    async fn apply(&mut self, want: &Want) -> Result<(), RecordWriteError> {
        let api: Api<Service> = Api::namespaced(self.client.clone(), &want.service.namespace);
        let patch = record_patch(want.message.as_deref());
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match api
            .patch_status(&want.service.name, &params, &Patch::Apply(&patch))
            .await
        {
            Ok(_) => Ok(()),
            // The Service is gone, and its record with it.
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(source) => Err(RecordWriteError::Write {
                service: want.service.clone(),
                source,
            }),
        }
    }
}

/// What happened to the records this node owed (`vipflow_announce_records`).
#[derive(Debug, Clone, Default)]
pub struct RecordCounters {
    pub written: Counter,
    pub removed: Counter,
    pub failed: Counter,
}

impl RecordCounters {
    /// The counters in `metrics`, or their own.
    pub fn of(metrics: Option<&crate::metrics::Metrics>) -> RecordCounters {
        let Some(m) = metrics else {
            return RecordCounters::default();
        };
        let counter = |kind: &str| {
            m.announce_records
                .get_or_create_owned(&crate::metrics::KindLabel { kind: kind.into() })
        };
        RecordCounters {
            written: counter("written"),
            removed: counter("removed"),
            failed: counter("failed"),
        }
    }
}

/// This node's record writer.
#[derive(Clone)]
pub struct RecordWriter {
    tx: mpsc::UnboundedSender<Vec<Want>>,
    pub counters: RecordCounters,
}

impl RecordWriter {
    /// Start writing through `client`, at most `per_second` (bursts of `burst`).
    pub fn start(
        client: Client,
        per_second: f64,
        burst: u32,
        metrics: Option<&crate::metrics::Metrics>,
    ) -> RecordWriter {
        Self::start_with(
            KubeApply { client },
            per_second,
            burst,
            RecordCounters::of(metrics),
        )
    }

    /// [`RecordWriter::start`] through any writer.
    pub(crate) fn start_with<A: Apply>(
        writer: A,
        per_second: f64,
        burst: u32,
        counters: RecordCounters,
    ) -> RecordWriter {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(publish(
            writer,
            rx,
            counters.clone(),
            Bucket::new(per_second, burst),
        ));
        RecordWriter { tx, counters }
    }

    /// The records this node owes now (the whole set; what is no longer in it is not written).
    pub fn update(&self, now: Vec<Want>) {
        let _ = self.tx.send(now);
    }
}

/// A record's content, as what was written is remembered.
fn digest(want: &Want) -> u64 {
    match &want.message {
        Some(m) => xxhash_rust::xxh3::xxh3_64(m.as_bytes()),
        // No message is ever empty: an empty one marks a removal.
        None => xxhash_rust::xxh3::xxh3_64(b""),
    }
}

/// What is owed, due and written, without I/O.
#[derive(Default)]
pub(crate) struct Book {
    /// The newest set, by Service.
    want: HashMap<ServiceKey, Want>,
    /// Due, by when each became due (a sequence number).
    due: BTreeMap<u64, ServiceKey>,
    due_at: HashMap<ServiceKey, u64>,
    next: u64,
    /// Written or tried lately: the same content is not written again before the instant.
    held: HashMap<ServiceKey, (u64, Instant)>,
}

impl Book {
    /// Take the whole current set.
    pub fn update(&mut self, now: Vec<Want>, at: Instant) {
        self.want = now.into_iter().map(|w| (w.service.clone(), w)).collect();
        self.settle(at);
    }

    /// What is due at `at`: each wanted record that is not held, in the order it became due.
    pub fn settle(&mut self, at: Instant) {
        self.held.retain(|_, (_, until)| *until > at);
        let want = &self.want;
        let due_at = &mut self.due_at;
        self.due.retain(|_, k| {
            let keep = want.contains_key(k);
            if !keep {
                due_at.remove(k);
            }
            keep
        });
        let mut keys: Vec<&ServiceKey> = self.want.keys().collect();
        keys.sort();
        for k in keys {
            let Some(w) = self.want.get(k) else { continue };
            let held = self.held.get(k).is_some_and(|(d, _)| *d == digest(w));
            if held || self.due_at.contains_key(k) {
                continue;
            }
            self.due.insert(self.next, k.clone());
            self.due_at.insert(k.clone(), self.next);
            self.next += 1;
        }
    }

    pub fn has_due(&self) -> bool {
        !self.due.is_empty()
    }

    /// The record due longest.
    pub fn take(&mut self) -> Option<Want> {
        while let Some((_, k)) = self.due.pop_first() {
            self.due_at.remove(&k);
            if let Some(w) = self.want.get(&k) {
                return Some(w.clone());
            }
        }
        None
    }

    /// `want` was written (`ok`) or refused: not written again before [`REPAIR_AFTER`] or
    /// [`RETRY_AFTER`] unless what is owed changes.
    pub fn done(&mut self, want: &Want, ok: bool, at: Instant) {
        let wait = if ok { REPAIR_AFTER } else { RETRY_AFTER };
        self.held
            .insert(want.service.clone(), (digest(want), at + wait));
    }

    /// When a held record that is still owed becomes due.
    pub fn next_wake(&self) -> Option<Instant> {
        (self.want.iter())
            .filter_map(|(k, w)| {
                let (d, until) = self.held.get(k)?;
                (*d == digest(w)).then_some(*until)
            })
            .min()
    }
}

async fn publish<A: Apply>(
    mut writer: A,
    mut rx: mpsc::UnboundedReceiver<Vec<Want>>,
    counters: RecordCounters,
    mut bucket: Bucket,
) {
    let mut book = Book::default();
    loop {
        // Only the newest set counts.
        let mut newest = None;
        loop {
            match rx.try_recv() {
                Ok(set) => newest = Some(set),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => return,
            }
        }
        match newest {
            Some(set) => book.update(set, Instant::now()),
            None => book.settle(Instant::now()),
        }
        let wake = if !book.has_due() {
            book.next_wake()
        } else if bucket.take() {
            if let Some(w) = book.take() {
                let ok = write_one(&mut writer, &w, &counters).await;
                book.done(&w, ok, Instant::now());
            }
            continue;
        } else {
            bucket.ready_at()
        };
        tokio::select! {
            m = rx.recv() => match m {
                Some(set) => book.update(set, Instant::now()),
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

/// Write `w`; whether it went through.
async fn write_one<A: Apply>(writer: &mut A, w: &Want, counters: &RecordCounters) -> bool {
    let written = match tokio::time::timeout(WRITE_TIMEOUT, writer.apply(w)).await {
        Ok(r) => r,
        Err(_) => Err(RecordWriteError::Timeout {
            service: w.service.clone(),
            after: WRITE_TIMEOUT,
        }),
    };
    match written {
        Ok(()) => {
            match &w.message {
                Some(m) => {
                    counters.written.inc();
                    tracing::debug!(service = %w.service, record = %m, "announce record written");
                }
                None => {
                    counters.removed.inc();
                    tracing::debug!(service = %w.service, "announce record removed");
                }
            }
            true
        }
        Err(e) => {
            counters.failed.inc();
            tracing::warn!(error = %e, "cannot write the announce record; will retry");
            false
        }
    }
}

#[cfg(test)]
#[path = "record_writer_tests.rs"]
mod tests;
