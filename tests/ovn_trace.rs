//! vipflow's Northbound rows checked end to end with a real `ovn-northd` and `ovn-trace`.
//!
//! Each test builds a small ovn-kubernetes-shaped logical topology with `ovn-nbctl`, lets the
//! agent write its `Load_Balancer` rows, waits until northd has turned them into SB logical
//! flows (`ovn-nbctl --wait=sb sync`), then traces a TCP SYN from an external client to the VIP
//! as it enters a node from br-ex (the node's localnet port on its external switch).
//!
//! Topology, node `k` = 1, 2, 3 for node-a, node-b, node-c:
//!
//! ```text
//!  client 198.51.100.7
//!     |
//!  breth0_node-X (localnet) -- ext_node-X -- etor/rtoe-GR_node-X 02:00:00:00:0a:0(k+1) 172.18.0.(k+1)/24
//!                                            GR_node-X (options:chassis=chassis-node-X: a gateway router)
//!                                            rtoj-GR_node-X 100.64.0.(k+1)/16, route 10.244.0.0/16 via 100.64.0.1
//!                                              |
//!                                            join -- rtoj-ovn_cluster_router 100.64.0.1/16
//!                                                    ovn_cluster_router
//!                                                    rtos-node-X 10.244.k.1/24 -- switch node-X -- pod ports
//! ```
//!
//! What a trace proves is read from two of ovn-trace's outputs: the detailed one carries the
//! gateway router's `lr_in_dnat` flow and its `ct_lb_mark(backends=...)` (or `reject`) action,
//! whose backend list is compared as a set; the minimal one shows where the packet ends up
//! (`output("pod-...")`, or `tcp_reset { output("breth0_node-X") }` back to the client). With
//! several backends ovn-trace picks one at random, so each backend is also traced on its own
//! with `--lb-dst` to show that the DNATed packet really reaches that endpoint's pod.

use std::collections::BTreeSet;
use testkit::Sandbox;

mod common;
use common::Agent;
use vipflow::config::Config;

const VIP: &str = "172.18.0.210";
const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];

/// The shared agent harness (with the NB database), waiting for northd after each write.
struct Harness(Agent);

impl std::ops::Deref for Harness {
    type Target = Agent;
    fn deref(&self) -> &Agent {
        &self.0
    }
}

impl Harness {
    async fn start(sb: Sandbox, edit: impl FnOnce(&mut Config), yaml: &str) -> Harness {
        let h = Harness(Agent::start(sb, true, edit, yaml).await);
        h.northd_caught_up();
        h
    }

    async fn update(&mut self, yaml: &str) {
        self.0.update(yaml).await;
        self.northd_caught_up();
    }

    /// The agent wrote NB; wait until northd has computed the SB logical flows from it.
    fn northd_caught_up(&self) {
        self.sb.nbctl(&["--timeout=10", "--wait=sb", "sync"]);
    }

