//! Test helpers: an isolated, real OVS/OVN sandbox per test, and what every test shares:
//! [`eventually`] (and [`eventually_async`]) and the agent's cookie prefix ([`COOKIE_PREFIX`]).
//!
//! Each [`Sandbox`] lives in its own temporary directory with its own sockets, pidfiles and logs,
//! so tests run in parallel without seeing each other. Daemons are started by
//! `scripts/sandbox.sh` and stopped by the pids recorded in the directory when the sandbox is
//! dropped, which also happens while a failing test unwinds.
//!
//! The helpers panic on failure: they are for tests, where a broken sandbox should fail loudly
//! with the command and its output.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub mod bgp_objects;
pub mod bgp_testbed;
pub mod cluster;
pub mod frr;
pub mod kube_server;
pub mod netns;
pub mod testbed;

/// Which daemons a sandbox starts.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// OVN NB/SB databases and ovn-northd.
    pub ovn: bool,
    /// br-ex (with eth0 and a patch port) and br-int.
    pub bridges: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            ovn: true,
            bridges: true,
        }
    }
}

/// A running sandbox; stopped and removed on drop.
pub struct Sandbox {
    dir: tempfile::TempDir,
    keep: bool,
}

/// Path of the repository's `scripts/` directory.
pub fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts")
}

impl Sandbox {
    /// Full sandbox: OVS with br-ex/br-int plus OVN NB, SB and northd.
    pub fn start() -> Sandbox {
        Self::with_options(Options::default())
    }

    /// OVS with br-ex/br-int only (no OVN): for OpenFlow tests.
    pub fn openflow_only() -> Sandbox {
        Self::with_options(Options {
            ovn: false,
            bridges: true,
        })
    }

