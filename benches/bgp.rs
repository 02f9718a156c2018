//! BGP through FRR, measured as a user meets it: on the BGP testbed (a router on the wire
//! running FRR, ECMP over every node, a client behind it; each node's agent runs in cluster
//! mode against the Kubernetes API test server and drives the node's FRR), `TRIALS` trials of
//! each, p50 and p99, beside what the alternatives publish and what FRR alone takes in the
//! same run:
//!
//! - a Service created on the API server -> OVN programmed its VIP on every node -> its route
//!   in the router's FIB -> the first answered connection, both families; and its deletion ->
//!   the route gone;
//! - externalTrafficPolicy Local: the last endpoint gone -> the route gone; the first endpoint
//!   back -> the route and the first answer;
//! - FRR alone: one `vtysh` call per change on a node -> the router's FIB (the floor);
//! - a drain mark: new connections lost; an agent restart: changes to the router's table;
//! - a node cut from the wire: its next hop gone from the router's FIB, and the longest gap in
//!   the answers of the client's flows (64 UDP flows, one probe each every 10 ms), at BFD
//!   300 ms x 3 (the CI profile) and 100 ms x 3;
//! - 1,000 and 10,000 prefixes on a node: the agent's FRR task from the plan to every route in
//!   the router's FIB, and one more at that size, beside one `vtysh -f` batch of them.
//!
//! Run: `cargo bench --bench bgp` (optionally `-- TRIALS`, default 20). Needs root.

mod support;
use support::percentile_f64;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use testkit::bgp_objects::{BgpObjects, BgpService};
use testkit::bgp_testbed::{Bfd, BgpTestbed, NODE_ASN};
use testkit::netns;
use testkit::testbed::AgentProcess;
use vipflow::reconcile::frr::Vtysh;

const NODES: usize = 3;
/// A bound on every wait, only to catch a hang.
const HANG: Duration = Duration::from_secs(30);

fn main() {
    let trials = std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<usize>().ok())
        .unwrap_or(20);
    if !testkit::netns::can_make_namespaces() {
        eprintln!("SKIPPED: needs root and network namespaces");
        return;
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at start: {}", load.trim());
    let mut table = Table::default();
    scale(&mut table);
    testbed_runs(trials, Bfd::default(), true, &mut table);
    testbed_runs(
        trials,
        Bfd {
            receive_ms: 100,
            transmit_ms: 100,
            multiplier: 3,
        },
        false,
        &mut table,
    );
    table.print();
}

/// The rows of the summary table.
#[derive(Default)]
struct Table {
    rows: Vec<[String; 5]>,
}

impl Table {
    fn add(&mut self, what: &str, ms: &[f64], beside: &str) {
        let p = |q: f64| {
            if ms.is_empty() {
                "-".to_string()
            } else {
                format!("{:.0}", percentile_f64(ms, q))
            }
        };
        self.rows.push([
            what.to_string(),
            ms.len().to_string(),
            p(50.0),
            p(99.0),
            beside.to_string(),
        ]);
    }

    fn add_count(&mut self, what: &str, n: usize, value: &str, beside: &str) {
        self.rows.push([
            what.to_string(),
            n.to_string(),
            value.to_string(),
            String::new(),
            beside.to_string(),
        ]);
    }

