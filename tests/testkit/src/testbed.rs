//! The real-traffic testbed (`scripts/testbed.sh`): OVN-Kubernetes-shaped nodes, pods and a
//! client as network namespaces, with real ovs-vswitchd (userspace datapath), ovn-controller,
//! ovn-northd. Started per test in its own temp dir and namespaces, torn down on drop (also while
//! a failing test unwinds): every daemon by its pid, every namespace by its recorded name.

use crate::check;
use crate::netns;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Addresses the testbed gives (see the script's header).
pub const CLIENT_V4: &str = "172.18.0.2";
pub const CLIENT_V6: &str = "fd00:18::2";
/// The LAN's gateway (the wire's bridge, or in the BGP shape the router): every node's and
/// gateway router's default route.
pub const GATEWAY_V4: &str = "172.18.0.1";
pub const GATEWAY_V6: &str = "fd00:18::1";
/// The BGP shape's client behind the router (namespace `remote`).
pub const REMOTE_V4: &str = "172.19.0.2";
pub const REMOTE_V6: &str = "fd00:19::2";

/// node *i*'s IPv4 and IPv6 address (on br-ex, shared with its gateway router).
pub fn node_ip(i: usize) -> String {
    format!("172.18.0.1{i}")
}
pub fn node_ip6(i: usize) -> String {
    format!("fd00:18::1{i}")
}
/// node *i*'s br-ex MAC (= its gateway router's external MAC).
pub fn node_mac(i: usize) -> String {
    format!("0a:58:ac:12:00:{:02x}", 0x10 + i)
}
/// node *i*'s IPv6 link-local address on br-ex, the kernel's EUI-64 of [`node_mac`] (its gateway
/// router's external port has the same one): the next hop FRR gives IPv6 routes learned over a
/// session on the link.
pub fn node_link_local6(i: usize) -> String {
    let low = u16::try_from(0x10 + i).expect("a node index");
    std::net::Ipv6Addr::new(0xfe80, 0, 0, 0, 0x0858, 0xacff, 0xfe12, low).to_string()
}
/// The pod addresses: pod *i* a is .10, pod *i* b is .11.
pub fn pod_ip(i: usize, pod: char) -> String {
    format!("10.244.{i}.1{}", pod_index(pod))
}
pub fn pod_ip6(i: usize, pod: char) -> String {
    format!("fd00:244:{i}::1{}", pod_index(pod))
}
fn pod_index(pod: char) -> u8 {
    if pod == 'a' { 0 } else { 1 }
}

/// Which network the testbed's nodes sit in (the script's header says what each builds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// One L2 segment with the client on it; the wire's bridge is the gateway.
    L2,
    /// The gateway is a router of its own on the wire, with a client behind it.
    Bgp,
}

pub struct Testbed {
    dir: tempfile::TempDir,
    tag: String,
    pub nodes: usize,
    keep: bool,
}

impl Testbed {
    /// Start a testbed of `nodes` nodes, or `None` (with a loud message) where this process
    /// cannot make network namespaces: the caller skips.
    pub fn start(nodes: usize) -> Option<Testbed> {
        Testbed::start_shaped(nodes, Shape::L2)
    }

