//! The objects file of a BGP testbed: its Nodes, the `BGPPeer` and `BFDProfile` every node
//! peers with the router by ([`crate::bgp_testbed::peer_objects`]), one pool (198.51.100.0/24
//! and 2001:db8:100::/64, off every on-link subnet) that a `BGPAdvertisement` selects, and
//! LoadBalancer Services with both families on TCP 80 (and UDP 53) to the testbed's pods.

use crate::bgp_testbed::{Bfd, peer_objects};
use crate::netns::{POD_TCP_PORT, POD_UDP_PORT};
use crate::testbed;

/// One Service: its VIPs, its traffic policy, and the nodes whose pod a is its endpoint.
#[derive(Debug, Clone)]
pub struct BgpService {
    pub name: String,
    pub v4: String,
    pub v6: String,
    /// externalTrafficPolicy Local.
    pub local: bool,
    pub endpoints: Vec<usize>,
}

impl BgpService {
    /// `name` with VIPs 198.51.100.`host` and 2001:db8:100::`host` (the same digits), Cluster,
    /// an endpoint on every node of `nodes`.
    pub fn cluster(name: &str, host: u8, nodes: usize) -> BgpService {
        BgpService {
            name: name.into(),
            v4: format!("198.51.100.{host}"),
            v6: format!("2001:db8:100::{host}"),
            local: false,
            endpoints: (1..=nodes).collect(),
        }
    }

    /// As [`BgpService::cluster`], externalTrafficPolicy Local with endpoints on `endpoints`.
    pub fn local(name: &str, host: u8, endpoints: &[usize]) -> BgpService {
        BgpService {
            local: true,
            endpoints: endpoints.to_vec(),
            ..BgpService::cluster(name, host, 0)
        }
    }
}

/// The objects file's text.
#[derive(Debug, Clone)]
pub struct BgpObjects {
    pub nodes: usize,
    pub bfd: Bfd,
    pub services: Vec<BgpService>,
    /// Nodes marked for drain.
    pub drained: Vec<usize>,
    /// Nodes cordoned (`spec.unschedulable`), as `kubectl drain` leaves them.
    pub cordoned: Vec<usize>,
    /// The `BGPPeer`'s `connectTime` (how soon a node tries its session again), if set.
    pub connect_time: Option<&'static str>,
}

impl BgpObjects {
    pub fn new(nodes: usize, bfd: Bfd) -> BgpObjects {
        BgpObjects {
            nodes,
            bfd,
            services: Vec::new(),
            drained: Vec::new(),
            cordoned: Vec::new(),
            connect_time: None,
        }
    }

    pub fn yaml(&self) -> String {
        let api = "vipflow.io/v1alpha1";
        let mut y = String::from("apiVersion: v1\nkind: List\nitems:\n");
        for i in 1..=self.nodes {
            let drain = if self.drained.contains(&i) {
                ", annotations: {vipflow.io/drain: 'true'}"
            } else {
                ""
            };
            let spec = if self.cordoned.contains(&i) {
                "  spec: {unschedulable: true}\n"
            } else {
                ""
            };
            y += &format!(
                "- apiVersion: v1\n  kind: Node\n  metadata: {{name: node{i}{drain}}}\n{spec}  status:\n    addresses: [{{type: InternalIP, address: {}}}]\n    conditions: [{{type: Ready, status: 'True'}}]\n",
                testbed::node_ip(i)
            );
        }
        let peers = peer_objects(self.bfd);
        y += &match self.connect_time {
            Some(t) => peers.replacen("bfdProfile:", &format!("connectTime: {t}, bfdProfile:"), 1),
            None => peers,
        };
        y += &format!(
            "- apiVersion: {api}\n  kind: VipPool\n  metadata: {{name: bgp}}\n  spec: {{addresses: [198.51.100.0/24, '2001:db8:100::/64']}}\n\
             - apiVersion: {api}\n  kind: BGPAdvertisement\n  metadata: {{name: all}}\n  spec: {{}}\n"
        );
        for s in &self.services {
            y += &service_yaml(s);
        }
        y
    }
}

