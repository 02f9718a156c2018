//! Replays the `objects` fuzz corpus (`fuzz/corpus/objects/`) through the fuzz target's own
//! check, so CI covers it without nightly: objects files through the parser, the model and
//! both planners. `seed-*` files must parse; the rest only must not panic.

#[path = "../fuzz/src/lib.rs"]
mod fuzz_check;

use std::path::PathBuf;

#[test]
fn replay_corpus() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/objects");
    let (mut seeds, mut n) = (0, 0);
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        fuzz_check::check_objects(&data);
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("seed-") {
            let text = String::from_utf8(data).unwrap();
            assert!(
                vipflow::decode::parse(&text).is_ok(),
                "{name} does not parse"
            );
            seeds += 1;
        }
        n += 1;
    }
    assert!(seeds >= 3, "only {seeds} seeds");
    assert!(n > seeds, "no other inputs");
}