    pub fn with_options(opts: Options) -> Sandbox {
        // Short prefix under /tmp: unix socket paths are limited to 108 bytes.
        let dir = tempfile::Builder::new()
            .prefix("vf-")
            .tempdir_in("/tmp")
            .expect("create sandbox dir");
        let sb = Sandbox {
            dir,
            keep: std::env::var_os("VIPFLOW_KEEP_SANDBOX").is_some(),
        };
        let out = Command::new(scripts_dir().join("sandbox.sh"))
            .arg("start")
            .arg(sb.path())
            .env("SANDBOX_OVN", if opts.ovn { "1" } else { "0" })
            .env("SANDBOX_BRIDGES", if opts.bridges { "1" } else { "0" })
            .output()
            .expect("run scripts/sandbox.sh");
        if !out.status.success() {
            panic!(
                "sandbox start failed in {}:\n{}{}",
                sb.path().display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        sb
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// OpenFlow management socket of a bridge, e.g. `<dir>/br-ex.mgmt`.
    pub fn mgmt_sock(&self, bridge: &str) -> PathBuf {
        self.path().join(format!("{bridge}.mgmt"))
    }

    /// The OVS database socket.
    pub fn db_sock(&self) -> PathBuf {
        self.path().join("db.sock")
    }

    pub fn nb_sock(&self) -> PathBuf {
        self.path().join("ovnnb_db.sock")
    }

    pub fn sb_sock(&self) -> PathBuf {
        self.path().join("ovnsb_db.sock")
    }

    /// A command with the sandbox's environment (OVS_RUNDIR, OVN_NB_DB, ...).
    pub fn command(&self, program: &str) -> Command {
        let d = self.path();
        let mut c = Command::new(program);
        for var in ["OVS_RUNDIR", "OVS_LOGDIR", "OVS_DBDIR", "OVS_SYSCONFDIR"] {
            c.env(var, d);
        }
        for var in ["OVN_RUNDIR", "OVN_LOGDIR", "OVN_DBDIR", "OVN_SYSCONFDIR"] {
            c.env(var, d);
        }
        c.env("OVN_NB_DB", format!("unix:{}", self.nb_sock().display()));
        c.env("OVN_SB_DB", format!("unix:{}", self.sb_sock().display()));
        c
    }

    /// Run a sandbox command, panic with its output if it fails, return its stdout.
    pub fn run(&self, program: &str, args: &[&str]) -> String {
        let out = self
            .command(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| {
                panic!("spawn {program}: {e}");
            });
        check(program, args, out)
    }

    /// Run a sandbox command and return its full output, whatever its exit status.
    pub fn run_raw(&self, program: &str, args: &[&str]) -> Output {
        self.command(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| {
                panic!("spawn {program}: {e}");
            })
    }

    pub fn vsctl(&self, args: &[&str]) -> String {
        let db = format!("--db=unix:{}", self.db_sock().display());
        let mut all = vec![db.as_str(), "--timeout=10"];
        all.extend_from_slice(args);
        self.run("ovs-vsctl", &all)
    }

    /// `ovs-ofctl -O OpenFlow13 ARGS`.
    pub fn ofctl(&self, args: &[&str]) -> String {
        let mut all = vec!["-O", "OpenFlow13"];
        all.extend_from_slice(args);
        self.run("ovs-ofctl", &all)
    }

    /// `ovs-appctl -t <dir>/ovs-vswitchd.ctl ARGS`.
    pub fn appctl(&self, args: &[&str]) -> String {
        let target = self.path().join("ovs-vswitchd.ctl");
        let target = target.to_string_lossy().into_owned();
        let mut all = vec!["-t", target.as_str()];
        all.extend_from_slice(args);
        self.run("ovs-appctl", &all)
    }

    pub fn nbctl(&self, args: &[&str]) -> String {
        self.run("ovn-nbctl", args)
    }

    /// Pid of a daemon started in this sandbox (`ovs-vswitchd`, `ovsdb-server`, `ovnnb_db`,
    /// `ovnsb_db`, `ovn-northd`).
    pub fn pid(&self, daemon: &str) -> Option<i32> {
        std::fs::read_to_string(self.path().join(format!("{daemon}.pid")))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// SIGKILL a daemon of this sandbox (by its recorded pid) and wait until it is gone.
    pub fn kill(&self, daemon: &str) {
        let Some(pid) = self.pid(daemon) else {
            panic!("no pid recorded for {daemon}");
        };
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        for _ in 0..500 {
            if !alive(pid) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = std::fs::remove_file(self.path().join(format!("{daemon}.pid")));
    }

    /// Start ovs-vswitchd again after [`Sandbox::kill`]: the bridges come back from the
    /// database with no flows (what a node sees after an OVS restart).
    pub fn restart_vswitchd(&self) {
        let d = self.path();
        let out = self
            .command("ovs-vswitchd")
            .arg(format!("unix:{}", self.db_sock().display()))
            .args([
                "--enable-dummy=override",
                "--disable-system",
                "-vconsole:off",
            ])
            .args(vswitchd_files(d))
            .args(["--detach", "--no-chdir"])
            .output()
            .expect("spawn ovs-vswitchd");
        check("ovs-vswitchd", &[], out);
        // The management socket is recreated once the bridge is up again.
        for _ in 0..400 {
            if self.mgmt_sock("br-ex").exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("br-ex.mgmt did not come back after restarting ovs-vswitchd");
    }
}

impl Sandbox {
    /// Add `name` to br-ex as a dummy interface asking for OpenFlow port `ofport` (the
    /// sandbox's uplink is such a port, eth0 on 1).
    pub fn add_dummy_port(&self, name: &str, ofport: u32) {
        self.vsctl(&[
            "add-port",
            "br-ex",
            name,
            "--",
            "set",
            "interface",
            name,
            "type=dummy",
            &format!("ofport_request={ofport}"),
        ]);
    }

    /// SIGKILL the NB ovsdb-server and start it again on its database file, or with `fresh` on
    /// a new, empty one (a restore from nothing). Returns once its socket accepts.
    pub fn restart_nb(&self, fresh: bool) {
        self.kill("ovnnb_db");
        let d = self.path();
        let db = d.join("ovnnb_db.db");
        let _ = std::fs::remove_file(self.nb_sock());
        if fresh {
            let _ = std::fs::remove_file(&db);
            let schema = std::env::var("NB_SCHEMA")
                .unwrap_or_else(|_| "/usr/share/ovn/ovn-nb.ovsschema".to_string());
            self.run(
                "ovsdb-tool",
                &["create", &db.display().to_string(), &schema],
            );
        }
        self.run(
            "ovsdb-server",
            &[
                &db.display().to_string(),
                &format!("--remote=punix:{}", self.nb_sock().display()),
                &format!("--pidfile={}", d.join("ovnnb_db.pid").display()),
                &format!("--unixctl={}", d.join("ovnnb_db.ctl").display()),
                &format!("--log-file={}", d.join("ovnnb_db.log").display()),
                "-vconsole:off",
                "--detach",
                "--no-chdir",
            ],
        );
        for _ in 0..500 {
            if std::os::unix::net::UnixStream::connect(self.nb_sock()).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("the NB ovsdb-server did not come back");
    }
}

/// ovs-vswitchd's pidfile, control socket and log under `dir`, as the scripts name them.
pub(crate) fn vswitchd_files(dir: &Path) -> [String; 3] {
    [
        format!("--pidfile={}", dir.join("ovs-vswitchd.pid").display()),
        format!("--unixctl={}", dir.join("ovs-vswitchd.ctl").display()),
        format!("--log-file={}", dir.join("ovs-vswitchd.log").display()),
    ]
}

pub(crate) fn check(program: &str, args: &[&str], out: Output) -> String {
    if !out.status.success() {
        panic!(
            "{program} {} failed ({}):\n{}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = Command::new(scripts_dir().join("sandbox.sh"))
            .arg("stop")
            .arg(self.path())
            .output();
        if self.keep {
            // Keep the logs of a failing test for a look afterwards.
            let path = self.path().to_path_buf();
            let _ = std::fs::create_dir_all(&path);
            eprintln!("sandbox logs kept at {}", path.display());
            let _ = std::fs::rename(&path, path.with_extension("kept"));
        }
    }
}

/// A child process that is SIGKILLed and reaped when dropped, also when a test panics.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `/proc/<pid>/status` figure in KiB (`VmHWM:` for peak memory, `VmRSS:`); 0 if unknown.
pub fn proc_status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Whether `pid` is running. An exited but unreaped process (a zombie: the init of some
/// containers never reaps re-parented daemons) counts as gone.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses, which may contain spaces.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|s| s != "Z"),
        Err(_) => false,
    }
}

/// The cookie prefix the agent's flows carry unless configured otherwise (the agent's
/// `config::DEFAULT_COOKIE_PREFIX`): the top 16 bits of every cookie it writes. The tests find
/// the agent's flows by it.
pub const COOKIE_PREFIX: u16 = 0x7f1f;

/// How `ovs-ofctl dump-flows` begins a line of the agent's flows: `cookie=0x7f1f`.
pub fn our_cookie() -> String {
    format!("cookie={COOKIE_PREFIX:#x}")
}

/// The `ovs-ofctl` match for exactly the agent's flows: [`COOKIE_PREFIX`] under its mask.
pub fn our_cookie_match() -> String {
    format!(
        "cookie={:#018x}/{:#018x}",
        u64::from(COOKIE_PREFIX) << 48,
        0xffff_u64 << 48
    )
}

/// Poll `f` every 20 ms until it holds; fail the test, naming `what`, if it does not within
/// `secs` seconds.
pub fn eventually(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let wait = Wait::new(what, secs);
    while !wait.holds(&mut f) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// [`eventually`] for async tests, polling every 50 ms: it pauses on the runtime instead of
/// blocking it, so that an agent running on the test's runtime goes on meanwhile.
pub async fn eventually_async(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let wait = Wait::new(what, secs);
    while !wait.holds(&mut f) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One wait for a condition: its deadline, and what to say when it passes.
struct Wait<'a> {
    what: &'a str,
    secs: u64,
    deadline: Instant,
}

impl<'a> Wait<'a> {
    fn new(what: &'a str, secs: u64) -> Wait<'a> {
        Wait {
            what,
            secs,
            deadline: Instant::now() + Duration::from_secs(secs),
        }
    }

    /// Whether `f` holds now; panics instead once the deadline has passed.
    fn holds(&self, f: &mut impl FnMut() -> bool) -> bool {
        if Instant::now() >= self.deadline {
            panic!("timed out after {} s waiting for: {}", self.secs, self.what);
        }
        f()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_cookie_texts_are_as_ovs_ofctl_writes_them() {
        assert_eq!(super::our_cookie(), "cookie=0x7f1f");
        assert_eq!(
            super::our_cookie_match(),
            "cookie=0x7f1f000000000000/0xffff000000000000"
        );
    }
}
