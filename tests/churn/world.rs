//! The churned world: Services, EndpointSlices and Nodes changed by a seeded random sequence of
//! operations, rendered as Kubernetes objects (JSON, which the file source and the API test
//! server both take).

use serde_json::{Value, json};
use std::collections::BTreeMap;

/// xorshift64*: tiny, seedable, and the same sequence on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// The seed of this run: `CHURN_SEED` if set, else the clock. Printed so a failure replays.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("CHURN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    println!("{test}: churn seed {seed} (replay with CHURN_SEED={seed})");
    seed
}

pub const NODES: usize = 4;
const PORTS: [(u16, &str); 5] = [
    (80, "TCP"),
    (443, "TCP"),
    (53, "UDP"),
    (8443, "TCP"),
    (3868, "SCTP"),
];
/// VIPs are drawn from a pool small enough that Services sometimes claim the same VIP:port.
const VIP_POOL: usize = 300;
/// The pod switch's subnet: the first 62 IPv4 VIPs of the pool fall into it.
pub const POD_SUBNET: &str = "172.19.0.0/26";

pub fn v4(i: usize) -> String {
    format!("172.19.{}.{}", i / 250, i % 250 + 1)
}

fn v6(i: usize) -> String {
    format!("fd00:19::{:x}", i + 1)
}

#[derive(Clone, Debug)]
struct Svc {
    v4: Option<usize>,
    v6: Option<usize>,
    ports: Vec<usize>,
    local: bool,
    /// (node index, ready) per endpoint.
    eps: Vec<(usize, bool)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    AddService,
    RemoveService,
    ChangeVips,
    ChangePorts,
    FlipTrafficPolicy,
    SetEndpoints,
    FlipNode,
}

pub struct World {
    services: BTreeMap<usize, Svc>,
    nodes: [bool; NODES],
    next_id: usize,
    max_services: usize,
}

impl World {
    pub fn new(rng: &mut Rng, services: usize, max_services: usize) -> World {
        let mut w = World {
            services: BTreeMap::new(),
            nodes: [true; NODES],
            next_id: 0,
            max_services,
        };
        for _ in 0..services {
            w.add(rng);
        }
        w
    }

    fn add(&mut self, rng: &mut Rng) {
        let id = self.next_id;
        self.next_id += 1;
        let mut s = Svc {
            v4: None,
            v6: None,
            ports: Vec::new(),
            local: rng.chance(30),
            eps: Vec::new(),
        };
        Self::vips(&mut s, rng);
        Self::ports(&mut s, rng);
        Self::endpoints(&mut s, rng);
        self.services.insert(id, s);
    }

    fn vips(s: &mut Svc, rng: &mut Rng) {
        s.v4 = Some(rng.below(VIP_POOL));
        s.v6 = rng.chance(30).then(|| rng.below(VIP_POOL));
        if rng.chance(10) {
            // IPv6 only.
            s.v4 = None;
            s.v6 = Some(rng.below(VIP_POOL));
        }
    }

    fn ports(s: &mut Svc, rng: &mut Rng) {
        let n = 1 + rng.below(2);
        s.ports.clear();
        while s.ports.len() < n {
            let p = rng.below(PORTS.len());
            if !s.ports.contains(&p) {
                s.ports.push(p);
            }
        }
    }

    fn endpoints(s: &mut Svc, rng: &mut Rng) {
        s.eps = (0..rng.below(4))
            .map(|_| (rng.below(NODES), rng.chance(85)))
            .collect();
    }

    fn pick(&self, rng: &mut Rng) -> Option<usize> {
        if self.services.is_empty() {
            return None;
        }
        self.services
            .keys()
            .nth(rng.below(self.services.len()))
            .copied()
    }

