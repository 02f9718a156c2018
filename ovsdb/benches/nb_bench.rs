//! `cargo bench -p ovsdb`: this client beside a minimal raw-socket client, same run, same
//! kind of fresh OVN_Northbound ovsdb-server (unix socket), same transactions.
//!
//! - bulk: 10,000 Load_Balancer rows in one transaction;
//! - single: 2,000 one-insert transactions, one at a time (p50/p99 latency) and pipelined.
//!
//! Prints both sides and the ratio. Not a test: nothing here asserts on time.

#[path = "../tests/common/mod.rs"]
mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use common::NbServer;
use ovsdb::{Client, ClientOptions, Row, Transaction, Value};
use serde_json::{Value as Json, json};

const BULK: usize = 10_000;
const SINGLE: usize = 2_000;
const WARMUP: usize = 100;

fn lb_row(name: &str, i: usize) -> Row {
    [
        ("name".to_owned(), Value::from(name)),
        ("protocol".to_owned(), Value::set(["tcp"])),
        (
            "vips".to_owned(),
            Value::map([(
                format!("10.{}.{}.{}:80", i >> 16 & 255, i >> 8 & 255, i & 255),
                "10.200.0.1:8080,10.200.0.2:8080".to_owned(),
            )]),
        ),
        (
            "external_ids".to_owned(),
            Value::map([("vipflow.io/owner", format!("ns/{name}"))]),
        ),
    ]
    .into()
}

fn insert_op(name: &str, i: usize) -> Json {
    json!({"op": "insert", "table": "Load_Balancer", "row": ovsdb::value::row_to_json(&lb_row(name, i))})
}

/// The minimal client: write a request, read until one whole JSON value has arrived.
struct Raw {
    s: UnixStream,
    buf: Vec<u8>,
    id: u64,
}

impl Raw {
    fn new(srv: &NbServer) -> Raw {
        Raw {
            s: UnixStream::connect(srv.sock()).unwrap(),
            buf: vec![],
            id: 0,
        }
    }

    fn send(&mut self, ops: Vec<Json>) {
        self.id += 1;
        let mut params = vec![json!("OVN_Northbound")];
        params.extend(ops);
        let req = json!({"id": self.id, "method": "transact", "params": params});
        self.s.write_all(req.to_string().as_bytes()).unwrap();
    }

