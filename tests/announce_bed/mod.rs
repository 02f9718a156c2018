//! Shared by the announcement and failover tests and the failover benchmark: three testbed nodes whose agents run in the
//! nodes' own namespaces with `--announce` and the membership, a Service whose VIP answers
//! UDP from a pod on every node, a client probing it every 10 ms, and one unplanned failover
//! measured from the packets and the agents' logs.
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use testkit::eventually;
use testkit::netns::{NsUdp, POD_TCP_PORT, POD_UDP_PORT, PodServer};
use testkit::testbed::{self, AgentProcess, Testbed};

pub const VIP: &str = "172.18.0.100";
/// The same Service's IPv6 VIP, on the same segment.
pub const VIP6: &str = "fd00:18::100";
pub const NODES: usize = 3;
/// The client probes the VIP this often.
pub const PROBE_EVERY: Duration = Duration::from_millis(10);

/// Three Nodes (each Ready or not; one of them maybe marked for drain), and `web`: the VIPs
/// (IPv4 and IPv6) on TCP 80 and UDP 53, one endpoint per node and family.
pub fn objects(ready: [bool; NODES], drained: Option<usize>) -> String {
    objects_with(ready, drained, [true; NODES])
}

/// [`objects`] with `web`'s endpoints only on the nodes `endpoints` names.
pub fn objects_with(
    ready: [bool; NODES],
    drained: Option<usize>,
    endpoints: [bool; NODES],
) -> String {
    let mut y = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for (i, r) in (1..=NODES).zip(ready) {
        let mark = if drained == Some(i) {
            ", annotations: {vipflow.io/drain: 'true'}"
        } else {
            ""
        };
        let status = if r { "True" } else { "False" };
        y += &format!(
            "- apiVersion: v1\n  kind: Node\n  metadata: {{name: node{i}{mark}}}\n  status:\n    addresses: [{{type: InternalIP, address: {}}}]\n    conditions: [{{type: Ready, status: '{status}'}}]\n",
            testbed::node_ip(i)
        );
    }
    y += &format!(
        "- apiVersion: v1\n  kind: Service\n  metadata: {{name: web, namespace: demo, creationTimestamp: \"2026-01-10T08:00:00Z\"}}\n  spec:\n    type: LoadBalancer\n    ipFamilies: [IPv4, IPv6]\n    ports:\n    - {{name: http, port: 80, protocol: TCP, targetPort: {POD_TCP_PORT}}}\n    - {{name: dns, port: 53, protocol: UDP, targetPort: {POD_UDP_PORT}}}\n  status: {{loadBalancer: {{ingress: [{{ip: \"{VIP}\", ipMode: VIP}}, {{ip: \"{VIP6}\", ipMode: VIP}}]}}}}\n"
    );
    for (slice, family) in [("web-1", "IPv4"), ("web-6", "IPv6")] {
        let eps: String = (1..=NODES)
            .filter(|i| endpoints[i - 1])
            .map(|i| {
                let ip = if family == "IPv4" {
                    testbed::pod_ip(i, 'a')
                } else {
                    testbed::pod_ip6(i, 'a')
                };
                format!(
                    "  - {{addresses: [\"{ip}\"], nodeName: node{i}, conditions: {{ready: true}}}}\n"
                )
            })
            .collect();
        y += &format!(
            "- apiVersion: discovery.k8s.io/v1\n  kind: EndpointSlice\n  metadata: {{name: {slice}, namespace: demo, labels: {{kubernetes.io/service-name: web}}}}\n  addressType: {family}\n  ports:\n  - {{name: http, port: {POD_TCP_PORT}, protocol: TCP}}\n  - {{name: dns, port: {POD_UDP_PORT}, protocol: UDP}}\n  endpoints:\n{eps}"
        );
    }
    y
}

