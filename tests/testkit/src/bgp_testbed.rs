//! The BGP testbed: the real-packet testbed in its BGP shape (`scripts/testbed.sh start DIR N
//! bgp`: the LAN's router in a namespace of its own on the wire, a client behind it) with FRR as
//! the router's BGP speaker and one in every node's namespace, peering over eBGP (one IPv4
//! session per node carries both families) with BFD. A VIP off every on-link subnet reaches the
//! client only through the routes the router learns.
//!
//! The router's configuration is here: every node a neighbor, ECMP over up to 64 paths in both
//! families. A node's is the caller's, as the agent makes it from the `BGPPeer` and `BFDProfile`
//! objects [`peer_objects`] writes, so the node speaks as vipflow will have it speak.
//!
//! Dropped in order: the FRR instances by their pids, then the testbed (its daemons by pid, its
//! namespaces by their recorded names).

use crate::frr::Frr;
use crate::testbed::{self, Shape, Testbed};
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// The router's AS.
pub const ROUTER_ASN: u32 = 64512;
/// Every node's AS (one AS for the cluster, as MetalLB and frr-k8s deployments mostly have it).
pub const NODE_ASN: u32 = 64513;
/// The BFD profile's name, on the router and in the nodes' `BFDProfile`.
pub const BFD_PROFILE: &str = "ci";

/// BFD's timers on both ends of every session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bfd {
    pub receive_ms: u32,
    pub transmit_ms: u32,
    pub multiplier: u8,
}

impl Default for Bfd {
    /// 300 ms × 3: a dead node is noticed within a second, and a busy two-core CI machine that
    /// pauses a daemon for a fraction of that does not take a session down.
    fn default() -> Bfd {
        Bfd {
            receive_ms: 300,
            transmit_ms: 300,
            multiplier: 3,
        }
    }
}

/// Items of an objects file's List: the `BGPPeer` every node peers with the router by (its
/// address on the wire, both families over the one session) and the `BFDProfile` it names.
pub fn peer_objects(bfd: Bfd) -> String {
    let api = "vipflow.io/v1alpha1";
    format!(
        "- apiVersion: {api}\n  kind: BGPPeer\n  metadata: {{name: router}}\n  spec: {{myASN: {NODE_ASN}, peerASN: {ROUTER_ASN}, peerAddress: \"{}\", bfdProfile: {BFD_PROFILE}}}\n\
         - apiVersion: {api}\n  kind: BFDProfile\n  metadata: {{name: {BFD_PROFILE}}}\n  spec: {{receiveInterval: {}, transmitInterval: {}, detectMultiplier: {}}}\n",
        testbed::GATEWAY_V4,
        bfd.receive_ms,
        bfd.transmit_ms,
        bfd.multiplier
    )
}

/// The router's FRR configuration for `nodes` nodes.
fn router_config(nodes: usize, bfd: Bfd) -> String {
    let mut c = format!(
        "frr defaults datacenter\n!\nbfd\n profile {BFD_PROFILE}\n  receive-interval {}\n  transmit-interval {}\n  detect-multiplier {}\n exit\nexit\n!\n",
        bfd.receive_ms, bfd.transmit_ms, bfd.multiplier
    );
    c += &format!(
        "router bgp {ROUTER_ASN}\n bgp router-id {}\n no bgp ebgp-requires-policy\n no bgp default ipv4-unicast\n",
        testbed::GATEWAY_V4
    );
    c += &format!(
        " neighbor nodes peer-group\n neighbor nodes remote-as {NODE_ASN}\n neighbor nodes bfd profile {BFD_PROFILE}\n"
    );
    for i in 1..=nodes {
        c += &format!(" neighbor {} peer-group nodes\n", testbed::node_ip(i));
    }
    for family in ["ipv4", "ipv6"] {
        c += &format!(
            " address-family {family} unicast\n  neighbor nodes activate\n  maximum-paths 64\n exit-address-family\n"
        );
    }
    c + "exit\n"
}

pub struct BgpTestbed {
    /// The router's FRR, then node *i*'s at *i*.
    frr: Vec<Frr>,
    bfd: Bfd,
    /// Last: the FRR instances in its namespaces stop first.
    pub tb: Testbed,
}

