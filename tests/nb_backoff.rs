//! The `vipflow agent` process against a scripted Northbound peer that misbehaves on every
//! connection: it sends invalid JSON right after the monitor reply, closes right after the
//! handshake, or answers the monitor and then nothing more (the agent's 1 s request timeout
//! ends the session). Each session ends before it was useful, so the waits before the next
//! connect grow (100 ms doubling to 5 s, ±20 %): at most 10 connections in 20 s, counting the
//! start's read of the schema, and a WARN saying what went wrong. The three run side by side.

use serde_json::{Value, json};
use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::{KillOnDrop, Sandbox};

const NB_SCHEMA: &str = "/usr/share/ovn/ovn-nb.ovsschema";

/// How long each agent runs against its peer.
const RUN: Duration = Duration::from_secs(20);

/// The spec: connections a misbehaving peer sees in [`RUN`].
const MAX_CONNECTIONS: usize = 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Misbehaviour {
    /// Invalid JSON right after each reply to a Northbound monitor.
    InvalidJsonAfterMonitor,
    /// The connection closed right after the handshake (`_Server`, schema, db-change-aware).
    CloseAfterHandshake,
    /// The monitor answered, then no request ever again (the agent's request timeout ends
    /// the session).
    SilentAfterMonitor,
}

impl Misbehaviour {
    /// What the agent's WARN says about it (any of these).
    fn said(self) -> &'static [&'static str] {
        match self {
            Misbehaviour::InvalidJsonAfterMonitor => &["not valid JSON"],
            Misbehaviour::CloseAfterHandshake => &["closed"],
            Misbehaviour::SilentAfterMonitor => &["no reply to"],
        }
    }
}

/// A scripted peer on a unix socket: enough OVSDB JSON-RPC for the agent to connect, take
/// over as writer and monitor, then the misbehaviour. Notes when it accepts each connection.
struct Peer {
    path: PathBuf,
    /// When each connection was accepted, from the peer's start.
    accepted: Arc<Mutex<Vec<Duration>>>,
    stop: Arc<AtomicBool>,
}

