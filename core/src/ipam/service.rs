//! What a Service asks of the allocator, read from its object: its type and class, the
//! address and pool it names (vipflow's annotations, or MetalLB's and Antrea's as aliases, so
//! that Services move over unedited), its sharing key, families, ports and selector; what its
//! status holds, and the terms vipflow recorded when it wrote that status.

use super::pool::Family;
use super::request::{AllocRequest, StackPolicy, Terms};
use crate::keys::{IPS_ANNOTATIONS, POOL_ANNOTATIONS, SHARING_ANNOTATIONS};
use crate::model::{Protocol, ServiceKey};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use thiserror::Error;

/// The Service status condition vipflow writes with the addresses; its message is a
/// [`AllocationRecord`] in JSON.
pub const CONDITION: &str = "vipflow.io/Allocated";

/// What a Service asks, and what it has.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceAsk {
    pub request: AllocRequest,
    /// The addresses its status names, in order.
    pub current: Vec<IpAddr>,
    /// The terms vipflow recorded with that status (`None`: none, or not vipflow's).
    pub written: Option<Terms>,
    pub created: Option<Time>,
}

/// A Service's request that cannot be read; its addresses stay as they are.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AskError {
    #[error("{key}: `{value}` is not an IP address")]
    BadAddress { key: String, value: String },
    #[error("{key} names more than one address of a family")]
    TwoOfAFamily { key: String },
    #[error("{a} and {b} ask for different {what}")]
    Disagree {
        a: String,
        b: String,
        what: &'static str,
    },
    #[error("spec.ipFamilyPolicy `{0}` is not SingleStack, PreferDualStack or RequireDualStack")]
    BadPolicy(String),
    #[error("spec.ipFamilies: `{0}` is not IPv4 or IPv6")]
    BadFamily(String),
    #[error("port {0} is out of range")]
    BadPort(i32),
    #[error("port protocol `{0}` is not TCP, UDP or SCTP")]
    BadProtocol(String),
}

impl AskError {
    /// A short, stable reason for Events and metric labels.
    pub fn reason(&self) -> &'static str {
        "BadRequest"
    }
}

/// Whether `svc` is a LoadBalancer vipflow allocates for (`class`: the loadBalancerClass it
/// serves besides none), and if so what it asks. `Ok(None)`: not vipflow's (any addresses it
/// held go back).
pub fn read(svc: &Service, class: Option<&str>) -> Result<Option<ServiceAsk>, AskError> {
    let Some(spec) = &svc.spec else {
        return Ok(None);
    };
    if spec.type_.as_deref() != Some("LoadBalancer") {
        return Ok(None);
    }
    if let Some(c) = &spec.load_balancer_class
        && Some(c.as_str()) != class
    {
        return Ok(None);
    }
    let meta = &svc.metadata;
    let empty = BTreeMap::new();
    let annotations = meta.annotations.as_ref().unwrap_or(&empty);
    let service = ServiceKey::new(
        meta.namespace.as_deref().unwrap_or("default"),
        meta.name.as_deref().unwrap_or_default(),
    );

    let mut requested_ips = Vec::new();
    let mut ips_from: Option<(String, BTreeSet<IpAddr>)> = None;
    let named = IPS_ANNOTATIONS
        .iter()
        .filter_map(|k| annotations.get(*k).map(|v| (k.to_string(), v.clone())))
        .chain(
            spec.load_balancer_ip
                .iter()
                .filter(|v| !v.is_empty())
                .map(|v| ("spec.loadBalancerIP".to_string(), v.clone())),
        );
    for (key, value) in named {
        let mut these = Vec::new();
        for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let ip: IpAddr = part.parse().map_err(|_| AskError::BadAddress {
                key: key.clone(),
                value: part.into(),
            })?;
            if these.iter().any(|o: &IpAddr| o.is_ipv4() == ip.is_ipv4()) {
                return Err(AskError::TwoOfAFamily { key });
            }
            these.push(ip);
        }
        let set: BTreeSet<IpAddr> = these.iter().copied().collect();
        match &ips_from {
            Some((first, s)) if *s != set => {
                return Err(AskError::Disagree {
                    a: first.clone(),
                    b: key,
                    what: "addresses",
                });
            }
            Some(_) => {}
            None => {
                requested_ips = these;
                ips_from = Some((key, set));
            }
        }
    }
    let requested_pool = agreed(annotations, &POOL_ANNOTATIONS, "pools")?;
    let sharing_key = agreed(annotations, &SHARING_ANNOTATIONS, "sharing keys")?;

    let policy = match spec.ip_family_policy.as_deref() {
        None | Some("SingleStack") => StackPolicy::SingleStack,
        Some("PreferDualStack") => StackPolicy::PreferDualStack,
        Some("RequireDualStack") => StackPolicy::RequireDualStack,
        Some(other) => return Err(AskError::BadPolicy(other.into())),
    };
    let mut families = Vec::new();
    for f in spec.ip_families.iter().flatten() {
        families.push(match f.as_str() {
            "IPv4" => Family::V4,
            "IPv6" => Family::V6,
            other => return Err(AskError::BadFamily(other.into())),
        });
    }
    let mut ports = BTreeSet::new();
    for p in spec.ports.iter().flatten() {
        let n = u16::try_from(p.port)
            .ok()
            .filter(|n| *n > 0)
            .ok_or(AskError::BadPort(p.port))?;
        let proto = p.protocol.as_deref().unwrap_or("TCP");
        let proto = Protocol::from_name(&proto.to_ascii_lowercase())
            .ok_or_else(|| AskError::BadProtocol(proto.into()))?;
        ports.insert((proto, n));
    }
    let selector = spec
        .selector
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");

    let status = svc.status.as_ref();
    let current = status_ips(svc);
    let written = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == CONDITION)
        .and_then(|c| serde_json::from_str::<AllocationRecord>(&c.message).ok())
        .and_then(|r| r.terms().ok());

    Ok(Some(ServiceAsk {
        request: AllocRequest {
            service,
            namespace_labels: BTreeMap::new(),
            labels: meta.labels.clone().unwrap_or_default(),
            policy,
            families,
            requested_ips,
            requested_pool,
            sharing_key,
            ports,
            local: spec.external_traffic_policy.as_deref() == Some("Local"),
            selector,
        },
        current,
        written,
        created: meta.creation_timestamp.clone(),
    }))
}

