//! Which Services of a snapshot changed: most snapshots list the same objects in the same
//! order with a few added, removed or replaced, so only the span of the list that differs is
//! looked at; otherwise every object is keyed.

use crate::model::KeptService;
use crate::model::Problem;
use crate::model::ProblemKind;
use crate::model::ServiceKey;
use crate::model::Subject;
use crate::plan::KeyMap;
use crate::plan::KeySet;
use crate::plan::service_index::ServiceIndex;
use std::sync::Arc;
/// The Services of a snapshot, as far as they need looking at.
pub(super) enum Incoming {
    /// Every Service, by key (first occurrence wins).
    All(KeyMap<ServiceKey, Arc<KeptService>>),
    /// Only these Services are new, replaced or gone; the others are unchanged.
    Changed {
        changed: KeyMap<ServiceKey, Arc<KeptService>>,
        removed: KeySet<ServiceKey>,
    },
}

/// Above this many positions in the changed span, keying every object costs about the same.
const IN_PLACE_MAX: usize = 256;

impl ServiceIndex {
    /// The Services changed since the last snapshot, found from the span of the list that
    /// differs ([`crate::plan::changed_span`]): those listed there now (new or replaced) and those
    /// listed there before and no longer. `None` when the span is long, or a key is or would
    /// be listed twice: then every object is keyed.
    pub(super) fn changed_in_span(&mut self, services: &[Arc<KeptService>]) -> Option<Incoming> {
        if self.duplicates {
            return None;
        }
        let (start, old_end, new_end) =
            crate::plan::changed_span(self.order.len(), services.len(), |i, j| {
                Arc::ptr_eq(&self.order[i].0, &services[j])
            });
        if (old_end - start) + (new_end - start) > IN_PLACE_MAX {
            return None;
        }
        let before: KeySet<&ServiceKey> = self.order[start..old_end]
            .iter()
            .filter_map(|(_, k)| k.as_ref())
            .collect();
        let mut now: Vec<(Arc<KeptService>, Option<ServiceKey>)> =
            Vec::with_capacity(new_end - start);
        let mut changed = KeyMap::default();
        for s in &services[start..new_end] {
            let k = s.key();
            if let Some(k) = &k {
                // Listed twice now, or also outside the span: the full path says which wins.
                let elsewhere = !before.contains(k) && self.raw.contains_key(k);
                if elsewhere || changed.insert(k.clone(), Arc::clone(s)).is_some() {
                    return None;
                }
            }
            now.push((Arc::clone(s), k));
        }
        let removed: KeySet<ServiceKey> = before
            .into_iter()
            .filter(|k| !changed.contains_key(*k))
            .cloned()
            .collect();
        changed.retain(|k, s| self.raw.get(k).is_none_or(|old| !Arc::ptr_eq(old, s)));
        let unnamed = |v: &[(Arc<KeptService>, Option<ServiceKey>)]| {
            v.iter().filter(|(_, k)| k.is_none()).count()
        };
        self.unnamed = self.unnamed - unnamed(&self.order[start..old_end]) + unnamed(&now);
        self.order.splice(start..old_end, now);
        Some(Incoming::Changed { changed, removed })
    }

    /// Key every Service of a snapshot (first occurrence of a key wins) and remember the order.
    pub(super) fn key_all(
        &mut self,
        services: &[Arc<KeptService>],
    ) -> KeyMap<ServiceKey, Arc<KeptService>> {
        let mut all = KeyMap::with_capacity_and_hasher(services.len(), Default::default());
        let mut duplicates = Vec::new();
        self.order.clear();
        self.unnamed = 0;
        for s in services {
            let k = s.key();
            match &k {
                Some(k) => match all.entry(k.clone()) {
                    std::collections::hash_map::Entry::Occupied(_) => {
                        duplicates.push(Problem::new(
                            Subject::Service(k.clone()),
                            ProblemKind::Duplicate,
                            "listed twice; the first one is used",
                        ));
                    }
                    std::collections::hash_map::Entry::Vacant(e) => {
                        e.insert(Arc::clone(s));
                    }
                },
                None => self.unnamed += 1,
            }
            self.order.push((Arc::clone(s), k));
        }
        self.duplicates = !duplicates.is_empty();
        self.duplicate_problems = duplicates.into();
        all
    }
}
