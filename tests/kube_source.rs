//! The Kubernetes source against the Kubernetes API test server (real HTTP, list and watch, an
//! unmodified kube::Client): vipflow's BGP objects are read from the API as the objects file
//! reads them, a bad one is a problem and the rest still apply, and changes come through.

use std::time::Duration;
use testkit::kube_server::KubeServer;
use vipflow::model::Loaded;
use vipflow::source::kube::{KubeSourceConfig, start};

const BGP_KINDS: [(&str, &str); 3] = [
    ("BGPPeer", "bgppeers"),
    ("BGPAdvertisement", "bgpadvertisements"),
    ("BFDProfile", "bfdprofiles"),
];

const OBJECTS: &str = r#"
apiVersion: vipflow.io/v1alpha1
kind: BGPPeer
metadata: {name: tor}
spec:
  myASN: 64513
  peerASN: 64512
  peerAddress: 10.9.0.1
  bfdProfile: fast
  nodeSelectors: [{matchLabels: {rack: r1}}]
---
apiVersion: vipflow.io/v1alpha1
kind: BGPPeer
metadata: {name: no-address}
spec: {myASN: 64513, peerASN: 64512}
---
apiVersion: vipflow.io/v1alpha1
kind: BGPAdvertisement
metadata: {name: lab}
spec: {ipAddressPools: [lab], communities: ["64512:100"], localPref: 50}
---
apiVersion: vipflow.io/v1alpha1
kind: BFDProfile
metadata: {name: fast}
spec: {receiveInterval: 300, transmitInterval: 300, detectMultiplier: 3}
"#;

/// The next snapshot from `rx` for which `done` holds, within a generous bound.
async fn snapshot(
    rx: &mut tokio::sync::watch::Receiver<std::sync::Arc<Loaded>>,
    what: &str,
    done: impl Fn(&Loaded) -> bool,
) -> std::sync::Arc<Loaded> {
    let wait = async {
        loop {
            {
                let l = rx.borrow_and_update().clone();
                if l.complete && done(&l) {
                    return l;
                }
            }
            rx.changed().await.expect("the source runs");
        }
    };
    tokio::time::timeout(Duration::from_secs(20), wait)
        .await
        .unwrap_or_else(|_| panic!("no snapshot with {what} in 20 s"))
}

