//! `cargo bench -p ovsdb --bench bulk_insert`: where the time of one 10,000-row Load_Balancer
//! insert transaction goes, with the agent's monitor open and without it.
//!
//! Per run a fresh OVN_Northbound ovsdb-server (unix socket). Measured, median of `RUNS`:
//! - this client: wall time of `transact`, the server's CPU time meanwhile, our process's CPU
//!   time meanwhile, and (monitor open) when the cache holds all rows (events received);
//! - a raw blocking socket client sending the same bytes and only splitting the stream (no
//!   parsing): the floor for any client, with the server's timeline (first byte back,
//!   notification complete, reply complete);
//! - offline, on the bytes the raw client captured: each client-side stage on its own.
//!
//! Not a test: nothing here asserts on time.

#[path = "../tests/common/mod.rs"]
mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use common::NbServer;
use ovsdb::framing::Splitter;
use ovsdb::jsonrpc::Message;
use ovsdb::{Cache, Client, ClientOptions, DatabaseSchema, MonitorSpec, Row, Transaction, Value};
use serde_json::Value as Json;

const N: usize = 10_000;
const RUNS: usize = 5;
const DB: &str = "OVN_Northbound";

/// The agent's subscription (src/reconcile/northbound.rs).
fn spec() -> MonitorSpec {
    MonitorSpec::new()
        .columns(
            "Load_Balancer",
            &[
                "name",
                "protocol",
                "vips",
                "options",
                "external_ids",
                "ip_port_mappings",
            ],
        )
        .columns("Load_Balancer_Group", &["name", "load_balancer"])
        .columns(
            "Logical_Switch",
            &["name", "load_balancer", "other_config", "external_ids"],
        )
        .columns("Logical_Router", &["name", "load_balancer"])
}

fn lb_row(i: usize) -> Row {
    let svc = format!("svc-{i}");
    let (a, b) = (i >> 8 & 255, i & 255);
    [
        (
            "name".to_owned(),
            Value::from(format!("vipflow/bench/{svc}/tcp")),
        ),
        ("protocol".to_owned(), Value::set(["tcp"])),
        (
            "vips".to_owned(),
            Value::map([(
                format!("198.18.{a}.{b}:80"),
                format!("10.0.{a}.{b}:8080,10.1.{a}.{b}:8080"),
            )]),
        ),
        ("options".to_owned(), Value::map([("reject", "true")])),
        (
            "external_ids".to_owned(),
            Value::map([
                ("vipflow.io/owner".to_owned(), format!("bench/{svc}")),
                ("vipflow.io/scope".to_owned(), "cluster".to_owned()),
            ]),
        ),
        ("ip_port_mappings".to_owned(), Value::empty_map()),
    ]
    .into()
}

fn txn() -> Transaction {
    let mut tx = Transaction::new(DB);
    for i in 0..N {
        tx.insert("Load_Balancer", lb_row(i));
    }
    tx
}

/// CPU time (ns) of every thread of `pid`, from the scheduler's own accounting.
fn cpu_ns(pid: &str) -> u64 {
    let mut total = 0;
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    for t in dir.flatten() {
        let s = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
        total += s
            .split_whitespace()
            .next()
            .and_then(|x| x.parse::<u64>().ok())
            .unwrap_or(0);
    }
    total
}

/// utime + stime in clock ticks (/proc/PID/stat fields 14 and 15).
fn cpu_ticks(pid: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = s.rsplit_once(')').map(|x| x.1).unwrap_or_default();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    n(11) + n(12)
}

fn clk_tck() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100)
}

#[derive(Default, Clone, Copy)]
struct Sample {
    wall: Duration,
    server_cpu: Duration,
    server_ticks: u64,
    client_cpu: Duration,
    /// Monitor open: all rows in the cache and their events received.
    cache_done: Duration,
    /// Raw client: first byte back, notification complete.
    first_byte: Duration,
    notif_done: Duration,
}

async fn ours(monitor: bool) -> Sample {
    let srv = NbServer::start();
    let pid = srv.pid().to_string();
    let mut o = ClientOptions::new(&srv.unix(), DB).unwrap();
    o.connect.probe_interval = None;
    let c = Client::connect(o).await.unwrap();
    let mut m = if monitor {
        Some(c.monitor(spec()).await.unwrap())
    } else {
        None
    };
    let tx = txn();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (s0, k0, c0) = (cpu_ns(&pid), cpu_ticks(&pid), cpu_ns("self"));
    let t = Instant::now();
    let r = c.transact(&tx).await.unwrap();
    let wall = t.elapsed();
    let mut cache_done = Duration::ZERO;
    if let Some(m) = m.as_mut() {
        for _ in 0..N {
            m.next_event().await.unwrap();
        }
        cache_done = t.elapsed();
    }
    let (s1, k1, c1) = (cpu_ns(&pid), cpu_ticks(&pid), cpu_ns("self"));
    assert_eq!(r.len(), N);
    if let Some(m) = &m {
        assert_eq!(m.cache().table("Load_Balancer").map(|t| t.len()), Some(N));
    }
    drop(tx);
    Sample {
        wall,
        server_cpu: Duration::from_nanos(s1 - s0),
        server_ticks: k1 - k0,
        client_cpu: Duration::from_nanos(c1 - c0),
        cache_done,
        ..Sample::default()
    }
}

