pub mod bridge;
pub mod error;
pub mod northbound;
pub mod ovs;
