//! MetalLB's documented example objects (tests/fixtures/metallb, as MetalLB's configuration
//! docs write them) read through the objects file: each becomes the vipflow object a user
//! would write for it, what vipflow does not carry out is said, and vipflow's own objects win.

use super::*;
use crate::ipam::allocator::Allocator;
use crate::ipam::request::AllocRequest;
use crate::model::{ModelOptions, Objects, ServiceKey};
use crate::plan::planner::Planner;

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/../tests/fixtures/metallb/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn load(text: &str) -> Loaded {
    crate::decode::parse(text).expect("the objects parse")
}

/// The problems said of objects whose description contains `of`.
fn said(loaded: &Loaded, of: &str) -> Vec<String> {
    loaded
        .problems
        .iter()
        .filter(|p| p.subject.to_string().contains(of))
        .map(|p| p.reason.clone())
        .collect()
}

/// The vipflow objects a user moving from MetalLB would write for `text`'s MetalLB objects:
/// the same names and fields under vipflow's API group and kinds, cluster-scoped, the community
/// aliases written out, and each peer's families said as vipflow says them.
fn as_vipflows(text: &str) -> String {
    let list: serde_json::Value = serde_yaml_ng::from_str(text).expect("YAML");
    let aliases: BTreeMap<String, String> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["kind"] == "Community")
        .flat_map(|i| {
            i["spec"]["communities"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|c| {
            Some((
                c["name"].as_str()?.to_string(),
                c["value"].as_str()?.to_string(),
            ))
        })
        .collect();
    let items: Vec<serde_json::Value> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["kind"] != "Community")
        .map(|i| {
            let mut i = i.clone();
            i["apiVersion"] = crate::bgp::objects::API_VERSION.into();
            if i["kind"] == "IPAddressPool" {
                i["kind"] = "VipPool".into();
                // vipflow's pools want a CIDR's network written as such.
                if let Some(a) = i["spec"]
                    .get_mut("addresses")
                    .and_then(|a| a.as_array_mut())
                {
                    for e in a {
                        if let Some(t) = e.as_str().map(network_of) {
                            *e = t.into();
                        }
                    }
                }
            }
            if let Some(m) = i["metadata"].as_object_mut() {
                m.remove("namespace");
            }
            let peer = i["kind"] == "BGPPeer";
            let spec = &mut i["spec"];
            if peer {
                let dual = spec["dualStackAddressFamily"].as_bool().unwrap_or(false);
                if let Some(s) = spec.as_object_mut() {
                    s.remove("dualStackAddressFamily");
                    s.insert("disableMP".into(), (!dual).into());
                }
            }
            if let Some(cs) = spec
                .get_mut("communities")
                .and_then(serde_json::Value::as_array_mut)
            {
                for c in cs {
                    if let Some(v) = c.as_str().and_then(|n| aliases.get(n)) {
                        *c = v.clone().into();
                    }
                }
            }
            i
        })
        .collect();
    serde_json::to_string(&serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}))
        .expect("JSON")
}

/// What the planner and the allocator take from a snapshot, without where it came from.
fn taken(o: &Objects) -> (Vec<String>, Vec<String>, Vec<String>, Vec<String>) {
    let mut pools: Vec<String> = o
        .pools
        .iter()
        .map(|p| format!("{:?}", p.to_spec()))
        .collect();
    let mut peers: Vec<String> = o
        .bgp
        .peers
        .iter()
        .map(|p| format!("{:?} {:?}", p.metadata.name, p.spec))
        .collect();
    let mut ads: Vec<String> = o
        .bgp
        .advertisements
        .iter()
        .map(|a| format!("{:?} {:?}", a.metadata.name, a.spec))
        .collect();
    let mut profiles: Vec<String> = o
        .bgp
        .bfd_profiles
        .iter()
        .map(|b| format!("{:?} {:?}", b.metadata.name, b.spec))
        .collect();
    for v in [&mut pools, &mut peers, &mut ads, &mut profiles] {
        v.sort();
    }
    (pools, peers, ads, profiles)
}

/// Nodes, and a LoadBalancer Service in `pool` with VIP `vip` and an endpoint on every node, to
/// plan with.
fn cluster(vip: &str) -> String {
    format!(
        "- {{apiVersion: v1, kind: Node, metadata: {{name: n1, labels: {{rack: a}}}}, status: {{addresses: [{{type: InternalIP, address: 172.30.0.11}}]}}}}
- {{apiVersion: v1, kind: Node, metadata: {{name: n2, labels: {{rack: b}}}}, status: {{addresses: [{{type: InternalIP, address: 172.30.0.12}}]}}}}
- apiVersion: v1
  kind: Service
  metadata: {{name: web, namespace: shop}}
  spec: {{externalIPs: [{vip}], ports: [{{port: 80, protocol: TCP}}]}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{name: web-1, namespace: shop, labels: {{kubernetes.io/service-name: web}}}}
  addressType: IPv4
  ports: [{{port: 80, protocol: TCP}}]
  endpoints: [{{addresses: [10.0.0.9], nodeName: n1, conditions: {{ready: true}}}}, {{addresses: [10.0.1.9], nodeName: n2, conditions: {{ready: true}}}}]
"
    )
}

