//! The allocator's I/O: while this agent leads, watch Services, `VipPool`s and Namespaces, feed
//! [`Allocations`], and write what it decides: each Service's `status.loadBalancer.ingress`
//! with vipflow's condition (server-side apply on the status subresource, field manager
//! [`FIELD_MANAGER`]), each pool's status, and Events. Beside it, on the same leadership, the
//! Events on MetalLB's objects ([`crate::metallb_events`]).
//!
//! Every leading session starts from fresh lists (a new leader never trusts a cache from before
//! it led: its statuses are what every earlier writer committed). A watch that has to list
//! again mid-session (its resourceVersion expired) ends the session, and a new one starts from
//! fresh lists, so nothing missed in between is lost.

use crate::event_sink::EventSink;
use crate::ipam::controller::{Allocations, SeenService, StatusWrite};
use crate::ipam::pool::PoolSpec;
use crate::ipam::pool_object::{API_VERSION, KIND, PLURAL, VipPool};
use crate::ipam::service::{self, CONDITION};
use crate::model::ServiceKey;
use crate::plan::exclude::KubeOvnSubnetIpam;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use std::collections::BTreeMap;
use std::pin::Pin;
use std::time::Duration;
use tokio::sync::watch;

/// The field manager of vipflow's status writes.
pub const FIELD_MANAGER: &str = "vipflow-ipam";

/// How the allocator runs.
#[derive(Debug, Clone)]
pub struct IpamSettings {
    /// The loadBalancerClass served besides none.
    pub class: Option<String>,
    /// How often Services whose decision or write failed are tried again.
    pub retry_every: Duration,
    /// How often changed pool statuses are written (at most).
    pub pool_status_every: Duration,
    /// This agent in the Events it posts on pools (its node).
    pub instance: String,
}

impl Default for IpamSettings {
    fn default() -> Self {
        IpamSettings {
            class: None,
            retry_every: Duration::from_secs(5),
            pool_status_every: Duration::from_secs(1),
            instance: "vipflow".into(),
        }
    }
}

/// Where the allocator reports besides the API server.
#[derive(Clone, Default)]
pub struct IpamOutputs {
    /// Events on Services.
    pub events: Option<EventSink>,
    /// The pools' address counts.
    pub metrics: Option<std::sync::Arc<crate::metrics::Metrics>>,
    /// The pools for the status document (emptied when this agent stops leading).
    pub pools: Option<watch::Sender<std::sync::Arc<Vec<crate::status::PoolDoc>>>>,
}

/// Run the allocator while `leader` says this agent leads (always, without election).
pub async fn run(
    client: Client,
    settings: IpamSettings,
    leader: Option<watch::Receiver<bool>>,
    events: Option<EventSink>,
) {
    let outputs = IpamOutputs {
        events,
        ..Default::default()
    };
    run_with(client, settings, leader, outputs).await
}

/// [`run`], reporting to `out`.
pub async fn run_with(
    client: Client,
    settings: IpamSettings,
    leader: Option<watch::Receiver<bool>>,
    out: IpamOutputs,
) {
    allocate(client, settings, leader, out).await;
}

