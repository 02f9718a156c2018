pub mod file;
pub mod kube;
mod object_decode;
pub mod objects_text;
