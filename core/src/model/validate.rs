//! From Kubernetes objects to the model: each Service, EndpointSlice and Node validated on its
//! own (what cannot be used is a [`Problem`], the rest still counts), and VIP:port claims
//! given to the oldest Service.

use crate::keys::{CHASSIS_ID_ANNOTATION, L3_GATEWAY_CONFIG_ANNOTATION, PREFER_LOCAL_ANNOTATION};
use crate::model::Endpoint;
use crate::model::EndpointPort;
use crate::model::EndpointSlice;
use crate::model::ModelOptions;
use crate::model::Node;
use crate::model::Protocol;
use crate::model::Service;
use crate::model::ServiceKey;
use crate::model::SocketLike;
use crate::model::TargetPort;
use crate::model::TrafficPolicy;
use crate::model::VipPort;
use crate::model::kept::KeptMeta;
use crate::model::kept::KeptService;
use crate::model::kept::KeptSlice;
use crate::model::kept::Text;
use crate::model::not_routable;
use crate::model::problem::Problem;
use crate::model::problem::ProblemKind;
use crate::model::problem::Subject;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
/// The cluster IPs a Service object holds (clusterIP and clusterIPs), parsed, each once.
pub(crate) fn cluster_ips_of(s: &KeptService) -> Vec<IpAddr> {
    let Some(sp) = s.spec.as_ref() else {
        return Vec::new();
    };
    let mut v: Vec<IpAddr> = sp
        .cluster_ips
        .iter()
        .flatten()
        .chain(sp.cluster_ip.iter())
        .filter_map(|ip| ip.parse().ok())
        .collect();
    v.sort();
    v.dedup();
    v
}

pub(crate) fn meta_key(m: &KeptMeta) -> Option<ServiceKey> {
    Some(ServiceKey::new(
        m.namespace.as_deref().unwrap_or("default"),
        m.name.as_deref()?,
    ))
}

/// The MAC of a node's OVN gateway router as OVN-Kubernetes publishes it. `Ok(None)`: no
/// annotation, or the gateway is disabled (mode ""). An annotation that does not read is an
/// error, with why.
pub fn gateway_router_mac(node: &core::Node) -> Result<Option<openflow::oxm::MacAddr>, String> {
    let Some(text) = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(L3_GATEWAY_CONFIG_ANNOTATION))
    else {
        return Ok(None);
    };
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let d = v
        .get("default")
        .and_then(serde_json::Value::as_object)
        .ok_or("no \"default\" object")?;
    if d.get("mode").and_then(serde_json::Value::as_str) == Some("") {
        return Ok(None);
    }
    let mac = d
        .get("mac-address")
        .and_then(serde_json::Value::as_str)
        .ok_or("no \"mac-address\" in \"default\"")?;
    crate::config::parse_mac(mac).map(Some)
}

/// This node's gateway router MAC (see [`gateway_router_mac`]); a bad annotation is a
/// [`Problem`] of the Node.
pub fn node_gateway_router_mac(
    nodes: &[Arc<core::Node>],
    node_name: &str,
) -> Result<Option<openflow::oxm::MacAddr>, Problem> {
    let Some(n) = nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node_name))
    else {
        return Ok(None);
    };
    gateway_router_mac(n).map_err(|why| {
        Problem::new(
            Subject::Node(node_name.to_string()),
            ProblemKind::Invalid,
            format!("annotation {L3_GATEWAY_CONFIG_ANNOTATION}: {why}; the bridge MAC is used"),
        )
    })
}

pub(crate) fn build_nodes(
    nodes: &[Arc<core::Node>],
    problems: &mut Vec<Problem>,
) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    for n in nodes {
        let Some(name) = n.metadata.name.clone() else {
            problems.push(Problem::new(
                Subject::Unnamed("Node"),
                ProblemKind::Invalid,
                "no metadata.name",
            ));
            continue;
        };
        let mut addresses = Vec::new();
        for a in n.status.iter().flat_map(|s| s.addresses.iter().flatten()) {
            // Hostname, InternalDNS and ExternalDNS carry names, not IPs.
            if matches!(a.type_.as_str(), "Hostname" | "InternalDNS" | "ExternalDNS") {
                continue;
            }
            match a.address.parse::<IpAddr>() {
                Ok(ip) => addresses.push(ip),
                Err(_) => problems.push(Problem::new(
                    Subject::Node(name.clone()),
                    ProblemKind::Invalid,
                    format!("address {:?} is not an IP", a.address),
                )),
            }
        }
        let chassis = n
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CHASSIS_ID_ANNOTATION))
            .filter(|c| !c.is_empty())
            .cloned();
        out.insert(
            name.clone(),
            Node {
                name,
                addresses,
                chassis,
            },
        );
    }
    out
}

