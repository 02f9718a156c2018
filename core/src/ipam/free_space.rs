//! The free addresses of one pool and family, as disjoint inclusive intervals: taking the
//! lowest free address, a given one, or giving one back is O(log intervals), so allocating
//! the 10,000th address of a pool costs what the first did.

use std::collections::BTreeMap;

/// Free addresses as integers (an IPv4 address as its `u32`, widened), start -> end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FreeSpace {
    free: BTreeMap<u128, u128>,
    count: u128,
}

impl FreeSpace {
    /// Every address of `ranges` free (inclusive bounds; overlapping or adjacent ones merge).
    pub fn of(ranges: &[(u128, u128)]) -> FreeSpace {
        let mut v: Vec<(u128, u128)> = ranges.iter().filter(|(s, e)| s <= e).copied().collect();
        v.sort_unstable();
        let mut space = FreeSpace::default();
        let mut last: Option<(u128, u128)> = None;
        for (s, e) in v {
            last = match last {
                Some((ls, le)) if s <= le.saturating_add(1) => Some((ls, le.max(e))),
                Some(done) => {
                    space.insert(done);
                    Some((s, e))
                }
                None => Some((s, e)),
            };
        }
        if let Some(done) = last {
            space.insert(done);
        }
        space
    }

    fn insert(&mut self, (s, e): (u128, u128)) {
        self.free.insert(s, e);
        self.count = self.count.saturating_add(e - s).saturating_add(1);
    }

    /// How many addresses are free (saturating: an IPv6 pool may hold 2^128).
    pub fn count(&self) -> u128 {
        self.count
    }

    pub fn is_free(&self, x: u128) -> bool {
        self.free
            .range(..=x)
            .next_back()
            .is_some_and(|(_, &e)| x <= e)
    }

    /// Take `x` if it is free.
    pub fn take(&mut self, x: u128) -> bool {
        let Some((&s, &e)) = self.free.range(..=x).next_back() else {
            return false;
        };
        if x > e {
            return false;
        }
        self.free.remove(&s);
        if s < x {
            self.free.insert(s, x - 1);
        }
        if x < e {
            self.free.insert(x + 1, e);
        }
        self.count -= 1;
        true
    }

    /// The lowest free address for which `usable` holds, taken. `usable` may refuse a few
    /// addresses here and there (the IPv4 `.0` and `.255` of a pool that avoids them): each
    /// refused one is stepped over, so a search costs the refused addresses before the answer.
    pub fn take_lowest(&mut self, usable: impl Fn(u128) -> bool) -> Option<u128> {
        let x = self.lowest(usable)?;
        self.take(x).then_some(x)
    }

    /// The lowest free address for which `usable` holds (see [`FreeSpace::take_lowest`]).
    pub fn lowest(&self, usable: impl Fn(u128) -> bool) -> Option<u128> {
        for (&s, &e) in &self.free {
            let mut x = s;
            loop {
                if usable(x) {
                    return Some(x);
                }
                if x == e {
                    break;
                }
                x += 1;
            }
        }
        None
    }

    /// Give `x` back (a no-op when it is free already). The caller keeps it inside the pool.
    pub fn give(&mut self, x: u128) {
        if self.is_free(x) {
            return;
        }
        let mut start = x;
        let mut end = x;
        if let Some((&s, &e)) = self.free.range(..x).next_back()
            && e.checked_add(1) == Some(x)
        {
            self.free.remove(&s);
            start = s;
        }
        if let Some(next) = x.checked_add(1)
            && let Some(e) = self.free.remove(&next)
        {
            end = e;
        }
        self.free.insert(start, end);
        self.count += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn takes_lowest_first_and_merges_on_give() {
        let mut f = FreeSpace::of(&[(10, 12), (20, 20)]);
        assert_eq!(f.count(), 4);
        assert_eq!(f.take_lowest(|_| true), Some(10));
        assert_eq!(f.take_lowest(|x| x != 11), Some(12));
        assert!(f.take(11));
        assert_eq!(f.take_lowest(|_| true), Some(20));
        assert_eq!(f.take_lowest(|_| true), None);
        f.give(11);
        f.give(10);
        f.give(12);
        assert_eq!(f, FreeSpace::of(&[(10, 12)]));
    }

    proptest! {
        /// Against a plain set of free addresses: the same answers after any sequence.
        #[test]
        fn behaves_as_a_set(ops in proptest::collection::vec((0u8..3, 0u128..64), 0..200)) {
            let mut f = FreeSpace::of(&[(0, 20), (30, 40), (41, 50)]);
            let mut set: BTreeSet<u128> = (0..=20).chain(30..=50).collect();
            let pool: BTreeSet<u128> = set.clone();
            for (op, x) in ops {
                match op {
                    0 => prop_assert_eq!(f.take(x), set.remove(&x)),
                    1 => {
                        let want = set.iter().copied().find(|v| v % 7 != 3);
                        prop_assert_eq!(f.take_lowest(|v| v % 7 != 3), want);
                        if let Some(w) = want { set.remove(&w); }
                    }
                    _ => if pool.contains(&x) { f.give(x); set.insert(x); },
                }
                prop_assert_eq!(f.count(), set.len() as u128);
                for v in 0..64u128 {
                    prop_assert_eq!(f.is_free(v), set.contains(&v));
                }
            }
        }
    }
}
