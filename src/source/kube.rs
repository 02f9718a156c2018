//! The Kubernetes source: watches the API server and produces the same [`Loaded`] objects as
//! the file source, so everything downstream is shared.
//!
//! Watch hygiene for a DaemonSet on every node:
//! - lists are paged (`page_size`), then watched from the list's resourceVersion with
//!   bookmarks; after `410 Gone` the watcher re-lists by itself; errors back off
//!   ([`super::watch_backoff`]: 800 ms doubling to 30 s, started over only after a watch that
//!   delivered for 10 s) instead of hammering the API server;
//! - `managedFields` (often the bulk of an object) are dropped on arrival;
//! - Nodes: only this node's Node unless this instance may write Northbound rows (node-scoped
//!   rows need every node), so N agents do not each watch N nodes for nothing;
//! - a lone change goes on at once; a burst of changes (a rollout touching hundreds of
//!   EndpointSlices) is coalesced into one new snapshot after a short quiet period
//!   (`debounce`, a few milliseconds) or at most `max_delay` after it began, so the planner
//!   runs a few times per burst, not once per object (`source::batch`);
//! - nothing is published before every watcher has finished its initial list: a half-listed
//!   world would make the reconcilers delete flows and rows of objects not yet seen.

use crate::model::Loaded;
use crate::model::{KeptService, KeptSlice, KubeOvnSubnet, Objects};
use crate::source::batch::{Gathering, gather};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};
use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// What to watch.
#[derive(Debug, Clone)]
pub struct KubeSourceConfig {
    /// This node; with `all_nodes` false only its Node is watched.
    pub node_name: String,
    /// Watch every Node (needed by the Northbound writer for node-scoped rows).
    pub all_nodes: bool,
    /// List page size.
    pub page_size: u32,
    /// Quiet period that ends a burst of changes.
    pub debounce: Duration,
    /// The longest a change waits for the rest of its burst.
    pub max_delay: Duration,
}

impl Default for KubeSourceConfig {
    fn default() -> Self {
        KubeSourceConfig {
            node_name: String::new(),
            all_nodes: false,
            page_size: 500,
            debounce: Duration::from_millis(3),
            max_delay: Duration::from_millis(100),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KubeSourceError {
    #[error("build Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    #[error("kubeconfig {path}: {detail}")]
    Kubeconfig { path: String, detail: String },
}

/// A Kubernetes client: from `kubeconfig` when given, else the usual in-cluster/default chain.
pub async fn client(kubeconfig: Option<&std::path::Path>) -> Result<Client, KubeSourceError> {
    let config = match kubeconfig {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p).map_err(|e| {
                KubeSourceError::Kubeconfig {
                    path: p.display().to_string(),
                    detail: e.to_string(),
                }
            })?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| KubeSourceError::Kubeconfig {
                    path: p.display().to_string(),
                    detail: e.to_string(),
                })?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| KubeSourceError::Kubeconfig {
                path: "(inferred)".into(),
                detail: e.to_string(),
            })?,
    };
    Client::try_from(config).map_err(KubeSourceError::Client)
}

/// One change from any watcher, keyed by kind.
// Boxed: objects are large and vary in size; the channel moves pointers.
enum WatchChange {
    Service(Box<WatchEvent<KeptService>>),
    Slice(Box<WatchEvent<KeptSlice>>),
    Node(Box<WatchEvent<core::Node>>),
    Subnet(Box<WatchEvent<DynamicObject>>),
    Pool(Box<WatchEvent<DynamicObject>>),
    /// One of the custom kinds of [`CUSTOM_KINDS`], by its place there.
    Custom(usize, Box<WatchEvent<DynamicObject>>),
}

