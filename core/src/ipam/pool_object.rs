//! The `VipPool` object (`vipflow.io/v1alpha1`, cluster-scoped; deploy/vippool-crd.yaml), as
//! the API server serves it and as the objects file holds it, and its status.

use super::pool::{AllocationRules, Family, Pool, PoolSpec};
use super::request::Usage;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::{Deserialize, Serialize};

pub const API_VERSION: &str = "vipflow.io/v1alpha1";
pub const KIND: &str = "VipPool";
pub const PLURAL: &str = "vippools";

/// A `VipPool` object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VipPool {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: VipPoolSpec,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VipPoolSpec {
    pub addresses: Vec<String>,
    #[serde(default = "yes")]
    pub auto_assign: bool,
    #[serde(default, rename = "avoidBuggyIPs")]
    pub avoid_buggy_ips: bool,
    #[serde(default)]
    pub service_allocation: Option<ServiceAllocation>,
    #[serde(default)]
    pub node_selectors: Vec<LabelSelector>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAllocation {
    #[serde(default)]
    pub priority: Option<i32>,
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default)]
    pub namespace_selectors: Vec<LabelSelector>,
    #[serde(default)]
    pub service_selectors: Vec<LabelSelector>,
}

impl VipPool {
    /// The pool as the allocator takes it.
    pub fn to_spec(&self) -> PoolSpec {
        let s = &self.spec;
        let a = s.service_allocation.clone().unwrap_or_default();
        PoolSpec {
            name: self.metadata.name.clone().unwrap_or_default(),
            addresses: s.addresses.clone(),
            auto_assign: s.auto_assign,
            avoid_buggy_ips: s.avoid_buggy_ips,
            allocation: AllocationRules {
                priority: a.priority,
                namespaces: a.namespaces,
                namespace_selectors: a.namespace_selectors,
                service_selectors: a.service_selectors,
            },
            node_selectors: s.node_selectors.clone(),
        }
    }
}

/// A pool's status: what is assigned and available per family, and whether it can be used.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct VipPoolStatus {
    #[serde(rename = "assignedIPv4")]
    pub assigned_ipv4: u64,
    #[serde(rename = "availableIPv4")]
    pub available_ipv4: u64,
    #[serde(rename = "assignedIPv6")]
    pub assigned_ipv6: u64,
    /// Saturates at `u64::MAX` (an IPv6 pool may hold 2^128 addresses).
    #[serde(rename = "availableIPv6")]
    pub available_ipv6: u64,
    pub conditions: Vec<PoolCondition>,
}

/// The `Usable` condition: True, or False with the reason the pool cannot be used.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

impl VipPoolStatus {
    pub fn of(pool: &Pool, usage: impl Fn(Family) -> Usage) -> VipPoolStatus {
        let (v4, v6) = (usage(Family::V4), usage(Family::V6));
        let clamp = |n: u128| u64::try_from(n).unwrap_or(u64::MAX);
        let usable = match &pool.problem {
            None => PoolCondition {
                type_: "Usable".into(),
                status: "True".into(),
                reason: "Usable".into(),
                message: String::new(),
            },
            Some(p) => PoolCondition {
                type_: "Usable".into(),
                status: "False".into(),
                reason: p.reason().into(),
                message: p.to_string(),
            },
        };
        VipPoolStatus {
            assigned_ipv4: clamp(v4.assigned),
            available_ipv4: clamp(v4.available),
            assigned_ipv6: clamp(v6.assigned),
            available_ipv6: clamp(v6.available),
            conditions: vec![usable],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipam::Allocator;
    use std::collections::BTreeSet;

    const EXAMPLE: &str = r#"
apiVersion: vipflow.io/v1alpha1
kind: VipPool
metadata:
  name: blue
spec:
  addresses: ["192.0.2.0/28", "2001:db8::10-2001:db8::1f"]
  avoidBuggyIPs: true
  serviceAllocation:
    priority: 10
    namespaces: [shop]
    serviceSelectors:
      - matchLabels: {tier: front}
"#;

    #[test]
    fn reads_a_pool_object_with_its_defaults() {
        let p: VipPool = serde_yaml_ng::from_str(EXAMPLE).unwrap();
        let spec = p.to_spec();
        assert_eq!(spec.name, "blue");
        assert!(spec.auto_assign, "autoAssign defaults to true");
        assert!(spec.avoid_buggy_ips);
        assert_eq!(spec.allocation.priority, Some(10));
        assert_eq!(spec.allocation.namespaces, ["shop"]);
        assert_eq!(spec.allocation.service_selectors.len(), 1);
        let a = Allocator::new(vec![spec]);
        let pool = a.pools().next().unwrap();
        let st = VipPoolStatus::of(pool, |f| a.usage("blue", f));
        assert_eq!(st.conditions[0].status, "True");
        // .0 to .15, less .0 (avoided).
        assert_eq!((st.assigned_ipv4, st.available_ipv4), (0, 15));
        assert_eq!(st.available_ipv6, 16);
    }

    /// The CRD's schema and this type name the same fields.
    #[test]
    fn the_crd_schema_names_these_fields() {
        let crd: serde_json::Value = serde_yaml_ng::from_str(
            &std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../deploy/vippool-crd.yaml"
            ))
            .unwrap(),
        )
        .unwrap();
        let v = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
        let keys = |o: &serde_json::Value| -> BTreeSet<String> {
            o.as_object().unwrap().keys().cloned().collect()
        };
        let full = VipPoolSpec {
            addresses: vec!["10.0.0.0/30".into()],
            service_allocation: Some(ServiceAllocation {
                priority: Some(1),
                ..Default::default()
            }),
            ..Default::default()
        };
        let ours = serde_json::to_value(&full).unwrap();
        assert_eq!(keys(&v["spec"]["properties"]), keys(&ours));
        assert_eq!(
            keys(&v["spec"]["properties"]["serviceAllocation"]["properties"]),
            keys(&ours["serviceAllocation"])
        );
        let status = serde_json::to_value(VipPoolStatus::default()).unwrap();
        assert_eq!(keys(&v["status"]["properties"]), keys(&status));
        let condition = serde_json::to_value(PoolCondition::default()).unwrap();
        let mut want = keys(&v["status"]["properties"]["conditions"]["items"]["properties"]);
        want.remove("lastTransitionTime");
        want.remove("observedGeneration");
        assert_eq!(want, keys(&condition));
        assert_eq!(crd["spec"]["names"]["plural"], PLURAL);
        assert_eq!(
            format!(
                "{}/{}",
                crd["spec"]["group"].as_str().unwrap(),
                crd["spec"]["versions"][0]["name"].as_str().unwrap()
            ),
            API_VERSION
        );
        assert_eq!(crd["spec"]["names"]["kind"], KIND);
    }
}
