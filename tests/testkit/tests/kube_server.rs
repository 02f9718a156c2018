//! The Kubernetes API test server, driven by an unmodified `kube::Client`.
//!
//! Every test has its own server on an ephemeral port. Timeouts are hang guards only.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use testkit::kube_server::KubeServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const GUARD: Duration = Duration::from_secs(30);

async fn guard<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(GUARD, f)
        .await
        .unwrap_or_else(|_| panic!("hang guard: {what}"))
}

/// A Service as `kubectl get svc -o yaml` prints it.
fn service_yaml(name: &str, ip: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Service
metadata:
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: |
      {{"apiVersion":"v1","kind":"Service","metadata":{{"name":"{name}","namespace":"default"}}}}
  creationTimestamp: "2024-05-01T10:00:00Z"
  labels:
    app: {name}
  name: {name}
  namespace: default
  resourceVersion: "123456"
  uid: 0b7f6c51-7d0a-4d7e-9a55-{name:0>12}
spec:
  clusterIP: 10.96.0.10
  clusterIPs:
  - 10.96.0.10
  externalIPs:
  - {ip}
  internalTrafficPolicy: Cluster
  ipFamilies:
  - IPv4
  ipFamilyPolicy: SingleStack
  ports:
  - name: http
    port: 80
    protocol: TCP
    targetPort: 8080
  selector:
    app: {name}
  sessionAffinity: None
  type: ClusterIP
status:
  loadBalancer: {{}}
"#
    )
}

fn svc(name: &str) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {"ports": [{"port": 80, "protocol": "TCP"}]}
    }))
    .expect("service")
}

fn api_status(err: kube::Error) -> (u16, String) {
    match err {
        kube::Error::Api(s) => (s.code, s.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn crud_with_typed_api_and_kubectl_shaped_fixtures() {
    let srv = KubeServer::start().await;
    let stored = srv.apply_yaml(&service_yaml("web", "192.0.2.10"));
    assert_eq!(stored.len(), 1);
    // The fixture's uid and creationTimestamp are kept; its resourceVersion is not.
    assert_eq!(
        stored[0]["metadata"]["creationTimestamp"],
        "2024-05-01T10:00:00Z"
    );
    assert_ne!(stored[0]["metadata"]["resourceVersion"], "123456");

    let client = srv.client().await;
    let all: Api<Service> = Api::all(client.clone());
    let list = all.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].name_any(), "web");
    assert_eq!(
        list.metadata.resource_version,
        Some(srv.resource_version().to_string())
    );
    let web = &list.items[0];
    assert_eq!(
        web.spec.as_ref().unwrap().external_ips.as_ref().unwrap(),
        &["192.0.2.10"]
    );

    let api: Api<Service> = Api::default_namespaced(client.clone());
    let created = api
        .create(&PostParams::default(), &svc("db"))
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    let (code, reason) = api_status(
        api.create(&PostParams::default(), &svc("db"))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"));

    let mut changed = created.clone();
    changed.spec.as_mut().unwrap().external_ips = Some(vec!["192.0.2.20".into()]);
    let replaced = api
        .replace("db", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_ne!(replaced.resource_version(), created.resource_version());
    assert_eq!(replaced.metadata.uid, created.metadata.uid);
    // Replacing with the stale object is a Conflict.
    let (code, reason) = api_status(
        api.replace("db", &PostParams::default(), &changed)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    // A replace that changes nothing keeps the resourceVersion.
    let same = api
        .replace("db", &PostParams::default(), &replaced)
        .await
        .unwrap();
    assert_eq!(same.resource_version(), replaced.resource_version());

    let got = api.get("db").await.unwrap();
    assert_eq!(got.spec.unwrap().external_ips.unwrap(), ["192.0.2.20"]);
    api.delete("db", &DeleteParams::default()).await.unwrap();
    let (code, reason) = api_status(api.get("db").await.unwrap_err());
    assert_eq!((code, reason.as_str()), (404, "NotFound"));
    assert!(srv.get("v1", "Service", "default", "db").is_none());
    let (code, _) = api_status(
        api.delete("db", &DeleteParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 404);
}

#[tokio::test]
async fn pagination_and_selectors() {
    let srv = KubeServer::start().await;
    for i in 0..7 {
        srv.apply(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": format!("s{i}"), "namespace": if i % 2 == 0 { "a" } else { "b" },
                         "labels": {"tier": if i < 3 { "front" } else { "back" }}},
            "spec": {}
        }));
    }
    let client = srv.client().await;
    let all: Api<Service> = Api::all(client.clone());
    let mut names = Vec::new();
    let mut lp = ListParams::default().limit(3);
    let mut pages = 0;
    let mut rvs = BTreeSet::new();
    loop {
        let page = all.list(&lp).await.unwrap();
        pages += 1;
        rvs.insert(page.metadata.resource_version.clone());
        names.extend(page.items.iter().map(|s| s.name_any()));
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(
        rvs.len(),
        1,
        "every page reports the first page's resourceVersion"
    );
    assert_eq!(names, ["s0", "s2", "s4", "s6", "s1", "s3", "s5"]);

    let ns_a: Api<Service> = Api::namespaced(client.clone(), "a");
    let front = ns_a
        .list(&ListParams::default().labels("tier=front"))
        .await
        .unwrap();
    assert_eq!(
        front.items.iter().map(|s| s.name_any()).collect::<Vec<_>>(),
        ["s0", "s2"]
    );
    let not_front = all
        .list(&ListParams::default().labels("tier!=front,tier"))
        .await
        .unwrap();
    assert_eq!(not_front.items.len(), 4);
    let by_name = all
        .list(&ListParams::default().fields("metadata.name=s5"))
        .await
        .unwrap();
    assert_eq!(by_name.items.len(), 1);
    assert_eq!(by_name.items[0].namespace().as_deref(), Some("b"));
    let by_ns = all
        .list(
            &ListParams::default()
                .fields("metadata.namespace=b")
                .labels("tier in (back)"),
        )
        .await
        .unwrap();
    assert_eq!(by_ns.items.len(), 2);

    // A continue token older than a compaction is 410 Expired, as the apiserver answers.
    let first = all.list(&ListParams::default().limit(2)).await.unwrap();
    srv.apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "new", "namespace": "a"}}));
    srv.compact();
    let token = first.metadata.continue_.unwrap();
    let (code, reason) = api_status(
        all.list(&ListParams::default().limit(2).continue_token(&token))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (410, "Expired"));
}