pub(crate) fn build_service(
    svc: &KeptService,
    opts: &ModelOptions,
    node_ips: &BTreeSet<IpAddr>,
    cluster_ips: &BTreeSet<IpAddr>,
    problems: &mut Vec<Problem>,
) -> Option<Service> {
    let Some(key) = svc.key() else {
        problems.push(Problem::new(
            Subject::Unnamed("Service"),
            ProblemKind::Invalid,
            "no metadata.name",
        ));
        return None;
    };
    let spec = svc.spec.as_ref()?;
    // Named only when there is a problem: most Services have none.
    let mut problem = |vip: Option<String>, reason: String| {
        problems.push(
            Problem::new(Subject::Service(key.clone()), ProblemKind::Invalid, reason).with_vip(vip),
        );
    };

    // VIPs, in order of appearance, each once.
    let mut vips: Vec<IpAddr> = Vec::new();
    let mut add_vip = |raw: &str, problem: &mut dyn FnMut(Option<String>, String)| {
        let ip = match raw.trim().parse::<IpAddr>() {
            Ok(ip) => ip,
            Err(_) => return problem(Some(raw.into()), "not an IP address; skipped".into()),
        };
        if ip.is_unspecified() || ip.is_loopback() || ip.is_multicast() || not_routable(ip) {
            return problem(
                Some(raw.into()),
                "not a usable unicast address; skipped".into(),
            );
        }
        if node_ips.contains(&ip) {
            return problem(Some(raw.into()), "is a node address; skipped".into());
        }
        if cluster_ips.contains(&ip) {
            return problem(Some(raw.into()), "is a cluster IP; skipped".into());
        }
        if !vips.contains(&ip) {
            vips.push(ip);
        }
    };
    for ip in spec.external_ips.iter().flatten() {
        add_vip(ip, &mut problem);
    }
    let is_lb = spec.type_.as_deref() == Some("LoadBalancer");
    let class_ok = match &opts.load_balancer_class {
        None => true,
        Some(c) => spec.load_balancer_class.as_deref() == Some(c.as_str()),
    };
    if is_lb && class_ok {
        let ingress = svc
            .status
            .iter()
            .filter_map(|s| s.load_balancer.as_ref())
            .flat_map(|lb| lb.ingress.iter().flatten());
        for ing in ingress {
            // ipMode Proxy: the external LB proxies the traffic, the VIP never reaches nodes.
            if ing.ip_mode.as_deref() == Some("Proxy") {
                continue;
            }
            if let Some(ip) = &ing.ip {
                add_vip(ip, &mut problem);
            }
        }
    }

    // Ports.
    let mut ports: Vec<(u16, Protocol, TargetPort, Option<Text>)> = Vec::new();
    for p in spec.ports.iter().flatten() {
        let label = p.name.clone().unwrap_or_else(|| p.port.to_string().into());
        let Some(port) = u16::try_from(p.port).ok().filter(|&n| n != 0) else {
            problem(
                None,
                format!("port {label}: {} is not a valid port; skipped", p.port),
            );
            continue;
        };
        let Some(protocol) = Protocol::parse(p.protocol.as_deref()) else {
            problem(
                None,
                format!(
                    "port {label}: unknown protocol {:?}; skipped",
                    p.protocol.as_deref().unwrap_or("")
                ),
            );
            continue;
        };
        let target = match &p.target_port {
            None => TargetPort::Number(port),
            Some(IntOrString::Int(n)) => match u16::try_from(*n).ok().filter(|&n| n != 0) {
                Some(n) => TargetPort::Number(n),
                None => {
                    problem(
                        None,
                        format!("port {label}: targetPort {n} is not a valid port; skipped"),
                    );
                    continue;
                }
            },
            Some(IntOrString::String(s)) if s.is_empty() => TargetPort::Number(port),
            Some(IntOrString::String(s)) => match s.parse::<u16>() {
                Ok(0) => {
                    problem(
                        None,
                        format!("port {label}: targetPort 0 is not a valid port; skipped"),
                    );
                    continue;
                }
                Ok(n) => TargetPort::Number(n),
                // All digits but too large: a mistyped number, not a port name (names must
                // contain a letter).
                Err(_) if s.bytes().all(|b| b.is_ascii_digit()) => {
                    problem(
                        None,
                        format!("port {label}: targetPort {s} is not a valid port; skipped"),
                    );
                    continue;
                }
                Err(_) => TargetPort::Name(s.as_str().into()),
            },
        };
        if ports
            .iter()
            .any(|(q, pr, ..)| *q == port && *pr == protocol)
        {
            problem(
                None,
                format!("port {port}/{protocol} listed twice; the first one is used"),
            );
            continue;
        }
        ports.push((port, protocol, target, p.name.clone()));
    }
    if !vips.is_empty() && ports.is_empty() {
        problem(
            None,
            "has VIPs but no valid port; nothing to program".into(),
        );
    }

    let mut vip_ports: Vec<VipPort> = vips
        .iter()
        .flat_map(|&vip| {
            ports
                .iter()
                .map(move |(port, protocol, target, name)| VipPort {
                    vip,
                    port: *port,
                    protocol: *protocol,
                    target: target.clone(),
                    port_name: name.clone(),
                })
        })
        .collect();
    vip_ports.sort();
    // Kept for as long as the Service is unchanged.
    vip_ports.shrink_to_fit();

    let traffic_policy = match spec.external_traffic_policy.as_deref() {
        Some("Local") => TrafficPolicy::Local,
        _ => TrafficPolicy::Cluster,
    };
    let annotation = svc
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PREFER_LOCAL_ANNOTATION));
    let prefer_local = annotation.is_some_and(|v| v.eq_ignore_ascii_case("true"));
    // A typo ("yes", "ture") would otherwise leave prefer-local off without a word.
    if let Some(v) =
        annotation.filter(|v| !v.eq_ignore_ascii_case("true") && !v.eq_ignore_ascii_case("false"))
    {
        problem(
            None,
            format!(
                "annotation {PREFER_LOCAL_ANNOTATION}={v:?} is neither \"true\" nor \"false\"; \
                 prefer-local stays off"
            ),
        );
    }
    let created = svc.metadata.creation_timestamp.as_ref().map(|t| t.0);
    Some(Service {
        key,
        created,
        traffic_policy,
        prefer_local,
        vip_ports,
    })
}

