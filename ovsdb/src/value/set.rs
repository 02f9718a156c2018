//! Sets and maps of atoms: sorted, distinct, in a boxed slice of exactly their length.
//!
//! Most OVSDB sets and maps hold a handful of elements, and a B-tree allocates a node of eleven
//! slots even for one. A sorted slice costs just its elements, iterates in the same ascending
//! order a B-tree did and finds by binary search. Changing one element reallocates the slice:
//! bulk changes (a monitor's diffs) go through one merge instead.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::iter::FusedIterator;

use super::Atom;

/// A set of atoms, in ascending order.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AtomSet(Box<[Atom]>);

impl AtomSet {
    pub fn new() -> AtomSet {
        AtomSet::default()
    }

    /// `atoms` ascending without repeats (checked in debug builds).
    pub(crate) fn from_sorted(atoms: Vec<Atom>) -> AtomSet {
        debug_assert!(atoms.windows(2).all(|w| w[0] < w[1]));
        AtomSet(atoms.into_boxed_slice())
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Atom> {
        self.0.iter()
    }

    pub fn as_slice(&self) -> &[Atom] {
        &self.0
    }

    pub fn first(&self) -> Option<&Atom> {
        self.0.first()
    }

    pub fn last(&self) -> Option<&Atom> {
        self.0.last()
    }

    pub fn contains(&self, a: &Atom) -> bool {
        self.0.binary_search(a).is_ok()
    }

    /// Adds `a`; `false` if it was there already.
    pub fn insert(&mut self, a: Atom) -> bool {
        match self.0.binary_search(&a) {
            Ok(_) => false,
            Err(i) => {
                edit(&mut self.0, |v| {
                    v.reserve_exact(1);
                    v.insert(i, a);
                });
                true
            }
        }
    }

    /// Removes `a`; `false` if it was not there.
    pub fn remove(&mut self, a: &Atom) -> bool {
        match self.0.binary_search(a) {
            Ok(i) => {
                edit(&mut self.0, |v| drop(v.remove(i)));
                true
            }
            Err(_) => false,
        }
    }

    /// The atoms in exactly one of the two sets.
    pub fn symmetric_difference(self, other: AtomSet) -> AtomSet {
        AtomSet::from_sorted(merge(self, other, Atom::cmp, |_, _| None))
    }
}

/// Changes a slice in place as a vector, leaving it at its new length exactly.
fn edit<T>(slice: &mut Box<[T]>, f: impl FnOnce(&mut Vec<T>)) {
    let mut v = std::mem::take(slice).into_vec();
    f(&mut v);
    *slice = v.into_boxed_slice();
}

/// Merges two ascending sequences without repeats: what one side alone has is kept, and what
/// both have becomes what `both` makes of the pair (one or none).
pub(crate) fn merge<T>(
    a: impl IntoIterator<Item = T>,
    b: impl IntoIterator<Item = T>,
    cmp: impl Fn(&T, &T) -> Ordering,
    mut both: impl FnMut(T, T) -> Option<T>,
) -> Vec<T> {
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    let mut out = Vec::with_capacity(a.size_hint().0 + b.size_hint().0);
    loop {
        let side = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => cmp(x, y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => break,
        };
        match side {
            Ordering::Less => out.extend(a.next()),
            Ordering::Greater => out.extend(b.next()),
            Ordering::Equal => {
                if let (Some(x), Some(y)) = (a.next(), b.next()) {
                    out.extend(both(x, y));
                }
            }
        }
    }
    out
}

impl FromIterator<Atom> for AtomSet {
    fn from_iter<I: IntoIterator<Item = Atom>>(iter: I) -> AtomSet {
        let mut v: Vec<Atom> = iter.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        AtomSet::from_sorted(v)
    }
}

impl<const N: usize> From<[Atom; N]> for AtomSet {
    fn from(atoms: [Atom; N]) -> AtomSet {
        atoms.into_iter().collect()
    }
}

impl From<BTreeSet<Atom>> for AtomSet {
    fn from(s: BTreeSet<Atom>) -> AtomSet {
        AtomSet::from_sorted(s.into_iter().collect())
    }
}

impl IntoIterator for AtomSet {
    type Item = Atom;
    type IntoIter = std::vec::IntoIter<Atom>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_vec().into_iter()
    }
}

impl<'a> IntoIterator for &'a AtomSet {
    type Item = &'a Atom;
    type IntoIter = std::slice::Iter<'a, Atom>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl fmt::Debug for AtomSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl serde::Serialize for AtomSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

/// A map of atoms to atoms, in ascending key order.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AtomMap(Box<[(Atom, Atom)]>);

impl AtomMap {
    pub fn new() -> AtomMap {
        AtomMap::default()
    }

    /// `pairs` in ascending key order without repeated keys (checked in debug builds).
    pub(crate) fn from_sorted(pairs: Vec<(Atom, Atom)>) -> AtomMap {
        debug_assert!(pairs.windows(2).all(|w| w[0].0 < w[1].0));
        AtomMap(pairs.into_boxed_slice())
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `(key, value)` pairs in key order.
    pub fn iter(&self) -> MapIter<'_> {
        MapIter(self.0.iter())
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &Atom> + ExactSizeIterator + Clone {
        self.0.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Atom> + ExactSizeIterator + Clone {
        self.0.iter().map(|(_, v)| v)
    }

    pub fn as_slice(&self) -> &[(Atom, Atom)] {
        &self.0
    }

    pub fn first_key_value(&self) -> Option<(&Atom, &Atom)> {
        self.0.first().map(|(k, v)| (k, v))
    }

    fn find(&self, key: &Atom) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.cmp(key))
    }