/// Minimal client: blocking socket, split the stream into messages, nothing parsed.
struct Raw {
    s: UnixStream,
    buf: BytesMut,
    split: Splitter,
}

impl Raw {
    fn next(&mut self) -> bytes::Bytes {
        loop {
            if let Some(m) = self.split.split(&mut self.buf).unwrap() {
                return m;
            }
            self.buf.reserve(1 << 20);
            let mut chunk = vec![0u8; 1 << 20];
            let n = self.s.read(&mut chunk).unwrap();
            assert!(n > 0, "server closed");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// What the raw client captured: the update3 notification and the transact reply.
struct Captured {
    notif: bytes::Bytes,
    reply: bytes::Bytes,
}

fn raw(monitor: bool, params: &[u8]) -> (Sample, Captured) {
    let srv = NbServer::start();
    let pid = srv.pid().to_string();
    let mut r = Raw {
        s: UnixStream::connect(srv.sock()).unwrap(),
        buf: BytesMut::new(),
        split: Splitter::default(),
    };
    if monitor {
        let schema = schema();
        let cache = Cache::new(schema, spec());
        let req = serde_json::json!({"id": "mon", "method": "monitor_cond_since",
            "params": [DB, "m", cache.spec().to_json(), "00000000-0000-0000-0000-000000000000"]});
        r.s.write_all(req.to_string().as_bytes()).unwrap();
        r.next();
    }
    let mut req = Vec::with_capacity(params.len() + 64);
    req.extend_from_slice(br#"{"id":1,"method":"transact","params":"#);
    req.extend_from_slice(params);
    req.push(b'}');
    std::thread::sleep(Duration::from_millis(50));
    let (s0, k0) = (cpu_ns(&pid), cpu_ticks(&pid));
    let t = Instant::now();
    r.s.write_all(&req).unwrap();
    // First byte back: the server has run the transaction.
    let mut one = [0u8; 1];
    let n = r.s.read(&mut one).unwrap();
    assert_eq!(n, 1);
    let first_byte = t.elapsed();
    r.buf.extend_from_slice(&one);
    let (notif, notif_done) = if monitor {
        let m = r.next();
        (m, t.elapsed())
    } else {
        (bytes::Bytes::new(), Duration::ZERO)
    };
    let reply = r.next();
    let wall = t.elapsed();
    let (s1, k1) = (cpu_ns(&pid), cpu_ticks(&pid));
    assert!(reply.starts_with(b"{\"id\":1,"), "reply expected");
    (
        Sample {
            wall,
            server_cpu: Duration::from_nanos(s1 - s0),
            server_ticks: k1 - k0,
            first_byte,
            notif_done,
            ..Sample::default()
        },
        Captured { notif, reply },
    )
}

fn schema() -> Arc<DatabaseSchema> {
    let j: Json =
        serde_json::from_str(&std::fs::read_to_string(common::NB_SCHEMA).unwrap()).unwrap();
    Arc::new(DatabaseSchema::from_json(&j).unwrap())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn med<F: Fn(&Sample) -> Duration>(s: &[Sample], f: F) -> Duration {
    median(s.iter().map(f).collect())
}

/// Median time of `f` over `RUNS` runs (a fresh input each run from `setup`).
fn stage<I, O>(setup: impl Fn() -> I, f: impl Fn(I) -> O) -> Duration {
    median(
        (0..RUNS)
            .map(|_| {
                let i = setup();
                let t = Instant::now();
                let o = f(i);
                let d = t.elapsed();
                drop(o);
                d
            })
            .collect(),
    )
}

fn ms(d: Duration) -> String {
    format!("{:8.1}", d.as_secs_f64() * 1e3)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("bulk_insert: run with `cargo bench -p ovsdb --bench bulk_insert` to measure");
        return;
    }
    let tick_ms = 1000 / clk_tck().max(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let tx = txn();
    let params = tx.params_bytes().unwrap();
    println!(
        "{N} Load_Balancer inserts in one transaction; request {:.2} MB; median of {RUNS} runs; \
         fresh NB ovsdb-server per run (unix socket); tokio multi-thread, 2 workers",
        params.len() as f64 / 1e6
    );
    let mut cap = None;
    let mut rows = vec![];
    for monitor in [true, false] {
        let o: Vec<Sample> = (0..RUNS).map(|_| rt.block_on(ours(monitor))).collect();
        let mut r = vec![];
        for _ in 0..RUNS {
            let (s, c) = raw(monitor, &params);
            r.push(s);
            if monitor {
                cap = Some(c);
            }
        }
        rows.push((monitor, o, r));
    }
    println!(
        "\n{:<34} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "ms (median)", "transact", "srv cpu", "srv tck", "cli cpu", "1st byte", "notif"
    );
    for (monitor, o, r) in &rows {
        let tag = if *monitor { "monitor" } else { "no monitor" };
        let ticks = |s: &[Sample]| {
            let mut t: Vec<u64> = s.iter().map(|x| x.server_ticks * tick_ms).collect();
            t.sort_unstable();
            t[t.len() / 2]
        };
        println!(
            "{:<34} {} {} {:>8} {} {:>8} {:>8}",
            format!("ovsdb client, {tag}"),
            ms(med(o, |s| s.wall)),
            ms(med(o, |s| s.server_cpu)),
            ticks(o),
            ms(med(o, |s| s.client_cpu)),
            "",
            ""
        );
        if *monitor {
            println!(
                "{:<34} {}",
                "  ...until cache+events complete",
                ms(med(o, |s| s.cache_done))
            );
        }
        println!(
            "{:<34} {} {} {:>8} {:>8} {} {}",
            format!("raw split-only client, {tag}"),
            ms(med(r, |s| s.wall)),
            ms(med(r, |s| s.server_cpu)),
            ticks(r),
            "",
            ms(med(r, |s| s.first_byte)),
            if *monitor {
                ms(med(r, |s| s.notif_done))
            } else {
                String::new()
            }
        );
    }

    // Client stages on their own, on the captured bytes.
    let Some(cap) = cap else { return };
    let schema = schema();
    println!(
        "\nclient stages alone (notification {:.2} MB, reply {:.2} MB), ms median of {RUNS}:",
        cap.notif.len() as f64 / 1e6,
        cap.reply.len() as f64 / 1e6
    );
    let line = |what: &str, d: Duration| println!("  {what:<52} {}", ms(d));
    line(
        "build Transaction (10k rows, caller side)",
        stage(|| (), |_| txn()),
    );
    line("tx.check(schema)", stage(|| (), |_| tx.check(&schema)));
    line(
        "tx.params_bytes()",
        stage(|| (), |_| tx.params_bytes().unwrap()),
    );
    // Split as the reader sees it: 64 KiB reads.
    let split = |b: &bytes::Bytes| {
        let mut s = Splitter::default();
        let mut buf = BytesMut::new();
        let mut out = None;
        for ch in b.chunks(64 * 1024) {
            buf.extend_from_slice(ch);
            if let Some(m) = s.split(&mut buf).unwrap() {
                out = Some(m);
            }
        }
        out.unwrap()
    };
    let decode = |b: &bytes::Bytes| {
        let mut c = ovsdb::framing::JsonCodec::default();
        let mut buf = BytesMut::from(&b[..]);
        tokio_util::codec::Decoder::decode(&mut c, &mut buf)
            .unwrap()
            .unwrap()
    };
    line(
        "notif: split stream (64 KiB reads)",
        stage(|| (), |_| split(&cap.notif)),
    );
    line(
        "notif: jsonrpc::parse_frame (reader: envelope only)",
        stage(
            || split(&cap.notif),
            |f| ovsdb::jsonrpc::parse_frame(&f).unwrap(),
        ),
    );
    line(
        "notif: JsonCodec::decode (split + JSON tree)",
        stage(|| (), |_| decode(&cap.notif)),
    );
    line(
        "notif: Message::from_json",
        stage(|| decode(&cap.notif), |j| Message::from_json(j).unwrap()),
    );
    let params_of = |j: Json| match Message::from_json(j).unwrap() {
        Message::Notification { method, params } => (method, params),
        _ => panic!("not a notification"),
    };
    line(
        "notif: monitor::parse_notification",
        stage(
            || params_of(decode(&cap.notif)),
            |(m, p)| ovsdb::monitor::parse_notification(&m, &p, &schema).unwrap(),
        ),
    );
    let updates = || {
        let (m, p) = params_of(decode(&cap.notif));
        ovsdb::monitor::parse_notification(&m, &p, &schema)
            .unwrap()
            .updates
    };
    line(
        "notif: Cache::apply (10k inserts, events)",
        stage(
            || (Cache::new(schema.clone(), spec()), updates()),
            |(mut c, u)| (c.apply(u).unwrap(), c),
        ),
    );
    line(
        "reply: JsonCodec::decode (split + JSON tree)",
        stage(|| (), |_| decode(&cap.reply)),
    );
    line(
        "reply: Message::from_json + decode_result",
        stage(
            || decode(&cap.reply),
            |j| match Message::from_json(j).unwrap() {
                Message::Response { result, .. } => tx.decode_result(&result, Some(&schema)),
                _ => panic!("not a response"),
            },
        ),
    );
}