type Events = tokio::sync::mpsc::UnboundedReceiver<Result<Event<Service>, watcher::Error>>;

/// Drives a watcher in its own task, as an agent does: a watcher makes progress (re-watches,
/// relists) only while it is polled.
fn spawn_watcher(api: Api<Service>, config: watcher::Config) -> Events {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = watcher::watcher(api, config).boxed();
        while let Some(ev) = stream.next().await {
            if tx.send(ev).is_err() {
                return;
            }
        }
    });
    rx
}

/// Takes watcher events until `stop` returns true for one; returns them all (errors as text).
async fn collect_until(
    rx: &mut Events,
    mut stop: impl FnMut(&Event<Service>) -> bool,
) -> Vec<String> {
    let mut seen = Vec::new();
    guard("watcher events", async {
        loop {
            match rx.recv().await.expect("watcher stream ended") {
                Ok(ev) => {
                    seen.push(describe(&ev));
                    if stop(&ev) {
                        return;
                    }
                }
                Err(e) => seen.push(format!("error: {e}")),
            }
        }
    })
    .await;
    seen
}

fn describe(ev: &Event<Service>) -> String {
    match ev {
        Event::Init => "init".into(),
        Event::InitApply(s) => format!("init-apply {}", s.name_any()),
        Event::InitDone => "init-done".into(),
        Event::Apply(s) => format!("apply {}", s.name_any()),
        Event::Delete(s) => format!("delete {}", s.name_any()),
    }
}

