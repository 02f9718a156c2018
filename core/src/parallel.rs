//! Work split across cores when there is much of it.

use std::sync::atomic::{AtomicUsize, Ordering};

/// From this many items on, [`map_split`] uses more than one core.
pub(crate) const PARALLEL_MIN: usize = 2048;

/// Pieces per thread: items differ in cost (a file's Services cost more than its
/// EndpointSlices, and come in runs), so each thread takes the next piece when it is done
/// with one instead of a fixed share, and no core idles while another has a run of dear items.
const PIECES_PER_THREAD: usize = 16;

/// `f` over `items`, results in order. From [`PARALLEL_MIN`] items on (a first snapshot, every
/// Service after a node change, the items of a file read the first time) the items are split
/// across up to 4 cores: each depends only on itself and shared read-only state.
pub(crate) fn map_split<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    if items.len() < PARALLEL_MIN {
        return items.iter().map(f).collect();
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    if threads == 1 {
        return items.iter().map(f).collect();
    }
    let per = items.len().div_ceil(threads * PIECES_PER_THREAD);
    let pieces: Vec<&[T]> = items.chunks(per).collect();
    let next = AtomicUsize::new(0);
    let (f, pieces, next) = (&f, &pieces, &next);
    let mut done: Vec<(usize, Vec<R>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(move || {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(piece) = pieces.get(i) else { break };
                        mine.push((i, piece.iter().map(f).collect::<Vec<_>>()));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    done.sort_unstable_by_key(|(i, _)| *i);
    let mut out = Vec::with_capacity(items.len());
    for (_, part) in done {
        out.extend(part);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_the_items_order_at_every_size() {
        for n in [
            0,
            1,
            PARALLEL_MIN - 1,
            PARALLEL_MIN,
            PARALLEL_MIN + 1,
            10_007,
        ] {
            let items: Vec<usize> = (0..n).collect();
            let out = map_split(&items, |&i| i * 3);
            assert_eq!(out, items.iter().map(|i| i * 3).collect::<Vec<_>>(), "{n}");
        }
    }

    #[test]
    fn uneven_items_are_all_made_once() {
        // The first half dear, the second cheap: pieces are taken as threads come free.
        let dear = |&i: &u64| {
            let rounds = if i < 4096 { 200 } else { 1 };
            (0..rounds).fold(i, |a, _| {
                a.wrapping_mul(6364136223846793005).wrapping_add(1)
            })
        };
        let items: Vec<u64> = (0..8192).collect();
        assert_eq!(
            map_split(&items, dear),
            items.iter().map(dear).collect::<Vec<_>>()
        );
    }
}
