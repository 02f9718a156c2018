//! Shared text for the strings many indexes hold copies of: a Service's namespace and name.
//!
//! The same Service is keyed by its object, by each of its EndpointSlices, by its Northbound
//! rows as read back from the database and by what the planners derive from them; each key
//! made from its own text was two allocations more. Here the text of a live key is found and
//! shared instead: one allocation per distinct namespace and per distinct name.
//!
//! Entries hold the text weakly, so nothing outlives its last key; dead entries are swept when
//! the table has doubled since the last sweep, which keeps it within twice the live strings.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, Weak};

#[derive(Default)]
struct Table {
    /// Strings by a hash of their text. Two live strings with the same hash (practically
    /// never) are both kept, the later one unshared.
    by_hash: HashMap<u64, Weak<str>>,
    swept_at: usize,
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

fn hash(s: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// `s` as shared text: the live copy if there is one, else a new one that later calls share.
pub fn interned(s: &str) -> Arc<str> {
    let h = hash(s);
    // A poisoned lock only means another thread panicked while holding it; the table is
    // still a valid cache (at worst it misses an entry).
    let mut guard = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    let t = guard.get_or_insert_with(Table::default);
    let live = t.by_hash.get(&h).and_then(Weak::upgrade);
    match live {
        Some(a) if &*a == s => return a,
        Some(_) => return Arc::from(s),
        None => {}
    }
    let new: Arc<str> = Arc::from(s);
    t.by_hash.insert(h, Arc::downgrade(&new));
    if t.by_hash.len() >= 1024 && t.by_hash.len() >= 2 * t.swept_at {
        t.by_hash.retain(|_, w| w.strong_count() > 0);
        t.swept_at = t.by_hash.len();
    }
    new
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_text_is_one_allocation_while_it_lives_and_the_table_forgets_what_died() {
        let a = interned("shop-interned-test");
        let b = interned("shop-interned-test");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &interned("other-interned-test")));
        drop((a, b));
        // Nothing keeps it: a new copy is made, and it is again shared.
        let c = interned("shop-interned-test");
        assert!(Arc::ptr_eq(&c, &interned("shop-interned-test")));
        // Many strings that die are swept: the table stays near the live count.
        for i in 0..10_000 {
            let _ = interned(&format!("gone-interned-test-{i}"));
        }
        let guard = TABLE.lock().unwrap_or_else(|p| p.into_inner());
        let t = guard.as_ref().expect("the table");
        assert!(t.by_hash.len() < 5_000, "{} entries", t.by_hash.len());
    }
}
