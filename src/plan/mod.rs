pub mod exclude;
pub mod flows;
pub mod incremental;
pub mod northbound;
pub mod northbound_incremental;
