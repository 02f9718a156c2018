//! The allocator against the Kubernetes API test server (real HTTP, list and watch, an
//! unmodified kube::Client): VipPools and Services in, Service statuses, pool statuses and
//! Events out.

use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use testkit::kube_server::KubeServer;
use tokio::sync::watch;
use vipflow::ipam_task::{IpamOutputs, IpamSettings, run_with};
use vipflow::metrics::Metrics;

/// Generous: a hang guard, not a target.
const LIMIT: Duration = Duration::from_secs(20);

async fn server(pools: &str) -> KubeServer {
    let srv = KubeServer::start().await;
    srv.register_resource("vipflow.io/v1alpha1", "vippools", "VipPool", false);
    srv.enable_crd("vipflow.io/v1alpha1", "vippools");
    if !pools.is_empty() {
        srv.apply_yaml(pools);
    }
    srv
}

fn pool(name: &str, addresses: &[&str], extra: Value) -> String {
    let mut p = json!({
        "apiVersion": "vipflow.io/v1alpha1", "kind": "VipPool",
        "metadata": {"name": name},
        "spec": {"addresses": addresses},
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        p["spec"][k] = v.clone();
    }
    serde_json::to_string(&p).unwrap()
}

fn service(name: &str, annotations: Value, spec: Value) -> Value {
    let mut s = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "shop", "annotations": annotations,
                     "creationTimestamp": "2026-11-26T00:00:00Z"},
        "spec": {"type": "LoadBalancer", "selector": {"app": name},
                 "ports": [{"port": 80, "protocol": "TCP"}]},
    });
    for (k, v) in spec.as_object().into_iter().flatten() {
        s["spec"][k] = v.clone();
    }
    s
}