/// The allocator itself: its leading sessions.
async fn allocate(
    client: Client,
    settings: IpamSettings,
    leader: Option<watch::Receiver<bool>>,
    out: IpamOutputs,
) {
    let Some(mut leader) = leader else {
        loop {
            lead(&client, &settings, &out).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    };
    loop {
        if leader.wait_for(|l| *l).await.is_err() {
            return;
        }
        tracing::info!("leading: allocating LoadBalancer addresses");
        let session = async {
            loop {
                lead(&client, &settings, &out).await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        };
        tokio::select! {
            _ = session => {}
            lost = leader.wait_for(|l| !*l) => {
                tracing::info!("not leading: allocator stopped");
                // What it had still to say is the next leader's to say.
                if let Some(ev) = &out.events {
                    ev.new_session();
                }
                if let Some(p) = &out.pools {
                    p.send_replace(std::sync::Arc::default());
                }
                if lost.is_err() {
                    return;
                }
            }
        }
    }
}

/// The `VipPool` resource.
pub(crate) fn pool_resource() -> ApiResource {
    crate::source::kube::custom_resource(API_VERSION, KIND, PLURAL)
}

/// MetalLB's `IPAddressPool`s, allocated from as vipflow's own pools ([`crate::metallb`]).
fn metallb_pool_resource() -> ApiResource {
    crate::source::kube::custom_resource(crate::metallb::V1BETA1, "IPAddressPool", "ipaddresspools")
}

/// A watched MetalLB `IPAddressPool` as the allocator takes it, read as the objects file reads
/// it; `None` when it cannot be read (said by every agent's source).
fn to_metallb_pool(o: &DynamicObject) -> Option<PoolSpec> {
    let item = serde_json::json!({
        "apiVersion": crate::metallb::V1BETA1,
        "kind": "IPAddressPool",
        "metadata": o.metadata,
        "spec": o.data.get("spec").cloned().unwrap_or_default(),
    });
    let mut loaded = crate::model::Loaded::default();
    crate::decode::add_item(item, &mut loaded);
    loaded.objects.pools.first().map(VipPool::to_spec)
}

/// The pools the allocator hands addresses from: every `VipPool`, and every MetalLB
/// `IPAddressPool` no `VipPool` of its name shadows (vipflow's object wins, as in the plan).
fn all_pools(
    ours: &BTreeMap<String, PoolSpec>,
    metallb: &BTreeMap<String, PoolSpec>,
) -> Vec<PoolSpec> {
    let mut by_name: BTreeMap<&str, &PoolSpec> = BTreeMap::new();
    for p in metallb.values() {
        by_name.entry(p.name.as_str()).or_insert(p);
    }
    for p in ours.values() {
        by_name.insert(p.name.as_str(), p);
    }
    by_name.into_values().cloned().collect()
}

/// What one watch saw.
enum IpamWatched {
    Service(Box<Event<Service>>),
    Pool(Box<Event<DynamicObject>>),
    MetallbPool(Box<Event<DynamicObject>>),
    Namespace(Box<Event<Namespace>>),
    Subnet(Box<Event<DynamicObject>>),
}

/// [`IpamWatched`] with its event out of the box, to match on (one at a time, never stored).
#[allow(clippy::large_enum_variant)]
enum Unboxed {
    Service(Event<Service>),
    Pool(Event<DynamicObject>),
    MetallbPool(Event<DynamicObject>),
    Namespace(Event<Namespace>),
    Subnet(Event<DynamicObject>),
}

impl IpamWatched {
    fn unboxed(self) -> Unboxed {
        match self {
            IpamWatched::Service(e) => Unboxed::Service(*e),
            IpamWatched::Pool(e) => Unboxed::Pool(*e),
            IpamWatched::MetallbPool(e) => Unboxed::MetallbPool(*e),
            IpamWatched::Namespace(e) => Unboxed::Namespace(*e),
            IpamWatched::Subnet(e) => Unboxed::Subnet(*e),
        }
    }
}

type IpamChanges = Pin<Box<dyn Stream<Item = IpamWatched> + Send>>;

fn watch_all<K>(api: Api<K>, wrap: fn(Event<K>) -> IpamWatched) -> IpamChanges
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    watcher::watcher(api, watcher::Config::default().any_semantic())
        .backoff(crate::source::watch_backoff::WatchBackoff::new())
        .filter_map(move |ev| {
            std::future::ready(match ev {
                Ok(e) => Some(wrap(e)),
                Err(e) => {
                    tracing::warn!(error = %e, "allocator watch error; backing off");
                    None
                }
            })
        })
        .boxed()
}

/// A watched `VipPool` object, or why it cannot be read.
pub(crate) fn read_pool_object(o: &DynamicObject) -> Result<VipPool, serde_json::Error> {
    let v = serde_json::json!({ "metadata": o.metadata, "spec": o.data.get("spec").cloned().unwrap_or_default() });
    let mut p = serde_json::from_value::<VipPool>(v)?;
    p.metadata.managed_fields = None;
    Ok(p)
}

/// A watched `VipPool` object, for the plan (one that cannot be read is left out).
pub(crate) fn to_pool_object(o: &DynamicObject) -> Option<VipPool> {
    read_pool_object(o).ok()
}

fn to_pool(o: &DynamicObject) -> PoolSpec {
    match read_pool_object(o) {
        Ok(p) => p.to_spec(),
        Err(e) => {
            tracing::warn!(pool = %o.name_any(), error = %e, "VipPool cannot be read; it is not usable");
            PoolSpec::new(&o.name_any(), &[])
        }
    }
}

fn service_key(s: &Service) -> ServiceKey {
    ServiceKey::new(
        s.metadata.namespace.as_deref().unwrap_or("default"),
        s.metadata.name.as_deref().unwrap_or_default(),
    )
}

fn seen(s: &Service, class: Option<&str>) -> Option<SeenService> {
    match service::read(s, class) {
        Ok(None) => None,
        Ok(Some(ask)) => Some(SeenService::Ask(Box::new(ask))),
        Err(e) => Some(SeenService::Bad {
            error: e,
            current: service::status_ips(s),
            created: s.metadata.creation_timestamp.clone(),
        }),
    }
}

/// One watch's objects while the first lists come in: complete once its list is; changes that
/// come after (while another watch still lists) are applied to it, never dropped.
struct Listing<T> {
    objects: BTreeMap<String, T>,
    complete: bool,
}

impl<T> Default for Listing<T> {
    fn default() -> Self {
        Listing {
            objects: BTreeMap::new(),
            complete: false,
        }
    }
}

impl<T> Listing<T> {
    /// Apply one event, with `read` making the kept form (`None`: not kept, and dropped).
    fn apply<K>(
        &mut self,
        ev: Event<K>,
        key: impl Fn(&K) -> String,
        read: impl Fn(&K) -> Option<T>,
    ) {
        match ev {
            Event::Init => {
                self.objects.clear();
                self.complete = false;
            }
            Event::InitApply(o) | Event::Apply(o) => match read(&o) {
                Some(t) => {
                    self.objects.insert(key(&o), t);
                }
                None => {
                    self.objects.remove(&key(&o));
                }
            },
            Event::Delete(o) => {
                self.objects.remove(&key(&o));
            }
            Event::InitDone => self.complete = true,
        }
    }
}

/// One leading session: fresh lists, then changes, until a watch lists again or the stream
/// ends.
async fn lead(client: &Client, settings: &IpamSettings, out: &IpamOutputs) {
    let events = out.events.as_ref();
    // Another instance may have led since this one last did: what was said is learned again
    // from the Events before anything is said.
    if let Some(ev) = events {
        ev.new_session();
    }
    let class = settings.class.as_deref();
    let mut streams: Vec<IpamChanges> = vec![
        watch_all(Api::<Service>::all(client.clone()), |e| {
            IpamWatched::Service(Box::new(e))
        }),
        watch_all(Api::<Namespace>::all(client.clone()), |e| {
            IpamWatched::Namespace(Box::new(e))
        }),
    ];
    let pools_served = crate::source::kube::served(client, &pool_resource()).await;
    if pools_served {
        streams.push(watch_all(
            Api::<DynamicObject>::all_with(client.clone(), &pool_resource()),
            |e| IpamWatched::Pool(Box::new(e)),
        ));
    }
    let metallb_served = crate::source::kube::served(client, &metallb_pool_resource()).await;
    if metallb_served {
        streams.push(watch_all(
            Api::<DynamicObject>::all_with(client.clone(), &metallb_pool_resource()),
            |e| IpamWatched::MetallbPool(Box::new(e)),
        ));
    }
    let subnet_resource = crate::source::kube::subnet_resource();
    if crate::source::kube::served(client, &subnet_resource).await {
        streams.push(watch_all(
            Api::<DynamicObject>::all_with(client.clone(), &subnet_resource),
            |e| IpamWatched::Subnet(Box::new(e)),
        ));
    }
    let mut changes = futures::stream::select_all(streams);
    // Subnets only feed the pool check: their (re)lists need no fresh start, and the check does
    // not wait for their first list.
    let mut subnets: Listing<KubeOvnSubnetIpam> = Listing::default();
    let read_subnet = |o: &DynamicObject| {
        crate::source::kube::to_subnet(o).map(|sn| KubeOvnSubnetIpam::from(&sn))
    };
    let mut exposed = Exposed::default();
    // Pools or Subnets changed: check again which pool addresses pods could get.
    let mut exposure_due = true;
    let mut services: Listing<(ServiceKey, SeenService)> = Listing::default();
    let mut pool_list: Listing<PoolSpec> = Listing {
        complete: !pools_served,
        ..Listing::default()
    };
    let mut metallb_list: Listing<PoolSpec> = Listing {
        complete: !metallb_served,
        ..Listing::default()
    };
    let mut namespaces: Listing<BTreeMap<String, String>> = Listing::default();
    // The first complete listing of every watch.
    while !(services.complete && pool_list.complete && metallb_list.complete && namespaces.complete)
    {
        let Some(ch) = changes.next().await else {
            return;
        };
        match ch.unboxed() {
            Unboxed::Service(ev) => services.apply(
                ev,
                |s| service_key(s).to_string(),
                |s| seen(s, class).map(|x| (service_key(s), x)),
            ),
            Unboxed::Pool(ev) => pool_list.apply(ev, |p| p.name_any(), |p| Some(to_pool(p))),
            Unboxed::MetallbPool(ev) => metallb_list.apply(ev, |p| p.name_any(), to_metallb_pool),
            Unboxed::Namespace(ev) => namespaces.apply(
                ev,
                |n| n.name_any(),
                |n| Some(n.metadata.labels.clone().unwrap_or_default()),
            ),
            Unboxed::Subnet(ev) => subnets.apply(ev, |o| o.name_any(), read_subnet),
        }
    }
    let mut pools = pool_list.objects;
    let mut metallb_pools = metallb_list.objects;
    let (mut alloc, writes) = Allocations::start(
        all_pools(&pools, &metallb_pools),
        namespaces.objects.into_iter().collect(),
        services.objects.into_values().collect(),
    );
    tracing::info!(
        pools = pools.len(),
        writes = writes.len(),
        "allocator started"
    );
    write_all(client, &mut alloc, writes).await;
    let mut retry = tokio::time::interval(settings.retry_every);
    let mut pool_tick = tokio::time::interval(settings.pool_status_every);
    loop {
        if let Some(ev) = events
            && let Some(now) = alloc.statements_if_changed()
        {
            ev.update(now);
        }
        if std::mem::take(&mut exposure_due) {
            let subnet_list: Vec<KubeOvnSubnetIpam> = subnets.objects.values().cloned().collect();
            let pool_list: Vec<PoolSpec> = all_pools(&pools, &metallb_pools);
            exposed
                .update(client, &settings.instance, &pool_list, &subnet_list)
                .await;
        }
        let writes = tokio::select! {
            ch = changes.next() => match ch.map(IpamWatched::unboxed) {
                None => return,
                Some(Unboxed::Service(Event::Apply(s))) => match seen(&s, class) {
                    Some(x) => alloc.service(service_key(&s), Some(x)).into_iter().collect(),
                    None => alloc
                        .not_ours(service_key(&s), &service::status_ips(&s))
                        .into_iter()
                        .collect(),
                },
                Some(Unboxed::Service(Event::Delete(s))) => {
                    alloc.service(service_key(&s), None);
                    Vec::new()
                }
                Some(Unboxed::Pool(Event::Apply(p))) => {
                    exposure_due = true;
                    pools.insert(p.name_any(), to_pool(&p));
                    alloc.pools(all_pools(&pools, &metallb_pools))
                }
                Some(Unboxed::Pool(Event::Delete(p))) => {
                    exposure_due = true;
                    pools.remove(&p.name_any());
                    alloc.pools(all_pools(&pools, &metallb_pools))
                }
                Some(Unboxed::MetallbPool(Event::Apply(p))) => {
                    exposure_due = true;
                    match to_metallb_pool(&p) {
                        Some(spec) => metallb_pools.insert(p.name_any(), spec),
                        None => metallb_pools.remove(&p.name_any()),
                    };
                    alloc.pools(all_pools(&pools, &metallb_pools))
                }
                Some(Unboxed::MetallbPool(Event::Delete(p))) => {
                    exposure_due = true;
                    metallb_pools.remove(&p.name_any());
                    alloc.pools(all_pools(&pools, &metallb_pools))
                }
                Some(Unboxed::Namespace(Event::Apply(n))) => {
                    alloc.namespace(&n.name_any(), Some(n.metadata.labels.clone().unwrap_or_default()))
                }
                Some(Unboxed::Namespace(Event::Delete(n))) => alloc.namespace(&n.name_any(), None),
                Some(Unboxed::Subnet(ev)) => {
                    exposure_due = true;
                    subnets.apply(ev, |o| o.name_any(), read_subnet);
                    Vec::new()
                }
                // A watch lists again: start over from fresh lists.
                Some(_) => {
                    tracing::info!("allocator watch listing again; starting over");
                    return;
                }
            },
            _ = retry.tick() => alloc.retry(),
            _ = pool_tick.tick() => {
                write_pool_statuses(client, &mut alloc, out, &pools).await;
                Vec::new()
            }
        };
        write_all(client, &mut alloc, writes).await;
    }
}

/// Write each decision and tell the allocator how it went.
async fn write_all(client: &Client, alloc: &mut Allocations, writes: Vec<StatusWrite>) {
    for w in writes {
        let ok = match write_status(client, &w).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(service = %w.service, error = %e, "cannot write the Service's addresses; will retry");
                false
            }
        };
        alloc.written(&w.service, ok);
    }
}

