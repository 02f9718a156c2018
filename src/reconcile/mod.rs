pub mod bridge;
pub mod error;
pub mod frr;
pub mod northbound;
pub mod ovs;
