//! A standalone OVN Northbound ovsdb-server in its own temp dir, for tests and the bench.
#![allow(dead_code)]

pub mod scenarios;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value as Json;

pub const NB_SCHEMA: &str = "/usr/share/ovn/ovn-nb.ovsschema";

/// A real ovsdb-server with the OVN_Northbound schema on a unix socket and a 127.0.0.1 port it
/// picked itself. Stopped by its pid on drop.
pub struct NbServer {
    dir: tempfile::TempDir,
    pid: i32,
    port: u16,
}

fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
    if !out.status.success() {
        panic!(
            "{program} {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl NbServer {
    pub fn start() -> NbServer {
        Self::start_with(&[])
    }

    /// Extra ovsdb-server arguments (e.g. TLS options and a `--remote=pssl:...`).
    pub fn start_with(extra: &[String]) -> NbServer {
        let dir = tempfile::Builder::new()
            .prefix("vfdb-")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let d = dir.path();
        let db = d.join("nb.db");
        run("ovsdb-tool", &["create", &db.to_string_lossy(), NB_SCHEMA]);
        let p = |n: &str| d.join(n).to_string_lossy().into_owned();
        let mut args = vec![
            p("nb.db"),
            format!("--remote=punix:{}", p("nb.sock")),
            "--remote=ptcp:0:127.0.0.1".to_owned(),
            format!("--pidfile={}", p("nb.pid")),
            format!("--unixctl={}", p("nb.ctl")),
            format!("--log-file={}", p("nb.log")),
            "-vconsole:off".to_owned(),
            "--detach".to_owned(),
            "--no-chdir".to_owned(),
        ];
        args.extend(extra.iter().cloned());
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        run("ovsdb-server", &a);
        let pid: i32 = std::fs::read_to_string(d.join("nb.pid"))
            .expect("pidfile")
            .trim()
            .parse()
            .expect("pid");
        let port = wait_port(&d.join("nb.log"), 0);
        NbServer { dir, pid, port }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn sock(&self) -> PathBuf {
        self.path().join("nb.sock")
    }

    pub fn unix(&self) -> String {
        format!("unix:{}", self.sock().display())
    }

    pub fn tcp(&self) -> String {
        format!("tcp:127.0.0.1:{}", self.port)
    }

    /// Port of the n-th ptcp/pssl listener in the log (0-based, in the order given).
    pub fn port(&self, n: usize) -> u16 {
        wait_port(&self.path().join("nb.log"), n)
    }

    pub fn nbctl(&self, args: &[&str]) -> String {
        let db = format!("--db={}", self.unix());
        let mut all = vec![db.as_str(), "--timeout=20"];
        all.extend_from_slice(args);
        run("ovn-nbctl", &all)
    }

    /// `ovsdb-client dump -f json` of one table, as (headings, rows).
    pub fn dump(&self, table: &str) -> Json {
        dump(&self.unix(), table)
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Kill the server and start a new one with an empty database on the same socket: what a
    /// client sees when a standalone server is replaced.
    pub fn replace_with_empty(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", &self.pid.to_string()])
            .status();
        for _ in 0..500 {
            let alive = Command::new("kill")
                .args(["-0", &self.pid.to_string()])
                .stderr(std::process::Stdio::null())
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if !alive {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let d = self.path().to_path_buf();
        let p = |n: &str| d.join(n).to_string_lossy().into_owned();
        for f in ["nb.db", "nb.sock", "nb.pid", "nb.ctl", ".nb.db.~lock~"] {
            let _ = std::fs::remove_file(d.join(f));
        }
        run("ovsdb-tool", &["create", &p("nb.db"), NB_SCHEMA]);
        run(
            "ovsdb-server",
            &[
                &p("nb.db"),
                &format!("--remote=punix:{}", p("nb.sock")),
                &format!("--pidfile={}", p("nb.pid")),
                &format!("--unixctl={}", p("nb.ctl")),
                &format!("--log-file={}", p("nb.log")),
                "-vconsole:off",
                "--detach",
                "--no-chdir",
            ],
        );
        self.pid = std::fs::read_to_string(d.join("nb.pid"))
            .expect("pidfile")
            .trim()
            .parse()
            .expect("pid");
    }
}

/// Rows keyed by uuid from an `ovsdb-client dump -f json` of `table`.
pub fn dump_rows(
    schema: &ovsdb::DatabaseSchema,
    table: &str,
    dump: &Json,
) -> std::collections::BTreeMap<ovsdb::Uuid, ovsdb::Row> {
    let heads: Vec<&str> = dump["headings"]
        .as_array()
        .expect("headings")
        .iter()
        .map(|h| h.as_str().expect("heading"))
        .collect();
    let mut out = std::collections::BTreeMap::new();
    for r in dump["data"].as_array().expect("data") {
        let obj: serde_json::Map<String, Json> = heads
            .iter()
            .zip(r.as_array().expect("row"))
            .map(|(h, v)| ((*h).to_owned(), v.clone()))
            .collect();
        let mut row = schema
            .decode_row(table, &Json::Object(obj))
            .expect("row decodes");
        let uuid = row
            .remove("_uuid")
            .and_then(|v| v.as_atom().and_then(ovsdb::Atom::as_uuid))
            .expect("_uuid");
        out.insert(uuid, row);
    }
    out
}

pub fn dump(remote: &str, table: &str) -> Json {
    let out = run(
        "ovsdb-client",
        &["dump", "-f", "json", remote, "OVN_Northbound", table],
    );
    serde_json::from_str(&out).expect("dump json")
}

fn wait_port(log: &Path, n: usize) -> u16 {
    for _ in 0..500 {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let ports: Vec<u16> = text
            .lines()
            .filter_map(|l| l.split("listening on port ").nth(1))
            .filter_map(|p| p.trim().parse().ok())
            .collect();
        if let Some(p) = ports.get(n) {
            return *p;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("no listening port {n} in {}", log.display());
}

impl Drop for NbServer {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status();
    }
}