async fn write_status(client: &Client, w: &StatusWrite) -> Result<(), kube::Error> {
    let api: Api<Service> = Api::namespaced(client.clone(), &w.service.namespace);
    let ingress: Vec<serde_json::Value> = w
        .ips
        .iter()
        .map(|ip| serde_json::json!({"ip": ip.to_string(), "ipMode": "VIP"}))
        .collect();
    let message = serde_json::to_string(&w.record).map_err(kube::Error::SerdeError)?;
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let patch = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Service",
        "status": {
            "loadBalancer": {"ingress": ingress},
            "conditions": [{
                "type": CONDITION,
                "status": if w.ips.is_empty() { "False" } else { "True" },
                "reason": if w.ips.is_empty() { "Released" } else { "Allocated" },
                "message": message,
                "lastTransitionTime": now,
            }],
        },
    });
    api.patch_status(
        &w.service.name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map(|_| ())
}

/// Each changed pool's status, on the `VipPool` of its name (`ours`); a MetalLB pool's usage
/// goes to the metrics and the status document only (MetalLB's controller, which wrote its
/// status, is gone, and vipflow writes no object of MetalLB's).
async fn write_pool_statuses(
    client: &Client,
    alloc: &mut Allocations,
    out: &IpamOutputs,
    ours: &BTreeMap<String, PoolSpec>,
) {
    let metrics = out.metrics.as_deref();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &pool_resource());
    let statuses = alloc.pool_statuses();
    if let Some(tx) = &out.pools
        && (!statuses.changed.is_empty() || !statuses.gone.is_empty())
    {
        tx.send_replace(std::sync::Arc::new(alloc.pool_docs()));
    }
    if let Some(m) = metrics {
        for name in &statuses.gone {
            for (family, state) in [
                ("IPv4", "assigned"),
                ("IPv4", "available"),
                ("IPv6", "assigned"),
                ("IPv6", "available"),
            ] {
                m.pool_addresses.remove(&crate::metrics::PoolLabel {
                    pool: name.clone(),
                    family: family.into(),
                    state: state.into(),
                });
            }
        }
    }
    for (name, status) in statuses.changed {
        if let Some(m) = metrics {
            let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            for (family, state, v) in [
                ("IPv4", "assigned", status.assigned_ipv4),
                ("IPv4", "available", status.available_ipv4),
                ("IPv6", "assigned", status.assigned_ipv6),
                ("IPv6", "available", status.available_ipv6),
            ] {
                m.pool_addresses
                    .get_or_create(&crate::metrics::PoolLabel {
                        pool: name.clone(),
                        family: family.into(),
                        state: state.into(),
                    })
                    .set(n(v));
            }
        }
        if !ours.contains_key(&name) {
            continue;
        }
        let patch = serde_json::json!({
            "apiVersion": API_VERSION,
            "kind": KIND,
            "status": status,
        });
        if let Err(e) = api
            .patch_status(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
        {
            tracing::warn!(pool = %name, error = %e, "cannot write the VipPool's status");
        }
    }
}

