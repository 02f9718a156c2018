//! The property the `objects` fuzz target checks, shared with `tests/file_fuzz_corpus.rs`
//! (which includes this file by path) so CI replays the corpus through the same code.
//!
//! An objects file (YAML or JSON text) goes through the file source's parser (by item and
//! whole, which must agree) and, when it parses, the planner every command and the agent use,
//! with rows and an announcing bridge. Nothing may panic; a file either is refused with an
//! error or yields objects whose plans can be made.

use vipflow::config::Config;

pub fn check_objects(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let by_item = vipflow::decode::parse(text);
    // The by-item paths must take what the whole-document path takes, and nothing else.
    match (&by_item, vipflow::decode::parse_whole(text)) {
        (Ok(a), Ok(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}"), "{text:?}"),
        (Err(_), Err(_)) => {}
        (a, b) => panic!("by item {a:?}, whole {b:?} for {text:?}"),
    }
    let Ok(loaded) = by_item else {
        return;
    };
    let mut cfg = Config {
        node_name: "node-a".into(),
        ..Config::default()
    };
    for b in &mut cfg.bridges {
        b.announce = true;
    }
    let one = vipflow::agent::plan_once(&cfg, &loaded.objects, true);
    let _ = vipflow::agent::report_problems(&cfg, &loaded, &one.planner.services().report());
    for i in 0..cfg.bridges.len() {
        let _ = one.flows(i);
    }
}
