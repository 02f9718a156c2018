//! A MetalLB L2 setup moved over to vipflow on the real-packet testbed, as a user moves it: the
//! MetalLB objects (`IPAddressPool`s, an `L2Advertisement` limited to some nodes) and the
//! Services as MetalLB left them (their addresses in `status`, MetalLB's annotations) stay on
//! the API server untouched; MetalLB's speaker and controller are gone, and vipflow's agents run
//! in cluster mode with `--announce` (the shipped defaults otherwise). Every VIP the
//! advertisement covers is answered by ARP from a node it admits and reached by TCP, at the
//! address MetalLB gave it; a VIP of a pool no advertisement covers is announced by nobody, as
//! MetalLB would not; no Service's address or annotation changed. Without root (no network
//! namespaces) the test says so and skips; CI runs it.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use testkit::eventually;
use testkit::kube_server::KubeServer;
use testkit::netns::{self, POD_TCP_PORT, PodServer};
use testkit::testbed::{self, AgentProcess, Testbed};

const NODES: usize = 3;
/// Addresses MetalLB gave from `first-pool` (one by its own choice, one asked for by
/// annotation), and one from `quiet-pool`, which no `L2Advertisement` covers.
const WEB: &str = "172.18.0.200";
const API: &str = "172.18.0.201";
const QUIET: &str = "172.18.0.221";

/// MetalLB's kinds as its CRDs serve them.
const METALLB_KINDS: [(&str, &str, &str); 3] = [
    ("metallb.io/v1beta1", "IPAddressPool", "ipaddresspools"),
    ("metallb.io/v1beta1", "L2Advertisement", "l2advertisements"),
    ("metallb.io/v1beta1", "Community", "communities"),
];

fn vipflow() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_vipflow"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The cluster as MetalLB left it: three Nodes (node2 and node3 labelled for the
/// advertisement), MetalLB's objects in its namespace, and three Services with the addresses
/// and annotations MetalLB's controller wrote, each with an endpoint on every node's pod a.
fn cluster() -> String {
    let mut y = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for i in 1..=NODES {
        let labels = if i == 1 {
            "{}"
        } else {
            "{l2-announcer: 'yes'}"
        };
        y += &format!(
            "- apiVersion: v1\n  kind: Node\n  metadata: {{name: node{i}, labels: {labels}}}\n  status:\n    addresses: [{{type: InternalIP, address: {}}}]\n    conditions: [{{type: Ready, status: 'True'}}]\n",
            testbed::node_ip(i)
        );
    }
    y += "\
- apiVersion: metallb.io/v1beta1
  kind: IPAddressPool
  metadata: {name: first-pool, namespace: metallb-system}
  spec:
    addresses: [172.18.0.200-172.18.0.210]
- apiVersion: metallb.io/v1beta1
  kind: IPAddressPool
  metadata: {name: quiet-pool, namespace: metallb-system}
  spec:
    addresses: [172.18.0.220/30]
    autoAssign: false
- apiVersion: metallb.io/v1beta1
  kind: L2Advertisement
  metadata: {name: l2, namespace: metallb-system}
  spec:
    ipAddressPools: [first-pool]
    nodeSelectors:
    - matchLabels: {l2-announcer: 'yes'}
";
    for (name, ip, annotations) in [
        (
            "web",
            WEB,
            "{metallb.io/ip-allocated-from-pool: first-pool}".to_string(),
        ),
        (
            "api",
            API,
            format!(
                "{{metallb.io/loadBalancerIPs: '{API}', metallb.io/ip-allocated-from-pool: first-pool}}"
            ),
        ),
        (
            "quiet",
            QUIET,
            "{metallb.io/address-pool: quiet-pool, metallb.io/ip-allocated-from-pool: quiet-pool}"
                .to_string(),
        ),
    ] {
        y += &format!(
            "- apiVersion: v1\n  kind: Service\n  metadata: {{name: {name}, namespace: shop, annotations: {annotations}}}\n  spec:\n    type: LoadBalancer\n    ipFamilies: [IPv4]\n    ports: [{{name: http, port: 80, protocol: TCP, targetPort: {POD_TCP_PORT}}}]\n  status: {{loadBalancer: {{ingress: [{{ip: '{ip}', ipMode: VIP}}]}}}}\n"
        );
        let eps: String = (1..=NODES)
            .map(|i| {
                format!(
                    "  - {{addresses: ['{}'], nodeName: node{i}, conditions: {{ready: true}}}}\n",
                    testbed::pod_ip(i, 'a')
                )
            })
            .collect();
        y += &format!(
            "- apiVersion: discovery.k8s.io/v1\n  kind: EndpointSlice\n  metadata: {{name: {name}-1, namespace: shop, labels: {{kubernetes.io/service-name: {name}}}}}\n  addressType: IPv4\n  ports: [{{name: http, port: {POD_TCP_PORT}, protocol: TCP}}]\n  endpoints:\n{eps}"
        );
    }
    y
}

/// The nodes whose br-ex answers ARP for `vip`.
fn answering(tb: &Testbed, vip: &str) -> BTreeSet<usize> {
    (1..=NODES)
        .filter(|&i| {
            tb.ofctl(i, &["dump-flows", "br-ex"])
                .lines()
                .any(|l| l.contains(&format!("arp_tpa={vip}")) && l.contains("IN_PORT"))
        })
        .collect()
}

