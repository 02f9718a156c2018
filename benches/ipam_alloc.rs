//! Allocating LoadBalancer addresses for many Services against the Kubernetes API test server
//! (real HTTP, an unmodified kube::Client), beside the floor: the API round trip of one status
//! write, as any allocator has to make it per Service.
//!
//! Run: `cargo bench --bench ipam_alloc` (optionally `-- SERVICES`, default 10000).
//!
//! Printed:
//! - the floor: one status write (the same server-side apply on `services/status`), sent one
//!   after the other from a kube::Client, median and p99;
//! - the allocator end to end: from its start (fresh lists) until every Service has its address
//!   in its status, as allocations per second and time per allocation, and its ratio to the
//!   floor;
//! - the allocator's own CPU per allocation: reading each Service, reserving, deciding and
//!   making the status record, in memory (no I/O), on one core.
//!
//! The test server runs in this process and shares the machine's cores with the allocator.

mod support;
use support::{median, ms, percentile};

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use testkit::kube_server::KubeServer;
use vipflow::ipam::controller::{Allocations, SeenService};
use vipflow::ipam::pool::PoolSpec;
use vipflow::ipam::service;
use vipflow::ipam_task::{FIELD_MANAGER, IpamSettings, run};
use vipflow::model::ServiceKey;

fn service_json(ns: &str, i: usize) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": format!("svc-{i:05}"), "namespace": ns,
                     "creationTimestamp": "2026-11-26T00:00:00Z"},
        "spec": {"type": "LoadBalancer", "selector": {"app": format!("a{i}")},
                 "ports": [{"port": 80, "protocol": "TCP"}, {"port": 443, "protocol": "TCP"}]},
    })
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let srv = rt.block_on(KubeServer::start());
    srv.register_resource("vipflow.io/v1alpha1", "vippools", "VipPool", false);
    srv.enable_crd("vipflow.io/v1alpha1", "vippools");
    srv.apply_yaml(
        "apiVersion: vipflow.io/v1alpha1\nkind: VipPool\nmetadata: {name: big}\nspec: {addresses: [10.20.0.0/16]}\n",
    );
    println!(
        "allocating LoadBalancer addresses for {n} Services against the Kubernetes API test server"
    );

    // The floor: status writes one after the other, to Services of their own namespace.
    let floor_n = 500.min(n);
    for i in 0..floor_n {
        srv.apply(service_json("floor", i));
    }
    let client = rt.block_on(srv.client());
    let api: Api<Service> = Api::namespaced(client.clone(), "floor");
    let mut floor = Vec::with_capacity(floor_n);
    for i in 0..floor_n {
        let patch = json!({
            "apiVersion": "v1", "kind": "Service",
            "status": {"loadBalancer": {"ingress": [{"ip": format!("10.30.{}.{}", i / 250, i % 250 + 1), "ipMode": "VIP"}]},
                       "conditions": [{"type": "vipflow.io/Allocated", "status": "True", "reason": "Allocated",
                                       "message": "{}", "lastTransitionTime": "2026-11-26T00:00:00Z"}]},
        });
        let t = Instant::now();
        rt.block_on(api.patch_status(
            &format!("svc-{i:05}"),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        ))
        .expect("status write");
        floor.push(t.elapsed());
    }
    for i in 0..floor_n {
        srv.delete("v1", "Service", "floor", &format!("svc-{i:05}"));
    }

    // The allocator end to end.
    for i in 0..n {
        srv.apply(service_json("shop", i));
    }
    let t0 = Instant::now();
    let task = rt.spawn(run(client, IpamSettings::default(), None, None));
    let done = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(600),
            srv.wait_until(|s| {
                s.list("v1", "Service")
                    .iter()
                    .filter(|v| v["status"]["loadBalancer"]["ingress"][0]["ip"].is_string())
                    .count()
                    >= n
            }),
        )
        .await
    });
    let whole = t0.elapsed();
    assert!(
        done.is_ok(),
        "not every Service allocated within 10 minutes"
    );
    task.abort();

    // The allocator's own work, in memory: read, reserve, decide, record.
    let objects: Vec<Service> = (0..n)
        .map(|i| serde_json::from_value(service_json("shop", i)).expect("a Service"))
        .collect();
    let mut own = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let seen: Vec<(ServiceKey, SeenService)> = objects
            .iter()
            .filter_map(|s| {
                let ask = service::read(s, None).ok()??;
                Some((ask.request.service.clone(), SeenService::Ask(Box::new(ask))))
            })
            .collect();
        let (a, writes) = Allocations::start(
            vec![PoolSpec::new("big", &["10.20.0.0/16"])],
            HashMap::new(),
            seen,
        );
        let records: usize = writes
            .iter()
            .map(|w| serde_json::to_string(&w.record).map_or(0, |s| s.len()))
            .sum();
        own.push(t.elapsed());
        assert_eq!(writes.len(), n);
        assert!(records > 0);
        drop(a);
    }

    let floor_med = median(&floor);
    let per_alloc = whole / n as u32;
    let own_per = median(&own) / n as u32;
    println!("  {:<58} {:>14} {:>14}", "", "median", "p99");
    println!(
        "  {:<58} {:>11.3} ms {:>11.3} ms",
        format!("floor: one status write, one after the other ({floor_n})"),
        ms(floor_med),
        ms(percentile(&floor, 99.0))
    );
    println!(
        "  {:<58} {:>14}",
        format!("allocator end to end: {n} Services"),
        format!("{:.2} s", whole.as_secs_f64())
    );
    println!(
        "  {:<58} {:>14}",
        "  allocations per second",
        format!("{:.0}", n as f64 / whole.as_secs_f64())
    );
    println!(
        "  {:<58} {:>11.3} ms {:>14}",
        "  per allocation (beside the floor)",
        ms(per_alloc),
        format!(
            "{:.2}x floor",
            per_alloc.as_secs_f64() / floor_med.as_secs_f64()
        )
    );
    println!(
        "  {:<58} {:>11.1} us {:>14}",
        "allocator's own CPU per allocation (in memory, one core)",
        own_per.as_secs_f64() * 1e6,
        format!(
            "{:.1}% of floor",
            100.0 * own_per.as_secs_f64() / floor_med.as_secs_f64()
        )
    );
}
