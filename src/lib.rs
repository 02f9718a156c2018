//! vipflow: Kubernetes Service external IPs and LoadBalancer VIPs on Open vSwitch / OVN.
//!
//! This crate is the agent: the sources (the objects file, the Kubernetes watchers), the tasks
//! that drive [`vipflow_core`]'s pure cores against the switch, the Northbound database, the
//! membership's sockets and the API server, leader election, Events, metrics, HTTP, and the
//! command line. Everything that decides is in [`vipflow_core`], whose modules are re-exported
//! here by name; docs/ARCHITECTURE.md has the map.
//!
//! - [`source`]: the objects file (`file`, read streaming by `list_stream` and `json_stream`)
//!   and the Kubernetes watchers (`kube`);
//! - [`agent`]: wiring, the planner task, the observer (metrics, readiness, Events, status),
//!   the one-shot commands, the fence;
//! - [`reconcile`]: the bridge's and the Northbound writer's tasks, the node's OVS database
//!   watcher (`ovs`), FRR's `vtysh` (`frr`);
//! - [`membership_task`], [`ipam_task`], [`record_writer`], [`event_sink`], [`leader`]: the
//!   membership's sockets and timers, the allocator's controller, the `vipflow.io/Announced`
//!   condition's writer, the Events' writer, leader election over a Lease;
//! - [`metallb_events`]: the elected agent's Events on MetalLB's objects.

pub mod agent;
pub mod event_sink;
pub mod ipam_task;
pub mod leader;
pub mod membership_task;
pub mod memory;
pub mod metallb_events;
pub mod metrics;
pub mod reconcile;
pub mod record_writer;
pub mod source;

pub use vipflow_core::{
    announce, bgp, config, decode, events, frrk8s, ipam, keys, lease, membership, metallb, model,
    parallel, plan, status, vec_set,
};
