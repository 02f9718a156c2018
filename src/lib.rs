//! vipflow: Kubernetes Service external IPs and LoadBalancer VIPs on Open vSwitch / OVN.
//!
//! The pipeline runs one way (DESIGN.md):
//! `source` (file or Kubernetes) -> [`model`] (validated, pure) -> [`plan`] (desired flows per
//! bridge, pure) -> [`reconcile`] (diff against the switch, minimal atomic changes) -> OVS.

pub mod agent;
pub mod config;
pub mod events;
pub mod leader;
pub mod metrics;
pub mod model;
pub mod plan;
pub mod reconcile;
pub mod source;
