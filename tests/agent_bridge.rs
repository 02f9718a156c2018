//! The agent end to end on a real ovs-vswitchd: objects file -> flows on br-ex, checked with
//! the operator's tools (`ovs-ofctl dump-flows`, `ofproto/trace`).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;
use testkit::{COOKIE_PREFIX, Sandbox, eventually_async, our_cookie, our_cookie_match};

mod common;
use common::expect::{default_resolved, expected_flows as expected, ofctl_ours};
use common::{Agent, base_yaml, write_objects};
use vipflow::agent;
use vipflow::config::{BridgeConfig, Config, GatewayMode, Profile};
use vipflow::plan::flows::Resolved;
use vipflow::source::file;

fn config(sb: &Sandbox, objects: &Path) -> Config {
    Config {
        ovs_rundir: sb.path().to_path_buf(),
        objects: Some(objects.to_path_buf()),
        ..Config::default()
    }
}

/// The shared agent harness with this file's assertions.
struct Harness(Agent);

impl std::ops::Deref for Harness {
    type Target = Agent;
    fn deref(&self) -> &Agent {
        &self.0
    }
}

impl std::ops::DerefMut for Harness {
    fn deref_mut(&mut self) -> &mut Agent {
        &mut self.0
    }
}

impl Harness {
    async fn start(sb: Sandbox, cfg_edit: impl FnOnce(&mut Config), yaml: &str) -> Harness {
        Harness(Agent::start(sb, false, cfg_edit, yaml).await)
    }

    async fn update(&mut self, yaml: &str) {
        self.0.update(yaml).await
    }

    fn assert_exact(&self, yaml: &str, r: &Resolved) {
        let b = &self.cfg.bridges[0];
        let want = expected(&self.cfg, b, yaml, r);
        let have = ofctl_ours(&self.sb, &b.name);
        assert_eq!(
            have, want,
            "ovs-ofctl dump-flows shows exactly the planned flows"
        );
    }
}

const FOREIGN: [&str; 2] = [
    "cookie=0x1234,priority=600,in_port=1,arp,arp_op=1,arp_tpa=172.18.0.100 actions=drop",
    "cookie=0x7f1e000000000001,table=1,priority=10,ip actions=NORMAL",
];

fn foreign_flows(sb: &Sandbox) -> usize {
    sb.ofctl(&["--no-stats", "dump-flows", "br-ex"])
        .lines()
        .filter(|l| l.contains("cookie=0x1234,") || l.contains("cookie=0x7f1e000000000001,"))
        .count()
}

