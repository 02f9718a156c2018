pub mod bridge;
pub mod frr;
pub mod northbound;
pub mod ovs;
