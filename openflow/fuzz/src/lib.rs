//! The property the `decode` fuzz target checks, shared with `openflow/tests/fuzz_corpus.rs`
//! (which includes this file by path) so CI replays the corpus through the same code.

use openflow::Message;

/// Decode `data` as one OpenFlow message, and as a flow monitor event if it is one. Decoding
/// may fail but must not panic; whatever
/// decodes must encode to bytes that decode again, and that encoding must be a fixed point
/// (encode, decode, encode gives the same bytes). Panics when the property does not hold.
pub fn check_decode(data: &[u8]) {
    let Ok((header, msg)) = Message::decode(data) else {
        return;
    };
    // A flow monitor reply or PAUSED/RESUMED: its entries parse or fail, never panic.
    let _ = openflow::monitor::monitor_event(&msg);
    let bytes = msg.encode(header.xid);
    let (h2, msg2) = match Message::decode(&bytes) {
        Ok(v) => v,
        Err(e) => panic!("re-encoded {msg:?} does not decode: {e}"),
    };
    assert_eq!(h2.xid, header.xid);
    assert_eq!(
        msg2.encode(header.xid),
        bytes,
        "encoding is not stable for {msg:?}"
    );
}