impl Peer {
    fn start(dir: &Path, how: Misbehaviour) -> Peer {
        let path = dir.join("nb-peer.sock");
        let l = UnixListener::bind(&path).unwrap();
        l.set_nonblocking(true).unwrap();
        let schema: Value =
            serde_json::from_str(&std::fs::read_to_string(NB_SCHEMA).unwrap()).unwrap();
        let schema = Arc::new(schema);
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, st) = (accepted.clone(), stop.clone());
        let start = Instant::now();
        std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                let Ok((s, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                };
                a.lock().unwrap().push(start.elapsed());
                let _ = s.set_nonblocking(false);
                let schema = schema.clone();
                std::thread::spawn(move || serve(s, how, &schema));
            }
        });
        Peer {
            path,
            accepted,
            stop,
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// One connection: answer requests until the misbehaviour.
fn serve(s: UnixStream, how: Misbehaviour, schema: &Value) {
    let Ok(mut w) = s.try_clone() else { return };
    let mut silent = false;
    for m in serde_json::Deserializer::from_reader(&s).into_iter::<Value>() {
        let Ok(m) = m else { return };
        // Replies (to nothing we asked) and notifications need no answer.
        let Some(method) = m.get("method").and_then(Value::as_str) else {
            continue;
        };
        if m.get("id").is_none_or(Value::is_null) || silent {
            continue;
        }
        let params = m.get("params").cloned().unwrap_or(Value::Null);
        let reply =
            json!({"id": m["id"], "result": answer(method, &params, schema), "error": null});
        if w.write_all(reply.to_string().as_bytes()).is_err() {
            return;
        }
        let nb_monitor = method.starts_with("monitor")
            && method != "monitor_cancel"
            && params.get(0).and_then(Value::as_str) == Some("OVN_Northbound");
        match how {
            Misbehaviour::InvalidJsonAfterMonitor if nb_monitor => {
                let _ = w.write_all(br#"{"id":null,"method":"update3","params":[nul]}"#);
            }
            Misbehaviour::CloseAfterHandshake if method == "set_db_change_aware" => {
                let _ = s.shutdown(std::net::Shutdown::Both);
                return;
            }
            Misbehaviour::SilentAfterMonitor if nb_monitor => silent = true,
            _ => {}
        }
    }
}

/// The result a standalone OVN_Northbound server with no rows would give.
fn answer(method: &str, params: &Value, schema: &Value) -> Value {
    match method {
        "transact" if params.get(0).and_then(Value::as_str) == Some("_Server") => {
            json!([{"rows": [{"model": "standalone", "connected": true, "leader": true}]}])
        }
        "transact" => {
            let ops = params.as_array().map(|a| &a[1..]).unwrap_or_default();
            Value::Array(ops.iter().enumerate().map(op_result).collect())
        }
        "get_schema" => schema.clone(),
        "monitor_cond_since" => json!([false, "00000000-0000-0000-0000-000000000000", {}]),
        "echo" => params.clone(),
        _ => json!({}),
    }
}

fn op_result((i, op): (usize, &Value)) -> Value {
    match op.get("op").and_then(Value::as_str) {
        Some("insert") => json!({"uuid": ["uuid", format!("00000000-0000-0000-0000-{i:012}")]}),
        Some("select") => json!({"rows": []}),
        Some("mutate" | "update" | "delete") => json!({"count": 1}),
        _ => json!({}),
    }
}

/// What one agent did against one misbehaving peer.
struct Outcome {
    how: Misbehaviour,
    /// When the peer accepted each connection.
    accepted: Vec<Duration>,
    /// When the agent had synced its bridge, from its start.
    bridge_synced: Option<Duration>,
    log: String,
}

fn run(how: Misbehaviour) -> Outcome {
    let sb = Sandbox::openflow_only();
    let peer = Peer::start(sb.path(), how);
    let objects = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/services.yaml");
    let log = sb.path().join("agent.log");
    let f = std::fs::File::create(&log).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_vipflow"))
        .args([
            "agent",
            "--node-name",
            "node-a",
            "--nb-timeout-ms",
            "1000",
            "--nb-switch",
            "sw0",
        ])
        .arg("--objects")
        .arg(&objects)
        .arg("--ovs-rundir")
        .arg(sb.path())
        .arg("--nb-remote")
        .arg(format!("unix:{}", peer.path.display()))
        .env("VIPFLOW_LOG", "info")
        .stdin(Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .unwrap();
    // Killed on drop, also when the test fails.
    let child = KillOnDrop(child);
    let start = std::time::Instant::now();
    let mut bridge_synced = None;
    while start.elapsed() < RUN {
        if bridge_synced.is_none()
            && std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("synced bridge=br-ex")
        {
            bridge_synced = Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let accepted = peer.accepted.lock().unwrap().clone();
    drop(child);
    Outcome {
        how,
        accepted,
        bridge_synced,
        log: std::fs::read_to_string(&log).unwrap_or_default(),
    }
}

#[test]
fn a_northbound_peer_that_fails_every_session_is_redialled_at_most_10_times_in_20_s() {
    let all = [
        Misbehaviour::InvalidJsonAfterMonitor,
        Misbehaviour::CloseAfterHandshake,
        Misbehaviour::SilentAfterMonitor,
    ];
    let runs: Vec<_> = all
        .into_iter()
        .map(|how| std::thread::spawn(move || run(how)))
        .collect();
    let outcomes: Vec<Outcome> = runs.into_iter().map(|r| r.join().unwrap()).collect();
    for o in &outcomes {
        let at: Vec<String> = o
            .accepted
            .iter()
            .map(|t| format!("{:.2}", t.as_secs_f64()))
            .collect();
        println!(
            "{:?}: {} connections in {RUN:?}, at {} s; the bridge synced {:?} after the start",
            o.how,
            o.accepted.len(),
            at.join(", "),
            o.bridge_synced
        );
    }
    for o in &outcomes {
        let n = o.accepted.len();
        let warned = o
            .log
            .lines()
            .find(|l| l.contains("WARN") && o.how.said().iter().any(|w| l.contains(w)));
        println!("{:?}: {}", o.how, warned.unwrap_or("no WARN"));
        assert!(
            n >= 2,
            "{:?}: the peer's fault never ended a session ({n} connection):\n{}",
            o.how,
            o.log
        );
        assert!(
            n <= MAX_CONNECTIONS,
            "{:?}: {n} connections in {RUN:?}:\n{}",
            o.how,
            o.log
        );
        // The start waits at most 2 s for the Northbound schema; the bridge is the node's
        // dataplane and goes on whatever the database does.
        assert!(
            o.bridge_synced.is_some_and(|t| t < Duration::from_secs(10)),
            "{:?}: the bridge synced {:?} after the start:\n{}",
            o.how,
            o.bridge_synced,
            o.log
        );
        assert!(
            warned.is_some(),
            "{:?}: no WARN saying {:?}:\n{}",
            o.how,
            o.how.said(),
            o.log
        );
    }
}
