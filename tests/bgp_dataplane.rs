//! BGP with real packets: three OVN-Kubernetes-shaped nodes, each with FRR in its namespace
//! configured as the agent configures it (`node_config` from the `BGPPeer` and `BFDProfile`
//! objects), peer over eBGP and BFD with a router on the wire; a client sits behind the router,
//! and the Service's VIPs are off every on-link subnet, so only the routes the router learns
//! bring the client's packets to a node. The agents run in the nodes' namespaces without
//! `--announce` (no node answers ARP/ND for the VIPs: BGP draws the traffic) and keep the steer
//! flows on each br-ex and the rows in OVN. One test drives the advertisement through vipflow's
//! own pieces by hand (`frr_batch` applied by `Vtysh` to each node's FRR, and read back); the
//! other lets the agents (`--frr-socket-dir`) configure their empty FRR and advertise. The topology is
//! `scripts/testbed.sh`'s BGP shape (testkit's `BgpTestbed`). Without root it says `SKIPPED`;
//! under `CI` it fails instead.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use testkit::bgp_objects::{BgpObjects, BgpService};
use testkit::bgp_testbed::{self, Bfd, BgpTestbed};
use testkit::eventually;
use testkit::netns;
use testkit::testbed::{self, AgentProcess};
use vipflow::plan::bgp::frr_batch;
use vipflow::reconcile::frr::Vtysh;

const NODES: usize = 3;
/// The Service's VIPs, off every subnet the router, the nodes and the client are on: only a
/// route the router learned brings the client's packets to a node.
const VIP4: &str = "198.51.100.10";
const VIP6: &str = "2001:db8:100::10";
/// Connections per round, each from a source port of its own: with three next hops, the chance
/// that the hash leaves a node without one is 3 × (2/3)^60, about 10^-10.
const FLOWS: u16 = 60;
/// The time from a batch to the router's FIB the test expects (about 0.15 s measured; FRR's
/// update timers allow up to a second); waits are bounded at ten times it, only to catch a hang.
const FIB_TARGET: Duration = Duration::from_secs(2);

/// One BGP testbed at a time: two at once on a two-core machine would make each other's BFD
/// sessions and timings the test of load, not of vipflow.
static ONE_TESTBED: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_testbed() -> std::sync::MutexGuard<'static, ()> {
    ONE_TESTBED.lock().unwrap_or_else(|p| p.into_inner())
}

fn vipflow() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_vipflow"))
}

/// The objects file: three Nodes, `web` (LoadBalancer, externalTrafficPolicy Cluster, both VIPs
/// on TCP 80 and UDP 53, an endpoint on every node's pod a), the BGP objects every node's
/// FRR is configured from, and the pool the VIPs are in with a `BGPAdvertisement` of it.
fn objects(bfd: Bfd) -> String {
    with_services(bfd, vec![BgpService::cluster("web", 10, NODES)], None)
}

/// [`objects`]' Nodes and BGP objects with `services`, node `drained` marked for drain.
fn with_services(bfd: Bfd, services: Vec<BgpService>, drained: Option<usize>) -> String {
    let mut o = BgpObjects::new(NODES, bfd);
    o.services = services;
    o.drained = drained.into_iter().collect();
    o.yaml()
}

/// A node's FRR configuration as the agent makes it: `node_config` over the BGP objects of the
/// objects file, decoded as the agent decodes the file.
fn node_frr_config(objects: &str) -> String {
    let loaded = vipflow::decode::parse(objects).expect("the objects file parses");
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    let bgp = &loaded.objects.bgp;
    let (config, problems) =
        vipflow::bgp::frr_config::node_config(&BTreeMap::new(), &bgp.peers, &bgp.bfd_profiles);
    assert!(problems.is_empty(), "{problems:?}");
    config.expect("every node peers with the router")
}

fn host_prefixes() -> BTreeSet<ipnet::IpNet> {
    [VIP4, VIP6]
        .iter()
        .map(|v| ipnet::IpNet::from(v.parse::<IpAddr>().expect("a VIP")))
        .collect()
}

/// Apply the batch that turns node `node`'s originated prefixes from `old` into `new`, with the
/// agent's driver; how long vtysh took.
fn apply(
    rt: &tokio::runtime::Runtime,
    bed: &BgpTestbed,
    node: usize,
    old: &BTreeSet<ipnet::IpNet>,
    new: &BTreeSet<ipnet::IpNet>,
) -> Duration {
    let batch = frr_batch(bgp_testbed::NODE_ASN, old, new).expect("a change");
    let vtysh = Vtysh::new(bed.speaker(node).path());
    let start = Instant::now();
    rt.block_on(vtysh.apply(&batch))
        .unwrap_or_else(|e| panic!("node{node}'s FRR refused {batch}: {e}"));
    start.elapsed()
}

/// What node `node`'s FRR originates, read back by the agent's driver.
fn originated(
    rt: &tokio::runtime::Runtime,
    bed: &BgpTestbed,
    node: usize,
) -> BTreeSet<ipnet::IpNet> {
    rt.block_on(Vtysh::new(bed.speaker(node).path()).originated())
        .expect("FRR's JSON")
}

