//! The Northbound writer against a server that is up but does not serve it: a relay in front
//! of a real NB ovsdb-server that swallows one transaction (the server still answers echo), or
//! hands its reply back under a wrong id. The writer gives up after `nb-timeout-ms`, drops the
//! session and writes on a new one.

mod common;

use common::expect::{expected_rows, ours_rows};
use common::{Agent, base_yaml, write_objects};
use serde_json::Value;
use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::Sandbox;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fault {
    None,
    SwallowTransact,
    WrongId,
}

/// The client side of the relay's latest session, shared by its forwarding thread and the
/// test (which writes whole messages of its own between the server's).
type ClientWriter = Arc<Mutex<Option<UnixStream>>>;

struct NbRelay {
    path: PathBuf,
    sessions: Arc<AtomicUsize>,
    fault: Arc<Mutex<Fault>>,
    stop: Arc<AtomicBool>,
    client: ClientWriter,
}

impl NbRelay {
    fn start(sb: &Sandbox) -> NbRelay {
        let path = sb.path().join("nb-relay.sock");
        let l = UnixListener::bind(&path).unwrap();
        l.set_nonblocking(true).unwrap();
        let upstream = sb.nb_sock();
        let sessions = Arc::new(AtomicUsize::new(0));
        let fault = Arc::new(Mutex::new(Fault::None));
        let stop = Arc::new(AtomicBool::new(false));
        let client_w: ClientWriter = Arc::default();
        let (n, f, st, cw) = (
            sessions.clone(),
            fault.clone(),
            stop.clone(),
            client_w.clone(),
        );
        std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                let Ok((client, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                };
                let _ = client.set_nonblocking(false);
                let Ok(server) = UnixStream::connect(&upstream) else {
                    continue;
                };
                n.fetch_add(1, Ordering::SeqCst);
                *cw.lock().unwrap() = client.try_clone().ok();
                relay(client, server, f.clone(), cw.clone());
            }
        });
        NbRelay {
            path,
            sessions,
            fault,
            stop,
            client: client_w,
        }
    }

    /// Send `msg` to the client as if the server had, between two of the server's messages.
    fn inject(&self, msg: &[u8]) {
        if let Some(c) = self.client.lock().unwrap().as_mut() {
            for chunk in msg.chunks(1 << 20) {
                if c.write_all(chunk).is_err() {
                    break;
                }
            }
        }
    }

    /// Misbehave on the next transaction only.
    fn arm(&self, f: Fault) {
        *self.fault.lock().unwrap() = f;
    }
}

impl Drop for NbRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn relay(client: UnixStream, server: UnixStream, fault: Arc<Mutex<Fault>>, cw: ClientWriter) {
    let (Ok(mut s2),) = (server.try_clone(),) else {
        return;
    };
    // The id of a transaction whose reply is to come back under another id.
    let rewrite: Arc<Mutex<Option<Value>>> = Arc::default();
    let rw = rewrite.clone();
    std::thread::spawn(move || {
        let msgs = serde_json::Deserializer::from_reader(&server).into_iter::<Value>();
        for m in msgs {
            let Ok(mut m) = m else { break };
            let wrong = {
                let mut r = rw.lock().unwrap();
                match r.as_ref() {
                    Some(id) if m.get("id") == Some(id) && m.get("method").is_none() => r.take(),
                    _ => None,
                }
            };
            if wrong.is_some() {
                m["id"] = Value::from(987_654_321u64);
            }
            let mut w = cw.lock().unwrap();
            let Some(c) = w.as_mut() else { break };
            if c.write_all(m.to_string().as_bytes()).is_err() {
                break;
            }
        }
        if let Some(c) = cw.lock().unwrap().as_mut() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    });
    std::thread::spawn(move || {
        let msgs = serde_json::Deserializer::from_reader(&client).into_iter::<Value>();
        for m in msgs {
            let Ok(m) = m else { break };
            if m.get("method").and_then(Value::as_str) == Some("transact") {
                let f = std::mem::replace(&mut *fault.lock().unwrap(), Fault::None);
                match f {
                    Fault::SwallowTransact => continue,
                    Fault::WrongId => *rewrite.lock().unwrap() = m.get("id").cloned(),
                    Fault::None => {}
                }
            }
            if s2.write_all(m.to_string().as_bytes()).is_err() {
                break;
            }
        }
        let _ = s2.shutdown(std::net::Shutdown::Both);
    });
}

