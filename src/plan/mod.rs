pub mod exclude;
pub mod flows;
