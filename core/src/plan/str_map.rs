//! A small map of strings sorted by key, held in two allocations: one text with every key and
//! value, and where each ends.
//!
//! A planned Load_Balancer row has three such maps of one to five pairs (`vips`, `options`,
//! `external_ids`). As `BTreeMap<String, String>` each costs a B-tree node sized for eleven
//! pairs plus one allocation per string; at 10,000 Services that was most of the planned rows'
//! memory. These maps are built once and read many times, so the layout favours reading.

use std::collections::BTreeMap;
use std::fmt;

#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct StrMap {
    /// Key 0, value 0, key 1, value 1, ... back to back.
    text: Box<str>,
    /// The end of each key and value in `text`: two per pair.
    ends: Box<[u32]>,
}

impl StrMap {
    pub fn new() -> StrMap {
        StrMap::default()
    }

    /// From a map's pairs (sorted by key, each key once).
    fn of<K: AsRef<str>, V: AsRef<str>>(m: &BTreeMap<K, V>) -> StrMap {
        let pairs = m.iter().map(|(k, v)| (k.as_ref(), v.as_ref()));
        let size: usize = pairs.clone().map(|(k, v)| k.len() + v.len()).sum();
        let mut text = String::with_capacity(size);
        let mut ends = Vec::with_capacity(m.len() * 2);
        for (k, v) in pairs {
            for s in [k, v] {
                text.push_str(s);
                // A row's map is far below 4 GiB: its text is sent in one OVSDB message.
                ends.push(u32::try_from(text.len()).unwrap_or(u32::MAX));
            }
        }
        StrMap {
            text: text.into_boxed_str(),
            ends: ends.into_boxed_slice(),
        }
    }

    pub fn len(&self) -> usize {
        self.ends.len() / 2
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The `i`th string (keys even, values odd).
    fn part(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.text[start..self.ends[i] as usize]
    }

    /// The pairs in key order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + Clone {
        (0..self.len()).map(|i| (self.part(2 * i), self.part(2 * i + 1)))
    }

    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> + Clone {
        self.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl ExactSizeIterator<Item = &str> + Clone {
        self.iter().map(|(_, v)| v)
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.part(2 * mid).cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(self.part(2 * mid + 1)),
            }
        }
        None
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Set `key` to `value`; the map is rebuilt (it is small and seldom changed).
    pub fn insert(&mut self, key: &str, value: &str) {
        let mut m: BTreeMap<&str, &str> = self.iter().collect();
        m.insert(key, value);
        *self = StrMap::of(&m);
    }

    /// The pairs as owned strings.
    pub fn to_btree(&self) -> BTreeMap<String, String> {
        self.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }
}

/// Later pairs win over earlier ones with the same key, as inserting into a map would.
impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for StrMap {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> StrMap {
        let owned: Vec<(K, V)> = iter.into_iter().collect();
        let m: BTreeMap<&str, &str> = owned
            .iter()
            .map(|(k, v)| (k.as_ref(), v.as_ref()))
            .collect();
        StrMap::of(&m)
    }
}

impl<K: AsRef<str>, V: AsRef<str>, const N: usize> From<[(K, V); N]> for StrMap {
    fn from(pairs: [(K, V); N]) -> StrMap {
        pairs.into_iter().collect()
    }
}

impl From<&BTreeMap<String, String>> for StrMap {
    fn from(m: &BTreeMap<String, String>) -> StrMap {
        StrMap::of(m)
    }
}

impl std::ops::Index<&str> for StrMap {
    type Output = str;

    fn index(&self, key: &str) -> &str {
        match self.get(key) {
            Some(v) => v,
            None => panic!("no key {key:?} in the map"),
        }
    }
}

impl PartialOrd for StrMap {
    fn partial_cmp(&self, other: &StrMap) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// As the maps' pairs compare in order (a `BTreeMap`'s order).
impl Ord for StrMap {
    fn cmp(&self, other: &StrMap) -> std::cmp::Ordering {
        self.iter().cmp(other.iter())
    }
}

impl fmt::Debug for StrMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl serde::Serialize for StrMap {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::{btree_map, vec};
    use proptest::prelude::*;

    proptest! {
        /// The map reads as the B-tree map of the same pairs would, in every way it is used.
        #[test]
        fn reads_as_a_btree_map(
            pairs in vec(("[a-d]{0,3}", "[a-d]{0,3}"), 0..8),
            other in btree_map("[a-d]{0,3}", "[a-d]{0,3}", 0..4),
            probe in "[a-d]{0,3}",
            extra in ("[a-d]{0,3}", "[a-d]{0,3}"),
        ) {
            let want: BTreeMap<String, String> = pairs.iter().cloned().collect();
            let mut m: StrMap = pairs.iter().cloned().collect();
            prop_assert_eq!(m.to_btree(), want.clone());
            prop_assert_eq!(m.len(), want.len());
            prop_assert_eq!(m.get(&probe), want.get(&probe).map(String::as_str));
            prop_assert_eq!(StrMap::from(&want), m.clone());
            let o = StrMap::from(&other);
            prop_assert_eq!(m.cmp(&o), want.cmp(&other));
            prop_assert_eq!(m == o, want == other);
            let mut want = want;
            want.insert(extra.0.clone(), extra.1.clone());
            m.insert(&extra.0, &extra.1);
            prop_assert_eq!(m.to_btree(), want);
        }
    }
}
