//! Where a sink's statements go: events.k8s.io/v1 Events written through the API, each marked
//! with the sink that said it (a label) and the statement's digest (an annotation), so that a
//! restarted sink, or the next leader's, learns what was said from the API server instead of
//! saying it all again.

use super::SinkKind;
use crate::model::ServiceKey;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use rand::rngs::{StdRng, SysRng};
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::future::Future;
use vipflow_core::events::ServiceEvent;
use vipflow_core::keys::{SAID_BY_LABEL, STATEMENT_ANNOTATION};

/// The Events' reportingController.
pub const CONTROLLER: &str = "vipflow";
/// The API server's limit on an Event's note, in bytes.
pub(crate) const NOTE_MAX: usize = 1024;
/// Events listed per page when learning what was said.
const PAGE: u32 = 500;

#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    #[error("cannot list the Events said by {said_by}: {source}")]
    List {
        said_by: String,
        source: kube::Error,
    },
    #[error("cannot publish {reason} on Service {service}: {source}")]
    Write {
        service: ServiceKey,
        reason: &'static str,
        source: kube::Error,
    },
    #[error("{what}: no answer in {after:?}")]
    Timeout {
        what: String,
        after: std::time::Duration,
    },
}

/// What a sink publishes through; the API server in production, a record in tests.
pub(crate) trait Writer: Send + 'static {
    /// The digests of the statements this sink said that the API server still keeps.
    fn said(&mut self) -> impl Future<Output = Result<Vec<u64>, EventsError>> + Send;
    /// Publish `ev`, known by `digest`, in its turn `id` (the same when it is tried again).
    fn write(
        &mut self,
        id: u64,
        digest: u64,
        ev: &ServiceEvent,
    ) -> impl Future<Output = Result<(), EventsError>> + Send;
    /// Who this sink is, for logs.
    fn said_by(&self) -> &str;
}

/// The value of [`SAID_BY_LABEL`] for a sink: `allocator` for the allocator's (whichever instance
/// leads says the same statements), the node's name for a node's when that is a valid label
/// value, else a short stable hash of it. A node named `allocator` shares the allocator's
/// value; the two say statements with different reasons, so each only learns digests that do
/// not hold for it, and forgets them at once.
pub fn said_by(kind: SinkKind, node: &str) -> String {
    match kind {
        SinkKind::Allocator => "allocator".into(),
        SinkKind::Node if is_label_value(node) => node.into(),
        SinkKind::Node => format!("node-{:016x}", xxhash_rust::xxh3::xxh3_64(node.as_bytes())),
    }
}

/// A non-empty label value: at most 63 characters, alphanumerics, `-`, `_` and `.`, beginning
/// and ending with an alphanumeric.
fn is_label_value(s: &str) -> bool {
    let b = s.as_bytes();
    let inner = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.');
    !b.is_empty()
        && b.len() <= 63
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter().all(inner)
}

/// The Event saying `ev` (known by `digest`) for `said_by`, reported by `instance`, named
/// `<service>.<suffix>`.
pub fn event_object(
    ev: &ServiceEvent,
    digest: u64,
    said_by: &str,
    instance: &str,
    suffix: u64,
) -> Event {
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{suffix:016x}", ev.service.name)),
            namespace: Some(ev.service.namespace.to_string()),
            labels: Some(BTreeMap::from([(SAID_BY_LABEL.into(), said_by.into())])),
            annotations: Some(BTreeMap::from([(
                STATEMENT_ANNOTATION.into(),
                format!("{digest:016x}"),
            )])),
            ..Default::default()
        },
        action: Some("Reconcile".into()),
        event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
        regarding: Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Service".into()),
            namespace: Some(ev.service.namespace.to_string()),
            name: Some(ev.service.name.to_string()),
            ..Default::default()
        }),
        reason: Some(ev.reason.into()),
        note: Some(truncate(&ev.note, NOTE_MAX)),
        reporting_controller: Some(CONTROLLER.into()),
        reporting_instance: Some(instance.into()),
        type_: Some(if ev.warning { "Warning" } else { "Normal" }.into()),
        ..Default::default()
    }
}

/// The digest an Event carries, if it carries one.
pub fn statement_of(ev: &Event) -> Option<u64> {
    let hex = ev
        .metadata
        .annotations
        .as_ref()?
        .get(STATEMENT_ANNOTATION)?;
    u64::from_str_radix(hex, 16).ok()
}

/// At most `max` bytes of `s`, cut at a character, with `…` in place of what is cut.
pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Events through the API server.
pub(crate) struct KubeWriter {
    client: Client,
    instance: String,
    said_by: String,
    /// Random, for names: a statement's Event is named from it and the statement's turn, so
    /// a write tried again after a timeout that did go through is refused as a duplicate
    /// (generateName would make a second Event).
    nonce: u64,
}

impl KubeWriter {
    pub fn new(client: Client, kind: SinkKind, instance: &str) -> KubeWriter {
        KubeWriter {
            client,
            instance: instance.into(),
            said_by: said_by(kind, instance),
            nonce: nonce(instance),
        }
    }
}

/// A random number for Event names, unique to this writer (see [`KubeWriter`]'s `nonce`).
pub(crate) fn nonce(instance: &str) -> u64 {
    match StdRng::try_from_rng(&mut SysRng) {
        Ok(mut rng) => rng.next_u64(),
        // No entropy from the system: this instance and the time are as unique.
        Err(_) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            now ^ xxhash_rust::xxh3::xxh3_64(instance.as_bytes())
        }
    }
}

impl Writer for KubeWriter {
    async fn said(&mut self) -> Result<Vec<u64>, EventsError> {
        let api: Api<Event> = Api::all(self.client.clone());
        let selector = format!("{SAID_BY_LABEL}={}", self.said_by);
        let mut params = ListParams::default().labels(&selector).limit(PAGE);
        let mut out = Vec::new();
        loop {
            let page = api
                .list(&params)
                .await
                .map_err(|source| EventsError::List {
                    said_by: self.said_by.clone(),
                    source,
                })?;
            out.extend(page.items.iter().filter_map(statement_of));
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(out),
            }
        }
    }

    async fn write(&mut self, id: u64, digest: u64, ev: &ServiceEvent) -> Result<(), EventsError> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ev.service.namespace);
        let mut name = [0u8; 16];
        name[..8].copy_from_slice(&self.nonce.to_le_bytes());
        name[8..].copy_from_slice(&id.to_le_bytes());
        let suffix = xxhash_rust::xxh3::xxh3_64(&name);
        let event = event_object(ev, digest, &self.said_by, &self.instance, suffix);
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => Ok(()),
            // This very turn was written before (its answer was lost).
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(source) => Err(EventsError::Write {
                service: ev.service.clone(),
                reason: ev.reason,
                source,
            }),
        }
    }

    fn said_by(&self) -> &str {
        &self.said_by
    }
}