fn with_service(vip: &str) -> String {
    format!(
        r#"{}
- apiVersion: v1
  kind: Service
  metadata: {{name: extra, namespace: team, creationTimestamp: "2026-02-01T00:00:00Z"}}
  spec:
    type: ClusterIP
    externalIPs: ["{vip}"]
    ports: [{{port: 443, protocol: TCP, targetPort: 8443}}]"#,
        base_yaml().trim_end()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_never_answered_or_answered_under_a_wrong_id_ends_the_session_and_is_written_again()
 {
    let sb = Sandbox::start();
    sb.nbctl(&["ls-add", "sw0"]);
    let relay = NbRelay::start(&sb);
    let remote = format!("unix:{}", relay.path.display());
    let y0 = base_yaml();
    let h = Agent::start(
        sb,
        true,
        |c| {
            c.nb_remote = Some(remote);
            c.northbound.switches = vec!["sw0".into()];
            c.nb_timeout_ms = 1000;
        },
        &y0,
    )
    .await;
    assert_eq!(ours_rows(&h.sb), expected_rows(&h.cfg, &y0));

    for (fault, vip) in [
        (Fault::SwallowTransact, "172.18.0.201"),
        (Fault::WrongId, "172.18.0.202"),
    ] {
        let sessions = relay.sessions.load(Ordering::SeqCst);
        relay.arm(fault);
        let y = with_service(vip);
        write_objects(&h.objects, &y);
        let start = Instant::now();
        let want = expected_rows(&h.cfg, &y);
        while ours_rows(&h.sb) != want {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "{fault:?}: rows not written within 15 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let took = start.elapsed();
        let again = relay.sessions.load(Ordering::SeqCst) - sessions;
        println!(
            "{fault:?} (nb-timeout 1 s): the change's rows written {took:?} after it, on {again} new session(s)"
        );
        assert!(again >= 1, "{fault:?}: the session was made again");
    }
}

#[test]
fn a_hostile_notification_is_refused_with_bounded_memory() {
    let hostile: [(&str, Vec<u8>); 3] = [
        ("100 MB of small numbers", {
            let mut m =
                br#"{"id":null,"method":"update3","params":["x","0",{"Load_Balancer":["#.to_vec();
            m.extend("1,".repeat(50_000_000).as_bytes());
            m.extend(br#"1]}]}"#);
            m
        }),
        ("nested 100,000 levels", {
            let mut m = br#"{"id":null,"method":"update3","params":"#.to_vec();
            m.extend("[".repeat(100_000).as_bytes());
            m.extend("]".repeat(100_000).as_bytes());
            m.extend(b"}");
            m
        }),
        ("a 100 MB string", {
            let mut m = br#"{"id":null,"method":"update3","params":[""#.to_vec();
            m.extend("a".repeat(100_000_000).as_bytes());
            m.extend(br#""]}"#);
            m
        }),
    ];
    for (what, msg) in hostile {
        let sb = Sandbox::start();
        sb.nbctl(&["ls-add", "sw0"]);
        let relay = NbRelay::start(&sb);
        let objects =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/services.yaml");
        let log = sb.path().join("agent.log");
        let f = std::fs::File::create(&log).unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_vipflow"))
            .args([
                "agent",
                "--node-name",
                "node-a",
                "--nb-switch",
                "sw0",
                "--objects",
            ])
            .arg(&objects)
            .arg("--ovs-rundir")
            .arg(sb.path())
            .arg("--nb-remote")
            .arg(format!("unix:{}", relay.path.display()))
            .env("VIPFLOW_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap();
        // Killed on drop, also when an assertion below fails.
        let child = testkit::KillOnDrop(child);
        let want = expected_rows(&common_cfg(), &base_yaml());
        let start = Instant::now();
        while ours_rows(&sb) != want {
            assert!(start.elapsed() < Duration::from_secs(20), "first sync");
            std::thread::sleep(Duration::from_millis(20));
        }
        let sessions = relay.sessions.load(Ordering::SeqCst);
        let t = Instant::now();
        relay.inject(&msg);
        while relay.sessions.load(Ordering::SeqCst) == sessions {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "{what}: the session was not dropped"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let took = t.elapsed();
        let peak = testkit::proc_status_kib(child.0.id(), "VmHWM:") / 1024;
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let line = text
            .lines()
            .find(|l| l.contains("session lost") && l.contains("WARN"))
            .unwrap_or_default()
            .to_string();
        drop(child);
        println!(
            "NB peer sends {what}: session dropped {took:?} after, agent peak {peak} MiB; {line}"
        );
        assert!(peak < 256, "{what}: peak {peak} MiB");
    }
}

fn common_cfg() -> vipflow::config::Config {
    let mut c = vipflow::config::Config {
        node_name: "node-a".into(),
        ..Default::default()
    };
    c.northbound.switches = vec!["sw0".into()];
    c
}
