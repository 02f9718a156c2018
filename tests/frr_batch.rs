//! FRR takes the batches vipflow makes ([`vipflow::plan::bgp::frr_batch`]): applied by the
//! agent's own driver ([`vipflow::reconcile::frr::Vtysh`], `vtysh -f`) to a real bgpd, what
//! bgpd originates, read back by the driver from FRR's JSON, is exactly the planned networks,
//! after additions, withdrawals and a batch with a stale withdrawal in it; and the agent's FRR
//! task ([`vipflow::reconcile::frr::run`]) reads FRR back before it writes, so a restart
//! changes nothing in bgpd.

use std::collections::BTreeSet;
use testkit::frr::Frr;
use vipflow::plan::bgp::frr_batch;
use vipflow::reconcile::frr::Vtysh;

const ASN: u32 = 64513;

fn nets(v: &[&str]) -> BTreeSet<ipnet::IpNet> {
    v.iter().map(|s| s.parse().expect("a prefix")).collect()
}

#[tokio::test]
async fn frr_takes_every_batch_and_holds_exactly_the_planned_networks() {
    let ns = format!("vf-frr-{}", std::process::id());
    let config = format!(
        "frr defaults datacenter\nrouter bgp {ASN}\n bgp router-id 10.255.0.1\n no bgp network import-check\n"
    );
    let Some(frr) = Frr::start(&ns, &config) else {
        eprintln!("SKIPPED: needs root, network namespaces and FRR");
        return;
    };
    let steps = [
        nets(&["198.51.100.1/32", "198.51.100.2/32", "2001:db8::1/128"]),
        nets(&["198.51.100.2/32", "198.51.100.3/32", "2001:db8::2/128"]),
        nets(&[]),
    ];
    let vtysh = Vtysh::new(frr.path());
    let mut held = BTreeSet::new();
    // Over bgpd's own vty socket (what the agent uses), then through `vtysh -f` (its fallback).
    for (i, want) in steps.into_iter().enumerate() {
        let batch = frr_batch(ASN, &held, &want).expect("a change");
        let start = std::time::Instant::now();
        let applied = if i < 2 {
            vtysh.apply_bgpd(&batch).await
        } else {
            vtysh.apply(&batch).await
        };
        applied.unwrap_or_else(|e| panic!("FRR refused {batch}: {e}"));
        println!(
            "step {i} applied through {} in {:?}",
            if i < 2 { "bgpd's vty" } else { "vtysh -f" },
            start.elapsed()
        );
        frr_holds(&vtysh, &want).await;
        held = want;
    }
    // A withdrawal of a network FRR does not have (a stale view) does not hold back the rest,
    // and is reported by its line, either way.
    let stale = nets(&["198.51.100.9/32"]);
    for (want, bgpd) in [
        (nets(&["198.51.100.5/32"]), true),
        (nets(&["198.51.100.6/32"]), false),
    ] {
        let batch = frr_batch(ASN, &stale, &want).expect("a change");
        let refused = if bgpd {
            vtysh.apply_bgpd(&batch).await
        } else {
            vtysh.apply(&batch).await
        };
        let said = format!("{refused:?}");
        assert!(
            refused.is_err() && said.contains("198.51.100.9/32"),
            "the stale line is reported: {said}"
        );
        frr_holds(&vtysh, &want).await;
        // The next round starts from nothing.
        vtysh
            .apply_bgpd(&frr_batch(ASN, &want, &BTreeSet::new()).expect("a change"))
            .await
            .expect("FRR takes the withdrawal");
        frr_holds(&vtysh, &BTreeSet::new()).await;
    }
}

/// The kernel routes of `frr`'s namespace to `prefix`, as `ip route` prints them.
fn fib(frr: &Frr, prefix: &str) -> String {
    let out = std::process::Command::new("ip")
        .args(["-n", frr.ns(), "route", "show", prefix])
        .output()
        .expect("ip route");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test]
