//! A set kept as a sorted vector that grows one slot at a time.
//!
//! The indexes keep one such set per key for tens of thousands of keys (the claimants of a
//! VIP:port, the rows of a Service), and a set nearly always holds one or two members: a
//! B-tree set would take a node of eleven for each, a hash set a table, and a vector grown the
//! usual way room for four.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VecSet<T>(Vec<T>);

impl<T> Default for VecSet<T> {
    fn default() -> Self {
        VecSet(Vec::new())
    }
}

impl<T: Ord> VecSet<T> {
    /// Add `v` unless it is there.
    pub fn insert(&mut self, v: T) {
        if let Err(i) = self.0.binary_search(&v) {
            self.0.reserve_exact(1);
            self.0.insert(i, v);
        }
    }

    /// Take `v` out if it is there.
    pub fn remove(&mut self, v: &T) {
        if let Ok(i) = self.0.binary_search(v) {
            self.0.remove(i);
        }
    }

    /// The least member.
    pub fn first(&self) -> Option<&T> {
        self.0.first()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The members in order.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.0.iter()
    }
}

impl<'a, T> IntoIterator for &'a VecSet<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::VecSet;

    #[test]
    fn keeps_members_sorted_once_and_exactly_sized() {
        let mut s = VecSet::default();
        for v in [3, 1, 2, 3, 1] {
            s.insert(v);
        }
        assert_eq!(s.iter().copied().collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(s.0.capacity(), 3);
        s.remove(&2);
        s.remove(&7);
        assert_eq!(s.first(), Some(&1));
        s.remove(&1);
        s.remove(&3);
        assert!(s.is_empty());
    }
}