fn names<T>(objects: &[T], meta: impl Fn(&T) -> Option<&str>) -> Vec<String> {
    objects
        .iter()
        .filter_map(|o| meta(o).map(String::from))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bgp_objects_come_from_the_api_as_from_the_objects_file_and_a_bad_one_is_said() {
    let kube = KubeServer::start().await;
    for (kind, plural) in BGP_KINDS {
        kube.register_resource("vipflow.io/v1alpha1", plural, kind, false);
        kube.enable_crd("vipflow.io/v1alpha1", plural);
    }
    kube.apply_yaml(OBJECTS);
    let (mut rx, task) = start(kube.client().await, KubeSourceConfig::default());
    let first = snapshot(&mut rx, "the BGP objects", |l| {
        !l.objects.bgp.bfd_profiles.is_empty()
    })
    .await;
    let bgp = &first.objects.bgp;
    assert_eq!(
        names(&bgp.peers, |p| p.metadata.name.as_deref()),
        ["tor"],
        "the peer without an address is skipped: {bgp:?}"
    );
    assert_eq!(
        names(&bgp.advertisements, |a| a.metadata.name.as_deref()),
        ["lab"]
    );
    assert_eq!(
        names(&bgp.bfd_profiles, |b| b.metadata.name.as_deref()),
        ["fast"]
    );
    let said: Vec<String> = first.problems.iter().map(|p| p.to_string()).collect();
    assert!(
        said.iter()
            .any(|p| p.contains("BGPPeer no-address") && p.contains("peerAddress")),
        "{said:?}"
    );

    // The objects file reads the same text to the same specs and the same problem.
    let file = vipflow::decode::parse(&format!("{OBJECTS}---\nkind: List\nitems: []\n"))
        .expect("the objects file parses");
    assert_eq!(file.objects.bgp.peers.len(), 1);
    assert_eq!(file.objects.bgp.peers[0].spec, bgp.peers[0].spec);
    assert_eq!(
        file.objects.bgp.advertisements[0].spec,
        bgp.advertisements[0].spec
    );
    assert_eq!(
        file.objects.bgp.bfd_profiles[0].spec,
        bgp.bfd_profiles[0].spec
    );
    let file_said: Vec<String> = file.problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(file_said, said, "the same problem either way");

    // A change and a deletion come through the watch.
    kube.apply_yaml(
        "apiVersion: vipflow.io/v1alpha1\nkind: BGPPeer\nmetadata: {name: no-address}\nspec: {myASN: 64513, peerASN: 64512, peerAddress: 10.9.0.2}\n",
    );
    kube.delete("vipflow.io/v1alpha1", "BGPAdvertisement", "", "lab");
    let next = snapshot(&mut rx, "the fixed peer and no advertisement", |l| {
        l.objects.bgp.peers.len() == 2 && l.objects.bgp.advertisements.is_empty()
    })
    .await;
    assert!(next.problems.is_empty(), "{:?}", next.problems);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_the_bgp_kinds_has_no_bgp_objects_and_still_gets_its_snapshot() {
    let kube = KubeServer::start().await;
    let (mut rx, task) = start(kube.client().await, KubeSourceConfig::default());
    let first = snapshot(&mut rx, "a complete world", |_| true).await;
    assert!(first.objects.bgp.peers.is_empty());
    assert!(first.problems.is_empty(), "{:?}", first.problems);
    task.abort();
}

/// MetalLB's kinds as MetalLB's CRDs serve them (namespaced, `BGPPeer` in v1beta2).
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

/// MetalLB's documented BGP example, served by the API server under `metallb.io` as MetalLB's
/// CRDs serve it, comes through the cluster source as through the objects file: the same
/// vipflow objects (aliases written out), the same problems; and a vipflow object of the same
/// name, added later, takes the place of MetalLB's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metallbs_objects_come_from_the_api_as_from_the_objects_file() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/metallb/bgp.yaml"
    ))
    .expect("the fixture");
    let kube = KubeServer::start().await;
    for (api, kind, plural) in METALLB_KINDS {
        kube.register_resource(api, plural, kind, true);
        kube.enable_crd(api, plural);
    }
    for (kind, plural) in BGP_KINDS {
        kube.register_resource("vipflow.io/v1alpha1", plural, kind, false);
        kube.enable_crd("vipflow.io/v1alpha1", plural);
    }
    kube.register_resource("vipflow.io/v1alpha1", "vippools", "VipPool", false);
    kube.enable_crd("vipflow.io/v1alpha1", "vippools");
    kube.apply_yaml(&text);
    let (mut rx, task) = start(kube.client().await, KubeSourceConfig::default());
    let api = snapshot(&mut rx, "MetalLB's objects", |l| {
        l.objects.bgp.advertisements.len() == 4 && !l.objects.pools.is_empty()
    })
    .await;
    let file = vipflow::decode::parse(&text).expect("the objects file parses");
    let sorted = |l: &Loaded| {
        let o = &l.objects;
        let mut v: Vec<String> = o
            .pools
            .iter()
            .map(|p| format!("{:?} {:?}", p.metadata.name, p.spec))
            .chain(
                o.bgp
                    .peers
                    .iter()
                    .map(|p| format!("{:?} {:?}", p.metadata.name, p.spec)),
            )
            .chain(
                o.bgp
                    .advertisements
                    .iter()
                    .map(|a| format!("{:?} {:?}", a.metadata.name, a.spec)),
            )
            .chain(
                o.bgp
                    .bfd_profiles
                    .iter()
                    .map(|b| format!("{:?} {:?}", b.metadata.name, b.spec)),
            )
            .collect();
        v.sort();
        let mut p: Vec<String> = l.problems.iter().map(|p| p.to_string()).collect();
        p.sort();
        (v, p)
    };
    assert_eq!(sorted(&api), sorted(&file), "the API's and the file's");
    assert!(
        vipflow::metallb::became(&api.objects)
            .iter()
            .any(|l| l == "IPAddressPool metallb-system/first-pool -> VipPool first-pool"),
        "{:?}",
        vipflow::metallb::became(&api.objects)
    );

    // vipflow's own pool of the same name: it is used, MetalLB's is said to be left out.
    kube.apply_yaml(
        "apiVersion: vipflow.io/v1alpha1\nkind: VipPool\nmetadata: {name: first-pool}\nspec: {addresses: [203.0.113.0/24]}\n",
    );
    let next = snapshot(&mut rx, "vipflow's first-pool", |l| {
        l.objects
            .pools
            .iter()
            .any(|p| p.spec.addresses == ["203.0.113.0/24"])
    })
    .await;
    assert_eq!(next.objects.pools.len(), 1, "{:?}", next.objects.pools);
    assert!(
        next.problems.iter().any(|p| p
            .to_string()
            .contains("vipflow's VipPool first-pool is used instead")),
        "{:?}",
        next.problems
    );
    task.abort();
}

/// MetalLB's documented L2 examples, served under `metallb.io`, give the cluster source the
/// same `L2Advertisement`s and the same problems (interfaces, serviceSelectors) as the objects
/// file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metallbs_l2_advertisements_come_from_the_api_as_from_the_objects_file() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/metallb/l2.yaml"
    ))
    .expect("the fixture");
    let kube = KubeServer::start().await;
    for (api, kind, plural) in METALLB_KINDS {
        kube.register_resource(api, plural, kind, true);
        kube.enable_crd(api, plural);
    }
    kube.apply_yaml(&text);
    let (mut rx, task) = start(kube.client().await, KubeSourceConfig::default());
    let api = snapshot(&mut rx, "MetalLB's L2 objects", |l| {
        l.objects.l2_advertisements.len() == 8 && !l.objects.pools.is_empty()
    })
    .await;
    let file = vipflow::decode::parse(&text).expect("the objects file parses");
    let sorted = |l: &Loaded| {
        let mut ads: Vec<String> = l
            .objects
            .l2_advertisements
            .iter()
            .map(|a| format!("{:?} {:?}", a.metadata.name, a.spec))
            .collect();
        ads.sort();
        let mut p: Vec<String> = l.problems.iter().map(|p| p.to_string()).collect();
        p.sort();
        (ads, p)
    };
    assert_eq!(sorted(&api), sorted(&file), "the API's and the file's");
    assert_eq!(
        api.problems.len(),
        6,
        "four interfaces, two serviceSelectors: {:?}",
        api.problems
    );
    task.abort();
}
