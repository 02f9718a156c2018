//! BGP: vipflow decides what each node advertises and FRR speaks BGP. The objects users write
//! ([`objects`]), and the node's FRR configuration made from them ([`frr_config`]); what a
//! node advertises is planned in [`crate::plan::bgp`], and FRR is driven by
//! the agent crate's `reconcile::frr`.

pub mod frr_config;
pub mod objects;