/// Replies `arping` in the client got for `vip` (three broadcast requests).
/// Wait for exactly one node to answer ARP for `vip`, less long than the agents' read-back of
/// their flows (which would put a missing answer back); a failure says which nodes answered
/// last and what each agent logged.
fn one_answering(tb: &Testbed, vip: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = answering(tb, vip);
        if now.len() == 1 {
            return;
        }
        if Instant::now() > deadline {
            let logs: String = (1..=NODES)
                .map(|i| {
                    let log = std::fs::read_to_string(tb.node_dir(i).join("vipflow.log"))
                        .unwrap_or_default();
                    let tail: Vec<&str> = log.lines().rev().take(40).collect();
                    let tail: Vec<&str> = tail.into_iter().rev().collect();
                    format!("--- node{i}'s agent, last lines:\n{}\n", tail.join("\n"))
                })
                .collect();
            panic!("not one node answering for {vip} within 20 s: {now:?} answer\n{logs}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn arp_replies(tb: &Testbed, vip: &str) -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "exec", &tb.ns("client"), "arping", "-I", "eth0"])
        .args(["-c", "3", "-w", "3", "-b", vip])
        .output()
        .expect("run arping");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("reply from"))
        .filter_map(|l| Some(l[l.find('[')? + 1..l.find(']')?].to_ascii_lowercase()))
        .collect()
}

/// What each Service looks like to its users: its ingress addresses and its annotations.
fn services(srv: &KubeServer) -> Vec<(String, serde_json::Value, serde_json::Value)> {
    let mut v: Vec<_> = srv
        .list("v1", "Service")
        .into_iter()
        .map(|s| {
            (
                s["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                s["status"]["loadBalancer"]["ingress"].clone(),
                s["metadata"]["annotations"].clone(),
            )
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

#[test]
fn a_metallb_l2_setup_moves_over_unchanged_and_every_vip_answers_at_its_address() {
    let Some(tb) = Testbed::start(NODES) else {
        return;
    };
    let _pods: Vec<PodServer> = (1..=NODES)
        .map(|i| {
            let name = format!("pod{i}a");
            PodServer::start(&tb.ns(&name), &name).expect("pod server")
        })
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let srv = rt.block_on(KubeServer::start());
    for (api, kind, plural) in METALLB_KINDS {
        srv.register_resource(api, plural, kind, true);
        srv.enable_crd(api, plural);
    }
    srv.apply_yaml(&cluster());
    let before = services(&srv);

    let http: Vec<String> = (0..NODES)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let _agents: Vec<AgentProcess> = (1..=NODES)
        .map(|i| {
            let mut a = vec![
                "--announce".to_string(),
                "--http-addr".to_string(),
                http[i - 1].clone(),
            ];
            if i == 1 {
                a.extend(
                    [
                        "--nb-remote",
                        &tb.nb_remote(),
                        "--node-router",
                        "GR_{node}",
                        "--node-switch",
                        "{node}",
                    ]
                    .map(String::from),
                );
            }
            tb.agent_from_api(&vipflow(), i, srv.kubeconfig_path(), &a)
        })
        .collect();
    eventually("the Northbound rows", 60, || {
        let lbs = tb.nbctl(&["lb-list"]);
        [WEB, API, QUIET]
            .iter()
            .all(|v| lbs.contains(&format!("{v}:80")))
    });
    tb.nbctl(&["--timeout=30", "--wait=hv", "sync"]);

    // The advertisement's VIPs: one node answers each, one the advertisement admits.
    let admitted: BTreeSet<usize> = [2, 3].into();
    for vip in [WEB, API] {
        one_answering(&tb, vip);
        let owner = answering(&tb, vip);
        assert!(
            owner.is_subset(&admitted),
            "{vip} answered by {owner:?}, not a node the L2Advertisement admits"
        );
        let owner = owner.into_iter().next().expect("one owner");
        let macs = arp_replies(&tb, vip);
        assert_eq!(
            macs,
            vec![testbed::node_mac(owner); 3],
            "ARP for {vip} from the client"
        );
        let to = SocketAddr::new(vip.parse::<IpAddr>().expect("a VIP"), 80);
        let deadline = Instant::now() + Duration::from_secs(20);
        let answer = loop {
            match netns::tcp_request(&tb.ns("client"), to, Duration::from_millis(500)) {
                Ok(a) => break a,
                Err(e) => assert!(Instant::now() < deadline, "TCP to {vip}: {e}"),
            }
        };
        assert!(answer.starts_with("pod"), "{vip}:80 answered {answer:?}");
        println!(
            "{vip}: answered by node{owner}'s switch, TCP by {}",
            answer.trim()
        );
    }

    // The pool no advertisement covers: nobody answers, as with MetalLB; `vipflow status` says
    // why.
    assert!(answering(&tb, QUIET).is_empty());
    assert!(
        arp_replies(&tb, QUIET).is_empty(),
        "ARP for {QUIET} answered"
    );
    eventually(
        "node1's status saying why QUIET is not announced",
        20,
        || {
            let out = Command::new(vipflow())
                .args(["status", "--http-addr", &http[0]])
                .output()
                .expect("vipflow status");
            let text = String::from_utf8_lossy(&out.stdout);
            let ok = text.contains(QUIET) && text.contains("quiet-pool");
            if !ok {
                println!("{text}");
            }
            ok
        },
    );

    // Nothing the user sees of the Services changed: the addresses and MetalLB's annotations.
    let after = services(&srv);
    assert_eq!(after, before, "the Services' addresses and annotations");

    // Nothing but the agents writes their flows here: none found its flows other than it
    // believed them (an answer held back until OVN programmed its VIP, then released by the
    // write of a later plan, is written by that write, not found missing by the read-back).
    for i in 1..=NODES {
        let log = std::fs::read_to_string(tb.node_dir(i).join("vipflow.log")).unwrap_or_default();
        let drift: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("changed by someone else"))
            .collect();
        assert!(drift.is_empty(), "node{i}'s agent:\n{}", drift.join("\n"));
    }
}
