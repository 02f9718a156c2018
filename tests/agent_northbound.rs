//! The agent's Northbound side on a real OVN NB ovsdb-server (+ ovn-northd), checked with
//! `ovn-nbctl`.

use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use testkit::{Sandbox, eventually_async};

mod common;
use common::expect::{expected_rows as expected, json_map, nbctl_lbs, ours_rows as ours};
use common::{Agent, base_yaml, write_objects};
use vipflow::agent;
use vipflow::config::Config;
use vipflow::model::Model;
use vipflow::source::file;

/// The shared agent harness (with the NB database) and this file's assertions.
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
    async fn start(sb: Sandbox, edit: impl FnOnce(&mut Config), yaml: &str) -> Harness {
        Harness(Agent::start(sb, true, edit, yaml).await)
    }

    async fn update(&mut self, yaml: &str) {
        self.0.update(yaml).await
    }

    fn assert_exact(&self, yaml: &str) {
        assert_eq!(
            ours(&self.sb),
            expected(&self.cfg, yaml),
            "ovn-nbctl shows exactly the planned rows"
        );
    }
}

fn svc(ns: &str, name: &str, vip: &str, port: u16, proto: &str, etp: &str) -> String {
    format!(
        r#"
- apiVersion: v1
  kind: Service
  metadata: {{name: {name}, namespace: {ns}, creationTimestamp: "2026-02-01T00:00:00Z"}}
  spec:
    type: ClusterIP
    externalIPs: ["{vip}"]
    externalTrafficPolicy: {etp}
    ports: [{{port: {port}, protocol: {proto}, targetPort: 8080}}]"#
    )
}