fn service_yaml(s: &BgpService) -> String {
    let policy = if s.local { "Local" } else { "Cluster" };
    let mut y = format!(
        "- apiVersion: v1\n  kind: Service\n  metadata: {{name: {name}, namespace: demo, creationTimestamp: \"2026-01-10T08:00:00Z\"}}\n  spec:\n    type: LoadBalancer\n    externalTrafficPolicy: {policy}\n    ipFamilies: [IPv4, IPv6]\n    ports:\n    - {{name: http, port: 80, protocol: TCP, targetPort: {POD_TCP_PORT}}}\n    - {{name: dns, port: 53, protocol: UDP, targetPort: {POD_UDP_PORT}}}\n  status: {{loadBalancer: {{ingress: [{{ip: \"{v4}\", ipMode: VIP}}, {{ip: \"{v6}\", ipMode: VIP}}]}}}}\n",
        name = s.name,
        v4 = s.v4,
        v6 = s.v6
    );
    for (family, v6) in [("IPv4", false), ("IPv6", true)] {
        let eps: String = s
            .endpoints
            .iter()
            .map(|&i| {
                let ip = if v6 {
                    testbed::pod_ip6(i, 'a')
                } else {
                    testbed::pod_ip(i, 'a')
                };
                format!("  - {{addresses: [\"{ip}\"], nodeName: node{i}, conditions: {{ready: true}}}}\n")
            })
            .collect();
        let eps = if eps.is_empty() {
            "  endpoints: []\n".to_string()
        } else {
            format!("  endpoints:\n{eps}")
        };
        y += &format!(
            "- apiVersion: discovery.k8s.io/v1\n  kind: EndpointSlice\n  metadata: {{name: {name}-{f}, namespace: demo, labels: {{kubernetes.io/service-name: {name}}}}}\n  addressType: {family}\n  ports:\n  - {{name: http, port: {POD_TCP_PORT}, protocol: TCP}}\n  - {{name: dns, port: {POD_UDP_PORT}, protocol: UDP}}\n{eps}",
            name = s.name,
            f = if v6 { 6 } else { 4 },
        );
    }
    y
}

/// The custom kinds a BGP testbed's objects use, as deploy/*-crd.yaml serve them.
const CUSTOM_KINDS: [(&str, &str); 4] = [
    ("vippools", "VipPool"),
    ("bgppeers", "BGPPeer"),
    ("bgpadvertisements", "BGPAdvertisement"),
    ("bfdprofiles", "BFDProfile"),
];

impl BgpObjects {
    /// Make the Kubernetes API test server serve the custom kinds these objects use, as a
    /// cluster with vipflow's CRDs installed does.
    pub fn serve_kinds(srv: &crate::kube_server::KubeServer) {
        for (plural, kind) in CUSTOM_KINDS {
            srv.register_resource("vipflow.io/v1alpha1", plural, kind, false);
            srv.enable_crd("vipflow.io/v1alpha1", plural);
        }
    }

    /// Bring the API server's objects to these: every object written (a changed one updated),
    /// and the Services (with their EndpointSlices) these no longer have deleted.
    /// Only what changed is written, as a cluster sees one change at a time.
    pub fn apply_to(&self, srv: &crate::kube_server::KubeServer) {
        use serde::Deserialize;
        let text = self.yaml();
        let list = serde_yaml_ng::Deserializer::from_str(&text)
            .next()
            .and_then(|d| serde_json::Value::deserialize(d).ok())
            .unwrap_or_default();
        for item in list["items"].as_array().into_iter().flatten() {
            let m = &item["metadata"];
            let stored = srv.get(
                item["apiVersion"].as_str().unwrap_or_default(),
                item["kind"].as_str().unwrap_or_default(),
                m["namespace"].as_str().unwrap_or_default(),
                m["name"].as_str().unwrap_or_default(),
            );
            let same = stored.is_some_and(|s| {
                within(item, &s)
                    && ["labels", "annotations"]
                        .iter()
                        .all(|k| m[k] == s["metadata"][k])
            });
            if !same {
                srv.apply(item.clone());
            }
        }
        for s in srv.list("v1", "Service") {
            let name = s["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if self.services.iter().any(|k| k.name == name) {
                continue;
            }
            let ns = s["metadata"]["namespace"]
                .as_str()
                .unwrap_or("demo")
                .to_string();
            for f in [4, 6] {
                srv.delete(
                    "discovery.k8s.io/v1",
                    "EndpointSlice",
                    &ns,
                    &format!("{name}-{f}"),
                );
            }
            srv.delete("v1", "Service", &ns, &name);
        }
    }
}

/// Whether every field `want` sets has the same value in `have` (what the server adds, such
/// as `uid` or `resourceVersion`, aside).
fn within(want: &serde_json::Value, have: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => w
            .iter()
            .all(|(k, v)| h.get(k).is_some_and(|hv| within(v, hv))),
        (Value::Array(w), Value::Array(h)) => {
            w.len() == h.len() && w.iter().zip(h).all(|(a, b)| within(a, b))
        }
        _ => want == have,
    }
}
