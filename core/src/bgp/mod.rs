//! BGP: vipflow decides what each node advertises and FRR speaks BGP. The objects users write
//! ([`objects`]), and the node's FRR configuration made from them ([`frr_config`]); what a
//! node advertises is planned in [`crate::plan::bgp`] (which VIPs, from which nodes, as which
//! prefixes: [`crate::plan::bgp_selection`]); what FRR is told and when is the [`speaker`]'s,
//! and the agent crate's `reconcile::frr` runs it, over bgpd's own vty socket ([`vty`]) or
//! `vtysh`.

pub mod frr_config;
pub mod frr_state;
pub mod objects;
pub mod route_policy;
pub mod speaker;
pub mod vty;