fn slice(ns: &str, svc: &str, eps: &[(&str, &str, bool)]) -> String {
    let eps: String = eps
        .iter()
        .map(|(ip, node, ready)| {
            format!(
                "\n  - addresses: [{ip}]\n    nodeName: {node}\n    conditions: {{ready: {ready}}}"
            )
        })
        .collect();
    format!(
        r#"
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata:
    name: {svc}-x1
    namespace: {ns}
    labels: {{kubernetes.io/service-name: {svc}}}
  addressType: IPv4
  ports: [{{port: 8080, protocol: TCP}}]
  endpoints:{eps}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_churn_gives_exactly_the_desired_rows_and_spares_foreign_ones() {
    let sb = Sandbox::start();
    sb.nbctl(&["lb-add", "foreign-lb", "192.0.2.1:80", "10.0.0.1:80", "tcp"]);
    sb.nbctl(&["ls-add", "sw0"]);
    sb.nbctl(&["ls-lb-add", "sw0", "foreign-lb"]);
    let foreign_before = nbctl_lbs(&sb)
        .into_iter()
        .find(|r| r.0 == "foreign-lb")
        .unwrap();

    let y0 = base_yaml();
    let mut h = Harness::start(sb, |c| c.northbound.switches = vec!["sw0".into()], &y0).await;
    h.assert_exact(&y0);
    let lb_list = h.sb.nbctl(&["lb-list"]);
    assert!(
        lb_list.contains("172.18.0.100:80") && lb_list.contains("10.244.1.5:8080,10.244.2.7:8080"),
        "{lb_list}"
    );
    // Attached to the configured switch, beside the foreign LB.
    let on_sw0 = h.sb.nbctl(&["ls-lb-list", "sw0"]);
    assert_eq!(on_sw0.matches("vipflow/").count(), 3, "{on_sw0}");
    assert!(on_sw0.contains("foreign-lb"));

    // Add a Service with an endpoint, then scale its endpoints, then delete it.
    let a = svc("team", "api", "172.18.0.200", 443, "TCP", "Cluster");
    let y1 = format!(
        "{}{}{}",
        y0.trim_end(),
        a,
        slice("team", "api", &[("10.244.3.3", "node-a", true)])
    );
    h.update(&y1).await;
    h.assert_exact(&y1);
    let y2 = format!(
        "{}{}{}",
        y0.trim_end(),
        a,
        slice(
            "team",
            "api",
            &[
                ("10.244.3.3", "node-a", true),
                ("10.244.3.4", "node-a", true),
                ("10.244.3.5", "node-a", false)
            ]
        )
    );
    h.update(&y2).await;
    h.assert_exact(&y2);
    let rows = ours(&h.sb);
    assert_eq!(
        rows["vipflow/team/api/tcp"].1["172.18.0.200:443"], "10.244.3.3:8080,10.244.3.4:8080",
        "only ready endpoints"
    );

    h.update(&y0).await;
    h.assert_exact(&y0);

    // A row of ours deleted behind our back comes back; an orphan of ours is removed.
    let uuid = h.sb.nbctl(&[
        "--bare",
        "--columns=_uuid",
        "find",
        "Load_Balancer",
        "name=vipflow/shop/web/tcp",
    ]);
    h.sb.nbctl(&["lb-del", uuid.trim()]);
    h.sb.nbctl(&[
        "create",
        "Load_Balancer",
        "name=stale",
        "protocol=tcp",
        r#"vips:"192.0.2.9:80"="""#,
        r#"external_ids:"vipflow.io/owner"="gone/svc""#,
        r#"external_ids:"vipflow.io/scope"="cluster""#,
    ]);
    let mut ok = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if ours(&h.sb) == expected(&h.cfg, &y0) {
            ok = true;
            break;
        }
    }
    assert!(
        ok,
        "drift corrected: {:?}",
        ours(&h.sb).keys().collect::<Vec<_>>()
    );

    // Everything gone: no row of ours left; the foreign LB exactly as it was, still attached.
    let empty = "apiVersion: v1\nkind: List\nitems: []\n";
    h.update(empty).await;
    assert!(ours(&h.sb).is_empty());
    let foreign_after = nbctl_lbs(&h.sb)
        .into_iter()
        .find(|r| r.0 == "foreign-lb")
        .unwrap();
    assert_eq!(foreign_after, foreign_before);
    assert!(h.sb.nbctl(&["ls-lb-list", "sw0"]).contains("foreign-lb"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etp_local_rows_hold_only_each_nodes_endpoints() {
    let nodes = "\n- apiVersion: v1\n  kind: Node\n  metadata: {name: node-b}\n  status: {addresses: [{type: InternalIP, address: 192.168.10.12}]}";
    let y = format!(
        "{}{}{}{}",
        base_yaml().trim_end(),
        nodes,
        svc("team", "local", "172.18.0.210", 80, "TCP", "Local"),
        slice("team", "local", &[("10.244.1.9", "node-a", true)])
    );
    let sb = Sandbox::start();
    sb.nbctl(&["lr-add", "GR_node-a"]);
    sb.nbctl(&["lr-add", "GR_node-b"]);
    let h = Harness::start(
        sb,
        |c| c.northbound.node_router = Some("GR_{node}".into()),
        &y,
    )
    .await;
    h.assert_exact(&y);
    let rows = ours(&h.sb);
    let a = &rows["vipflow/team/local/tcp/node-a"];
    let b = &rows["vipflow/team/local/tcp/node-b"];
    assert_eq!(a.1["172.18.0.210:80"], "10.244.1.9:8080");
    assert_eq!(
        b.1["172.18.0.210:80"], "",
        "no local endpoint on node-b: reject"
    );
    assert_eq!(a.2.get("skip_snat").map(String::as_str), Some("true"));
    assert_eq!(b.2.get("reject").map(String::as_str), Some("true"));
    // (lr-lb-list cuts names at 16 characters: read the router's column instead.)
    let on_a = router_lbs(&h.sb, "GR_node-a");
    assert!(
        on_a.contains(&"vipflow/team/local/tcp/node-a".to_string()),
        "{on_a:?}"
    );
    assert!(on_a.iter().all(|n| n.ends_with("/node-a")), "{on_a:?}");
    let on_b = router_lbs(&h.sb, "GR_node-b");
    assert!(
        on_b.contains(&"vipflow/team/local/tcp/node-b".to_string()),
        "{on_b:?}"
    );
}

/// Names of the load balancers attached to a logical router.
fn router_lbs(sb: &Sandbox, router: &str) -> Vec<String> {
    let uuids = sb.nbctl(&[
        "--bare",
        "--columns=load_balancer",
        "list",
        "Logical_Router",
        router,
    ]);
    uuids
        .split_whitespace()
        .map(|u| {
            sb.nbctl(&["--bare", "--columns=name", "list", "Load_Balancer", u])
                .trim()
                .to_string()
        })
        .collect()
}

/// Add `n` ports with dynamic addresses to switch `ls` and return the IPv4 addresses northd
/// gave them.
fn dynamic_addresses(sb: &Sandbox, ls: &str, n: usize) -> Vec<String> {
    for i in 0..n {
        let p = format!("p{i}");
        sb.nbctl(&["lsp-add", ls, &p]);
        sb.nbctl(&["lsp-set-addresses", &p, "dynamic"]);
    }
    sb.nbctl(&["--wait=sb", "sync"]);
    let mut given = Vec::new();
    for i in 0..n {
        let d = sb.nbctl(&[
            "get",
            "Logical_Switch_Port",
            &format!("p{i}"),
            "dynamic_addresses",
        ]);
        if let Some(ip) = d.trim().trim_matches('"').split_whitespace().nth(1) {
            given.push(ip.to_string());
        }
    }
    given
}

fn exclude_ips(sb: &Sandbox, ls: &str) -> Option<String> {
    let out = sb.run_raw(
        "ovn-nbctl",
        &["get", "Logical_Switch", ls, "other_config:exclude_ips"],
    );
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .trim_matches('"')
            .to_string()
    })
}

/// A pod switch `pods` on 172.18.0.0/28 whose users keep `user` out of its IPAM.
fn pod_switch(sb: &Sandbox, user: &str) {
    sb.nbctl(&["ls-add", "pods"]);
    sb.nbctl(&[
        "set",
        "Logical_Switch",
        "pods",
        "other_config:subnet=172.18.0.0/28",
    ]);
    sb.nbctl(&[
        "set",
        "Logical_Switch",
        "pods",
        &format!("other_config:exclude_ips=\"{user}\""),
    ]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_ports_never_get_a_pool_address() {
    let sb = Sandbox::start();
    let user = "172.18.0.2";
    pod_switch(&sb, user);
    // A pool of four addresses inside the subnet, one that reaches past it, and no Service
    // using either yet: vipflow may hand them out at any time, so pods must never get them.
    let pool = r#"
- apiVersion: vipflow.io/v1alpha1
  kind: VipPool
  metadata: {name: blue}
  spec:
    addresses: ["172.18.0.4-172.18.0.7", "172.18.0.12/30", "172.18.0.16/28"]"#;
    let with_pool = format!("{}{}", base_yaml().trim_end(), pool);
    let mut h = Harness::start(sb, |_| {}, &with_pool).await;
    let text = exclude_ips(&h.sb, "pods").unwrap();
    // 172.18.0.12/30 is clamped to the subnet's addresses (.15 is its broadcast: northd's span
    // ends there), and 172.18.0.16/28 lies outside it.
    assert_eq!(
        text,
        format!("172.18.0.4..172.18.0.7 172.18.0.12..172.18.0.15 {user}")
    );
    // `vipflow verify` and `vipflow check` see the same plan: no drift, nothing exposed.
    let objects = vipflow::decode::parse(&with_pool).unwrap().objects;
    let drift = vipflow::agent::verify_northbound(&h.cfg, &objects)
        .await
        .unwrap()
        .unwrap();
    // (This harness attaches rows nowhere, which verify warns about; exclude_ips matches.)
    assert!(
        !drift.iter().any(|d| d.contains("exclude_ips")),
        "{drift:?}"
    );
    let findings = vipflow::agent::check(&h.cfg, &objects).await.unwrap();
    assert!(!findings.iter().any(|f| f.contains("pods")), "{findings:?}");
    let given = dynamic_addresses(&h.sb, "pods", 16);
    assert!(given.len() >= 5, "northd handed out addresses: {given:?}");
    for forbidden in [
        "172.18.0.2",
        "172.18.0.4",
        "172.18.0.5",
        "172.18.0.6",
        "172.18.0.7",
        "172.18.0.12",
        "172.18.0.13",
        "172.18.0.14",
    ] {
        assert!(
            !given.iter().any(|g| g == forbidden),
            "{forbidden} was given to a port: {given:?}"
        );
    }
    // The pool goes: exactly the user's text remains.
    h.update(&base_yaml()).await;
    assert_eq!(exclude_ips(&h.sb, "pods").as_deref(), Some(user));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_ports_never_get_a_vip_and_the_users_exclude_ips_survive() {
    let sb = Sandbox::start();
    // A pod switch whose subnet holds the VIP 172.18.0.5, with the user's own exclusions
    // (odd spacing on purpose: it must come back byte for byte).
    let user = "172.18.0.2  172.18.0.10..172.18.0.11";
    pod_switch(&sb, user);
    let with_vip = format!(
        "{}{}",
        base_yaml().trim_end(),
        svc("team", "api", "172.18.0.5", 80, "TCP", "Cluster")
    );
    let mut h = Harness::start(sb, |_| {}, &with_vip).await;
    let text = exclude_ips(&h.sb, "pods").unwrap();
    assert!(
        text.ends_with(user),
        "the user's text is kept byte for byte: {text:?}"
    );
    assert!(
        text.split_whitespace().any(|t| t == "172.18.0.5"),
        "{text:?}"
    );
    // VIPs outside the subnet (172.18.0.53, .100) are not added.
    assert_eq!(text, format!("172.18.0.5 {user}"));

    // Ask northd for more addresses than the subnet has: none may be the VIP or a user entry.
    let given = dynamic_addresses(&h.sb, "pods", 16);
    assert!(given.len() >= 8, "northd handed out addresses: {given:?}");
    for forbidden in ["172.18.0.5", "172.18.0.2", "172.18.0.10", "172.18.0.11"] {
        assert!(
            !given.iter().any(|g| g == forbidden),
            "{forbidden} was given to a port: {given:?}"
        );
    }

    // The VIP goes: exactly the user's text remains.
    h.update(&base_yaml()).await;
    assert_eq!(exclude_ips(&h.sb, "pods").as_deref(), Some(user));
    let rec = h.sb.run_raw(
        "ovn-nbctl",
        &[
            "get",
            "Logical_Switch",
            "pods",
            "external_ids:\"vipflow.io/exclude-ips\"",
        ],
    );
    assert!(
        !rec.status.success(),
        "vipflow's record is gone with its last entry"
    );
}

#[test]
fn check_reports_vips_exposed_to_ipam() {
    let sb = Sandbox::start();
    sb.nbctl(&["ls-add", "pods"]);
    sb.nbctl(&[
        "set",
        "Logical_Switch",
        "pods",
        "other_config:subnet=172.18.0.0/24",
    ]);
    let objects = sb.path().join("objects.yaml");
    let subnet = r#"
- apiVersion: kubeovn.io/v1
  kind: Subnet
  metadata: {name: ovn-default}
  spec:
    cidrBlock: "172.18.0.0/24,fd00:18::/64"
    gateway: 172.18.0.1
    excludeIps: ["172.18.0.1", "172.18.0.50..172.18.0.60"]
    protocol: Dual
"#;
    write_objects(&objects, &format!("{}{}", base_yaml().trim_end(), subnet));
    let run = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_vipflow"))
            .arg("check")
            .arg("--objects")
            .arg(&objects)
            .args(extra)
            .output()
            .unwrap()
    };
    // Kube-OVN: 172.18.0.53 is excluded by the range, 172.18.0.100 and fd00:18::53 are not.
    let out = run(&[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("Subnet ovn-default: VIP 172.18.0.100"),
        "{text}"
    );
    assert!(
        text.contains("Subnet ovn-default: VIP fd00:18::53"),
        "{text}"
    );
    assert!(!text.contains("VIP 172.18.0.53"), "{text}");
    // With the Northbound database: the logical switch too.
    let nb = format!("unix:{}", sb.nb_sock().display());
    let text = String::from_utf8_lossy(&run(&["--nb-remote", &nb]).stdout).to_string();
    assert!(
        text.contains("Logical_Switch pods: VIP 172.18.0.100 is in subnet 172.18.0.0/24"),
        "{text}"
    );
    assert!(
        text.contains("Logical_Switch pods: VIP 172.18.0.53"),
        "{text}"
    );
}

/// Services `svc-0..n` in namespace `churn`, each with one VIP and `eps` ready endpoints.
fn churn_objects(n: usize, eps: usize) -> String {
    let mut items = Vec::new();
    for i in 0..n {
        items.push(svc(
            "churn",
            &format!("svc-{i}"),
            &format!("172.19.{}.{}", i / 250, i % 250 + 1),
            80,
            "TCP",
            "Cluster",
        ));
        let e: Vec<(String, &str, bool)> = (0..eps)
            .map(|k| (format!("10.245.{i}.{}", k + 1), "node-a", true))
            .collect();
        let e: Vec<(&str, &str, bool)> = e.iter().map(|(a, b, c)| (a.as_str(), *b, *c)).collect();
        items.push(slice("churn", &format!("svc-{i}"), &e));
    }
    format!("apiVersion: v1\nkind: List\nitems:{}\n", items.concat())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nb_cluster_leader_killed_during_churn_rows_converge_without_duplicates() {
    let cluster = testkit::cluster::NbCluster::start();
    let sb = Sandbox::openflow_only();
    let objects = sb.path().join("objects.yaml");
    let y0 = churn_objects(40, 1);
    write_objects(&objects, &y0);
    let cfg = Config {
        ovs_rundir: sb.path().to_path_buf(),
        objects: Some(objects.clone()),
        // Every member, as ovn-nbctl --db takes them: the client finds the leader itself.
        nb_remote: Some(cluster.unix_remotes()),
        ..Config::default()
    };
    let (rx, _watcher) = file::watch(objects.clone(), Duration::from_millis(20)).unwrap();
    let mut source = rx.clone();
    let mut running = agent::start(cfg.clone(), rx);
    tokio::time::timeout(Duration::from_secs(30), running.wait_applied(1))
        .await
        .expect("first sync");

    // Churn: endpoint counts change on every round; kill the leader in the middle.
    let mut last = y0;
    let mut killed = std::time::Instant::now();
    let mut last_write = killed;
    for round in 1..=6 {
        if round == 3 {
            let leader = cluster.wait_leader();
            cluster.kill(leader);
            killed = std::time::Instant::now();
        }
        last = churn_objects(40 - round, 1 + round % 3);
        write_objects(&objects, &last);
        last_write = std::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    // The generation planned from the last round's objects, once the source has them.
    let services = 40 - 6;
    let fin = tokio::time::timeout(
        Duration::from_secs(10),
        source.wait_for(|l| l.objects.services.len() == services),
    )
    .await
    .expect("the last round was read")
    .unwrap()
    .clone();
    let g = tokio::time::timeout(
        Duration::from_secs(30),
        running
            .planned
            .wait_for(|p| p.as_ref().is_some_and(|p| Arc::ptr_eq(&p.loaded, &fin))),
    )
    .await
    .expect("the last round was planned")
    .unwrap()
    .as_ref()
    .map_or(0, |p| p.generation);
    tokio::time::timeout(Duration::from_secs(60), running.wait_applied(g))
        .await
        .expect("converged after the leader change");
    println!(
        "NB leader killed during churn: the last round's rows committed {:?} after the kill, {:?} after the last change",
        killed.elapsed(),
        last_write.elapsed()
    );

    // Read back through the cluster (any live member): exactly the planned rows, none twice.
    let loaded = vipflow::decode::parse(&last).unwrap();
    let model = Model::build(
        &loaded.objects,
        &vipflow::model::ModelOptions::from_config(&cfg),
    );
    let want: BTreeMap<String, BTreeMap<String, String>> =
        vipflow::plan::northbound::plan(&model, &cfg.northbound)
            .into_iter()
            .map(|r| (r.name, r.vips.to_btree()))
            .collect();
    let out = cluster.nbctl(&[
        "--format=json",
        "--columns=name,vips,external_ids",
        "list",
        "Load_Balancer",
    ]);
    let j: Json = serde_json::from_str(&out).unwrap();
    let mut have: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for r in j["data"].as_array().unwrap() {
        let name = r[0].as_str().unwrap().to_string();
        assert!(
            have.insert(name.clone(), json_map(&r[1])).is_none(),
            "duplicate row {name}"
        );
    }
    assert_eq!(
        have.len(),
        services,
        "one row per Service of the last round"
    );
    assert_eq!(have, want, "rows equal the plan after the leader change");
    running.stop();
}

fn signal(pid: i32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid}");
}

/// SIGCONTs a stopped daemon when dropped, so a failing test never leaves one frozen.
struct Frozen(i32);

impl Frozen {
    fn new(pid: i32) -> Frozen {
        signal(pid, "-STOP");
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

/// Make before break: a new Service's steer flows wait for its rows, and a removed Service's
/// rows wait for its steer flows to go. Each side is frozen (SIGSTOP) in turn, so a wrong order
/// shows as the other side moving alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_go_in_before_a_new_services_flows_and_go_after_a_removed_ones() {
    let base = base_yaml();
    let mut a = Agent::start(Sandbox::start(), true, |_| {}, &base).await;
    let steer = "nw_dst=172.18.0.200,tp_dst=8443";
    let flows = |a: &Agent| a.sb.ofctl(&["dump-flows", "br-ex"]);
    let rows = |a: &Agent| a.sb.nbctl(&["lb-list"]);
    let with_b = format!(
        "{base}{}",
        svc("team", "api", "172.18.0.200", 8443, "TCP", "Cluster")
    );

    // NB frozen: the new Service is planned, but its steer flow waits for its rows.
    let nb = Frozen::new(a.sb.pid("ovnnb_db").expect("NB pid"));
    let before = *a.running.generation.borrow();
    write_objects(&a.objects, &with_b);
    tokio::time::timeout(
        Duration::from_secs(10),
        a.running.generation.wait_for(|g| *g > before),
    )
    .await
    .expect("the new objects were planned")
    .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !flows(&a).contains(steer),
        "steered before its rows were in:\n{}",
        flows(&a)
    );
    drop(nb);
    eventually_async("the rows, then the flows", 10, || {
        rows(&a).contains("172.18.0.200:8443") && flows(&a).contains(steer)
    })
    .await;

    // The switch frozen: the removed Service's rows stay until its steer flow is gone.
    let ovs = Frozen::new(a.sb.pid("ovs-vswitchd").expect("ovs-vswitchd pid"));
    let before = *a.running.generation.borrow();
    write_objects(&a.objects, &base);
    tokio::time::timeout(
        Duration::from_secs(10),
        a.running.generation.wait_for(|g| *g > before),
    )
    .await
    .expect("the removal was planned")
    .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        rows(&a).contains("172.18.0.200:8443"),
        "rows removed while the flows still steer:\n{}",
        rows(&a)
    );
    drop(ovs);
    eventually_async("the flows, then the rows, gone", 10, || {
        !flows(&a).contains(steer) && !rows(&a).contains("172.18.0.200:8443")
    })
    .await;
    // And the end state is exactly the plan of the base objects.
    let g = *a.running.generation.borrow();
    tokio::time::timeout(Duration::from_secs(10), a.running.wait_applied(g))
        .await
        .expect("applied");
    assert_eq!(ours(&a.sb), expected(&a.cfg, &base));
}

/// The groups held by a logical router, by name.
fn router_groups(sb: &Sandbox, router: &str) -> Vec<String> {
    sb.nbctl(&[
        "--bare",
        "--columns=load_balancer_group",
        "list",
        "Logical_Router",
        router,
    ])
    .split_whitespace()
    .map(|u| {
        sb.nbctl(&["--bare", "--columns=name", "list", "Load_Balancer_Group", u])
            .trim()
            .to_string()
    })
    .collect()
}

/// The names of the rows in vipflow's group.
fn group_lbs(sb: &Sandbox) -> Vec<String> {
    sb.nbctl(&[
        "--bare",
        "--columns=load_balancer",
        "find",
        "Load_Balancer_Group",
        "name=vipflow-cluster",
    ])
    .split_whitespace()
    .map(|u| {
        sb.nbctl(&["--bare", "--columns=name", "list", "Load_Balancer", u])
            .trim()
            .to_string()
    })
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vipflows_group_follows_the_nodes_routers_and_problems_name_what_is_missing() {
    let node_b = "\n- apiVersion: v1\n  kind: Node\n  metadata: {name: node-b}\n  status: {addresses: [{type: InternalIP, address: 192.168.10.12}]}";
    let y = format!(
        "{}{}{}{}",
        base_yaml().trim_end(),
        node_b,
        svc("team", "web", "172.18.0.211", 80, "TCP", "Cluster"),
        slice("team", "web", &[("10.244.1.9", "node-a", true)])
    );
    let sb = Sandbox::start();
    // node-b's gateway router does not exist yet.
    sb.nbctl(&["lr-add", "GR_node-a"]);
    let mut h = Harness::start(
        sb,
        |c| c.northbound.node_router = Some("GR_{node}".into()),
        &y,
    )
    .await;
    h.assert_exact(&y);
    assert!(
        group_lbs(&h.sb).contains(&"vipflow/team/web/tcp".to_string()),
        "the cluster row is in vipflow's group: {:?}",
        group_lbs(&h.sb)
    );
    assert_eq!(router_groups(&h.sb, "GR_node-a"), ["vipflow-cluster"]);
    let problems = h
        .running
        .nb_status
        .as_ref()
        .unwrap()
        .borrow()
        .problems
        .clone();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("Logical_Router GR_node-b does not exist")
                && p.contains("Load_Balancer_Group vipflow-cluster")),
        "{problems:?}"
    );
    let loaded = vipflow::decode::parse(&y).unwrap();
    let lines = agent::verify_northbound(&h.cfg, &loaded.objects)
        .await
        .unwrap()
        .unwrap();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("! Logical_Router GR_node-b does not exist")),
        "{lines:?}"
    );

    // node-b's router appears: the writer attaches the group there, and verify is clean.
    h.sb.nbctl(&["lr-add", "GR_node-b"]);
    let sb = &h.sb;
    eventually_async("the group on GR_node-b", 10, || {
        router_groups(sb, "GR_node-b") == ["vipflow-cluster"]
    })
    .await;
    let lines = agent::verify_northbound(&h.cfg, &loaded.objects)
        .await
        .unwrap()
        .unwrap();
    assert!(lines.is_empty(), "{lines:?}");

    // node-b leaves the cluster: the group is taken off its router, kept on node-a's.
    let y2 = format!(
        "{}{}{}",
        base_yaml().trim_end(),
        svc("team", "web", "172.18.0.211", 80, "TCP", "Cluster"),
        slice("team", "web", &[("10.244.1.9", "node-a", true)])
    );
    h.update(&y2).await;
    let sb = &h.sb;
    eventually_async("the group off GR_node-b", 10, || {
        router_groups(sb, "GR_node-b").is_empty()
    })
    .await;
    assert_eq!(router_groups(&h.sb, "GR_node-a"), ["vipflow-cluster"]);

    // A configuration whose Local rows have no router to go to: verify says so.
    let mut cfg = h.cfg.clone();
    cfg.northbound.node_router = None;
    cfg.northbound.switches = vec!["sw-missing".into()];
    let y3 = format!(
        "{}{}{}",
        base_yaml().trim_end(),
        svc("team", "local", "172.18.0.212", 80, "TCP", "Local"),
        slice("team", "local", &[("10.244.1.9", "node-a", true)])
    );
    let lines = agent::verify_northbound(&cfg, &vipflow::decode::parse(&y3).unwrap().objects)
        .await
        .unwrap()
        .unwrap();
    assert!(
        lines.iter().any(|l| l.starts_with("! Service team/local:")
            && l.contains("attached to no switch, router or group")
            && l.contains("node-router")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("! Logical_Switch sw-missing does not exist")),
        "{lines:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_creates_vipflows_group_and_puts_cluster_rows_where_traffic_lands() {
    let sb = Sandbox::start();
    sb.nbctl(&["lr-add", "GR_node-a"]);
    sb.nbctl(&["ls-add", "node-a"]);
    let y = format!(
        "{}{}{}",
        base_yaml().trim_end(),
        svc("team", "web", "172.18.0.211", 80, "TCP", "Cluster"),
        slice("team", "web", &[("10.244.1.9", "node-a", true)])
    );
    let cfg = Config {
        nb_remote: Some(format!("unix:{}", sb.nb_sock().display())),
        ovs_rundir: sb.path().to_path_buf(),
        bridges: Vec::new(),
        northbound: vipflow::plan::northbound::NorthboundConfig {
            node_router: Some("GR_{node}".into()),
            node_switch: Some("{node}".into()),
            ..Default::default()
        },
        ..Config::default()
    };
    cfg.validate_nb_writer().unwrap();
    let objects = vipflow::decode::parse(&y).unwrap().objects;
    let reports = agent::sync_once(&cfg, &objects).await.unwrap();
    let nb = reports.iter().find(|r| r.bridge == "northbound").unwrap();
    assert!(nb.skipped.is_empty(), "{:?}", nb.skipped);
    assert!(group_lbs(&sb).contains(&"vipflow/team/web/tcp".to_string()));
    assert_eq!(router_groups(&sb, "GR_node-a"), ["vipflow-cluster"]);
    let on_switch = sb.nbctl(&[
        "--bare",
        "--columns=load_balancer_group",
        "list",
        "Logical_Switch",
        "node-a",
    ]);
    assert!(
        !on_switch.trim().is_empty(),
        "the group is on node-a's switch"
    );
    let lines = agent::verify_northbound(&cfg, &objects)
        .await
        .unwrap()
        .unwrap();
    assert!(lines.is_empty(), "{lines:?}");
    // Again: nothing to do, no second copy of a group (vipflow's cluster group, and its
    // switches group for externalTrafficPolicy Local's switch rows).
    agent::sync_once(&cfg, &objects).await.unwrap();
    let groups = sb.nbctl(&["--bare", "--columns=name", "list", "Load_Balancer_Group"]);
    let mut groups: Vec<&str> = groups.split_whitespace().collect();
    groups.sort_unstable();
    assert_eq!(groups, ["vipflow-cluster", "vipflow-node-switches"]);
}

/// Poll until `ours` equals the plan of `yaml`, for at most `limit`; the time it took.
async fn rows_within(h: &Harness, yaml: &str, limit: Duration) -> Duration {
    let start = std::time::Instant::now();
    let want = expected(&h.cfg, yaml);
    while start.elapsed() < limit {
        if ours(&h.sb) == want {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "rows not written within {limit:?}: have {:?}",
        ours(&h.sb).keys().collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_resume_when_the_writer_token_disappears() {
    let sb = Sandbox::start();
    sb.nbctl(&["ls-add", "sw0"]);
    let y0 = base_yaml();
    let h = Harness::start(sb, |c| c.northbound.switches = vec!["sw0".into()], &y0).await;
    h.assert_exact(&y0);

    // Someone removes the key: the next change still gets written.
    h.sb.nbctl(&[
        "remove",
        "NB_Global",
        ".",
        "external_ids",
        "vipflow.io/writer",
    ]);
    let y1 = format!(
        "{}{}{}",
        y0.trim_end(),
        svc("team", "api", "172.18.0.200", 443, "TCP", "Cluster"),
        slice("team", "api", &[("10.244.3.3", "node-a", true)])
    );
    write_objects(&h.objects, &y1);
    let took = rows_within(&h, &y1, Duration::from_secs(5)).await;
    println!("key removed: the changed Service's rows written {took:?} after the change");
    let token =
        h.sb.nbctl(&["get", "NB_Global", ".", "external_ids:vipflow.io/writer"]);
    assert!(!token.trim().is_empty(), "a new token: {token}");

    // NB restarted on an empty database: every row comes back.
    h.sb.restart_nb(true);
    let took = rows_within(&h, &y1, Duration::from_secs(10)).await;
    println!("NB restarted on an empty database: rows back {took:?} after the server was");
    assert!(took <= Duration::from_secs(2), "rows back in {took:?}");
    h.assert_exact(&y1);
}

#[test]
fn a_northbound_remote_that_cannot_be_reached_is_said_at_once() {
    let sb = Sandbox::openflow_only();
    let objects = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/services.yaml");
    let missing = sb.path().join("no-such-nb.sock");
    let remote = format!("unix:{}", missing.display());
    let cmd = |args: &[&str]| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_vipflow"));
        c.args(args)
            .arg("--objects")
            .arg(&objects)
            .arg("--ovs-rundir")
            .arg(sb.path())
            .args(["--nb-remote", &remote, "--nb-switch", "sw0"]);
        c
    };

    // --once: a clear error, non-zero, at once.
    let start = std::time::Instant::now();
    let out = cmd(&["agent", "--once"]).output().unwrap();
    let took = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!(
        "agent --once with an unreachable NB remote: exit {:?} after {took:?}",
        out.status.code()
    );
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains(&remote), "the remote is named: {stderr}");
    assert!(took < Duration::from_millis(2500), "failed after {took:?}");

    // Long-running: a WARN soon after the start.
    use std::io::BufRead;
    let mut child = cmd(&["agent"])
        .env("VIPFLOW_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let start = std::time::Instant::now();
    let mut seen = None;
    while start.elapsed() < Duration::from_secs(5) {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(100))
            && line.contains("WARN")
            && line.contains("cannot connect to the Northbound database")
        {
            seen = Some((start.elapsed(), line));
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let (at, line) = seen.expect("a WARN about the Northbound database within 5 s");
    println!("long-running agent: WARN {at:?} after the start: {line}");
    assert!(line.contains(&remote), "{line}");
}