/// The custom kinds read as they are served (apiVersion, kind, plural): vipflow's BGP kinds
/// (deploy/*-crd.yaml), and MetalLB's kinds that vipflow takes as its own ([`crate::metallb`];
/// its `BGPPeer` in the version MetalLB stores). Each is watched where the API server serves
/// it; a cluster without them has none of their objects.
const CUSTOM_KINDS: [(&str, &str, &str); 9] = [
    (crate::bgp::objects::API_VERSION, "BGPPeer", "bgppeers"),
    (
        crate::bgp::objects::API_VERSION,
        "BGPAdvertisement",
        "bgpadvertisements",
    ),
    (
        crate::bgp::objects::API_VERSION,
        "BFDProfile",
        "bfdprofiles",
    ),
    (crate::metallb::V1BETA1, "IPAddressPool", "ipaddresspools"),
    (crate::metallb::V1BETA2, "BGPPeer", "bgppeers"),
    (
        crate::metallb::V1BETA1,
        "BGPAdvertisement",
        "bgpadvertisements",
    ),
    (crate::metallb::V1BETA1, "BFDProfile", "bfdprofiles"),
    (crate::metallb::V1BETA1, "Community", "communities"),
    (
        crate::metallb::V1BETA1,
        "L2Advertisement",
        "l2advertisements",
    ),
];

/// MetalLB's kinds among [`CUSTOM_KINDS`] (apiVersion, kind, plural), in the versions watched.
pub(crate) fn metallb_kinds()
-> impl Iterator<Item = &'static (&'static str, &'static str, &'static str)> {
    CUSTOM_KINDS
        .iter()
        .filter(|(api, _, _)| crate::metallb::is_metallb(api))
}

/// The resource of a custom kind, from its `group/version`, kind and plural.
pub(crate) fn custom_resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// Decode the watched custom objects of `kind` in `api` into `loaded` the way the objects
/// file's are: a bad object is a problem and the rest still apply.
pub(crate) fn add_custom_objects<'a>(
    api: &str,
    kind: &str,
    objects: impl Iterator<Item = &'a DynamicObject>,
    loaded: &mut Loaded,
) {
    for o in objects {
        let Ok(mut item) = serde_json::to_value(o) else {
            continue;
        };
        if let Some(m) = item.as_object_mut() {
            m.insert("apiVersion".into(), api.into());
            m.insert("kind".into(), kind.into());
        }
        crate::decode::add_item(item, loaded);
    }
}

enum WatchEvent<K> {
    /// A relist started: the store is rebuilt from the following `Apply`s until `Ready`.
    Restart,
    Apply(K),
    Delete(K),
    /// The (re)list is complete.
    Ready,
}

/// What a store is keyed by: namespace and name, read from the object itself (a store holds
/// tens of thousands of objects; a key of its own beside each would be two more strings each).
trait Keyed {
    fn key(&self) -> (&str, &str);
}

/// `(namespace, name)`, empty where unset.
fn key_of<'a, S: AsRef<str>>(namespace: &'a Option<S>, name: &'a Option<S>) -> (&'a str, &'a str) {
    let text = |s: &'a Option<S>| s.as_ref().map_or("", AsRef::as_ref);
    (text(namespace), text(name))
}

impl Keyed for KeptService {
    fn key(&self) -> (&str, &str) {
        key_of(&self.metadata.namespace, &self.metadata.name)
    }
}

impl Keyed for KeptSlice {
    fn key(&self) -> (&str, &str) {
        key_of(&self.namespace, &self.name)
    }
}

/// Objects kept whole: Nodes, and Kube-OVN Subnets and VipPools as they come.
impl Keyed for core::Node {
    fn key(&self) -> (&str, &str) {
        key_of(&self.metadata.namespace, &self.metadata.name)
    }
}

impl Keyed for DynamicObject {
    fn key(&self) -> (&str, &str) {
        key_of(&self.metadata.namespace, &self.metadata.name)
    }
}

/// A stored object, ordered by its namespace/name.
struct Stored<K>(Arc<K>);

impl<K: Keyed> PartialEq for Stored<K> {
    fn eq(&self, other: &Self) -> bool {
        self.0.key() == other.0.key()
    }
}

impl<K: Keyed> Eq for Stored<K> {}

impl<K: Keyed> PartialOrd for Stored<K> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<K: Keyed> Ord for Stored<K> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.key().cmp(&other.0.key())
    }
}

/// A store per kind, keyed by namespace/name; `ready` once its first list completed.
struct Store<K> {
    objects: BTreeSet<Stored<K>>,
    /// Objects of a relist in progress (swapped in at `Ready`).
    pending: Option<BTreeSet<Stored<K>>>,
    ready: bool,
}

