//! The property the `stream` fuzz target checks, shared with `ovsdb/tests/fuzz_corpus.rs`
//! (which includes this file by path) so CI replays the corpus through the same code.
//!
//! The input's first byte picks how the rest is cut into reads; the rest is what a server
//! sends. It goes through what the client does with a server's bytes: the splitter, JSON-RPC
//! decoding, and for `update2`/`update3` notifications decoding against a schema (from the
//! text as from a tree: the same outcome) and applying to a monitor cache. Nothing may panic,
//! and the messages found must not depend on how the stream was cut.

use bytes::{Bytes, BytesMut};
use ovsdb::framing::Splitter;
use ovsdb::jsonrpc::{Incoming, parse_frame};
use ovsdb::monitor::{Cache, MonitorSpec, parse_notification, parse_notification_text};
use ovsdb::schema::DatabaseSchema;
use std::sync::{Arc, OnceLock};

/// A small schema in the shape of OVN's Load_Balancer table, written for the fuzzer.
const SCHEMA: &str = r#"{
  "name": "Fuzz_NB", "version": "1.0.0",
  "tables": {
    "Load_Balancer": {"columns": {
      "name": {"type": "string"},
      "vips": {"type": {"key": "string", "value": "string", "min": 0, "max": "unlimited"}},
      "protocol": {"type": {"key": {"type": "string", "enum": ["set", ["tcp", "udp", "sctp"]]}, "min": 0, "max": 1}},
      "options": {"type": {"key": "string", "value": "string", "min": 0, "max": "unlimited"}},
      "external_ids": {"type": {"key": "string", "value": "string", "min": 0, "max": "unlimited"}}}},
    "Logical_Switch": {"columns": {
      "name": {"type": "string"},
      "load_balancer": {"type": {"key": {"type": "uuid", "refTable": "Load_Balancer", "refType": "weak"}, "min": 0, "max": "unlimited"}},
      "other_config": {"type": {"key": "string", "value": "string", "min": 0, "max": "unlimited"}}}}
  }
}"#;

fn schema() -> Arc<DatabaseSchema> {
    static S: OnceLock<Arc<DatabaseSchema>> = OnceLock::new();
    S.get_or_init(|| {
        let j: serde_json::Value = serde_json::from_str(SCHEMA).expect("the fuzz schema is JSON");
        Arc::new(DatabaseSchema::from_json(&j).expect("the fuzz schema is a schema"))
    })
    .clone()
}

/// The messages in `stream` read `chunk` bytes at a time, up to the first framing error.
fn split(stream: &[u8], chunk: usize) -> (Vec<Bytes>, bool) {
    let mut sp = Splitter::new(1 << 20);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for c in stream.chunks(chunk.max(1)) {
        buf.extend_from_slice(c);
        loop {
            match sp.split(&mut buf) {
                Ok(Some(m)) => out.push(m),
                Ok(None) => break,
                Err(_) => return (out, false),
            }
        }
    }
    (out, true)
}

pub fn check_stream(data: &[u8]) {
    let Some((&first, stream)) = data.split_first() else {
        return;
    };
    let (frames, ok) = split(stream, 1 + usize::from(first));
    let (whole, ok_whole) = split(stream, stream.len());
    assert_eq!(
        ok, ok_whole,
        "a framing error depends on how the stream was cut"
    );
    assert_eq!(
        frames, whole,
        "the messages depend on how the stream was cut"
    );
    let schema = schema();
    let mut cache = Cache::new(
        schema.clone(),
        MonitorSpec::new()
            .table("Load_Balancer")
            .table("Logical_Switch"),
    );
    for f in frames {
        let Ok(Incoming::Notification { method, params }) = parse_frame(&f) else {
            continue;
        };
        let Ok(j) = serde_json::from_slice::<serde_json::Value>(&params) else {
            continue;
        };
        let update = parse_notification(&method, &j, &schema);
        if let Ok(text) = std::str::from_utf8(&params) {
            assert_eq!(
                parse_notification_text(&method, text, &schema),
                update,
                "decoded from text, not as from a tree"
            );
        }
        if let Ok(u) = update {
            let _ = cache.apply(u.updates);
        }
    }
}