    /// One random operation, applied.
    pub fn step(&mut self, rng: &mut Rng) -> Op {
        let roll = rng.below(100);
        let op = match roll {
            0..15 => Op::AddService,
            15..25 => Op::RemoveService,
            25..40 => Op::ChangeVips,
            40..50 => Op::ChangePorts,
            50..58 => Op::FlipTrafficPolicy,
            58..96 => Op::SetEndpoints,
            _ => Op::FlipNode,
        };
        let op = match op {
            Op::AddService if self.services.len() >= self.max_services => Op::RemoveService,
            Op::RemoveService if self.services.len() <= 1 => Op::AddService,
            op => op,
        };
        match op {
            Op::AddService => self.add(rng),
            Op::RemoveService => {
                if let Some(id) = self.pick(rng) {
                    self.services.remove(&id);
                }
            }
            Op::FlipNode => {
                let n = rng.below(NODES);
                self.nodes[n] = !self.nodes[n];
            }
            _ => {
                if let Some(s) = self.pick(rng).and_then(|id| self.services.get_mut(&id)) {
                    match op {
                        Op::ChangeVips => Self::vips(s, rng),
                        Op::ChangePorts => Self::ports(s, rng),
                        Op::FlipTrafficPolicy => s.local = !s.local,
                        _ => Self::endpoints(s, rng),
                    }
                }
            }
        }
        op
    }

    /// Every object, keyed by (apiVersion, kind, namespace, name).
    pub fn objects(&self) -> BTreeMap<(String, String, String, String), Value> {
        let mut out = BTreeMap::new();
        let mut put = |v: Value| {
            let key = (
                v["apiVersion"].as_str().unwrap_or_default().to_string(),
                v["kind"].as_str().unwrap_or_default().to_string(),
                v["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                v["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
            out.insert(key, v);
        };
        for (n, up) in self.nodes.iter().enumerate() {
            if *up {
                put(json!({
                    "apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": format!("node-{n}")},
                    "status": {"addresses": [{"type": "InternalIP", "address": format!("192.168.10.{}", 11 + n)}]}
                }));
            }
        }
        for (id, s) in &self.services {
            let name = format!("svc-{id}");
            let ports: Vec<Value> = s
                .ports
                .iter()
                .map(|&p| {
                    let (port, proto) = PORTS[p];
                    json!({"name": format!("p{port}-{}", proto.to_lowercase()), "port": port, "protocol": proto, "targetPort": 8080})
                })
                .collect();
            let vips: Vec<String> = s.v4.map(v4).into_iter().chain(s.v6.map(v6)).collect();
            put(json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {
                    "name": name, "namespace": "churn",
                    "creationTimestamp": format!("2026-02-01T{:02}:{:02}:{:02}Z", id / 3600 % 24, id / 60 % 60, id % 60)
                },
                "spec": {
                    "type": "ClusterIP",
                    "externalIPs": vips,
                    "externalTrafficPolicy": if s.local { "Local" } else { "Cluster" },
                    "ports": ports
                }
            }));
            let slice_ports: Vec<Value> = s
                .ports
                .iter()
                .map(|&p| {
                    let (port, proto) = PORTS[p];
                    json!({"name": format!("p{port}-{}", proto.to_lowercase()), "port": 8080, "protocol": proto})
                })
                .collect();
            for (family, suffix) in [("IPv4", "x4"), ("IPv6", "x6")] {
                if family == "IPv6" && s.v6.is_none() {
                    continue;
                }
                let eps: Vec<Value> = s
                    .eps
                    .iter()
                    .enumerate()
                    .map(|(k, (node, ready))| {
                        let addr = if family == "IPv4" {
                            format!("10.{}.{}.{}", 245 + k, id / 250, id % 250 + 1)
                        } else {
                            format!("fd00:245:{k}::{:x}", id + 1)
                        };
                        json!({
                            "addresses": [addr],
                            "nodeName": format!("node-{node}"),
                            "conditions": {"ready": ready, "serving": ready, "terminating": false}
                        })
                    })
                    .collect();
                put(json!({
                    "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {
                        "name": format!("{name}-{suffix}"), "namespace": "churn",
                        "labels": {"kubernetes.io/service-name": name}
                    },
                    "addressType": family,
                    "ports": slice_ports,
                    "endpoints": eps
                }));
            }
        }
        out
    }

    /// The objects file: a List, as `kubectl get ... -o json` prints it.
    pub fn file_text(&self) -> String {
        let items: Vec<Value> = self.objects().into_values().collect();
        serde_json::to_string_pretty(&json!({"apiVersion": "v1", "kind": "List", "items": items}))
            .unwrap_or_default()
    }
}