impl BgpTestbed {
    /// Start the testbed in its BGP shape with `nodes` nodes, FRR on the router and FRR on node
    /// *i* with `node_config(i)`, and wait until every session is established in both families
    /// and its BFD is up. `None` where namespaces cannot be made (the caller skips).
    pub fn start(nodes: usize, bfd: Bfd, node_config: impl Fn(usize) -> String) -> Option<Self> {
        let bed = BgpTestbed::launch(nodes, bfd, node_config)?;
        bed.wait_sessions(Duration::from_secs(60));
        Some(bed)
    }

    /// Start the testbed with the nodes' FRR daemons running and configured with nothing, as
    /// an FRR sidecar starts before the agent configures it. No session comes up until the
    /// agents configure their FRR (then [`BgpTestbed::wait_sessions`]).
    pub fn start_unconfigured(nodes: usize, bfd: Bfd) -> Option<Self> {
        BgpTestbed::launch(nodes, bfd, |_| String::new())
    }

    fn launch(nodes: usize, bfd: Bfd, node_config: impl Fn(usize) -> String) -> Option<Self> {
        let tb = Testbed::start_shaped(nodes, Shape::Bgp)?;
        // Declared after `tb`, so a failure below stops them before the testbed goes.
        let mut frr = vec![Frr::start_in(&tb.ns("router"), &router_config(nodes, bfd))];
        for i in 1..=nodes {
            frr.push(Frr::start_in(&tb.ns(&format!("node{i}")), &node_config(i)));
        }
        Some(BgpTestbed { frr, bfd, tb })
    }

    /// Every node's pod a, serving as [`crate::netns::PodServer`] does (stopped on drop).
    pub fn start_pods(&self) -> Vec<crate::netns::PodServer> {
        (1..=self.tb.nodes)
            .map(|i| {
                let name = format!("pod{i}a");
                crate::netns::PodServer::start(&self.tb.ns(&name), &name).expect("pod server")
            })
            .collect()
    }

    /// Node `node`'s agent's flags as on an OVN-Kubernetes node: no port flags; node1's agent
    /// also writes the rows, attached through the node templates; no `--announce` (BGP draws
    /// the traffic, not ARP/ND answers). With `frr`, the agent drives the node's FRR.
    pub fn agent_args(&self, node: usize, frr: bool) -> Vec<String> {
        let mut a = Vec::new();
        if node == 1 {
            a.extend(
                [
                    "--nb-remote",
                    &self.tb.nb_remote(),
                    "--node-router",
                    "GR_{node}",
                    "--node-switch",
                    "{node}",
                ]
                .map(String::from),
            );
        }
        if frr {
            a.push("--frr-socket-dir".into());
            a.push(self.speaker(node).path().display().to_string());
        }
        a
    }

    /// The client's source ports towards `vip` (either family) that node `node`'s connection
    /// tracking holds: the flows the router's hash gave that node.
    pub fn tracked_ports(&self, node: usize, vip: &str) -> BTreeSet<u16> {
        let client = if vip.contains(':') {
            testbed::REMOTE_V6
        } else {
            testbed::REMOTE_V4
        };
        let head = format!("orig=(src={client},dst={vip},sport=");
        self.tb
            .appctl(node, &["dpctl/dump-conntrack"])
            .lines()
            .filter_map(|l| {
                let rest = &l[l.find(&head)? + head.len()..];
                rest[..rest.find(',')?].parse::<u16>().ok()
            })
            .collect()
    }

    /// The router's FRR.
    pub fn router(&self) -> &Frr {
        &self.frr[0]
    }

    /// Node *i*'s FRR (its `path()` is the `--vty_socket` directory).
    pub fn speaker(&self, node: usize) -> &Frr {
        &self.frr[node]
    }

