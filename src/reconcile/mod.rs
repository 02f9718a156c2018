pub mod bridge;
pub mod northbound;
pub mod ovs;