impl<K: Keyed> Store<K> {
    fn new() -> Self {
        Store {
            objects: BTreeSet::new(),
            pending: None,
            ready: false,
        }
    }

    fn apply(&mut self, ev: WatchEvent<K>) {
        match ev {
            WatchEvent::Restart => self.pending = Some(BTreeSet::new()),
            WatchEvent::Apply(o) => {
                let target = self.pending.as_mut().unwrap_or(&mut self.objects);
                target.replace(Stored(Arc::new(o)));
            }
            WatchEvent::Delete(o) => {
                self.objects.remove(&Stored(Arc::new(o)));
            }
            WatchEvent::Ready => {
                if let Some(p) = self.pending.take() {
                    self.objects = p;
                }
                self.ready = true;
            }
        }
    }

    /// The objects, shared: unchanged ones keep their allocation from snapshot to snapshot.
    fn values(&self) -> Vec<Arc<K>> {
        self.objects.iter().map(|s| Arc::clone(&s.0)).collect()
    }

    /// The objects, in key order.
    fn iter(&self) -> impl Iterator<Item = &K> {
        self.objects.iter().map(|s| &*s.0)
    }
}

type Boxed = Pin<Box<dyn Stream<Item = WatchChange> + Send>>;

/// Watch `api`, keeping of each object what `keep` makes of it.
fn stream<K, T, F>(api: Api<K>, cfg: watcher::Config, keep: fn(K) -> T, wrap: F) -> Boxed
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    T: 'static,
    F: Fn(WatchEvent<T>) -> WatchChange + Send + Sync + 'static,
{
    watcher::watcher(api, cfg)
        .backoff(crate::source::watch_backoff::WatchBackoff::new())
        .filter_map(move |ev| {
            let out = match ev {
                Ok(Event::Init) => Some(WatchEvent::Restart),
                Ok(Event::InitApply(mut o)) | Ok(Event::Apply(mut o)) => {
                    // managedFields are large and useless to us.
                    o.meta_mut().managed_fields = None;
                    Some(WatchEvent::Apply(keep(o)))
                }
                Ok(Event::Delete(o)) => Some(WatchEvent::Delete(keep(o))),
                Ok(Event::InitDone) => Some(WatchEvent::Ready),
                Err(e) => {
                    tracing::warn!(error = %e, "watch error; backing off");
                    None
                }
            };
            std::future::ready(out.map(&wrap))
        })
        .boxed()
}

/// The Kube-OVN `Subnet` resource.
pub(crate) fn subnet_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubeovn.io", "v1", "Subnet"),
        "subnets",
    )
}

/// Whether the Kube-OVN Subnet CRD is served.
async fn has_subnets(client: &Client) -> bool {
    served(client, &subnet_resource()).await
}

/// Whether a custom resource's CRD is served (a 404 says it is not; another error is WARNed
/// and taken as not served).
pub(crate) async fn served(client: &Client, resource: &ApiResource) -> bool {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    match api.list(&kube::api::ListParams::default().limit(1)).await {
        Ok(_) => true,
        Err(kube::Error::Api(e)) if e.code == 404 => false,
        Err(e) => {
            tracing::warn!(kind = %resource.kind, error = %e, "cannot tell whether the custom resource is served; not watching it");
            false
        }
    }
}

/// A watched Kube-OVN `Subnet`, as vipflow reads it.
pub(crate) fn to_subnet(o: &DynamicObject) -> Option<KubeOvnSubnet> {
    let mut v = serde_json::json!({ "metadata": o.metadata, "spec": o.data.get("spec").cloned().unwrap_or_default() });
    if let Some(m) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        m.remove("managedFields");
    }
    serde_json::from_value(v).ok()
}

