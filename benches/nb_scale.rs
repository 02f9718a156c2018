//! Node-scoped rows at scale: per-node rows against template rows, written by the agent's own
//! planner and Northbound writer into a real NB ovsdb-server, and what ovn-northd then spends on
//! the result.
//!
//! Run: `cargo bench --bench nb_scale -- [NODES] [SERVICES] [MODES]`, default `2000 10000
//! template,per-node`. The NB holds NODES gateway routers (`GR_nI`) and node switches (`nI`):
//! rows only, no ports and no chassis processes. SERVICES LoadBalancer Services, one TCP
//! VIP:port each with 2 ready endpoints on two nodes; every fifth is externalTrafficPolicy
//! Local (20%). Cluster rows join vipflow's own group (on every router and switch); Local's rows
//! are one per node (per-node) or one template row in vipflow's routers group with a value on
//! each endpoint's chassis (template).
//!
//! Per mode, in a fresh sandbox:
//! - the first full sync as a starting agent does it: plan, connect, monitor, write (the
//!   writer's batches), with ovn-northd paused, so that the time is the writer's and the
//!   database's alone; the rows, values, transactions, operations and bytes written;
//! - ovn-northd resumed: the time until it has processed the whole result (`ovn-nbctl
//!   --wait=sb sync`), and ovsdb-server's NB memory;
//! - one Local Service's endpoint moving to another node, CHANGES times: plan, diff and commit
//!   (p50, p99), the operations and bytes of the transaction, and, with ovn-northd running,
//!   the time until it has processed each change.
//!
//! Per-node mode writes NODES rows per Local Service: at 2,000 nodes and 2,000 Local Services
//! that is 4 million rows, more than this machine's memory holds in ovsdb-server. Above
//! `PER_NODE_MAX_ROWS` its rows are counted (a row per node and a switch row per Local Service,
//! one per other Service; checked against the plan below the limit) and not written; run it
//! at a smaller NODES for its timings (the table says which figures are measured).

mod support;
use support::k8s::{Port, endpoint_slice, lb_service};
use support::{ms, percentile};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use ovsdb::{Client, ClientOptions};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::{Options, Sandbox};
use tokio::runtime::Runtime;
use vipflow::model::{ModelOptions, Objects};
use vipflow::plan::node_template::NodeRows;
use vipflow::plan::northbound::NorthboundConfig;
use vipflow::plan::planner::Planner;
use vipflow::reconcile::northbound::{DesiredRows, absorb_queued, send, take_over, write_plan};
use vipflow_core::reconcile::northbound::{DB, Observed, Session, monitor_spec, new_token};

/// Endpoint moves timed per mode.
const CHANGES: usize = 20;
/// Per-node mode is written only up to this many rows.
const PER_NODE_MAX_ROWS: usize = 250_000;

fn local(i: u32) -> bool {
    i.is_multiple_of(5)
}

fn service(i: u32) -> k8s_openapi::api::core::v1::Service {
    let port = Port {
        name: None,
        port: 80,
        target: Some(8080),
        protocol: "TCP",
    };
    lb_service(i, &[port], Some(if local(i) { "Local" } else { "Cluster" }))
}

/// Service `i`'s two endpoints, on nodes `first` and `first + 1` (of `nodes`).
fn slice(i: u32, first: u32, nodes: u32) -> k8s_openapi::api::discovery::v1::EndpointSlice {
    let eps: Vec<(Ipv4Addr, String)> = (0..2u32)
        .map(|j| {
            (
                Ipv4Addr::from((10 << 24) | (i * 2 + j)),
                format!("n{}", (first + j) % nodes),
            )
        })
        .collect();
    endpoint_slice(i, &eps, 8080)
}

fn node(i: u32) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(format!("n{i}")),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn objects(nodes: u32, services: u32) -> Objects {
    Objects {
        services: (0..services).map(|i| Arc::new(service(i).into())).collect(),
        endpoint_slices: (0..services)
            .map(|i| Arc::new(slice(i, i % nodes, nodes).into()))
            .collect(),
        nodes: (0..nodes).map(|i| Arc::new(node(i))).collect(),
        ..Default::default()
    }
}

fn config(mode: NodeRows) -> NorthboundConfig {
    NorthboundConfig {
        node_router: Some("GR_{node}".into()),
        node_switch: Some("{node}".into()),
        node_rows: mode,
        exclude_ips: false,
        ..NorthboundConfig::default()
    }
}

/// What the planner task hands the NB writer for a snapshot.
fn hand_over(planner: &mut Planner, objs: &Objects) -> DesiredRows {
    let plans = planner.update(objs);
    DesiredRows::from_rows(plans.generation, plans.northbound.as_ref().unwrap(), false)
}

