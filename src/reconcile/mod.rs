pub mod bridge;
pub mod frr;
pub mod frrk8s;
pub mod northbound;
pub mod ovs;
