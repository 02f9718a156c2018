//! vipflow's pure core: everything that decides, and nothing that waits.
//!
//! The agent's pipeline runs one way: a source (the objects file or the Kubernetes API, in the
//! agent crate) -> [`model`] (validated, pure) -> [`plan`] (the flows each bridge must hold and
//! the Northbound rows, pure) -> reconcile (the agent crate's tasks, driving the pure cores of
//! [`reconcile`]) -> Open vSwitch and OVN. This crate holds every step that decides and
//! none that does I/O: no async runtime, no Kubernetes client, no HTTP. Each piece is tested in
//! memory, and the agent crate is a thin shell of tasks around it.
//!
//! - [`model`]: the model's types, validation of each object, typed problems, and the
//!   snapshot a source hands on ([`model::Loaded`]);
//! - [`decode`]: Kubernetes objects from text (the objects file, a watch event's JSON);
//! - [`plan`]: the flows, the Northbound rows, the exclusions from pod IPAM, and the one
//!   [`plan::planner::Planner`] every command plans with;
//! - [`announce`]: who announces each VIP (placement), whether and how this node announces,
//!   the contract an announcer implements, and the L2 (ARP/ND answers) and BGP announcers;
//! - [`membership`]: the member set (SWIM through foca), the successors' watch, claims, and
//!   the seal of their datagrams;
//! - [`ipam`]: the VIP allocator and its pools;
//! - [`bgp`]: the BGP objects and the FRR configuration they make;
//! - [`reconcile`]: the bridge's and the Northbound writer's pure cores;
//! - [`config`]: the agent's configuration file;
//! - [`events`]: what to say on a Service, as a difference;
//! - [`keys`]: the annotation and label keys on Kubernetes objects, and the `external_ids`
//!   keys in OVN and Open vSwitch;
//! - [`status`]: the status documents `vipflow status` and `/status` serve.

pub mod announce;
pub mod bgp;
pub mod config;
pub mod decode;
pub mod events;
pub mod frrk8s;
pub mod ipam;
pub mod keys;
pub mod lease;
pub mod membership;
pub mod metallb;
pub mod model;
pub mod parallel;
pub mod plan;
pub mod reconcile;
pub mod status;
pub mod vec_set;
