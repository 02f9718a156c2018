//! What vipflow keeps of each Service and EndpointSlice: the fields its plans read, in the
//! shape the Kubernetes types give them, and nothing else.
//!
//! Sources decode whole Kubernetes objects (so unknown or mistyped fields are still noticed)
//! and keep only this. A `k8s-openapi` Service is 824 bytes before its strings and maps, an
//! EndpointSlice endpoint 352; most of it is fields no plan reads (selectors, labels, target
//! references, node ports...). At 10,000 Services the whole objects were the largest thing the
//! agent held.
//!
//! Only annotations under `vipflow.io/` are kept: no other annotation is read, and some are
//! large (`kubectl.kubernetes.io/last-applied-configuration` holds the whole object again).

use crate::keys::{SERVICE_NAME_LABEL, VIPFLOW_ANNOTATION_PREFIX};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// Text that nearly always is one of a few values (a protocol, a Service type, a policy): a
/// known value is kept as a static string, not one more small allocation per object.
pub type Word = Option<Cow<'static, str>>;

fn word(s: Option<String>, known: &[&'static str]) -> Word {
    s.map(|s| match known.iter().find(|k| **k == s) {
        Some(k) => Cow::Borrowed(*k),
        None => Cow::Owned(s),
    })
}

const PROTOCOLS: &[&str] = &["TCP", "UDP", "SCTP"];

/// A kept string: up to 24 bytes (names, namespaces, node names, IP addresses) held in place,
/// longer ones on the heap. Each object has a dozen or more such strings, most a few bytes
/// long; as `String`s each was an allocation of its own, and those allocations were the
/// largest part of what the kept objects cost.
pub type Text = compact_str::CompactString;

fn text(s: Option<String>) -> Option<Text> {
    s.map(Text::from)
}

fn texts(v: Vec<String>) -> Vec<Text> {
    remade(v, Text::from)
}

/// `v` mapped into a new vector of exactly its length. Collecting `into_iter().map(..)` would
/// reuse `v`'s buffer, sized for the larger Kubernetes type, for as long as the object lives.
fn remade<T, U>(v: Vec<T>, f: impl FnMut(T) -> U) -> Vec<U> {
    let mut out = Vec::with_capacity(v.len());
    out.extend(v.into_iter().map(f));
    out
}

/// A Service's name, namespace, age and vipflow's own annotations.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeptMeta {
    pub name: Option<Text>,
    pub namespace: Option<Text>,
    pub creation_timestamp: Option<Time>,
    /// `vipflow.io/` annotations only; `None` when there are none.
    pub annotations: Option<BTreeMap<String, String>>,
}

impl From<ObjectMeta> for KeptMeta {
    fn from(m: ObjectMeta) -> KeptMeta {
        let annotations: BTreeMap<String, String> = m
            .annotations
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.starts_with(VIPFLOW_ANNOTATION_PREFIX))
            .collect();
        KeptMeta {
            name: text(m.name),
            namespace: text(m.namespace),
            creation_timestamp: m.creation_timestamp,
            annotations: (!annotations.is_empty()).then_some(annotations),
        }
    }
}

/// What vipflow reads of a Service.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeptService {
    pub metadata: KeptMeta,
    pub spec: Option<KeptServiceSpec>,
    pub status: Option<KeptServiceStatus>,
    /// Its key, made once: the planners keep it in several indexes, and each key made anew
    /// would be two more allocations held for as long as the Service lives.
    key: std::sync::OnceLock<Option<super::ServiceKey>>,
}

