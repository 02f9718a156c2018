//! The allocator's settings and giving freed memory back to the system.
//!
//! The agent holds a steady working set of many small allocations, and builds large transient
//! structures now and then (a file version's text and parse, a database snapshot, the full
//! model of a report). With glibc's defaults the pages those transients freed stay resident
//! between the long-lived allocations around them, and resident size is what a node pays.

/// glibc's defaults suit short programs, not an agent that holds a large state and makes
/// large transient buffers (a file version's text, a database snapshot) now and then:
/// - each thread that allocates gets its own arena (up to 8 per core), and an arena keeps what
///   it freed: every blocking thread that parsed a file version or planned a snapshot would
///   keep that much. Two arenas: one saves a little more, but then the file parse's two
///   threads wait on each other's allocations and the first sync takes longer.
/// - buffers above the mmap threshold are mapped and unmapped on their own, so their pages go
///   back at once; glibc raises that threshold (up to 32 MiB) each time such a buffer is freed,
///   after which large buffers come from the heap, where the long-lived state around them
///   keeps the freed pages resident. A fixed threshold stops that.
/// - the free top of the heap is given back from 128 KiB on (by default that limit grows with
///   the mmap threshold).
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets parameters of the allocator; glibc serializes it with
    // allocation. Called first in main, before other threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 10);
    }
}

/// Give the free pages inside the allocator's heaps back to the system, after a large
/// transient structure was dropped. glibc returns only the free top of a heap by itself; pages
/// freed in the middle, between long-lived allocations, stay resident until this. It walks
/// the free lists of every arena, so it is for after rare, large frees, not for a hot path.
pub fn give_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator; it takes the arenas'
    // own locks.
    unsafe {
        libc::malloc_trim(0);
    }
}