#[tokio::test]
async fn watcher_sees_changes_and_uses_bookmarks() {
    let srv = KubeServer::start().await;
    srv.apply_yaml(&format!(
        "{}---\n{}",
        service_yaml("a", "192.0.2.1"),
        service_yaml("b", "192.0.2.2")
    ));
    let rv_at_list = srv.resource_version().to_string();
    let api: Api<Service> = Api::all(srv.client().await);
    let mut stream = spawn_watcher(api, watcher::Config::default());
    let seen = collect_until(&mut stream, |e| matches!(e, Event::InitDone)).await;
    assert_eq!(seen, ["init", "init-apply a", "init-apply b", "init-done"]);

    srv.apply(json!({"apiVersion": "v1", "kind": "Service",
                     "metadata": {"name": "a", "namespace": "default", "labels": {"x": "y"}}}));
    srv.delete("v1", "Service", "default", "b");
    srv.apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "c", "namespace": "kube-system"}}));
    let seen = collect_until(
        &mut stream,
        |e| matches!(e, Event::Apply(s) if s.name_any() == "c"),
    )
    .await;
    assert_eq!(seen, ["apply a", "delete b", "apply c"]);

    let log = srv.request_log();
    let list = log
        .iter()
        .find(|r| r.is_list() && r.resource == "services")
        .expect("a list");
    assert_eq!(list.param("limit").as_deref(), Some("500"));
    let watch = log.iter().find(|r| r.is_watch()).expect("a watch");
    assert_eq!(watch.param("allowWatchBookmarks").as_deref(), Some("true"));
    assert_eq!(watch.param("resourceVersion"), Some(rv_at_list));
}

#[tokio::test]
async fn raw_watch_bookmarks_history_and_timeout() {
    let srv = KubeServer::start().await;
    srv.set_bookmark_interval(Duration::from_millis(50));
    srv.apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "namespace": "default"}}));
    let start_rv = srv.resource_version();
    srv.apply(json!({"apiVersion": "v1", "kind": "Service",
                     "metadata": {"name": "a", "namespace": "default", "labels": {"app": "x"}}}));
    srv.delete("v1", "Service", "default", "a");
    let api: Api<Service> = Api::namespaced(srv.client().await, "default");

    // History after start_rv is replayed, then bookmarks carry the latest resourceVersion.
    let wp = WatchParams::default().timeout(1);
    let events: Vec<WatchEvent<Service>> = guard("watch ends after timeoutSeconds", async {
        let stream = api.watch(&wp, &start_rv.to_string()).await.unwrap();
        stream.try_collect().await.unwrap()
    })
    .await;
    let kinds: Vec<String> = events
        .iter()
        .map(|e| match e {
            WatchEvent::Added(s) => format!("ADDED {}", s.name_any()),
            WatchEvent::Modified(s) => format!("MODIFIED {}", s.name_any()),
            WatchEvent::Deleted(s) => format!("DELETED {}", s.name_any()),
            WatchEvent::Bookmark(b) => format!("BOOKMARK {}", b.metadata.resource_version),
            WatchEvent::Error(e) => format!("ERROR {}", e.code),
        })
        .collect();
    assert_eq!(kinds[..2], ["MODIFIED a", "DELETED a"]);
    assert!(
        kinds.len() > 2,
        "at least one bookmark within timeoutSeconds=1: {kinds:?}"
    );
    assert!(
        kinds[2..]
            .iter()
            .all(|k| *k == format!("BOOKMARK {}", srv.resource_version()))
    );

    // A label selector turns a modification that stops matching into DELETED.
    srv.apply(json!({"apiVersion": "v1", "kind": "Service",
                     "metadata": {"name": "b", "namespace": "default", "labels": {"app": "x"}}}));
    let from = srv.resource_version();
    srv.apply(json!({"apiVersion": "v1", "kind": "Service",
                     "metadata": {"name": "b", "namespace": "default", "labels": {"app": "y"}}}));
    srv.apply(json!({"apiVersion": "v1", "kind": "Service",
                     "metadata": {"name": "b", "namespace": "default", "labels": {"app": "x"}}}));
    let wp = WatchParams::default().disable_bookmarks().labels("app=x");
    let mut stream = api.watch(&wp, &from.to_string()).await.unwrap().boxed();
    let first = guard("selector watch", stream.try_next())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(first, WatchEvent::Deleted(ref s) if s.name_any() == "b"),
        "{first:?}"
    );
    let second = guard("selector watch", stream.try_next())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(second, WatchEvent::Added(ref s) if s.name_any() == "b"),
        "{second:?}"
    );

    // Watching from "0" starts with synthetic ADDED events for what exists.
    let mut stream = api
        .watch(&WatchParams::default().disable_bookmarks(), "0")
        .await
        .unwrap()
        .boxed();
    let first = guard("watch from 0", stream.try_next())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(first, WatchEvent::Added(ref s) if s.name_any() == "b"),
        "{first:?}"
    );
}

