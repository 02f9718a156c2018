//! The YAML subset reader against serde_yaml_ng, on one List item's text: whatever the subset
//! takes, serde_yaml_ng takes to the same value, and nothing panics.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../core/src/decode/yaml_subset.rs"]
mod yaml_subset;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(taken) = yaml_subset::item(text) else {
        return;
    };
    let mut by_libyaml = serde_yaml_ng::from_str::<Vec<serde_json::Value>>(text)
        .unwrap_or_else(|e| panic!("the subset took {text:?}, serde_yaml_ng refused it: {e}"));
    assert_eq!(by_libyaml.len(), 1, "{text:?}");
    assert_eq!(by_libyaml.pop(), Some(taken), "{text:?}");
});
