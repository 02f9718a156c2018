//! frr-k8s mode's writers: the node's own `FRRConfiguration` (its externalTrafficPolicy Local
//! VIPs, as the dataplane gate lets them through), and, while this agent leads, the shared
//! objects of every pool's Cluster VIPs. What to write is decided in
//! [`crate::frrk8s`]; here it is written, with server-side apply (field manager `vipflow`),
//! and only when it changed. An object vipflow no longer wants is deleted; objects of others
//! are never touched (vipflow's carry [`MANAGED_BY_LABEL`]).

use crate::frrk8s::build::{MANAGED_BY, MANAGED_BY_LABEL, ROLE_LABEL, originated, restricted};
use crate::frrk8s::objects::{
    API_VERSION, BgpSessionState, CONFIGURATION_KIND, CONFIGURATION_PLURAL, FrrConfiguration,
    FrrNodeState, NODE_STATE_KIND, NODE_STATE_PLURAL, SESSION_NODE_LABEL, SESSION_STATE_KIND,
    SESSION_STATE_PLURAL,
};
use crate::plan::planner::FrrK8sPools;
use crate::reconcile::frr::{FrrStatus, WantedPrefixes};
use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The field manager of vipflow's writes.
const FIELD_MANAGER: &str = "vipflow";
/// How long to wait before writing again after a failure, at first and at most (it doubles
/// with each failure in a row: an object the API server refuses is not tried every second).
const RETRY: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// The wait after `wait`, one more failure in a row.
fn longer(wait: Duration) -> Duration {
    (wait * 2).min(RETRY_MAX)
}

/// Why an object could not be written.
#[derive(Debug, thiserror::Error)]
pub enum FrrK8sWriteError {
    #[error("FRRConfiguration {name}: {source}")]
    Api {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("FRRConfiguration {name}: {source}")]
    Encode {
        name: String,
        #[source]
        source: serde_json::Error,
    },
}

fn api(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let resource =
        crate::source::kube::custom_resource(API_VERSION, CONFIGURATION_KIND, CONFIGURATION_PLURAL);
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// Write `object` whole (server-side apply: fields vipflow no longer sets go).
async fn apply(
    api: &Api<DynamicObject>,
    object: &FrrConfiguration,
) -> Result<(), FrrK8sWriteError> {
    let name = object.metadata.name.clone().unwrap_or_default();
    let body = serde_json::to_value(object).map_err(|source| FrrK8sWriteError::Encode {
        name: name.clone(),
        source,
    })?;
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map(|_| ())
    .map_err(|source| FrrK8sWriteError::Api { name, source })
}

/// Delete `name`; one that is already gone is fine.
async fn delete(api: &Api<DynamicObject>, name: &str) -> Result<(), FrrK8sWriteError> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(FrrK8sWriteError::Api {
            name: name.to_string(),
            source,
        }),
    }
}

/// What the API server holds of one of vipflow's objects, to compare with what it wants.
fn held(o: &DynamicObject) -> Option<FrrConfiguration> {
    let mut v = serde_json::to_value(o).ok()?;
    if let Some(m) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        m.retain(|k, _| k == "name" || k == "namespace" || k == "labels");
    }
    serde_json::from_value(v).ok()
}

/// Aborts its task when dropped.
struct Follower(tokio::task::JoinHandle<()>);

