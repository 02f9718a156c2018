//! Events on MetalLB's objects against the Kubernetes API test server (real HTTP, list and
//! watch, events.k8s.io/v1 with label selectors, a Lease): with two agents running, the elected
//! one puts one Warning Event on each MetalLB object with a field vipflow does not carry out
//! and none on the others; a leader change says nothing again; a statement that stops holding
//! and comes back is said again.

use serde_json::Value;
use std::time::Duration;
use testkit::kube_server::KubeServer;
use vipflow::ipam_task::{IpamOutputs, IpamSettings, run_with};
use vipflow::leader::{self, Election, LeaderConfig};

/// A hang guard, not a target.
const LIMIT: Duration = Duration::from_secs(30);
const LEASE: Duration = Duration::from_secs(2);

/// MetalLB's kinds as its CRDs serve them (apiVersion, kind, plural).
const METALLB_KINDS: [(&str, &str, &str); 6] = [
    ("metallb.io/v1beta1", "IPAddressPool", "ipaddresspools"),
    ("metallb.io/v1beta1", "L2Advertisement", "l2advertisements"),
    ("metallb.io/v1beta2", "BGPPeer", "bgppeers"),
    (
        "metallb.io/v1beta1",
        "BGPAdvertisement",
        "bgpadvertisements",
    ),
    ("metallb.io/v1beta1", "BFDProfile", "bfdprofiles"),
    ("metallb.io/v1beta1", "Community", "communities"),
];

/// A peer with `passwordSecret` (left out), an L2 advertisement with `interfaces` (used without
/// it), and objects vipflow carries out whole.
const OBJECTS: &str = r#"
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: tor, namespace: metallb-system}
spec:
  myASN: 64512
  peerASN: 64513
  peerAddress: 172.30.0.3
  passwordSecret: {name: tor-secret, namespace: metallb-system}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: spine, namespace: metallb-system}
spec: {myASN: 64512, peerASN: 64514, peerAddress: 172.30.0.4, bfdProfile: fast}
---
apiVersion: metallb.io/v1beta1
kind: BFDProfile
metadata: {name: fast, namespace: metallb-system}
spec: {receiveInterval: 300, transmitInterval: 300}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: first-pool, namespace: metallb-system}
spec:
  addresses: [192.0.2.0/24]
  serviceAllocation:
    serviceSelectors: [{matchLabels: {app: web}}]
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: everything, namespace: metallb-system}
spec: {ipAddressPools: [first-pool]}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: l2, namespace: metallb-system}
spec:
  ipAddressPools: [first-pool]
  interfaces: [eth0]
"#;

/// A peer of MetalLB's named `name`, with `extra` spec lines.
fn peer(name: &str, extra: &str) -> String {
    format!(
        "apiVersion: metallb.io/v1beta2\nkind: BGPPeer\nmetadata: {{name: {name}, namespace: metallb-system}}\nspec:\n  myASN: 64512\n  peerASN: 64513\n  peerAddress: 172.30.0.9\n{extra}"
    )
}

/// An agent as the cluster mode runs the elected part: its election on the Lease, the
/// allocator and the Events on MetalLB's objects on it.
struct Agent {
    name: String,
    election: Election,
    task: tokio::task::JoinHandle<()>,
}

async fn agent(srv: &KubeServer, name: &str) -> Agent {
    let election = leader::start(
        srv.client().await,
        LeaderConfig::new("vipflow", "vipflow", name, LEASE),
    );
    let allocator = run_with(
        srv.client().await,
        IpamSettings {
            instance: name.into(),
            retry_every: Duration::from_millis(100),
            pool_status_every: Duration::from_millis(100),
            ..Default::default()
        },
        Some(election.is_leader.clone()),
        IpamOutputs::default(),
    );
    let metallb = vipflow::metallb_events::run(
        srv.client().await,
        name.into(),
        Some(election.is_leader.clone()),
    );
    let task = tokio::spawn(async move {
        tokio::join!(allocator, metallb);
    });
    Agent {
        name: name.into(),
        election,
        task,
    }
}

/// The Events on MetalLB's objects.
fn said(srv: &KubeServer) -> Vec<Value> {
    srv.list("events.k8s.io/v1", "Event")
        .into_iter()
        .filter(|e| {
            e["regarding"]["apiVersion"]
                .as_str()
                .is_some_and(|a| a.starts_with("metallb.io/"))
        })
        .collect()
}

/// The Events on MetalLB object `name`.
fn on(srv: &KubeServer, name: &str) -> Vec<Value> {
    said(srv)
        .into_iter()
        .filter(|e| e["regarding"]["name"] == name)
        .collect()
}

