//! FRR (Debian's package) for tests: `zebra`, `bgpd` and `bfdd` in a network namespace, a new one
//! of the instance's own ([`Frr::start`]) or one that exists already ([`Frr::start_in`], a
//! testbed node's), with every socket, pid file and log in the instance's own directory (FRR's
//! control sockets live in the filesystem, not in the namespace), driven through `vtysh
//! --vty_socket`. The daemons run as FRR's own user, which vtysh's group requires. Stopped by
//! their pids on drop, and a namespace the instance made removed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Whether FRR's daemons and vtysh are installed (`scripts/install-deps.sh`).
pub fn installed() -> bool {
    ["/usr/lib/frr/bgpd", "/usr/lib/frr/zebra", "/usr/bin/vtysh"]
        .iter()
        .all(|p| Path::new(p).exists())
}

/// One FRR instance.
pub struct Frr {
    dir: tempfile::TempDir,
    ns: String,
    /// The namespace is the instance's, removed with it.
    owns_ns: bool,
}

impl Frr {
    /// Start zebra, bgpd and bfdd in a new namespace `ns` (its loopback up) with `config` (FRR's
    /// configuration text). `None` without root or namespaces; FRR missing is a failure
    /// (`scripts/install-deps.sh` installs it).
    pub fn start(ns: &str, config: &str) -> Option<Frr> {
        if !crate::netns::can_make_namespaces() {
            return None;
        }
        let mut frr = Frr::new(ns, false);
        run("ip", &["netns", "add", ns]);
        // Only a namespace this call made is removed on drop, never one whose name was taken.
        frr.owns_ns = true;
        run("ip", &["-n", ns, "link", "set", "lo", "up"]);
        frr.launch(config);
        Some(frr)
    }

    /// Start zebra, bgpd and bfdd in the namespace `ns`, which exists and stays when the
    /// instance goes (a testbed node's), with `config`. Panics where FRR cannot run: the
    /// caller made the namespace, so it can.
    pub fn start_in(ns: &str, config: &str) -> Frr {
        let frr = Frr::new(ns, false);
        frr.launch(config);
        frr
    }

    fn new(ns: &str, owns_ns: bool) -> Frr {
        assert!(
            installed(),
            "FRR is not installed: run scripts/install-deps.sh"
        );
        let dir = tempfile::Builder::new()
            .prefix("vf-frr-")
            .tempdir_in("/tmp")
            .expect("FRR's directory");
        Frr {
            dir,
            ns: ns.to_string(),
            owns_ns,
        }
    }

