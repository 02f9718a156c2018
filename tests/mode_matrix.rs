//! Every mode a user can set on a node, the way users run them: the long-running `vipflow
//! agent` programs a private OVS/OVN sandbox; then, with the very same settings, `vipflow
//! verify` says in sync, `vipflow agent --once` adds and removes nothing (flows, rows, template
//! values, groups, `exclude_ips`), and `vipflow plan` prints exactly the flows and rows the
//! agent holds. A hand-made change (one flow's actions, one row's backends, one template value)
//! is then reported by `verify` as exactly that line.
//!
//! The bridge's modes (profile, VLAN, announce) and the Northbound writer's (row mode,
//! Kube-OVN dialect, prefer-local) are set independently and meet in no plan: the flows are
//! made from the bridge's settings alone and the rows from the writer's alone. So every
//! combination of the bridge's modes runs, each beside one combination of the writer's, taken
//! in turn until every one of those has run too.

mod common;

use common::LoggedAgent;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use testkit::{Sandbox, our_cookie};

const UPLINK: &str = "1";
const PATCH: &str = "2";
const BRIDGE_MAC: &str = "02:00:00:00:00:01";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Announce {
    Off,
    /// Both nodes Ready: this node owns some VIPs and not others.
    Shared,
    /// Only this node Ready: it owns every VIP.
    All,
}

#[derive(Debug, Clone, Copy)]
struct Case {
    underlay: bool,
    vlan: bool,
    announce: Announce,
    template: bool,
    kube_ovn: bool,
    prefer_local: bool,
}

impl Case {
    fn all() -> Vec<Case> {
        let mut nb = Vec::new();
        for template in [false, true] {
            for kube_ovn in [false, true] {
                for prefer_local in [false, true] {
                    nb.push((template, kube_ovn, prefer_local));
                }
            }
        }
        let mut out = Vec::new();
        for underlay in [false, true] {
            for vlan in [false, true] {
                for announce in [Announce::Off, Announce::Shared, Announce::All] {
                    let (template, kube_ovn, prefer_local) = nb[out.len() % nb.len()];
                    out.push(Case {
                        underlay,
                        vlan,
                        announce,
                        template,
                        kube_ovn,
                        prefer_local,
                    });
                }
            }
        }
        out
    }

    fn args(&self, sb: &Sandbox, objects: &Path) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "--objects".into(),
            objects.display().to_string(),
            "--ovs-rundir".into(),
            sb.path().display().to_string(),
            "--node-name".into(),
            "node-a".into(),
            "--nb-remote".into(),
            format!("unix:{}", sb.nb_sock().display()),
            "--node-router".into(),
            "GR_{node}".into(),
            "--node-switch".into(),
            "{node}".into(),
            "--node-rows".into(),
            if self.template {
                "template"
            } else {
                "per-node"
            }
            .into(),
        ];
        if self.underlay {
            a.extend(
                ["--profile", "underlay", "--router-mac", "0a:58:0a:f4:00:01"].map(Into::into),
            );
        }
        if self.vlan {
            a.extend(["--vlan", "100"].map(Into::into));
        }
        if self.announce != Announce::Off {
            a.push("--announce".into());
        }
        if self.kube_ovn {
            a.push("--kube-ovn".into());
        }
        if self.prefer_local {
            a.push("--prefer-local".into());
        }
        a
    }

    fn row(&self) -> String {
        format!(
            "| {:<8} | {:<4} | {:<8} | {:<8} | {:<8} | {:<12} |",
            if self.underlay { "underlay" } else { "gateway" },
            if self.vlan { "100" } else { "none" },
            format!("{:?}", self.announce).to_lowercase(),
            if self.template {
                "template"
            } else {
                "per-node"
            },
            if self.kube_ovn { "kube-ovn" } else { "ovn" },
            if self.prefer_local {
                "prefer-local"
            } else {
                "-"
            },
        )
    }
}