async fn a_node_configured_from_its_bgp_peer_puts_a_vip_in_the_routers_fib_over_a_bfd_session() {
    use vipflow::bgp::frr_config::node_config;
    use vipflow::bgp::objects::{BfdProfile, BgpPeer};
    let tag = format!("{}", std::process::id() % 100_000);
    let router_conf = "frr defaults datacenter\n!\nbfd\n profile fast\n  receive-interval 300\n  transmit-interval 300\n exit\nexit\n!\nrouter bgp 64512\n bgp router-id 10.9.0.1\n no bgp ebgp-requires-policy\n neighbor 10.9.0.2 remote-as 64513\n neighbor 10.9.0.2 bfd profile fast\n address-family ipv4 unicast\n  maximum-paths 64\n exit-address-family\nexit\n";
    let Some(router) = Frr::start(&format!("vf-rt-{tag}"), router_conf) else {
        eprintln!("SKIPPED: needs root, network namespaces and FRR");
        return;
    };
    let peer: BgpPeer = serde_yaml_ng::from_str(
        "kind: BGPPeer\nmetadata: {name: tor}\nspec: {myASN: 64513, peerASN: 64512, peerAddress: 10.9.0.1, bfdProfile: fast, routerID: 10.9.0.2}\n",
    )
    .expect("a BGPPeer");
    let profile: BfdProfile = serde_yaml_ng::from_str(
        "kind: BFDProfile\nmetadata: {name: fast}\nspec: {receiveInterval: 300, transmitInterval: 300, detectMultiplier: 3}\n",
    )
    .expect("a BFDProfile");
    let (conf, problems) = node_config(&Default::default(), &[peer], &[profile]);
    assert!(problems.is_empty(), "{problems:?}");
    let conf = conf.expect("the node peers");
    let node = Frr::start(&format!("vf-nd-{tag}"), &conf).expect("the node's FRR");
    testkit::frr::link(&router, "10.9.0.1/24", &node, "10.9.0.2/24", &tag);

    // The session and its BFD come up, as the agent's driver reads them from FRR's JSON.
    let vtysh = Vtysh::new(node.path());
    let start = std::time::Instant::now();
    loop {
        let bgp = vtysh.bgp_sessions().await.unwrap_or_default();
        let bfd = vtysh.bfd_sessions().await.unwrap_or_default();
        let peer: std::net::IpAddr = "10.9.0.1".parse().expect("an address");
        let bgp_up = bgp.iter().any(|s| s.peer == peer && s.established());
        let bfd_up = bfd.iter().find(|s| s.peer == peer && s.up());
        if let (true, Some(b)) = (bgp_up, bfd_up) {
            assert_eq!(
                (b.receive_ms, b.transmit_ms, b.multiplier),
                (Some(300), Some(300), Some(3)),
                "the BFD profile's timers"
            );
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "no session: {bgp:?}\n{bfd:?}\n{}\n{}",
            node.vtysh(&["show running-config"]).unwrap_or_default(),
            std::fs::read_to_string(node.path().join("bgpd.log")).unwrap_or_default()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    println!(
        "BGP session and BFD up {:?} after the link",
        start.elapsed()
    );

    // One batch: the VIP in the router's kernel FIB, via the node.
    let want = nets(&["198.51.100.7/32"]);
    let batch = frr_batch(64513, &BTreeSet::new(), &want).expect("a change");
    let start = std::time::Instant::now();
    vtysh.apply(&batch).await.expect("FRR takes the batch");
    while !fib(&router, "198.51.100.7").contains("via 10.9.0.2") {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "not in the router's FIB: {:?}",
            fib(&router, "198.51.100.7")
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let advertised = start.elapsed();
    let batch = frr_batch(64513, &want, &BTreeSet::new()).expect("a change");
    let start = std::time::Instant::now();
    vtysh.apply(&batch).await.expect("FRR takes the batch");
    while !fib(&router, "198.51.100.7").is_empty() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "still in the router's FIB"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    println!(
        "one batch to the router's FIB: advertised in {advertised:?}, withdrawn in {:?}",
        start.elapsed()
    );
}

/// bgpd's table version for `family`: it moves on every change to the table.
fn table_version(frr: &Frr, family: &str) -> u64 {
    let out = frr
        .vtysh(&[&format!("show bgp {family} unicast json")])
        .expect("vtysh");
    let v: serde_json::Value = serde_json::from_str(&out).expect("FRR's JSON");
    v["tableVersion"].as_u64().unwrap_or(0)
}

/// Wait until bgpd originates exactly `want` (it takes a batch in the background).
async fn frr_holds(vtysh: &Vtysh, want: &BTreeSet<ipnet::IpNet>) {
    let start = std::time::Instant::now();
    loop {
        let held = vtysh.originated().await.expect("read back");
        if &held == want {
            return;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "FRR holds {held:?}, wanted {want:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The FRR task's status once it says FRR holds `want`.
async fn current(
    rx: &mut tokio::sync::watch::Receiver<vipflow::reconcile::frr::FrrStatus>,
    want: &BTreeSet<ipnet::IpNet>,
) -> vipflow::reconcile::frr::FrrStatus {
    let wait = async {
        loop {
            {
                let s = rx.borrow_and_update().clone();
                if s.current && &s.originated == want {
                    return s;
                }
            }
            rx.changed().await.expect("the task runs");
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(20), wait)
        .await
        .unwrap_or_else(|_| panic!("FRR never held {want:?}: {:?}", rx.borrow()))
}

/// The agent's FRR task reads FRR back before it writes: a restarted agent that wants what FRR
/// holds writes nothing (bgpd's table does not move), a change is one batch, and a prefix
/// FRR holds that is not wanted is withdrawn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_frr_task_adopts_what_frr_holds_so_a_restart_changes_nothing() {
    use std::sync::Arc;
    use tokio::sync::watch;
    use vipflow::reconcile::frr::{FrrInputs, FrrStatus, run};
    let ns = format!("vf-frrt-{}", std::process::id());
    let config = format!(
        "frr defaults datacenter\nrouter bgp {ASN}\n bgp router-id 10.255.0.1\n no bgp network import-check\n"
    );
    let Some(frr) = Frr::start(&ns, &config) else {
        eprintln!("SKIPPED: needs root, network namespaces and FRR");
        return;
    };
    let vtysh = Vtysh::new(frr.path());
    // The agent's configuration for the node: what FRR already holds.
    let node = Arc::new(Some(format!("{config}exit\n")));
    let start = |want: BTreeSet<ipnet::IpNet>| {
        let (tx, rx) = watch::channel(Some((1, Arc::new(want))));
        let (config_tx, config) = watch::channel(Some(Arc::clone(&node)));
        let (stx, srx) = watch::channel(FrrStatus::default());
        let inputs = FrrInputs { config, wanted: rx };
        let task = tokio::spawn(run(vtysh.clone(), inputs, stx));
        ((tx, config_tx), srx, task)
    };
    let ab = nets(&["198.51.100.1/32", "198.51.100.2/32", "2001:db8::1/128"]);
    let (_tx, mut status, task) = start(ab.clone());
    let s = current(&mut status, &ab).await;
    assert_eq!(s.batches, 1, "one batch from an empty FRR");
    assert!(s.known, "what FRR originates is known once read");
    frr_holds(&vtysh, &ab).await;
    task.abort();
    let _ = task.await;

    // The agent restarts wanting the same: FRR is read, nothing is written. bgpd runs its
    // best-path pass on the first batch a moment after taking it: the versions are read once
    // they stand still.
    let versions = || (table_version(&frr, "ipv4"), table_version(&frr, "ipv6"));
    let mut before = versions();
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let now = versions();
        if now == before {
            break;
        }
        before = now;
    }
    let (tx, mut status, task) = start(ab.clone());
    let s = current(&mut status, &ab).await;
    assert_eq!(s.batches, 0, "a restart writes no network");
    assert_eq!(
        s.config_batches, 1,
        "a restart gives FRR its configuration whole, which it already holds"
    );
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let after = versions();
    assert_eq!(
        before, after,
        "bgpd's tables did not move across the restart"
    );

    // A change is one batch.
    let bc = nets(&["198.51.100.2/32", "198.51.100.3/32"]);
    tx.0.send_replace(Some((2, Arc::new(bc.clone()))));
    let s = current(&mut status, &bc).await;
    assert_eq!(s.batches, 1);
    frr_holds(&vtysh, &bc).await;
    task.abort();
    let _ = task.await;

    // Someone added a network behind the agent's back while it was down: the agent that comes
    // back withdraws it and keeps the rest.
    vtysh
        .apply(
            &frr_batch(
                ASN,
                &bc,
                &nets(&["198.51.100.2/32", "198.51.100.3/32", "198.51.100.9/32"]),
            )
            .expect("a change"),
        )
        .await
        .expect("FRR takes it");
    frr_holds(
        &vtysh,
        &nets(&["198.51.100.2/32", "198.51.100.3/32", "198.51.100.9/32"]),
    )
    .await;
    let (_tx, mut status, task) = start(bc.clone());
    let s = current(&mut status, &bc).await;
    assert_eq!(s.batches, 1);
    frr_holds(&vtysh, &bc).await;
    task.abort();
}

/// `show running-config` of `frr`.
fn running(frr: &Frr) -> String {
    frr.vtysh(&["show running-config"]).expect("vtysh")
}

/// A change of the node's peers goes in as one batch FRR takes without refusing a line: a peer
/// that goes (and the BFD profile only it used) is gone from FRR's running configuration, the
/// other stays, and the networks FRR originates are untouched.
#[tokio::test]
async fn a_peer_that_goes_leaves_frr_and_the_rest_of_its_configuration_stays() {
    use vipflow::bgp::frr_config::{config_batch, node_config};
    use vipflow::bgp::objects::{BfdProfile, BgpPeer};
    let ns = format!("vf-frrc-{}", std::process::id());
    let Some(frr) = Frr::start(&ns, "frr defaults datacenter\n") else {
        eprintln!("SKIPPED: needs root, network namespaces and FRR");
        return;
    };
    let peer = |yaml: &str| -> BgpPeer { serde_yaml_ng::from_str(yaml).expect("a BGPPeer") };
    let tor4 = peer(
        "kind: BGPPeer\nmetadata: {name: tor4}\nspec: {myASN: 64513, peerASN: 64512, peerAddress: 10.9.0.1, holdTime: 9s, keepaliveTime: 3s, bfdProfile: fast}\n",
    );
    let tor6 = peer(
        "kind: BGPPeer\nmetadata: {name: tor6}\nspec: {myASN: 64513, peerASN: 64512, peerAddress: 'fd00:9::1', connectTime: 2s}\n",
    );
    let fast: BfdProfile = serde_yaml_ng::from_str(
        "kind: BFDProfile\nmetadata: {name: fast}\nspec: {receiveInterval: 300, transmitInterval: 300, detectMultiplier: 3}\n",
    )
    .expect("a BFDProfile");
    let labels = std::collections::BTreeMap::new();
    let two = node_config(&labels, &[tor4, tor6.clone()], std::slice::from_ref(&fast))
        .0
        .expect("a configuration");
    let one = node_config(&labels, &[tor6], &[fast])
        .0
        .expect("a configuration");
    let vtysh = Vtysh::new(frr.path());
    vtysh
        .apply(&config_batch(None, Some(&two)).expect("a first configuration"))
        .await
        .expect("FRR takes the configuration");
    let networks = nets(&["198.51.100.1/32"]);
    vtysh
        .apply(&frr_batch(64513, &BTreeSet::new(), &networks).expect("a change"))
        .await
        .expect("FRR takes the network");
    frr_holds(&vtysh, &networks).await;
    let before = running(&frr);
    assert!(
        before.contains("neighbor 10.9.0.1 remote-as 64512"),
        "{before}"
    );
    assert!(before.contains("profile fast"), "{before}");

    let batch = config_batch(Some(&two), Some(&one)).expect("a change");
    vtysh
        .apply(&batch)
        .await
        .unwrap_or_else(|e| panic!("FRR refused a line of\n{batch}\n{e}"));
    let after = running(&frr);
    assert!(!after.contains("10.9.0.1"), "{after}");
    assert!(!after.contains("profile fast"), "{after}");
    assert!(
        after.contains("neighbor fd00:9::1 remote-as 64512"),
        "{after}"
    );
    assert!(
        after.contains("neighbor fd00:9::1 timers connect 2"),
        "{after}"
    );
    frr_holds(&vtysh, &networks).await;

    // A setting that goes (the connect timer) is undone, the neighbor stays.
    let plain = one.replace(" neighbor fd00:9::1 timers connect 2\n", "");
    let batch = config_batch(Some(&one), Some(&plain)).expect("a change");
    vtysh
        .apply(&batch)
        .await
        .unwrap_or_else(|e| panic!("FRR refused a line of\n{batch}\n{e}"));
    let last = running(&frr);
    assert!(!last.contains("timers connect"), "{last}");
    assert!(
        last.contains("neighbor fd00:9::1 remote-as 64512"),
        "{last}"
    );
    // Nothing is taken from the peer.
    assert!(
        last.contains("neighbor fd00:9::1 route-map vipflow-in in"),
        "{last}"
    );
    assert!(last.contains("route-map vipflow-in deny 10"), "{last}");
    frr_holds(&vtysh, &networks).await;

    // The node marked for drain: the instance shuts down gracefully, and back.
    let draining = plain.replace(
        " no bgp ebgp-requires-policy\n",
        " bgp graceful-shutdown\n no bgp ebgp-requires-policy\n",
    );
    for (from, to, on) in [(&plain, &draining, true), (&draining, &plain, false)] {
        let batch = config_batch(Some(from), Some(to)).expect("a change");
        vtysh
            .apply(&batch)
            .await
            .unwrap_or_else(|e| panic!("FRR refused a line of\n{batch}\n{e}"));
        let now = running(&frr);
        assert_eq!(now.contains("bgp graceful-shutdown"), on, "{now}");
        frr_holds(&vtysh, &networks).await;
    }
}

/// The router ID bgpd runs with, from `show bgp summary json`.
fn router_id(frr: &Frr) -> String {
    let text = frr
        .vtysh(&["show bgp ipv4 unicast summary json"])
        .unwrap_or_default();
    serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v["routerId"].as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The node's configuration sets its router ID (the Node's InternalIP): a carrier flap on the
/// interface holding that address leaves it as it was. Left to zebra, the router ID goes to
/// 0.0.0.0 while the carrier is down (and stays so if zebra misses the carrier coming back: no
/// session comes up with it), which the second half shows.
#[tokio::test]
async fn the_router_id_is_set_so_an_interface_flap_does_not_take_it_away() {
    use vipflow::bgp::frr_config::{for_node, node_config};
    let tag = format!("{}", std::process::id() % 100_000 + 7);
    let Some(router) = Frr::start(&format!("vf-rr-{tag}"), "frr defaults datacenter\n") else {
        eprintln!("SKIPPED: needs root, network namespaces and FRR");
        return;
    };
    let objects = vipflow::decode::parse(
        "apiVersion: v1\nkind: List\nitems:\n\
         - {apiVersion: v1, kind: Node, metadata: {name: n1}, status: {addresses: [{type: InternalIP, address: 10.9.0.2}]}}\n\
         - {apiVersion: vipflow.io/v1alpha1, kind: BGPPeer, metadata: {name: tor}, spec: {myASN: 64513, peerASN: 64512, peerAddress: 10.9.0.1}}\n",
    )
    .expect("objects")
    .objects;
    let set = for_node(&objects, "n1").0.expect("a configuration");
    let unset = node_config(&Default::default(), &objects.bgp.peers, &[])
        .0
        .expect("a configuration");
    assert!(set.contains(" bgp router-id 10.9.0.2\n"), "{set}");
    assert!(!unset.contains("router-id"), "{unset}");
    let node = Frr::start(&format!("vf-rn-{tag}"), "").expect("the node's FRR");
    testkit::frr::link(&router, "10.9.0.1/24", &node, "10.9.0.2/24", &tag);
    let vtysh = Vtysh::new(node.path());
    // The router's end of the link goes down and up: the node's end loses its carrier.
    let flap = |up: bool| {
        let ok = std::process::Command::new("ip")
            .args(["-n", router.ns(), "link", "set", &format!("eth-{tag}")])
            .arg(if up { "up" } else { "down" })
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "ip link set");
    };
    let settle = || std::thread::sleep(std::time::Duration::from_millis(500));
    for (config, kept) in [(&set, true), (&unset, false)] {
        vtysh
            .apply(&vipflow::bgp::frr_config::config_batch(None, Some(config)).expect("a batch"))
            .await
            .expect("FRR takes the configuration");
        settle();
        assert_eq!(router_id(&node), "10.9.0.2", "{config}");
        flap(false);
        settle();
        let during = router_id(&node);
        flap(true);
        settle();
        assert_eq!(
            during == "10.9.0.2",
            kept,
            "router ID {during} while the carrier was down, with\n{config}"
        );
        vtysh
            .apply(&format!("no router bgp {ASN}\n"))
            .await
            .expect("removed");
    }
}

/// Give `node`'s empty FRR the node configuration `config` as the agent does (one batch,
/// every line taken), then make it originate `networks`.
async fn configure_and_advertise(node: &Frr, config: &str, networks: &[&str]) {
    let vtysh = Vtysh::new(node.path());
    let batch =
        vipflow::bgp::frr_config::config_batch(None, Some(config)).expect("a configuration");
    vtysh
        .apply(&batch)
        .await
        .unwrap_or_else(|e| panic!("FRR refused a line of\n{batch}\n{e}"));
    vtysh
        .apply_bgpd(&frr_batch(64513, &BTreeSet::new(), &nets(networks)).expect("a batch"))
        .await
        .expect("FRR takes the networks");
}

/// A `BGPAdvertisement`'s communities go out on the routes of its pool: the node's
/// configuration (made from the objects as the agent makes it) sets them in its outbound
/// route-map, FRR takes it, and the router holds the VIP's route with them.
#[tokio::test]
async fn an_advertisements_communities_reach_the_router_on_its_pools_routes() {
    use vipflow::bgp::frr_config::for_node;
    let tag = format!("{}", std::process::id() % 100_000 + 11);
    let router_conf = "frr defaults datacenter\n!\nrouter bgp 64512\n bgp router-id 10.9.0.1\n no bgp ebgp-requires-policy\n neighbor 10.9.0.2 remote-as 64513\nexit\n";
    let Some(router) = Frr::start(&format!("vf-cr-{tag}"), router_conf) else {
        eprintln!("SKIPPED: needs root, network namespaces and FRR");
        return;
    };
    let objects = vipflow::decode::parse(
        "apiVersion: v1\nkind: List\nitems:\n\
         - {apiVersion: v1, kind: Node, metadata: {name: n1}, status: {addresses: [{type: InternalIP, address: 10.9.0.2}]}}\n\
         - {apiVersion: vipflow.io/v1alpha1, kind: BGPPeer, metadata: {name: tor}, spec: {myASN: 64513, peerASN: 64512, peerAddress: 10.9.0.1}}\n\
         - {apiVersion: vipflow.io/v1alpha1, kind: VipPool, metadata: {name: blue}, spec: {addresses: [198.51.100.0/24]}}\n\
         - {apiVersion: vipflow.io/v1alpha1, kind: VipPool, metadata: {name: green}, spec: {addresses: [203.0.113.0/24]}}\n\
         - {apiVersion: vipflow.io/v1alpha1, kind: BGPAdvertisement, metadata: {name: tagged}, spec: {ipAddressPools: [blue], localPref: 100, communities: ['64512:7', 'large:64512:1:2']}}\n\
         - {apiVersion: vipflow.io/v1alpha1, kind: BGPAdvertisement, metadata: {name: plain}, spec: {ipAddressPools: [green]}}\n",
    )
    .expect("objects");
    let (config, problems) = for_node(&objects.objects, "n1");
    assert!(problems.is_empty(), "{problems:?}");
    let config = config.expect("a configuration");
    let node = Frr::start(&format!("vf-cn-{tag}"), "").expect("the node's FRR");
    testkit::frr::link(&router, "10.9.0.1/24", &node, "10.9.0.2/24", &tag);
    configure_and_advertise(&node, &config, &["198.51.100.20/32", "203.0.113.20/32"]).await;
    // What the router holds for each VIP: (communities, large communities).
    let held = |prefix: &str| router.route_communities("ipv4", prefix);
    let start = std::time::Instant::now();
    let (tagged, plain) = loop {
        if let (Some(t), Some(p)) = (held("198.51.100.20/32"), held("203.0.113.20/32")) {
            break (t, p);
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "the router never had both routes:\n{}",
            router.vtysh(&["show bgp ipv4 unicast"]).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(tagged, ("64512:7".to_string(), "64512:1:2".to_string()));
    assert_eq!(
        plain,
        (String::new(), String::new()),
        "another pool's route carries none"
    );
}

/// A `BGPAdvertisement` naming its `peers` goes to those only: the node peers with two
/// routers, one pool's advertisement names router `a`, another's names none; router `a` holds
/// both pools' routes and router `b` only the second's.
#[tokio::test]
async fn an_advertisement_naming_its_peers_reaches_those_routers_only() {
    use vipflow::bgp::frr_config::for_node;
    let tag = std::process::id() % 100_000;
    let router = |asn: u32, id: &str| {
        format!(
            "frr defaults datacenter\n!\nrouter bgp {asn}\n bgp router-id {id}\n no bgp ebgp-requires-policy\n neighbor {} remote-as 64513\nexit\n",
            if id == "10.9.0.1" {
                "10.9.0.2"
            } else {
                "10.8.0.2"
            }
        )
    };
    let Some(a) = Frr::start(&format!("vf-pa-{tag}"), &router(64512, "10.9.0.1")) else {
        eprintln!("SKIPPED: needs root, network namespaces and FRR");
        return;
    };
    let b = Frr::start(&format!("vf-pb-{tag}"), &router(64514, "10.8.0.1")).expect("router b");
    let objects = vipflow::decode::parse(
        "apiVersion: v1\nkind: List\nitems:\n\
         - {apiVersion: v1, kind: Node, metadata: {name: n1}, status: {addresses: [{type: InternalIP, address: 10.9.0.2}]}}\n\
         - {apiVersion: vipflow.io/v1alpha1, kind: BGPPeer, metadata: {name: a}, spec: {myASN: 64513, peerASN: 64512, peerAddress: 10.9.0.1, disableMP: true}}\n\
         - {apiVersion: vipflow.io/v1alpha1, kind: BGPPeer, metadata: {name: b}, spec: {myASN: 64513, peerASN: 64514, peerAddress: 10.8.0.1, disableMP: true}}\n\
         - {apiVersion: vipflow.io/v1alpha1, kind: VipPool, metadata: {name: blue}, spec: {addresses: [198.51.100.0/24]}}\n\
         - {apiVersion: vipflow.io/v1alpha1, kind: VipPool, metadata: {name: green}, spec: {addresses: [203.0.113.0/24]}}\n\
         - {apiVersion: vipflow.io/v1alpha1, kind: BGPAdvertisement, metadata: {name: to-a}, spec: {ipAddressPools: [blue], peers: [a]}}\n\
         - {apiVersion: vipflow.io/v1alpha1, kind: BGPAdvertisement, metadata: {name: all}, spec: {ipAddressPools: [green]}}\n",
    )
    .expect("objects");
    assert!(objects.problems.is_empty(), "{:?}", objects.problems);
    let (config, problems) = for_node(&objects.objects, "n1");
    assert!(problems.is_empty(), "{problems:?}");
    let config = config.expect("a configuration");
    let node = Frr::start(&format!("vf-pn-{tag}"), "").expect("the node's FRR");
    testkit::frr::link(&a, "10.9.0.1/24", &node, "10.9.0.2/24", &format!("{tag}a"));
    testkit::frr::link(&b, "10.8.0.1/24", &node, "10.8.0.2/24", &format!("{tag}b"));
    configure_and_advertise(&node, &config, &["198.51.100.20/32", "203.0.113.20/32"]).await;
    let holds = |r: &Frr, prefix: &str| {
        r.vtysh(&[&format!("show bgp ipv4 unicast {prefix} json")])
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .is_some_and(|v| v["paths"].as_array().is_some_and(|p| !p.is_empty()))
    };
    let start = std::time::Instant::now();
    while !(holds(&a, "198.51.100.20/32")
        && holds(&a, "203.0.113.20/32")
        && holds(&b, "203.0.113.20/32"))
    {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "the routes never came:\na:\n{}\nb:\n{}",
            a.vtysh(&["show bgp ipv4 unicast"]).unwrap_or_default(),
            b.vtysh(&["show bgp ipv4 unicast"]).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Router b has had every chance to hear of blue's route: it never does.
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(
        !holds(&b, "198.51.100.20/32"),
        "router b got the route for a only"
    );
}