    /// The load balancer rows on a router or switch, its own and its groups', as
    /// `name vips options` lines (for messages).
    fn datapath_rows(&self, table: &str, name: &str) -> String {
        let mut uuids = self
            .sb
            .nbctl(&["--bare", "--columns=load_balancer", "list", table, name]);
        let groups = self.sb.nbctl(&[
            "--bare",
            "--columns=load_balancer_group",
            "list",
            table,
            name,
        ]);
        for g in groups.split_whitespace() {
            uuids.push(' ');
            uuids.push_str(&self.sb.nbctl(&[
                "--bare",
                "--columns=load_balancer",
                "list",
                "Load_Balancer_Group",
                g,
            ]));
        }
        uuids
            .split_whitespace()
            .map(|u| {
                self.sb.nbctl(&[
                    "--bare",
                    "--columns=name,vips,options",
                    "list",
                    "Load_Balancer",
                    u,
                ])
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn router_rows(&self, router: &str) -> String {
        self.datapath_rows("Logical_Router", router)
    }
}

/// 1-based index of a node: its pod subnet is 10.244.k.0/24.
fn node_index(node: &str) -> u8 {
    NODES.iter().position(|n| *n == node).unwrap() as u8 + 1
}

/// The gateway router's external MAC (what br-ex sends VIP traffic to).
fn gr_ext_mac(node: &str) -> String {
    format!("02:00:00:00:0a:{:02x}", node_index(node) + 1)
}

/// Logical switch port name of the pod with this IP.
fn pod_port(ip: &str) -> String {
    format!("pod-{}", ip.replace('.', "-"))
}

/// The logical topology of the module docs, with one pod port per `(ip, node)`.
fn build_topology(sb: &Sandbox, pods: &[(&str, &str)]) {
    let mut cmds: Vec<Vec<String>> = Vec::new();
    let mut c = |args: &[&str]| cmds.push(args.iter().map(|s| s.to_string()).collect());
    c(&["lr-add", "ovn_cluster_router"]);
    c(&["ls-add", "join"]);
    c(&[
        "lrp-add",
        "ovn_cluster_router",
        "rtoj-ovn_cluster_router",
        "0a:58:64:40:00:01",
        "100.64.0.1/16",
    ]);
    // A switch port facing a router port.
    let router_port = |c: &mut dyn FnMut(&[&str]), ls: &str, lsp: &str, lrp: &str| {
        c(&["lsp-add", ls, lsp]);
        c(&["lsp-set-type", lsp, "router"]);
        c(&["lsp-set-addresses", lsp, "router"]);
        c(&["lsp-set-options", lsp, &format!("router-port={lrp}")]);
    };
    router_port(
        &mut c,
        "join",
        "jtor-ovn_cluster_router",
        "rtoj-ovn_cluster_router",
    );
    for node in NODES {
        let k = node_index(node);
        let gr = format!("GR_{node}");
        let ext = format!("ext_{node}");
        let (rtos, stor) = (format!("rtos-{node}"), format!("stor-{node}"));
        let (rtoj, jtor) = (format!("rtoj-{gr}"), format!("jtor-{gr}"));
        let (rtoe, etor) = (format!("rtoe-{gr}"), format!("etor-{gr}"));
        let localnet = format!("breth0_{node}");
        // The node's pod switch on the distributed router.
        c(&["ls-add", node]);
        c(&[
            "lrp-add",
            "ovn_cluster_router",
            &rtos,
            &format!("0a:58:0a:f4:{k:02x}:01"),
            &format!("10.244.{k}.1/24"),
        ]);
        router_port(&mut c, node, &stor, &rtos);
        // The gateway router: bound to a chassis, so northd builds gateway-router LB flows.
        c(&["lr-add", &gr]);
        c(&[
            "set",
            "Logical_Router",
            &gr,
            &format!("options:chassis=chassis-{node}"),
        ]);
        c(&[
            "lrp-add",
            &gr,
            &rtoj,
            &format!("0a:58:64:40:00:{:02x}", k + 1),
            &format!("100.64.0.{}/16", k + 1),
        ]);
        router_port(&mut c, "join", &jtor, &rtoj);
        c(&[
            "lrp-add",
            &gr,
            &rtoe,
            &gr_ext_mac(node),
            &format!("172.18.0.{}/24", k + 1),
        ]);
        c(&["ls-add", &ext]);
        router_port(&mut c, &ext, &etor, &rtoe);
        c(&["lsp-add", &ext, &localnet]);
        c(&["lsp-set-type", &localnet, "localnet"]);
        c(&["lsp-set-addresses", &localnet, "unknown"]);
        c(&["lsp-set-options", &localnet, "network_name=physnet"]);
        c(&["lr-route-add", &gr, "10.244.0.0/16", "100.64.0.1"]);
        c(&["lr-route-add", &gr, "0.0.0.0/0", "172.18.0.1", &rtoe]);
    }
    for (ip, node) in pods {
        let o: Vec<u8> = ip.split('.').map(|x| x.parse().unwrap()).collect();
        let port = pod_port(ip);
        c(&["lsp-add", node, &port]);
        c(&[
            "lsp-set-addresses",
            &port,
            &format!(
                "0a:58:{:02x}:{:02x}:{:02x}:{:02x} {ip}",
                o[0], o[1], o[2], o[3]
            ),
        ]);
    }
    // One ovn-nbctl run, one transaction.
    let mut args: Vec<&str> = Vec::new();
    for (i, cmd) in cmds.iter().enumerate() {
        if i > 0 {
            args.push("--");
        }
        args.extend(cmd.iter().map(String::as_str));
    }
    sb.nbctl(&args);
}

fn objects_yaml(etp: &str, annotations: &str, eps: &[(&str, &str, bool)]) -> String {
    let nodes: String = NODES
        .iter()
        .map(|n| {
            format!(
                "\n- apiVersion: v1\n  kind: Node\n  metadata: {{name: {n}}}\n  status: {{addresses: [{{type: InternalIP, address: 192.168.10.{}}}]}}",
                10 + node_index(n)
            )
        })
        .collect();
    let eps: String = eps
        .iter()
        .map(|(ip, node, ready)| {
            format!(
                "\n  - addresses: [{ip}]\n    nodeName: {node}\n    conditions: {{ready: {ready}, serving: {ready}, terminating: false}}"
            )
        })
        .collect();
    format!(
        r#"apiVersion: v1
kind: List
items:{nodes}
- apiVersion: v1
  kind: Service
  metadata:
    name: web
    namespace: shop
    creationTimestamp: "2026-02-01T00:00:00Z"
    annotations: {{{annotations}}}
  spec:
    type: ClusterIP
    clusterIP: 10.96.0.30
    clusterIPs: [10.96.0.30]
    externalIPs: ["{VIP}"]
    externalTrafficPolicy: {etp}
    ports: [{{port: 80, protocol: TCP, targetPort: 8080}}]
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata:
    name: web-x1
    namespace: shop
    labels: {{kubernetes.io/service-name: web}}
  addressType: IPv4
  ports: [{{port: 8080, protocol: TCP}}]
  endpoints:{eps}
"#
    )
}

/// One ovn-trace of a TCP SYN to VIP:80: from an external client entering `node` from br-ex,
/// or from a pod on `node`.
struct Trace {
    node: String,
    /// Where the load balancer is looked for: the gateway router, or the pod's node switch.
    lb_dp: String,
    detailed: String,
    minimal: String,
}

fn trace(sb: &Sandbox, node: &str, lb_dst: Option<&str>) -> Trace {
    let flow = format!(
        "inport == \"breth0_{node}\" && eth.src == 02:aa:aa:aa:aa:01 && eth.dst == {} && \
         ip4.src == 198.51.100.7 && ip4.dst == {VIP} && ip.ttl == 64 && \
         tcp && tcp.src == 40000 && tcp.dst == 80 && tcp.flags == 0x002",
        gr_ext_mac(node)
    );
    run_trace(
        sb,
        node,
        &format!("ext_{node}"),
        &format!("GR_{node}"),
        &flow,
        lb_dst,
    )
}

/// A SYN from the pod `ip` on `node` to VIP:80, sent to its default gateway (the cluster
/// router's port on the node switch).
fn trace_from_pod(sb: &Sandbox, node: &str, ip: &str, lb_dst: Option<&str>) -> Trace {
    let k = node_index(node);
    let o: Vec<u8> = ip.split('.').map(|x| x.parse().unwrap()).collect();
    let flow = format!(
        "inport == \"{}\" && eth.src == 0a:58:{:02x}:{:02x}:{:02x}:{:02x} && \
         eth.dst == 0a:58:0a:f4:{k:02x}:01 && ip4.src == {ip} && ip4.dst == {VIP} && \
         ip.ttl == 64 && tcp && tcp.src == 40000 && tcp.dst == 80 && tcp.flags == 0x002",
        pod_port(ip),
        o[0],
        o[1],
        o[2],
        o[3]
    );
    run_trace(sb, node, node, node, &flow, lb_dst)
}

fn run_trace(
    sb: &Sandbox,
    node: &str,
    dp: &str,
    lb_dp: &str,
    flow: &str,
    lb_dst: Option<&str>,
) -> Trace {
    let db = format!("--db=unix:{}", sb.sb_sock().display());
    let lb = lb_dst.map(|d| format!("--lb-dst={d}"));
    let run = |mode: &str| {
        // The first ct action (the gateway router's ct_dnat in lr_in_defrag) reports a new
        // connection, so the load balancer's `ct.new` flow in lr_in_dnat applies.
        let mut args = vec![db.as_str(), "--ct=new", mode];
        args.extend(lb.as_deref());
        args.extend([dp, flow]);
        sb.run("ovn-trace", &args)
    };
    Trace {
        node: node.to_string(),
        lb_dp: lb_dp.to_string(),
        detailed: run("--detailed"),
        minimal: run("--minimal"),
    }
}

impl Trace {
    /// The load balancing stage for the VIP (`lr_in_dnat` of the gateway router, or
    /// `ls_in_lb` of the pod's switch): the flow line and its actions.
    fn gr_dnat_stage(&self) -> Option<String> {
        let dp = format!("ingress(dp=\"{}\"", self.lb_dp);
        let mut in_dp = false;
        let mut lines = self.detailed.lines().peekable();
        while let Some(l) = lines.next() {
            if l.starts_with("ingress(") || l.starts_with("egress(") {
                in_dp = l.starts_with(&dp);
            }
            if in_dp
                && (l.contains("lr_in_dnat") || l.contains("ls_in_lb"))
                && l.contains(&format!("ip4.dst == {VIP}"))
            {
                let mut stage = vec![l.to_string()];
                while let Some(a) = lines.next_if(|a| a.starts_with("    ")) {
                    stage.push(a.to_string());
                }
                return Some(stage.join("\n"));
            }
        }
        None
    }

    /// The backends of the gateway router's `ct_lb_mark(backends=...)` (or `ct_lb`).
    fn backends(&self) -> Option<BTreeSet<String>> {
        let stage = self.gr_dnat_stage()?;
        let start = stage
            .find("ct_lb_mark(backends=")
            .map(|i| i + "ct_lb_mark(backends=".len())
            .or_else(|| {
                stage
                    .find("ct_lb(backends=")
                    .map(|i| i + "ct_lb(backends=".len())
            })?;
        let rest = &stage[start..];
        let end = rest.find([';', ')']).unwrap_or(rest.len());
        Some(
            rest[..end]
                .split(',')
                .map(|s| s.trim().to_string())
                .collect(),
        )
    }

    /// Every logical port the packet (or what OVN sends instead of it) is output to.
    fn outputs(&self) -> Vec<String> {
        self.minimal
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                l.strip_prefix("output(\"")?
                    .strip_suffix("\");")
                    .map(str::to_string)
            })
            .collect()
    }

    fn show(&self) -> String {
        format!(
            "--- trace on {} (minimal) ---\n{}\n--- detailed ---\n{}",
            self.node, self.minimal, self.detailed
        )
    }
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// The VIP entering `node` is DNATed to exactly `expected` (ip:port) and, traced once per
/// backend, reaches that backend's pod.
fn assert_dnat_to(h: &Harness, node: &str, expected: &[&str], skip_snat: bool) {
    let t = trace(&h.sb, node, None);
    let rows = h.router_rows(&format!("GR_{node}"));
    assert_eq!(
        t.backends(),
        Some(set(expected)),
        "{node}: the gateway router DNATs the VIP to exactly these backends\nrows on GR_{node}:\n{rows}\n{}",
        t.show()
    );
    let stage = t.gr_dnat_stage().unwrap();
    assert_eq!(
        stage.contains("skip_snat"),
        skip_snat,
        "{node}: skip_snat on the DNAT action\n{stage}"
    );
    assert!(!t.minimal.contains("tcp_reset"), "{}", t.show());
    for backend in expected {
        let t = trace(&h.sb, node, Some(backend));
        let ip = backend.split(':').next().unwrap();
        assert_eq!(
            t.outputs(),
            vec![pod_port(ip)],
            "{node}: the SYN DNATed to {backend} is delivered to its pod and nowhere else\n{}",
            t.show()
        );
    }
}

/// A SYN from the pod `pod_ip` on `node` to the VIP is DNATed by the node switch to exactly
/// `expected`, and, traced once per backend, reaches that backend's pod.
fn assert_pod_dnat_to(h: &Harness, node: &str, pod_ip: &str, expected: &[&str]) {
    let t = trace_from_pod(&h.sb, node, pod_ip, None);
    let rows = h.datapath_rows("Logical_Switch", node);
    assert_eq!(
        t.backends(),
        Some(set(expected)),
        "{node}: the node switch DNATs the pod's SYN to exactly these backends\nrows on switch {node}:\n{rows}\n{}",
        t.show()
    );
    assert!(!t.minimal.contains("tcp_reset"), "{}", t.show());
    for backend in expected {
        let t = trace_from_pod(&h.sb, node, pod_ip, Some(backend));
        let ip = backend.split(':').next().unwrap();
        assert_eq!(
            t.outputs(),
            vec![pod_port(ip)],
            "{node}: the pod's SYN DNATed to {backend} is delivered to that pod and nowhere else\n{}",
            t.show()
        );
    }
}

/// The VIP entering `node` is answered with a TCP reset sent back out towards the client.
fn assert_rejected(h: &Harness, node: &str) {
    let t = trace(&h.sb, node, None);
    let rows = h.router_rows(&format!("GR_{node}"));
    let stage = t.gr_dnat_stage().unwrap_or_else(|| {
        panic!(
            "{node}: no lr_in_dnat flow for the VIP\nrows on GR_{node}:\n{rows}\n{}",
            t.show()
        )
    });
    assert!(
        stage.contains("reject {") && !stage.contains("ct_lb"),
        "{node}: the VIP's DNAT flow rejects instead of load balancing\n{stage}"
    );
    assert_eq!(t.backends(), None, "{}", t.show());
    assert!(
        t.minimal.contains("tcp_reset {"),
        "{node}: OVN answers with a TCP RST\n{}",
        t.show()
    );
    assert_eq!(
        t.outputs(),
        vec![format!("breth0_{node}")],
        "{node}: only the reset leaves, back out of the external port; no pod sees the SYN\n{}",
        t.show()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etp_local_dnats_to_the_nodes_own_endpoints_and_rejects_where_it_has_none() {
    let pods = [
        ("10.244.1.9", "node-a"),
        ("10.244.2.5", "node-b"),
        ("10.244.3.4", "node-c"),
    ];
    let sb = Sandbox::start();
    build_topology(&sb, &pods);
    // node-b runs a pod of the Service that is not ready yet.
    let y = objects_yaml(
        "Local",
        "",
        &[
            ("10.244.1.9", "node-a", true),
            ("10.244.2.5", "node-b", false),
            ("10.244.3.4", "node-c", true),
        ],
    );
    let mut h = Harness::start(
        sb,
        |c| c.northbound.node_router = Some("GR_{node}".into()),
        &y,
    )
    .await;

    // Each node DNATs only to its own endpoint (the other node's is never a candidate), and
    // keeps the client's source address (skip_snat).
    assert_dnat_to(&h, "node-a", &["10.244.1.9:8080"], true);
    assert_dnat_to(&h, "node-c", &["10.244.3.4:8080"], true);
    // node-b has no ready endpoint: reset, not a black hole and not a hop to another node.
    assert_rejected(&h, "node-b");

    // The pod on node-b becomes ready: node-b now serves the VIP itself, the others unchanged.
    let y2 = objects_yaml(
        "Local",
        "",
        &[
            ("10.244.1.9", "node-a", true),
            ("10.244.2.5", "node-b", true),
            ("10.244.3.4", "node-c", true),
        ],
    );
    h.update(&y2).await;
    assert_dnat_to(&h, "node-b", &["10.244.2.5:8080"], true);
    assert_dnat_to(&h, "node-a", &["10.244.1.9:8080"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefer_local_dnats_to_local_endpoints_else_to_remote_ones() {
    let pods = [("10.244.1.9", "node-a"), ("10.244.3.4", "node-c")];
    let sb = Sandbox::start();
    build_topology(&sb, &pods);
    // prefer-local by annotation (the config flag stays off).
    let y = objects_yaml(
        "Cluster",
        "vipflow.io/prefer-local: \"true\"",
        &[
            ("10.244.1.9", "node-a", true),
            ("10.244.3.4", "node-c", true),
        ],
    );
    let h = Harness::start(
        sb,
        |c| c.northbound.node_router = Some("GR_{node}".into()),
        &y,
    )
    .await;

    // Nodes with a local endpoint use only it.
    assert_dnat_to(&h, "node-a", &["10.244.1.9:8080"], false);
    assert_dnat_to(&h, "node-c", &["10.244.3.4:8080"], false);
    // node-b has none: the VIP still works there, DNATed to the endpoints on the other nodes,
    // and each of them is reached across the cluster router.
    assert_dnat_to(&h, "node-b", &["10.244.1.9:8080", "10.244.3.4:8080"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_row_on_every_gateway_router_dnats_to_all_ready_endpoints() {
    let pods = [
        ("10.244.1.9", "node-a"),
        ("10.244.2.5", "node-b"),
        ("10.244.3.4", "node-c"),
    ];
    let sb = Sandbox::start();
    build_topology(&sb, &pods);
    let y = objects_yaml(
        "Cluster",
        "",
        &[
            ("10.244.1.9", "node-a", true),
            ("10.244.2.5", "node-b", false),
            ("10.244.3.4", "node-c", true),
        ],
    );
    let h = Harness::start(
        sb,
        |c| {
            c.northbound.routers = NODES.iter().map(|n| format!("GR_{n}")).collect();
        },
        &y,
    )
    .await;

    // One row, attached to every gateway router: each node DNATs to all ready endpoints, local
    // or not; node-b's not-ready pod is not a backend even on node-b.
    for node in NODES {
        assert_dnat_to(&h, node, &["10.244.1.9:8080", "10.244.3.4:8080"], false);
    }
    let names: BTreeSet<String> =
        h.sb.nbctl(&[
            "--bare",
            "--columns=name",
            "find",
            "Load_Balancer",
            "external_ids:\"vipflow.io/owner\"=\"shop/web\"",
        ])
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(names, set(&["vipflow/shop/web/tcp"]), "one cluster row");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etp_local_pods_on_a_node_without_endpoints_reach_remote_ones_through_the_node_switch() {
    // node-b has no endpoint; 10.244.2.20 is a client pod there.
    let pods = [
        ("10.244.1.9", "node-a"),
        ("10.244.2.20", "node-b"),
        ("10.244.3.4", "node-c"),
    ];
    let sb = Sandbox::start();
    build_topology(&sb, &pods);
    let y = objects_yaml(
        "Local",
        "",
        &[
            ("10.244.1.9", "node-a", true),
            ("10.244.3.4", "node-c", true),
        ],
    );
    let h = Harness::start(
        sb,
        |c| {
            c.northbound.node_router = Some("GR_{node}".into());
            c.northbound.node_switch = Some("{node}".into());
        },
        &y,
    )
    .await;

    // From outside, the gateway routers stay node-local: node-b resets, node-a keeps its own.
    assert_rejected(&h, "node-b");
    assert_dnat_to(&h, "node-a", &["10.244.1.9:8080"], true);
    // From the pod on node-b, the node switch balances over every endpoint, all remote, and
    // each is reached across the cluster router.
    assert_pod_dnat_to(
        &h,
        "node-b",
        "10.244.2.20",
        &["10.244.1.9:8080", "10.244.3.4:8080"],
    );
    // The switch row is vipflow's `switches` row, in vipflow's switches group, which is on
    // every node switch and no router.
    let sw = h.sb.nbctl(&[
        "--bare",
        "--columns=_uuid",
        "find",
        "Load_Balancer",
        "external_ids:\"vipflow.io/scope\"=switches",
    ]);
    let sw = sw.trim();
    let group = h.sb.nbctl(&[
        "--bare",
        "--columns=_uuid,load_balancer",
        "find",
        "Load_Balancer_Group",
        "name=vipflow-node-switches",
    ]);
    let group_uuid = group
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(
        group.contains(sw),
        "the switches group holds the row: {group}"
    );
    for node in NODES {
        let on_switch = h.sb.nbctl(&[
            "--bare",
            "--columns=load_balancer_group",
            "list",
            "Logical_Switch",
            node,
        ]);
        assert!(
            on_switch.contains(&group_uuid),
            "switch {node} holds the switches group"
        );
        let on_router = h.sb.nbctl(&[
            "--bare",
            "--columns=load_balancer,load_balancer_group",
            "list",
            "Logical_Router",
            &format!("GR_{node}"),
        ]);
        assert!(
            !on_router.contains(sw) && !on_router.contains(&group_uuid),
            "GR_{node} holds neither"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_only_a_node_router_template_cluster_rows_reach_every_gateway_router_through_vipflows_group()
 {
    let pods = [
        ("10.244.1.9", "node-a"),
        ("10.244.2.5", "node-b"),
        ("10.244.3.4", "node-c"),
    ];
    let sb = Sandbox::start();
    build_topology(&sb, &pods);
    let y = objects_yaml(
        "Cluster",
        "",
        &[
            ("10.244.1.9", "node-a", true),
            ("10.244.2.5", "node-b", false),
            ("10.244.3.4", "node-c", true),
        ],
    );
    // Nothing but the template of the router VIP traffic is steered into.
    let h = Harness::start(
        sb,
        |c| c.northbound.node_router = Some("GR_{node}".into()),
        &y,
    )
    .await;

    for node in NODES {
        assert_dnat_to(&h, node, &["10.244.1.9:8080", "10.244.3.4:8080"], false);
    }
    // Through one group of vipflow's, attached to every gateway router.
    let group = h.sb.nbctl(&[
        "--bare",
        "--columns=_uuid",
        "find",
        "Load_Balancer_Group",
        "name=vipflow-cluster",
    ]);
    let group = group.trim();
    assert!(
        !group.is_empty(),
        "vipflow's group exists, marked as vipflow's"
    );
    for node in NODES {
        let groups = h.sb.nbctl(&[
            "--bare",
            "--columns=load_balancer_group",
            "list",
            "Logical_Router",
            &format!("GR_{node}"),
        ]);
        assert_eq!(groups.trim(), group, "GR_{node} holds vipflow's group");
    }
}
