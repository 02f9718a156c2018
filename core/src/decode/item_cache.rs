//! What each item of the last version of an objects file decoded to, by its text: when the
//! file changes, an item whose text did not change is not parsed or decoded again, and keeps
//! its allocation (so the planner, which tells changes by allocation, passes over it).
//!
//! Parsing YAML is what a file version costs; hashing its items costs a small part of that.
//! An item is named by a 128-bit hash (XXH3) of its text and by its length, so two different
//! items are not taken for one; what an item decodes to depends on the List around it too (a
//! typed List lends its items their kind), so the cache holds the items of one List text
//! (the root's own lines) and forgets them when that changes. An item's name does not depend
//! on the root, so a file can be hashed item by item as it is read, before its root is
//! complete (a kubectl List's `kind` comes after its items). The hash is not keyed: whoever
//! writes the file chooses its objects anyway.

use crate::model::Loaded;
use crate::model::{KeptService, KeptSlice, KubeOvnSubnet, Problem};
use k8s_openapi::api::core::v1 as core;
use std::collections::HashMap;
use std::sync::Arc;

/// An item's text, hashed: two 64-bit halves (a `u128` would align the cache's entries to 16
/// bytes) and its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ItemId([u64; 2], usize);

impl ItemId {
    pub fn of(item: &str) -> ItemId {
        let h = xxhash_rust::xxh3::xxh3_128(item.as_bytes());
        ItemId([h as u64, (h >> 64) as u64], item.len())
    }
}

/// The maps' hasher: their keys are hashes already, so a fast one does.
type PreHashed = foldhash::fast::FixedState;

/// What one item added to a [`Loaded`]: at most one object, and its problems.
#[derive(Debug, Clone, Default)]
pub struct Decoded {
    object: Option<Object>,
    problems: Vec<Problem>,
}

#[derive(Debug, Clone)]
enum Object {
    Service(Arc<KeptService>),
    Slice(Arc<KeptSlice>),
    Node(Arc<core::Node>),
    Subnet(Box<KubeOvnSubnet>),
    Pool(Box<crate::ipam::pool_object::VipPool>),
    /// A BGP object (rare: one of a few, so kept as the objects it decoded to).
    Bgp(Box<crate::model::BgpObjects>),
    L2Advertisement(Box<crate::metallb::L2Advertisement>),
}

impl Decoded {
    /// What `one` (a [`Loaded`] that one item was decoded into) holds.
    pub fn from_one(one: Loaded) -> Decoded {
        let o = one.objects;
        let object = o
            .services
            .into_iter()
            .next()
            .map(Object::Service)
            .or_else(|| o.endpoint_slices.into_iter().next().map(Object::Slice))
            .or_else(|| o.nodes.into_iter().next().map(Object::Node))
            .or_else(|| {
                o.subnets
                    .into_iter()
                    .next()
                    .map(|s| Object::Subnet(Box::new(s)))
            })
            .or_else(|| {
                o.pools
                    .into_iter()
                    .next()
                    .map(|p| Object::Pool(Box::new(p)))
            })
            .or_else(|| {
                o.l2_advertisements
                    .into_iter()
                    .next()
                    .map(|a| Object::L2Advertisement(Box::new(a)))
            })
            .or_else(|| (o.bgp != Default::default()).then(|| Object::Bgp(Box::new(o.bgp))));
        Decoded {
            object,
            problems: one.problems,
        }
    }

    /// Add what the item decoded to to `out`, as decoding it again would.
    pub fn add_to(&self, out: &mut Loaded) {
        match &self.object {
            Some(Object::Service(s)) => out.objects.services.push(Arc::clone(s)),
            Some(Object::Slice(s)) => out.objects.endpoint_slices.push(Arc::clone(s)),
            Some(Object::Node(n)) => out.objects.nodes.push(Arc::clone(n)),
            Some(Object::Subnet(s)) => out.objects.subnets.push((**s).clone()),
            Some(Object::Pool(p)) => out.objects.pools.push((**p).clone()),
            Some(Object::Bgp(b)) => out.objects.bgp.extend((**b).clone()),
            Some(Object::L2Advertisement(a)) => out.objects.l2_advertisements.push((**a).clone()),
            None => {}
        }
        out.problems.extend(self.problems.iter().cloned());
    }
}

/// The items of the last version read, and those of the version being read, in one table:
/// two tables (the last version's and the new one's, as it was first built) held both at
/// every change, a few MiB at 10,000 Services.
#[derive(Debug, Default)]
pub struct ItemCache {
    /// The hash of the root text the items were decoded in.
    root: Option<u128>,
    /// Each item, and the number of the last version that had it.
    items: HashMap<ItemId, (Decoded, u64), PreHashed>,
    /// The number of the version being read.
    version: u64,
    /// Items of the version being read found in the table.
    reused: usize,
}

impl ItemCache {
    /// The version being read is a List with this root text: what was decoded in another
    /// one is forgotten.
    pub fn in_root(&mut self, root: &str) {
        let h = xxhash_rust::xxh3::xxh3_128(root.as_bytes());
        if self.root != Some(h) {
            self.items.clear();
            self.root = Some(h);
        }
    }

    /// Whether the last version had the item (in whatever root: see [`Self::in_root`]).
    pub fn knows(&self, id: &ItemId) -> bool {
        self.items.contains_key(id)
    }

    /// The item, if the last version had it (or this one, listing it twice); remembered for
    /// the next version either way.
    pub fn take(&mut self, id: ItemId) -> Option<Decoded> {
        let (d, seen) = self.items.get_mut(&id)?;
        *seen = self.version;
        self.reused += 1;
        Some(d.clone())
    }

    pub fn put(&mut self, id: ItemId, d: Decoded) {
        self.items.insert(id, (d, self.version));
    }

    /// The version being read is complete: it becomes the last, and what it did not have
    /// is forgotten. Returns how many of its items were taken from the table.
    pub fn finish(&mut self) -> usize {
        let version = self.version;
        self.items.retain(|_, (_, seen)| *seen == version);
        self.version += 1;
        std::mem::take(&mut self.reused)
    }

    /// The version being read was not taken (it does not parse, or is no snapshot): the last
    /// one stays the reference (with what was new, which is as good).
    pub fn abandon(&mut self) {
        self.version += 1;
        self.reused = 0;
    }
}
