//! Replays the `stream` fuzz corpus (`ovsdb/fuzz/corpus/stream/`) through the fuzz target's own
//! check, so CI covers it without nightly: a server's bytes through the splitter, JSON-RPC
//! decoding and monitor updates, cut into reads two ways. `seed-*` files are well-formed
//! exchanges, the rest (found by the fuzzer, or odd on purpose) only must not panic.

#[path = "../fuzz/src/lib.rs"]
mod fuzz_check;

use std::path::PathBuf;

#[test]
fn replay_corpus() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/stream");
    let (mut seeds, mut n) = (0, 0);
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        fuzz_check::check_stream(&data);
        if path
            .file_name()
            .is_some_and(|f| f.to_string_lossy().starts_with("seed-"))
        {
            seeds += 1;
        }
        n += 1;
    }
    // The corpus is committed; an empty or missing one must not pass silently.
    assert!(seeds >= 15, "only {seeds} seeds");
    assert!(n > seeds, "no other inputs");
}