fn svc(ns: &str, name: &str, created: &str, vips: &[&str], ports: &[(u16, &str)]) -> String {
    let ports: String = ports
        .iter()
        .map(|(p, proto)| format!("\n    - {{port: {p}, protocol: {proto}}}"))
        .collect();
    let vips = vips
        .iter()
        .map(|v| format!("\"{v}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        r#"
- apiVersion: v1
  kind: Service
  metadata: {{name: {name}, namespace: {ns}, creationTimestamp: "{created}"}}
  spec:
    type: ClusterIP
    externalIPs: [{vips}]
    ports:{ports}"#
    )
}

fn list(items: &[String]) -> String {
    format!("apiVersion: v1\nkind: List\nitems:{}\n", items.concat())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_churn_gives_exactly_the_desired_flows_and_spares_foreign_ones() {
    let sb = Sandbox::openflow_only();
    for f in FOREIGN {
        sb.ofctl(&["add-flow", "br-ex", f]);
    }
    let y0 = base_yaml();
    let mut h = Harness::start(sb, |_| {}, &y0).await;
    h.assert_exact(&y0, &default_resolved());
    assert_eq!(h.ofctl_count(), 24);

    // Add a Service.
    let a = svc(
        "team",
        "api",
        "2026-02-01T00:00:00Z",
        &["172.18.0.200"],
        &[(8443, "TCP"), (8443, "UDP")],
    );
    let y1 = format!("{}{}", y0.trim_end(), a);
    h.update(&y1).await;
    h.assert_exact(&y1, &default_resolved());

    // Change its ports and add an IPv6 VIP.
    let a2 = svc(
        "team",
        "api",
        "2026-02-01T00:00:00Z",
        &["172.18.0.200", "fd00:18::200"],
        &[(9443, "SCTP")],
    );
    let y2 = format!("{}{}", y0.trim_end(), a2);
    h.update(&y2).await;
    h.assert_exact(&y2, &default_resolved());

    // Delete it again.
    h.update(&y0).await;
    h.assert_exact(&y0, &default_resolved());

    // Delete everything: none of ours left, the foreign flows and the default flow still there.
    let empty = list(&[]);
    h.update(&empty).await;
    assert!(ofctl_ours(&h.sb, "br-ex").is_empty());
    assert_eq!(
        foreign_flows(&h.sb),
        2,
        "foreign flows survive every change"
    );
    assert!(
        h.sb.ofctl(&["dump-flows", "br-ex"])
            .contains("actions=NORMAL")
    );
}

impl Harness {
    fn ofctl_count(&self) -> usize {
        ofctl_ours(&self.sb, "br-ex").len()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ovs_restart_wipes_flows_and_the_running_agent_restores_them() {
    let y = base_yaml();
    let h = Harness::start(Sandbox::openflow_only(), |_| {}, &y).await;
    h.assert_exact(&y, &default_resolved());
    let syncs = h.running.status[0].1.borrow().full_syncs;

    h.sb.kill("ovs-vswitchd");
    h.sb.restart_vswitchd();
    let mut st = h.running.status[0].1.clone();
    tokio::time::timeout(
        Duration::from_secs(15),
        st.wait_for(|s| s.connected && s.full_syncs > syncs),
    )
    .await
    .expect("the agent reconnected and resynced")
    .unwrap();
    h.assert_exact(&y, &default_resolved());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreated_uplink_with_a_new_port_number_takes_the_flows_along() {
    let y = base_yaml();
    let h = Harness::start(Sandbox::openflow_only(), |_| {}, &y).await;
    h.sb.vsctl(&["del-port", "br-ex", "eth0"]);
    // Without the uplink nothing can be programmed: the stale flows go.
    eventually_async("flows removed with the uplink", 10, || h.ofctl_count() == 0).await;
    h.sb.add_dummy_port("eth0", 7);
    let moved = Resolved {
        uplink: 7,
        ..default_resolved()
    };
    let want = expected(&h.cfg, &h.cfg.bridges[0], &y, &moved);
    eventually_async("flows follow eth0 to port 7", 10, || {
        ofctl_ours(&h.sb, "br-ex") == want
    })
    .await;
    assert!(want.iter().any(|l| l.contains("in_port=7")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ofproto_trace_arp_reaches_local_and_vip_tcp_and_fragments_reach_the_patch_port() {
    let y = base_yaml();
    let h = Harness::start(Sandbox::openflow_only(), |_| {}, &y).await;
    let arp = h.sb.appctl(&[
        "ofproto/trace",
        "br-ex",
        "in_port=eth0,arp,arp_op=1,arp_tpa=172.18.0.100,arp_spa=172.18.0.1,dl_src=02:aa:00:00:00:01,dl_dst=ff:ff:ff:ff:ff:ff",
    ]);
    assert!(
        arp.contains(&format!(
            "arp_tpa=172.18.0.100,arp_op=1, priority 500, cookie {COOKIE_PREFIX:#x}"
        )),
        "{arp}"
    );
    assert!(arp.lines().any(|l| l.trim() == "LOCAL"), "{arp}");
    assert!(
        !arp.contains("bridge(\"br-int\")"),
        "ARP for a VIP must not enter OVN: {arp}"
    );

    let tcp = h.sb.appctl(&[
        "ofproto/trace",
        "br-ex",
        "in_port=eth0,tcp,nw_src=198.51.100.7,nw_dst=172.18.0.100,tp_src=40000,tp_dst=80,dl_dst=02:00:00:00:00:01",
    ]);
    assert!(
        tcp.contains("tcp,in_port=1,nw_dst=172.18.0.100,tp_dst=80, priority 500"),
        "{tcp}"
    );
    assert!(tcp.lines().any(|l| l.trim() == "output:2"), "{tcp}");
    assert!(
        tcp.contains("bridge(\"br-int\")"),
        "VIP traffic enters OVN through the patch port: {tcp}"
    );

    // A fragment that is not the first carries no ports: the VIP's frag flow takes it into OVN.
    let frag = h.sb.appctl(&[
        "ofproto/trace",
        "br-ex",
        "in_port=eth0,udp,nw_src=198.51.100.7,nw_dst=172.18.0.100,nw_frag=later,dl_dst=02:00:00:00:00:01",
    ]);
    assert!(
        frag.contains("ip,in_port=1,nw_dst=172.18.0.100,nw_frag=yes, priority 500"),
        "{frag}"
    );
    assert!(frag.contains("bridge(\"br-int\")"), "{frag}");

    // A port the Service does not expose is not steered.
    let other = h.sb.appctl(&[
        "ofproto/trace",
        "br-ex",
        "in_port=eth0,tcp,nw_src=198.51.100.7,nw_dst=172.18.0.100,tp_src=40000,tp_dst=22",
    ]);
    assert!(
        !other.contains(&format!("cookie {COOKIE_PREFIX:#x}")),
        "{other}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_reported_and_the_rest_applied_without_losing_flows() {
    let good = list(&[svc(
        "a",
        "one",
        "2026-01-01T00:00:00Z",
        &["172.18.1.1"],
        &[(80, "TCP")],
    )]);
    let mut h = Harness::start(Sandbox::openflow_only(), |_| {}, &good).await;
    h.assert_exact(&good, &default_resolved());

    // One file with: an invalid IP beside a good one, a port 0 beside a good port, an unknown
    // field, and a VIP:port claimed twice (the older Service wins).
    let bad = list(&[
        svc("a", "one", "2026-01-01T00:00:00Z", &["172.18.1.1", "not-an-ip"], &[(80, "TCP"), (0, "TCP")]),
        svc("b", "two", "2026-03-01T00:00:00Z", &["172.18.1.1", "172.18.1.2"], &[(80, "TCP")]),
        "\n- apiVersion: v1\n  kind: Service\n  metadata: {name: three, namespace: c}\n  spec:\n    externalIPs: [172.18.1.3]\n    frobnicate: true\n    ports: [{port: 53, protocol: UDP}]"
            .to_string(),
    ]);
    h.update(&bad).await;
    h.assert_exact(&bad, &default_resolved());
    let loaded = vipflow::decode::parse(&bad).unwrap();
    let one = agent::plan_once(&h.cfg, &loaded.objects, false);
    let problems = agent::report_problems(&h.cfg, &loaded, &one.planner.services().report());
    let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    let has = |s: &str| text.iter().any(|t| t.contains(s));
    assert!(has("not-an-ip: not an IP address"), "{text:?}");
    assert!(has("0 is not a valid port"), "{text:?}");
    assert!(has("unknown field spec.frobnicate"), "{text:?}");
    assert!(
        has("Service b/two: 172.18.1.1:80/tcp: also claimed by the older Service a/one"),
        "{text:?}"
    );
    assert_eq!(
        one.vips().len(),
        3,
        "172.18.1.1, .2 and .3 are all programmed"
    );
    let flows_before = ofctl_ours(&h.sb, "br-ex");

    // A file that does not parse at all: nothing already programmed is lost.
    write_objects(&h.objects, "items: [ {{{ this is not yaml");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(ofctl_ours(&h.sb, "br-ex"), flows_before);

    // Fixed again: applied.
    h.update(&good).await;
    h.assert_exact(&good, &default_resolved());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vlan_uplink_and_underlay_bridge_are_programmed_at_once() {
    let sb = Sandbox::openflow_only();
    sb.vsctl(&[
        "add-br",
        "br-provider",
        "--",
        "set",
        "bridge",
        "br-provider",
        "datapath_type=dummy",
        "--",
        "add-port",
        "br-provider",
        "ens4",
        "--",
        "set",
        "interface",
        "ens4",
        "type=dummy",
        "ofport_request=1",
        "--",
        "add-port",
        "br-provider",
        "patch-prov",
        "--",
        "set",
        "interface",
        "patch-prov",
        "type=patch",
        "options:peer=patch-int-prov",
        "ofport_request=2",
        "--",
        "add-port",
        "br-int",
        "patch-int-prov",
        "--",
        "set",
        "interface",
        "patch-int-prov",
        "type=patch",
        "options:peer=patch-prov",
    ]);
    let y = base_yaml();
    let router = [0x0a, 0x58, 0x0a, 0xf4, 0, 1];
    let h = Harness::start(
        sb,
        |c| {
            c.bridges[0].vlan = Some(100);
            c.bridges[0].gateway_mode = GatewayMode::Local;
            c.bridges.push(BridgeConfig {
                name: "br-provider".into(),
                profile: Profile::Underlay,
                uplink: Some("ens4".into()),
                patch: Some("patch-prov".into()),
                router_mac: Some(router),
                ..BridgeConfig::default()
            });
        },
        &y,
    )
    .await;
    // br-ex: local gateway mode with a tagged uplink: only bypass flows, matching the tag.
    h.assert_exact(&y, &default_resolved());
    let ours = ofctl_ours(&h.sb, "br-ex");
    assert_eq!(ours.len(), 3, "{ours:?}");
    assert!(
        ours.iter()
            .all(|l| l.contains("dl_vlan=100") && l.contains("actions=pop_vlan,LOCAL")),
        "{ours:?}"
    );
    let arp = h.sb.appctl(&[
        "ofproto/trace",
        "br-ex",
        "in_port=eth0,dl_vlan=100,arp,arp_op=1,arp_tpa=172.18.0.53,dl_dst=ff:ff:ff:ff:ff:ff",
    ]);
    assert!(
        arp.contains("pop_vlan") && arp.lines().any(|l| l.trim() == "LOCAL"),
        "{arp}"
    );

    // br-provider: the underlay profile rewrites VIP traffic to the router MAC.
    let prov = &h.cfg.bridges[1];
    let want = expected(
        &h.cfg,
        prov,
        &y,
        &Resolved {
            uplink: 1,
            patch: 2,
            bridge_mac: [0; 6],
            steer_dst: None,
        },
    );
    assert_eq!(ofctl_ours(&h.sb, "br-provider"), want);
    let tcp = h.sb.appctl(&[
        "ofproto/trace",
        "br-provider",
        "in_port=ens4,tcp,nw_dst=172.18.0.100,tp_dst=443,nw_src=198.51.100.7,tp_src=40000",
    ]);
    assert!(
        tcp.contains("set_field:0a:58:0a:f4:00:01->eth_dst") && tcp.contains("output:2"),
        "{tcp}"
    );
}

#[test]
fn cli_once_then_verify_reports_sync_and_drift() {
    let sb = Sandbox::openflow_only();
    let objects = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/services.yaml");
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_vipflow"))
            .args(args)
            .arg("--objects")
            .arg(&objects)
            .arg("--ovs-rundir")
            .arg(sb.path())
            .output()
            .unwrap()
    };
    let out = run(&["verify"]);
    assert_eq!(out.status.code(), Some(1), "empty bridge: drift");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).matches("\n+ ").count(),
        24
    );

    let out = run(&["agent", "--once"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&["verify"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("br-ex: in sync"));

    // Someone deletes one of our flows and changes another: verify names both.
    sb.ofctl(&[
        "--strict",
        "del-flows",
        "br-ex",
        "priority=500,in_port=1,arp,arp_op=1,arp_tpa=172.18.0.53",
    ]);
    let changed = format!("cookie={:#x}", (u64::from(COOKIE_PREFIX) << 48) | 0xbad);
    sb.ofctl(&[
        "add-flow",
        "br-ex",
        &format!("{changed},priority=500,in_port=1,arp,arp_op=1,arp_tpa=172.18.0.100 actions=drop"),
    ]);
    let out = run(&["verify"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    // The deleted flow is missing; the changed one is one line, naming what the switch has.
    assert!(
        text.contains("br-ex: drift (1 missing, 0 unexpected, 1 changed)"),
        "{text}"
    );
    assert!(text.contains(&format!("~ {changed}")), "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with(['+', '-', '~']))
            .count(),
        2,
        "{text}"
    );

    // A full OVS port name longer than OpenFlow's 15 bytes is accepted (resolved through the
    // OVS database) and named as given in the offline plan.
    let text = common::vipflow_ok([
        "plan",
        "--patch",
        "patch-br-ex_node-a-to-br-int",
        "--objects",
        objects.to_str().expect("a UTF-8 sandbox path"),
    ]);
    assert!(text.contains("actions=output:patch-br-ex_node-a-to-br-int"));

    // Bad invocations: clear errors, exit 2.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vipflow"))
        .args(["plan", "--patch", ""])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("port name is empty"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_starting_reconciler_touches_nothing_before_the_first_plan() {
    use vipflow::reconcile::bridge::{self, BridgeStatus, DesiredFlows};
    let sb = Sandbox::openflow_only();
    let objects = sb.path().join("objects.yaml");
    write_objects(&objects, &base_yaml());
    let cfg = config(&sb, &objects);
    // Flows from an earlier run of the agent.
    vipflow::agent::sync_once(
        &cfg,
        &file::load(&objects, vipflow::decode::DEFAULT_MAX_BYTES)
            .unwrap()
            .objects,
    )
    .await
    .unwrap();
    let before = ofctl_ours(&sb, "br-ex");
    assert_eq!(before.len(), 24);

    // A restarted agent whose source has not listed anything yet: placeholder plan only.
    let (dtx, drx) = tokio::sync::watch::channel(std::sync::Arc::new(DesiredFlows::default()));
    let (stx, mut srx) = tokio::sync::watch::channel(BridgeStatus::default());
    let task = tokio::spawn(bridge::run(
        vipflow::agent::settings(&cfg, &cfg.bridges[0]),
        drx,
        stx,
    ));
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        ofctl_ours(&sb, "br-ex"),
        before,
        "nothing deleted while there is no plan"
    );
    assert!(srx.borrow().applied_generation.is_none());

    // The first real plan (the same objects): nothing to change.
    let mut planner = vipflow::plan::planner::Planner::for_config(&cfg);
    let plan = planner
        .update(
            &file::load(&objects, vipflow::decode::DEFAULT_MAX_BYTES)
                .unwrap()
                .objects,
        )
        .bridges
        .remove(0);
    dtx.send(std::sync::Arc::new(DesiredFlows {
        generation: 1,
        flows: plan.flows,
        maker: plan.maker,
        delta: Some(plan.delta),
        router_mac: None,
        announce: Vec::new(),
        doubt: false,
    }))
    .unwrap();
    tokio::time::timeout(
        Duration::from_secs(10),
        srx.wait_for(|s| s.applied_generation == Some(1)),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(ofctl_ours(&sb, "br-ex"), before);
    task.abort();
}

// ---- Ports found in the OVS database (OVN-Kubernetes' layout) ---------------------------------

/// The localnet patch port ovn-controller makes for OVN-Kubernetes' node `node-a`: its name
/// does not fit OpenFlow's 15 bytes (PORT_DESC shows `patch-br-ex_nod`).
const LONG_PATCH: &str = "patch-br-ex_node-a-to-br-int";
const LONG_PEER: &str = "patch-br-int-to-br-ex_node-a";

/// Replace the sandbox's patch port by `name` at OpenFlow port `ofport`, laid out as
/// ovn-controller does it (Port external_ids:ovn-localnet-port, peer on br-int) when
/// `localnet` is given.
fn add_patch(sb: &Sandbox, name: &str, peer: &str, ofport: u32, localnet: Option<&str>) {
    let req = format!("ofport_request={ofport}");
    let opt = format!("options:peer={peer}");
    let back = format!("options:peer={name}");
    let mut args = vec![
        "--",
        "add-port",
        "br-ex",
        name,
        "--",
        "set",
        "interface",
        name,
        "type=patch",
        &opt,
        &req,
        "--",
        "add-port",
        "br-int",
        peer,
        "--",
        "set",
        "interface",
        peer,
        "type=patch",
        &back,
    ];
    let ids = localnet.map(|l| format!("external_ids:ovn-localnet-port={l}"));
    if let Some(ids) = &ids {
        args.extend(["--", "set", "port", name, ids.as_str()]);
        args.extend(["--", "set", "port", peer, ids.as_str()]);
    }
    sb.vsctl(&args);
}

/// A sandbox laid out like an OVN-Kubernetes node: eth0 (port 1), the long localnet patch
/// port (port `ofport`), `ovn-bridge-mappings=physnet:br-ex`.
fn ovnk_node(ofport: u32) -> Sandbox {
    let sb = Sandbox::openflow_only();
    sb.vsctl(&[
        "del-port",
        "br-ex",
        "patch-ex-to-int",
        "--",
        "del-port",
        "br-int",
        "patch-int-to-ex",
        "--",
        "set",
        "Open_vSwitch",
        ".",
        "external_ids:ovn-bridge-mappings=physnet:br-ex",
    ]);
    add_patch(&sb, LONG_PATCH, LONG_PEER, ofport, Some("br-ex_node-a"));
    sb
}

fn resolved_with_patch(patch: u32) -> Resolved {
    Resolved {
        patch,
        ..default_resolved()
    }
}

fn problems(h: &Harness) -> Vec<String> {
    h.running.status[0]
        .1
        .borrow()
        .problems
        .iter()
        .map(|p| p.to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_port_flags_the_long_localnet_patch_port_is_found_in_the_ovs_database() {
    let sb = ovnk_node(5);
    assert!(
        sb.ofctl(&["show", "br-ex"]).contains("5(patch-br-ex_nod)"),
        "OpenFlow shows the name cut to 15 bytes"
    );
    let y = base_yaml();
    // The default config: no uplink, no patch, the OVS database at <rundir>/db.sock.
    let h = Harness::start(sb, |_| {}, &y).await;
    assert_eq!(h.cfg.bridges[0].patch, None);
    assert_eq!(h.cfg.bridges[0].uplink, None);
    // Exactly the planned flows, in from eth0 (1) and out to the patch port (5), and back.
    h.assert_exact(&y, &resolved_with_patch(5));
    let ours = ofctl_ours(&h.sb, "br-ex");
    assert!(
        ours.iter()
            .any(|l| l.contains("in_port=1") && l.ends_with("actions=output:5"))
    );
    assert!(
        ours.iter()
            .any(|l| l.contains("in_port=5") && l.ends_with("actions=output:1"))
    );
    assert!(problems(&h).is_empty(), "{:?}", problems(&h));
    let tcp = h.sb.appctl(&[
        "ofproto/trace",
        "br-ex",
        "in_port=eth0,tcp,nw_src=198.51.100.7,nw_dst=172.18.0.100,tp_src=40000,tp_dst=80",
    ]);
    assert!(tcp.contains("bridge(\"br-int\")"), "into OVN: {tcp}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_long_patch_name_needs_no_ovn_layout() {
    // A patch port ovn-controller did not make (no localnet mark) and no mappings: only the
    // flags name the ports, and they are authoritative.
    let sb = Sandbox::openflow_only();
    sb.vsctl(&["del-port", "br-ex", "patch-ex-to-int"]);
    sb.vsctl(&[
        "remove",
        "Open_vSwitch",
        ".",
        "external_ids",
        "ovn-bridge-mappings",
    ]);
    add_patch(&sb, LONG_PATCH, LONG_PEER, 6, None);
    let y = base_yaml();
    let h = Harness::start(
        sb,
        |c| {
            c.bridges[0].uplink = Some("eth0".into());
            c.bridges[0].patch = Some(LONG_PATCH.into());
        },
        &y,
    )
    .await;
    h.assert_exact(&y, &resolved_with_patch(6));
    assert!(problems(&h).is_empty(), "{:?}", problems(&h));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ambiguous_default_is_reported_with_the_candidates_and_the_flag() {
    let sb = ovnk_node(5);
    add_patch(
        &sb,
        "patch-br-ex_node-b-to-br-int",
        "patch-br-int-to-br-ex_node-b",
        6,
        Some("br-ex_node-b"),
    );
    let y = base_yaml();
    let h = Harness::start(sb, |_| {}, &y).await;
    let want = "br-ex: no patch port configured and 2 candidates: \
                patch-br-ex_node-a-to-br-int (patch), patch-br-ex_node-b-to-br-int (patch); \
                set --patch to one of them";
    assert_eq!(problems(&h), [want]);
    let st = h.running.status[0].1.borrow().clone();
    assert!(
        st.skipped
            .iter()
            .any(|s| s == &format!("steer 172.18.0.100:80/tcp: {want}")),
        "{:?}",
        st.skipped
    );
    // The uplink is not in doubt: the ARP/ND bypass is still programmed, nothing else.
    let bypass: BTreeSet<String> = expected(&h.cfg, &h.cfg.bridges[0], &y, &default_resolved())
        .into_iter()
        .filter(|l| l.ends_with("actions=LOCAL"))
        .collect();
    assert!(!bypass.is_empty());
    assert_eq!(ofctl_ours(&h.sb, "br-ex"), bypass);
}

#[test]
fn once_without_mappings_fails_with_the_flag_to_set_and_succeeds_with_flags() {
    let sb = Sandbox::openflow_only();
    sb.vsctl(&[
        "remove",
        "Open_vSwitch",
        ".",
        "external_ids",
        "ovn-bridge-mappings",
    ]);
    let objects = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/services.yaml");
    let run = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_vipflow"))
            .args(["agent", "--once", "--objects"])
            .arg(&objects)
            .arg("--ovs-rundir")
            .arg(sb.path())
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(
            "bridge br-ex: br-ex: no uplink port configured and Open_vSwitch \
             external_ids:ovn-bridge-mappings is not set (not an OVN node?); set --uplink"
        ),
        "{err}"
    );
    assert!(ofctl_ours(&sb, "br-ex").is_empty());
    let out = run(&["--uplink", "eth0", "--patch", "patch-ex-to-int"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ofctl_ours(&sb, "br-ex").len(), 24);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_patch_port_made_later_and_recreated_with_a_new_number_is_followed() {
    let sb = ovnk_node(5);
    // ovn-controller has not made the localnet patch port yet.
    sb.vsctl(&["del-port", "br-ex", LONG_PATCH]);
    let y = base_yaml();
    let h = Harness::start(sb, |_| {}, &y).await;
    assert!(
        problems(&h)
            .iter()
            .any(|p| p.contains("no localnet patch port on it")),
        "{:?}",
        problems(&h)
    );
    // It appears: every flow is programmed.
    add_patch_br_ex_only(&h.sb, 5);
    let want = expected(&h.cfg, &h.cfg.bridges[0], &y, &resolved_with_patch(5));
    eventually_async("flows through the new patch port", 10, || {
        ofctl_ours(&h.sb, "br-ex") == want
    })
    .await;
    eventually_async("problem cleared", 10, || problems(&h).is_empty()).await;
    // Recreated with another OpenFlow number: the flows follow it.
    h.sb.vsctl(&["del-port", "br-ex", LONG_PATCH]);
    add_patch_br_ex_only(&h.sb, 9);
    let want = expected(&h.cfg, &h.cfg.bridges[0], &y, &resolved_with_patch(9));
    eventually_async("flows follow the patch port to 9", 10, || {
        ofctl_ours(&h.sb, "br-ex") == want
    })
    .await;
    assert!(want.iter().any(|l| l.ends_with("actions=output:9")));
}

/// The br-ex side of the localnet patch port (its peer on br-int stays).
fn add_patch_br_ex_only(sb: &Sandbox, ofport: u32) {
    sb.vsctl(&[
        "add-port",
        "br-ex",
        LONG_PATCH,
        "--",
        "set",
        "interface",
        LONG_PATCH,
        "type=patch",
        &format!("options:peer={LONG_PEER}"),
        &format!("ofport_request={ofport}"),
        "--",
        "set",
        "port",
        LONG_PATCH,
        "external_ids:ovn-localnet-port=br-ex_node-a",
    ]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_ovs_database_falls_back_to_openflow_names() {
    let y = base_yaml();
    let h = Harness::start(
        Sandbox::openflow_only(),
        |c| {
            c.ovs_db = Some("unix:/nonexistent/vipflow-test/db.sock".into());
            c.bridges[0].uplink = Some("eth0".into());
            c.bridges[0].patch = Some("patch-ex-to-int".into());
        },
        &y,
    )
    .await;
    h.assert_exact(&y, &default_resolved());
    let p = problems(&h);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].starts_with(
            "br-ex: the OVS database unix:/nonexistent/vipflow-test/db.sock is unreachable"
        ),
        "{p:?}"
    );
}

// ---- The OVN gateway router's MAC -------------------------------------------------------------

/// examples/services.yaml with node-a's OVN-Kubernetes gateway annotation carrying `mac`.
fn with_router_mac(mac: &str) -> String {
    let ann = format!(
        "    annotations:\n      k8s.ovn.org/l3-gateway-config: '{{\"default\":{{\"mode\":\"shared\",\"interface-id\":\"br-ex_node-a\",\"mac-address\":\"{mac}\",\"ip-addresses\":[\"192.168.10.11/24\"],\"next-hops\":[\"192.168.10.1\"]}}}}'\n"
    );
    let y = base_yaml();
    assert!(y.contains("    name: node-a\n  status:"));
    y.replacen(
        "    name: node-a\n  status:",
        &format!("    name: node-a\n{ann}  status:"),
        1,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_router_mac_other_than_the_bridges_is_reported_and_rewritten_to() {
    let router = "0a:58:64:40:00:05";
    let y = with_router_mac(router);
    let mut h = Harness::start(
        Sandbox::openflow_only(),
        |c| c.node_name = "node-a".into(),
        &y,
    )
    .await;
    let r = Resolved {
        steer_dst: Some([0x0a, 0x58, 0x64, 0x40, 0, 5]),
        ..default_resolved()
    };
    h.assert_exact(&y, &r);
    let ours = ofctl_ours(&h.sb, "br-ex");
    let rewritten: Vec<&String> = ours
        .iter()
        .filter(|l| l.contains("set_field:0a:58:64:40:00:05->eth_dst,output:2"))
        .collect();
    // Steer (6 VIP:ports), PMTU and fragment (3 VIPs each) flows; bypass and return flows
    // untouched.
    assert_eq!(rewritten.len(), 12, "{ours:?}");
    assert_eq!(
        problems(&h),
        [
            "br-ex: its MAC 02:00:00:00:00:01 (LOCAL port) differs from the OVN gateway router's \
          0a:58:64:40:00:05 (Node annotation k8s.ovn.org/l3-gateway-config): VIP traffic \
          steered into OVN is rewritten to the router's MAC"
        ]
    );
    let tcp = h.sb.appctl(&[
        "ofproto/trace",
        "br-ex",
        "in_port=eth0,tcp,nw_src=198.51.100.7,nw_dst=172.18.0.100,tp_src=40000,tp_dst=80,dl_dst=02:00:00:00:00:01",
    ]);
    assert!(
        tcp.contains("set_field:0a:58:64:40:00:05->eth_dst"),
        "{tcp}"
    );

    // The offline plan says so too (it cannot know the bridge's MAC, so it names the rule).
    let file = h.sb.path().join("plan-objects.yaml");
    std::fs::write(&file, &y).unwrap();
    let path = file.to_str().expect("a UTF-8 sandbox path");
    let text = common::vipflow_ok(["plan", "--node-name", "node-a", "--objects", path]);
    assert!(
        text.contains(
            "OVN gateway router's 0a:58:64:40:00:05 (Node node-a, annotation \
             k8s.ovn.org/l3-gateway-config), the agent puts set_field:0a:58:64:40:00:05->eth_dst \
             before every output to the patch port into OVN above"
        ),
        "{text}"
    );

    // The annotation now equals the bridge MAC: the flows are exactly the plain ones again.
    let same = with_router_mac("02:00:00:00:00:01");
    h.update(&same).await;
    h.assert_exact(&same, &default_resolved());
    h.assert_exact(&base_yaml(), &default_resolved());
    assert!(problems(&h).is_empty(), "{:?}", problems(&h));
}

/// `kubectl get ... -o yaml > objects.yaml` truncates the file and writes it in pieces: a reader
/// racing it sees it empty or cut short. Rewritten in place 20 times (unchanged content, in
/// kubectl's key order, a pause in the middle of each write, some longer than the settle time),
/// the agent's flows must never drop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_rewritten_in_place_never_drops_a_flow() {
    use std::io::Write;
    // kubectl prints keys sorted (apiVersion, items, kind, metadata), as serde_json's map does.
    let v: serde_json::Value = serde_yaml_ng::from_str(&base_yaml()).unwrap();
    let y = serde_yaml_ng::to_string(&v).unwrap();
    assert!(y.find("items:").unwrap() < y.find("kind: List").unwrap());
    let h = Harness::start(Sandbox::openflow_only(), |_| {}, &y).await;
    let want = h.ofctl_count();
    assert!(want > 0);
    let sock = h.sb.mgmt_sock("br-ex");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s = stop.clone();
    // Count our flows as often as ovs-ofctl can, the whole time.
    let (ours, ours_match) = (our_cookie(), our_cookie_match());
    let watcher = std::thread::spawn(move || {
        let (mut min, mut reads) = (usize::MAX, 0u32);
        while !s.load(std::sync::atomic::Ordering::Relaxed) {
            let out = std::process::Command::new("ovs-ofctl")
                .args(["-O", "OpenFlow13", "dump-flows"])
                .arg(format!("unix:{}", sock.display()))
                .arg(&ours_match)
                .output()
                .unwrap();
            let n = String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| l.contains(&ours))
                .count();
            min = min.min(n);
            reads += 1;
        }
        (min, reads)
    });
    let half = y.len() / 2;
    for i in 0..20 {
        let mut f = std::fs::File::create(&h.objects).unwrap();
        std::thread::sleep(Duration::from_millis(15));
        f.write_all(&y.as_bytes()[..half]).unwrap();
        f.flush().unwrap();
        std::thread::sleep(Duration::from_millis(if i % 2 == 0 { 40 } else { 250 }));
        f.write_all(&y.as_bytes()[half..]).unwrap();
        drop(f);
        std::thread::sleep(Duration::from_millis(60));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (min, reads) = watcher.join().unwrap();
    assert!(reads > 20, "the flows were watched ({reads} reads)");
    assert_eq!(
        min, want,
        "flows dropped while the file was rewritten ({reads} reads)"
    );
    assert_eq!(h.ofctl_count(), want);
}
