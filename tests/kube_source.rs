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