/// The addresses in a Service's status.
fn ips(srv: &KubeServer, name: &str) -> Vec<String> {
    srv.get("v1", "Service", "shop", name)
        .map(|s| {
            s["status"]["loadBalancer"]["ingress"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|i| i["ip"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Wait until every named Service has `n` addresses.
async fn allocated(srv: &KubeServer, names: &[&str], n: usize) {
    let ok = tokio::time::timeout(
        LIMIT,
        srv.wait_until(|s| names.iter().all(|name| ips(s, name).len() == n)),
    )
    .await;
    let now: BTreeMap<&str, Vec<String>> = names.iter().map(|n| (*n, ips(srv, n))).collect();
    assert!(ok.is_ok(), "not allocated in time: {now:?}");
}

/// Events about `service` with `reason`.
fn events(srv: &KubeServer, service: &str, reason: &str) -> Vec<Value> {
    srv.events()
        .into_iter()
        .filter(|e| {
            let regarding = if e["regarding"].is_object() {
                &e["regarding"]
            } else {
                &e["involvedObject"]
            };
            regarding["name"] == service && e["reason"] == reason
        })
        .collect()
}

async fn event(srv: &KubeServer, service: &str, reason: &str) -> Value {
    let ok = tokio::time::timeout(
        LIMIT,
        srv.wait_until(|s| !events(s, service, reason).is_empty()),
    )
    .await;
    assert!(
        ok.is_ok(),
        "no {reason} Event for {service}: {:#?}",
        srv.events()
    );
    events(srv, service, reason).remove(0)
}

/// The allocator as the elected agent runs it, with its own Event sink.
async fn allocator(
    srv: &KubeServer,
    leader: Option<watch::Receiver<bool>>,
) -> tokio::task::JoinHandle<()> {
    allocator_with(srv, leader, None).await
}

async fn allocator_with(
    srv: &KubeServer,
    leader: Option<watch::Receiver<bool>>,
    metrics: Option<Arc<Metrics>>,
) -> tokio::task::JoinHandle<()> {
    let client = srv.client().await;
    let sink = vipflow::event_sink::EventSink::start(
        client.clone(),
        vipflow::event_sink::SinkConfig {
            kind: vipflow::event_sink::SinkKind::Allocator,
            instance: "test".into(),
            per_second: 1000.0,
            burst: 1000,
        },
        None,
    );
    tokio::spawn(run_with(
        client,
        IpamSettings {
            retry_every: Duration::from_millis(100),
            pool_status_every: Duration::from_millis(100),
            ..Default::default()
        },
        leader,
        IpamOutputs {
            events: Some(sink),
            metrics,
            pools: None,
        },
    ))
}

#[tokio::test]
async fn auto_assign_requested_ip_requested_pool_and_sharing() {
    let srv = server(&format!(
        "{}\n---\n{}",
        pool("blue", &["10.0.0.0/29"], json!({})),
        pool("red", &["10.0.1.0/30"], json!({"autoAssign": false})),
    ))
    .await;
    srv.apply(service("auto", json!({}), json!({})));
    srv.apply(service(
        "asked",
        json!({"metallb.io/loadBalancerIPs": "10.0.0.5"}),
        json!({}),
    ));
    srv.apply(service(
        "legacy",
        json!({}),
        json!({"loadBalancerIP": "10.0.1.3"}),
    ));
    srv.apply(service(
        "in-red",
        json!({"service.antrea.io/external-ip-pool": "red"}),
        json!({}),
    ));
    srv.apply(service(
        "web",
        json!({"vipflow.io/allow-shared-ip": "k"}),
        json!({}),
    ));
    srv.apply(service(
        "dns",
        json!({"metallb.universe.tf/allow-shared-ip": "k"}),
        json!({"ports": [{"port": 53, "protocol": "UDP"}]}),
    ));
    srv.apply(service(
        "clash",
        json!({"vipflow.io/allow-shared-ip": "k"}),
        json!({}),
    ));
    let task = allocator(&srv, None).await;
    let all = ["auto", "asked", "legacy", "in-red", "web", "dns", "clash"];
    allocated(&srv, &all, 1).await;
    assert_eq!(ips(&srv, "asked"), ["10.0.0.5"]);
    assert_eq!(
        ips(&srv, "legacy"),
        ["10.0.1.3"],
        "a requested address in a pool without auto-assign"
    );
    assert_eq!(ips(&srv, "in-red"), ["10.0.1.0"]);
    assert!(ips(&srv, "auto")[0].starts_with("10.0.0."));
    // web and clash both serve TCP/80: never one address; dns (UDP/53) shares with whichever
    // of them was decided first (Services are decided in name order).
    assert_ne!(
        ips(&srv, "web"),
        ips(&srv, "clash"),
        "same key, same port: not shared"
    );
    assert_eq!(
        ips(&srv, "dns"),
        ips(&srv, "clash"),
        "same key, other ports: shared"
    );
    // Apart from the one shared address, no address is in two statuses.
    let mut seen = BTreeSet::new();
    for name in all.iter().filter(|n| **n != "dns") {
        assert!(seen.insert(ips(&srv, name)[0].clone()), "{name}: {seen:?}");
    }
    // The status says ipMode VIP, and carries vipflow's record.
    let s = srv.get("v1", "Service", "shop", "web").unwrap();
    assert_eq!(s["status"]["loadBalancer"]["ingress"][0]["ipMode"], "VIP");
    let cond = &s["status"]["conditions"][0];
    assert_eq!(cond["type"], "vipflow.io/Allocated");
    let record: Value = serde_json::from_str(cond["message"].as_str().unwrap()).unwrap();
    assert_eq!(record["sharingKey"], "k");
    let ev = event(&srv, "asked", "IPAllocated").await;
    assert!(
        ev["note"]
            .as_str()
            .unwrap_or_default()
            .contains("10.0.0.5 (pool blue)"),
        "{ev}"
    );
    // A requested address already taken is refused, and said.
    srv.apply(service(
        "late",
        json!({"vipflow.io/load-balancer-ips": "10.0.0.5"}),
        json!({}),
    ));
    let ev = event(&srv, "late", "RequestedIPInUse").await;
    assert_eq!(ev["type"], "Warning");
    assert!(ips(&srv, "late").is_empty());
    task.abort();
}

#[tokio::test]
async fn dual_stack_require_and_prefer() {
    let srv = server(&format!(
        "{}\n---\n{}",
        pool("v4", &["10.0.0.0/30"], json!({})),
        pool(
            "v6",
            &["fd00::10-fd00::1f"],
            json!({"serviceAllocation": {"namespaces": ["shop"]}})
        ),
    ))
    .await;
    srv.apply(service(
        "both",
        json!({}),
        json!({"ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv6", "IPv4"]}),
    ));
    srv.apply(service(
        "prefer",
        json!({}),
        json!({"ipFamilyPolicy": "PreferDualStack"}),
    ));
    let task = allocator(&srv, None).await;
    allocated(&srv, &["both", "prefer"], 2).await;
    assert_eq!(ips(&srv, "both"), ["fd00::10", "10.0.0.0"]);
    assert_eq!(ips(&srv, "prefer"), ["10.0.0.1", "fd00::11"]);
    // Without IPv6 left for it, Prefer gets one family and says why; Require gets nothing.
    let mut lone = service(
        "lone",
        json!({}),
        json!({"ipFamilyPolicy": "RequireDualStack"}),
    );
    lone["metadata"]["namespace"] = json!("other");
    srv.apply(lone);
    let mut half = service(
        "half",
        json!({}),
        json!({"ipFamilyPolicy": "PreferDualStack"}),
    );
    half["metadata"]["namespace"] = json!("other");
    srv.apply(half);
    let ok = tokio::time::timeout(
        LIMIT,
        srv.wait_until(|s| {
            s.get("v1", "Service", "other", "half").is_some_and(|h| {
                h["status"]["loadBalancer"]["ingress"]
                    .as_array()
                    .is_some_and(|a| a.len() == 1)
            })
        }),
    )
    .await;
    assert!(ok.is_ok(), "PreferDualStack falls back to one family");
    let ev = event(&srv, "half", "NoPool").await;
    assert_eq!(ev["type"], "Warning");
    event(&srv, "lone", "NoPool").await;
    let lone = srv.get("v1", "Service", "other", "lone").unwrap();
    assert!(lone["status"]["loadBalancer"]["ingress"].is_null());
    task.abort();
}

#[tokio::test]
async fn exhaustion_is_an_event_and_a_freed_address_is_allocated() {
    let srv = server(&pool("tiny", &["10.0.0.0/31"], json!({}))).await;
    for n in ["a", "b", "c"] {
        srv.apply(service(n, json!({}), json!({})));
    }
    let metrics = Arc::new(Metrics::new());
    let task = allocator_with(&srv, None, Some(metrics.clone())).await;
    allocated(&srv, &["a", "b"], 1).await;
    let ev = event(&srv, "c", "PoolExhausted").await;
    assert_eq!(ev["type"], "Warning");
    let freed = ips(&srv, "a");
    srv.delete("v1", "Service", "shop", "a");
    allocated(&srv, &["c"], 1).await;
    assert_eq!(ips(&srv, "c"), freed);
    // The pool's status follows.
    let ok = tokio::time::timeout(
        LIMIT,
        srv.wait_until(|s| {
            s.get("vipflow.io/v1alpha1", "VipPool", "", "tiny")
                .is_some_and(|p| {
                    p["status"]["assignedIPv4"] == 2 && p["status"]["availableIPv4"] == 0
                })
        }),
    )
    .await;
    assert!(
        ok.is_ok(),
        "{:?}",
        srv.get("vipflow.io/v1alpha1", "VipPool", "", "tiny")
    );
    // And the metrics (set with the pool status).
    let text = metrics.encode();
    for line in [
        r#"vipflow_pool_addresses{pool="tiny",family="IPv4",state="assigned"} 2"#,
        r#"vipflow_pool_addresses{pool="tiny",family="IPv4",state="available"} 0"#,
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
    task.abort();
}

#[tokio::test]
async fn a_restart_and_a_leader_change_mid_burst_keep_every_address() {
    let srv = server(&pool("p", &["10.0.0.0/24"], json!({}))).await;
    let names: Vec<String> = (0..40).map(|i| format!("s{i:02}")).collect();
    for n in &names[..20] {
        srv.apply(service(n, json!({}), json!({})));
    }
    let (lead_a, rx_a) = watch::channel(true);
    let a = allocator(&srv, Some(rx_a)).await;
    let first: Vec<&str> = names[..20].iter().map(String::as_str).collect();
    allocated(&srv, &first, 1).await;
    let before: BTreeMap<String, Vec<String>> = names[..20]
        .iter()
        .map(|n| (n.clone(), ips(&srv, n)))
        .collect();
    // A burst of new Services; leadership moves in the middle of it.
    for n in &names[20..] {
        srv.apply(service(n, json!({}), json!({})));
    }
    lead_a.send(false).unwrap();
    let (_lead_b, rx_b) = watch::channel(true);
    let b = allocator(&srv, Some(rx_b)).await;
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    allocated(&srv, &all, 1).await;
    for (n, was) in &before {
        assert_eq!(&ips(&srv, n), was, "{n} moved");
    }
    let distinct: BTreeSet<Vec<String>> = names.iter().map(|n| ips(&srv, n)).collect();
    assert_eq!(distinct.len(), names.len(), "an address in two statuses");
    // A restart: the new allocator writes no Service status at all.
    b.abort();
    a.abort();
    srv.clear_request_log();
    let c = allocator(&srv, None).await;
    tokio::time::timeout(
        LIMIT,
        srv.wait_for_request(|r| r.resource == "vippools/status"),
    )
    .await
    .expect("the restarted allocator runs");
    let rewrites: Vec<_> = srv
        .request_log()
        .into_iter()
        .filter(|r| r.resource == "services/status")
        .collect();
    assert!(rewrites.is_empty(), "{rewrites:?}");
    for n in &names {
        assert_eq!(ips(&srv, n).len(), 1);
    }
    c.abort();
}

#[tokio::test]
async fn a_pool_that_shrinks_or_goes_keeps_addresses_and_reports() {
    let srv = server(&pool("p", &["10.0.0.0/30"], json!({}))).await;
    srv.apply(service("a", json!({}), json!({})));
    let task = allocator(&srv, None).await;
    allocated(&srv, &["a"], 1).await;
    let kept = ips(&srv, "a");
    assert_eq!(kept, ["10.0.0.0"]);
    // Shrink the pool away from a's address, then delete it.
    srv.apply_yaml(&pool("p", &["10.0.0.2/31"], json!({})));
    let ev = tokio::time::timeout(
        LIMIT,
        srv.wait_until(|s| {
            events(s, "a", "IPAllocated").iter().any(|e| {
                e["note"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("in no pool now; kept")
            })
        }),
    )
    .await;
    assert!(ev.is_ok(), "{:#?}", srv.events());
    srv.delete("vipflow.io/v1alpha1", "VipPool", "", "p");
    srv.apply(service(
        "b",
        json!({"vipflow.io/load-balancer-ips": "10.0.0.0"}),
        json!({}),
    ));
    event(&srv, "b", "RequestedIPNotAllowed").await;
    assert_eq!(ips(&srv, "a"), kept, "never re-numbered");
    assert!(ips(&srv, "b").is_empty(), "never handed out twice");
    task.abort();
}

#[tokio::test]
async fn a_requested_pool_deleted_under_a_service_leaves_its_address_and_the_event_says_kept() {
    let pools = format!(
        "{}\n---\n{}",
        pool("a", &["10.0.0.0/30"], json!({})),
        pool("b", &["10.0.1.0/30"], json!({}))
    );
    let srv = server(&pools).await;
    srv.apply(service(
        "s",
        json!({"service.antrea.io/external-ip-pool": "b"}),
        json!({}),
    ));
    let task = allocator(&srv, None).await;
    allocated(&srv, &["s"], 1).await;
    assert_eq!(ips(&srv, "s"), ["10.0.1.0"], "from the pool it names");
    event(&srv, "s", "IPAllocated").await;
    srv.delete("vipflow.io/v1alpha1", "VipPool", "", "b");
    let kept = tokio::time::timeout(
        LIMIT,
        srv.wait_until(|s| {
            events(s, "s", "IPAllocated").iter().any(|e| {
                e["note"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("10.0.1.0 (in no pool now; kept)")
            })
        }),
    )
    .await;
    assert!(kept.is_ok(), "{:#?}", srv.events());
    // Settled: no Warning says it has no address, and the address stays.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let warnings: Vec<Value> = srv
        .events()
        .into_iter()
        .filter(|e| e["type"] == "Warning")
        .collect();
    assert!(warnings.is_empty(), "{warnings:#?}");
    assert_eq!(ips(&srv, "s"), ["10.0.1.0"]);
    task.abort();
}

#[tokio::test]
async fn a_pool_a_kube_ovn_subnet_could_hand_to_pods_gets_a_warning_event() {
    let srv = server(&pool("blue", &["10.16.200.0/28"], json!({}))).await;
    srv.enable_crd("kubeovn.io/v1", "subnets");
    srv.apply_yaml(
        "apiVersion: kubeovn.io/v1\nkind: Subnet\nmetadata: {name: ovn-default}\nspec: {cidrBlock: 10.16.0.0/16, excludeIps: [10.16.200.0..10.16.200.7]}\n",
    );
    let task = allocator(&srv, None).await;
    let on_pool = |s: &KubeServer| -> Vec<Value> {
        s.events()
            .into_iter()
            .filter(|e| {
                e["regarding"]["kind"] == "VipPool"
                    && e["regarding"]["name"] == "blue"
                    && e["reason"] == "PoolNotExcluded"
            })
            .collect()
    };
    let ok = tokio::time::timeout(LIMIT, srv.wait_until(|s| !on_pool(s).is_empty())).await;
    assert!(ok.is_ok(), "{:#?}", srv.events());
    let ev = on_pool(&srv).remove(0);
    assert_eq!(ev["type"], "Warning");
    let note = ev["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("pool `blue` has 10.16.200.8..10.16.200.15 inside cidrBlock 10.16.0.0/16"),
        "{note}"
    );
    task.abort();
}

#[tokio::test]
async fn a_service_that_stops_being_a_loadbalancer_gives_its_address_back_after_its_status_is_cleared()
 {
    let srv = server(&pool("one", &["10.0.0.7"], json!({}))).await;
    srv.apply(service("a", json!({}), json!({})));
    let task = allocator(&srv, None).await;
    allocated(&srv, &["a"], 1).await;
    assert_eq!(ips(&srv, "a"), ["10.0.0.7"]);
    // A second Service waits: the pool's one address is taken.
    srv.apply(service("b", json!({}), json!({})));
    event(&srv, "b", "PoolExhausted").await;
    // "a" becomes a ClusterIP Service: its status is cleared, then "b" gets the address.
    let mut a = srv.get("v1", "Service", "shop", "a").unwrap();
    a["spec"]["type"] = json!("ClusterIP");
    srv.apply(a);
    allocated(&srv, &["b"], 1).await;
    assert!(ips(&srv, "a").is_empty(), "{:?}", ips(&srv, "a"));
    assert_eq!(ips(&srv, "b"), ["10.0.0.7"]);
    task.abort();
}

/// MetalLB's `IPAddressPool`s, served as MetalLB's CRD serves them, are pools of the
/// allocator's: a Service keeps the address MetalLB gave it, a new one gets one from MetalLB's
/// pool (written with host bits set, as MetalLB's docs write it), `metallb.io/address-pool`
/// picks a pool without auto-assign; no MetalLB object is written to.
#[tokio::test]
async fn metallbs_pools_are_allocated_from_and_the_addresses_metallb_gave_are_kept() {
    let srv = server("").await;
    srv.register_resource(
        "metallb.io/v1beta1",
        "ipaddresspools",
        "IPAddressPool",
        true,
    );
    srv.enable_crd("metallb.io/v1beta1", "ipaddresspools");
    srv.apply_yaml(
        "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: first-pool, namespace: metallb-system}\nspec: {addresses: [10.0.2.3/29]}\n---\n\
         apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: quiet-pool, namespace: metallb-system}\nspec: {addresses: [10.0.3.0/30], autoAssign: false}\n",
    );
    let mut kept = service(
        "kept",
        json!({"metallb.io/ip-allocated-from-pool": "first-pool"}),
        json!({}),
    );
    kept["status"] = json!({"loadBalancer": {"ingress": [{"ip": "10.0.2.5", "ipMode": "VIP"}]}});
    srv.apply(kept);
    srv.apply(service("new", json!({}), json!({})));
    srv.apply(service(
        "asked",
        json!({"metallb.io/address-pool": "quiet-pool"}),
        json!({}),
    ));
    let pools_before = srv.list("metallb.io/v1beta1", "IPAddressPool");
    let task = allocator(&srv, None).await;
    allocated(&srv, &["kept", "new", "asked"], 1).await;
    assert_eq!(ips(&srv, "kept"), ["10.0.2.5"], "MetalLB's address kept");
    let new = ips(&srv, "new")[0].clone();
    assert!(
        new.starts_with("10.0.2.") && new != "10.0.2.5",
        "new got {new}"
    );
    assert!(
        ips(&srv, "asked")[0].starts_with("10.0.3."),
        "{:?}",
        ips(&srv, "asked")
    );
    // The allocator has written pool statuses by now (every 100 ms): none to MetalLB's.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        srv.list("metallb.io/v1beta1", "IPAddressPool"),
        pools_before
    );
    task.abort();
}