/// Each node's FRR configuration and prefixes for `objects`.
fn planned(objects: &Objects) -> Vec<(Option<String>, Vec<String>)> {
    ["n1", "n2"]
        .iter()
        .map(|n| {
            let config = crate::bgp::frr_config::for_node(objects, n).0;
            let mut p = Planner::new(ModelOptions::default(), &[], 0x7f1f, None).advertising_as(n);
            let prefixes = p
                .update(objects)
                .bgp
                .map(|b| b.prefixes.iter().map(ToString::to_string).collect())
                .unwrap_or_default();
            (config, prefixes)
        })
        .collect()
}

/// The addresses a Service in `shop` asking for nothing gets from `objects`' pools, one
/// Service after another.
fn allocated(objects: &Objects, services: usize) -> Vec<String> {
    let mut a = Allocator::new(objects.pools.iter().map(|p| p.to_spec()).collect());
    (0..services)
        .map(|i| {
            let req = AllocRequest::holding(ServiceKey::new("shop", &format!("s{i}")));
            match a.assign(&req) {
                Ok(got) => format!("{:?}", got),
                Err(e) => format!("error: {e:?}"),
            }
        })
        .collect()
}

/// MetalLB's documented objects and the vipflow objects a user would write for them give the
/// same pools, peers, advertisements and BFD profiles, the same FRR configuration and prefixes
/// on every node, and the same addresses.
#[test]
fn metallbs_documented_objects_plan_as_the_equivalent_vipflow_objects() {
    let mut seen = Vec::new();
    for (file, vip) in [
        ("bgp.yaml", "198.51.100.20"),
        ("bgp-basic.yaml", "192.168.10.5"),
        ("bgp-nodes.yaml", "198.51.100.20"),
        ("pools.yaml", "192.168.10.5"),
        ("pools-autoassign.yaml", "192.168.10.5"),
    ] {
        let text = fixture(file);
        let theirs = load(&text);
        let ours = load(&as_vipflows(&text));
        assert_eq!(
            taken(&theirs.objects),
            taken(&ours.objects),
            "{file}: what the planner takes"
        );
        assert!(
            !theirs.objects.pools.is_empty() || !theirs.objects.bgp.peers.is_empty(),
            "{file}: something was read"
        );
        let mut theirs_all = theirs.objects.clone();
        let mut ours_all = ours.objects.clone();
        let extra = load(&format!(
            "apiVersion: v1\nkind: List\nitems:\n{}",
            cluster(vip)
        ))
        .objects;
        for o in [&mut theirs_all, &mut ours_all] {
            o.nodes.extend(extra.nodes.iter().cloned());
            o.services.extend(extra.services.iter().cloned());
            o.endpoint_slices
                .extend(extra.endpoint_slices.iter().cloned());
        }
        let plan = planned(&theirs_all);
        assert_eq!(plan, planned(&ours_all), "{file}: what each node plans");
        let given = allocated(&theirs.objects, 3);
        assert_eq!(
            given,
            allocated(&ours.objects, 3),
            "{file}: the addresses given"
        );
        seen.push((file, plan, given));
    }
    // Not vacuous: the BGP example advertises the VIP as a host route and the pool's /24 from
    // every node, and the pools give addresses.
    let (_, plan, _) = &seen[0];
    for (config, prefixes) in plan {
        assert!(
            config
                .as_deref()
                .is_some_and(|c| c.contains("neighbor 172.30.0.3 remote-as 64512"))
        );
        assert_eq!(
            prefixes,
            &["198.51.100.0/24", "198.51.100.20/32"],
            "{seen:#?}"
        );
    }
    let (_, _, given) = &seen[3];
    assert!(given.iter().all(|g| !g.starts_with("error")), "{seen:#?}");
}