/// A Service's place in a VIP:port conflict: lower wins.
pub type Rank = (bool, Option<k8s_openapi::jiff::Timestamp>, ServiceKey);

/// The oldest Service wins, then by namespace/name. Services without a timestamp sort after
/// every dated one. Times compare as times: as text, "08:00:00.5Z" would sort before
/// "08:00:00Z".
pub(crate) fn rank(s: &Service) -> Rank {
    (s.created.is_none(), s.created, s.key.clone())
}

/// Keep one owner per VIP:port/protocol: the oldest Service, then by namespace/name.
pub(crate) fn resolve_conflicts(
    services: &mut BTreeMap<ServiceKey, Service>,
    problems: &mut Vec<Problem>,
) {
    let mut owner: BTreeMap<(IpAddr, u16, Protocol), &Service> = BTreeMap::new();
    for s in services.values() {
        for vp in &s.vip_ports {
            let k = (vp.vip, vp.port, vp.protocol);
            match owner.get(&k) {
                Some(o) if rank(o) <= rank(s) => {}
                _ => {
                    owner.insert(k, s);
                }
            }
        }
    }
    let winners: BTreeMap<(IpAddr, u16, Protocol), ServiceKey> =
        owner.into_iter().map(|(k, s)| (k, s.key.clone())).collect();
    for s in services.values_mut() {
        s.vip_ports.retain(|vp| {
            let w = &winners[&(vp.vip, vp.port, vp.protocol)];
            if *w == s.key {
                return true;
            }
            problems.push(
                Problem::new(
                    Subject::Service(s.key.clone()),
                    ProblemKind::ConflictLost,
                    format!("also claimed by the older Service {w}; conflict lost"),
                )
                .with_vip(Some(SocketLike::of(vp).to_string())),
            );
            false
        });
    }
}