/// Two nodes (node-b Ready or not), a Cluster Service, a Local one with its endpoint on node-a
/// only (IPv4 and IPv6), and a dual-stack external IP without endpoints.
fn objects(node_b_ready: bool) -> String {
    let node = |name: &str, ip: &str, chassis: &str, ready: bool| {
        format!(
            r#"
- apiVersion: v1
  kind: Node
  metadata:
    name: {name}
    annotations: {{k8s.ovn.org/node-chassis-id: {chassis}}}
  status:
    addresses: [{{type: InternalIP, address: {ip}}}]
    conditions: [{{type: Ready, status: "{}"}}]"#,
            if ready { "True" } else { "False" }
        )
    };
    let mut y = String::from("apiVersion: v1\nkind: List\nitems:");
    y.push_str(&node("node-a", "192.168.10.11", "chassis-a", true));
    y.push_str(&node("node-b", "192.168.10.12", "chassis-b", node_b_ready));
    y.push_str(
        r#"
- apiVersion: v1
  kind: Service
  metadata: {name: web, namespace: shop, creationTimestamp: "2026-01-10T08:00:00Z"}
  spec:
    type: LoadBalancer
    externalTrafficPolicy: Cluster
    ports: [{name: http, port: 80, protocol: TCP, targetPort: 8080}]
  status: {loadBalancer: {ingress: [{ip: 172.18.0.100}]}}
- apiVersion: v1
  kind: Service
  metadata: {name: local, namespace: shop, creationTimestamp: "2026-01-10T09:00:00Z"}
  spec:
    type: LoadBalancer
    externalTrafficPolicy: Local
    ipFamilies: [IPv4, IPv6]
    ports: [{name: http, port: 80, protocol: TCP, targetPort: 8080}]
  status: {loadBalancer: {ingress: [{ip: 172.18.0.110}, {ip: "fd00:18::110"}]}}
- apiVersion: v1
  kind: Service
  metadata: {name: dns, namespace: infra, creationTimestamp: "2026-01-11T08:00:00Z"}
  spec:
    type: ClusterIP
    externalIPs: [172.18.0.53, "fd00:18::53"]
    ports: [{name: dns, port: 53, protocol: UDP}]
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: web-1, namespace: shop, labels: {kubernetes.io/service-name: web}}
  addressType: IPv4
  ports: [{name: http, port: 8080, protocol: TCP}]
  endpoints:
  - {addresses: [10.244.1.5], nodeName: node-a, targetRef: {kind: Pod, name: web-a, namespace: shop}, conditions: {ready: true, serving: true, terminating: false}}
  - {addresses: [10.244.2.7], nodeName: node-b, targetRef: {kind: Pod, name: web-b, namespace: shop}, conditions: {ready: true, serving: true, terminating: false}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: local-4, namespace: shop, labels: {kubernetes.io/service-name: local}}
  addressType: IPv4
  ports: [{name: http, port: 8080, protocol: TCP}]
  endpoints:
  - {addresses: [10.244.1.6], nodeName: node-a, conditions: {ready: true, serving: true, terminating: false}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: local-6, namespace: shop, labels: {kubernetes.io/service-name: local}}
  addressType: IPv6
  ports: [{name: http, port: 8080, protocol: TCP}]
  endpoints:
  - {addresses: ["fd00:244:1::6"], nodeName: node-a, conditions: {ready: true, serving: true, terminating: false}}
"#,
    );
    y
}

/// What a user looks at to see what vipflow holds: its flows on br-ex and the Northbound
/// tables it writes (Load_Balancer, Chassis_Template_Var, Load_Balancer_Group, the routers'
/// and switches' attachments and `exclude_ips`).
fn state(sb: &Sandbox) -> String {
    let mut out = flows(sb).join("\n");
    for (table, columns) in [
        (
            "Load_Balancer",
            "name,vips,options,ip_port_mappings,external_ids",
        ),
        ("Chassis_Template_Var", "chassis,variables"),
        ("Load_Balancer_Group", "name,load_balancer"),
        ("Logical_Router", "name,load_balancer,load_balancer_group"),
        (
            "Logical_Switch",
            "name,load_balancer,load_balancer_group,other_config",
        ),
    ] {
        let text = sb.nbctl(&[
            "--format=csv",
            "--data=bare",
            "--no-headings",
            &format!("--columns={columns}"),
            "list",
            table,
        ]);
        let mut lines: Vec<&str> = text.lines().collect();
        lines.sort_unstable();
        out.push_str(&format!("\n# {table}\n{}", lines.join("\n")));
    }
    out
}

