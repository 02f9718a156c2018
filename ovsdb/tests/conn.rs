//! Session-level behaviour: echo both ways, dead peer, hostile bytes from the peer, and TLS
//! against a real ovsdb-server with certificates made by openssl in the test's temp dir.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ovsdb::{
    Client, ClientOptions, ConnectOptions, Connection, Error, Remote, TlsFiles, Transaction,
};
use serde_json::{Value as Json, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A peer on 127.0.0.1 that runs `script` on the accepted socket.
async fn peer<F, Fut>(script: F) -> Remote
where
    F: FnOnce(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        script(s).await;
    });
    Remote::parse(&format!("tcp:127.0.0.1:{port}")).unwrap()
}

fn opts(probe_ms: u64, max: usize) -> ConnectOptions {
    ConnectOptions {
        probe_interval: Some(Duration::from_millis(probe_ms)),
        max_message: max,
        ..Default::default()
    }
}

#[tokio::test]
async fn dead_peer_is_detected_by_our_probe() {
    let remote = peer(|s| async move {
        // Reads and never answers.
        let mut s = s;
        let mut buf = vec![0; 4096];
        while s.read(&mut buf).await.map(|n| n > 0).unwrap_or(false) {}
    })
    .await;
    let (c, _n) = Connection::connect(&remote, &opts(100, 1 << 20))
        .await
        .unwrap();
    let e = c.call("list_dbs", json!([])).await.unwrap_err();
    assert!(matches!(e, Error::Lost { .. }), "{e}");
    assert!(e.outcome_unknown());
    assert!(
        c.close_reason().unwrap().contains("dead-peer"),
        "{:?}",
        c.close_reason()
    );
}

#[tokio::test]
async fn answers_the_servers_echo() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let remote = peer(|mut s| async move {
        s.write_all(br#"{"id":"e1","method":"echo","params":[7,"x"]}"#)
            .await
            .unwrap();
        let mut buf = vec![0; 4096];
        let n = s.read(&mut buf).await.unwrap();
        let _ = tx.send(serde_json::from_slice::<Json>(&buf[..n]).unwrap());
        tokio::time::sleep(Duration::from_secs(1)).await;
    })
    .await;
    let (_c, _n) = Connection::connect(&remote, &opts(5000, 1 << 20))
        .await
        .unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(5), rx)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        reply,
        json!({"id": "e1", "result": [7, "x"], "error": null})
    );
}

async fn hostile(bytes: &'static [u8], max: usize) -> String {
    let remote = peer(move |mut s| async move {
        let _ = s.write_all(bytes).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
    })
    .await;
    let (c, _n) = Connection::connect(&remote, &opts(5000, max))
        .await
        .unwrap();
    let e = c.call("list_dbs", json!([])).await.unwrap_err();
    assert!(e.outcome_unknown(), "{e}");
    let r = c.close_reason().unwrap();
    eprintln!("closed: {r}");
    r
}