    fn print(&self) {
        println!();
        println!("| measure | n | p50 ms | p99 ms | beside |");
        println!("|---|---|---|---|---|");
        for r in &self.rows {
            println!("| {} | {} | {} | {} | {} |", r[0], r[1], r[2], r[3], r[4]);
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn p50(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        percentile_f64(v, 50.0)
    }
}

/// The 1,000 and 10,000 prefix runs: two FRR instances (a router and a node) over one eBGP
/// session, no OVS: the node's FRR driven by the agent's own FRR task.
fn scale(table: &mut Table) {
    use testkit::frr::{Frr, link};
    let tag = format!("{}", std::process::id() % 100_000);
    let router_conf = "frr defaults datacenter\n!\nrouter bgp 64512\n bgp router-id 10.9.0.1\n no bgp ebgp-requires-policy\n neighbor 10.9.0.2 remote-as 64513\n address-family ipv4 unicast\n  maximum-paths 64\n exit-address-family\nexit\n";
    let Some(router) = Frr::start(&format!("vf-brt-{tag}"), router_conf) else {
        return;
    };
    let node = Frr::start(&format!("vf-bnd-{tag}"), "").expect("the node's FRR");
    link(&router, "10.9.0.1/24", &node, "10.9.0.2/24", &tag);
    let config = format!(
        "frr defaults datacenter\n!\nrouter bgp {NODE_ASN}\n bgp router-id 10.9.0.2\n no bgp ebgp-requires-policy\n no bgp network import-check\n no bgp default ipv4-unicast\n neighbor 10.9.0.1 remote-as 64512\n address-family ipv4 unicast\n  neighbor 10.9.0.1 activate\n exit-address-family\nexit\n"
    );
    let routes = |router: &Frr| -> usize {
        let out = std::process::Command::new("ip")
            .args(["-n", router.ns(), "-4", "route", "show", "proto", "bgp"])
            .output()
            .expect("ip route");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("10."))
            .count()
    };
    let wait_routes = |n: usize, since: Instant| -> Duration {
        while routes(&router) != n {
            assert!(
                since.elapsed() < HANG * 4,
                "the router never had {n} routes"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        since.elapsed()
    };
    let prefixes = |n: usize, from: usize| -> BTreeSet<ipnet::IpNet> {
        (from..from + n)
            .map(|i| {
                let a = std::net::Ipv4Addr::from(0x0a40_0000_u32 + i as u32);
                ipnet::IpNet::from(IpAddr::V4(a))
            })
            .collect()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let vtysh = Vtysh::new(node.path());
    println!();
    println!("prefixes on one node, router FIB via one eBGP session (no BFD):");
    for n in [1_000usize, 10_000] {
        // FRR alone: one `vtysh -f` batch with every network line.
        rt.block_on(vtysh.apply(&config))
            .expect("the node's configuration");
        wait_session(&router);
        let all = prefixes(n, 0);
        let batch =
            vipflow::plan::bgp::frr_batch(NODE_ASN, &BTreeSet::new(), &all).expect("a batch");
        let start = Instant::now();
        rt.block_on(vtysh.apply(&batch))
            .expect("FRR takes the batch");
        let alone = wait_routes(n, start);
        let one = prefixes(1, n);
        let more: BTreeSet<ipnet::IpNet> = all.union(&one).copied().collect();
        let batch = vipflow::plan::bgp::frr_batch(NODE_ASN, &all, &more).expect("a batch");
        let start = Instant::now();
        rt.block_on(vtysh.apply(&batch))
            .expect("FRR takes the batch");
        let alone_one = wait_routes(n + 1, start);
        // Remove the instance: the agent's task starts from an FRR without it.
        rt.block_on(vtysh.apply(&format!("no router bgp {NODE_ASN}\n")))
            .expect("removed");
        wait_routes(0, Instant::now());

        // The agent's FRR task: configuration, read-back, then the plan's prefixes.
        let (cfg_tx, cfg_rx) = tokio::sync::watch::channel(Some(Arc::new(Some(config.clone()))));
        let (want_tx, want_rx) = tokio::sync::watch::channel(None);
        let (st_tx, mut st_rx) =
            tokio::sync::watch::channel(vipflow::reconcile::frr::FrrStatus::default());
        let task = rt.spawn(vipflow::reconcile::frr::run(
            vtysh.clone(),
            vipflow::reconcile::frr::FrrInputs {
                config: cfg_rx,
                wanted: want_rx,
            },
            st_tx,
        ));
        rt.block_on(async {
            let read = tokio::time::timeout(HANG, st_rx.wait_for(|s| s.known)).await;
            assert!(
                read.is_ok_and(|r| r.is_ok()),
                "the agent's FRR task never read FRR: {:?}",
                *st_rx.borrow()
            );
        });
        wait_session(&router);
        let start = Instant::now();
        want_tx.send_replace(Some((1, Arc::new(all.clone()))));
        let ours = wait_routes(n, start);
        let start = Instant::now();
        want_tx.send_replace(Some((2, Arc::new(more.clone()))));
        let ours_one = wait_routes(n + 1, start);
        println!(
            "  {n:>6}: all advertised {:.0} ms (one vtysh -f batch: {:.0} ms); one more {:.0} ms (one vtysh -f batch: {:.0} ms)",
            ms(ours),
            ms(alone),
            ms(ours_one),
            ms(alone_one)
        );
        table.add(
            &format!("{n} prefixes on a node: all in the router's FIB"),
            &[ms(ours)],
            &format!(
                "FRR alone {:.0} ms ({:.2}x); target 5000 ms",
                ms(alone),
                ms(ours) / ms(alone)
            ),
        );
        table.add(
            &format!("{n} prefixes on a node: one more"),
            &[ms(ours_one)],
            &format!(
                "FRR alone {:.0} ms ({:.2}x); target 250 ms",
                ms(alone_one),
                ms(ours_one) / ms(alone_one)
            ),
        );
        drop(cfg_tx);
        drop(want_tx);
        let _ = rt.block_on(task);
        rt.block_on(vtysh.apply(&format!("no router bgp {NODE_ASN}\n")))
            .expect("removed");
        wait_routes(0, Instant::now());
    }
}

/// Wait until `router`'s session with the node is Established.
fn wait_session(router: &testkit::frr::Frr) {
    let since = Instant::now();
    while !router
        .vtysh(&["show bgp ipv4 unicast summary json"])
        .unwrap_or_default()
        .contains("\"state\":\"Established\"")
    {
        assert!(since.elapsed() < HANG * 2, "no session");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One testbed at `bfd`: with `full`, every measure; else the node cut only.
fn testbed_runs(trials: usize, bfd: Bfd, full: bool, table: &mut Table) {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_vipflow"));
    let Some(bed) = BgpTestbed::start_unconfigured(NODES, bfd) else {
        return;
    };
    let profile = format!("BFD {} ms x {}", bfd.receive_ms, bfd.multiplier);
    println!();
    println!("BGP testbed, {NODES} nodes, {profile}:");
    let _pods = bed.start_pods();
    // The agents run in cluster mode, as the DaemonSet does: they watch the Kubernetes API
    // test server, where each change is written as one object.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let srv = rt.block_on(testkit::kube_server::KubeServer::start());
    BgpObjects::serve_kinds(&srv);
    let mut objects = BgpObjects::new(NODES, bfd);
    objects.connect_time = Some("2s");
    objects.services = vec![
        BgpService::cluster("web", 10, NODES),
        BgpService::local("api", 11, &[2]),
    ];
    let write = |o: &BgpObjects| o.apply_to(&srv);
    write(&objects);
    let kubeconfig = srv.kubeconfig_path().to_path_buf();
    let args = |i: usize| bed.agent_args(i, true);
    let start_agent = |i: usize| bed.tb.agent_from_api(&bin, i, &kubeconfig, &args(i));
    let mut agents: Vec<AgentProcess> = (1..=NODES).map(start_agent).collect();
    bed.wait_sessions(Duration::from_secs(60));
    let all: BTreeSet<usize> = (1..=NODES).collect();
    wait_nodes(&bed, &["198.51.100.10", "2001:db8:100::10"], &all);

    if full {
        // FRR alone first, as the floor the others are set beside. node1's agent would take a
        // network it did not plan out of its FRR: it is stopped meanwhile (FRR keeps what it
        // holds) and started again after.
        agents[0].terminate();
        let floor = frr_alone(&bed, trials, table);
        agents[0] = start_agent(1);
        wait_nodes(&bed, &["198.51.100.10", "2001:db8:100::10"], &all);
        // node1's agent writes the Northbound rows: it takes the Lease again and connects to
        // the database after it starts. The measures below are of a running agent; the first
        // Service after that start is its own figure.
        let warm = BgpService::cluster("warm", 39, NODES);
        objects.services.push(warm.clone());
        write(&objects);
        let first = wait_nodes(&bed, &[&warm.v4, &warm.v6], &all);
        objects.services.pop();
        write(&objects);
        wait_nodes(&bed, &[&warm.v4, &warm.v6], &BTreeSet::new());
        println!(
            "  the first Service after the Northbound writer's agent started: route via every node {:.0} ms",
            ms(first)
        );
        advertise(&bed, trials, &mut objects, &write, floor, table);
        local_endpoint(&bed, trials, &mut objects, &write, floor, table);
        drain(&bed, trials.min(5), &mut objects, &write, table);
        restart(&bed, trials.min(5), &mut agents, &start_agent, table);
    }
    cut(&bed, trials, &profile, table);
    drop(agents);
}

/// The router's next hops for `vip`, as node numbers.
fn wait_nodes(bed: &BgpTestbed, vips: &[&str], nodes: &BTreeSet<usize>) -> Duration {
    let start = Instant::now();
    while !vips.iter().all(|v| bed.next_hop_nodes(v) == *nodes) {
        assert!(
            start.elapsed() < HANG,
            "{vips:?} never via {nodes:?}: {:?}",
            vips.iter().map(|v| bed.next_hops(v)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    start.elapsed()
}

/// A TCP connection from the client to `vip`:80, answered by a pod.
fn answered(bed: &BgpTestbed, vip: &str) -> bool {
    let to = SocketAddr::new(vip.parse().expect("a VIP"), 80);
    netns::tcp_request(&bed.tb.ns("remote"), to, Duration::from_millis(300))
        .is_ok_and(|a| a.starts_with("pod"))
}

/// From `since`: the first time each of `vips` has a route in the router, and the first time
/// a connection to it is answered. A new connection is opened every 10 ms, each waiting up to
/// 300 ms, so the answer is not held back by one that went out before the route.
fn route_and_answer(
    bed: &BgpTestbed,
    vips: &[&str],
    nodes: &BTreeSet<usize>,
    since: Instant,
) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    std::thread::scope(|s| {
        let answers: Vec<_> = vips
            .iter()
            .map(|v| {
                s.spawn(move || {
                    let first: std::sync::Mutex<Option<Duration>> = std::sync::Mutex::new(None);
                    std::thread::scope(|p| {
                        while first.lock().map(|f| f.is_none()).unwrap_or(false) {
                            assert!(since.elapsed() < HANG, "{v} never answered");
                            let first = &first;
                            p.spawn(move || {
                                if answered(bed, v) {
                                    let t = since.elapsed();
                                    if let Ok(mut f) = first.lock() {
                                        *f = Some(f.map_or(t, |f| f.min(t)));
                                    }
                                }
                            });
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    });
                    first.into_inner().ok().flatten().unwrap_or(HANG)
                })
            })
            .collect();
        let mut routed: BTreeMap<&str, Duration> = BTreeMap::new();
        while routed.len() < vips.len() {
            for v in vips {
                if !routed.contains_key(v) && bed.next_hop_nodes(v) == *nodes {
                    routed.insert(v, since.elapsed());
                }
            }
            assert!(since.elapsed() < HANG, "no route for {vips:?}");
            std::thread::sleep(Duration::from_millis(2));
        }
        for (v, a) in vips.iter().zip(answers) {
            let a = a.join().expect("the prober");
            out.push((ms(routed[v]), ms(a)));
        }
    });
    out
}

/// A Service written -> its route via every node -> the first answer; removed -> route gone.
fn advertise(
    bed: &BgpTestbed,
    trials: usize,
    objects: &mut BgpObjects,
    write: &dyn Fn(&BgpObjects),
    floor: f64,
    table: &mut Table,
) {
    let all: BTreeSet<usize> = (1..=NODES).collect();
    let (mut fib, mut answer, mut ovn, mut after_ovn, mut gone) = (
        [Vec::new(), Vec::new()],
        [Vec::new(), Vec::new()],
        [Vec::new(), Vec::new()],
        [Vec::new(), Vec::new()],
        Vec::new(),
    );
    println!(
        "  a Service created on the API server, every node advertising its VIPs (ms): per family OVN programmed on every node, route, answer; deleted: route gone"
    );
    for k in 0..trials {
        let s = BgpService::cluster(&format!("b{k}"), 40 + k as u8, NODES);
        objects.services.push(s.clone());
        let vips = [s.v4.as_str(), s.v6.as_str()];
        let start = Instant::now();
        write(objects);
        let (r, programmed) = std::thread::scope(|sc| {
            let p = sc.spawn(|| ovn_programmed(bed, &vips, &all, start));
            let r = route_and_answer(bed, &vips, &all, start);
            (r, p.join().expect("the integration bridges' poller"))
        });
        objects.services.pop();
        write(objects);
        let none = BTreeSet::new();
        let g = wait_nodes(bed, &vips, &none);
        println!(
            "  {k:>3}: v4 {:>5.0} {:>5.0} {:>5.0}  v6 {:>5.0} {:>5.0} {:>5.0}  gone {:>5.0}",
            ms(programmed[0]),
            r[0].0,
            r[0].1,
            ms(programmed[1]),
            r[1].0,
            r[1].1,
            ms(g)
        );
        for f in 0..2 {
            fib[f].push(r[f].0);
            answer[f].push(r[f].1);
            ovn[f].push(ms(programmed[f]));
            after_ovn[f].push(r[f].0 - ms(programmed[f]));
        }
        gone.push(ms(g));
    }
    for (f, name) in [(0, "IPv4"), (1, "IPv6")] {
        table.add(
            &format!("Service created -> route via every node in the router's FIB ({name})"),
            &fib[f],
            &beside_metallb(&fib[f], floor),
        );
        table.add(
            &format!("Service created -> first answered connection ({name})"),
            &answer[f],
            &beside_metallb(&answer[f], floor),
        );
        table.add(
            &format!("Service created -> OVN programmed the VIP on every node ({name})"),
            &ovn[f],
            "OVN's share (northd, ovn-controller), which the route waits for",
        );
        table.add(
            &format!("OVN programmed on every node -> route via every node ({name})"),
            &after_ovn[f],
            &format!(
                "FRR alone {floor:.0} ms: ours {:.2}x at p50",
                p50(&after_ovn[f]) / floor
            ),
        );
    }
    table.add(
        "Service removed -> route gone from the router's FIB",
        &gone,
        "",
    );
}

/// From `since`: when OVN had programmed each of `vips` on the integration bridge of every
/// node of `nodes` (the last of them), read over OpenFlow every 2 ms as the agent's gate reads
/// it (a flow matching the VIP as destination).
fn ovn_programmed(
    bed: &BgpTestbed,
    vips: &[&str],
    nodes: &BTreeSet<usize>,
    since: Instant,
) -> Vec<Duration> {
    use openflow::oxm::{OxmField, eth_type};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let mut conns = Vec::new();
        for &i in nodes {
            let target = format!("unix:{}", bed.tb.node_dir(i).join("br-int.mgmt").display());
            let (c, _events) = openflow::Connection::connect(&target, openflow::Config::default())
                .await
                .expect("node's integration bridge");
            conns.push(c);
        }
        let requests: Vec<openflow::multipart::FlowStatsRequest> = vips
            .iter()
            .map(|v| {
                let m = match v.parse::<IpAddr>().expect("a VIP") {
                    IpAddr::V4(a) => openflow::Match::new()
                        .with(OxmField::eth_type(eth_type::IPV4))
                        .with(OxmField::ipv4_dst(a)),
                    IpAddr::V6(a) => openflow::Match::new()
                        .with(OxmField::eth_type(eth_type::IPV6))
                        .with(OxmField::ipv6_dst(a)),
                };
                openflow::multipart::FlowStatsRequest {
                    match_: m,
                    ..Default::default()
                }
            })
            .collect();
        let mut done: Vec<Option<Duration>> = vec![None; vips.len()];
        // Per VIP, the nodes that do not have it yet.
        let mut waiting: Vec<BTreeSet<usize>> = vec![(0..conns.len()).collect(); vips.len()];
        while done.iter().any(Option::is_none) {
            for (v, req) in requests.iter().enumerate() {
                if done[v].is_some() {
                    continue;
                }
                let mut still = BTreeSet::new();
                for &n in &waiting[v] {
                    let flows = conns[n].flow_stats(req.clone()).await.unwrap_or_default();
                    if flows.is_empty() {
                        still.insert(n);
                    }
                }
                waiting[v] = still;
                if waiting[v].is_empty() {
                    done[v] = Some(since.elapsed());
                }
            }
            assert!(since.elapsed() < HANG, "OVN never programmed {vips:?}");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        done.into_iter().map(Option::unwrap_or_default).collect()
    })
}

/// externalTrafficPolicy Local: the last endpoint gone, then back.
fn local_endpoint(
    bed: &BgpTestbed,
    trials: usize,
    objects: &mut BgpObjects,
    write: &dyn Fn(&BgpObjects),
    floor: f64,
    table: &mut Table,
) {
    let (mut gone, mut back, mut answer) = (Vec::new(), Vec::new(), Vec::new());
    let api = objects
        .services
        .iter()
        .position(|s| s.name == "api")
        .expect("api");
    let (v4, v6) = (
        objects.services[api].v4.clone(),
        objects.services[api].v6.clone(),
    );
    let only2 = BTreeSet::from([2]);
    for _ in 0..trials {
        objects.services[api].endpoints = Vec::new();
        write(objects);
        gone.push(ms(wait_nodes(bed, &[&v4, &v6], &BTreeSet::new())));
        objects.services[api].endpoints = vec![2];
        let start_back = Instant::now();
        write(objects);
        let r = route_and_answer(bed, &[&v4, &v6], &only2, start_back);
        back.extend(r.iter().map(|x| x.0));
        answer.extend(r.iter().map(|x| x.1));
    }
    println!(
        "  externalTrafficPolicy Local: last endpoint gone -> route gone p50 {:.0} ms; first endpoint back -> route p50 {:.0} ms, answer p50 {:.0} ms",
        p50(&gone),
        p50(&back),
        p50(&answer)
    );
    table.add(
        "ETP=Local last endpoint gone -> its node's next hop gone",
        &gone,
        "cilium #32487: late or never",
    );
    table.add(
        "ETP=Local first endpoint ready -> route in the router's FIB (both families)",
        &back,
        &beside_metallb(&back, floor),
    );
}

/// MetalLB's 3-4 s (its FRR changes are debounced 3 s) and FRR alone (`floor`, p50), each as
/// a ratio to `ms`'s p99 and p50.
fn beside_metallb(ms: &[f64], floor: f64) -> String {
    let (p50, p99) = (percentile_f64(ms, 50.0), percentile_f64(ms, 99.0));
    format!(
        "MetalLB 3000-4000 ms: {:.1}x at our p99; FRR alone {floor:.0} ms: ours {:.2}x at p50",
        3000.0 / p99,
        p50 / floor
    )
}

/// FRR alone: one `vtysh` call on node1 per change -> the router's FIB. Returns the p50, ms.
fn frr_alone(bed: &BgpTestbed, trials: usize, table: &mut Table) -> f64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let vtysh = Vtysh::new(bed.speaker(1).path());
    let prefix: BTreeSet<ipnet::IpNet> = ["198.51.100.250/32".parse().expect("a prefix")].into();
    let none = BTreeSet::new();
    let (mut add, mut del, mut add_vty) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..trials {
        let batch = vipflow::plan::bgp::frr_batch(NODE_ASN, &none, &prefix).expect("a batch");
        let start = Instant::now();
        rt.block_on(vtysh.apply(&batch)).expect("FRR takes it");
        wait_nodes(bed, &["198.51.100.250"], &BTreeSet::from([1]));
        add.push(ms(start.elapsed()));
        let batch = vipflow::plan::bgp::frr_batch(NODE_ASN, &prefix, &none).expect("a batch");
        let start = Instant::now();
        rt.block_on(vtysh.apply(&batch)).expect("FRR takes it");
        wait_nodes(bed, &["198.51.100.250"], &BTreeSet::new());
        del.push(ms(start.elapsed()));
        // The same change over bgpd's own vty socket, as the agent makes it.
        let batch = vipflow::plan::bgp::frr_batch(NODE_ASN, &none, &prefix).expect("a batch");
        let start = Instant::now();
        rt.block_on(vtysh.apply_bgpd(&batch)).expect("FRR takes it");
        wait_nodes(bed, &["198.51.100.250"], &BTreeSet::from([1]));
        add_vty.push(ms(start.elapsed()));
        let batch = vipflow::plan::bgp::frr_batch(NODE_ASN, &prefix, &none).expect("a batch");
        rt.block_on(vtysh.apply_bgpd(&batch)).expect("FRR takes it");
        wait_nodes(bed, &["198.51.100.250"], &BTreeSet::new());
    }
    println!(
        "  FRR alone, one vtysh call per change: to the router's FIB p50 {:.0} ms, withdrawn p50 {:.0} ms; over bgpd's vty socket p50 {:.0} ms",
        p50(&add),
        p50(&del),
        p50(&add_vty)
    );
    table.add(
        "FRR alone: one vtysh call -> route in the router's FIB",
        &add,
        "the floor under the rows below (what MetalLB's FRR mode runs per change)",
    );
    table.add("FRR alone: one vtysh call -> route withdrawn", &del, "");
    table.add(
        "FRR alone: one change on bgpd's vty socket -> route in the router's FIB",
        &add_vty,
        &format!(
            "how the agent drives FRR: {:.2}x the vtysh call at p50",
            p50(&add_vty) / p50(&add)
        ),
    );
    p50(&add)
}

/// New TCP connections to `vips` in turn until `stop`: (sent, done, answered).
fn probe_connections<'a>(
    bed: &BgpTestbed,
    vips: &[&'a str],
    stop: &AtomicBool,
) -> Vec<(Instant, Instant, bool, &'a str)> {
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        for v in vips {
            let sent = Instant::now();
            let ok = answered(bed, v);
            out.push((sent, Instant::now(), ok, *v));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    out
}

/// Node3 marked for drain and back, while the client opens connections to web's VIPs.
fn drain(
    bed: &BgpTestbed,
    trials: usize,
    objects: &mut BgpObjects,
    write: &dyn Fn(&BgpObjects),
    table: &mut Table,
) {
    let all: BTreeSet<usize> = (1..=NODES).collect();
    let rest: BTreeSet<usize> = (1..NODES).collect();
    let vips = ["198.51.100.10", "2001:db8:100::10"];
    let (mut new_total, mut new_lost, mut across_total, mut across_lost) = (0, 0, 0, 0);
    let mut moved = Vec::new();
    for _ in 0..trials {
        let stop = AtomicBool::new(false);
        let (probes, changes) = std::thread::scope(|s| {
            let prober = s.spawn(|| probe_connections(bed, &vips, &stop));
            std::thread::sleep(Duration::from_millis(300));
            objects.drained = vec![NODES];
            let marked = Instant::now();
            write(objects);
            let t = wait_nodes(bed, &vips, &rest);
            moved.push(ms(t));
            let gone = marked + t;
            std::thread::sleep(Duration::from_millis(700));
            objects.drained = Vec::new();
            let cleared = Instant::now();
            write(objects);
            let back = cleared + wait_nodes(bed, &vips, &all);
            std::thread::sleep(Duration::from_millis(300));
            stop.store(true, Ordering::Relaxed);
            (prober.join().expect("the prober"), [gone, back])
        });
        for (sent, done, ok, vip) in probes {
            let across = changes.iter().any(|t| {
                sent <= *t + Duration::from_millis(10) && done >= *t - Duration::from_millis(30)
            });
            if !ok && !across {
                let rel: Vec<String> = changes
                    .iter()
                    .map(|t| {
                        if sent >= *t {
                            format!("+{:.0} ms", ms(sent - *t))
                        } else {
                            format!("-{:.0} ms", ms(*t - sent))
                        }
                    })
                    .collect();
                println!(
                    "    a new connection to {vip} lost, sent {} from the next hop changes",
                    rel.join(" / ")
                );
            }
            if across {
                across_total += 1;
                across_lost += usize::from(!ok);
            } else {
                new_total += 1;
                new_lost += usize::from(!ok);
            }
        }
    }
    println!(
        "  drain mark, {trials} trials: next hop gone p50 {:.0} ms; {new_total} new connections, {new_lost} lost; {across_total} under way as the next hops changed, {across_lost} lost",
        p50(&moved)
    );
    table.add(
        "drain mark -> the node's next hop gone",
        &moved,
        "metallb #2677: drains that do not withdraw first",
    );
    table.add_count(
        "drain: new connections lost",
        new_total,
        &new_lost.to_string(),
        &format!("{across_lost} of {across_total} under way as the next hops changed"),
    );
}

/// The router's BGP table versions (IPv4, IPv6).
fn table_versions(bed: &BgpTestbed) -> [u64; 2] {
    ["ipv4", "ipv6"].map(|f| {
        bed.router()
            .vtysh(&[&format!("show bgp {f} unicast json")])
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["tableVersion"].as_u64())
            .unwrap_or(0)
    })
}

/// Each node's agent restarted in turn: changes to the router's table.
fn restart(
    bed: &BgpTestbed,
    trials: usize,
    agents: &mut [AgentProcess],
    start_agent: &dyn Fn(usize) -> AgentProcess,
    table: &mut Table,
) {
    let mut changes = 0;
    for k in 0..trials {
        let i = k % NODES + 1;
        let before = table_versions(bed);
        agents[i - 1].terminate();
        agents[i - 1] = start_agent(i);
        std::thread::sleep(Duration::from_secs(4));
        let after = table_versions(bed);
        changes += (after[0] - before[0] + after[1] - before[1]) as usize;
    }
    println!("  agent restarts: {trials}, changes to the router's BGP table: {changes}");
    table.add_count(
        "agent restart: changes to the router's BGP table",
        trials,
        &changes.to_string(),
        "0 wanted",
    );
}

/// The client's UDP flows: `FLOWS` sockets, each from a port of its own, each probing one VIP
/// every 10 ms; the times each got an answer.
struct FlowProber {
    /// Each flow's source port.
    ports: Vec<u16>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<Vec<Instant>>>>,
}

const FLOWS: usize = 64;

impl FlowProber {
    fn start(ns: &str, vip: &str) -> FlowProber {
        let stop = Arc::new(AtomicBool::new(false));
        let to = SocketAddr::new(vip.parse().expect("a VIP"), 53);
        let sockets: Vec<UdpSocket> = (0..FLOWS)
            .map(|_| {
                netns::in_netns(ns, move || {
                    let s = UdpSocket::bind(if to.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" })?;
                    s.connect(to)?;
                    Ok(s)
                })
                .expect("a UDP socket in the client's namespace")
            })
            .collect();
        let ports = sockets
            .iter()
            .map(|s| s.local_addr().map(|a| a.port()).unwrap_or(0))
            .collect();
        let st = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut answers: Vec<Vec<Instant>> = vec![Vec::new(); FLOWS];
            let mut buf = [0u8; 256];
            for s in &sockets {
                let _ = s.set_nonblocking(true);
            }
            while !st.load(Ordering::Relaxed) {
                for s in &sockets {
                    let _ = s.send(b"probe");
                }
                let until = Instant::now() + Duration::from_millis(10);
                while Instant::now() < until {
                    for (f, s) in sockets.iter().enumerate() {
                        while s.recv(&mut buf).is_ok() {
                            answers[f].push(Instant::now());
                        }
                    }
                    std::thread::sleep(Duration::from_micros(500));
                }
            }
            answers
        });
        FlowProber {
            ports,
            stop,
            thread: Some(thread),
        }
    }

    fn stop(mut self) -> Vec<Vec<Instant>> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for FlowProber {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A node cut from the wire: its next hop gone from the router's FIB, and, for the client's
/// flows the router had hashed to that node, the time from the cut to their first answer
/// through another node. A flow whose pod is the cut node's is not answered again until
/// Kubernetes takes that endpoint away (OVN's load balancer, not the route): counted apart.
fn cut(bed: &BgpTestbed, trials: usize, profile: &str, table: &mut Table) {
    let vip = "198.51.100.10";
    let all: BTreeSet<usize> = (1..=NODES).collect();
    let (mut fib, mut outage, mut flaps) = (Vec::new(), Vec::new(), 0);
    for k in 0..trials {
        let node = k % NODES + 1;
        let rest: BTreeSet<usize> = all.iter().copied().filter(|&n| n != node).collect();
        let prober = FlowProber::start(&bed.tb.ns("remote"), vip);
        std::thread::sleep(Duration::from_millis(500));
        let through = bed.tracked_ports(node, vip);
        let ports = prober.ports.clone();
        let cut_at = Instant::now();
        bed.tb.cut_uplink(node);
        // The survivors' sessions must hold: a BFD session that flaps under load (tight timers
        // on busy cores) takes another next hop away, and the trial measures nothing.
        let t = loop {
            let hops = bed.next_hop_nodes(vip);
            if hops == rest {
                break Some(cut_at.elapsed());
            }
            if rest.iter().any(|n| !hops.contains(n)) {
                break None;
            }
            if cut_at.elapsed() > HANG {
                break None;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let Some(t) = t else {
            drop(prober);
            flaps += 1;
            println!(
                "  cut node{node}: another node's session went down too (a BFD flap under load): trial not counted"
            );
            bed.tb.restore_uplink(node);
            bed.wait_sessions(Duration::from_secs(120));
            wait_nodes(bed, &[vip], &all);
            continue;
        };
        std::thread::sleep(Duration::from_millis(1000));
        let answers = prober.stop();
        // A flow's outage: its longest silence between two answers around the cut (an answer
        // just after the cut may be to a probe sent before it).
        let (mut moved, mut recovered, mut worst) = (0, 0, Duration::ZERO);
        for (port, a) in ports.iter().zip(&answers) {
            if !through.contains(port) {
                continue;
            }
            moved += 1;
            // Answered again once the router moved it: it reached a live pod.
            if a.last()
                .is_some_and(|last| *last > cut_at + t + Duration::from_millis(50))
            {
                recovered += 1;
                let gap = a
                    .windows(2)
                    .filter(|w| w[1] > cut_at)
                    .map(|w| w[1] - w[0])
                    .max()
                    .unwrap_or_default();
                worst = worst.max(gap);
            }
        }
        bed.tb.restore_uplink(node);
        bed.wait_sessions(Duration::from_secs(60));
        wait_nodes(bed, &[vip], &all);
        println!(
            "  cut node{node}: next hop gone {:.0} ms; of {FLOWS} flows {moved} went through it, {recovered} answered again through another node after at most {:.0} ms of silence",
            ms(t),
            ms(worst)
        );
        fib.push(ms(t));
        if recovered > 0 {
            outage.push(ms(worst));
        }
    }
    if fib.is_empty() {
        return;
    }
    if flaps > 0 {
        println!("  {profile}: {flaps} trials not counted (a survivor's BFD session flapped)");
    }
    let p99 = percentile_f64(&fib, 99.0);
    table.add(
        &format!("node cut ({profile}) -> its next hop gone from the router's FIB"),
        &fib,
        &format!(
            "without BFD: Calico OSS up to 240000 ms ({:.0}x), Cilium hold 9000-90000 ms ({:.0}x-{:.0}x), at our p99",
            240_000.0 / p99,
            9_000.0 / p99,
            90_000.0 / p99
        ),
    );
    table.add(
        &format!("node cut ({profile}) -> longest silence of a flow it carried"),
        &outage,
        if profile.contains("300") {
            "target p99 1100 ms"
        } else {
            "target p99 400 ms"
        },
    );
}
