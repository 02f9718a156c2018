//! Events on MetalLB's objects, the I/O of [`vipflow_core::metallb::events`]: while this agent
//! leads, watch MetalLB's kinds, read each object as the Kubernetes source reads it, and put a
//! Warning Event on each object with a field vipflow does not carry out, once while it holds.
//! It runs on the cluster mode's election (which starts wherever MetalLB's CRDs are served),
//! so that one agent says it, not every agent of the DaemonSet.
//!
//! Each Event carries the label [`SAID_BY_LABEL`] `metallb` and its statement's digest
//! ([`STATEMENT_ANNOTATION`]): an agent that starts to lead lists them before it says
//! anything, so a leader change says nothing again. A failed list is logged and the leader goes
//! on knowing nothing: saying again is better than never.

use crate::metallb::events::{Due, Ledger, statements};
use crate::model::{Loaded, Problem};
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use std::collections::BTreeMap;
use std::pin::Pin;
use std::time::Duration;
use tokio::sync::watch;
use vipflow_core::keys::{SAID_BY_LABEL, STATEMENT_ANNOTATION};

/// The value of [`SAID_BY_LABEL`] on the Events on MetalLB's objects.
pub const SAID_BY: &str = "metallb";
/// How long one write may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long learning what was said may take (every page).
const LIST_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a write that failed is tried again.
const RETRY_EVERY: Duration = Duration::from_secs(5);
/// Events listed per page when learning what was said.
const PAGE: u32 = 500;