#[tokio::test]
async fn hostile_peer_gets_a_clear_error() {
    assert!(
        hostile(br#"{"id":1,"result":[1,2}]}"#, 1 << 20)
            .await
            .contains("not valid JSON")
    );
    assert!(
        hostile(b"<html>", 1 << 20)
            .await
            .contains("unexpected byte")
    );
    assert!(
        hostile(br#"{"hello":"world"}"#, 1 << 20)
            .await
            .contains("malformed JSON-RPC")
    );
    assert!(
        hostile(br#"{"method":17,"params":[],"id":null}"#, 1 << 20)
            .await
            .contains("malformed JSON-RPC")
    );
    let big: &'static [u8] = Box::leak(
        format!("{{\"id\":1,\"result\":\"{}\"}}", "x".repeat(100_000))
            .into_bytes()
            .into_boxed_slice(),
    );
    assert!(hostile(big, 4096).await.contains("cap"));
    // Stray ids and unknown notifications are ignored, not fatal.
    let remote = peer(|mut s| async move {
        s.write_all(
            br#"{"id":999,"result":[],"error":null}{"id":null,"method":"whatever","params":[]}"#,
        )
        .await
        .unwrap();
        let mut buf = vec![0; 4096];
        let n = s.read(&mut buf).await.unwrap();
        let req: Json = serde_json::from_slice(&buf[..n]).unwrap();
        let reply = json!({"id": req["id"], "result": ["DB"], "error": null});
        s.write_all(reply.to_string().as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
    })
    .await;
    let (c, _n) = Connection::connect(&remote, &opts(5000, 1 << 20))
        .await
        .unwrap();
    assert_eq!(c.call("list_dbs", json!([])).await.unwrap(), json!(["DB"]));
}

#[tokio::test]
async fn connect_errors_name_the_remote() {
    let remote = Remote::parse("unix:/nonexistent/vipflow.sock").unwrap();
    let e = Connection::connect(&remote, &ConnectOptions::default())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("/nonexistent/vipflow.sock"), "{e}");
    let mut o = ClientOptions::new(
        "unix:/nonexistent/a.sock,unix:/nonexistent/b.sock",
        "OVN_Northbound",
    )
    .unwrap();
    o.wait_timeout = Duration::from_millis(200);
    let e = Client::connect(o).await.err().unwrap();
    assert!(
        matches!(e, Error::NoServer { .. }) && e.to_string().contains("b.sock"),
        "{e}"
    );
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA and a leaf certificate signed by it (no host names, as ovs-pki makes them).
fn make_pki(dir: &Path, ca: &str, leaves: &[&str]) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut a = vec!["req", "-x509"];
    a.extend(ec);
    let (cakey, capem, subj) = (
        format!("{ca}.key"),
        format!("{ca}.pem"),
        format!("/CN={ca}"),
    );
    a.extend([
        "-keyout", &cakey, "-out", &capem, "-days", "2", "-subj", &subj,
    ]);
    openssl(dir, &a);
    std::fs::write(dir.join("leaf.ext"), "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n").unwrap();
    for leaf in leaves {
        let (key, csr, pem, subj) = (
            format!("{leaf}.key"),
            format!("{leaf}.csr"),
            format!("{leaf}.pem"),
            format!("/CN={leaf}"),
        );
        let mut a = vec!["req"];
        a.extend(ec);
        a.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
        openssl(dir, &a);
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &capem,
                "-CAkey",
                &cakey,
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "2",
                "-extfile",
                "leaf.ext",
            ],
        );
    }
}

