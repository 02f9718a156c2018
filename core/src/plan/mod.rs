//! Planning: pure functions from the model to desired flows and rows, and the incremental
//! [`planner::Planner`] that keeps them up to date.

pub mod bgp;
pub mod bgp_node;
pub mod bgp_selection;
pub mod eligibility;
pub mod exclude;
pub mod flow_key;
pub mod flow_text;
pub mod flows;
pub mod handover;
pub mod l2_selection;
pub mod node_template;
pub mod northbound;
mod northbound_config;
pub mod order;
pub mod planner;
pub mod row_table;
pub mod service_index;
pub mod service_report;
pub mod slice_index;
pub mod str_map;

pub(crate) use crate::parallel::map_split;

/// What the planner's tables are hashed with: foldhash, not std's SipHash, as their lookups
/// are most of a large plan's single-threaded work. Their keys are what objects name (Service
/// keys, VIPs), so the hash is seeded (a random seed per process and per table): colliding
/// names cannot be made in advance, though foldhash is no keyed hash as SipHash is.
pub type KeyHasher = foldhash::fast::RandomState;
/// A map with [`KeyHasher`].
pub type KeyMap<K, V> = std::collections::HashMap<K, V, KeyHasher>;
/// A set with [`KeyHasher`].
pub type KeySet<K> = std::collections::HashSet<K, KeyHasher>;

/// Where a snapshot's list differs from the last one: `(start, old_end, new_end)`, so that
/// `old[start..old_end]` became `new[start..new_end]` and everything before and after is the
/// same object (`same(i, j)`: old item `i` is new item `j`). Sources list objects in a stable
/// order and hand on unchanged ones as the same allocation, so adding, removing or changing a
/// few objects leaves a short middle, and only that is looked at: comparing two addresses
/// per unchanged object is all the rest costs.
pub(crate) fn changed_span(
    old_len: usize,
    new_len: usize,
    same: impl Fn(usize, usize) -> bool,
) -> (usize, usize, usize) {
    let mut start = 0;
    while start < old_len && start < new_len && same(start, start) {
        start += 1;
    }
    let (mut old_end, mut new_end) = (old_len, new_len);
    while old_end > start && new_end > start && same(old_end - 1, new_end - 1) {
        old_end -= 1;
        new_end -= 1;
    }
    (start, old_end, new_end)
}

#[cfg(test)]
mod tests {
    use super::changed_span;
    use proptest::prelude::*;

    proptest! {
        /// Replacing the middle of a list is found as that middle (or a shorter one when the
        /// replacement begins or ends like what it replaced).
        #[test]
        fn the_span_covers_exactly_what_differs(
            old in prop::collection::vec(0u8..4, 0..20),
            at in 0usize..20,
            cut in 0usize..5,
            put in prop::collection::vec(0u8..4, 0..5),
        ) {
            let at = at.min(old.len());
            let cut = cut.min(old.len() - at);
            let mut new = old.clone();
            new.splice(at..at + cut, put.iter().copied());
            let (s, oe, ne) = changed_span(old.len(), new.len(), |i, j| old[i] == new[j]);
            prop_assert!(s >= at);
            let mut rebuilt = old.clone();
            rebuilt.splice(s..oe, new[s..ne].iter().copied());
            prop_assert_eq!(rebuilt, new);
            prop_assert!(oe - s <= cut && ne - s <= put.len());
        }
    }
}
