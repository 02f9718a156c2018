pub mod bridge;
pub mod northbound;