#[derive(Debug, thiserror::Error)]
pub enum MetallbEventsError {
    #[error("cannot list the Events said on MetalLB's objects: {0}")]
    List(#[source] kube::Error),
    #[error("cannot publish {reason} on {object}: {source}")]
    Write {
        object: String,
        reason: &'static str,
        source: kube::Error,
    },
    #[error("{what}: no answer in {after:?}")]
    Timeout { what: String, after: Duration },
}

/// Say what there is to say on MetalLB's objects while `leader` says this agent leads (always,
/// without election). `instance` (the node) is the Events' reportingInstance.
pub async fn run(client: Client, instance: String, leader: Option<watch::Receiver<bool>>) {
    let Some(mut leader) = leader else {
        lead(&client, &instance).await;
        return;
    };
    loop {
        if leader.wait_for(|l| *l).await.is_err() {
            return;
        }
        tokio::select! {
            _ = lead(&client, &instance) => {}
            lost = leader.wait_for(|l| !*l) => {
                if lost.is_err() {
                    return;
                }
            }
        }
    }
}

/// Lead: sessions one after the other (a session ends when its watches do). Never returns.
async fn lead(client: &Client, instance: &str) {
    loop {
        session(client, instance).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

type Changes = Pin<Box<dyn Stream<Item = (usize, watcher::Event<DynamicObject>)> + Send>>;

/// One kind's objects, each with its problems; complete once its (re)list is.
#[derive(Default)]
struct Listing {
    problems: BTreeMap<(String, String), Vec<Problem>>,
    complete: bool,
}

/// One leading session: what was said is learned, then MetalLB's served kinds are watched and
/// what holds is said as it changes. Where MetalLB's CRDs are not served it waits for ever
/// (as the Kubernetes source, it looks once).
async fn session(client: &Client, instance: &str) {
    let mut kinds = Vec::new();
    for (api, kind, plural) in crate::source::kube::metallb_kinds() {
        let resource = crate::source::kube::custom_resource(api, kind, plural);
        if crate::source::kube::served(client, &resource).await {
            kinds.push((*api, *kind, resource));
        }
    }
    if kinds.is_empty() {
        return std::future::pending().await;
    }
    let streams: Vec<Changes> = (kinds.iter().enumerate())
        .map(|(i, (_, _, resource))| {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
            watcher::watcher(api, watcher::Config::default().any_semantic())
                .backoff(crate::source::watch_backoff::WatchBackoff::new())
                .filter_map(move |ev| {
                    std::future::ready(match ev {
                        Ok(e) => Some((i, e)),
                        Err(e) => {
                            tracing::warn!(error = %e, "MetalLB objects' watch error; backing off");
                            None
                        }
                    })
                })
                .boxed()
        })
        .collect();
    let mut changes = futures::stream::select_all(streams);
    let mut listings: Vec<Listing> = kinds.iter().map(|_| Listing::default()).collect();
    let writer = Writer::new(client.clone(), instance);
    let mut ledger = Ledger::default();
    let mut learned = false;
    let mut retry = tokio::time::interval(RETRY_EVERY);
    loop {
        let changed = tokio::select! {
            ch = changes.next() => {
                let Some(first) = ch else {
                    return;
                };
                let mut apply = |(i, ev): (usize, watcher::Event<DynamicObject>)| {
                    if let (Some(listing), Some((api, kind, _))) = (listings.get_mut(i), kinds.get(i)) {
                        listing.apply(api, kind, ev);
                    }
                };
                apply(first);
                // A burst of changes is said once, for its end.
                while let Some(Some(more)) = changes.next().now_or_never() {
                    apply(more);
                }
                true
            }
            _ = retry.tick() => false,
        };
        if !listings.iter().all(|l| l.complete) {
            continue;
        }
        if !learned {
            learned = true;
            match writer.said().await {
                Ok(digests) => ledger.learned(digests),
                Err(e) => {
                    tracing::warn!(error = %e, "saying what holds on MetalLB's objects without knowing what was said")
                }
            }
        }
        if changed {
            let problems: Vec<Problem> = (listings.iter())
                .flat_map(|l| l.problems.values().flatten().cloned())
                .collect();
            ledger.update(statements(&problems));
        }
        for due in ledger.due() {
            match writer.write(&due).await {
                Ok(()) => ledger.said(due.digest),
                Err(e) => tracing::warn!(error = %e, "will try again"),
            }
        }
    }
}

impl Listing {
    /// Apply one watch event on MetalLB's `kind` in `api`.
    fn apply(&mut self, api: &str, kind: &str, ev: watcher::Event<DynamicObject>) {
        let key = |o: &DynamicObject| (o.namespace().unwrap_or_default(), o.name_any());
        match ev {
            watcher::Event::Init => {
                self.problems.clear();
                self.complete = false;
            }
            watcher::Event::InitApply(o) | watcher::Event::Apply(o) => {
                let mut loaded = Loaded::default();
                crate::source::kube::add_custom_objects(
                    api,
                    kind,
                    std::iter::once(&o),
                    &mut loaded,
                );
                self.problems.insert(key(&o), loaded.problems);
            }
            watcher::Event::Delete(o) => {
                self.problems.remove(&key(&o));
            }
            watcher::Event::InitDone => self.complete = true,
        }
    }
}

/// Events through the API server.
struct Writer {
    client: Client,
    instance: String,
    /// Random, for names: an Event is named from it, its statement and its turn, so a write
    /// tried again after a timeout that did go through is refused as a duplicate.
    nonce: u64,
}

impl Writer {
    fn new(client: Client, instance: &str) -> Writer {
        Writer {
            client,
            instance: instance.into(),
            nonce: crate::event_sink::nonce(instance),
        }
    }

    /// The digests of the statements said on MetalLB's objects that the API server keeps.
    async fn said(&self) -> Result<Vec<u64>, MetallbEventsError> {
        let listed = async {
            let api: Api<Event> = Api::all(self.client.clone());
            let selector = format!("{SAID_BY_LABEL}={SAID_BY}");
            let mut params = ListParams::default().labels(&selector).limit(PAGE);
            let mut out = Vec::new();
            loop {
                let page = api.list(&params).await.map_err(MetallbEventsError::List)?;
                out.extend(
                    page.items
                        .iter()
                        .filter_map(crate::event_sink::statement_of),
                );
                match page.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(token) => params = params.continue_token(&token),
                    None => return Ok(out),
                }
            }
        };
        tokio::time::timeout(LIST_TIMEOUT, listed)
            .await
            .unwrap_or_else(|_| {
                Err(MetallbEventsError::Timeout {
                    what: "listing the Events said on MetalLB's objects".into(),
                    after: LIST_TIMEOUT,
                })
            })
    }

    /// Publish `due` as an Event on its object.
    async fn write(&self, due: &Due) -> Result<(), MetallbEventsError> {
        let object = &due.statement.object;
        let namespace = object.namespace.as_deref().unwrap_or("default");
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let mut id = [0u8; 24];
        id[..8].copy_from_slice(&self.nonce.to_le_bytes());
        id[8..16].copy_from_slice(&due.digest.to_le_bytes());
        id[16..].copy_from_slice(&due.turn.to_le_bytes());
        let suffix = xxhash_rust::xxh3::xxh3_64(&id);
        let event = event_object(due, namespace, &self.instance, suffix);
        let written =
            tokio::time::timeout(WRITE_TIMEOUT, api.create(&PostParams::default(), &event)).await;
        match written {
            Ok(Ok(_)) => Ok(()),
            // This very turn was written before (its answer was lost).
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => Ok(()),
            Ok(Err(source)) => Err(MetallbEventsError::Write {
                object: object.to_string(),
                reason: due.statement.reason,
                source,
            }),
            Err(_) => Err(MetallbEventsError::Timeout {
                what: format!("publishing {} on {object}", due.statement.reason),
                after: WRITE_TIMEOUT,
            }),
        }
    }
}

/// The Event saying `due` on its object, in `namespace`, reported by `instance`, named
/// `<object>.<suffix>`.
fn event_object(due: &Due, namespace: &str, instance: &str, suffix: u64) -> Event {
    let s = &due.statement;
    let o = &s.object;
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{suffix:016x}", o.name)),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([(SAID_BY_LABEL.into(), SAID_BY.into())])),
            annotations: Some(BTreeMap::from([(
                STATEMENT_ANNOTATION.into(),
                format!("{:016x}", due.digest),
            )])),
            ..Default::default()
        },
        action: Some("Read".into()),
        event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
        regarding: Some(ObjectReference {
            api_version: Some(o.api_version.clone()),
            kind: Some(o.kind.clone()),
            namespace: o.namespace.clone(),
            name: Some(o.name.clone()),
            uid: o.uid.clone(),
            ..Default::default()
        }),
        reason: Some(s.reason.into()),
        note: Some(crate::event_sink::truncate(
            &s.note,
            crate::event_sink::NOTE_MAX,
        )),
        reporting_controller: Some(crate::event_sink::CONTROLLER.into()),
        reporting_instance: Some(instance.into()),
        type_: Some("Warning".into()),
        ..Default::default()
    }
}