/// Run the watchers; send a new snapshot into `tx` after each (coalesced) change once every
/// watcher has listed. Ends when every receiver is gone.
pub async fn run(client: Client, cfg: KubeSourceConfig, tx: watch::Sender<Arc<Loaded>>) {
    let list = |c: watcher::Config| c.page_size(cfg.page_size).any_semantic();
    let mut streams: Vec<Boxed> = vec![
        stream(
            Api::<core::Service>::all(client.clone()),
            list(watcher::Config::default()),
            KeptService::from,
            |e| WatchChange::Service(Box::new(e)),
        ),
        // Slices not managed for a Service are of no use: filter on the server.
        stream(
            Api::<discovery::EndpointSlice>::all(client.clone()),
            list(watcher::Config::default().labels(crate::keys::SERVICE_NAME_LABEL)),
            KeptSlice::from,
            |e| WatchChange::Slice(Box::new(e)),
        ),
    ];
    let nodes = if cfg.all_nodes || cfg.node_name.is_empty() {
        watcher::Config::default()
    } else {
        watcher::Config::default().fields(&format!("metadata.name={}", cfg.node_name))
    };
    streams.push(stream(
        Api::<core::Node>::all(client.clone()),
        list(nodes),
        |n| n,
        |e| WatchChange::Node(Box::new(e)),
    ));
    let subnets = has_subnets(&client).await;
    if subnets {
        tracing::info!("Kube-OVN Subnets found; watching them");
        streams.push(stream(
            Api::<DynamicObject>::all_with(client.clone(), &subnet_resource()),
            list(watcher::Config::default()),
            |o| o,
            |e| WatchChange::Subnet(Box::new(e)),
        ));
    }

    let pool_resource = crate::ipam_task::pool_resource();
    let pools = served(&client, &pool_resource).await;
    if pools {
        streams.push(stream(
            Api::<DynamicObject>::all_with(client.clone(), &pool_resource),
            list(watcher::Config::default()),
            |o| o,
            |e| WatchChange::Pool(Box::new(e)),
        ));
    }

    let mut custom_served = [false; CUSTOM_KINDS.len()];
    for (i, (api, kind, plural)) in CUSTOM_KINDS.iter().enumerate() {
        let resource = custom_resource(api, kind, plural);
        if served(&client, &resource).await {
            custom_served[i] = true;
            streams.push(stream(
                Api::<DynamicObject>::all_with(client.clone(), &resource),
                list(watcher::Config::default()),
                |o| o,
                move |e| WatchChange::Custom(i, Box::new(e)),
            ));
        }
    }

    let (ctx, mut crx) = mpsc::channel::<WatchChange>(1024);
    let mut tasks = Vec::new();
    for mut s in streams {
        let ctx = ctx.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(c) = s.next().await {
                if ctx.send(c).await.is_err() {
                    return;
                }
            }
        }));
    }
    drop(ctx);

    let mut services = Store::<KeptService>::new();
    let mut slices = Store::<KeptSlice>::new();
    let mut nodes = Store::<core::Node>::new();
    let mut subnet_store = Store::<DynamicObject>::new();
    let mut pool_store = Store::<DynamicObject>::new();
    let mut custom_stores: [Store<DynamicObject>; CUSTOM_KINDS.len()] =
        std::array::from_fn(|_| Store::new());
    let gathering = Gathering {
        debounce: cfg.debounce,
        max_delay: cfg.max_delay,
    };
    let mut last_sent = None;
    loop {
        let Some(first) = crx.recv().await else { break };
        let mut apply = |c: WatchChange| match c {
            WatchChange::Service(e) => services.apply(*e),
            WatchChange::Slice(e) => slices.apply(*e),
            WatchChange::Node(e) => nodes.apply(*e),
            WatchChange::Subnet(e) => subnet_store.apply(*e),
            WatchChange::Pool(e) => pool_store.apply(*e),
            WatchChange::Custom(i, e) => {
                if let Some(store) = custom_stores.get_mut(i) {
                    store.apply(*e);
                }
            }
        };
        gather(&mut crx, first, last_sent, gathering, &mut apply).await;
        let all_ready = services.ready
            && slices.ready
            && nodes.ready
            && (!subnets || subnet_store.ready)
            && (!pools || pool_store.ready)
            && custom_stores
                .iter()
                .zip(custom_served)
                .all(|(store, served)| !served || store.ready);
        if !all_ready {
            continue;
        }
        let objects = Objects {
            services: services.values(),
            endpoint_slices: slices.values(),
            nodes: nodes.values(),
            subnets: subnet_store.iter().filter_map(to_subnet).collect(),
            pools: pool_store
                .iter()
                .filter_map(crate::ipam_task::to_pool_object)
                .collect(),
            bgp: Default::default(),
            l2_advertisements: Vec::new(),
        };
        let mut loaded = Loaded {
            objects,
            problems: Vec::new(),
            complete: true,
        };
        for (store, (api, kind, _)) in custom_stores.iter().zip(CUSTOM_KINDS) {
            add_custom_objects(api, kind, store.iter(), &mut loaded);
        }
        crate::metallb::settle(&mut loaded);
        let objects = &loaded.objects;
        tracing::debug!(
            services = objects.services.len(),
            slices = objects.endpoint_slices.len(),
            nodes = objects.nodes.len(),
            "objects from the API server"
        );
        if tx.send(Arc::new(loaded)).is_err() {
            break;
        }
        last_sent = Some(tokio::time::Instant::now());
    }
    for t in tasks {
        t.abort();
    }
}