/// vipflow's flows on br-ex as ovs-ofctl prints them (port numbers, no statistics).
fn flows(sb: &Sandbox) -> Vec<String> {
    let ours = our_cookie();
    let mut v: Vec<String> = sb
        .ofctl(&["--no-stats", "--no-names", "dump-flows", "br-ex"])
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| l.starts_with(&ours))
        .collect();
    v.sort_unstable();
    v
}

/// The VIPs this node answers for on br-ex: one ARP answer per IPv4 VIP, one solicitation
/// answer per IPv6 VIP.
fn answer_flows(sb: &Sandbox) -> usize {
    flows(sb)
        .iter()
        .filter(|l| {
            l.contains("priority=501") && (l.contains(",arp,") || l.contains("icmp_type=135"))
        })
        .count()
}

/// A flow line in one spelling: the match's fields in order, no blanks, no `table=0`, a
/// destination MAC rewrite as `set_field` (`vipflow plan` writes the match in the order the
/// flow is made and ovs-ofctl in its own).
fn canon(line: &str) -> String {
    let line = line.replace(' ', "").replace("table=0,", "");
    let (head, actions) = line.split_once("actions=").unwrap_or((&line, ""));
    let mut fields: Vec<&str> = head.trim_end_matches(',').split(',').collect();
    fields.sort_unstable();
    let actions: Vec<String> = actions
        .split(',')
        .map(|a| match a.strip_prefix("mod_dl_dst:") {
            Some(mac) => format!("set_field:{mac}->eth_dst"),
            None => a.to_string(),
        })
        .collect();
    format!("{} actions={}", fields.join(","), actions.join(","))
}

fn vipflow(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vipflow"))
        .args(args)
        .env("VIPFLOW_LOG", "info")
        .output()
        .expect("run vipflow")
}

/// A loopback address with a port free a moment ago.
fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("its address").to_string()
}

/// Whether the agent at `addr` says it is ready: every bridge and the Northbound database
/// synced once.
fn ready(addr: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut c) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
    if c.write_all(b"GET /readyz HTTP/1.0\r\nHost: x\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut reply = String::new();
    let _ = c.read_to_string(&mut reply);
    reply.starts_with("HTTP/1.0 200") || reply.starts_with("HTTP/1.1 200")
}

/// Wait until `what` holds, for at most `limit`.
fn within(limit: Duration, what: &str, mut f: impl FnMut() -> bool, log: impl Fn() -> String) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < limit,
            "{what} not within {limit:?}:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One combination, from a fresh sandbox; what went wrong, one line each.
