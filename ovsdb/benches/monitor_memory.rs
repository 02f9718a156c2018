//! `cargo bench -p ovsdb --bench monitor_memory`: the heap a monitor of 10,000 Load_Balancer
//! rows costs, and how long its snapshot takes to decode.
//!
//! A `monitor_cond_since` reply frame of `N` rows shaped like the agent's (name, protocol, two
//! VIPs, `reject=true`, three external ids, no ip_port_mappings) goes the client's way: the
//! frame's envelope (`parse_frame`), the reply's rows (`parse_since_reply_text`) and the cache
//! (`Cache::replace`). Then an `update3` notification inserting as many rows (a bulk
//! transaction's) goes through `parse_notification_text` and `Cache::apply`. For comparison,
//! both frames are also decoded from a whole JSON tree (`parse_since_reply`,
//! `parse_notification`).
//!
//! A counting allocator reports the heap at its peak during each stage, above what was live
//! before the frame arrived (the frame itself included), and what the cache keeps once the
//! frame and the events are gone. Offline, no server. Not a test: nothing here asserts on size
//! or time.

use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ovsdb::jsonrpc::{Incoming, parse_frame};
use ovsdb::monitor::{self, Cache, MonitorSpec};
use ovsdb::{DatabaseSchema, Uuid};
use serde_json::{Value as Json, json};

const N: usize = 10_000;
const RUNS: usize = 5;
const LB: &str = "Load_Balancer";

/// `System`, counting the bytes live and their high-water mark.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let now = LIVE.fetch_add(n, Relaxed) + n;
    PEAK.fetch_max(now, Relaxed);
}

// SAFETY: every call goes to `System` unchanged; only counters are updated beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            grew(l.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            grew(l.size());
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Relaxed);
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            LIVE.fetch_sub(l.size(), Relaxed);
            grew(new);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Start a stage: the peak restarts from what is live now, which is returned.
fn mark() -> usize {
    let now = LIVE.load(Relaxed);
    PEAK.store(now, Relaxed);
    now
}

/// The Load_Balancer table as OVN_Northbound has it.
fn schema() -> Arc<DatabaseSchema> {
    let map = json!({"key": "string", "value": "string", "min": 0, "max": "unlimited"});
    let j = json!({"name": "OVN_Northbound", "version": "7.0.0", "tables": {LB: {
        "columns": {
            "name": {"type": "string"},
            "vips": {"type": map},
            "protocol": {"type": {"key": {"type": "string",
                "enum": ["set", ["tcp", "udp", "sctp"]]}, "min": 0, "max": 1}},
            "health_check": {"type": {"key": {"type": "uuid",
                "refTable": "Load_Balancer_Health_Check", "refType": "strong"},
                "min": 0, "max": "unlimited"}},
            "ip_port_mappings": {"type": map},
            "selection_fields": {"type": {"key": {"type": "string",
                "enum": ["set", ["eth_src", "eth_dst", "ip_src", "ip_dst", "tp_src", "tp_dst"]]},
                "min": 0, "max": "unlimited"}},
            "options": {"type": map},
            "external_ids": {"type": map}
        },
        "isRoot": true
    }}});
    match DatabaseSchema::from_json(&j) {
        Ok(s) => Arc::new(s),
        Err(e) => panic!("schema: {e}"),
    }
}

/// The agent's subscription (src/reconcile/northbound/mod.rs).
fn spec() -> MonitorSpec {
    MonitorSpec::new().columns(
        LB,
        &[
            "name",
            "protocol",
            "vips",
            "options",
            "external_ids",
            "ip_port_mappings",
        ],
    )
}