#[test]
fn the_bgp_example_becomes_vipflows_objects_and_what_is_not_done_is_said() {
    let loaded = load(&fixture("bgp.yaml"));
    let o = &loaded.objects;
    let pool = o
        .pools
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("first-pool"));
    assert_eq!(
        pool.map(|p| (p.api_version.as_deref(), p.spec.addresses.clone())),
        Some((Some(V1BETA1), vec!["198.51.100.0/24".to_string()]))
    );
    let peer = &o.bgp.peers[0];
    assert_eq!(peer.api_version.as_deref(), Some(V1BETA2));
    assert!(
        peer.spec.disable_mp,
        "one family per session, as MetalLB does"
    );
    assert_eq!(peer.spec.bfd_profile.as_deref(), Some("testbfdprofile"));
    // The alias is written out.
    let vpn = o
        .bgp
        .advertisements
        .iter()
        .find(|a| a.metadata.name.as_deref() == Some("local-vpn-only"))
        .expect("local-vpn-only");
    assert_eq!(vpn.spec.communities, ["1234:1"]);
    // Communities, local preference and peers are carried out: nothing to say.
    let local = said(&loaded, "BGPAdvertisement metallb-system/local");
    assert!(local.is_empty(), "{local:?}");
    assert!(said(&loaded, "BGPAdvertisement metallb-system/example").is_empty());
    assert!(said(&loaded, "BGPAdvertisement metallb-system/external").is_empty());
    assert!(said(&loaded, "BGPPeer").is_empty(), "{:?}", loaded.problems);
}

#[test]
fn peer_fields_vipflow_does_not_do_are_said_and_such_a_peer_is_left_out() {
    let loaded = load(&fixture("bgppeer-variants.yaml"));
    let names: Vec<&str> = loaded
        .objects
        .bgp
        .peers
        .iter()
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    let all: Vec<String> = loaded.problems.iter().map(ToString::to_string).collect();
    // A VRF and a local AS change where the session goes: those peers are left out.
    for field in ["vrf", "localASN"] {
        assert!(
            all.iter()
                .any(|p| p.contains(&format!("{field} is not supported")) && p.contains("skipped")),
            "{field}: {all:#?}"
        );
    }
    assert!(!names.is_empty(), "the plain peers are read: {all:#?}");
}

#[test]
fn a_vipflow_object_wins_over_metallbs_of_the_same_name() {
    let text = "apiVersion: v1\nkind: List\nitems:\n\
        - {apiVersion: metallb.io/v1beta1, kind: IPAddressPool, metadata: {name: blue, namespace: metallb-system}, spec: {addresses: [10.1.0.0/24]}}\n\
        - {apiVersion: vipflow.io/v1alpha1, kind: VipPool, metadata: {name: blue}, spec: {addresses: [10.2.0.0/24]}}\n\
        - {apiVersion: metallb.io/v1beta1, kind: IPAddressPool, metadata: {name: green, namespace: metallb-system}, spec: {addresses: [10.3.0.0/24]}}\n\
        - {apiVersion: metallb.io/v1beta1, kind: IPAddressPool, metadata: {name: green, namespace: other}, spec: {addresses: [10.4.0.0/24]}}\n\
        - {apiVersion: metallb.io/v1beta1, kind: ServiceL2Status, metadata: {name: l2-x, namespace: metallb-system}}\n";
    let loaded = load(text);
    let pools: Vec<(String, Vec<String>)> = loaded
        .objects
        .pools
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap_or_default(),
                p.spec.addresses.clone(),
            )
        })
        .collect();
    assert_eq!(
        pools,
        [
            ("blue".to_string(), vec!["10.2.0.0/24".to_string()]),
            ("green".to_string(), vec!["10.3.0.0/24".to_string()]),
        ]
    );
    let all: Vec<String> = loaded.problems.iter().map(ToString::to_string).collect();
    assert!(
        all.iter()
            .any(|p| p.contains("IPAddressPool metallb-system/blue")
                && p.contains("vipflow's VipPool blue is used instead")),
        "{all:#?}"
    );
    assert!(
        all.iter().any(|p| p.contains("IPAddressPool other/green")
            && p.contains("metallb-system/green has the same name")),
        "{all:#?}"
    );
    assert!(
        all.iter()
            .any(|p| p.contains("ServiceL2Status") && p.contains("not read by vipflow")),
        "{all:#?}"
    );
}

#[test]
fn a_v1beta1_peers_zero_durations_are_no_setting() {
    let loaded = load(
        "apiVersion: v1\nkind: List\nitems:\n\
         - {apiVersion: metallb.io/v1beta1, kind: BGPPeer, metadata: {name: p, namespace: metallb-system}, spec: {myASN: 64512, peerASN: 64513, peerAddress: 10.0.0.1, holdTime: 0s, keepaliveTime: 0s}}\n",
    );
    let p = &loaded.objects.bgp.peers[0];
    assert_eq!(
        (
            p.spec.hold_time.as_deref(),
            p.spec.keepalive_time.as_deref()
        ),
        (None, None)
    );
    assert_eq!(p.api_version.as_deref(), Some(V1BETA1));
}