#[tokio::test]
async fn watcher_relists_after_410_and_converges() {
    let srv = KubeServer::start().await;
    for n in ["a", "b", "c"] {
        srv.apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": n, "namespace": "default"}}));
    }
    let stale_rv = srv.resource_version();
    let api: Api<Service> = Api::all(srv.client().await);
    let mut stream = spawn_watcher(api.clone(), watcher::Config::default());
    collect_until(&mut stream, |e| matches!(e, Event::InitDone)).await;
    guard("watch open", srv.wait_for_request(|r| r.is_watch())).await;

    srv.clear_request_log();
    srv.delete("v1", "Service", "default", "b");
    srv.apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "d", "namespace": "default"}}));
    srv.compact();
    srv.expire_watches();

    // After the 410 the watcher starts over: Init, the current objects, InitDone.
    let mut current = BTreeSet::new();
    let mut saw_410 = false;
    let mut relisted = false;
    guard("relist", async {
        loop {
            match stream.recv().await.expect("stream") {
                Err(watcher::Error::WatchError(s)) if s.code == 410 => {
                    assert_eq!(s.reason, "Expired");
                    assert!(
                        s.message.starts_with("too old resource version: "),
                        "{}",
                        s.message
                    );
                    saw_410 = true;
                }
                Err(e) => panic!("unexpected watcher error {e}"),
                Ok(Event::Init) => {
                    relisted = true;
                    current.clear();
                }
                Ok(Event::InitApply(s)) => {
                    current.insert(s.name_any());
                }
                Ok(Event::InitDone) if relisted => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(saw_410);
    assert_eq!(
        current,
        BTreeSet::from(["a".to_string(), "c".into(), "d".into()])
    );
    let log = srv.request_log();
    let relist = log
        .iter()
        .position(|r| r.is_list())
        .expect("a relist after the 410");
    assert!(
        log[..relist].iter().all(|r| !r.is_watch()),
        "no re-watch before the relist: {log:?}"
    );
    let rewatch = guard("re-watch", srv.wait_for_request(|r| r.is_watch())).await;
    assert_eq!(
        rewatch.param("resourceVersion"),
        Some(srv.resource_version().to_string())
    );

    // A watch from a compacted resourceVersion gets the ERROR event directly.
    let mut raw = api
        .watch(&WatchParams::default(), &stale_rv.to_string())
        .await
        .unwrap()
        .boxed();
    match guard("stale watch", raw.try_next()).await.unwrap().unwrap() {
        WatchEvent::Error(s) => {
            assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
            assert_eq!(
                s.message,
                format!(
                    "too old resource version: {stale_rv} ({})",
                    srv.resource_version()
                )
            );
        }
        other => panic!("expected 410, got {other:?}"),
    }
    assert!(
        guard("stream ends", raw.try_next())
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn watcher_resumes_without_relist_when_watches_close() {
    let srv = KubeServer::start().await;
    srv.apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "namespace": "default"}}));
    let api: Api<Service> = Api::all(srv.client().await);
    let mut stream = spawn_watcher(api, watcher::Config::default());
    collect_until(&mut stream, |e| matches!(e, Event::InitDone)).await;
    guard("watch open", srv.wait_until(|s| s.open_watches() == 1)).await;
    srv.clear_request_log();
    srv.close_watches();
    srv.apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "b", "namespace": "default"}}));
    let seen = collect_until(&mut stream, |e| matches!(e, Event::Apply(_))).await;
    assert_eq!(seen, ["apply b"]);
    let log = srv.request_log();
    assert!(log.iter().all(|r| !r.is_list()), "no relist: {log:?}");
    assert!(
        log.iter()
            .any(|r| r.is_watch() && r.param("resourceVersion").as_deref() == Some("2"))
    );
}