#[tokio::test]
async fn ssl_remote_with_mutual_tls() {
    let pki = tempfile::tempdir().unwrap();
    let d = pki.path();
    make_pki(d, "ca", &["server", "client"]);
    make_pki(d, "otherca", &["stranger"]);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let p = |f: &str| d.join(f).to_string_lossy().into_owned();
    let srv = common::NbServer::start_with(&[
        format!("--private-key={}", p("server.key")),
        format!("--certificate={}", p("server.pem")),
        format!("--ca-cert={}", p("ca.pem")),
        format!("--remote=pssl:{port}:127.0.0.1"),
    ]);
    let files = TlsFiles {
        private_key: d.join("client.key"),
        certificate: d.join("client.pem"),
        ca_cert: d.join("ca.pem"),
    };
    let mut o = ClientOptions::new(&format!("ssl:127.0.0.1:{port}"), "OVN_Northbound").unwrap();
    o.connect.tls = Some(ovsdb::tls::client_config(&files).unwrap());
    let mut c = None;
    // The listener may take a moment to appear.
    for _ in 0..50 {
        match Client::connect(o.clone()).await {
            Ok(cl) => {
                c = Some(cl);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let c = c.expect("ssl connect");
    let mut tx = Transaction::new("OVN_Northbound");
    tx.insert(
        "Load_Balancer",
        [("name".to_owned(), ovsdb::Value::from("over-tls"))].into(),
    );
    c.transact(&tx).await.unwrap();
    assert!(
        srv.nbctl(&["--bare", "--columns=name", "list", "Load_Balancer"])
            .contains("over-tls")
    );

    // A server certificate from another CA is refused.
    let files = TlsFiles {
        private_key: d.join("stranger.key"),
        certificate: d.join("stranger.pem"),
        ca_cert: d.join("otherca.pem"),
    };
    let mut o2 = o.clone();
    o2.connect.tls = Some(ovsdb::tls::client_config(&files).unwrap());
    o2.wait_timeout = Duration::from_millis(300);
    assert!(Client::connect(o2).await.is_err());
    // Missing files are reported with their path.
    let bad = TlsFiles {
        private_key: d.join("nope.key"),
        certificate: d.join("client.pem"),
        ca_cert: d.join("ca.pem"),
    };
    let e = ovsdb::tls::client_config(&bad).unwrap_err();
    assert!(e.to_string().contains("nope.key"), "{e}");
}

/// Answer one request as a standalone OVN_Northbound server would, enough to look connected.
fn scripted_answer(method: &str, params: &Json) -> Json {
    match method {
        "transact" if params.get(0).and_then(Json::as_str) == Some("_Server") => {
            json!([{"rows": [{"model": "standalone", "connected": true, "leader": true}]}])
        }
        "get_schema" => serde_json::from_str(
            &std::fs::read_to_string(common::NB_SCHEMA).expect("read the NB schema"),
        )
        .expect("schema JSON"),
        "monitor_cond_since" => json!([false, "00000000-0000-0000-0000-000000000000", {}]),
        "echo" => params.clone(),
        _ => json!({}),
    }
}

/// A peer on a unix socket that counts the connections it accepts; each answers the
/// handshake and the `_Server` monitor, then closes after `close_after`.
async fn flaky_peer(
    sock: &Path,
    close_after: Duration,
) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    let l = tokio::net::UnixListener::bind(sock).unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let mut closing: Option<tokio::time::Instant> = None;
                loop {
                    let read = match closing {
                        Some(at) => match tokio::time::timeout_at(at, s.read(&mut chunk)).await {
                            Ok(r) => r,
                            Err(_) => return,
                        },
                        None => s.read(&mut chunk).await,
                    };
                    let n = match read {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    buf.extend_from_slice(&chunk[..n]);
                    let mut it = serde_json::Deserializer::from_slice(&buf).into_iter::<Json>();
                    let mut msgs = vec![];
                    while let Some(Ok(m)) = it.next() {
                        msgs.push(m);
                    }
                    let used = it.byte_offset();
                    buf.drain(..used);
                    for m in msgs {
                        let method = m["method"].as_str().unwrap_or_default().to_string();
                        if m["id"].is_null() {
                            continue;
                        }
                        let result = scripted_answer(&method, &m["params"]);
                        let reply = json!({"id": m["id"], "result": result, "error": null});
                        if s.write_all(reply.to_string().as_bytes()).await.is_err() {
                            return;
                        }
                        if method == "monitor_cond" && closing.is_none() {
                            closing = Some(tokio::time::Instant::now() + close_after);
                        }
                    }
                }
            });
        }
    });
    accepted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_fails_right_after_connecting_is_not_redialled_in_a_storm() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("nb.sock");
    let accepted = flaky_peer(&sock, Duration::from_millis(20)).await;
    let mut o = ClientOptions::new(&format!("unix:{}", sock.display()), "OVN_Northbound").unwrap();
    o.backoff_min = Duration::from_millis(100);
    o.backoff_max = Duration::from_secs(2);
    let client = Client::connect(o).await.unwrap();
    let start = std::time::Instant::now();
    let before = accepted.load(std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let n = accepted.load(std::sync::atomic::Ordering::SeqCst) - before;
    println!(
        "connections accepted in {:?} from a peer that fails right after each connect: {n}",
        start.elapsed()
    );
    assert!(n <= 5, "{n} connections in 2 s");
    drop(client);
}
