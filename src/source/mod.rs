pub mod file;
pub mod kube;
