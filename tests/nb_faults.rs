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

struct NbRelay {
    path: PathBuf,
    sessions: Arc<AtomicUsize>,
    fault: Arc<Mutex<Fault>>,
    stop: Arc<AtomicBool>,
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
        let (n, f, st) = (sessions.clone(), fault.clone(), stop.clone());
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
                relay(client, server, f.clone());
            }
        });
        NbRelay {
            path,
            sessions,
            fault,
            stop,
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

fn relay(client: UnixStream, server: UnixStream, fault: Arc<Mutex<Fault>>) {
    let (Ok(c2), Ok(mut s2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    // The id of a transaction whose reply is to come back under another id.
    let rewrite: Arc<Mutex<Option<Value>>> = Arc::default();
    let rw = rewrite.clone();
    std::thread::spawn(move || {
        let mut c2 = c2;
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
            if c2.write_all(m.to_string().as_bytes()).is_err() {
                break;
            }
        }
        let _ = c2.shutdown(std::net::Shutdown::Both);
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
