//! Where the objects come from: a file of Kubernetes objects (`file`, polled, read streaming
//! by `list_stream` and `json_stream` when it is a large List) or the Kubernetes API (`kube`:
//! watchers, batched by `batch`, retried by `watch_backoff`). Both hand on complete snapshots
//! ([`vipflow_core::model::Loaded`]) decoded by [`vipflow_core::decode`].

mod batch;
pub mod file;
mod json_stream;
pub mod kube;
mod list_stream;
mod stamp;
pub mod watch_backoff;