    pub fn get(&self, key: &Atom) -> Option<&Atom> {
        self.find(key).ok().map(|i| &self.0[i].1)
    }

    /// The value of a string key, without making an atom of the key.
    pub fn get_str(&self, key: &str) -> Option<&Atom> {
        let i = self.0.binary_search_by(|(k, _)| k.cmp_str(key)).ok()?;
        Some(&self.0[i].1)
    }

    pub fn contains_key(&self, key: &Atom) -> bool {
        self.find(key).is_ok()
    }

    /// Sets `key` to `value`; the value it replaced, if any.
    pub fn insert(&mut self, key: Atom, value: Atom) -> Option<Atom> {
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                edit(&mut self.0, |v| {
                    v.reserve_exact(1);
                    v.insert(i, (key, value));
                });
                None
            }
        }
    }

    /// Removes `key`; its value, if it was there.
    pub fn remove(&mut self, key: &Atom) -> Option<Atom> {
        let i = self.find(key).ok()?;
        let mut removed = None;
        edit(&mut self.0, |v| removed = Some(v.remove(i).1));
        removed
    }
}

/// Iterator over an [`AtomMap`]'s pairs, as references (like a `BTreeMap`'s).
#[derive(Clone, Debug)]
pub struct MapIter<'a>(std::slice::Iter<'a, (Atom, Atom)>);

impl<'a> Iterator for MapIter<'a> {
    type Item = (&'a Atom, &'a Atom);
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(k, v)| (k, v))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for MapIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().map(|(k, v)| (k, v))
    }
}

impl ExactSizeIterator for MapIter<'_> {}
impl FusedIterator for MapIter<'_> {}

/// Pairs in key order; of pairs with the same key the last one stays, as with repeated
/// inserts.
impl FromIterator<(Atom, Atom)> for AtomMap {
    fn from_iter<I: IntoIterator<Item = (Atom, Atom)>>(iter: I) -> AtomMap {
        let mut v: Vec<(Atom, Atom)> = iter.into_iter().collect();
        // Stable: pairs of one key stay in arrival order.
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                std::mem::swap(later, kept);
            }
            same
        });
        AtomMap::from_sorted(v)
    }
}

impl<const N: usize> From<[(Atom, Atom); N]> for AtomMap {
    fn from(pairs: [(Atom, Atom); N]) -> AtomMap {
        pairs.into_iter().collect()
    }
}

impl From<BTreeMap<Atom, Atom>> for AtomMap {
    fn from(m: BTreeMap<Atom, Atom>) -> AtomMap {
        AtomMap::from_sorted(m.into_iter().collect())
    }
}

impl IntoIterator for AtomMap {
    type Item = (Atom, Atom);
    type IntoIter = std::vec::IntoIter<(Atom, Atom)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_vec().into_iter()
    }
}

impl<'a> IntoIterator for &'a AtomMap {
    type Item = (&'a Atom, &'a Atom);
    type IntoIter = MapIter<'a>;
    fn into_iter(self) -> MapIter<'a> {
        self.iter()
    }
}

impl fmt::Debug for AtomMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> Atom {
        Atom::string(x)
    }

    /// Same contents, order, lookups and comparisons as the B-trees they replace.
    #[test]
    fn like_btrees() {
        let atoms = [
            s("b"),
            Atom::Integer(3),
            s("a"),
            Atom::Real(-0.0),
            s("b"),
            Atom::Real(0.0),
        ];
        let set: AtomSet = atoms.clone().into_iter().collect();
        let tree: BTreeSet<Atom> = atoms.clone().into_iter().collect();
        assert!(set.iter().eq(tree.iter()));
        assert_eq!(set, AtomSet::from(tree.clone()));
        assert!(set.contains(&s("a")) && !set.contains(&s("c")));
        assert_eq!(set.first(), tree.first());

        let mut m = set.clone();
        let mut t = tree.clone();
        for a in [s("c"), s("a"), Atom::Integer(3), s("c")] {
            assert_eq!(m.insert(a.clone()), t.insert(a.clone()));
            assert_eq!(m.remove(&a), t.remove(&a));
            assert_eq!(m.insert(a.clone()), t.insert(a));
        }
        assert!(m.iter().eq(t.iter()));
        assert_eq!(m.len(), m.as_slice().len());

        let (x, y): (AtomSet, AtomSet) = ([s("a"), s("b")].into(), [s("b"), s("c")].into());
        assert_eq!(
            x.clone().symmetric_difference(y.clone()),
            [s("a"), s("c")].into()
        );
        assert_eq!(
            x.cmp(&y),
            BTreeSet::from_iter(x.clone()).cmp(&BTreeSet::from_iter(y))
        );

        let pairs = [(s("k"), s("1")), (s("a"), s("2")), (s("k"), s("3"))];
        let map: AtomMap = pairs.clone().into_iter().collect();
        let mut tree = BTreeMap::new();
        for (k, v) in pairs {
            tree.insert(k, v);
        }
        assert!(map.iter().eq(tree.iter()));
        assert_eq!(format!("{map:?}"), format!("{tree:?}"));
        assert_eq!(map.get(&s("k")), Some(&s("3")));
        assert_eq!(map.get_str("a"), Some(&s("2")));
        assert_eq!(map.get_str("z"), None);
        let mut m2 = map.clone();
        assert_eq!(m2.insert(s("b"), s("4")), None);
        assert_eq!(m2.insert(s("b"), s("5")), Some(s("4")));
        assert_eq!(m2.remove(&s("a")), Some(s("2")));
        assert_eq!(m2.remove(&s("a")), None);
        assert!(m2.keys().eq([s("b"), s("k")].iter()));
        assert!(map < m2 && AtomMap::from(tree) == map);
    }
}
