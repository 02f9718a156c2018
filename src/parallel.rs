//! Work split across cores when there is much of it.

/// From this many items on, [`map_split`] uses more than one core.
pub(crate) const PARALLEL_MIN: usize = 2048;

/// `f` over `items`, results in order. From [`PARALLEL_MIN`] items on (a first snapshot, every
/// Service after a node change, the items of a file read the first time) the items are split
/// across up to 4 cores: each depends only on itself and shared read-only state.
pub(crate) fn map_split<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    if items.len() < PARALLEL_MIN {
        return items.iter().map(f).collect();
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    let per = items.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|s| {
        let parts: Vec<_> = items
            .chunks(per)
            .map(|part| s.spawn(move || part.iter().map(f).collect::<Vec<_>>()))
            .collect();
        parts
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}