/// Warning Events on pools whose addresses a Kube-OVN Subnet could hand to pods: each said
/// once while it holds (said again if it stops holding and comes back).
#[derive(Default)]
struct Exposed {
    said: std::collections::BTreeSet<(String, String)>,
}

impl Exposed {
    async fn update(
        &mut self,
        client: &Client,
        instance: &str,
        pools: &[PoolSpec],
        subnets: &[KubeOvnSubnetIpam],
    ) {
        let now = crate::ipam::pool::exposed_to_pods(pools, subnets);
        self.said.retain(|s| now.contains(s));
        for (pool, note) in now {
            if self.said.contains(&(pool.clone(), note.clone())) {
                continue;
            }
            let reference = k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some(API_VERSION.into()),
                kind: Some(KIND.into()),
                name: Some(pool.clone()),
                ..Default::default()
            };
            let event = kube::runtime::events::Event {
                type_: kube::runtime::events::EventType::Warning,
                reason: "PoolNotExcluded".into(),
                note: Some(note.clone()),
                action: "Check".into(),
                secondary: None,
            };
            let reporter = kube::runtime::events::Reporter {
                controller: "vipflow".into(),
                instance: Some(instance.into()),
            };
            match kube::runtime::events::Recorder::new(client.clone(), reporter)
                .publish(&event, &reference)
                .await
            {
                Ok(()) => {
                    self.said.insert((pool, note));
                }
                Err(e) => tracing::warn!(%pool, error = %e, "cannot publish the pool's Event"),
            }
        }
    }
}