#[tokio::test]
async fn watcher_resumes_from_the_last_bookmark() {
    let srv = KubeServer::start().await;
    srv.set_bookmark_interval(Duration::from_millis(20));
    srv.apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "namespace": "default"}}));
    let api: Api<Service> = Api::all(srv.client().await);
    let mut stream = spawn_watcher(api, watcher::Config::default());
    collect_until(&mut stream, |e| matches!(e, Event::InitDone)).await;
    // Other resources move the resourceVersion on; only a bookmark tells the Service watch.
    let node = srv.apply(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}));
    let node_rv: u64 = node["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    guard(
        "bookmark",
        srv.wait_until(|s| s.last_bookmark_rv() >= node_rv),
    )
    .await;
    srv.clear_request_log();
    srv.close_watches();
    let rewatch = guard("re-watch", srv.wait_for_request(|r| r.is_watch())).await;
    assert_eq!(rewatch.param("resourceVersion"), Some(node_rv.to_string()));
    assert!(srv.request_log().iter().all(|r| !r.is_list()));
}

#[tokio::test]
async fn streaming_list_watcher() {
    let srv = KubeServer::start().await;
    srv.apply_yaml(&service_yaml("a", "192.0.2.1"));
    let api: Api<Service> = Api::all(srv.client().await);
    let mut stream = spawn_watcher(api, watcher::Config::default().streaming_lists());
    let seen = collect_until(&mut stream, |e| matches!(e, Event::InitDone)).await;
    assert_eq!(seen, ["init", "init-apply a", "init-done"]);
    srv.apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "b", "namespace": "default"}}));
    let seen = collect_until(&mut stream, |e| matches!(e, Event::Apply(_))).await;
    assert_eq!(seen, ["apply b"]);
    let log = srv.request_log();
    assert!(
        log.iter()
            .any(|r| r.is_watch() && r.param("sendInitialEvents").as_deref() == Some("true"))
    );
    assert!(log.iter().all(|r| !r.is_list()));
}

fn lease(holder: &str) -> Lease {
    serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "vipflow-leader", "namespace": "kube-system"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                 "acquireTime": "2024-05-01T10:00:00.000000Z", "renewTime": "2024-05-01T10:00:00.000000Z",
                 "leaseTransitions": 0}
    }))
    .expect("lease")
}

#[tokio::test]
async fn lease_updates_with_resource_version_conflicts() {
    let srv = KubeServer::start().await;
    let api: Api<Lease> = Api::namespaced(srv.client().await, "kube-system");
    let (code, _) = api_status(api.get("vipflow-leader").await.unwrap_err());
    assert_eq!(code, 404);
    let created = api
        .create(&PostParams::default(), &lease("node-a"))
        .await
        .unwrap();
    let (code, reason) = api_status(
        api.create(&PostParams::default(), &lease("node-b"))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"));

    // node-a renews with the current resourceVersion: accepted.
    let mut renew = created.clone();
    renew.spec.as_mut().unwrap().renew_time =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            "2024-05-01T10:00:05Z".parse().unwrap(),
        ));
    let renewed = api
        .replace("vipflow-leader", &PostParams::default(), &renew)
        .await
        .unwrap();
    // node-b tries to take over from the stale copy it read before: 409 Conflict.
    let mut takeover = created.clone();
    takeover.spec.as_mut().unwrap().holder_identity = Some("node-b".into());
    let err = api
        .replace("vipflow-leader", &PostParams::default(), &takeover)
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected API error")
    };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(
        status
            .message
            .contains("leases.coordination.k8s.io \"vipflow-leader\""),
        "{}",
        status.message
    );
    assert!(status.message.contains("the object has been modified"));
    // A merge patch with a stale resourceVersion precondition conflicts too; a fresh one works.
    let stale = json!({"metadata": {"resourceVersion": created.resource_version()},
                       "spec": {"holderIdentity": "node-b"}});
    let (code, _) = api_status(
        api.patch(
            "vipflow-leader",
            &PatchParams::default(),
            &Patch::Merge(&stale),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(code, 409);
    let fresh = json!({"metadata": {"resourceVersion": renewed.resource_version()},
                       "spec": {"holderIdentity": "node-b", "leaseTransitions": 1}});
    let taken = api
        .patch(
            "vipflow-leader",
            &PatchParams::default(),
            &Patch::Merge(&fresh),
        )
        .await
        .unwrap();
    assert_eq!(
        taken.spec.unwrap().holder_identity.as_deref(),
        Some("node-b")
    );
    let leases = srv.leases();
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0]["spec"]["holderIdentity"], "node-b");
    assert_eq!(leases[0]["spec"]["leaseTransitions"], 1);

    // Server-side apply (treated as a merge) needs a field manager and can create.
    let other = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": "other"}, "spec": {"holderIdentity": "x"}});
    let (code, _) = api_status(
        api.patch("other", &PatchParams::default(), &Patch::Apply(&other))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    api.patch(
        "other",
        &PatchParams::apply("vipflow"),
        &Patch::Apply(&other),
    )
    .await
    .unwrap();
    assert_eq!(srv.leases().len(), 2);
}