/// Replace the objects file in one step, as an editor or a sync job would.
pub fn write_objects(path: &Path, text: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The nodes whose br-ex has the ARP answer for the VIP (a node whose ovs-vswitchd is down
/// answers nothing).
pub fn answering(tb: &Testbed) -> Vec<usize> {
    (1..=NODES)
        .filter(|&i| {
            br_ex_flows(tb, i).is_some_and(|f| {
                f.lines()
                    .any(|l| l.contains(&format!("arp_tpa={VIP}")) && l.contains("IN_PORT"))
            })
        })
        .collect()
}

/// `ovs-ofctl dump-flows br-ex` on node `i`, or `None` when its switch does not answer.
fn br_ex_flows(tb: &Testbed, i: usize) -> Option<String> {
    let out = std::process::Command::new("ovs-ofctl")
        .args(["-O", "OpenFlow13", "dump-flows", "br-ex"])
        .env("OVS_RUNDIR", tb.node_dir(i))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The nodes whose br-ex has the ND answer for the IPv6 VIP (both of its steps).
pub fn answering6(tb: &Testbed) -> Vec<usize> {
    (1..=NODES)
        .filter(|&i| {
            let flows = br_ex_flows(tb, i).unwrap_or_default();
            let has = |step: &str| {
                flows
                    .lines()
                    .any(|l| l.contains(&format!("nd_target={VIP6}")) && l.contains(step))
            };
            has("resubmit(,0)") && has("IN_PORT")
        })
        .collect()
}

/// The client's neighbor entry for the VIP: its MAC, if it has one.
pub fn client_neighbor(tb: &Testbed) -> Option<String> {
    client_neighbor_of(tb, VIP)
}

/// The client's neighbor entry for `ip` (either family): its MAC, if it has one.
pub fn client_neighbor_of(tb: &Testbed, ip: &str) -> Option<String> {
    let out = tb.ip("client", &["neigh", "show", ip, "dev", "eth0"]);
    let mut words = out.split_whitespace();
    words.find(|w| *w == "lladdr")?;
    words.next().map(|m| m.to_ascii_lowercase())
}

/// The bed: testbed, pods, agents.
pub struct AnnounceBed {
    pub tb: Testbed,
    pub agents: Vec<AgentProcess>,
    bin: PathBuf,
    _pods: Vec<PodServer>,
    objects: PathBuf,
    key: PathBuf,
}

impl AnnounceBed {
    /// Start it and wait until one node answers for the VIP and the membership is whole;
    /// `None` where namespaces cannot be made (the caller skips).
    pub fn start(bin: &Path) -> Option<AnnounceBed> {
        let tb = Testbed::start(NODES)?;
        let pods = (1..=NODES)
            .map(|i| {
                let name = format!("pod{i}a");
                PodServer::start(&tb.ns(&name), &name).expect("pod server")
            })
            .collect();
        let objects_path = tb.path().join("objects.yaml");
        write_objects(&objects_path, &objects([true; NODES], None));
        let key = tb.path().join("membership.key");
        std::fs::write(&key, "a test secret shared by the three nodes\n").unwrap();
        // The agents run a link to the binary as it is now: a build that replaces it meanwhile
        // (a shared target directory) does not change what a restarted agent runs.
        let own = tb.path().join("vipflow");
        let bin = if std::fs::hard_link(bin, &own).is_ok() || std::fs::copy(bin, &own).is_ok() {
            own
        } else {
            bin.to_path_buf()
        };
        let mut bed = AnnounceBed {
            agents: Vec::new(),
            bin: bin.clone(),
            _pods: pods,
            objects: objects_path,
            key,
            tb,
        };
        for i in 1..=NODES {
            let a = bed.tb.agent_in_node(&bin, i, &bed.objects, &bed.args(i));
            bed.agents.push(a);
        }
        eventually("the Northbound row", 30, || {
            bed.tb.nbctl(&["lb-list"]).contains(&format!("{VIP}:53"))
        });
        bed.tb.nbctl(&["--timeout=30", "--wait=hv", "sync"]);
        eventually("a whole membership", 30, || {
            (1..=NODES).all(|i| bed.last_live(i).is_some_and(|l| l.len() == NODES))
        });
        eventually("one node answering", 30, || bed.answering().len() == 1);
        bed.warm_gateways();
        Some(bed)
    }

    /// Send the client's traffic through every node once, so that each gateway router knows
    /// the client's MAC. OVN drops the first replies towards a neighbor it has not resolved (it
    /// asks for it instead); on a real network the routers answer for clients behind the
    /// upstream router, whose MAC they know, so a takeover never waits for that.
    ///
    /// Pin the client's neighbor entry for the VIP to node `node`'s MAC, so that every probe
    /// goes through that node whoever announces.
    pub fn pin_client_to(&self, node: usize) {
        let mac = testbed::node_mac(node);
        self.tb.ip(
            "client",
            &[
                "-4",
                "neigh",
                "replace",
                VIP,
                "lladdr",
                &mac,
                "dev",
                "eth0",
                "nud",
                "permanent",
            ],
        );
    }

    /// Drop the client's neighbor entry for the VIP (pinned or learned).
    pub fn unpin_client(&self) {
        self.tb
            .ip("client", &["-4", "neigh", "del", VIP, "dev", "eth0"]);
    }

    /// Each gateway router first hears an ARP request for its own address from the client,
    /// from which it learns the client's MAC: otherwise it learns it only by asking, when the
    /// first reply towards the client leaves it, and once in a while (a fresh testbed, the
    /// client's kernel already knowing the router's address) that did not happen within the
    /// 10 s this allows. A failure says what the bed looked like.
    fn warm_gateways(&self) {
        let udp = NsUdp::new(&self.tb.ns("client"), false).expect("client socket");
        let to = SocketAddr::new(VIP.parse::<IpAddr>().unwrap(), 53);
        for i in 1..=NODES {
            let _ = testkit::netns::arp_request(
                &self.tb.ns("client"),
                "eth0",
                testbed::CLIENT_V4.parse().unwrap(),
                testbed::node_ip(i).parse().unwrap(),
                Duration::from_millis(200),
            );
            self.pin_client_to(i);
            let deadline = Instant::now() + Duration::from_secs(10);
            // Several answered in a row: every backend's path is resolved, whatever the
            // load balancer picks for this socket.
            let mut answered = 0;
            while answered < 5 {
                assert!(
                    Instant::now() < deadline,
                    "the VIP never answered via node{i}:\n{}",
                    self.what_node_saw(i)
                );
                if udp.request(to, 16, Duration::from_millis(300)).is_ok() {
                    answered += 1;
                }
            }
        }
        self.unpin_client();
    }

    /// For a failure: node `i`'s flows with their counters, the routers' MAC bindings, node
    /// `i`'s connection tracking towards the pods, and the client's neighbors.
    fn what_node_saw(&self, i: usize) -> String {
        let flows = self.tb.ofctl(i, &["dump-flows", "br-ex"]);
        let bindings = self.tb.sbctl(&[
            "--columns=logical_port,ip,mac,timestamp",
            "list",
            "MAC_Binding",
        ]);
        let ct: String = self
            .tb
            .appctl(i, &["dpctl/dump-conntrack"])
            .lines()
            .filter(|l| l.contains("172.18.0.") || l.contains("10.244."))
            .map(|l| format!("{l}\n"))
            .collect();
        let neigh = self.tb.ip("client", &["neigh"]);
        format!(
            "node{i} br-ex:\n{flows}\nMAC bindings:\n{bindings}\nnode{i} conntrack:\n{ct}\nclient neighbors:\n{neigh}"
        )
    }

    fn args(&self, node: usize) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "--announce".into(),
            "--membership-key-file".into(),
            self.key.display().to_string(),
        ];
        if node == 1 {
            for s in [
                "--nb-remote",
                &self.tb.nb_remote(),
                "--node-router",
                "GR_{node}",
                "--node-switch",
                "{node}",
            ] {
                a.push(s.to_string());
            }
        }
        a
    }

    /// Take `web`'s endpoint on node `node` out (its pod goes), and wait until every chassis
    /// has programmed that.
    pub fn without_endpoint_on(&self, node: usize) {
        let mut on = [true; NODES];
        on[node - 1] = false;
        write_objects(&self.objects, &objects_with([true; NODES], None, on));
        let pod = testbed::pod_ip(node, 'a');
        eventually("the endpoint gone from the Northbound row", 30, || {
            let lbs = self.tb.nbctl(&["lb-list"]);
            lbs.contains(&format!("{VIP}:53")) && !lbs.contains(&pod)
        });
        self.tb.nbctl(&["--timeout=30", "--wait=hv", "sync"]);
    }

    /// Mark node `node` for drain in the objects file (in one step, as an editor would).
    pub fn drain(&self, node: usize) {
        write_objects(&self.objects, &objects([true; NODES], Some(node)));
    }

    /// The nodes whose br-ex has the ARP answer for the VIP.
    pub fn answering(&self) -> Vec<usize> {
        answering(&self.tb)
    }

    /// The nodes whose br-ex has the ND answer for the IPv6 VIP.
    pub fn answering6(&self) -> Vec<usize> {
        answering6(&self.tb)
    }

    /// Put node `node`'s stand-in OVN-Kubernetes flows back on br-ex (after its ovs-vswitchd
    /// restarted), as OVN-Kubernetes does.
    pub fn node_flows(&self, node: usize) {
        let out = std::process::Command::new(testkit::scripts_dir().join("testbed.sh"))
            .args([
                "node-flows",
                &self.tb.path().display().to_string(),
                &node.to_string(),
            ])
            .output()
            .expect("run testbed.sh node-flows");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Node `node`'s agent log.
    pub fn log_of(&self, node: usize) -> String {
        self.log(node)
    }

    /// The log lines of `node` written at or after `since` that contain `needle`.
    pub fn lines_after(&self, node: usize, since: SystemTime, needle: &str) -> Vec<String> {
        self.log(node)
            .lines()
            .filter(|l| l.contains(needle))
            .filter(|l| log_time(l).is_some_and(|t| t >= since))
            .map(str::to_string)
            .collect()
    }

    fn log(&self, node: usize) -> String {
        std::fs::read_to_string(self.tb.node_dir(node).join("vipflow.log")).unwrap_or_default()
    }

    /// The live set node `node` last logged.
    pub fn last_live(&self, node: usize) -> Option<Vec<String>> {
        self.log(node)
            .lines()
            .rfind(|l| l.contains("membership changed"))
            .map(live_of)
    }

    /// The first log line of `node` after `since` that contains `needle` and satisfies `f`,
    /// and when it was written.
    pub fn logged_after(
        &self,
        node: usize,
        since: SystemTime,
        needle: &str,
        f: impl Fn(&str) -> bool,
    ) -> Option<SystemTime> {
        self.log(node)
            .lines()
            .filter(|l| l.contains(needle) && f(l))
            .filter_map(log_time)
            .find(|t| *t >= since)
    }

    /// One unplanned failover: `fault` strikes the owner while the client probes the VIP every
    /// 10 ms; then the owner is brought back and the bed heals before the next trial.
    ///
    /// Times count from the moment the fault is in: the cut's command returned (no probe sent
    /// after it can reach the owner), or both SIGKILLs were sent. Answers to probes sent before
    /// it do not count. The wire is a MAC-learning Linux bridge: after a cut it floods frames for
    /// the owner's MAC to the other nodes, which (as on an OVN-Kubernetes node) serve none of
    /// them; after a kill the owner's port stays up and its frames go to it alone. So the
    /// outage lasts until the new owner's gratuitous ARP moves the client.
    pub fn trial(&mut self, prober: &Prober, fault: Fault) -> Trial {
        let owner = self.settled(prober);
        let (t0, t0_wall) = match fault {
            Fault::Cut => {
                self.tb.cut_uplink(owner);
                (Instant::now(), SystemTime::now())
            }
            Fault::Kill => {
                let agent = self.agents[owner - 1]
                    .pid()
                    .expect("the owner's agent runs");
                let vswitchd = self.tb.vswitchd_pid(owner).expect("ovs-vswitchd pid");
                // One kill(1) for both, as a crashed node loses both at once.
                let ok = std::process::Command::new("kill")
                    .args(["-KILL", &agent.to_string(), &vswitchd.to_string()])
                    .status()
                    .is_ok_and(|s| s.success());
                assert!(ok, "SIGKILL the owner's agent and ovs-vswitchd");
                let at = (Instant::now(), SystemTime::now());
                self.agents[owner - 1].kill();
                self.tb.kill_vswitchd(owner);
                at
            }
        };
        let answered = prober.first_answer_after(t0, Duration::from_secs(10));
        let mut next = 0;
        let deadline = Instant::now() + Duration::from_secs(10);
        while next == 0 && Instant::now() < deadline {
            next = self
                .answering()
                .into_iter()
                .find(|&n| n != owner)
                .unwrap_or(0);
        }
        // Let the logs catch up (the new owner's GARP line is written as it goes out).
        std::thread::sleep(Duration::from_millis(200));
        let word = format!("node=node{owner}");
        let names = |l: &str| l.split_whitespace().any(|w| w == word);
        let detected = (1..=NODES)
            .filter(|&n| n != owner)
            .filter_map(|n| {
                self.logged_after(n, t0_wall, "membership: node down", names)
                    .map(|t| (t, n))
            })
            .min();
        let by_watch = detected.is_some_and(|(t, n)| {
            self.logged_after(n, t0_wall, "watch: owner confirmed down", names)
                .is_some_and(|w| w <= t)
        });
        let garp = (next > 0)
            .then(|| self.logged_after(next, t0_wall, "gratuitous ARP sent", |_| true))
            .flatten();
        let ms = |t: Option<SystemTime>| {
            t.and_then(|t| t.duration_since(t0_wall).ok())
                .map(|d| d.as_secs_f64() * 1e3)
        };
        let mut trial = Trial {
            fault,
            owner,
            next,
            detect_ms: ms(detected.map(|(t, _)| t)),
            detected_by: detected.map(|(_, n)| n),
            by_watch,
            garp_ms: ms(garp),
            outage_ms: answered.map(|t| t.duration_since(t0).as_secs_f64() * 1e3),
            heal_ms: None,
        };
        // Heal: the owner back (its uplink, or its ovs-vswitchd, its flows and its agent),
        // the membership whole, and the VIP stays with its new owner (owners are sticky). While
        // cut off, the old owner kept its answer (it saw too few nodes to take or drop any):
        // until it hears the new owner's claim, two nodes answer.
        let healing = Instant::now();
        match fault {
            Fault::Cut => self.tb.restore_uplink(owner),
            Fault::Kill => {
                self.tb.start_vswitchd(owner);
                let out = std::process::Command::new(testkit::scripts_dir().join("testbed.sh"))
                    .args(["node-flows", &self.tb.path().display().to_string()])
                    .arg(owner.to_string())
                    .output()
                    .expect("testbed.sh node-flows");
                assert!(
                    out.status.success(),
                    "node-flows: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let args = self.args(owner);
                self.agents[owner - 1] =
                    self.tb
                        .agent_in_node(&self.bin, owner, &self.objects, &args);
            }
        }
        let deadline = healing + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.answering() == [next] {
                trial.heal_ms = Some(healing.elapsed().as_secs_f64() * 1e3);
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        eventually("the membership whole again", 30, || {
            (1..=NODES).all(|i| self.last_live(i).is_some_and(|l| l.len() == NODES))
        });
        let settled_on = self.settled(prober);
        assert_eq!(
            settled_on, next,
            "the VIP moved back to node{owner} after the heal"
        );
        trial
    }

    /// Wait until one node answers, the membership is whole, the client's neighbor entry has
    /// been that node's MAC for a second (a node that held the VIP a moment ago may still send
    /// its last gratuitous ARPs) and the VIP answers; the owner.
    pub fn settled(&self, prober: &Prober) -> usize {
        eventually("one node answering", 30, || self.answering().len() == 1);
        let owner = self.answering()[0];
        let mac = testbed::node_mac(owner);
        let mut since: Option<Instant> = None;
        eventually(
            "the client's neighbor entry on the owner for a second",
            30,
            || {
                if self.answering() != [owner] {
                    return false;
                }
                if self.client_neighbor().as_deref() == Some(mac.as_str()) {
                    since.get_or_insert_with(Instant::now).elapsed() >= Duration::from_secs(1)
                } else {
                    since = None;
                    false
                }
            },
        );
        prober.wait_answered(Duration::from_secs(10));
        owner
    }

    /// Stop each of `nodes`' agents for `pause` (SIGSTOP, then SIGCONT), one after the other,
    /// every `every`, for `total`; the owner's answer is checked between pauses. Returns the
    /// owners seen (one, if nothing moved) and how many pauses were made.
    pub fn pause_agents(
        &self,
        nodes: &[usize],
        pause: Duration,
        every: Duration,
        total: Duration,
    ) -> (Vec<Vec<usize>>, usize) {
        let start = Instant::now();
        let mut seen: Vec<Vec<usize>> = vec![self.answering()];
        let mut pauses = 0;
        let mut turn = 0;
        while start.elapsed() < total {
            let node = nodes[turn % nodes.len()];
            turn += 1;
            let pid = self.agents[node - 1].pid().expect("agent runs").to_string();
            let signal = |s: &str| {
                std::process::Command::new("kill")
                    .args([s, &pid])
                    .status()
                    .is_ok_and(|s| s.success())
            };
            assert!(signal("-STOP"), "SIGSTOP node{node}'s agent");
            std::thread::sleep(pause);
            assert!(signal("-CONT"), "SIGCONT node{node}'s agent");
            pauses += 1;
            let a = self.answering();
            if seen.last() != Some(&a) {
                seen.push(a);
            }
            std::thread::sleep(every.saturating_sub(pause));
        }
        (seen, pauses)
    }

    /// The nodes that answer for the IPv4 or the IPv6 VIP.
    pub fn owners(&self) -> Vec<usize> {
        let mut o = self.answering();
        o.extend(answering6(&self.tb));
        o.sort();
        o.dedup();
        o
    }

    /// The successors an owner last said watch it (its `watch: the successors` line).
    pub fn successors_of(&self, owner: usize) -> Vec<usize> {
        let log = self.log(owner);
        let Some(line) = log.lines().rfind(|l| l.contains("watch: the successors")) else {
            return Vec::new();
        };
        let Some(start) = line.find("successors=") else {
            return Vec::new();
        };
        line[start..]
            .split('"')
            .skip(1)
            .step_by(2)
            .filter_map(|n| n.strip_prefix("node")?.parse().ok())
            .collect()
    }

    /// The nodes that watch an owner and own no VIP themselves: pausing one of them delays a
    /// watcher and nothing else.
    pub fn watchers_only(&self) -> Vec<usize> {
        let owners = self.owners();
        let mut w: Vec<usize> = owners
            .iter()
            .flat_map(|o| self.successors_of(*o))
            .filter(|n| !owners.contains(n))
            .collect();
        w.sort();
        w.dedup();
        w
    }

    /// Drop, on `node`'s br-ex, every membership datagram that comes from `from` over the
    /// wire, for `window`, `times` times with `gap` between: `node` misses `from`'s heartbeats
    /// while every other node still hears it (a one-way loss on `node`'s link).
    pub fn lose_from(
        &self,
        node: usize,
        from: usize,
        window: Duration,
        gap: Duration,
        times: usize,
    ) {
        let flow = format!(
            "cookie=0xdead,priority=1000,udp,in_port=eth0,nw_src={},tp_dst=7947,actions=drop",
            testbed::node_ip(from)
        );
        for _ in 0..times {
            self.tb.ofctl(node, &["add-flow", "br-ex", &flow]);
            std::thread::sleep(window);
            self.tb
                .ofctl(node, &["del-flows", "br-ex", "cookie=0xdead/-1"]);
            std::thread::sleep(gap);
        }
    }

    /// Lines of every agent's log after `since` that contain `needle`.
    pub fn log_lines_after(&self, since: SystemTime, needle: &str) -> Vec<String> {
        (1..=NODES)
            .flat_map(|n| {
                self.log(n)
                    .lines()
                    .filter(|l| l.contains(needle))
                    .filter(|l| log_time(l).is_some_and(|t| t >= since))
                    .map(|l| format!("node{n}: {l}"))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The client's neighbor entry for the VIP: its MAC, if it has one.
    pub fn client_neighbor(&self) -> Option<String> {
        client_neighbor(&self.tb)
    }

    /// The client's probe sockets.
    pub fn client_udp(&self) -> Vec<NsUdp> {
        (0..SOCKETS)
            .map(|_| NsUdp::new(&self.tb.ns("client"), false).expect("client socket"))
            .collect()
    }
}

/// What strikes the owner in a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Its uplink cut at the wire (a pulled cable, a dead switch port).
    Cut,
    /// Its agent and its ovs-vswitchd SIGKILLed at once (a crashed node; the port stays up).
    Kill,
}

/// One failover's figures, in ms after the fault.
#[derive(Debug, Clone)]
pub struct Trial {
    pub fault: Fault,
    pub owner: usize,
    pub next: usize,
    /// The first surviving node that logged the owner gone (`membership: node down`).
    pub detect_ms: Option<f64>,
    pub detected_by: Option<usize>,
    /// That node's watch confirmed it (rather than SWIM's suspicion running out).
    pub by_watch: bool,
    /// The new owner's first gratuitous ARP.
    pub garp_ms: Option<f64>,
    /// The first probe answered after the cut: the outage.
    pub outage_ms: Option<f64>,
    /// After the owner is back: one node answers again, the new owner (the duplicate answers
    /// stopped, and nothing moved back).
    pub heal_ms: Option<f64>,
}

/// `{"node1", "node3"}` in a `membership changed` line.
fn live_of(line: &str) -> Vec<String> {
    let Some(start) = line.find("live=") else {
        return Vec::new();
    };
    line[start..]
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The time at the start of an agent's log line (`2026-11-26T03:31:30.563966Z`).
fn log_time(line: &str) -> Option<SystemTime> {
    let ts = line.split_whitespace().next()?;
    let (date, time) = ts.trim_end_matches('Z').split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|x| x.parse::<i64>());
    let (hh, mm, ss) = (t.next()?.ok()?, t.next()?.ok()?, t.next()?.ok()?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss;
    let micros: i64 = format!("{frac:0<6}")[..6].parse().ok()?;
    let secs = u64::try_from(secs).ok()?;
    let micros = u64::try_from(micros).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros))
}

/// The client sending a UDP datagram to the VIP every [`PROBE_EVERY`] and noting each answer
/// with the time its probe was sent (the probe's size tells which it was: the pod answers with
/// the number of bytes it got), so that an answer to a probe sent before a cut never counts as
/// one after it. Probes go out of [`SOCKETS`] sockets in turn: the load balancer picks a
/// backend by the 5-tuple, and a single source port could stick to a pod on the node that was
/// cut off.
pub struct Prober {
    stop: Arc<AtomicBool>,
    /// When each probe was sent.
    sends: Arc<Mutex<Vec<Instant>>>,
    /// (probe sent, answer received).
    answers: Arc<Mutex<Vec<(Instant, Instant)>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// Probe sizes cycle through this many values.
const SIZES: usize = 1024;
/// Source sockets the probes take in turn.
pub const SOCKETS: usize = 8;

impl Prober {
    pub fn start(udp: Vec<NsUdp>) -> Prober {
        let socks: Vec<UdpSocket> = udp
            .iter()
            .map(|u| u.socket().try_clone().expect("clone socket"))
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let answers = Arc::new(Mutex::new(Vec::new()));
        let sent: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; SIZES]));
        let to = SocketAddr::new(VIP.parse::<IpAddr>().unwrap(), 53);
        let s = stop.clone();
        let sent_w = sent.clone();
        let sends = Arc::new(Mutex::new(Vec::new()));
        let sends_w = sends.clone();
        let recvs: Vec<UdpSocket> = socks
            .iter()
            .map(|s| {
                let r = s.try_clone().expect("clone socket");
                r.set_read_timeout(Some(Duration::from_millis(20)))
                    .expect("timeout");
                r
            })
            .collect();
        let sender = std::thread::spawn(move || {
            let mut next = Instant::now();
            let payload = [b'p'; 16 + SIZES];
            let mut seq = 0usize;
            while !s.load(Ordering::Relaxed) {
                let size = 16 + seq % SIZES;
                let now = Instant::now();
                sent_w.lock().unwrap_or_else(|p| p.into_inner())[seq % SIZES] = Some(now);
                sends_w.lock().unwrap_or_else(|p| p.into_inner()).push(now);
                let _ = socks[seq % socks.len()].send_to(&payload[..size], to);
                seq += 1;
                next += PROBE_EVERY;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
        });
        let s = stop.clone();
        let a = answers.clone();
        let receiver = std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            let mut turn = 0usize;
            while !s.load(Ordering::Relaxed) {
                turn += 1;
                let recv = &recvs[turn % recvs.len()];
                recv.set_nonblocking(true).ok();
                let Ok((n, from)) = recv.recv_from(&mut buf) else {
                    if turn.is_multiple_of(recvs.len()) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    continue;
                };
                let at = Instant::now();
                let text = String::from_utf8_lossy(&buf[..n]);
                let size = text
                    .split_whitespace()
                    .last()
                    .and_then(|b| b.parse::<usize>().ok());
                if let (true, Some(size)) = (from == to, size)
                    && let Some(i) = size.checked_sub(16).filter(|i| *i < SIZES)
                    && let Some(t) = sent.lock().unwrap_or_else(|p| p.into_inner())[i]
                {
                    a.lock().unwrap_or_else(|p| p.into_inner()).push((t, at));
                }
            }
        });
        Prober {
            stop,
            sends,
            answers,
            threads: vec![sender, receiver],
        }
    }

    /// When the first probe sent after `t` was answered, waiting up to `within`.
    pub fn first_answer_after(&self, t: Instant, within: Duration) -> Option<Instant> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(a) = self
                .answers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .filter(|(sent, _)| *sent > t)
                .map(|(_, got)| *got)
                .min()
            {
                return Some(a);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Wait for an answer to a probe sent from now on (the VIP reachable), panicking after
    /// `within`.
    pub fn wait_answered(&self, within: Duration) {
        let now = Instant::now();
        assert!(
            self.first_answer_after(now, within).is_some(),
            "the VIP does not answer the client"
        );
    }

    /// Probes sent in [from, to), and how many of them were answered.
    pub fn sent_and_answered(&self, from: Instant, to: Instant) -> (usize, usize) {
        let within = |t: &Instant| *t >= from && *t < to;
        let sent = self
            .sends
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|t| within(t))
            .count();
        let answered = self
            .answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(t, _)| within(t))
            .count();
        (sent, answered)
    }

    /// The probes sent in [from, to) that were not answered, by when they were sent.
    pub fn unanswered(&self, from: Instant, to: Instant) -> Vec<Instant> {
        let answered: std::collections::HashSet<Instant> = self
            .answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(t, _)| *t)
            .collect();
        self.sends
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|t| **t >= from && **t < to && !answered.contains(t))
            .copied()
            .collect()
    }

    /// Probes sent after `t` and answered.
    pub fn answered_since(&self, t: Instant) -> usize {
        self.answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(sent, _)| *sent > t)
            .count()
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