/// The Service an EndpointSlice belongs to (by its `kubernetes.io/service-name` label).
/// Slices without it are not managed for a Service (custom controllers): not ours to use.
pub(crate) fn slice_service_key(s: &KeptSlice) -> Option<ServiceKey> {
    let svc = s.service_name.as_deref()?;
    Some(ServiceKey::new(
        s.namespace.as_deref().unwrap_or("default"),
        svc,
    ))
}

pub(crate) fn build_slices<'a>(
    slices: impl IntoIterator<Item = &'a Arc<KeptSlice>>,
    problems: &mut Vec<Problem>,
) -> BTreeMap<ServiceKey, Vec<EndpointSlice>> {
    let mut out: BTreeMap<ServiceKey, Vec<EndpointSlice>> = BTreeMap::new();
    for s in slices {
        if let Some((key, slice)) = build_slice(s, problems) {
            out.entry(key).or_default().push(slice);
        }
    }
    for v in out.values_mut() {
        v.sort_by(|a, b| a.name.cmp(&b.name));
    }
    out
}

/// What `build_slices` reports of `slices`, each slice dropped once it is checked: for
/// what reads only the problems.
pub fn slice_problems<'a>(
    slices: impl IntoIterator<Item = &'a Arc<KeptSlice>>,
    problems: &mut Vec<Problem>,
) {
    for s in slices {
        let _ = build_slice(s, problems);
    }
}

/// One EndpointSlice, validated, with the Service it belongs to; `None` for a slice that
/// names no Service.
fn build_slice(s: &KeptSlice, problems: &mut Vec<Problem>) -> Option<(ServiceKey, EndpointSlice)> {
    let key = slice_service_key(s)?;
    let name = s.name.clone().unwrap_or_default();
    let object = || Subject::EndpointSlice {
        namespace: key.namespace.to_string(),
        name: name.to_string(),
    };
    let mut ports = Vec::new();
    for p in s.ports.iter().flatten() {
        let Some(port) = p
            .port
            .and_then(|n| u16::try_from(n).ok())
            .filter(|&n| n != 0)
        else {
            problems.push(Problem::new(
                object(),
                ProblemKind::Invalid,
                format!("port {:?} is not valid; skipped", p.port),
            ));
            continue;
        };
        let Some(protocol) = Protocol::parse(p.protocol.as_deref()) else {
            problems.push(Problem::new(
                object(),
                ProblemKind::Invalid,
                format!("unknown protocol {:?}; skipped", p.protocol),
            ));
            continue;
        };
        ports.push(EndpointPort {
            name: p.name.clone(),
            port,
            protocol,
        });
    }
    let mut endpoints = Vec::new();
    for e in &s.endpoints {
        let mut addresses = Vec::new();
        for a in &e.addresses {
            match a.parse::<IpAddr>() {
                Ok(ip) => addresses.push(ip),
                // FQDN slices and garbage alike: not usable as a backend.
                Err(_) => problems.push(Problem::new(
                    object(),
                    ProblemKind::Invalid,
                    format!("address {a:?} is not an IP; skipped"),
                )),
            }
        }
        if addresses.is_empty() {
            continue;
        }
        let c = e.conditions.as_ref();
        // Kubernetes (discovery/v1 EndpointConditions): nil ready and nil serving are
        // interpreted as true, nil terminating as false.
        let ready = c.and_then(|c| c.ready).unwrap_or(true);
        let serving = c.and_then(|c| c.serving).unwrap_or(true);
        let terminating = c.and_then(|c| c.terminating).unwrap_or(false);
        endpoints.push(Endpoint {
            addresses,
            node: e.node_name.clone(),
            pod: e.pod.clone(),
            ready,
            serving,
            terminating,
        });
    }
    Some((
        key,
        EndpointSlice {
            name,
            ports,
            endpoints,
        },
    ))
}
