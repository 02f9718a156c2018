mod batch;
pub mod file;
mod item_cache;
mod json_items;
mod json_stream;
pub mod kube;
mod list_stream;
mod object_decode;
pub mod objects_text;
mod stamp;
mod text_depth;
pub mod watch_backoff;
mod yaml_items;
mod yaml_subset;

pub use item_cache::ItemCache;