/// The addresses a Service's status names, in order (whatever its request says).
pub fn status_ips(svc: &Service) -> Vec<IpAddr> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| i.ip.as_deref()?.parse().ok())
        .collect()
}

/// The one value the present `keys` agree on.
fn agreed(
    annotations: &BTreeMap<String, String>,
    keys: &[&str],
    what: &'static str,
) -> Result<Option<String>, AskError> {
    let mut found: Option<(&str, &String)> = None;
    for k in keys {
        let Some(v) = annotations.get(*k).filter(|v| !v.trim().is_empty()) else {
            continue;
        };
        match found {
            Some((first, fv)) if fv.trim() != v.trim() => {
                return Err(AskError::Disagree {
                    a: first.into(),
                    b: (*k).into(),
                    what,
                });
            }
            Some(_) => {}
            None => found = Some((k, v)),
        }
    }
    Ok(found.map(|(_, v)| v.trim().to_string()))
}

/// What vipflow records in its status condition's message: the addresses it wrote, the pool
/// they came from, and the terms they were decided on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AllocationRecord {
    pub ips: Vec<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharing_key: Option<String>,
    /// `TCP/80` and so on.
    #[serde(default)]
    pub ports: Vec<String>,
    #[serde(default)]
    pub local: bool,
    #[serde(default)]
    pub selector: String,
}

impl AllocationRecord {
    pub fn of(ips: &[IpAddr], t: &Terms) -> AllocationRecord {
        AllocationRecord {
            ips: ips.to_vec(),
            pool: t.pool.clone(),
            sharing_key: t.sharing_key.clone(),
            ports: t
                .ports
                .iter()
                .map(|(p, n)| format!("{}/{n}", p.as_str().to_ascii_uppercase()))
                .collect(),
            local: t.local,
            selector: t.selector.clone(),
        }
    }