    /// Wait until every session is Established in both families on the router and every BFD
    /// peer is up, running the profile's timers on both ends (panics after `bound`).
    pub fn wait_sessions(&self, bound: Duration) {
        let start = Instant::now();
        loop {
            let (bgp, bfd) = self.sessions();
            if bgp.len() == self.tb.nodes && bfd.len() == self.tb.nodes {
                eprintln!(
                    "BGP testbed: {} sessions established and BFD up {:?} after FRR started",
                    self.tb.nodes,
                    start.elapsed()
                );
                self.check_bfd_timers();
                return;
            }
            if start.elapsed() >= bound {
                panic!(
                    "BGP sessions up: {bgp:?}, BFD up: {bfd:?}\nrouter's bgpd:\n{}\n{}",
                    self.router().log("bgpd"),
                    self.down_nodes_state(&bgp)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// What each node whose session is not in `up` says of itself: its FRR's sessions, BFD
    /// peers and interfaces as zebra sees them, its daemons' logs, and its links as the kernel
    /// has them (zebra's view going stale shows as the two disagreeing).
    fn down_nodes_state(&self, up: &BTreeSet<String>) -> String {
        let mut out = String::new();
        for i in 1..=self.tb.nodes {
            if up.contains(&testbed::node_ip(i)) {
                continue;
            }
            let f = self.speaker(i);
            let shown = f
                .vtysh(&[
                    "show bgp summary",
                    "show bfd peers brief",
                    "show interface brief",
                ])
                .unwrap_or_else(|e| e);
            let links = self.tb.ip(&format!("node{i}"), &["-br", "link"]);
            out += &format!(
                "node{i}'s FRR:\n{shown}\nnode{i}'s links:\n{links}\nnode{i}'s bgpd:\n{}\nnode{i}'s bfdd:\n{}\nnode{i}'s zebra:\n{}\n",
                f.log("bgpd"),
                f.log("bfdd"),
                f.log("zebra")
            );
        }
        out
    }

    /// Both ends of every BFD session run the profile's timers: the router's own, and the
    /// node's as the router heard them (so the node's FRR took its `BFDProfile`).
    fn check_bfd_timers(&self) {
        let text = self
            .router()
            .vtysh(&["show bfd peers json"])
            .unwrap_or_default();
        let peers: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let b = self.bfd;
        for p in peers.as_array().into_iter().flatten() {
            for side in ["", "remote-"] {
                let got = |k: &str| p[format!("{side}{k}")].as_u64();
                assert_eq!(
                    (
                        got("receive-interval"),
                        got("transmit-interval"),
                        got("detect-multiplier")
                    ),
                    (
                        Some(u64::from(b.receive_ms)),
                        Some(u64::from(b.transmit_ms)),
                        Some(u64::from(b.multiplier))
                    ),
                    "BFD timers ({side}) of {}: {text}",
                    p["peer"]
                );
            }
        }
    }

    /// The router's neighbors Established in both families, and its BFD peers up.
    pub fn sessions(&self) -> (BTreeSet<String>, BTreeSet<String>) {
        let json = |cmd: &str| -> Value {
            self.router()
                .vtysh(&[cmd])
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or(Value::Null)
        };
        let established = |family: &str| -> BTreeSet<String> {
            let v = json(&format!("show bgp {family} unicast summary json"));
            v["peers"]
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(_, p)| p["state"] == "Established")
                .map(|(a, _)| a.clone())
                .collect()
        };
        let v4 = established("ipv4");
        let bgp = established("ipv6").intersection(&v4).cloned().collect();
        let bfd = json("show bfd peers json")
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["status"] == "up")
            .filter_map(|p| p["peer"].as_str().map(str::to_string))
            .collect();
        (bgp, bfd)
    }

    /// The next hops of the router's kernel route to `prefix` (either family), as `ip route`
    /// prints them: what the router forwards by. None when it has no such route.
    pub fn next_hops(&self, prefix: &str) -> Vec<String> {
        let family = if prefix.contains(':') { "-6" } else { "-4" };
        let out = self.tb.ip("router", &[family, "route", "show", prefix]);
        let words: Vec<&str> = out.split_whitespace().collect();
        words
            .windows(2)
            .filter(|w| w[0] == "via")
            .map(|w| w[1].to_string())
            .collect()
    }

    /// The nodes the router forwards `prefix` to, by its next hops (a node's address, or for
    /// IPv6 its link-local one). A next hop that is no node's panics.
    pub fn next_hop_nodes(&self, prefix: &str) -> BTreeSet<usize> {
        self.next_hops(prefix)
            .iter()
            .map(|hop| {
                (1..=self.tb.nodes)
                    .find(|&i| {
                        *hop == testbed::node_ip(i)
                            || *hop == testbed::node_ip6(i)
                            || *hop == testbed::node_link_local6(i)
                    })
                    .unwrap_or_else(|| panic!("the router's next hop {hop} is no node's"))
            })
            .collect()
    }
}

impl Drop for BgpTestbed {
    fn drop(&mut self) {
        if std::thread::panicking() && std::env::var_os("VIPFLOW_TESTBED_HOLD").is_some() {
            // Left running with the testbed for a look: `scripts/testbed.sh stop` ends every
            // process in its namespaces, FRR's too; FRR's directories stay.
            for f in std::mem::take(&mut self.frr) {
                eprintln!("FRR held in {} (namespace {})", f.path().display(), f.ns());
                std::mem::forget(f);
            }
        }
    }
}