impl KeptService {
    /// `namespace/name` (namespace `default` when none is set); `None` without a name. Made
    /// on first use: the metadata must not change after that (kept objects are shared, and
    /// never changed once made).
    pub fn key(&self) -> Option<super::ServiceKey> {
        self.key
            .get_or_init(|| super::meta_key(&self.metadata))
            .clone()
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeptServiceSpec {
    pub type_: Word,
    pub external_ips: Option<Vec<Text>>,
    pub load_balancer_class: Option<Text>,
    pub ports: Option<Vec<KeptServicePort>>,
    pub cluster_ip: Option<Text>,
    pub cluster_ips: Option<Vec<Text>>,
    pub external_traffic_policy: Word,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeptServicePort {
    pub name: Option<Text>,
    pub port: i32,
    pub protocol: Word,
    pub target_port: Option<IntOrString>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeptServiceStatus {
    pub load_balancer: Option<KeptLoadBalancerStatus>,
    /// The message of vipflow's `vipflow.io/Announced` condition when its status is True: who
    /// announces the Service's VIPs, as the nodes wrote it ([`crate::announce::record`]).
    pub announced: Option<Text>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeptLoadBalancerStatus {
    pub ingress: Option<Vec<KeptIngress>>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeptIngress {
    pub ip: Option<Text>,
    pub ip_mode: Word,
}

impl From<core::Service> for KeptService {
    fn from(s: core::Service) -> KeptService {
        KeptService {
            metadata: s.metadata.into(),
            spec: s.spec.map(|sp| KeptServiceSpec {
                type_: word(
                    sp.type_,
                    &["LoadBalancer", "ClusterIP", "NodePort", "ExternalName"],
                ),
                external_ips: sp.external_ips.map(texts),
                load_balancer_class: text(sp.load_balancer_class),
                ports: sp.ports.map(|ps| {
                    remade(ps, |p| KeptServicePort {
                        name: text(p.name),
                        port: p.port,
                        protocol: word(p.protocol, PROTOCOLS),
                        target_port: p.target_port,
                    })
                }),
                cluster_ip: text(sp.cluster_ip),
                cluster_ips: sp.cluster_ips.map(texts),
                external_traffic_policy: word(sp.external_traffic_policy, &["Cluster", "Local"]),
            }),
            status: s.status.map(|st| KeptServiceStatus {
                announced: st.conditions.and_then(|cs| {
                    cs.into_iter()
                        .find(|c| c.type_ == crate::announce::record::CONDITION)
                        .filter(|c| c.status == "True")
                        .map(|c| Text::from(c.message))
                }),
                load_balancer: st.load_balancer.map(|lb| KeptLoadBalancerStatus {
                    ingress: lb.ingress.map(|is| {
                        remade(is, |i| KeptIngress {
                            ip: text(i.ip),
                            ip_mode: word(i.ip_mode, &["VIP", "Proxy"]),
                        })
                    }),
                }),
            }),
            key: std::sync::OnceLock::new(),
        }
    }
}

/// What vipflow reads of an EndpointSlice.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeptSlice {
    pub name: Option<Text>,
    pub namespace: Option<Text>,
    /// Its `kubernetes.io/service-name` label: the Service it belongs to.
    pub service_name: Option<Text>,
    pub endpoints: Vec<KeptEndpoint>,
    pub ports: Option<Vec<KeptSlicePort>>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeptEndpoint {
    pub addresses: Vec<Text>,
    pub conditions: Option<discovery::EndpointConditions>,
    pub node_name: Option<Text>,
    /// The name of the Pod behind it (`targetRef` of kind Pod).
    pub pod: Option<Text>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeptSlicePort {
    pub name: Option<Text>,
    pub port: Option<i32>,
    pub protocol: Word,
}

impl From<discovery::EndpointSlice> for KeptSlice {
    fn from(s: discovery::EndpointSlice) -> KeptSlice {
        let service_name = s
            .metadata
            .labels
            .and_then(|mut l| l.remove(SERVICE_NAME_LABEL))
            .map(Text::from);
        KeptSlice {
            name: text(s.metadata.name),
            namespace: text(s.metadata.namespace),
            service_name,
            endpoints: remade(s.endpoints, |e| KeptEndpoint {
                addresses: texts(e.addresses),
                conditions: e.conditions,
                node_name: text(e.node_name),
                pod: e
                    .target_ref
                    .filter(|r| r.kind.as_deref().is_none_or(|k| k == "Pod"))
                    .and_then(|r| text(r.name)),
            }),
            ports: s.ports.map(|ps| {
                remade(ps, |p| KeptSlicePort {
                    name: text(p.name),
                    port: p.port,
                    protocol: word(p.protocol, PROTOCOLS),
                })
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_service_keeps_what_plans_read() {
        let s: core::Service = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u", "resourceVersion": "7",
                         "creationTimestamp": "2026-01-10T08:00:00Z",
                         "labels": {"app": "web"},
                         "annotations": {"vipflow.io/prefer-local": "true",
                                         "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": {"type": "LoadBalancer", "externalIPs": ["192.0.2.1"],
                     "loadBalancerClass": "c", "clusterIP": "10.96.0.1",
                     "clusterIPs": ["10.96.0.1"], "externalTrafficPolicy": "Local",
                     "selector": {"app": "web"},
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP",
                                "targetPort": "web", "nodePort": 30080}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.2", "ipMode": "VIP"}]},
                       "conditions": [
                           {"type": "vipflow.io/Allocated", "status": "True", "reason": "Allocated",
                            "message": "{}", "lastTransitionTime": "2026-01-10T08:00:00Z"},
                           {"type": "vipflow.io/Announced", "status": "True", "reason": "Announced",
                            "message": "192.0.2.2 by node-a",
                            "lastTransitionTime": "2026-01-10T08:00:00Z"}]}
        }))
        .unwrap();
        let k = KeptService::from(s);
        assert_eq!(
            k.status.as_ref().and_then(|s| s.announced.as_deref()),
            Some("192.0.2.2 by node-a")
        );
        assert_eq!(k.metadata.name.as_deref(), Some("web"));
        assert_eq!(k.metadata.namespace.as_deref(), Some("shop"));
        assert!(k.metadata.creation_timestamp.is_some());
        assert_eq!(
            k.metadata.annotations,
            Some(BTreeMap::from([(
                "vipflow.io/prefer-local".to_string(),
                "true".to_string()
            )]))
        );
        let sp = k.spec.unwrap();
        assert_eq!(sp.type_.as_deref(), Some("LoadBalancer"));
        assert_eq!(sp.external_ips, Some(vec![Text::from("192.0.2.1")]));
        assert_eq!(sp.load_balancer_class.as_deref(), Some("c"));
        assert_eq!(sp.cluster_ip.as_deref(), Some("10.96.0.1"));
        assert_eq!(sp.external_traffic_policy.as_deref(), Some("Local"));
        assert_eq!(
            sp.ports,
            Some(vec![KeptServicePort {
                name: Some("http".into()),
                port: 80,
                protocol: Some("TCP".into()),
                target_port: Some(IntOrString::String("web".into())),
            }])
        );
        let ingress = k
            .status
            .and_then(|s| s.load_balancer)
            .and_then(|l| l.ingress);
        assert_eq!(
            ingress,
            Some(vec![KeptIngress {
                ip: Some("192.0.2.2".into()),
                ip_mode: Some("VIP".into()),
            }])
        );
    }

    #[test]
    fn a_slice_keeps_its_service_endpoints_and_ports() {
        let s: discovery::EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "web-x", "namespace": "shop",
                         "labels": {"kubernetes.io/service-name": "web", "other": "x"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"], "nodeName": "n1",
                           "conditions": {"ready": false, "serving": true},
                           "targetRef": {"kind": "Pod", "name": "p"}},
                          {"addresses": ["10.0.0.2"],
                           "targetRef": {"kind": "Node", "name": "n2"}}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
        }))
        .unwrap();
        let k = KeptSlice::from(s);
        assert_eq!(k.name.as_deref(), Some("web-x"));
        assert_eq!(k.namespace.as_deref(), Some("shop"));
        assert_eq!(k.service_name.as_deref(), Some("web"));
        assert_eq!(k.endpoints.len(), 2);
        assert_eq!(k.endpoints[0].addresses, ["10.0.0.1"]);
        assert_eq!(k.endpoints[0].node_name.as_deref(), Some("n1"));
        // The Pod behind an endpoint, and nothing for a target of another kind.
        assert_eq!(k.endpoints[0].pod.as_deref(), Some("p"));
        assert_eq!(k.endpoints[1].pod, None);
        let c = k.endpoints[0].conditions.as_ref().unwrap();
        assert_eq!(
            (c.ready, c.serving, c.terminating),
            (Some(false), Some(true), None)
        );
        assert_eq!(
            k.ports,
            Some(vec![KeptSlicePort {
                name: Some("http".into()),
                port: Some(8080),
                protocol: Some("TCP".into()),
            }])
        );
    }
}