fn run(case: Case) -> Vec<String> {
    let mut fails = Vec::new();
    let sb = Sandbox::start();
    for (kind, name) in [
        ("lr-add", "GR_node-a"),
        ("lr-add", "GR_node-b"),
        ("ls-add", "node-a"),
        ("ls-add", "node-b"),
        ("ls-add", "pods"),
    ] {
        sb.nbctl(&[kind, name]);
    }
    sb.nbctl(&[
        "set",
        "Logical_Switch",
        "pods",
        "other_config:subnet=172.18.0.0/24",
    ]);
    let objects = sb.path().join("objects.yaml");
    common::write_objects(&objects, &objects_text(case));
    let args = case.args(&sb, &objects);

    let with = |cmd: &[&str]| -> Vec<String> {
        cmd.iter()
            .map(|s| s.to_string())
            .chain(args.iter().cloned())
            .collect()
    };
    // agent --once on a fresh bridge and database: what it writes is what the long-running
    // agent then holds (flows, answer flows, rows, template values, groups, exclude_ips).
    let out = vipflow(&with(&["agent", "--once"]));
    if !out.status.success() {
        fails.push(format!(
            "a first agent --once failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let first_once = state(&sb);

    // The long-running agent, until both its bridge and the Northbound database are synced.
    let log = sb.path().join("agent.log");
    let f = std::fs::File::create(&log).expect("agent log");
    let http = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vipflow"));
    cmd.arg("agent")
        .args(&args)
        .args(["--http-addr", &http])
        .env("VIPFLOW_LOG", "info")
        .stdin(Stdio::null())
        .stdout(f.try_clone().expect("log"))
        .stderr(f);
    let agent = LoggedAgent::new(cmd.spawn().expect("start the agent"), log);
    within(
        Duration::from_secs(30),
        "the agent's first sync",
        || ready(&http),
        || agent.log(),
    );
    // Steady: the same state twice, a second apart.
    let mut held = state(&sb);
    within(
        Duration::from_secs(30),
        "a steady state",
        || {
            std::thread::sleep(Duration::from_millis(1000));
            let now = state(&sb);
            std::mem::replace(&mut held, now) == held
        },
        || agent.log(),
    );
    if held != first_once {
        fails.push(format!(
            "the agent holds other than a first --once wrote:\n--- --once\n{first_once}\n+++ agent\n{held}"
        ));
    }
    // Kube-OVN's prefer-local: each backend of the Cluster Service maps to its Pod's logical
    // switch port, as Kube-OVN's controller writes it.
    if case.kube_ovn && case.prefer_local {
        for want in [
            "10.244.1.5=web-a.shop:0.0.0.0",
            "10.244.2.7=web-b.shop:0.0.0.0",
        ] {
            if !held.contains(want) {
                fails.push(format!("no ip_port_mappings entry {want}:\n{held}"));
            }
        }
    }
    let (answers, vips) = (answer_flows(&sb), 5);
    let owned_ok = match case.announce {
        Announce::Off => answers == 0,
        Announce::Shared => answers > 0 && answers < vips,
        Announce::All => answers == vips,
    };
    if !owned_ok {
        fails.push(format!(
            "announce {:?}: answers for {answers} of {vips} VIPs",
            case.announce
        ));
    }
    // The agent is stopped (SIGKILL leaves what it programmed in place): a one-shot command's
    // writes must not be put back behind it.
    drop(agent);

    // verify: in sync.
    let out = vipflow(&with(&["verify"]));
    if out.status.code() != Some(0) {
        fails.push(format!(
            "verify after the agent: exit {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout)
        ));
    }

    // agent --once: nothing added or removed.
    let out = vipflow(&with(&["agent", "--once"]));
    let after = state(&sb);
    if !out.status.success() {
        fails.push(format!(
            "agent --once failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let wrote: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("synced once") && !l.contains("changes=0"))
        .collect();
    if !wrote.is_empty() {
        fails.push(format!("agent --once wrote changes: {wrote:?}"));
    }
    if after != held {
        fails.push(format!(
            "agent --once changed the state:\n--- agent\n{held}\n+++ after --once\n{after}"
        ));
    }

    // plan: the flows the agent holds, and its rows.
    let out = vipflow(&with(&["plan"]));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let planned: std::collections::BTreeSet<String> = text
        .lines()
        .filter(|l| l.starts_with("cookie="))
        .map(|l| {
            canon(
                &l.replace("<br-ex uplink>", UPLINK)
                    .replace("<br-ex patch>", PATCH)
                    .replace("<br-ex mac>", BRIDGE_MAC),
            )
        })
        .collect();
    let held_flows: std::collections::BTreeSet<String> =
        flows(&sb).iter().map(|l| canon(l)).collect();
    if planned != held_flows {
        let only_plan: Vec<_> = planned.difference(&held_flows).collect();
        let only_switch: Vec<_> = held_flows.difference(&planned).collect();
        fails.push(format!(
            "plan's flows differ from the switch's: only planned {only_plan:#?}, only on the switch {only_switch:#?}"
        ));
    }
    let names: std::collections::BTreeSet<String> = text
        .lines()
        .filter(|l| l.starts_with("vipflow/"))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    let rows: std::collections::BTreeSet<String> = sb
        .nbctl(&["--bare", "--columns=name", "list", "Load_Balancer"])
        .split_whitespace()
        .map(str::to_string)
        .collect();
    if names != rows {
        fails.push(format!("plan's rows {names:?}, the database's {rows:?}"));
    }

    // A hand-made change is exactly one line of verify.
    let steer = flows(&sb)
        .into_iter()
        .find(|l| l.contains("tp_dst=80") && l.contains("172.18.0.100"))
        .expect("a steer flow");
    let (head, _) = steer.split_once(" actions=").expect("actions");
    let head = head.replace(", ", ",");
    sb.ofctl(&[
        "--strict",
        "mod-flows",
        "br-ex",
        &format!("{head} actions=drop"),
    ]);
    // One of the web Service's rows that serves 172.18.0.100:80 (a cluster row, or a node's).
    let rows = sb.nbctl(&[
        "--format=json",
        "--columns=_uuid,vips",
        "list",
        "Load_Balancer",
    ]);
    let rows: serde_json::Value = serde_json::from_str(&rows).expect("ovn-nbctl json");
    let uuid = rows["data"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r[1].to_string().contains("172.18.0.100:80"))
        .and_then(|r| r[0][1].as_str())
        .expect("a row for 172.18.0.100:80")
        .to_string();
    sb.nbctl(&[
        "set",
        "Load_Balancer",
        &uuid,
        "vips:\"172.18.0.100:80\"=\"10.9.9.9:8080\"",
    ]);
    let mut changed = 2;
    if case.template {
        let var = sb.nbctl(&[
            "--bare",
            "--columns=variables",
            "list",
            "Chassis_Template_Var",
        ]);
        if let Some(pair) = var.split_whitespace().find(|v| v.starts_with("vf_")) {
            let (k, _) = pair.split_once('=').expect("a variable");
            let row = sb.nbctl(&[
                "--bare",
                "--columns=_uuid",
                "find",
                "Chassis_Template_Var",
                "chassis=\"chassis-a\"",
            ]);
            sb.nbctl(&[
                "set",
                "Chassis_Template_Var",
                row.trim(),
                &format!("variables:{k}=\"10.9.9.9:1\""),
            ]);
            changed += 1;
        } else {
            fails.push(format!(
                "template rows, but no variable of vipflow's: {var}"
            ));
        }
    }
    let out = vipflow(&with(&["verify"]));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(['+', '-', '~', '!']))
        .collect();
    if out.status.code() != Some(1) || lines.len() != changed {
        fails.push(format!(
            "verify after {changed} hand-made changes: exit {:?}, {} lines:\n{text}",
            out.status.code(),
            lines.len()
        ));
    }
    fails
}

fn objects_text(case: Case) -> String {
    objects(case.announce != Announce::All)
}

#[test]
fn every_mode_agrees_with_the_running_agent() {
    let cases = Case::all();
    println!("| profile  | vlan | announce | rows     | dialect  | prefer-local |");
    println!("|----------|------|----------|----------|----------|--------------|");
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<(Case, Vec<String>)> = std::thread::scope(|s| {
        let cases = &cases;
        let next = &next;
        let workers: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(move || {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(c) = cases.get(i) else { break };
                        let got = std::panic::catch_unwind(|| run(*c))
                            .unwrap_or_else(|_| vec!["the case panicked (see above)".into()]);
                        mine.push((*c, got));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a case panicked"))
            .collect()
    });
    let mut failed = Vec::new();
    for (case, fails) in &results {
        println!(
            "{} {}",
            case.row(),
            if fails.is_empty() { "ok" } else { "FAILED" }
        );
        for f in fails {
            failed.push(format!("{}\n  {f}", case.row()));
        }
    }
    assert_eq!(results.len(), cases.len());
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
