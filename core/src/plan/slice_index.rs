//! The EndpointSlices of each Service, followed by allocation: a snapshot's unchanged slice is
//! the same `Arc`, so a change is found by comparing pointers, position by position, and only
//! the span of the list that differs from last time is looked at.

use super::{KeyMap, KeySet};
use crate::model::{EndpointSlice, KeptSlice, ServiceKey, build_slices, slice_service_key};
use std::collections::HashMap;
use std::sync::Arc;

/// A slice allocation seen in the last snapshot: its Service (none: not for a Service) and how
/// many times the snapshot lists it. Held, so its address cannot be reused by a new slice.
struct SeenSlice {
    owner: Option<ServiceKey>,
    count: usize,
    _held: Arc<KeptSlice>,
}

/// Each Service's slices, as of the last snapshot.
#[derive(Default)]
pub struct SliceIndex {
    /// The last snapshot's slices, by position (allocation addresses).
    order: Vec<usize>,
    seen: HashMap<usize, SeenSlice>,
    /// Each Service's slices, by allocation (a Service has one or a few).
    slices_of: KeyMap<ServiceKey, Vec<(usize, Arc<KeptSlice>)>>,
}

impl SliceIndex {
    /// The valid slices of the Service `k`, in name order.
    pub fn built(&self, k: &ServiceKey) -> Vec<EndpointSlice> {
        self.slices_of
            .get(k)
            .and_then(|v| build_slices(v.iter().map(|(_, s)| s), &mut Vec::new()).remove(k))
            .unwrap_or_default()
    }

    /// Follow the slices of a snapshot: the Services of those that appeared or went go into
    /// `dirty`.
    pub fn update(&mut self, slices: &[Arc<KeptSlice>], dirty: &mut KeySet<ServiceKey>) {
        let ptr = |s: &Arc<KeptSlice>| Arc::as_ptr(s) as usize;
        let (start, old_end, new_end) =
            super::changed_span(self.order.len(), slices.len(), |i, j| {
                self.order[i] == ptr(&slices[j])
            });
        let gone: Vec<usize> = self.order[start..old_end].to_vec();
        for s in &slices[start..new_end] {
            let p = ptr(s);
            match self.seen.get_mut(&p) {
                Some(e) => e.count += 1,
                None => {
                    let owner = slice_service_key(s);
                    if let Some(k) = &owner {
                        self.slices_of
                            .entry(k.clone())
                            .or_default()
                            .push((p, Arc::clone(s)));
                        dirty.insert(k.clone());
                    }
                    self.seen.insert(
                        p,
                        SeenSlice {
                            owner,
                            count: 1,
                            _held: Arc::clone(s),
                        },
                    );
                }
            }
        }
        self.order
            .splice(start..old_end, slices[start..new_end].iter().map(ptr));
        for ptr in gone {
            let Some(e) = self.seen.get_mut(&ptr) else {
                continue;
            };
            e.count -= 1;
            if e.count > 0 {
                continue;
            }
            if let Some(SeenSlice { owner: Some(k), .. }) = self.seen.remove(&ptr) {
                if let Some(m) = self.slices_of.get_mut(&k) {
                    m.retain(|(p, _)| *p != ptr);
                    if m.is_empty() {
                        self.slices_of.remove(&k);
                    }
                }
                dirty.insert(k);
            }
        }
    }
}