    /// [`Testbed::start`] in the given shape.
    pub fn start_shaped(nodes: usize, shape: Shape) -> Option<Testbed> {
        if !netns::can_make_namespaces() {
            eprintln!(
                "SKIPPED: the real-packet testbed needs root and network namespaces (run as root, as CI does)"
            );
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must be able to run the real-packet testbed"
            );
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("vftb-")
            .tempdir_in("/tmp")
            .expect("create testbed dir");
        let out = Command::new(crate::scripts_dir().join("testbed.sh"))
            .arg("start")
            .arg(dir.path())
            .arg(nodes.to_string())
            .args((shape == Shape::Bgp).then_some("bgp"))
            .output()
            .expect("run scripts/testbed.sh");
        if !out.status.success() {
            panic!(
                "testbed start failed in {}:\n{}{}",
                dir.path().display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let tag = std::fs::read_to_string(dir.path().join("tag"))
            .expect("testbed tag")
            .trim()
            .to_string();
        let tb = Testbed {
            dir,
            tag,
            nodes,
            keep: std::env::var_os("VIPFLOW_KEEP_SANDBOX").is_some(),
        };
        tb.wait_pods_reach_each_other();
        Some(tb)
    }

    /// Ready means a pod on node1 exchanges a datagram with a pod on every other node, both
    /// families: the first packets over a new tunnel are lost while the userspace datapath sets
    /// it up, which no test should mistake for a fault of what it tests.
    fn wait_pods_reach_each_other(&self) {
        for i in 2..=self.nodes {
            for (a, b) in [
                (pod_ip(1, 'a'), pod_ip(i, 'a')),
                (pod_ip6(1, 'a'), pod_ip6(i, 'a')),
            ] {
                let bind = |ip: &str| -> std::net::SocketAddr {
                    std::net::SocketAddr::new(ip.parse().expect("pod ip"), 7)
                };
                let (here, there) = (bind(&a), bind(&b));
                let s1 =
                    netns::in_netns(&self.ns("pod1a"), move || std::net::UdpSocket::bind(here))
                        .expect("udp in pod1a");
                let s2 = netns::in_netns(&self.ns(&format!("pod{i}a")), move || {
                    std::net::UdpSocket::bind(there)
                })
                .expect("udp in the other pod");
                let wait = Some(Duration::from_millis(200));
                s1.set_read_timeout(wait).expect("timeout");
                s2.set_read_timeout(wait).expect("timeout");
                let deadline = Instant::now() + Duration::from_secs(30);
                let mut buf = [0u8; 16];
                loop {
                    assert!(
                        Instant::now() < deadline,
                        "testbed: pod1a never reached pod{i}a ({a} -> {b})"
                    );
                    let _ = s1.send_to(b"ready?", there);
                    if let Ok((_, from)) = s2.recv_from(&mut buf) {
                        let _ = s2.send_to(b"ready", from);
                        if s1.recv_from(&mut buf).is_ok() {
                            break;
                        }
                    }
                }
            }
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Namespace of `client`, `wire`, `node *i*`, `pod<i><a|b>`, or in the BGP shape `router`
    /// and `remote`.
    pub fn ns(&self, name: &str) -> String {
        format!("{}-{name}", self.tag)
    }

    /// node *i*'s directory: its OVS_RUNDIR (br-ex.mgmt, db.sock, logs).
    pub fn node_dir(&self, i: usize) -> PathBuf {
        self.path().join(format!("node{i}"))
    }

    pub fn nb_remote(&self) -> String {
        format!("unix:{}", self.path().join("ovnnb.sock").display())
    }

    pub fn sb_remote(&self) -> String {
        format!("unix:{}", self.path().join("ovnsb.sock").display())
    }

    fn run(&self, program: &str, args: &[&str], envs: &[(&str, String)]) -> String {
        let out = Command::new(program)
            .args(args)
            .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
        check(program, args, out)
    }

    pub fn nbctl(&self, args: &[&str]) -> String {
        let db = format!("--db={}", self.nb_remote());
        let mut all = vec![db.as_str()];
        all.extend_from_slice(args);
        self.run("ovn-nbctl", &all, &[])
    }

    pub fn sbctl(&self, args: &[&str]) -> String {
        let db = format!("--db={}", self.sb_remote());
        let mut all = vec![db.as_str()];
        all.extend_from_slice(args);
        self.run("ovn-sbctl", &all, &[])
    }

    /// `ovs-ofctl -O OpenFlow13 ARGS` against node *i*'s bridges.
    pub fn ofctl(&self, node: usize, args: &[&str]) -> String {
        let mut all = vec!["-O", "OpenFlow13"];
        all.extend_from_slice(args);
        self.run(
            "ovs-ofctl",
            &all,
            &[("OVS_RUNDIR", self.node_dir(node).display().to_string())],
        )
    }

    /// `ovs-vsctl ARGS` against node *i*'s database.
    pub fn vsctl(&self, node: usize, args: &[&str]) -> String {
        let db = format!(
            "--db=unix:{}",
            self.node_dir(node).join("db.sock").display()
        );
        let mut all = vec![db.as_str(), "--timeout=10"];
        all.extend_from_slice(args);
        self.run("ovs-vsctl", &all, &[])
    }

    /// `ovs-appctl -t <node>/ovs-vswitchd.ctl ARGS`.
    pub fn appctl(&self, node: usize, args: &[&str]) -> String {
        let t = self
            .node_dir(node)
            .join("ovs-vswitchd.ctl")
            .display()
            .to_string();
        let mut all = vec!["-t", t.as_str()];
        all.extend_from_slice(args);
        self.run("ovs-appctl", &all, &[])
    }

    /// `ip ARGS` inside namespace `ns` (client, node1, pod1a, ...).
    pub fn ip(&self, ns: &str, args: &[&str]) -> String {
        let n = self.ns(ns);
        let mut all = vec!["netns", "exec", n.as_str(), "ip"];
        all.extend_from_slice(args);
        self.run("ip", &all, &[])
    }

    /// Packet count of node *i*'s br-ex flows whose text holds every one of `needles`, after
    /// the datapath's counters were pushed to the flows.
    pub fn flow_packets(&self, node: usize, needles: &[&str]) -> u64 {
        self.appctl(node, &["revalidator/wait"]);
        self.ofctl(node, &["dump-flows", "br-ex"])
            .lines()
            .filter(|l| needles.iter().all(|n| l.contains(n)))
            .filter_map(|l| {
                l.split(", ")
                    .find_map(|f| f.trim().strip_prefix("n_packets="))
                    .and_then(|n| n.parse::<u64>().ok())
            })
            .sum()
    }

    pub fn vswitchd_pid(&self, node: usize) -> Option<i32> {
        std::fs::read_to_string(self.node_dir(node).join("ovs-vswitchd.pid"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// SIGKILL node *i*'s ovs-vswitchd and wait until it is gone.
    pub fn kill_vswitchd(&self, node: usize) {
        let pid = self.vswitchd_pid(node).expect("ovs-vswitchd pid");
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while crate::alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_file(self.node_dir(node).join("ovs-vswitchd.pid"));
        let _ = std::fs::remove_file(self.node_dir(node).join("br-ex.mgmt"));
    }

    /// Start node *i*'s ovs-vswitchd again (bridges come back from its database, with no flows
    /// but the ones ovn-controller puts back), knowing the other nodes' tunnel endpoints as a
    /// kernel datapath's switch would after a restart: there the kernel's neighbor table, which
    /// outlives ovs-vswitchd, resolves them. The userspace datapath resolves them itself, from
    /// nothing, dropping what it tunnels meanwhile and caching the drop until its revalidator
    /// runs; a UDP flow whose first packets went that way never gets an answer, so OVN's gateway
    /// router keeps its connection new and no longer SNATs it, and the flow stays lost until
    /// conntrack forgets it.
    pub fn start_vswitchd(&self, node: usize) {
        let d = self.node_dir(node);
        let ns = self.ns(&format!("node{node}"));
        let out = Command::new("ip")
            .args(["netns", "exec", &ns, "ovs-vswitchd"])
            .arg(format!("unix:{}", d.join("db.sock").display()))
            .args([
                "--disable-system",
                "-vconsole:off",
                "--detach",
                "--no-chdir",
            ])
            .args(crate::vswitchd_files(&d))
            .env("OVS_RUNDIR", &d)
            .output()
            .expect("spawn ovs-vswitchd");
        check("ovs-vswitchd", &[], out);
        for other in (1..=self.nodes).filter(|o| *o != node) {
            self.appctl(
                node,
                &["tnl/neigh/set", "br-ex", &node_ip(other), &node_mac(other)],
            );
        }
    }

    /// Start `vipflow agent` for node *i* on `objects` with `args`, as a user runs it; logs go to
    /// `<node dir>/vipflow.log` (appended, so restarts keep the history).
    pub fn agent(&self, bin: &Path, node: usize, objects: &Path, args: &[String]) -> AgentProcess {
        self.spawn_agent(None, bin, node, AgentSource::Objects(objects), args)
    }

    /// Node *i*'s `vipflow agent` in cluster mode, watching the API server `kubeconfig` names,
    /// as the DaemonSet runs it. It runs in the host's namespace, where the test's API server
    /// listens on the loopback: everything else it speaks to (the node's switches, the
    /// Northbound database, the node's FRR) it reaches through unix sockets in the node's
    /// directory, as in the node's namespace. No membership: that needs the node's network.
    pub fn agent_from_api(
        &self,
        bin: &Path,
        node: usize,
        kubeconfig: &Path,
        args: &[String],
    ) -> AgentProcess {
        self.spawn_agent(None, bin, node, AgentSource::Api(kubeconfig), args)
    }

    /// [`Testbed::agent`] inside node *i*'s namespace, as a host-network pod runs: what it
    /// sends to other nodes (the membership) goes over br-ex and the uplink.
    pub fn agent_in_node(
        &self,
        bin: &Path,
        node: usize,
        objects: &Path,
        args: &[String],
    ) -> AgentProcess {
        let ns = self.ns(&format!("node{node}"));
        self.spawn_agent(Some(&ns), bin, node, AgentSource::Objects(objects), args)
    }

    /// Take node *i*'s uplink down at the wire, as a pulled cable: nothing in or out.
    pub fn cut_uplink(&self, node: usize) {
        self.ip("wire", &["link", "set", &format!("n{node}"), "down"]);
    }

    /// Put node *i*'s uplink back.
    pub fn restore_uplink(&self, node: usize) {
        self.ip("wire", &["link", "set", &format!("n{node}"), "up"]);
    }

    fn spawn_agent(
        &self,
        ns: Option<&str>,
        bin: &Path,
        node: usize,
        source: AgentSource<'_>,
        args: &[String],
    ) -> AgentProcess {
        let d = self.node_dir(node);
        let log_path = d.join("vipflow.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("agent log");
        // `ip netns exec` enters the namespace and execs the agent: the pid is the agent's.
        let mut cmd = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        cmd.arg("agent");
        match source {
            AgentSource::Objects(objects) => cmd.arg("--objects").arg(objects),
            AgentSource::Api(kubeconfig) => cmd
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .args(["--lease-namespace", "default"])
                .env_remove("VIPFLOW_OBJECTS"),
        };
        let child = cmd
            .arg("--node-name")
            .arg(format!("node{node}"))
            .arg("--ovs-rundir")
            .arg(&d)
            .args(
                // The caller's poll interval, else 50 ms.
                if args.iter().any(|a| a == "--poll-interval-ms") {
                    &[][..]
                } else {
                    &["--poll-interval-ms", "50"][..]
                },
            )
            .args(args)
            // VIPFLOW_TESTBED_LOG sets the agents' log filter (e.g. `debug` for a timeline).
            .env(
                "VIPFLOW_LOG",
                std::env::var("VIPFLOW_TESTBED_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log)
            .spawn()
            .expect("spawn vipflow agent");
        AgentProcess {
            child: Some(child),
            log: log_path,
        }
    }
}

/// Where an agent takes its objects from.
enum AgentSource<'a> {
    /// An objects file (file mode).
    Objects(&'a Path),
    /// The API server a kubeconfig names (cluster mode).
    Api(&'a Path),
}

/// A `vipflow agent` process; SIGKILLed on drop if still running.
pub struct AgentProcess {
    child: Option<Child>,
    pub log: PathBuf,
}

impl AgentProcess {
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, as a crash or an OOM kill would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait for a clean exit.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let mut c = self.child.take()?;
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(s)) = c.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = c.kill();
        c.wait().ok()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if std::thread::panicking() && std::env::var_os("VIPFLOW_TESTBED_HOLD").is_some() {
            // Left running for a look; `scripts/testbed.sh stop DIR` removes it.
            let path = self.path().to_path_buf();
            eprintln!(
                "testbed held at {} (stop it with scripts/testbed.sh stop)",
                path.display()
            );
            std::mem::forget(std::mem::replace(
                &mut self.dir,
                tempfile::TempDir::new().expect("tmp"),
            ));
            return;
        }
        let _ = Command::new(crate::scripts_dir().join("testbed.sh"))
            .arg("stop")
            .arg(self.path())
            .output();
        if self.keep {
            let path = self.path().to_path_buf();
            eprintln!(
                "testbed logs kept at {}",
                path.with_extension("kept").display()
            );
            let _ = std::fs::rename(&path, path.with_extension("kept"));
            let _ = std::fs::create_dir_all(&path);
        }
    }
}
