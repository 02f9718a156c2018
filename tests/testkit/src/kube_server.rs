//! A small Kubernetes API server for tests, spoken to over real HTTP by an unmodified
//! `kube::Client` through a kubeconfig.
//!
//! It stores objects as JSON (no schema), keyed by (resource, namespace, name), with one global
//! `resourceVersion` counter, and speaks the apiserver's list/watch protocol: paginated lists
//! with `limit`/`continue` and label/field selectors; watches that replay history after a
//! `resourceVersion`, then stream live changes as newline-delimited JSON, with periodic
//! `BOOKMARK`s when `allowWatchBookmarks=true`, `timeoutSeconds`, `sendInitialEvents`, and
//! `410 Gone` (an `ERROR` event with an `Expired` `Status`) for a compacted resourceVersion or
//! on demand. Writes (create, update with resourceVersion preconditions, merge/JSON/apply
//! patches, delete) answer with real `Status` errors.
//!
//! Served: core/v1 services, nodes, namespaces, events; discovery.k8s.io/v1 endpointslices;
//! coordination.k8s.io/v1 leases; events.k8s.io/v1 events; and kubeovn.io/v1 subnets once
//! [`KubeServer::enable_crd`] is called (404 before, as when the CRD is absent).
//!
//! ```no_run
//! # async fn demo() {
//! use testkit::kube_server::KubeServer;
//! let srv = KubeServer::start().await;
//! srv.apply_yaml("apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\nspec: {}\n");
//! let client = srv.client().await; // or kube::Config from srv.kubeconfig_path()
//! # }
//! ```
//!
//! Deliberate simplifications: strategic merge and apply patches are applied as JSON merge
//! patches (lists are replaced, not merged by key), except that an apply patch merges
//! `status.conditions` by `type` and drops the conditions its field manager applied before and
//! no longer names (field ownership kept for those alone); field selectors accept any dotted path;
//! core/v1 and events.k8s.io/v1 Events are separate collections. As with the apiserver, writes
//! through HTTP to a resource with a `status` subresource keep the stored status (use
//! `/status`, or the control API, to set it), and list items of built-in types carry no
//! `kind`/`apiVersion`.

mod handler;
mod resources;
mod store;
mod util;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

pub use resources::ResourceDef;
pub use store::ApiError;
use store::{Store, UpdateMode, meta_str};

/// One request as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    pub method: String,
    pub path: String,
    /// The raw (still percent-encoded) query string.
    pub query: String,
    pub content_type: Option<String>,
    /// `list`, `watch`, `get`, `create`, `update`, `patch`, `delete`, `deletecollection`,
    /// `discovery` or `unknown`.
    pub verb: String,
    /// Plural resource name (`services`, `leases/status`...), empty for discovery.
    pub resource: String,
    /// HTTP status code of the response.
    pub status: u16,
}

impl RequestRecord {
    /// A decoded query parameter (the last one of that name).
    pub fn param(&self, key: &str) -> Option<String> {
        util::parse_query(&self.query)
            .into_iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    pub fn is_watch(&self) -> bool {
        self.verb == "watch"
    }

    pub fn is_list(&self) -> bool {
        self.verb == "list"
    }
}

impl std::fmt::Display for RequestRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.method, self.path)?;
        if !self.query.is_empty() {
            write!(f, "?{}", self.query)?;
        }
        write!(f, " -> {}", self.status)
    }
}

/// State shared by the accept loop, connections, watch tasks and the test.
pub(crate) struct Shared {
    store: Mutex<Store>,
    /// Bumped on every committed change (and expire/close/stop): wakes watches.
    notify: tokio::sync::watch::Sender<u64>,
    /// Bumped on anything a test may wait for: changes, requests, watches opening/closing.
    observe: tokio::sync::watch::Sender<u64>,
    addr: SocketAddr,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wake_watches(&self) {
        self.notify.send_modify(|v| *v = v.wrapping_add(1));
        self.observed();
    }