    fn recv(&mut self) -> Json {
        loop {
            let mut it = serde_json::Deserializer::from_slice(&self.buf).into_iter::<Json>();
            if let Some(Ok(v)) = it.next() {
                let used = it.byte_offset();
                self.buf.drain(..used);
                assert!(v["error"].is_null(), "{v}");
                return v;
            }
            let mut chunk = [0u8; 65536];
            let n = self.s.read(&mut chunk).unwrap();
            assert!(n > 0, "server closed");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

struct Stats {
    rows_per_s: f64,
    p50: Duration,
    p99: Duration,
}

fn stats(rows: usize, total: Duration, mut lat: Vec<Duration>) -> Stats {
    lat.sort_unstable();
    let pick = |q: f64| {
        lat.get(((lat.len() as f64 * q) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Stats {
        rows_per_s: rows as f64 / total.as_secs_f64(),
        p50: pick(0.50),
        p99: pick(0.99),
    }
}

fn raw_bulk() -> Stats {
    let srv = NbServer::start();
    let mut r = Raw::new(&srv);
    let ops = (0..BULK)
        .map(|i| insert_op(&format!("raw-bulk-{i}"), i))
        .collect();
    let t = Instant::now();
    r.send(ops);
    let v = r.recv();
    let el = t.elapsed();
    assert_eq!(v["result"].as_array().map(Vec::len), Some(BULK));
    stats(BULK, el, vec![el])
}

fn raw_single() -> Stats {
    let srv = NbServer::start();
    let mut r = Raw::new(&srv);
    for i in 0..WARMUP {
        r.send(vec![insert_op(&format!("warm-{i}"), i)]);
        r.recv();
    }
    let mut lat = Vec::with_capacity(SINGLE);
    let t = Instant::now();
    for i in 0..SINGLE {
        let t1 = Instant::now();
        r.send(vec![insert_op(&format!("raw-{i}"), i)]);
        r.recv();
        lat.push(t1.elapsed());
    }
    stats(SINGLE, t.elapsed(), lat)
}

fn raw_pipelined() -> Stats {
    let srv = NbServer::start();
    let mut r = Raw::new(&srv);
    let mut w = Raw {
        s: r.s.try_clone().unwrap(),
        buf: vec![],
        id: 0,
    };
    // ovsdb-server stops reading while its replies back up: write from another thread.
    let t = Instant::now();
    let writer = std::thread::spawn(move || {
        for i in 0..SINGLE {
            w.send(vec![insert_op(&format!("rawp-{i}"), i)]);
        }
    });
    let done: Vec<Instant> = (0..SINGLE)
        .map(|_| {
            r.recv();
            Instant::now()
        })
        .collect();
    writer.join().unwrap();
    // As for this client: latency from the moment the whole batch was handed over.
    let lat = done.iter().map(|d| d.duration_since(t)).collect();
    stats(SINGLE, t.elapsed(), lat)
}

async fn client(srv: &NbServer) -> Client {
    let mut o = ClientOptions::new(&srv.unix(), "OVN_Northbound").unwrap();
    o.connect.probe_interval = None;
    Client::connect(o).await.unwrap()
}

async fn ours_bulk() -> Stats {
    let srv = NbServer::start();
    let c = client(&srv).await;
    let t = Instant::now();
    let mut tx = Transaction::new("OVN_Northbound");
    for i in 0..BULK {
        tx.insert("Load_Balancer", lb_row(&format!("bulk-{i}"), i));
    }
    let r = c.transact(&tx).await.unwrap();
    let el = t.elapsed();
    assert_eq!(r.len(), BULK);
    stats(BULK, el, vec![el])
}

async fn ours_single() -> Stats {
    let srv = NbServer::start();
    let c = client(&srv).await;
    for i in 0..WARMUP {
        let mut tx = Transaction::new("OVN_Northbound");
        tx.insert("Load_Balancer", lb_row(&format!("warm-{i}"), i));
        c.transact(&tx).await.unwrap();
    }
    let mut lat = Vec::with_capacity(SINGLE);
    let t = Instant::now();
    for i in 0..SINGLE {
        let t1 = Instant::now();
        let mut tx = Transaction::new("OVN_Northbound");
        tx.insert("Load_Balancer", lb_row(&format!("one-{i}"), i));
        c.transact(&tx).await.unwrap();
        lat.push(t1.elapsed());
    }
    stats(SINGLE, t.elapsed(), lat)
}

async fn ours_pipelined() -> Stats {
    let srv = NbServer::start();
    let c = client(&srv).await;
    let t = Instant::now();
    let futs = (0..SINGLE).map(|i| {
        let c = c.clone();
        async move {
            let mut tx = Transaction::new("OVN_Northbound");
            tx.insert("Load_Balancer", lb_row(&format!("pipe-{i}"), i));
            c.transact(&tx).await.unwrap();
            t.elapsed()
        }
    });
    let lat = futures::future::join_all(futs).await;
    stats(SINGLE, t.elapsed(), lat)
}

fn line(what: &str, raw: &Stats, ours: &Stats, latency: bool) {
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    if latency {
        println!(
            "{what:<22} raw {:>9.0} rows/s p50 {:>7.1} us p99 {:>7.1} us | ovsdb {:>9.0} rows/s p50 {:>7.1} us p99 {:>7.1} us | p50 ratio {:.2}x",
            raw.rows_per_s,
            us(raw.p50),
            us(raw.p99),
            ours.rows_per_s,
            us(ours.p50),
            us(ours.p99),
            us(ours.p50) / us(raw.p50)
        );
    } else {
        println!(
            "{what:<22} raw {:>9.0} rows/s ({:.1} ms) | ovsdb {:>9.0} rows/s ({:.1} ms) | time ratio {:.2}x",
            raw.rows_per_s,
            us(raw.p50) / 1e3,
            ours.rows_per_s,
            us(ours.p50) / 1e3,
            us(ours.p50) / us(raw.p50)
        );
    }
}

fn main() {
    // `cargo test --benches` runs bench binaries with no arguments too; `cargo bench` passes
    // `--bench`. Only the latter measures.
    if !std::env::args().any(|a| a == "--bench") {
        println!("nb_bench: run with `cargo bench -p ovsdb` to measure");
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let rb = raw_bulk();
    let ob = rt.block_on(ours_bulk());
    let rs = raw_single();
    let os = rt.block_on(ours_single());
    let rp = raw_pipelined();
    let op = rt.block_on(ours_pipelined());
    println!(
        "OVN_Northbound ovsdb-server over a unix socket; raw = minimal blocking socket client"
    );
    line("bulk 10k insert (1 txn)", &rb, &ob, false);
    line("2k single-op, serial", &rs, &os, true);
    line("2k single-op, pipelined", &rp, &op, true);
}
