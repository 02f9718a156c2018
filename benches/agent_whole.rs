//! The whole agent as a user runs it, at 10,000 Services: the release binary against a real
//! ovs-vswitchd and OVN Northbound database, driven by a file (file mode) and by the Kubernetes
//! API test server (cluster mode), each figure printed beside its target.
//!
//! Run: `cargo bench --bench agent_whole` (optionally `-- SERVICES CHANGES`, defaults 10000
//! and 1000, and `file`, `json` or `cluster` for those modes only). `VIPFLOW_BENCH_WRAP=heaptrack` runs
//! the agent under that command (a profiler); its figures are then the profiler's, not the agent's.
//! The whole process group is asked to stop (SIGTERM) at the end: a profiler whose helpers must
//! outlive the agent is best started by a script that ignores SIGTERM (`trap '' TERM`) and then
//! execs it; the agent sets its own handler and still stops. `VIPFLOW_BENCH_HOLD_S=N` holds
//! each agent N more seconds in its steady state before the changes, for a profiler to look
//! at (e.g. to stop it there with SIGKILL, so that what it still holds is what it reports).
//! `VIPFLOW_BENCH_SAMPLES=1` prints every change's time in order (which change a slow one was).
//! `VIPFLOW_KEEP_SANDBOX=1` keeps each sandbox's logs (the agent's among them).
//!
//! Per mode:
//! - first full sync: from the agent's start to both the bridge and the Northbound database
//!   synced (its log says so), for SERVICES LoadBalancer Services with an EndpointSlice each,
//!   as `kubectl get svc,endpointslices -A -o yaml` prints them (80,000 flows, 10,000 rows);
//! - steady-state peak RSS (VmHWM, since the start) one second after the first sync, and the
//!   resident size then (what is left once the start's transients are over);
//! - CHANGES single-Service changes (a port moved from 80 to 81 and back), each timed from the
//!   change (the file renamed into place; the API server's write) to the new flow on br-ex,
//!   as the switch's own flow monitor reports it to a second OpenFlow connection (opened
//!   once the first sync is done: a user's agent has no such connection to feed);
//! - peak RSS and CPU seconds after the changes: the peak since the start, and the peak during
//!   the changes alone (VmHWM reset once steady, `clear_refs` 5).
//!
//! File mode runs twice: with the objects as `kubectl get -o yaml` prints them, and as
//! `-o json` does (the same objects; JSON parses several times faster than YAML).
//!
//! Cluster mode runs twice: with ovn-northd, and with it stopped, as on a node (northd runs
//! beside the central databases; here it would take one of the two cores after every change).
//!
//! File mode polls every 20 ms (`--poll-interval-ms 20`); a new file version is taken once it
//! has stayed the same for 100 ms (the settle time that keeps a half-written file out), so
//! that much of each change's time is the wait for the file to settle.

mod support;
use support::{ms, percentile};

#[path = "../tests/common/mod.rs"]
mod common;

use openflow::monitor::{FlowEvent, FlowMonitorRequest, FlowUpdate, MonitorEvent, flags};
use openflow::{Connection, Event};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use testkit::kube_server::KubeServer;
use testkit::{COOKIE_PREFIX, Sandbox, our_cookie};
use vipflow::model::Protocol;
use vipflow::plan::flows::{FlowKey, cookie};

fn proc_status_kib(pid: u32, field: &str) -> u64 {
    testkit::proc_status_kib(pid, field)
}

/// User + system CPU seconds of `pid`.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the ')'.
    (ticks(11) + ticks(12)) as f64 / 100.0
}

/// The agent, its log, stopped on drop.
struct Agent {
    child: Child,
    log: PathBuf,
    started: Instant,
}

