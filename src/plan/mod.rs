pub mod exclude;
pub mod flows;
pub mod northbound;