/// A sandbox with the NB, SB and a paused ovn-northd, and every node's router and switch.
fn fresh_nb(nodes: u32) -> Sandbox {
    let sb = Sandbox::with_options(Options {
        ovn: true,
        bridges: false,
    });
    northd(&sb, "pause");
    let mut args: Vec<String> = Vec::with_capacity(nodes as usize * 8);
    for i in 0..nodes {
        for (table, name) in [
            ("Logical_Router", format!("GR_n{i}")),
            ("Logical_Switch", format!("n{i}")),
        ] {
            args.extend([
                "--".into(),
                "create".into(),
                table.into(),
                format!("name={name}"),
            ]);
        }
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    sb.nbctl(&refs[1..]);
    sb
}

fn northd(sb: &Sandbox, command: &str) -> String {
    let ctl = sb.path().join("ovn-northd.ctl");
    sb.run("ovn-appctl", &["-t", &ctl.display().to_string(), command])
}

/// `ovn-nbctl --wait=sb sync`: returns once ovn-northd has processed everything committed.
fn wait_northd(sb: &Sandbox) -> Duration {
    let t = Instant::now();
    sb.nbctl(&["--timeout=1800", "--wait=sb", "sync"]);
    t.elapsed()
}

/// ovsdb-server's resident memory for the NB, MiB.
fn nb_rss_mib(sb: &Sandbox) -> f64 {
    let Some(pid) = sb.pid("ovnnb_db") else {
        return f64::NAN;
    };
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn count(sb: &Sandbox, table: &str) -> usize {
    sb.nbctl(&["--bare", "--columns=_uuid", "list", table])
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count()
}

#[derive(Default)]
struct Figures {
    lb_rows: usize,
    chassis_rows: usize,
    values: usize,
    written: bool,
    transactions: usize,
    bytes: usize,
    first_sync: Duration,
    northd_full: Duration,
    nb_rss: f64,
    change: Vec<Duration>,
    change_ops: usize,
    change_bytes: usize,
    northd_change: Vec<Duration>,
}

/// The rows and values the plan has, without writing them.
fn planned(objs: &Objects, mode: NodeRows) -> Figures {
    let mut planner = Planner::new(ModelOptions::default(), &[], 0x7f1f, Some(config(mode)));
    let d = hand_over(&mut planner, objs);
    Figures {
        lb_rows: d.row_count,
        chassis_rows: d.template_chassis.as_ref().map_or(0, |c| c.len()),
        values: d
            .rows
            .values()
            .flat_map(|v| v.iter())
            .map(|r| r.template_vars.len())
            .sum(),
        ..Figures::default()
    }
}

fn measure(rt: &Runtime, nodes: u32, services: u32, mode: NodeRows) -> Figures {
    let locals = (0..services).filter(|i| local(*i)).count();
    // Per-node: a row per node and a switch row per Local Service, one row per other Service
    // (this workload's one protocol); too many to hold in memory are counted, not planned.
    let per_node_rows = locals * (nodes as usize + 1) + (services as usize - locals);
    if mode == NodeRows::PerNode && per_node_rows > PER_NODE_MAX_ROWS {
        return Figures {
            lb_rows: per_node_rows,
            ..Figures::default()
        };
    }
    let objs = objects(nodes, services);
    let mut f = planned(&objs, mode);
    if mode == NodeRows::PerNode {
        assert_eq!(f.lb_rows, per_node_rows, "the count above is the plan's");
    }
    f.written = true;
    let sb = fresh_nb(nodes);
    let remote = format!("unix:{}", sb.nb_sock().display());
    let templates = mode == NodeRows::Template;
    let t = Instant::now();
    let mut planner = Planner::new(ModelOptions::default(), &[], 0x7f1f, Some(config(mode)));
    let desired = hand_over(&mut planner, &objs);
    let (client, monitor, mut session) = rt.block_on(async {
        let client = Client::connect(ClientOptions::new(&remote, DB).unwrap())
            .await
            .expect("connect");
        let token = new_token();
        take_over(&client, &token).await.expect("take over");
        let mut monitor = client
            .monitor(monitor_spec(templates))
            .await
            .expect("monitor");
        let mut session = Session::new(Observed::from_cache(&monitor.cache()), Some(token));
        absorb_queued(&mut session, &mut monitor, None);
        // The groups and chassis rows first, as the writer does before any diff; then the
        // whole plan, in the writer's batches.
        let sent = write_plan(&mut session, &client, monitor, &desired).await;
        sent.result.expect("first sync");
        f.transactions = sent.transactions as usize;
        let mut monitor = match sent.monitor {
            Some(m) => m,
            // The writer takes the monitor again after a large first sync; say why it could not.
            None => client
                .monitor(monitor_spec(templates))
                .await
                .unwrap_or_else(|e| panic!("cannot monitor after the first sync: {e}")),
        };
        absorb_queued(&mut session, &mut monitor, None);
        (client, monitor, session)
    });
    f.first_sync = t.elapsed();
    // Not counted: the full check the run loop does next, against the monitor taken again
    // after the first sync (nothing to write); timed, it made the first move look slow.
    let mut monitor = rt.block_on(async {
        let check = write_plan(&mut session, &client, monitor, &desired).await;
        check.result.expect("check after the first sync");
        assert_eq!(check.transactions, 0, "in sync after the first sync");
        check.monitor.expect("the same monitor")
    });
    assert!(
        session.problems().is_empty(),
        "{:?}",
        &session.problems()[..session.problems().len().min(5)]
    );
    f.bytes = std::fs::metadata(sb.path().join("ovnnb_db.db")).map_or(0, |m| m.len() as usize);
    assert_eq!(count(&sb, "Load_Balancer"), f.lb_rows, "rows in the NB");
    f.nb_rss = nb_rss_mib(&sb);
    northd(&sb, "resume");
    f.northd_full = wait_northd(&sb);

    // One Local Service's endpoints move by one node, CHANGES times.
    let mut objs = objs;
    let locals: Vec<u32> = (0..services).filter(|i| local(*i)).collect();
    for k in 0..CHANGES {
        let i = locals[(k * 97) % locals.len()];
        let moved = (i % nodes + 1 + k as u32) % nodes;
        objs.endpoint_slices[i as usize] = Arc::new(slice(i, moved, nodes).into());
        let t = Instant::now();
        let d = hand_over(&mut planner, &objs);
        let changes = session.changes(&d);
        if k == 0 {
            f.change_ops = changes.iter().map(|c| c.ops).sum();
            f.change_bytes = changes
                .iter()
                .filter_map(|c| c.txn.as_ref())
                .map(|t| t.params_bytes().map_or(0, |b| b.len()))
                .sum();
        }
        monitor = rt.block_on(async {
            let sent = send(&mut session, &client, monitor, &d, changes).await;
            sent.result.expect("change");
            sent.monitor.expect("the same monitor")
        });
        f.change.push(t.elapsed());
        f.northd_change.push(wait_northd(&sb));
        rt.block_on(async { absorb_queued(&mut session, &mut monitor, None) });
    }
    f
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let nodes: u32 = args.first().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let services: u32 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let modes: Vec<NodeRows> = args
        .get(2)
        .map_or("template,per-node", String::as_str)
        .split(',')
        .filter_map(|m| match m {
            "template" => Some(NodeRows::Template),
            "per-node" => Some(NodeRows::PerNode),
            _ => None,
        })
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "nb_scale: {nodes} nodes (gateway router + switch each), {services} Services ({} Local), ovn-northd {}",
        (0..services).filter(|i| local(*i)).count(),
        ovn_version()
    );
    let mut rows = Vec::new();
    for mode in modes {
        let f = measure(&rt, nodes, services, mode);
        rows.push((mode, f));
    }
    println!(
        "\n| mode | LB rows | chassis rows | values | written | first sync | txns | NB on disk | NB RSS | northd, whole | one endpoint move p50 / p99 | its ops / bytes | northd, one move p50 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (mode, f) in &rows {
        let name = match mode {
            NodeRows::Template => "template",
            // Unresolved auto plans per-node rows.
            NodeRows::PerNode | NodeRows::Auto => "per-node",
        };
        if !f.written {
            println!(
                "| {name} | {} (counted) | {} | {} | no: over {PER_NODE_MAX_ROWS} rows | – | – | – | – | – | – | – | – |",
                f.lb_rows, f.chassis_rows, f.values
            );
            continue;
        }
        println!(
            "| {name} | {} | {} | {} | yes | {:.0} ms | {} | {:.1} MiB | {:.0} MiB | {:.0} ms | {:.1} / {:.1} ms | {} / {} | {:.0} ms |",
            f.lb_rows,
            f.chassis_rows,
            f.values,
            ms(f.first_sync),
            f.transactions,
            f.bytes as f64 / (1024.0 * 1024.0),
            f.nb_rss,
            ms(f.northd_full),
            ms(percentile(&f.change, 50.0)),
            ms(percentile(&f.change, 99.0)),
            f.change_ops,
            f.change_bytes,
            ms(percentile(&f.northd_change, 50.0)),
        );
    }
    for (mode, f) in rows.iter().filter(|(_, f)| f.written) {
        let each: Vec<String> = f.change.iter().map(|d| format!("{:.1}", ms(*d))).collect();
        println!("{mode:?}: each endpoint move, ms: {}", each.join(" "));
    }
    if let (Some((_, t)), Some((_, p))) = (
        rows.iter().find(|(m, _)| *m == NodeRows::Template),
        rows.iter().find(|(m, _)| *m == NodeRows::PerNode),
    ) {
        println!(
            "\nper-node / template: {:.1}x the Load_Balancer rows",
            p.lb_rows as f64 / t.lb_rows.max(1) as f64
        );
    }
}

fn ovn_version() -> String {
    std::process::Command::new("ovn-northd")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(|l| l.trim().to_string()))
        .unwrap_or_else(|| "unknown".into())
}