/// Wait until MetalLB object `name` has `n` Events.
async fn events_on(srv: &KubeServer, name: &str, n: usize) {
    let ok = tokio::time::timeout(LIMIT, srv.wait_until(|s| on(s, name).len() >= n)).await;
    assert!(ok.is_ok(), "not {n} Events on {name}: {:#?}", said(srv));
}

/// Wait until exactly one of `agents` leads; its place.
async fn leading(agents: &[Agent]) -> usize {
    let start = tokio::time::Instant::now();
    loop {
        let now: Vec<usize> = (0..agents.len())
            .filter(|&i| *agents[i].election.is_leader.borrow())
            .collect();
        if let [one] = now[..] {
            return one;
        }
        assert!(start.elapsed() < LIMIT, "no single leader: {now:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_elected_agent_says_each_unsupported_field_once_on_its_metallb_object() {
    let srv = KubeServer::start().await;
    for (api, kind, plural) in METALLB_KINDS {
        srv.register_resource(api, plural, kind, true);
        srv.enable_crd(api, plural);
    }
    srv.apply_yaml(OBJECTS);
    let mut agents = vec![agent(&srv, "node-a").await, agent(&srv, "node-b").await];
    events_on(&srv, "tor", 1).await;
    events_on(&srv, "l2", 1).await;
    let first = leading(&agents).await;
    // Both agents keep running: nothing more is said.
    tokio::time::sleep(LEASE * 2).await;
    let events = said(&srv);
    assert_eq!(events.len(), 2, "{events:#?}");

    let tor = &on(&srv, "tor")[0];
    let stored = srv
        .get("metallb.io/v1beta2", "BGPPeer", "metallb-system", "tor")
        .expect("the peer");
    assert_eq!(
        tor["regarding"],
        serde_json::json!({
            "apiVersion": "metallb.io/v1beta2", "kind": "BGPPeer",
            "namespace": "metallb-system", "name": "tor",
            "uid": stored["metadata"]["uid"],
        })
    );
    assert_eq!(tor["metadata"]["namespace"], "metallb-system");
    assert_eq!(tor["type"], "Warning");
    assert_eq!(tor["reason"], "ObjectNotSupported");
    assert_eq!(
        tor["note"],
        "passwordSecret is not supported: give the password in password (a session without it \
         would fail); skipped"
    );
    assert_eq!(tor["reportingController"], "vipflow");
    assert_eq!(tor["reportingInstance"], agents[first].name.as_str());
    let l2 = &on(&srv, "l2")[0];
    assert_eq!(l2["regarding"]["apiVersion"], "metallb.io/v1beta1");
    assert_eq!(l2["regarding"]["kind"], "L2Advertisement");
    assert_eq!(l2["reason"], "FieldNotSupported");
    assert!(
        l2["note"]
            .as_str()
            .is_some_and(|n| n.starts_with("interfaces (eth0) is not supported")),
        "{l2:#?}"
    );

    // The leader goes: the other takes over, learns what was said, and says only what is new.
    srv.clear_request_log();
    let gone = agents.remove(first);
    gone.election.release().await;
    gone.task.abort();
    let learned = tokio::time::timeout(
        LIMIT,
        srv.wait_for_request(|r| {
            r.verb == "list"
                && r.resource == "events"
                && r.param("labelSelector").as_deref() == Some("vipflow.io/said-by=metallb")
        }),
    )
    .await;
    assert!(
        learned.is_ok(),
        "the new leader did not learn what was said"
    );
    srv.apply_yaml(&peer("probe", "  vrf: red\n"));
    events_on(&srv, "probe", 1).await;
    assert_eq!(
        on(&srv, "probe")[0]["reportingInstance"],
        agents[0].name.as_str()
    );
    assert_eq!((on(&srv, "tor").len(), on(&srv, "l2").len()), (1, 1));

    // tor's passwordSecret goes (seen before the next peer, on the same watch), then comes
    // back: said again, once.
    srv.apply_yaml(&peer("tor", ""));
    srv.apply_yaml(&peer("probe-2", "  localASN: 64600\n"));
    events_on(&srv, "probe-2", 1).await;
    assert_eq!(on(&srv, "tor").len(), 1);
    srv.apply_yaml(&peer(
        "tor",
        "  passwordSecret: {name: tor-secret, namespace: metallb-system}\n",
    ));
    events_on(&srv, "tor", 2).await;
    tokio::time::sleep(LEASE).await;
    let names: Vec<String> = said(&srv)
        .iter()
        .map(|e| {
            e["regarding"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        ["l2", "probe", "probe-2", "tor", "tor"],
        "none on spine, fast, first-pool or everything"
    );
    for a in agents {
        a.election.release().await;
        a.task.abort();
    }
}