impl Drop for Follower {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What a watch saw, as states rather than steps: a change, or a (re)listing once complete
/// (objects missing from it may have gone while the watch was down).
enum Seen {
    Applied(DynamicObject),
    Deleted(DynamicObject),
    Listed(Vec<DynamicObject>),
}

/// The objects of `api` that `config` selects, as [`Seen`]s. The watch retries with backoff
/// (where the kind is not served, nothing is seen); a failure is said once, as `trouble`,
/// until the watch works again.
fn seen(
    api: Api<DynamicObject>,
    config: watcher::Config,
    trouble: &'static str,
) -> impl futures::Stream<Item = Seen> + Send {
    let mut listing: Option<Vec<DynamicObject>> = None;
    let mut said = false;
    watcher(api, config)
        .default_backoff()
        .filter_map(move |event| {
            let out = match event {
                Ok(watcher::Event::Apply(o)) => Some(Seen::Applied(o)),
                Ok(watcher::Event::Delete(o)) => Some(Seen::Deleted(o)),
                Ok(watcher::Event::Init) => {
                    listing = Some(Vec::new());
                    None
                }
                Ok(watcher::Event::InitApply(o)) => {
                    if let Some(l) = &mut listing {
                        l.push(o);
                    }
                    None
                }
                Ok(watcher::Event::InitDone) => listing.take().map(Seen::Listed),
                Err(e) => {
                    if !said {
                        tracing::warn!(error = %e, "{trouble}");
                        said = true;
                    }
                    return futures::future::ready(None);
                }
            };
            said = false;
            futures::future::ready(out)
        })
}

/// Keep `out` holding the objects of `api` that `config` selects, as they change. Where the
/// kind is not served, it stays empty (the watch retries with backoff).
fn follow(
    api: Api<DynamicObject>,
    config: watcher::Config,
    out: watch::Sender<Vec<serde_json::Value>>,
) -> Follower {
    Follower(tokio::spawn(async move {
        let mut held: BTreeMap<String, serde_json::Value> = BTreeMap::new();
        let name = |o: &DynamicObject| o.metadata.name.clone().unwrap_or_default();
        let value = |o: &DynamicObject| serde_json::to_value(o).unwrap_or_default();
        let mut stream = seen(
            api,
            config,
            "cannot watch frr-k8s's state of this node; trying again",
        )
        .boxed();
        while let Some(s) = stream.next().await {
            match s {
                Seen::Applied(o) => {
                    held.insert(name(&o), value(&o));
                }
                Seen::Deleted(o) => {
                    held.remove(&name(&o));
                }
                Seen::Listed(all) => held = all.iter().map(|o| (name(o), value(o))).collect(),
            }
            out.send_replace(held.values().cloned().collect());
        }
    }))
}

/// What a watch of vipflow's own objects saw go: a deletion, or, after each (re)listing, every
/// object the server holds (those missing may have gone while the watch was down).
#[derive(Debug)]
enum Gone {
    Deleted(String),
    Listed(std::collections::BTreeSet<String>),
}

/// Watch the objects of `api` that `config` selects (vipflow's own) for ones that go: someone
/// deleting them (a user, a GitOps tool pruning what it does not know) would withdraw routes
/// until the next change, so the writers put them back.
fn watch_gone(
    api: Api<DynamicObject>,
    config: watcher::Config,
) -> (Follower, tokio::sync::mpsc::UnboundedReceiver<Gone>) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut stream = seen(
            api,
            config,
            "cannot watch vipflow's FRRConfigurations; trying again",
        )
        .boxed();
        while let Some(s) = stream.next().await {
            let gone = match s {
                Seen::Deleted(o) => o.metadata.name.map(Gone::Deleted),
                Seen::Listed(all) => Some(Gone::Listed(
                    all.into_iter().filter_map(|o| o.metadata.name).collect(),
                )),
                Seen::Applied(_) => None,
            };
            if let Some(g) = gone
                && tx.send(g).is_err()
            {
                return;
            }
        }
    });
    (Follower(task), rx)
}

/// Of `written` (what this writer believes the server holds), the names `gone` says may have
/// gone, that the server indeed no longer holds (asked again: the watch may lag behind this
/// writer's own writes).
async fn confirmed_gone<'a>(
    api: &Api<DynamicObject>,
    gone: Gone,
    written: impl Iterator<Item = &'a String>,
) -> Vec<String> {
    let suspects: Vec<String> = match gone {
        Gone::Deleted(name) => written.filter(|n| **n == name).cloned().collect(),
        Gone::Listed(held) => written.filter(|n| !held.contains(*n)).cloned().collect(),
    };
    let mut out = Vec::new();
    for name in suspects {
        if let Ok(None) = api.get_opt(&name).await {
            out.push(name);
        }
    }
    out
}

/// What frr-k8s says of this node: its sessions and what went wrong merging or loading.
fn frr_k8s_says(
    sessions: &[serde_json::Value],
    node_state: &[serde_json::Value],
) -> (
    Vec<crate::bgp::frr_state::BgpSession>,
    Vec<crate::bgp::frr_state::BfdSession>,
    Option<String>,
) {
    let states: Vec<BgpSessionState> = sessions
        .iter()
        .filter_map(|v| serde_json::from_value(v.clone()).ok())
        .collect();
    let (bgp, bfd) = crate::frrk8s::state::sessions(&states);
    let error = node_state
        .iter()
        .filter_map(|v| serde_json::from_value::<FrrNodeState>(v.clone()).ok())
        .find_map(|s| crate::frrk8s::state::node_error(&s));
    (bgp, bfd, error)
}

