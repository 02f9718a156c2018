//! frr-k8s mode: where frr-k8s owns the node's FRR (MetalLB's and OVN-Kubernetes's BGP go
//! through it too), vipflow does not drive FRR; it writes what it advertises as
//! `FRRConfiguration` objects in frr-k8s's namespace, and frr-k8s merges them with everyone
//! else's into the node's configuration.
//!
//! - **Shared per pool** ([`shared::pool_configurations`]): a pool's externalTrafficPolicy
//!   Cluster VIPs go out from every node that may carry them, so one object per group of
//!   nodes that advertise alike holds them, and a VIP change is one write, not one per node.
//!   The elected agent writes them.
//! - **Per node** ([`shared::node_configuration`]): a node's externalTrafficPolicy Local VIPs
//!   (only nodes with a ready endpoint advertise them) go in an object that selects that node
//!   alone, written by the node's own agent once its dataplane carries them.
//! - What frr-k8s made of them: [`render`] merges the objects that select a node as frr-k8s
//!   does and writes the result as the direct mode writes a node's FRR configuration.

pub mod build;
pub mod objects;
pub mod render;
pub mod shared;
pub mod state;

#[cfg(test)]
mod tests;
