//! A real 3-member RAFT cluster of OVN Northbound ovsdb-servers on 127.0.0.1.
//!
//! Built with `ovsdb-tool create-cluster` / `join-cluster` in its own temp dir; each member has
//! a pidfile, a unixctl socket, a unix remote and a tcp remote on a free port. Members are
//! stopped by their own pids on drop, never by name.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::check;

pub const NB_SCHEMA: &str = "/usr/share/ovn/ovn-nb.ovsschema";
pub const MEMBERS: usize = 3;

pub struct NbCluster {
    dir: tempfile::TempDir,
    raft_ports: Vec<u16>,
    tcp_ports: Vec<u16>,
}

/// Free ports on 127.0.0.1, all bound at once so they differ (the kernel may hand one out
/// again once released; tests accept that small race).
fn free_ports(n: usize) -> Vec<u16> {
    let ls: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a free port"))
        .collect();
    ls.iter()
        .map(|l| l.local_addr().expect("local addr").port())
        .collect()
}

fn alive(pid: i32) -> bool {
    Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

impl NbCluster {
    /// Create the cluster, start its members and wait until all have joined.
    pub fn start() -> NbCluster {
        let dir = tempfile::Builder::new()
            .prefix("vfc-")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let ports = free_ports(2 * MEMBERS);
        let c = NbCluster {
            dir,
            raft_ports: ports[..MEMBERS].to_vec(),
            tcp_ports: ports[MEMBERS..].to_vec(),
        };
        let db0 = c.file(0, "db");
        let out = Command::new("ovsdb-tool")
            .args(["create-cluster", &db0, NB_SCHEMA, &c.raft(0)])
            .output()
            .expect("spawn ovsdb-tool");
        check("ovsdb-tool", &["create-cluster"], out);
        for i in 1..MEMBERS {
            let out = Command::new("ovsdb-tool")
                .args([
                    "join-cluster",
                    &c.file(i, "db"),
                    "OVN_Northbound",
                    &c.raft(i),
                    &c.raft(0),
                ])
                .output()
                .expect("spawn ovsdb-tool");
            check("ovsdb-tool", &["join-cluster"], out);
        }
        for i in 0..MEMBERS {
            c.restart(i);
        }
        for i in 0..MEMBERS {
            c.wait_connected(i);
        }
        c
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    fn file(&self, i: usize, ext: &str) -> String {
        self.path()
            .join(format!("s{i}.{ext}"))
            .to_string_lossy()
            .into_owned()
    }

    fn raft(&self, i: usize) -> String {
        format!("tcp:127.0.0.1:{}", self.raft_ports[i])
    }

    pub fn sock(&self, i: usize) -> PathBuf {
        self.path().join(format!("s{i}.sock"))
    }

    pub fn unix(&self, i: usize) -> String {
        format!("unix:{}", self.sock(i).display())
    }

    pub fn tcp(&self, i: usize) -> String {
        format!("tcp:127.0.0.1:{}", self.tcp_ports[i])
    }

    /// All members' tcp remotes, as `ovn-nbctl --db` takes them.
    pub fn tcp_remotes(&self) -> String {
        (0..MEMBERS)
            .map(|i| self.tcp(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn unix_remotes(&self) -> String {
        (0..MEMBERS)
            .map(|i| self.unix(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn pid(&self, i: usize) -> Option<i32> {
        std::fs::read_to_string(self.file(i, "pid"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// Start (or start again) member `i` on its existing database file.
    pub fn restart(&self, i: usize) {
        let out = Command::new("ovsdb-server")
            .arg(self.file(i, "db"))
            .arg(format!("--remote=punix:{}", self.sock(i).display()))
            .arg(format!("--remote=ptcp:{}:127.0.0.1", self.tcp_ports[i]))
            .arg(format!("--pidfile={}", self.file(i, "pid")))
            .arg(format!("--unixctl={}", self.file(i, "ctl")))
            .arg(format!("--log-file={}", self.file(i, "log")))
            .args(["-vconsole:off", "--detach", "--no-chdir"])
            .output()
            .expect("spawn ovsdb-server");
        check("ovsdb-server", &[], out);
    }

    /// Wait until member `i` is connected to the cluster (`ovsdb-client wait ... connected`).
    pub fn wait_connected(&self, i: usize) {
        let out = Command::new("ovsdb-client")
            .args([
                "--timeout=60",
                "wait",
                &self.unix(i),
                "OVN_Northbound",
                "connected",
            ])
            .output()
            .expect("spawn ovsdb-client");
        check("ovsdb-client", &["wait", "connected"], out);
    }

    /// `ovs-appctl -t sI.ctl cluster/status OVN_Northbound`.
    pub fn status(&self, i: usize) -> Option<String> {
        let out = Command::new("ovs-appctl")
            .args([
                "-t",
                &self.file(i, "ctl"),
                "cluster/status",
                "OVN_Northbound",
            ])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Index of the member that says it is the leader, if one does now.
    pub fn leader(&self) -> Option<usize> {
        (0..MEMBERS).find(|&i| {
            self.pid(i).is_some_and(alive)
                && self
                    .status(i)
                    .is_some_and(|s| s.lines().any(|l| l.trim() == "Role: leader"))
        })
    }

    /// Wait for a leader (an election takes a few election timeouts).
    pub fn wait_leader(&self) -> usize {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(30) {
            if let Some(l) = self.leader() {
                return l;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no cluster leader after 30 s in {}", self.path().display());
    }

    /// SIGKILL member `i` by its pid and wait until it is gone.
    pub fn kill(&self, i: usize) {
        let Some(pid) = self.pid(i) else {
            panic!("no pid for member {i}");
        };
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        for _ in 0..500 {
            if !alive(pid) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_file(self.file(i, "pid"));
    }

    /// `ovn-nbctl --db=<all unix remotes>` (it finds the leader itself).
    pub fn nbctl(&self, args: &[&str]) -> String {
        let db = format!("--db={}", self.unix_remotes());
        let mut all = vec![db.as_str(), "--timeout=30"];
        all.extend_from_slice(args);
        let out = Command::new("ovn-nbctl")
            .args(&all)
            .output()
            .expect("spawn ovn-nbctl");
        check("ovn-nbctl", args, out)
    }
}

impl Drop for NbCluster {
    fn drop(&mut self) {
        for i in 0..MEMBERS {
            if let Some(pid) = self.pid(i) {
                let _ = Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status();
            }
        }
    }
}