/// Start the source; the receiver sees the first snapshot once every watcher has listed.
pub fn start(
    client: Client,
    cfg: KubeSourceConfig,
) -> (watch::Receiver<Arc<Loaded>>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(Arc::new(Loaded::default()));
    let task = tokio::spawn(run(client, cfg, tx));
    (rx, task)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::KeptMeta;

    fn svc(ns: &str, name: &str, port: i32) -> KeptService {
        let mut s = KeptService::default();
        s.metadata = KeptMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        };
        s.spec = Some(crate::model::KeptServiceSpec {
            ports: Some(vec![crate::model::KeptServicePort {
                port,
                ..Default::default()
            }]),
            ..Default::default()
        });
        s
    }

    fn ports(s: &Store<KeptService>) -> Vec<(String, i32)> {
        s.iter()
            .map(|o| {
                let (ns, name) = Keyed::key(o);
                let p = o
                    .spec
                    .as_ref()
                    .and_then(|s| s.ports.as_ref())
                    .map_or(0, |p| p[0].port);
                (format!("{ns}/{name}"), p)
            })
            .collect()
    }

    #[test]
    fn a_store_keeps_one_object_per_key_in_key_order_and_swaps_in_a_relist_when_it_is_done() {
        let mut s = Store::new();
        s.apply(WatchEvent::Restart);
        s.apply(WatchEvent::Apply(svc("b", "x", 1)));
        s.apply(WatchEvent::Apply(svc("a", "y", 2)));
        assert!(
            ports(&s).is_empty(),
            "a relist in progress is not the store yet"
        );
        s.apply(WatchEvent::Ready);
        assert!(s.ready);
        assert_eq!(ports(&s), [("a/y".into(), 2), ("b/x".into(), 1)]);
        // A newer version replaces the old one under the same key.
        s.apply(WatchEvent::Apply(svc("b", "x", 3)));
        assert_eq!(ports(&s), [("a/y".into(), 2), ("b/x".into(), 3)]);
        // A delete names the object by its key, whatever version it carries.
        s.apply(WatchEvent::Delete(svc("a", "y", 9)));
        assert_eq!(ports(&s), [("b/x".into(), 3)]);
        // A relist replaces everything once it is done.
        s.apply(WatchEvent::Restart);
        s.apply(WatchEvent::Apply(svc("c", "z", 4)));
        assert_eq!(ports(&s), [("b/x".into(), 3)]);
        s.apply(WatchEvent::Ready);
        assert_eq!(ports(&s), [("c/z".into(), 4)]);
        assert_eq!(s.values().len(), 1);
    }

    /// Every MetalLB kind the objects file reads is watched too: one that is not would be
    /// missing in a cluster without a word.
    #[test]
    fn every_metallb_kind_read_is_watched() {
        for (kind, api, plural) in crate::metallb::KINDS {
            // The API server serves a BGPPeer in the version asked for: one watch reads both.
            if kind == "BGPPeer" && api == crate::metallb::V1BETA1 {
                continue;
            }
            assert!(
                CUSTOM_KINDS.contains(&(api, kind, plural)),
                "{api} {kind} is not watched"
            );
        }
    }
}