#[tokio::test]
async fn recorder_events_are_recorded() {
    let srv = KubeServer::start().await;
    let stored = srv.apply_yaml(&service_yaml("web", "192.0.2.10"));
    let client = srv.client().await;
    let web: Service = serde_json::from_value(stored[0].clone()).unwrap();
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: "vipflow".into(),
            instance: Some("node-a".into()),
        },
    );
    let ev = KubeEvent {
        type_: EventType::Warning,
        reason: "VipConflict".into(),
        note: Some("192.0.2.10:80/TCP is also claimed by default/other".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    let reference = web.object_ref(&());
    recorder.publish(&ev, &reference).await.unwrap();
    recorder.publish(&ev, &reference).await.unwrap(); // a repeat: PATCHed as a series
    let events = srv.events();
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(e["apiVersion"], "events.k8s.io/v1");
    assert_eq!(e["reason"], "VipConflict");
    assert_eq!(e["type"], "Warning");
    assert_eq!(e["reportingController"], "vipflow");
    assert_eq!(e["regarding"]["name"], "web");
    assert_eq!(e["regarding"]["kind"], "Service");
    assert_eq!(e["series"]["count"], 2);
    let log = srv.request_log();
    let writes: Vec<String> = log
        .iter()
        .filter(|r| r.resource == "events")
        .map(|r| format!("{} {} {}", r.method, r.path, r.status))
        .collect();
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert!(writes[0].starts_with("POST /apis/events.k8s.io/v1/namespaces/default/events 201"));
    assert!(writes[1].starts_with("PATCH /apis/events.k8s.io/v1/namespaces/default/events/web."));
    assert!(writes[1].ends_with(" 200"));
}

#[tokio::test]
async fn subnet_crd_is_absent_until_enabled() {
    let srv = KubeServer::start().await;
    srv.apply_yaml(
        r#"apiVersion: kubeovn.io/v1
kind: Subnet
metadata:
  name: ovn-default
spec:
  cidrBlock: 10.16.0.0/16,fd00:10:16::/64
  excludeIps:
  - 10.16.0.1
  - 10.16.0.100..10.16.0.120
  protocol: Dual
status:
  v4availableIPs: 65000
"#,
    );
    let client = srv.client().await;
    let gvk = GroupVersionKind::gvk("kubeovn.io", "v1", "Subnet");
    assert!(kube::discovery::pinned_kind(&client, &gvk).await.is_err());
    let ar = ApiResource::from_gvk_with_plural(&gvk, "subnets");
    let subnets: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let (code, reason) = api_status(subnets.list(&ListParams::default()).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (404, "NotFound"));
    let groups = client.list_api_groups().await.unwrap();
    assert!(groups.groups.iter().all(|g| g.name != "kubeovn.io"));

    srv.enable_crd("kubeovn.io/v1", "subnets");
    let (found, caps) = kube::discovery::pinned_kind(&client, &gvk).await.unwrap();
    assert_eq!(found.plural, "subnets");
    assert_eq!(caps.scope, kube::discovery::Scope::Cluster);
    let list = subnets.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let s = &list.items[0];
    assert_eq!(
        s.types.as_ref().unwrap().kind,
        "Subnet",
        "custom resource items keep their kind"
    );
    assert_eq!(s.data["spec"]["excludeIps"][1], "10.16.0.100..10.16.0.120");
    // Full discovery parses every document the server serves.
    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    assert!(discovery.has_group("kubeovn.io"));
    assert!(discovery.has_group("coordination.k8s.io"));
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.minor, "33");

    // A JSON patch with a test guard (as a careful excludeIps writer would send).
    let patch = json!([
        {"op": "test", "path": "/spec/excludeIps", "value": ["10.16.0.1", "10.16.0.100..10.16.0.120"]},
        {"op": "add", "path": "/spec/excludeIps/-", "value": "10.16.0.50"}
    ]);
    let patched = subnets
        .patch(
            "ovn-default",
            &PatchParams::default(),
            &Patch::<Value>::Json(serde_json::from_value(patch.clone()).unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(patched.data["spec"]["excludeIps"][2], "10.16.0.50");
    assert_eq!(patched.data["status"]["v4availableIPs"], 65000);
    let (code, _) = api_status(
        subnets
            .patch(
                "ovn-default",
                &PatchParams::default(),
                &Patch::<Value>::Json(serde_json::from_value(patch).unwrap()),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422, "the test op fails the second time");
}

#[tokio::test]
async fn status_subresource() {
    let srv = KubeServer::start().await;
    let api: Api<Service> = Api::default_namespaced(srv.client().await);
    let mut s = svc("lb");
    s.status =
        serde_json::from_value(json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}))
            .unwrap();
    let created = api.create(&PostParams::default(), &s).await.unwrap();
    assert!(created.status.as_ref().is_none_or(|st| {
        st.load_balancer
            .as_ref()
            .and_then(|l| l.ingress.as_ref())
            .is_none()
    }));
    let status =
        json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7", "ipMode": "VIP"}]}}});
    let patched = api
        .patch_status("lb", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let ingress = patched
        .status
        .unwrap()
        .load_balancer
        .unwrap()
        .ingress
        .unwrap();
    assert_eq!(ingress[0].ip.as_deref(), Some("203.0.113.7"));
    // A spec patch on the main resource keeps the status.
    let spec = json!({"spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {}}});
    let after = api
        .patch("lb", &PatchParams::default(), &Patch::Merge(&spec))
        .await
        .unwrap();
    assert_eq!(
        after
            .status
            .unwrap()
            .load_balancer
            .unwrap()
            .ingress
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        srv.get("v1", "Service", "default", "lb").unwrap()["spec"]["type"],
        "LoadBalancer"
    );
}

/// Sends one raw HTTP/1.1 request; returns the status code and the body parsed as JSON.
async fn raw(
    srv: &KubeServer,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> (u16, Value) {
    let mut conn = tokio::net::TcpStream::connect(srv.addr()).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    guard("raw response", conn.read_to_end(&mut out))
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out);
    let code: u16 = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (code, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[tokio::test]
async fn bad_requests_get_status_errors() {
    let srv = KubeServer::start().await;
    srv.apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "namespace": "default"}}));
    let svcs = "/api/v1/namespaces/default/services";
    let json = "application/json";
    let cases: Vec<(&str, String, &str, &str, u16, &str)> = vec![
        ("POST", svcs.into(), json, "{not json", 400, "BadRequest"),
        ("POST", svcs.into(), json, "[1,2]", 400, "BadRequest"),
        (
            "POST",
            svcs.into(),
            json,
            r#"{"metadata": "x"}"#,
            400,
            "BadRequest",
        ),
        (
            "POST",
            svcs.into(),
            json,
            r#"{"metadata": {}}"#,
            422,
            "Invalid",
        ),
        (
            "POST",
            svcs.into(),
            json,
            r#"{"metadata": {"name": "Bad_Name"}}"#,
            422,
            "Invalid",
        ),
        (
            "POST",
            svcs.into(),
            json,
            r#"{"kind": "Node", "metadata": {"name": "x"}}"#,
            400,
            "BadRequest",
        ),
        (
            "POST",
            svcs.into(),
            json,
            r#"{"metadata": {"name": "x", "namespace": "other"}}"#,
            400,
            "BadRequest",
        ),
        (
            "POST",
            "/api/v1/services".into(),
            json,
            r#"{"metadata": {"name": "x"}}"#,
            405,
            "MethodNotAllowed",
        ),
        (
            "PUT",
            format!("{svcs}/a"),
            json,
            r#"{"metadata": {"name": "b"}}"#,
            400,
            "BadRequest",
        ),
        (
            "PUT",
            format!("{svcs}/zz"),
            json,
            r#"{"metadata": {"name": "zz"}}"#,
            404,
            "NotFound",
        ),
        (
            "PATCH",
            format!("{svcs}/a"),
            "text/plain",
            "{}",
            415,
            "UnsupportedMediaType",
        ),
        (
            "PATCH",
            format!("{svcs}/a"),
            "application/merge-patch+json",
            "\"x\"",
            400,
            "BadRequest",
        ),
        (
            "PATCH",
            format!("{svcs}/a"),
            "application/json-patch+json",
            r#"{"op":1}"#,
            422,
            "Invalid",
        ),
        (
            "PATCH",
            format!("{svcs}/a"),
            "application/json-patch+json",
            r#"[{"op":"remove","path":"/nope"}]"#,
            422,
            "Invalid",
        ),
        (
            "PATCH",
            format!("{svcs}/a"),
            "application/apply-patch+yaml",
            ": : :",
            400,
            "BadRequest",
        ),
        (
            "DELETE",
            format!("{svcs}/a"),
            json,
            "{oops",
            400,
            "BadRequest",
        ),
        (
            "DELETE",
            format!("{svcs}/a"),
            json,
            r#"{"preconditions": {"resourceVersion": "1"}}"#,
            409,
            "Conflict",
        ),
        (
            "GET",
            format!("{svcs}?labelSelector=a%20b%3Dc"),
            json,
            "",
            400,
            "BadRequest",
        ),
        (
            "GET",
            format!("{svcs}?fieldSelector=metadata.name"),
            json,
            "",
            400,
            "BadRequest",
        ),
        (
            "GET",
            format!("{svcs}?limit=-1"),
            json,
            "",
            400,
            "BadRequest",
        ),
        (
            "GET",
            format!("{svcs}?limit=1&continue=garbage"),
            json,
            "",
            400,
            "BadRequest",
        ),
        (
            "GET",
            format!("{svcs}?watch=true&resourceVersion=abc"),
            json,
            "",
            400,
            "BadRequest",
        ),
        (
            "GET",
            format!("{svcs}?watch=1&timeoutSeconds=x"),
            json,
            "",
            400,
            "BadRequest",
        ),
        (
            "GET",
            format!("{svcs}?watch=1&sendInitialEvents=true"),
            json,
            "",
            422,
            "Invalid",
        ),
        (
            "GET",
            "/apis/kubeovn.io/v1/subnets".into(),
            json,
            "",
            404,
            "NotFound",
        ),
        ("GET", "/api/v2/pods".into(), json, "", 404, "NotFound"),
        ("GET", "/nope/%ff/..".into(), json, "", 404, "NotFound"),
        (
            "GET",
            format!("{svcs}/a/status/extra"),
            json,
            "",
            404,
            "NotFound",
        ),
        (
            "GET",
            "/api/v1/namespaces/default/nodes".into(),
            json,
            "",
            404,
            "NotFound",
        ),
        ("GET", "/api/v1/leases/x".into(), json, "", 404, "NotFound"),
        ("POST", "/version".into(), json, "", 405, "MethodNotAllowed"),
        (
            "DELETE",
            format!("{svcs}/a/status"),
            json,
            "",
            405,
            "MethodNotAllowed",
        ),
    ];
    for (method, path, ct, body, code, reason) in cases {
        let (got, status) = raw(&srv, method, &path, ct, body).await;
        assert_eq!(got, code, "{method} {path} {body}: {status}");
        assert_eq!(status["kind"], "Status", "{method} {path}");
        assert_eq!(status["code"], code, "{method} {path}");
        assert_eq!(status["reason"], reason, "{method} {path}: {status}");
    }
    // The server still works, and nothing changed the Service.
    let (code, obj) = raw(&srv, "GET", &format!("{svcs}/a"), json, "").await;
    assert_eq!(code, 200);
    assert_eq!(obj["metadata"]["resourceVersion"], "2");
    assert_eq!(srv.request_log().len(), 33);
}