/// Keep node `node`'s object in `namespace` as `object` (the plan's, with every Local VIP)
/// restricted to what the gate let through (`wanted`), and report it as the FRR task does:
/// `originated` is what the written object holds.
pub async fn run_node(
    client: Client,
    namespace: String,
    node: String,
    mut object: watch::Receiver<Option<Arc<Option<FrrConfiguration>>>>,
    mut wanted: watch::Receiver<Option<WantedPrefixes>>,
    status: watch::Sender<FrrStatus>,
) {
    let api = api(&client, &namespace);
    let name = crate::frrk8s::shared::node_object_name(&node);
    // frr-k8s's word on this node: its sessions, and its FRRNodeState.
    let (sessions_tx, mut sessions) = watch::channel(Vec::new());
    let (state_tx, mut node_state) = watch::channel(Vec::new());
    let _followers = [
        follow(
            Api::namespaced_with(
                client.clone(),
                &namespace,
                &crate::source::kube::custom_resource(
                    API_VERSION,
                    SESSION_STATE_KIND,
                    SESSION_STATE_PLURAL,
                ),
            ),
            watcher::Config::default().labels(&format!("{SESSION_NODE_LABEL}={node}")),
            sessions_tx,
        ),
        follow(
            Api::all_with(
                client.clone(),
                &crate::source::kube::custom_resource(
                    API_VERSION,
                    NODE_STATE_KIND,
                    NODE_STATE_PLURAL,
                ),
            ),
            watcher::Config::default().fields(&format!("metadata.name={node}")),
            state_tx,
        ),
    ];
    let (_own, mut own_gone) = watch_gone(
        api.clone(),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    );
    let mut write_error: Option<String> = None;
    let mut wait = RETRY;
    // The followers still run (their channels are open).
    let mut following = (true, true, true);
    // What the server holds: an agent that restarts rewrites nothing that stands.
    let mut written: Option<Option<FrrConfiguration>> = None;
    while written.is_none() {
        match api.get_opt(&name).await {
            Ok(o) => written = Some(o.as_ref().and_then(held)),
            Err(e) => {
                tracing::warn!(object = %name, error = %e, "cannot read this node's FRRConfiguration");
                status.send_modify(|s| s.last_error = Some(e.to_string()));
                tokio::time::sleep(RETRY).await;
            }
        }
    }
    let mut written = written.unwrap_or_default();
    status.send_modify(|s| {
        s.known = true;
        s.originated = written.as_ref().map(originated).unwrap_or_default();
    });
    loop {
        let plan = object.borrow_and_update().clone();
        let gate = wanted.borrow_and_update().clone();
        if let (Some(plan), Some((generation, prefixes))) = (plan, gate) {
            let want = plan
                .as_ref()
                .as_ref()
                .and_then(|o| restricted(o, &prefixes));
            let outcome = if want == written {
                Ok(())
            } else {
                match &want {
                    Some(o) => apply(&api, o).await,
                    None => delete(&api, &name).await,
                }
            };
            match outcome {
                Ok(()) => {
                    if want != written {
                        tracing::debug!(object = %name, prefixes = want.as_ref().map_or(0, |o| originated(o).len()), "wrote this node's FRRConfiguration");
                    }
                    written = want;
                    write_error = None;
                    wait = RETRY;
                    status.send_modify(|s| {
                        s.current = true;
                        s.known = true;
                        s.originated = written.as_ref().map(originated).unwrap_or_default();
                        s.applied_generation = Some(generation);
                        s.asn = written
                            .as_ref()
                            .and_then(|o| o.spec.bgp.routers.first())
                            .map(|r| r.asn);
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot write this node's FRRConfiguration; trying again");
                    write_error = Some(e.to_string());
                    status.send_modify(|s| {
                        s.current = false;
                        s.last_error.clone_from(&write_error);
                    });
                    tokio::time::sleep(wait).await;
                    wait = longer(wait);
                    continue;
                }
            }
        }
        let (bgp, bfd, frr_k8s_error) = frr_k8s_says(
            &sessions.borrow_and_update(),
            &node_state.borrow_and_update(),
        );
        status.send_if_modified(|s| {
            let error = write_error.clone().or(frr_k8s_error);
            let changed = s.sessions != bgp || s.bfd != bfd || s.last_error != error;
            s.sessions = bgp;
            s.bfd = bfd;
            s.last_error = error;
            changed
        });
        tokio::select! {
            r = object.changed() => if r.is_err() { return },
            r = wanted.changed() => if r.is_err() { return },
            r = sessions.changed(), if following.0 => following.0 = r.is_ok(),
            r = node_state.changed(), if following.1 => following.1 = r.is_ok(),
            g = own_gone.recv(), if following.2 => match g {
                Some(g) => {
                    let ours = written.is_some().then(|| name.clone());
                    if !confirmed_gone(&api, g, ours.iter()).await.is_empty() {
                        tracing::warn!(object = %name, "this node's FRRConfiguration was deleted by someone else; writing it again");
                        written = None;
                    }
                }
                None => following.2 = false,
            },
        }
    }
}

/// While this agent leads (always, without election), keep the shared objects in `namespace`
/// as the plan's `pools`: each changed one written, each vipflow object no longer planned
/// deleted. Counts its writes in `writes`.
pub async fn run_pools(
    client: Client,
    namespace: String,
    mut pools: watch::Receiver<Option<FrrK8sPools>>,
    leader: Option<watch::Receiver<bool>>,
    writes: prometheus_client::metrics::counter::Counter,
) {
    let api = api(&client, &namespace);
    let mut leader = leader;
    let selector = format!("{MANAGED_BY_LABEL}={MANAGED_BY},{ROLE_LABEL}=pool");
    loop {
        if let Some(l) = &mut leader
            && l.wait_for(|l| *l).await.is_err()
        {
            return;
        }
        // Watched only while leading: what someone else deletes is put back.
        let (_watch, mut gone) =
            watch_gone(api.clone(), watcher::Config::default().labels(&selector));
        // What the server holds of vipflow's shared objects.
        let mut written: BTreeMap<String, FrrConfiguration> = match api
            .list(&ListParams::default().labels(&selector))
            .await
        {
            Ok(list) => list
                .items
                .iter()
                .filter_map(|o| Some((o.metadata.name.clone()?, held(o)?)))
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot list vipflow's FRRConfigurations; trying again");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        tracing::info!(
            objects = written.len(),
            "leading: writing the pools' FRRConfigurations"
        );
        let mut wait = RETRY;
        loop {
            let want = pools.borrow_and_update().clone();
            let mut failed = false;
            if let Some(want) = want {
                for (name, o) in want.iter() {
                    if written.get(name) == Some(o) {
                        continue;
                    }
                    match apply(&api, o).await {
                        Ok(()) => {
                            writes.inc();
                            written.insert(name.clone(), o.clone());
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot write a pool's FRRConfiguration");
                            failed = true;
                        }
                    }
                }
                let gone: Vec<String> = written
                    .keys()
                    .filter(|n| !want.contains_key(*n))
                    .cloned()
                    .collect();
                for name in gone {
                    match delete(&api, &name).await {
                        Ok(()) => {
                            writes.inc();
                            written.remove(&name);
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot delete a pool's FRRConfiguration");
                            failed = true;
                        }
                    }
                }
            }
            let still = |leader: &Option<watch::Receiver<bool>>| {
                leader.as_ref().is_none_or(|l| *l.borrow())
            };
            if failed {
                tokio::time::sleep(wait).await;
                wait = longer(wait);
                if !still(&leader) {
                    break;
                }
                continue;
            }
            wait = RETRY;
            let lost = async {
                match &mut leader {
                    Some(l) => l.wait_for(|l| !*l).await.map(|_| ()),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = pools.changed() => if r.is_err() { return },
                r = lost => {
                    if r.is_err() { return }
                    tracing::info!("no longer leading: the pools' FRRConfigurations are the new leader's");
                    break;
                }
                Some(g) = gone.recv() => {
                    for name in confirmed_gone(&api, g, written.keys()).await {
                        tracing::warn!(object = %name, "a pool's FRRConfiguration was deleted by someone else; writing it again");
                        written.remove(&name);
                    }
                }
            }
        }
    }
}