    fn observed(&self) {
        self.observe.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Runs a store mutation; wakes watches when it committed something.
    fn write<T>(&self, f: impl FnOnce(&mut Store) -> Result<T, ApiError>) -> Result<T, ApiError> {
        let (res, changed) = {
            let mut s = self.lock();
            let before = s.rv;
            let res = f(&mut s);
            (res, s.rv != before)
        };
        if changed {
            self.wake_watches();
        }
        res
    }

    fn log(&self, rec: RequestRecord) {
        self.lock().log.push(rec);
        self.observed();
    }
}

/// A running test API server on 127.0.0.1 with an ephemeral port; stopped on drop.
pub struct KubeServer {
    shared: Arc<Shared>,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    task: Option<JoinHandle<()>>,
}

impl KubeServer {
    /// Binds 127.0.0.1:0, writes a kubeconfig pointing at it, and starts serving.
    pub async fn start() -> KubeServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::new()),
            notify: tokio::sync::watch::channel(0).0,
            observe: tokio::sync::watch::channel(0).0,
            addr,
        });
        let dir = tempfile::Builder::new()
            .prefix("kube-test-")
            .tempdir()
            .expect("create kubeconfig dir");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_yaml(&format!("http://{addr}")))
            .expect("write kubeconfig");
        let task = tokio::spawn(accept_loop(listener, shared.clone()));
        KubeServer {
            shared,
            dir,
            kubeconfig,
            task: Some(task),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// A kubeconfig file (cluster `kube-test` at [`Self::url`], context `kube-test` with
    /// namespace `default`, user `kube-test` without credentials).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The temporary directory holding the kubeconfig (removed on drop).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A `kube::Config` loaded from [`Self::kubeconfig_path`], as an agent would.
    pub async fn kube_config(&self) -> kube::Config {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("read kubeconfig");
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("kube::Config from kubeconfig")
    }

    /// An unmodified `kube::Client` for this server.
    pub async fn client(&self) -> kube::Client {
        kube::Client::try_from(self.kube_config().await).expect("kube::Client from config")
    }

    /// Serves a known custom resource (`"kubeovn.io/v1", "subnets"`), as if its CRD were
    /// installed. Before this its paths answer 404 and discovery does not list it. Objects may
    /// be loaded with [`Self::apply`] either way. Panics on an unknown resource (see
    /// [`Self::register_resource`]).
    pub fn enable_crd(&self, api_version: &str, plural: &str) {
        self.set_crd(api_version, plural, true);
    }

    /// Stops serving a custom resource (as if its CRD were deleted); stored objects stay.
    pub fn disable_crd(&self, api_version: &str, plural: &str) {
        self.set_crd(api_version, plural, false);
    }

    fn set_crd(&self, api_version: &str, plural: &str, on: bool) {
        {
            let mut s = self.shared.lock();
            let Some(def) = s
                .resources
                .iter()
                .find(|d| d.api_version() == api_version && d.plural == plural)
            else {
                panic!(
                    "unknown resource {api_version} {plural}; register it with register_resource first"
                );
            };
            let key = def.key();
            if on {
                s.enabled.insert(key);
            } else {
                s.enabled.remove(&key);
            }
        }
        self.shared.wake_watches();
    }

    /// Adds a custom resource (served after [`Self::enable_crd`]).
    pub fn register_resource(&self, api_version: &str, plural: &str, kind: &str, namespaced: bool) {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let singular = kind.to_ascii_lowercase();
        let def = ResourceDef {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            singular,
            kind: kind.into(),
            namespaced,
            status_subresource: true,
            create_keeps_status: false,
            crd: true,
            short_names: Vec::new(),
        };
        let mut s = self.shared.lock();
        s.resources
            .retain(|d| !(d.api_version() == api_version && d.plural == plural));
        s.resources.push(def);
    }

    /// How often watches with `allowWatchBookmarks=true` get a BOOKMARK (default 1 s); applies
    /// to watches opened afterwards.
    pub fn set_bookmark_interval(&self, interval: Duration) {
        self.shared.lock().bookmark_interval = interval;
    }

    /// Creates or updates an object like `kubectl apply`, from a `kubectl get -o yaml`-shaped
    /// object: its `resourceVersion` is ignored (the server assigns one); `uid`,
    /// `creationTimestamp` and `status` are kept when given (set when absent on create; an
    /// update keeps the stored uid and creationTimestamp). Namespaced objects default to
    /// namespace `default`. Returns the stored object. Panics on an unknown kind or bad object.
    pub fn apply(&self, obj: Value) -> Value {
        self.try_apply(obj).unwrap_or_else(|e| panic!("apply: {e}"))
    }

    /// [`Self::apply`] returning the error instead of panicking.
    pub fn try_apply(&self, mut obj: Value) -> Result<Value, ApiError> {
        let api_version = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let kind = obj
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        self.shared.write(|s| {
            let def = s.lookup_kind(&api_version, &kind).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "no resource for apiVersion {api_version:?} kind {kind:?}"
                ))
            })?;
            let ns = if def.namespaced {
                meta_str(&obj, "namespace").unwrap_or("default").to_string()
            } else {
                String::new()
            };
            if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
            }
            let name = meta_str(&obj, "name").map(str::to_string);
            match name {
                Some(name) if s.get(&def, &ns, &name).is_some() => {
                    s.update(&def, &ns, &name, obj, UpdateMode::Control, false)
                }
                _ => s.create(&def, &ns, obj, true, false),
            }
        })
    }

    /// Applies YAML text: one object, several `---`-separated documents, or a `List` (`kind:
    /// List`, `ServiceList`...). Returns the stored objects. Panics on bad YAML.
    pub fn apply_yaml(&self, yaml: &str) -> Vec<Value> {
        use serde::Deserialize;
        let mut out = Vec::new();
        for doc in serde_yaml_ng::Deserializer::from_str(yaml) {
            let v = Value::deserialize(doc).unwrap_or_else(|e| panic!("apply_yaml: {e}"));
            if v.is_null() {
                continue;
            }
            let is_list = v
                .get("kind")
                .and_then(Value::as_str)
                .is_some_and(|k| k.ends_with("List"));
            match v.get("items").and_then(Value::as_array) {
                Some(items) if is_list => out.extend(items.iter().map(|i| self.apply(i.clone()))),
                _ => out.push(self.apply(v)),
            }
        }
        out
    }

    /// A stored object (`ns` is "" for cluster-scoped resources).
    pub fn get(&self, api_version: &str, kind: &str, ns: &str, name: &str) -> Option<Value> {
        let s = self.shared.lock();
        let def = s.lookup_kind(api_version, kind)?;
        s.get(&def, ns, name).cloned()
    }

    /// All stored objects of a kind, every namespace, in (namespace, name) order.
    pub fn list(&self, api_version: &str, kind: &str) -> Vec<Value> {
        let s = self.shared.lock();
        match s.lookup_kind(api_version, kind) {
            Some(def) => s.list(&def, None).cloned().collect(),
            None => Vec::new(),
        }
    }

    /// Deletes an object; returns it, or None if it was absent.
    pub fn delete(&self, api_version: &str, kind: &str, ns: &str, name: &str) -> Option<Value> {
        self.shared
            .write(|s| {
                let def = s
                    .lookup_kind(api_version, kind)
                    .ok_or_else(ApiError::no_route)?;
                s.delete(&def, ns, name, None, None, false)
            })
            .ok()
    }

    /// Recorded Events, core/v1 and events.k8s.io/v1, in resourceVersion order.
    pub fn events(&self) -> Vec<Value> {
        let mut evs = self.list("v1", "Event");
        evs.extend(self.list("events.k8s.io/v1", "Event"));
        let rv = |v: &Value| {
            meta_str(v, "resourceVersion")
                .and_then(|r| r.parse::<u64>().ok())
                .unwrap_or(0)
        };
        evs.sort_by_key(rv);
        evs
    }

    /// Stored Leases.
    pub fn leases(&self) -> Vec<Value> {
        self.list("coordination.k8s.io/v1", "Lease")
    }

    /// The current (latest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.lock().rv
    }

    /// Forgets the change history up to now: a watch (or a `continue` token) from an older
    /// resourceVersion gets 410 Gone. Open watches that have not yet sent every change up to
    /// now also end with 410.
    pub fn compact(&self) {
        self.shared.lock().compact();
        self.shared.wake_watches();
    }

    /// Ends every open watch with an `ERROR` event carrying a 410 `Expired` `Status`.
    pub fn expire_watches(&self) {
        self.shared.lock().expire_gen += 1;
        self.shared.wake_watches();
    }

    /// Ends every open watch cleanly (as a watch timeout or apiserver restart does): clients
    /// re-watch from their last resourceVersion.
    pub fn close_watches(&self) {
        self.shared.lock().close_gen += 1;
        self.shared.wake_watches();
    }

    /// Number of watch streams currently open.
    pub fn open_watches(&self) -> usize {
        self.shared.lock().open_watches
    }

    /// The highest resourceVersion a periodic BOOKMARK has carried so far (0 before the first),
    /// to wait until a watch has been told about a resourceVersion.
    pub fn last_bookmark_rv(&self) -> u64 {
        self.shared.lock().last_bookmark_rv
    }

    /// Every request so far, in order of completion (a watch is recorded when its stream opens).
    pub fn request_log(&self) -> Vec<RequestRecord> {
        self.shared.lock().log.clone()
    }

    pub fn clear_request_log(&self) {
        self.shared.lock().log.clear();
    }

    /// Waits until `cond` holds; rechecked after every request, change, and watch opening or
    /// closing. No timeout of its own: wrap it in `tokio::time::timeout` as a hang guard.
    pub async fn wait_until(&self, mut cond: impl FnMut(&KubeServer) -> bool) {
        let mut rx = self.shared.observe.subscribe();
        loop {
            rx.borrow_and_update();
            if cond(self) {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// Waits for a logged request matching `pred` (looking at the whole log) and returns it.
    pub async fn wait_for_request(
        &self,
        mut pred: impl FnMut(&RequestRecord) -> bool,
    ) -> RequestRecord {
        let mut found = None;
        self.wait_until(|srv| {
            found = srv.shared.lock().log.iter().find(|r| pred(r)).cloned();
            found.is_some()
        })
        .await;
        found.expect("wait_until returns only when found")
    }

    /// Stops serving: closes the listener, every connection and every watch.
    pub fn stop(&mut self) {
        self.shared.lock().stopped = true;
        self.shared.wake_watches();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for KubeServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn kubeconfig_yaml(server: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: kube-test
  cluster:
    server: {server}
contexts:
- name: kube-test
  context:
    cluster: kube-test
    user: kube-test
    namespace: default
current-context: kube-test
users:
- name: kube-test
  user: {{}}
preferences: {{}}
"
    )
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    // As Go's net package does for kube-apiserver: without it, a watch event
                    // written right after another waits for the client's delayed ACK (40 ms).
                    let _ = stream.set_nodelay(true);
                    let shared = shared.clone();
                    conns.spawn(async move {
                        let svc = service_fn(move |req| handler::handle(shared.clone(), req));
                        let _ = http1::Builder::new()
                            .timer(TokioTimer::new())
                            .serve_connection(TokioIo::new(stream), svc)
                            .await;
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}