    /// The terms recorded (an entry that cannot be read makes the record unknown).
    pub fn terms(&self) -> Result<Terms, String> {
        let mut ports = BTreeSet::new();
        for p in &self.ports {
            let (proto, n) = p.split_once('/').ok_or_else(|| p.clone())?;
            let proto =
                Protocol::from_name(&proto.to_ascii_lowercase()).ok_or_else(|| p.clone())?;
            ports.insert((proto, n.parse().map_err(|_| p.clone())?));
        }
        Ok(Terms {
            sharing_key: self.sharing_key.clone(),
            ports,
            local: self.local,
            selector: self.selector.clone(),
            pool: self.pool.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(v: serde_json::Value) -> Service {
        serde_json::from_value(v).unwrap()
    }

    fn lb(annotations: serde_json::Value, spec: serde_json::Value) -> Service {
        let mut s = json!({
            "metadata": {"name": "web", "namespace": "shop", "annotations": annotations,
                         "labels": {"tier": "front"}},
            "spec": {"type": "LoadBalancer", "selector": {"app": "web", "a": "b"},
                     "ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]},
        });
        for (k, v) in spec.as_object().unwrap() {
            s["spec"][k] = v.clone();
        }
        svc(s)
    }

    #[test]
    fn reads_a_loadbalancer_and_its_annotations() {
        let s = lb(
            json!({"metallb.io/loadBalancerIPs": "10.0.0.5, fd00::5",
                   "metallb.universe.tf/address-pool": "blue",
                   "metallb.io/allow-shared-ip": "k"}),
            json!({"ipFamilyPolicy": "PreferDualStack", "ipFamilies": ["IPv6", "IPv4"],
                   "externalTrafficPolicy": "Local"}),
        );
        let ask = read(&s, None).unwrap().unwrap();
        let r = &ask.request;
        assert_eq!(r.service, ServiceKey::new("shop", "web"));
        assert_eq!(
            r.requested_ips,
            [
                "10.0.0.5".parse::<IpAddr>().unwrap(),
                "fd00::5".parse().unwrap()
            ]
        );
        assert_eq!(r.requested_pool.as_deref(), Some("blue"));
        assert_eq!(r.sharing_key.as_deref(), Some("k"));
        assert_eq!(r.policy, StackPolicy::PreferDualStack);
        assert_eq!(r.families, [Family::V6, Family::V4]);
        assert_eq!(
            r.ports,
            [(Protocol::Tcp, 80), (Protocol::Udp, 53)]
                .into_iter()
                .collect()
        );
        assert!(r.local);
        assert_eq!(r.selector, "a=b,app=web");
        assert_eq!(r.labels["tier"], "front");
        assert!(ask.current.is_empty() && ask.written.is_none());
    }

    #[test]
    fn not_ours() {
        assert_eq!(
            read(&lb(json!({}), json!({"type": "ClusterIP"})), None),
            Ok(None)
        );
        let classed = lb(json!({}), json!({"loadBalancerClass": "other.io/lb"}));
        assert_eq!(read(&classed, None), Ok(None));
        assert!(read(&classed, Some("other.io/lb")).unwrap().is_some());
    }

    #[test]
    fn disagreeing_or_bad_requests_are_refused() {
        let e = read(
            &lb(
                json!({"vipflow.io/address-pool": "a", "service.antrea.io/external-ip-pool": "b"}),
                json!({}),
            ),
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("different pools"), "{e}");
        let e = read(
            &lb(
                json!({"vipflow.io/load-balancer-ips": "10.0.0.1"}),
                json!({"loadBalancerIP": "10.0.0.2"}),
            ),
            None,
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                AskError::Disagree {
                    what: "addresses",
                    ..
                }
            ),
            "{e}"
        );
        // The same address twice is one request.
        assert!(
            read(
                &lb(
                    json!({"vipflow.io/load-balancer-ips": "10.0.0.1"}),
                    json!({"loadBalancerIP": "10.0.0.1"})
                ),
                None
            )
            .is_ok()
        );
        for (a, spec) in [
            (
                json!({"metallb.io/loadBalancerIPs": "10.0.0.1,10.0.0.2"}),
                json!({}),
            ),
            (json!({"metallb.io/loadBalancerIPs": "ten"}), json!({})),
            (json!({}), json!({"ipFamilyPolicy": "Both"})),
            (json!({}), json!({"ipFamilies": ["IPv5"]})),
            (json!({}), json!({"ports": [{"port": 70000}]})),
        ] {
            assert!(
                read(&lb(a.clone(), spec.clone()), None).is_err(),
                "{a} {spec}"
            );
        }
    }

    #[test]
    fn the_record_round_trips_through_the_status() {
        let s = lb(json!({"vipflow.io/allow-shared-ip": "k"}), json!({}));
        let ask = read(&s, None).unwrap().unwrap();
        let terms = Terms::of(&ask.request);
        let ips = ["10.0.0.9".parse::<IpAddr>().unwrap()];
        let record = serde_json::to_string(&AllocationRecord::of(&ips, &terms)).unwrap();
        let mut with_status = serde_json::to_value(&s).unwrap();
        with_status["status"] = json!({
            "loadBalancer": {"ingress": [{"ip": "10.0.0.9", "ipMode": "VIP"}]},
            "conditions": [{"type": CONDITION, "status": "True", "reason": "Allocated",
                            "message": record, "lastTransitionTime": "2026-11-26T00:00:00Z"}],
        });
        let back = read(&svc(with_status), None).unwrap().unwrap();
        assert_eq!(back.current, ips);
        assert_eq!(back.written, Some(terms));
    }
}
