//! Kubernetes objects from text: what `kubectl get -o yaml` or `-o json` prints (a List, several
//! documents, single objects), decoded one item at a time so that one bad item is reported and
//! the rest still apply. The file source (which reads and watches the file) and the Kubernetes
//! source (which decodes watch events with the same [`ItemCache`]) are in the agent crate.
//!
//! - `objects_text`: a whole text to a [`Loaded`](crate::model::Loaded) snapshot;
//! - `yaml_items`, `json_items`: cut a List into its items without parsing them;
//! - `yaml_subset`: the YAML most objects use, read without the general parser;
//! - `text_depth`: the nesting bound, checked before any parser runs;
//! - `item_cache`: what each item decoded to, so an unchanged item is not decoded again;
//! - `object_decode`: one object to its typed form, with its unknown fields reported.

mod item_cache;
mod json_items;
mod object_decode;
mod objects_text;
mod text_depth;
mod yaml_items;
mod yaml_subset;

pub use item_cache::{ItemCache, ItemId};
pub use json_items::{JsonList, NOT_LISTS, split_json_list};
pub use object_decode::add_item;
pub(crate) use object_decode::decode;
pub use objects_text::{ListItem, Syntax, parse, parse_cached, parse_streamed, parse_whole};
pub use text_depth::{DepthScan, SPECIAL, check_depth, past_string};
pub use yaml_items::{Splitter, other_break, split_block_list};

/// Default largest objects file read: a `kubectl get svc,endpointslices,nodes -A -o yaml` of
/// 10,000 Services fits several times over.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// Deepest `[`/`{` nesting accepted, checked in one linear pass before any parser runs (a
/// Kubernetes object nests about 10 levels; the YAML parser's cost grows with the square of
/// the depth).
pub const MAX_DEPTH: usize = 64;