impl Agent {
    fn spawn(sb: &Sandbox, mode_args: &[String]) -> Agent {
        let log = sb.path().join("agent.log");
        let f = std::fs::File::create(&log).expect("agent log");
        // VIPFLOW_BENCH_WRAP runs the agent under a profiler, e.g. `heaptrack`.
        let wrap = std::env::var("VIPFLOW_BENCH_WRAP").unwrap_or_default();
        let mut words = wrap.split_whitespace();
        let mut cmd = match words.next() {
            Some(tool) => {
                let mut c = Command::new(tool);
                c.args(words).arg(env!("CARGO_BIN_EXE_vipflow"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_vipflow")),
        };
        // Its own process group: a wrapper's child is stopped with it ([`Agent::drop`]).
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd
            .arg("agent")
            .args(mode_args)
            .args(["--node-name", "node-a"])
            .arg("--ovs-rundir")
            .arg(sb.path())
            .arg("--nb-remote")
            .arg(format!("unix:{}", sb.nb_sock().display()))
            .args(["--node-router", "GR_{node}"])
            .env("VIPFLOW_LOG", "info")
            .env_remove("OVN_NB_DB")
            .env_remove("VIPFLOW_OBJECTS")
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("log"))
            .stderr(f)
            .spawn()
            .expect("spawn the agent");
        Agent {
            child,
            log,
            started: Instant::now(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Time from the start until the bridge and the Northbound database both synced.
    fn wait_first_sync(&self) -> Duration {
        loop {
            let log = self.log();
            if log.contains("synced bridge=br-ex generation=1")
                && log.contains("Northbound synced generation=1")
            {
                return self.started.elapsed();
            }
            assert!(
                self.started.elapsed() < Duration::from_secs(120),
                "no first sync within 2 minutes:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        // The whole group: under VIPFLOW_BENCH_WRAP the agent is the wrapper's child. Asked to
        // stop first, so that a profiler writes out what it saw.
        let group = i32::try_from(self.child.id()).map(|pid| -pid);
        let signal = |sig| {
            if let Ok(g) = group {
                // SAFETY: kill(2) on the group this bench made for the agent.
                unsafe {
                    libc::kill(g, sig);
                }
            }
        };
        signal(libc::SIGTERM);
        // A profiler writes its data out after the agent stopped, which takes a while.
        let grace = if std::env::var_os("VIPFLOW_BENCH_WRAP").is_some() {
            60
        } else {
            5
        };
        let deadline = Instant::now() + Duration::from_secs(grace);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        signal(libc::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A second OpenFlow connection to br-ex whose flow monitor reports every flow the agent adds.
struct Watcher {
    rt: tokio::runtime::Runtime,
    _conn: Connection,
    events: openflow::Events,
}

impl Watcher {
    fn new(sb: &Sandbox) -> Watcher {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let target = format!("unix:{}", sb.mgmt_sock("br-ex").display());
        let (conn, events) = rt
            .block_on(Connection::connect(&target, openflow::Config::default()))
            .expect("connect to br-ex");
        let req = FlowMonitorRequest {
            id: 7,
            flags: flags::ADD,
            out_port: openflow::monitor::PORT_ANY,
            table_id: 0,
            match_: openflow::Match::new(),
        };
        rt.block_on(conn.multipart(req.to_multipart()))
            .expect("flow monitor");
        Watcher {
            rt,
            _conn: conn,
            events,
        }
    }

    /// Drop what was reported so far.
    fn drain(&mut self) {
        while self.events.try_recv().is_ok() {}
    }

    /// Wait until a flow with `cookie` is added; when it was reported.
    fn added(&mut self, cookie: u64, limit: Duration) -> Instant {
        let events = &mut self.events;
        self.rt.block_on(async {
            let deadline = tokio::time::Instant::now() + limit;
            loop {
                let ev = tokio::time::timeout_at(deadline, events.recv())
                    .await
                    .unwrap_or_else(|_| panic!("flow {cookie:#x} not added within {limit:?}"))
                    .expect("br-ex connection open");
                let Event::Message(_, m) = ev else {
                    panic!("br-ex connection closed")
                };
                if let Some(Ok(MonitorEvent::Updates(ups))) = openflow::monitor::monitor_event(&m)
                    && ups.iter().any(|u| {
                        matches!(u, FlowUpdate::Full { event: FlowEvent::Added, cookie: c, .. } if *c == cookie)
                    })
                {
                    return Instant::now();
                }
            }
        })
    }
}

/// The dump cut into its items (each starting with `- `), with the text before them.
struct Dump {
    head: String,
    items: Vec<String>,
    tail: String,
}

impl Dump {
    fn of(text: &str) -> Dump {
        let start = text.find("\n- ").expect("items") + 1;
        let (head, body) = text.split_at(start);
        let end = body.find("\nkind: List").map_or(body.len(), |i| i + 1);
        let (body, tail) = body.split_at(end);
        let mut items = Vec::new();
        for part in body.split_inclusive('\n') {
            if part.starts_with("- ") || items.is_empty() {
                items.push(String::new());
            }
            items.last_mut().expect("an item").push_str(part);
        }
        Dump {
            head: head.into(),
            items,
            tail: tail.into(),
        }
    }

    fn text(&self) -> String {
        let mut s = String::with_capacity(self.head.len() + self.items.len() * 2048);
        s.push_str(&self.head);
        self.items.iter().for_each(|i| s.push_str(i));
        s.push_str(&self.tail);
        s
    }

    /// The items that are Services, by index into `items`.
    fn services(&self) -> Vec<usize> {
        (0..self.items.len())
            .filter(|&i| self.items[i].contains("\n  kind: Service\n"))
            .collect()
    }
}

/// A Service's VIP in the dump's text.
fn vip_of(item: &str) -> std::net::IpAddr {
    let at = item.find("- ip: ").expect("an ingress IP") + 6;
    item[at..]
        .lines()
        .next()
        .expect("a line")
        .trim()
        .parse()
        .expect("an IP")
}

/// The cookie of the steer flow of `vip:port/TCP`.
fn steer_cookie(vip: std::net::IpAddr, port: u16) -> u64 {
    cookie(
        COOKIE_PREFIX,
        &FlowKey::Steer(vip, port, Protocol::Tcp).to_string(),
    )
}

/// The first sync and the steady state after it, one second later.
struct Steady {
    first_sync: Duration,
    peak_mib: u64,
    /// Resident size then: what the agent holds once the start's transients are over.
    settled_mib: u64,
    cpu: f64,
}

impl Steady {
    fn of(agent: &Agent) -> Steady {
        let first_sync = agent.wait_first_sync();
        std::thread::sleep(Duration::from_secs(1));
        let steady = Steady {
            first_sync,
            peak_mib: proc_status_kib(agent.pid(), "VmHWM:") / 1024,
            settled_mib: proc_status_kib(agent.pid(), "VmRSS:") / 1024,
            cpu: cpu_seconds(agent.pid()),
        };
        // From here VmHWM is the peak of the steady state alone (the changes), printed beside
        // the peak since the start.
        reset_peak(agent.pid());
        let hold = std::env::var("VIPFLOW_BENCH_HOLD_S").ok();
        if let Some(s) = hold.and_then(|s| s.parse::<u64>().ok()) {
            std::thread::sleep(Duration::from_secs(s));
        }
        steady
    }
}

/// Make `pid`'s VmHWM its current resident size (proc(5), `clear_refs` 5).
fn reset_peak(pid: u32) {
    if let Err(e) = std::fs::write(format!("/proc/{pid}/clear_refs"), "5") {
        eprintln!("cannot reset the agent's peak RSS: {e}");
    }
}

/// What one mode measured.
struct Figures {
    first_sync: Duration,
    steady_peak_mib: u64,
    settled_mib: u64,
    changes: Vec<Duration>,
    /// Since the start, and since the steady state began.
    after_peak_mib: u64,
    changes_peak_mib: u64,
    cpu_per_1000: f64,
    /// The agent's own read and parse of the objects file at its start (file mode).
    parse: Option<Duration>,
    /// `ovs-ofctl --bundle add-flows` of the same flows on an idle switch (file mode).
    floor: Option<Duration>,
}

impl Figures {
    /// What `agent` measured after the changes that took `times`.
    fn after(agent: &Agent, steady: Steady, times: Vec<Duration>) -> Figures {
        let cpu = cpu_seconds(agent.pid()) - steady.cpu;
        let changes_peak_mib = proc_status_kib(agent.pid(), "VmHWM:") / 1024;
        Figures {
            first_sync: steady.first_sync,
            steady_peak_mib: steady.peak_mib,
            settled_mib: steady.settled_mib,
            after_peak_mib: steady.peak_mib.max(changes_peak_mib),
            changes_peak_mib,
            cpu_per_1000: cpu * 1000.0 / times.len().max(1) as f64,
            changes: times,
            parse: None,
            floor: None,
        }
    }
}

/// How the objects file is written: as `kubectl get -o yaml` or `-o json` prints it.
#[derive(Clone, Copy, PartialEq)]
enum Syntax {
    Yaml,
    Json,
}

/// The file's items, changed one port at a time and written whole in `syntax`.
enum FileDump {
    Yaml(Dump),
    Json(Value),
}

impl FileDump {
    fn of(services: usize, syntax: Syntax) -> FileDump {
        let text = common::kubectl_dump(services, false);
        match syntax {
            Syntax::Yaml => FileDump::Yaml(Dump::of(&text)),
            Syntax::Json => FileDump::Json(serde_yaml_ng::from_str(&text).expect("the dump")),
        }
    }

    fn text(&self) -> String {
        match self {
            FileDump::Yaml(d) => d.text(),
            FileDump::Json(v) => serde_json::to_string_pretty(v).expect("JSON text"),
        }
    }

    /// The indexes of the Services among the items.
    fn services(&self) -> Vec<usize> {
        match self {
            FileDump::Yaml(d) => d.services(),
            FileDump::Json(v) => (v["items"].as_array().expect("items").iter())
                .enumerate()
                .filter(|(_, o)| o["kind"] == "Service")
                .map(|(i, _)| i)
                .collect(),
        }
    }

    /// Move Service item `i`'s first port between 80 and 81; its VIP and the new port.
    fn move_port(&mut self, i: usize) -> (std::net::IpAddr, u16) {
        match self {
            FileDump::Yaml(d) => {
                let item = &mut d.items[i];
                let (from, to) = if item.contains("      port: 80\n") {
                    (80, 81)
                } else {
                    (81, 80)
                };
                *item = item.replacen(
                    &format!("      port: {from}\n"),
                    &format!("      port: {to}\n"),
                    1,
                );
                (vip_of(item), to)
            }
            FileDump::Json(v) => {
                let item = &mut v["items"][i];
                let port = &mut item["spec"]["ports"][0]["port"];
                let to = if port.as_u64() == Some(80) { 81 } else { 80 };
                *port = Value::from(to);
                let vip = item["status"]["loadBalancer"]["ingress"][0]["ip"]
                    .as_str()
                    .expect("an ingress IP")
                    .parse()
                    .expect("an IP");
                (vip, to)
            }
        }
    }
}

fn file_mode(services: usize, changes: usize, syntax: Syntax) -> Figures {
    let sb = Sandbox::start();
    let path = sb.path().join(match syntax {
        Syntax::Yaml => "objects.yaml",
        Syntax::Json => "objects.json",
    });
    let mut dump = FileDump::of(services, syntax);
    common::write_objects(&path, &dump.text());
    let agent = Agent::spawn(
        &sb,
        &[
            "--objects".into(),
            path.to_string_lossy().into_owned(),
            "--poll-interval-ms".into(),
            "20".into(),
        ],
    );
    let steady = Steady::of(&agent);
    // Only now: a monitor open through the first sync would have the switch report all its
    // flows in full to a connection that reads none of them, which no user's agent pays for.
    let mut watcher = Watcher::new(&sb);
    let svc = dump.services();
    let mut times = Vec::with_capacity(changes);
    for k in 0..changes {
        let (vip, to) = dump.move_port(svc[(k * 7919) % svc.len()]);
        let want = steer_cookie(vip, to);
        let text = dump.text();
        watcher.drain();
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, &text).expect("write");
        let t0 = Instant::now();
        std::fs::rename(&tmp, &path).expect("rename");
        let t1 = watcher.added(want, Duration::from_secs(30));
        times.push(t1 - t0);
    }
    let mut f = Figures::after(&agent, steady, times);
    f.parse = loaded_took(&agent.log());
    drop(agent);
    f.floor = Some(add_flows_floor(&sb));
    f
}

/// How long the agent took to read and parse the objects file at its start (its log says).
fn loaded_took(log: &str) -> Option<Duration> {
    let line = log.lines().find(|l| l.contains("objects loaded"))?;
    let at = line.find("took_ms=")? + "took_ms=".len();
    let ms: u64 = line[at..].split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_millis(ms))
}

/// What ovs-vswitchd alone takes to accept br-ex's flows: `ovs-ofctl --bundle add-flows` of
/// the same flows onto an empty bridge of the same switch, with nothing else running (the
/// agent stopped, its database idle). The bridge part of a first sync cannot beat it.
fn add_flows_floor(sb: &Sandbox) -> Duration {
    let flows = sb.ofctl(&[
        "-O",
        "OpenFlow13",
        "--no-names",
        "dump-flows",
        "br-ex",
        "--no-stats",
    ]);
    let file = sb.path().join("floor.flows");
    let prefix = our_cookie();
    let ours: String = flows
        .lines()
        .filter(|l| l.contains(&prefix))
        .flat_map(|l| [l.trim(), "\n"])
        .collect();
    std::fs::write(&file, &ours).expect("write the flows");
    sb.vsctl(&[
        "add-br",
        "br-floor",
        "--",
        "set",
        "bridge",
        "br-floor",
        "datapath_type=netdev",
    ]);
    let path = file.to_string_lossy().into_owned();
    let t0 = Instant::now();
    sb.ofctl(&[
        "--bundle",
        "-O",
        "OpenFlow13",
        "add-flows",
        "br-floor",
        &path,
    ]);
    t0.elapsed()
}

fn cluster_mode(services: usize, changes: usize, northd: bool) -> Figures {
    let sb = Sandbox::start();
    if !northd {
        stop_northd(&sb);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let kube = rt.block_on(KubeServer::start());
    kube.apply_yaml(
        "apiVersion: v1\nkind: Node\nmetadata: {name: node-a}\nstatus:\n  addresses: [{type: InternalIP, address: 192.168.10.11}]\n",
    );
    let dump = common::kubectl_dump(services, false);
    kube.apply_yaml(&dump);
    let names: Vec<(String, String)> = kube
        .list("v1", "Service")
        .iter()
        .map(|s| {
            let m = &s["metadata"];
            (
                m["namespace"].as_str().unwrap_or_default().to_string(),
                m["name"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let agent = Agent::spawn(
        &sb,
        &[
            "--kubeconfig".into(),
            kube.kubeconfig_path().to_string_lossy().into_owned(),
            "--identity".into(),
            "bench".into(),
            "--lease-namespace".into(),
            "default".into(),
        ],
    );
    let steady = Steady::of(&agent);
    // Only now: a monitor open through the first sync would have the switch report all its
    // flows in full to a connection that reads none of them, which no user's agent pays for.
    let mut watcher = Watcher::new(&sb);
    let mut times = Vec::with_capacity(changes);
    for k in 0..changes {
        let (ns, name) = &names[(k * 7919) % names.len()];
        let mut s: Value = kube.get("v1", "Service", ns, name).expect("the Service");
        let port = &mut s["spec"]["ports"][0]["port"];
        let to = if port.as_u64() == Some(80) { 81 } else { 80 };
        *port = Value::from(to);
        let vip: std::net::IpAddr = s["status"]["loadBalancer"]["ingress"][0]["ip"]
            .as_str()
            .expect("an ingress IP")
            .parse()
            .expect("an IP");
        let want = steer_cookie(vip, to);
        watcher.drain();
        let t0 = Instant::now();
        kube.apply(s);
        let t1 = watcher.added(want, Duration::from_secs(30));
        times.push(t1 - t0);
    }
    print_samples(&times);
    let f = Figures::after(&agent, steady, times);
    drop(agent);
    drop(kube);
    f
}

/// Every change's time in order, with `VIPFLOW_BENCH_SAMPLES` set (which change a slow one was).
fn print_samples(times: &[Duration]) {
    if std::env::var_os("VIPFLOW_BENCH_SAMPLES").is_some() {
        let ms: Vec<String> = times
            .iter()
            .map(|t| format!("{:.1}", t.as_secs_f64() * 1e3))
            .collect();
        eprintln!("changes, ms in order: {}", ms.join(" "));
    }
}

/// Stop the sandbox's ovn-northd, by the pid it recorded.
fn stop_northd(sb: &Sandbox) {
    let pid = std::fs::read_to_string(sb.path().join("ovn-northd.pid")).expect("northd pid");
    let pid = pid.trim();
    let ok = Command::new("kill")
        .args(["-TERM", pid])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "stop ovn-northd {pid}");
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn print(mode: &str, f: &Figures, change_target: &str) {
    let p = |q| ms(percentile(&f.changes, q));
    println!("\n{mode}");
    println!("  {:<40} {:>16} {:>12}", "", "figure", "target");
    let row = |what: &str, now: String, target: &str| {
        println!("  {what:<40} {now:>16} {target:>12}");
    };
    row(
        "first full sync (start to both synced)",
        format!("{:.2} s", f.first_sync.as_secs_f64()),
        "<= 1 s",
    );
    if let Some(d) = f.parse {
        row(
            "  of which: objects file read and parsed",
            format!("{:.2} s", d.as_secs_f64()),
            "",
        );
    }
    if let Some(d) = f.floor {
        row(
            "  beside: ovs-ofctl --bundle add-flows",
            format!("{:.2} s", d.as_secs_f64()),
            "",
        );
        println!(
            "  {:<40} {:>16}",
            "    (same flows, idle switch: the floor)",
            format!(
                "first sync {:.1}x",
                f.first_sync.as_secs_f64() / d.as_secs_f64()
            )
        );
    }
    row(
        "peak RSS, steady state",
        format!("{} MiB", f.steady_peak_mib),
        "<= 64 MiB",
    );
    row(
        "  of which: RSS 1 s after the first sync",
        format!("{} MiB", f.settled_mib),
        "",
    );
    row(
        &format!("peak RSS after {} changes", f.changes.len()),
        format!("{} MiB", f.after_peak_mib),
        "<= 96 MiB",
    );
    row(
        "  of which: peak during the changes",
        format!("{} MiB", f.changes_peak_mib),
        "",
    );
    row(
        "one change to bridge synced, p50",
        format!("{:.1} ms", p(50.0)),
        "",
    );
    row(
        "one change to bridge synced, p99",
        format!("{:.1} ms", p(99.0)),
        change_target,
    );
    row(
        "CPU seconds per 1,000 changes",
        format!("{:.1} s", f.cpu_per_1000),
        "",
    );
}

fn main() {
    let words: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<usize> = words.iter().filter_map(|a| a.parse().ok()).collect();
    // `file`, `json` or `cluster` among the arguments runs those modes only.
    let only = |m: &str| {
        !words
            .iter()
            .any(|w| w == "file" || w == "json" || w == "cluster")
            || words.iter().any(|w| w == m)
    };
    let services = args.first().copied().unwrap_or(10_000);
    let changes = args.get(1).copied().unwrap_or(1_000);
    println!(
        "the whole vipflow agent (release binary), {services} LoadBalancer Services with an \
         EndpointSlice each ({} flows on br-ex, {services} Northbound rows), {changes} \
         single-Service changes per mode; real ovs-vswitchd, OVN NB and northd",
        services * 8
    );
    if only("file") {
        let f = file_mode(services, changes, Syntax::Yaml);
        print(
            "file mode (objects file as `kubectl get -o yaml` prints it, polled every 20 ms)",
            &f,
            "<= 200 ms",
        );
    }
    if only("json") {
        let f = file_mode(services, changes, Syntax::Json);
        print(
            "file mode, the same objects as `kubectl get -o json` prints them",
            &f,
            "<= 200 ms",
        );
    }
    if !only("cluster") {
        return;
    }
    let c = cluster_mode(services, changes, true);
    print("cluster mode (Kubernetes API test server)", &c, "<= 20 ms");
    // ovn-northd runs beside the central databases, not beside a node's agent: on this 2-core
    // machine it recomputes 10,000 load balancers after every change and takes a core.
    let c = cluster_mode(services, changes, false);
    print(
        "cluster mode, ovn-northd stopped (as on a node: it runs on the control plane)",
        &c,
        "<= 20 ms",
    );
}