    /// The daemons, then `config` through vtysh.
    fn launch(&self, config: &str) {
        let ns = self.ns.as_str();
        let conf = self.path().join("frr.conf");
        std::fs::write(&conf, config).expect("FRR's configuration");
        run(
            "chown",
            &["-R", "frr:frr", &self.path().display().to_string()],
        );
        let d = self.path().display().to_string();
        for daemon in ["zebra", "bfdd", "bgpd"] {
            let mut args = vec![
                "netns".to_string(),
                "exec".into(),
                ns.into(),
                format!("/usr/lib/frr/{daemon}"),
                "-d".into(),
                "-u".into(),
                "frr".into(),
                "-g".into(),
                "frr".into(),
                "-z".into(),
                format!("{d}/zserv.api"),
                "--vty_socket".into(),
                d.clone(),
                "-i".into(),
                format!("{d}/{daemon}.pid"),
                "--log".into(),
                format!("file:{d}/{daemon}.log"),
                "-f".into(),
            ];
            // Each daemon starts empty; the configuration goes in through vtysh, which hands
            // each daemon its part (a `bfd` block is bfdd's), as the agent does.
            args.push("/dev/null".into());
            if daemon == "bfdd" {
                args.push("--bfdctl".into());
                args.push(format!("{d}/bfdd.sock"));
            }
            if daemon == "zebra" {
                // The netlink receive buffer Debian's FRR (and deploy/bgp's sidecar) gives
                // zebra: with the kernel's default a burst of link and route changes can
                // overflow it, and zebra's view of the interfaces goes stale.
                args.push("-s".into());
                args.push("90000000".into());
            }
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            run("ip", &a);
        }
        let start = Instant::now();
        while self.vtysh(&["show version"]).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "FRR did not come up in {}",
                self.path().display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut c = Command::new("vtysh");
        c.arg("--vty_socket").arg(self.path()).arg("-f").arg(&conf);
        if let Err(e) = output(c) {
            panic!("FRR refused its configuration:\n{config}\n{e}");
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn ns(&self) -> &str {
        &self.ns
    }

    /// The log of `daemon` (`zebra`, `bgpd`, `bfdd`), for a failure's message.
    pub fn log(&self, daemon: &str) -> String {
        std::fs::read_to_string(self.path().join(format!("{daemon}.log"))).unwrap_or_default()
    }

    /// `vtysh -c` for each command, in order; its output, or its error output.
    /// The communities and large communities (as FRR prints them, empty when none) of the first
    /// path this instance holds for `prefix` in `family` (`ipv4`, `ipv6`); `None` when it holds
    /// none.
    pub fn route_communities(&self, family: &str, prefix: &str) -> Option<(String, String)> {
        let text = self
            .vtysh(&[&format!("show bgp {family} unicast {prefix} json")])
            .ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        let p = v["paths"].as_array()?.first()?;
        let of = |key: &str| p[key]["string"].as_str().unwrap_or_default().to_string();
        Some((of("community"), of("largeCommunity")))
    }

    pub fn vtysh(&self, commands: &[&str]) -> Result<String, String> {
        let mut c = Command::new("vtysh");
        c.arg("--vty_socket").arg(self.path());
        for cmd in commands {
            c.args(["-c", cmd]);
        }
        output(c)
    }
}

/// A veth between `a`'s and `b`'s namespaces, `eth-<tag>` on both sides, addressed
/// `a_addr` and `b_addr` (with their prefix lengths, e.g. `10.9.0.1/24`). Removed with the
/// namespaces.
pub fn link(a: &Frr, a_addr: &str, b: &Frr, b_addr: &str, tag: &str) {
    let (x, y) = (format!("vfa{tag}"), format!("vfb{tag}"));
    run(
        "ip",
        &["link", "add", &x, "type", "veth", "peer", "name", &y],
    );
    for (frr, dev, addr) in [(a, &x, a_addr), (b, &y, b_addr)] {
        run("ip", &["link", "set", dev, "netns", frr.ns()]);
        run(
            "ip",
            &[
                "-n",
                frr.ns(),
                "link",
                "set",
                dev,
                "name",
                &format!("eth-{tag}"),
            ],
        );
        run(
            "ip",
            &[
                "-n",
                frr.ns(),
                "addr",
                "add",
                addr,
                "dev",
                &format!("eth-{tag}"),
            ],
        );
        run(
            "ip",
            &["-n", frr.ns(), "link", "set", &format!("eth-{tag}"), "up"],
        );
    }
}

impl Drop for Frr {
    fn drop(&mut self) {
        for daemon in ["bgpd", "bfdd", "zebra"] {
            let pid: PathBuf = self.path().join(format!("{daemon}.pid"));
            if let Some(pid) = std::fs::read_to_string(&pid)
                .ok()
                .and_then(|p| p.trim().parse::<i32>().ok())
            {
                // SAFETY: a signal to a pid this instance started.
                unsafe {
                    libc::kill(pid, libc::SIGTERM);
                }
                let start = Instant::now();
                while crate::alive(pid) && start.elapsed() < Duration::from_secs(5) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                if crate::alive(pid) {
                    // SAFETY: as above.
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                    }
                }
            }
        }
        if self.owns_ns {
            let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
        }
    }
}

fn output(mut c: Command) -> Result<String, String> {
    let out = c.output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("{text}{}", String::from_utf8_lossy(&out.stderr)))
    }
}

fn run(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"));
    crate::check(program, args, out);
}