/// `N` rows of `<table-updates2>`, each a `kind` ("initial", "insert") row-update2, in
/// compact JSON as ovsdb-server writes it.
fn table_updates(kind: &str) -> String {
    let mut rows = String::with_capacity(N * 512);
    for i in 0..N {
        let (a, b) = (i / 250, i % 250);
        let uuid = Uuid::from_u128(0x5eed_0000_0000_0000_0000 + i as u128);
        let row = json!({kind: {
            "name": format!("Service_ns-{a}/svc-{b}_tcp"),
            "protocol": "tcp",
            "vips": ["map", [
                [format!("10.0.{a}.{b}:80"), format!("10.1.{a}.{b}:8080,10.2.{a}.{b}:8080")],
                [format!("10.0.{a}.{b}:443"), format!("10.1.{a}.{b}:8443,10.2.{a}.{b}:8443")]
            ]],
            "options": ["map", [["reject", "true"]]],
            "external_ids": ["map", [
                ["k8s.ovn.org/kind", "Service"],
                ["vipflow.io/owner", format!("ns-{a}/svc-{b}")],
                ["vipflow.io/scope", "cluster"]
            ]],
            "ip_port_mappings": ["map", []]
        }});
        let sep = if i == 0 { "" } else { "," };
        let _ = write!(rows, "{sep}\"{uuid}\":{row}");
    }
    format!(r#"{{"{LB}":{{{rows}}}}}"#)
}

/// The `monitor_cond_since` reply frame: every row, found=false.
fn reply_frame() -> Bytes {
    let last = Uuid::from_u128(0x1a57);
    let rows = table_updates("initial");
    Bytes::from(format!(
        r#"{{"id":3,"result":[false,"{last}",{rows}],"error":null}}"#
    ))
}

/// An `update3` notification frame inserting every row.
fn update_frame() -> Bytes {
    let txn = Uuid::from_u128(0x7e57);
    let rows = table_updates("insert");
    Bytes::from(format!(
        r#"{{"id":null,"method":"update3","params":["m1","{txn}",{rows}]}}"#
    ))
}

/// A stage's figures: heap peak above what was live when the frame arrived, and time.
#[derive(Clone, Copy, Default)]
struct Stage {
    peak: usize,
    time: Duration,
}

/// One run: decoding the frame, then the cache's part, and what the cache keeps.
#[derive(Clone, Copy, Default)]
struct Run {
    parse: Stage,
    cache: Stage,
    retained: usize,
}

/// `f`, timed, with the heap's peak above `base`.
fn stage<T>(base: usize, f: impl FnOnce() -> T) -> (T, Stage) {
    let t = Instant::now();
    let out = f();
    let time = t.elapsed();
    let peak = PEAK.load(Relaxed) - base;
    (out, Stage { peak, time })
}

/// The reply as the client reads it: envelope, rows from the text, `Cache::replace`.
fn reply_from_text(schema: &Arc<DatabaseSchema>, frame: &Bytes) -> Run {
    let base = mark();
    // A fresh copy, as a frame read off the socket would be.
    let frame = Bytes::copy_from_slice(frame);
    let (decoded, parse) = stage(base, || {
        let result = match parse_frame(&frame) {
            Ok(Incoming::Response { result, .. }) => result,
            other => panic!("not a response: {other:?}"),
        };
        monitor::utf8(&result)
            .and_then(|text| monitor::parse_since_reply_text(text, schema))
            .unwrap_or_else(|e| panic!("reply: {e}"))
    });
    drop(frame);
    mark();
    let mut cache = Cache::new(schema.clone(), spec());
    let (events, cache_stage) = stage(base, || {
        cache
            .replace(decoded.2, false)
            .unwrap_or_else(|e| panic!("replace: {e}"))
    });
    assert_eq!(events.len(), N);
    drop(events);
    Run {
        parse,
        cache: cache_stage,
        retained: LIVE.load(Relaxed) - base,
    }
}

/// The reply decoded from a whole JSON tree of the frame.
fn reply_from_tree(schema: &Arc<DatabaseSchema>, frame: &Bytes) -> Run {
    let base = mark();
    let frame = Bytes::copy_from_slice(frame);
    let (decoded, parse) = stage(base, || {
        let mut tree: Json = serde_json::from_slice(&frame).unwrap_or_else(|e| panic!("{e}"));
        monitor::parse_since_reply(&tree["result"].take(), schema)
            .unwrap_or_else(|e| panic!("reply: {e}"))
    });
    assert_eq!(decoded.2[LB].len(), N);
    Run {
        parse,
        ..Run::default()
    }
}

/// The notification as the client reads it: envelope, params from the text, `Cache::apply`.
fn update_from_text(schema: &Arc<DatabaseSchema>, frame: &Bytes) -> Run {
    let mut cache = Cache::new(schema.clone(), spec());
    let base = mark();
    let frame = Bytes::copy_from_slice(frame);
    let (update, parse) = stage(base, || {
        let (method, params) = match parse_frame(&frame) {
            Ok(Incoming::Notification { method, params }) => (method, params),
            other => panic!("not a notification: {other:?}"),
        };
        monitor::utf8(&params)
            .and_then(|text| monitor::parse_notification_text(&method, text, schema))
            .unwrap_or_else(|e| panic!("update: {e}"))
    });
    drop(frame);
    mark();
    let (events, cache_stage) = stage(base, || {
        cache
            .apply(update.updates)
            .unwrap_or_else(|e| panic!("apply: {e}"))
    });
    assert_eq!(events.len(), N);
    drop(events);
    Run {
        parse,
        cache: cache_stage,
        retained: LIVE.load(Relaxed) - base,
    }
}

/// The notification's params decoded from a JSON tree (as the client did before it read
/// them from their text).
fn update_from_tree(schema: &Arc<DatabaseSchema>, frame: &Bytes) -> Run {
    let base = mark();
    let frame = Bytes::copy_from_slice(frame);
    let (update, parse) = stage(base, || {
        let (method, params) = match parse_frame(&frame) {
            Ok(Incoming::Notification { method, params }) => (method, params),
            other => panic!("not a notification: {other:?}"),
        };
        let tree: Json = serde_json::from_slice(&params).unwrap_or_else(|e| panic!("{e}"));
        monitor::parse_notification(&method, &tree, schema)
            .unwrap_or_else(|e| panic!("update: {e}"))
    });
    assert_eq!(update.updates[LB].len(), N);
    Run {
        parse,
        ..Run::default()
    }
}

/// The median of `RUNS` runs, figure by figure.
fn median_of(f: impl Fn() -> Run) -> Run {
    let runs: Vec<Run> = (0..RUNS).map(|_| f()).collect();
    let med = |g: &dyn Fn(&Run) -> usize| {
        let mut v: Vec<usize> = runs.iter().map(g).collect();
        v.sort_unstable();
        v[v.len() / 2]
    };
    let med_t = |g: &dyn Fn(&Run) -> Duration| {
        let mut v: Vec<Duration> = runs.iter().map(g).collect();
        v.sort_unstable();
        v[v.len() / 2]
    };
    Run {
        parse: Stage {
            peak: med(&|r| r.parse.peak),
            time: med_t(&|r| r.parse.time),
        },
        cache: Stage {
            peak: med(&|r| r.cache.peak),
            time: med_t(&|r| r.cache.time),
        },
        retained: med(&|r| r.retained),
    }
}

fn line(what: &str, s: Stage) {
    let mib = s.peak as f64 / (1024.0 * 1024.0);
    let ms = s.time.as_secs_f64() * 1e3;
    println!("{what:<36} {mib:>7.1} MiB {:>7} {ms:>8.1} ms", s.peak / N);
}

fn main() {
    let schema = schema();
    let (reply, update) = (reply_frame(), update_frame());
    let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
    println!(
        "{N} Load_Balancer rows: reply frame {:.1} MiB, update3 frame {:.1} MiB ({} B/row)",
        mib(reply.len()),
        mib(update.len()),
        reply.len() / N
    );
    println!(
        "{:<36} {:>11} {:>7} {:>11}",
        "stage", "heap peak", "B/row", "time"
    );
    let r = median_of(|| reply_from_text(&schema, &reply));
    line("reply: decode (text, as the client)", r.parse);
    line("reply: + Cache::replace", r.cache);
    let retained = r.retained;
    line(
        "reply: decode from a JSON tree",
        median_of(|| reply_from_tree(&schema, &reply)).parse,
    );
    let u = median_of(|| update_from_text(&schema, &update));
    line("update3: decode (text, as the client)", u.parse);
    line("update3: + Cache::apply", u.cache);
    line(
        "update3: decode from a JSON tree",
        median_of(|| update_from_tree(&schema, &update)).parse,
    );
    println!(
        "retained by the cache: {:.1} MiB ({} B/row) after the reply, {:.1} MiB after the update \
         (medians of {RUNS})",
        mib(retained),
        retained / N,
        mib(u.retained)
    );
}
