pub mod file;
pub mod kube;
pub mod objects_text;
