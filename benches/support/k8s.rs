//! The Kubernetes objects the benchmarks plan: LoadBalancer Services with one ingress VIP from
//! the benchmarking range, and their EndpointSlices.
#![allow(dead_code)]

use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, LoadBalancerStatus, Service, ServicePort, ServiceSpec, ServiceStatus,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use vipflow::keys::SERVICE_NAME_LABEL;

/// VIP `i` of 198.18.0.0/15, the benchmarking range.
pub fn vip(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 1)) + i)
}

/// One port of a Service: its name (if any), port, target port and protocol.
pub struct Port<'a> {
    pub name: Option<String>,
    pub port: i32,
    pub target: Option<i32>,
    pub protocol: &'a str,
}

/// LoadBalancer Service `svc-{i}` in namespace `bench`, its ingress VIP [`vip`]`(i)`, with
/// `ports` and externalTrafficPolicy `etp` (`None`: left unset, Cluster).
pub fn lb_service(i: u32, ports: &[Port<'_>], etp: Option<&str>) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(format!("svc-{i}")),
            namespace: Some("bench".into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            external_traffic_policy: etp.map(str::to_owned),
            ports: Some(
                ports
                    .iter()
                    .map(|p| ServicePort {
                        name: p.name.clone(),
                        port: p.port,
                        target_port: p.target.map(IntOrString::Int),
                        protocol: Some(p.protocol.into()),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        status: Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![LoadBalancerIngress {
                    ip: Some(vip(i).to_string()),
                    ..Default::default()
                }]),
            }),
            ..Default::default()
        }),
    }
}

/// The EndpointSlice of `svc-{i}`: each endpoint ready on its node, one TCP port `port`.
pub fn endpoint_slice(i: u32, endpoints: &[(Ipv4Addr, String)], port: i32) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(format!("svc-{i}-abcde")),
            namespace: Some("bench".into()),
            labels: Some(BTreeMap::from([(
                SERVICE_NAME_LABEL.to_string(),
                format!("svc-{i}"),
            )])),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        endpoints: endpoints
            .iter()
            .map(|(ip, node)| Endpoint {
                addresses: vec![ip.to_string()],
                conditions: Some(EndpointConditions {
                    ready: Some(true),
                    serving: Some(true),
                    terminating: Some(false),
                }),
                node_name: Some(node.clone()),
                ..Default::default()
            })
            .collect(),
        ports: Some(vec![EndpointPort {
            port: Some(port),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
    }
}