/// Wait until the router forwards both VIPs to exactly `nodes`; how long each family took.
fn wait_fib(bed: &BgpTestbed, nodes: &BTreeSet<usize>, since: Instant) -> [Duration; 2] {
    let mut took = [None, None];
    loop {
        for (k, vip) in [VIP4, VIP6].iter().enumerate() {
            if took[k].is_none() && bed.next_hop_nodes(vip) == *nodes {
                took[k] = Some(since.elapsed());
            }
        }
        if let [Some(a), Some(b)] = took {
            return [a, b];
        }
        assert!(
            since.elapsed() < FIB_TARGET * 10,
            "the router's FIB never held {nodes:?}: {VIP4} via {:?}, {VIP6} via {:?}\n{}",
            bed.next_hops(VIP4),
            bed.next_hops(VIP6),
            bed.router()
                .vtysh(&["show bgp ipv4 unicast", "show bgp ipv6 unicast"])
                .unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The steer flow's packets for `vip` (TCP 80) on every node.
fn steered(bed: &BgpTestbed, vip: &str) -> Vec<u64> {
    (1..=NODES)
        .map(|i| bed.tb.flow_packets(i, &[&format!("{vip},tp_dst=80")]))
        .collect()
}

/// What one round saw, per node (index *i* - 1 for node *i*).
struct Round {
    /// The steer flow's packets during the round.
    steered: Vec<u64>,
    /// The round's source ports the node's connection tracking holds.
    flows: Vec<BTreeSet<u16>>,
    /// Connections answered, by pod.
    pods: BTreeMap<String, usize>,
    /// The longest a connection took, from connect to the pod's answer.
    slowest: Duration,
}

/// One round: [`FLOWS`] TCP connections from the remote client to `vip`:80, from source ports
/// `first_port..`, every one answered by a pod.
fn round(bed: &BgpTestbed, vip: &str, first_port: u16) -> Round {
    let remote = bed.tb.ns("remote");
    let to = SocketAddr::new(vip.parse().expect("a VIP"), 80);
    let any: IpAddr = if vip.contains(':') {
        "::".parse().expect("any")
    } else {
        "0.0.0.0".parse().expect("any")
    };
    let before = steered(bed, vip);
    let ports: BTreeSet<u16> = (first_port..first_port + FLOWS).collect();
    let mut pods = BTreeMap::new();
    let mut slowest = Duration::ZERO;
    for &port in &ports {
        let start = Instant::now();
        let got = netns::tcp_request_from(
            &remote,
            SocketAddr::new(any, port),
            to,
            Duration::from_secs(5),
        )
        .unwrap_or_else(|e| panic!("TCP {vip}:80 from the client's port {port}: {e}"));
        let pod = got.split(' ').next().unwrap_or_default().to_string();
        assert!(
            (1..=NODES).any(|i| pod == format!("pod{i}a")),
            "{vip}:80 from port {port} answered {got:?}"
        );
        *pods.entry(pod).or_default() += 1;
        slowest = slowest.max(start.elapsed());
    }
    let after = steered(bed, vip);
    let steered = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let flows = (1..=NODES)
        .map(|i| &bed.tracked_ports(i, vip) & &ports)
        .collect();
    Round {
        steered,
        flows,
        pods,
        slowest,
    }
}

#[test]
fn ecmp_spreads_client_flows_over_every_node_and_a_withdrawal_moves_them() {
    let _one = one_testbed();
    let bfd = Bfd::default();
    let objects_text = objects(bfd);
    let node_config = node_frr_config(&objects_text);
    let Some(bed) = BgpTestbed::start(NODES, bfd, |_| node_config.clone()) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let _pods = bed.start_pods();
    let objects_path = bed.tb.path().join("objects.yaml");
    std::fs::write(&objects_path, &objects_text).expect("the objects file");
    let _agents: Vec<AgentProcess> = (1..=NODES)
        .map(|i| {
            bed.tb
                .agent_in_node(&vipflow(), i, &objects_path, &bed.agent_args(i, false))
        })
        .collect();
    for i in 1..=NODES {
        eventually(&format!("node{i}'s steer flows"), 30, || {
            let f = bed.tb.ofctl(i, &["dump-flows", "br-ex"]);
            f.contains(&format!("{VIP4},tp_dst=80")) && f.contains(&format!("{VIP6},tp_dst=80"))
        });
    }
    eventually("the Northbound rows", 30, || {
        let l = bed.tb.nbctl(&["lb-list"]);
        l.contains(&format!("{VIP4}:80")) && l.contains(&format!("[{VIP6}]:80"))
    });
    bed.tb.nbctl(&["--timeout=30", "--wait=hv", "sync"]);

    // Nothing advertised: the router has no route to the VIPs, and the client's packets go
    // nowhere.
    for vip in [VIP4, VIP6] {
        assert!(
            bed.next_hops(vip).is_empty(),
            "{vip} via {:?}",
            bed.next_hops(vip)
        );
        let to = SocketAddr::new(vip.parse().expect("a VIP"), 80);
        assert!(
            netns::tcp_request(&bed.tb.ns("remote"), to, Duration::from_secs(1)).is_err(),
            "{vip} answered before any node advertised it"
        );
    }

    // Every node advertises one host prefix per family, one batch each.
    let want = host_prefixes();
    let none = BTreeSet::new();
    let mut fib: BTreeSet<usize> = BTreeSet::new();
    for i in 1..=NODES {
        let start = Instant::now();
        let vtysh = apply(&rt, &bed, i, &none, &want);
        fib.insert(i);
        let [v4, v6] = wait_fib(&bed, &fib, start);
        println!(
            "node{i}'s batch to the router's FIB: {VIP4} {v4:?}, {VIP6} {v6:?} (vtysh took {vtysh:?})"
        );
        assert_eq!(originated(&rt, &bed, i), want, "node{i} originates");
    }
    assert_eq!(
        bed.next_hops(VIP4).len(),
        NODES,
        "{:?}",
        bed.next_hops(VIP4)
    );
    assert_eq!(
        bed.next_hops(VIP6).len(),
        NODES,
        "{:?}",
        bed.next_hops(VIP6)
    );

    // Many flows of one client spread over every node, and every one is answered.
    for (vip, ports) in [(VIP4, 20000), (VIP6, 21000)] {
        let r = round(&bed, vip, ports);
        let per_node: Vec<usize> = r.flows.iter().map(BTreeSet::len).collect();
        println!(
            "{vip}: {FLOWS}/{FLOWS} answered (pods {:?}); flows per node {per_node:?}, steer packets per node {:?}, slowest {:?}",
            r.pods, r.steered, r.slowest
        );
        for i in 1..=NODES {
            assert!(
                r.steered[i - 1] > 0,
                "node{i}'s steer flow for {vip} counted nothing: {:?}",
                r.steered
            );
        }
        // The router hashes each flow to one node: each connection is tracked on one node only.
        assert_eq!(
            per_node.iter().sum::<usize>(),
            usize::from(FLOWS),
            "{:?}",
            r.flows
        );
        let all: BTreeSet<u16> = r.flows.iter().flatten().copied().collect();
        assert_eq!(all.len(), usize::from(FLOWS), "{:?}", r.flows);
    }

    // node3 withdraws: its next hop leaves the router's FIB, and new flows go to the others.
    let start = Instant::now();
    let vtysh = apply(&rt, &bed, NODES, &want, &none);
    let rest: BTreeSet<usize> = (1..NODES).collect();
    let [v4, v6] = wait_fib(&bed, &rest, start);
    println!(
        "node{NODES}'s withdrawal to the router's FIB: {VIP4} {v4:?}, {VIP6} {v6:?} (vtysh took {vtysh:?})"
    );
    assert!(originated(&rt, &bed, NODES).is_empty());
    for (vip, ports) in [(VIP4, 22000), (VIP6, 23000)] {
        let r = round(&bed, vip, ports);
        let per_node: Vec<usize> = r.flows.iter().map(BTreeSet::len).collect();
        println!(
            "{vip} after node{NODES} withdrew: {FLOWS}/{FLOWS} answered (pods {:?}); flows per node {per_node:?}, steer packets per node {:?}, slowest {:?}",
            r.pods, r.steered, r.slowest
        );
        assert_eq!(
            r.steered[NODES - 1],
            0,
            "node{NODES} still steered {vip}: {:?}",
            r.steered
        );
        assert!(
            r.flows[NODES - 1].is_empty(),
            "node{NODES} tracked {:?}",
            r.flows[NODES - 1]
        );
        for i in 1..NODES {
            assert!(
                r.steered[i - 1] > 0,
                "node{i}'s steer flow for {vip} counted nothing: {:?}",
                r.steered
            );
        }
        assert_eq!(
            per_node.iter().sum::<usize>(),
            usize::from(FLOWS),
            "{:?}",
            r.flows
        );
    }
}

/// The Local Service's VIPs.
const API4: &str = "198.51.100.11";
const API6: &str = "2001:db8:100::11";

/// The objects file of the agent-driven test: [`objects`] plus `api` (LoadBalancer,
/// externalTrafficPolicy Local, both families) with its one endpoint on node `api_on`'s pod a.
fn agent_objects(bfd: Bfd, api_on: usize) -> String {
    with_services(
        bfd,
        vec![
            BgpService::cluster("web", 10, NODES),
            BgpService::local("api", 11, &[api_on]),
        ],
        None,
    )
}

/// Wait until the router forwards `vips` to exactly `nodes`; how long it took.
fn wait_routes(
    bed: &BgpTestbed,
    vips: &[&str],
    nodes: &BTreeSet<usize>,
    since: Instant,
) -> Duration {
    loop {
        if vips.iter().all(|v| bed.next_hop_nodes(v) == *nodes) {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < FIB_TARGET * 10,
            "the router's FIB never held {vips:?} via {nodes:?}: {:?}\n{}",
            vips.iter()
                .map(|v| (v, bed.next_hops(v)))
                .collect::<Vec<_>>(),
            bed.router()
                .vtysh(&["show bgp ipv4 unicast", "show bgp ipv6 unicast"])
                .unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The router's BGP table versions (IPv4, IPv6): each moves on every change to the table.
fn router_table_versions(bed: &BgpTestbed) -> [u64; 2] {
    ["ipv4", "ipv6"].map(|family| {
        let out = bed
            .router()
            .vtysh(&[&format!("show bgp {family} unicast json")])
            .unwrap_or_default();
        serde_json::from_str::<serde_json::Value>(&out)
            .ok()
            .and_then(|v| v["tableVersion"].as_u64())
            .unwrap_or(0)
    })
}

/// The agents drive FRR themselves: each node's FRR starts empty, the agent configures it from
/// the `BGPPeer` and `BFDProfile` objects and advertises what the plan says once its bridge
/// carries it. A Cluster VIP goes out from every node and a client's flows spread over all of
/// them; a Local VIP only from the node with its endpoint, and it follows the endpoint; an
/// agent restart changes nothing in the router's table.
#[test]
fn agents_advertise_through_their_frr_cluster_vips_from_every_node_local_ones_from_their_endpoints()
{
    let _one = one_testbed();
    let bfd = Bfd::default();
    let Some(bed) = BgpTestbed::start_unconfigured(NODES, bfd) else {
        return;
    };
    let _pods = bed.start_pods();
    let objects_path = bed.tb.path().join("objects.yaml");
    std::fs::write(&objects_path, agent_objects(bfd, 2)).expect("the objects file");
    // Each agent serves /status and /metrics on its namespace's loopback.
    let args = |i: usize| -> Vec<String> {
        let mut a = bed.agent_args(i, true);
        a.push("--http-addr".into());
        a.push(HTTP.into());
        a
    };
    let start = Instant::now();
    let mut agents: Vec<AgentProcess> = (1..=NODES)
        .map(|i| bed.tb.agent_in_node(&vipflow(), i, &objects_path, &args(i)))
        .collect();
    bed.wait_sessions(Duration::from_secs(60));
    let all: BTreeSet<usize> = (1..=NODES).collect();
    let took = wait_routes(&bed, &[VIP4, VIP6], &all, start);
    println!("agents started: web's VIPs via every node {took:?} later");
    let only2 = BTreeSet::from([2]);
    wait_routes(&bed, &[API4, API6], &only2, start);
    for i in 1..=NODES {
        let want: BTreeSet<ipnet::IpNet> = if i == 2 {
            [VIP4, VIP6, API4, API6]
                .iter()
                .map(|v| ipnet::IpNet::from(v.parse::<IpAddr>().expect("a VIP")))
                .collect()
        } else {
            host_prefixes()
        };
        assert_eq!(originated(&tokio_rt(), &bed, i), want, "node{i} originates");
    }

    // `vipflow status` and /metrics say what node1 advertises, why it does not advertise
    // the Local VIPs, and its session with the router.
    let router = testbed::GATEWAY_V4;
    eventually(
        "node1's status showing its BGP session and VIPs",
        20,
        || {
            let text = in_node(
                &bed,
                1,
                &[
                    &vipflow().display().to_string(),
                    "status",
                    "--http-addr",
                    HTTP,
                ],
            );
            let want = [
                "bgp: AS 64513  current true  advertises 2 prefixes".to_string(),
                format!("  peer {router:<28} ipv4Unicast  Established  bfd up"),
                format!("  {VIP4:<28} advertised"),
                format!("  {VIP6:<28} advertised"),
                format!("  {API4:<28} no ready local endpoint (externalTrafficPolicy Local)"),
            ];
            let ok = want.iter().all(|w| text.contains(w.as_str()));
            if !ok {
                println!("{text}");
            }
            ok
        },
    );
    let metrics = in_node(&bed, 1, &["curl", "-sS", &format!("http://{HTTP}/metrics")]);
    for m in [
        format!("vipflow_bgp_session_up{{peer=\"{router}\",family=\"ipv4Unicast\"}} 1"),
        format!("vipflow_bfd_up{{peer=\"{router}\"}} 1"),
        "vipflow_bgp_advertised_prefixes 2".to_string(),
    ] {
        assert!(
            metrics.contains(&m),
            "{m} not in node1's metrics:\n{metrics}"
        );
    }
    let frr_applied = metrics
        .lines()
        .find_map(|l| l.strip_prefix("vipflow_event_to_dataplane_seconds_count{target=\"frr\"} "))
        .and_then(|v| v.trim().parse::<u64>().ok());
    assert!(
        frr_applied.is_some_and(|n| n >= 1),
        "no change to FRR measured: {frr_applied:?}"
    );

    // A client's flows to the Cluster VIP spread over every node, each answered.
    for (vip, ports) in [(VIP4, 24000), (VIP6, 25000)] {
        let r = round(&bed, vip, ports);
        println!(
            "{vip}: {FLOWS}/{FLOWS} answered (pods {:?}); steer packets per node {:?}",
            r.pods, r.steered
        );
        for i in 1..=NODES {
            assert!(
                r.steered[i - 1] > 0,
                "node{i}'s steer flow for {vip} counted nothing: {:?}",
                r.steered
            );
        }
    }
    // The Local VIP only through node2, to its endpoint there.
    for (vip, ports) in [(API4, 26000), (API6, 27000)] {
        let r = round(&bed, vip, ports);
        assert_eq!(
            r.pods,
            BTreeMap::from([("pod2a".to_string(), usize::from(FLOWS))]),
            "{vip}"
        );
        assert_eq!(r.steered[0] + r.steered[2], 0, "{vip}: {:?}", r.steered);
    }

    // node1's agent restarts: the router's table does not move.
    let before = router_table_versions(&bed);
    let hops_before: Vec<Vec<String>> = [VIP4, VIP6, API4, API6]
        .iter()
        .map(|v| bed.next_hops(v))
        .collect();
    agents[0].terminate();
    agents[0] = bed.tb.agent_in_node(&vipflow(), 1, &objects_path, &args(1));
    let watch_until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < watch_until {
        let hops: Vec<Vec<String>> = [VIP4, VIP6, API4, API6]
            .iter()
            .map(|v| bed.next_hops(v))
            .collect();
        assert_eq!(hops, hops_before, "the router's FIB moved during a restart");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        router_table_versions(&bed),
        before,
        "the router's BGP table changed across node1's agent restart"
    );
    println!("node1's agent restarted: router table versions {before:?} unchanged");

    // The Local Service's endpoint moves to node1: its VIPs follow, through the restarted
    // agent.
    std::fs::write(&objects_path, agent_objects(bfd, 1)).expect("the objects file");
    let moved = Instant::now();
    let took = wait_routes(&bed, &[API4, API6], &BTreeSet::from([1]), moved);
    println!("api's endpoint moved to node1: its VIPs via node1 only {took:?} after the change");
    for (vip, ports) in [(API4, 28000), (API6, 29000)] {
        let r = round(&bed, vip, ports);
        assert_eq!(
            r.pods,
            BTreeMap::from([("pod1a".to_string(), usize::from(FLOWS))]),
            "{vip}"
        );
    }

    // The one-shot commands agree with the running agents: `plan` prints what node3
    // advertises, `verify` finds its FRR in sync. With node3's agent stopped and a network
    // removed from its FRR behind its back, `verify` shows the drift and `--once` repairs it.
    let node3 = |cmd: &[&str]| -> (String, bool) {
        let mut args: Vec<String> = vec![vipflow().display().to_string()];
        args.extend(cmd.iter().map(|s| s.to_string()));
        args.extend(
            [
                "--objects",
                &objects_path.display().to_string(),
                "--node-name",
                "node3",
                "--ovs-rundir",
                &bed.tb.node_dir(3).display().to_string(),
                "--frr-socket-dir",
                &bed.speaker(3).path().display().to_string(),
            ]
            .map(String::from),
        );
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", &bed.tb.ns("node3")])
            .args(&args)
            .output()
            .expect("vipflow");
        (
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            out.status.success(),
        )
    };
    let (plan, ok) = node3(&["plan"]);
    assert!(ok, "{plan}");
    for want in [
        format!("network {VIP4}/32"),
        format!("network {VIP6}/128"),
        format!("#   {API4}: no ready local endpoint (externalTrafficPolicy Local)"),
        "#   router bgp 64513".to_string(),
    ] {
        assert!(plan.contains(&want), "{want} not in vipflow plan:\n{plan}");
    }
    let (verify, ok) = node3(&["verify"]);
    assert!(ok && verify.contains("frr: in sync"), "{verify}");
    agents[2].terminate();
    let v4: BTreeSet<ipnet::IpNet> =
        [ipnet::IpNet::from(VIP4.parse::<IpAddr>().expect("a VIP"))].into();
    let rt = tokio_rt();
    apply(&rt, &bed, 3, &v4, &BTreeSet::new());
    // bgpd takes a batch in the background.
    eventually("node3's FRR without the IPv4 VIP", 10, || {
        !originated(&rt, &bed, 3).contains(&v4.iter().next().copied().expect("one"))
    });
    let (verify, ok) = node3(&["verify"]);
    assert!(
        !ok && verify.contains(&format!("+ network {VIP4}/32")),
        "{verify}"
    );
    let (once, ok) = node3(&["agent", "--once"]);
    assert!(ok, "{once}");
    let (verify, ok) = node3(&["verify"]);
    assert!(ok && verify.contains("frr: in sync"), "{verify}");
    assert_eq!(originated(&rt, &bed, 3), host_prefixes());
    drop(agents);
}

/// A Service added while the agents run.
const NEW4: &str = "198.51.100.20";
const NEW6: &str = "2001:db8:100::20";

/// [`agent_objects`] (api on node2) plus `new` (Cluster, both families, an endpoint on every
/// node's pod a) when `with_new`, and node `drained` marked for drain.
fn gate_objects(bfd: Bfd, with_new: bool, drained: Option<usize>) -> String {
    let mut services = vec![
        BgpService::cluster("web", 10, NODES),
        BgpService::local("api", 11, &[2]),
    ];
    if with_new {
        services.push(BgpService::cluster("new", 20, NODES));
    }
    with_services(bfd, services, drained)
}

/// One probe: a new TCP connection from the client to a VIP, and whether a pod answered.
struct Probe {
    sent: Instant,
    /// When it was answered or given up.
    done: Instant,
    vip: &'static str,
    answered: bool,
}

/// New connections from the client to `vips` in turn (each from a port of the kernel's, so
/// they hash over every next hop), until `stop`.
fn probe_until(
    bed: &BgpTestbed,
    vips: &[&'static str],
    stop: &std::sync::atomic::AtomicBool,
) -> Vec<Probe> {
    let remote = bed.tb.ns("remote");
    let mut out = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        for vip in vips {
            let to = SocketAddr::new(vip.parse().expect("a VIP"), 80);
            let sent = Instant::now();
            let answered = netns::tcp_request(&remote, to, Duration::from_millis(300))
                .is_ok_and(|a| a.starts_with("pod"));
            out.push(Probe {
                sent,
                done: Instant::now(),
                vip,
                answered,
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    out
}

/// A Service added while a client probes its VIPs: no probe sent after the router first had a
/// route to a VIP goes unanswered (each node advertises only once its bridge and OVN carry the
/// VIP). Then a node marked for drain: its next hop leaves the router, the others carry every
/// new connection, none lost; the mark cleared, it comes back, none lost.
#[test]
fn a_route_goes_out_only_once_the_node_carries_the_vip_and_a_drain_loses_no_new_connection() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let _one = one_testbed();
    let bfd = Bfd::default();
    let Some(bed) = BgpTestbed::start_unconfigured(NODES, bfd) else {
        return;
    };
    let _pods = bed.start_pods();
    let objects_path = bed.tb.path().join("objects.yaml");
    std::fs::write(&objects_path, gate_objects(bfd, false, None)).expect("the objects file");
    let args = |i: usize| bed.agent_args(i, true);
    let _agents: Vec<AgentProcess> = (1..=NODES)
        .map(|i| bed.tb.agent_in_node(&vipflow(), i, &objects_path, &args(i)))
        .collect();
    bed.wait_sessions(Duration::from_secs(60));
    let all: BTreeSet<usize> = (1..=NODES).collect();
    wait_routes(&bed, &[VIP4, VIP6], &all, Instant::now());

    // The new Service, probed from before it exists until every node carries it, while
    // node2's ovn-controller is paused: node2's bridge takes the steer flows at once, but OVN
    // there has not programmed the VIP, so node2 must not draw the VIP's traffic yet.
    let stop = AtomicBool::new(false);
    let paused = Paused::ovn_controller(&bed, 2);
    let (probes, first_route, added, hop_changes) = std::thread::scope(|s| {
        let prober = s.spawn(|| probe_until(&bed, &[NEW4, NEW6], &stop));
        let _stop = StopOnDrop(&stop);
        std::thread::sleep(Duration::from_millis(300));
        let added = Instant::now();
        std::fs::write(&objects_path, gate_objects(bfd, true, None)).expect("the objects file");
        let mut first_route: BTreeMap<&str, Instant> = BTreeMap::new();
        let one_three = BTreeSet::from([1, 3]);
        let mut resumed = None;
        let mut paused = Some(paused);
        // When each VIP's next hops changed, as polled.
        let mut hops_seen: BTreeMap<&str, BTreeSet<usize>> = BTreeMap::new();
        let mut hop_changes: Vec<(&str, Instant)> = Vec::new();
        while first_route.len() < 2 || [NEW4, NEW6].iter().any(|v| bed.next_hop_nodes(v) != all) {
            for v in [NEW4, NEW6] {
                let hops = bed.next_hop_nodes(v);
                if !hops.is_empty() {
                    first_route.entry(v).or_insert_with(Instant::now);
                }
                if hops_seen.get(v) != Some(&hops) {
                    if hops_seen.contains_key(v) {
                        hop_changes.push((v, Instant::now()));
                    }
                    hops_seen.insert(v, hops.clone());
                }
                assert!(
                    resumed.is_some() || !hops.contains(&2),
                    "node2 advertised {v} before OVN there programmed it"
                );
            }
            // Both VIPs out from the others for a second, node2 still holding back: OVN on
            // node2 resumes.
            let settled = first_route.len() == 2
                && [NEW4, NEW6]
                    .iter()
                    .all(|v| bed.next_hop_nodes(v) == one_three);
            if settled && resumed.is_none() {
                std::thread::sleep(Duration::from_secs(1));
                assert!(
                    [NEW4, NEW6]
                        .iter()
                        .all(|v| bed.next_hop_nodes(v) == one_three),
                    "node2 advertised while its ovn-controller was paused"
                );
                drop(paused.take());
                resumed = Some(Instant::now());
            }
            assert!(
                added.elapsed() < FIB_TARGET * 10 + PROGRAMMED_BOUND,
                "the new VIPs never went out from every node: {:?} {:?}",
                bed.next_hops(NEW4),
                bed.next_hops(NEW6)
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        if let Some(r) = resumed {
            println!(
                "node2's ovn-controller resumed: node2 advertises the new VIPs {:?} later",
                r.elapsed()
            );
        }
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::Relaxed);
        (
            prober.join().expect("the prober"),
            first_route,
            added,
            hop_changes,
        )
    });
    // A connection under way while the VIP's next hops change (a node joining) may be hashed
    // to another node halfway, which holds no state for it (the kernel's ECMP moves some flows
    // among the old next hops too): counted apart, as in the drain below.
    let under_way = |p: &Probe| {
        hop_changes.iter().any(|(v, t)| {
            *v == p.vip
                && p.sent <= *t + Duration::from_millis(10)
                && p.done >= *t - Duration::from_millis(30)
        })
    };
    for v in [NEW4, NEW6] {
        let route = first_route[v];
        let across = probes
            .iter()
            .filter(|p| p.vip == v && p.sent >= route && under_way(p))
            .count();
        println!("{v}: {across} probes under way while its next hops changed, counted apart");
        let after: Vec<&Probe> = probes
            .iter()
            .filter(|p| p.vip == v && p.sent >= route && !under_way(p))
            .collect();
        let lost = after.iter().filter(|p| !p.answered).count();
        let before = probes
            .iter()
            .filter(|p| p.vip == v && p.sent < route)
            .count();
        println!(
            "{v}: first route {:?} after the Service was written; {} probes after it, {lost} unanswered ({before} before it)",
            route - added,
            after.len()
        );
        assert!(
            after.len() >= 10,
            "too few probes after the route: {}",
            after.len()
        );
        // Each lost probe with its times beside the route's and the next hops' changes, so a
        // failure says where in the sequence it fell.
        for p in after.iter().filter(|p| !p.answered) {
            let rel = |t: Instant| {
                if p.sent >= t {
                    format!("+{:?}", p.sent - t)
                } else {
                    format!("-{:?}", t - p.sent)
                }
            };
            let changes: Vec<String> = hop_changes
                .iter()
                .filter(|(hv, _)| *hv == v)
                .map(|(_, t)| rel(*t))
                .collect();
            println!(
                "{v}: a probe lost, sent {} after the first route, {changes:?} from the next hops' changes, given up after {:?}",
                rel(route),
                p.done - p.sent
            );
        }
        assert_eq!(lost, 0, "{v}: probes lost after the route appeared");
    }

    // node3 is marked for drain, then the mark is cleared, while the client keeps opening
    // connections to the web VIPs. A connection under way when the router's next hops change
    // may be hashed to another node halfway (the kernel's ECMP moves some flows among the
    // survivors too), where no connection state knows it: such a connection is not a new one,
    // and is counted apart.
    stop.store(false, Ordering::Relaxed);
    let (probes, changes) = std::thread::scope(|s| {
        let prober = s.spawn(|| probe_until(&bed, &[VIP4, VIP6], &stop));
        let _stop = StopOnDrop(&stop);
        std::thread::sleep(Duration::from_millis(300));
        let marked = Instant::now();
        std::fs::write(&objects_path, gate_objects(bfd, true, Some(NODES)))
            .expect("the objects file");
        let rest: BTreeSet<usize> = (1..NODES).collect();
        let took = wait_routes(&bed, &[VIP4, VIP6], &rest, marked);
        println!("node{NODES} marked for drain: its next hop gone {took:?} later");
        let gone = marked + took;
        std::thread::sleep(Duration::from_secs(1));
        let cleared = Instant::now();
        std::fs::write(&objects_path, gate_objects(bfd, true, None)).expect("the objects file");
        let took = wait_routes(&bed, &[VIP4, VIP6], &all, cleared);
        println!("node{NODES}'s drain mark cleared: its next hop back {took:?} later");
        let back = cleared + took;
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
        (
            prober.join().expect("the prober"),
            [(marked, gone), (cleared, back)],
        )
    });
    // The router's FIB changed between the last poll that saw it unchanged and the first that
    // saw it changed: a few milliseconds before `to`, widened for the poll's own time.
    let straddles = |p: &Probe| {
        changes.iter().any(|(_, to)| {
            p.sent <= *to + Duration::from_millis(10) && p.done >= *to - Duration::from_millis(30)
        })
    };
    let (across, new): (Vec<&Probe>, Vec<&Probe>) = probes.iter().partition(|p| straddles(p));
    let lost_new: Vec<&str> = new.iter().filter(|p| !p.answered).map(|p| p.vip).collect();
    let lost_across = across.iter().filter(|p| !p.answered).count();
    println!(
        "drain and back: {} new connections, {} unanswered; {} under way while the next hops changed, {lost_across} of them unanswered",
        new.len(),
        lost_new.len(),
        across.len()
    );
    assert!(new.len() >= 50, "too few probes: {}", new.len());
    assert!(
        lost_new.is_empty(),
        "new connections lost during the drain: {lost_new:?}"
    );
}

/// Stops a prober when dropped: a failed assertion in a thread scope must not leave the scope
/// waiting for a prober that never stops.
struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// How long a node holds a VIP back for OVN at most (the agent's bound), for a wait's limit.
const PROGRAMMED_BOUND: Duration = Duration::from_secs(10);

/// A node's ovn-controller stopped (SIGSTOP) until dropped (SIGCONT), even on failure.
struct Paused(u32);

impl Paused {
    fn ovn_controller(bed: &BgpTestbed, node: usize) -> Paused {
        let pidfile = bed.tb.node_dir(node).join("ovn-controller.pid");
        let pid: u32 = std::fs::read_to_string(&pidfile)
            .expect("ovn-controller's pid file")
            .trim()
            .parse()
            .expect("a pid");
        signal(pid, "-STOP");
        Paused(pid)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok || std::thread::panicking(), "kill {sig} {pid}");
}

/// Where each agent of the agent-driven test serves HTTP, on its node's loopback.
const HTTP: &str = "127.0.0.1:9475";

/// What `args` prints run in node `node`'s namespace.
fn in_node(bed: &BgpTestbed, node: usize, args: &[&str]) -> String {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &bed.tb.ns(&format!("node{node}"))])
        .args(args)
        .output()
        .expect("ip netns exec");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// The router's BGP paths to `prefix`: each one's peer, and whether it carries the
/// graceful-shutdown community.
fn router_paths(bed: &BgpTestbed, prefix: &str) -> Vec<(String, bool)> {
    let family = if prefix.contains(':') { "ipv6" } else { "ipv4" };
    let text = bed
        .router()
        .vtysh(&[&format!("show bgp {family} unicast {prefix} json")])
        .unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    v["paths"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["peer"]["peerId"].as_str().unwrap_or_default().to_string(),
                p["community"]["string"]
                    .as_str()
                    .is_some_and(|c| c.contains("graceful-shutdown")),
            )
        })
        .collect()
}

/// A free port on the host's loopback, for an agent's HTTP endpoint.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// In a cluster, as the DaemonSet runs: every agent watches the Kubernetes API test server
/// (real HTTP) for the Nodes, Services, EndpointSlices and the BGP objects, and drives its
/// node's empty FRR. The Cluster VIPs go out from every node and a client's flows spread over
/// all of them; a Service created while they run is advertised and answered; the Local VIP
/// follows its endpoint; a drain annotation on a Node takes that node's routes away and back;
/// `vipflow status` says what each node advertises.
#[test]
fn in_a_cluster_the_agents_advertise_what_the_api_server_says_and_follow_its_changes() {
    use testkit::kube_server::KubeServer;
    let _one = one_testbed();
    let bfd = Bfd::default();
    let Some(bed) = BgpTestbed::start_unconfigured(NODES, bfd) else {
        return;
    };
    let _pods = bed.start_pods();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let srv = rt.block_on(KubeServer::start());
    BgpObjects::serve_kinds(&srv);
    let mut objects = BgpObjects::new(NODES, bfd);
    objects.services = vec![
        BgpService::cluster("web", 10, NODES),
        BgpService::local("api", 11, &[2]),
    ];
    objects.apply_to(&srv);
    let http: Vec<String> = (0..NODES)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let start = Instant::now();
    let start_agent = |i: usize| {
        let mut a = bed.agent_args(i, true);
        a.extend(["--http-addr".to_string(), http[i - 1].clone()]);
        bed.tb
            .agent_from_api(&vipflow(), i, srv.kubeconfig_path(), &a)
    };
    let mut agents: Vec<AgentProcess> = (1..=NODES).map(start_agent).collect();
    bed.wait_sessions(Duration::from_secs(60));
    let all: BTreeSet<usize> = (1..=NODES).collect();
    let took = wait_routes(&bed, &[VIP4, VIP6], &all, start);
    println!("agents started from the API server: web's VIPs via every node {took:?} later");
    wait_routes(&bed, &[API4, API6], &BTreeSet::from([2]), start);

    // A client's flows to the Cluster VIP spread over every node, each answered.
    for (vip, ports) in [(VIP4, 34000), (VIP6, 35000)] {
        let r = round(&bed, vip, ports);
        println!("{vip}: steer packets per node {:?}", r.steered);
        assert!(r.steered.iter().all(|&n| n > 0), "{vip}: {:?}", r.steered);
    }

    // A Service created on the API server: its route via every node, then answered.
    objects.services.push(BgpService::cluster("new", 20, NODES));
    let created = Instant::now();
    objects.apply_to(&srv);
    let took = wait_routes(&bed, &[NEW4, NEW6], &all, created);
    println!("a Service created: its VIPs via every node {took:?} later");
    for (vip, ports) in [(NEW4, 36000), (NEW6, 37000)] {
        let r = round(&bed, vip, ports);
        assert!(r.steered.iter().all(|&n| n > 0), "{vip}: {:?}", r.steered);
    }

    // The Local Service's endpoint moves to node1: its VIPs follow.
    if let Some(api) = objects.services.iter_mut().find(|s| s.name == "api") {
        api.endpoints = vec![1];
    }
    let moved = Instant::now();
    objects.apply_to(&srv);
    let took = wait_routes(&bed, &[API4, API6], &BTreeSet::from([1]), moved);
    println!("api's endpoint moved to node1: its VIPs via node1 only {took:?} later");
    let r = round(&bed, API4, 38000);
    assert_eq!(
        r.pods,
        BTreeMap::from([("pod1a".to_string(), usize::from(FLOWS))])
    );

    // node3 annotated for drain: the router moves off it while node3 still advertises (with
    // the graceful-shutdown community, which the router prefers least), then node3 withdraws
    // at the end of its drain hold; its routes come back when the mark is removed.
    objects.drained = vec![3];
    objects.apply_to(&srv);
    let marked = Instant::now();
    let took = wait_routes(&bed, &[VIP4, VIP6, NEW4], &BTreeSet::from([1, 2]), marked);
    let paths = router_paths(&bed, VIP4);
    println!("node3 drained: its next hops gone {took:?} later; the router's paths {paths:?}");
    assert!(
        paths.contains(&(testbed::node_ip(3), true)),
        "node3 still advertises, less preferred, when the router moves off it: {paths:?}"
    );
    eventually("node3's path withdrawn after its drain hold", 20, || {
        !router_paths(&bed, VIP4)
            .iter()
            .any(|(peer, _)| *peer == testbed::node_ip(3))
    });
    println!(
        "node3's path withdrawn {:?} after the mark",
        marked.elapsed()
    );
    assert!(
        router_paths(&bed, VIP4).iter().all(|(_, gshut)| !gshut),
        "only node3 shuts down"
    );
    objects.drained = Vec::new();
    objects.apply_to(&srv);
    wait_routes(&bed, &[VIP4, VIP6, NEW4], &all, Instant::now());

    // node3 cordoned, as `kubectl drain` leaves it: nothing moves while its agent runs. Its
    // agent stopped (SIGTERM, as the node goes down): the router moves off node3 while its
    // path is still there in graceful shutdown, then the path goes, then the agent exits.
    // Uncordoned and started again, node3 advertises again.
    objects.cordoned = vec![3];
    objects.apply_to(&srv);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        bed.next_hop_nodes(VIP4),
        all,
        "cordoned alone moves nothing"
    );
    let stopped = Instant::now();
    let (moved, path_gone, exit) = std::thread::scope(|s| {
        let agent = &mut agents[2];
        let stopping = s.spawn(move || agent.terminate());
        let moved = wait_routes(&bed, &[VIP4, VIP6], &BTreeSet::from([1, 2]), stopped);
        let paths = router_paths(&bed, VIP4);
        assert!(
            paths.contains(&(testbed::node_ip(3), true)),
            "node3's path, less preferred, when the router moves off it: {paths:?}"
        );
        eventually("node3's path withdrawn before its agent exits", 20, || {
            !router_paths(&bed, VIP4)
                .iter()
                .any(|(peer, _)| *peer == testbed::node_ip(3))
        });
        let path_gone = stopped.elapsed();
        let exit = stopping.join().expect("the stopping agent");
        (moved, path_gone, exit)
    });
    println!(
        "node3 cordoned, its agent stopped: next hops moved {moved:?}, path gone {path_gone:?}, agent exited {:?} after SIGTERM",
        stopped.elapsed()
    );
    assert!(exit.is_some_and(|e| e.success()), "{exit:?}");
    objects.cordoned = Vec::new();
    objects.apply_to(&srv);
    agents[2] = start_agent(3);
    wait_routes(&bed, &[VIP4, VIP6, NEW4], &all, Instant::now());

    // The Service deleted: its routes go from every node.
    objects.services.retain(|s| s.name != "new");
    objects.apply_to(&srv);
    wait_routes(&bed, &[NEW4, NEW6], &BTreeSet::new(), Instant::now());

    // `vipflow status` of each agent says what its node advertises.
    for (i, addr) in http.iter().enumerate() {
        let node = i + 1;
        let prefixes = if node == 1 { 4 } else { 2 };
        eventually(&format!("node{node}'s status"), 20, || {
            let out = std::process::Command::new(vipflow())
                .args(["status", "--http-addr", addr])
                .output()
                .expect("vipflow status");
            let text = String::from_utf8_lossy(&out.stdout);
            let want = format!("bgp: AS 64513  current true  advertises {prefixes} prefixes");
            let ok = text.contains(&want) && text.contains(&format!("  {VIP4:<28} advertised"));
            if !ok {
                println!("{text}");
            }
            ok
        });
    }
}
