//! Tests of [`super`] in memory, with paused time: records go out paced, oldest first, once;
//! the same is written again only after [`REPAIR_AFTER`] (or [`RETRY_AFTER`] a failure).

use super::*;
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Api {
    written: Vec<(Want, Instant)>,
    failing: usize,
}

struct Fake {
    api: Arc<Mutex<Api>>,
}

impl Apply for Fake {
    async fn apply(&mut self, want: &Want) -> Result<(), RecordWriteError> {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let mut api = self.api.lock().unwrap();
        if api.failing > 0 {
            api.failing -= 1;
            return Err(RecordWriteError::Timeout {
                service: want.service.clone(),
                after: Duration::ZERO,
            });
        }
        api.written.push((want.clone(), Instant::now()));
        Ok(())
    }
}

fn want(name: &str, message: Option<&str>) -> Want {
    Want {
        service: ServiceKey::new("shop", name),
        message: message.map(Arc::from),
    }
}

fn writer(api: &Arc<Mutex<Api>>, per_second: f64, burst: u32) -> RecordWriter {
    RecordWriter::start_with(
        Fake { api: api.clone() },
        per_second,
        burst,
        RecordCounters::default(),
    )
}

async fn settle(d: Duration) {
    tokio::time::sleep(d).await;
}

fn names(api: &Arc<Mutex<Api>>) -> Vec<String> {
    let api = api.lock().unwrap();
    api.written
        .iter()
        .map(|(w, _)| w.service.name.to_string())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn two_hundred_records_go_out_at_the_rate_each_once() {
    let api = Arc::new(Mutex::new(Api::default()));
    let w = writer(&api, 10.0, 5);
    let set: Vec<Want> = (0..200)
        .map(|i| want(&format!("s{i:03}"), Some("192.0.2.1 by node-a")))
        .collect();
    w.update(set.clone());
    settle(Duration::from_secs(1)).await;
    // A burst of 5, then 10 a second.
    let first = names(&api).len();
    assert!((14..=16).contains(&first), "{first}");
    // The same set again (new plans made before the Services caught up) adds nothing.
    for _ in 0..10 {
        w.update(set.clone());
    }
    settle(Duration::from_secs(20)).await;
    let all = names(&api);
    assert_eq!(all.len(), 200);
    let mut sorted = all.clone();
    sorted.sort();
    assert_eq!(all, sorted, "oldest first, in the set's order");
    sorted.dedup();
    assert_eq!(sorted.len(), 200, "each once");
    // The Services caught up: nothing is owed, nothing more written.
    w.update(Vec::new());
    settle(REPAIR_AFTER * 3).await;
    assert_eq!(names(&api).len(), 200);
    assert_eq!(w.counters.written.get(), 200);
}

#[tokio::test(start_paused = true)]
async fn what_stops_being_owed_is_not_written_and_a_change_is_written_at_once() {
    let api = Arc::new(Mutex::new(Api::default()));
    let w = writer(&api, 1.0, 1);
    w.update(vec![
        want("a", Some("192.0.2.1 by node-a")),
        want("b", Some("192.0.2.2 by node-a")),
        want("c", Some("192.0.2.3 by node-a")),
    ]);
    settle(Duration::from_millis(100)).await;
    // b's record caught up (another node wrote it, or the VIP moved on): no longer owed.
    w.update(vec![
        want("a", Some("192.0.2.1 by node-a")),
        want("c", None),
    ]);
    settle(Duration::from_secs(5)).await;
    let got: Vec<(String, Option<String>)> = (api.lock().unwrap().written.iter())
        .map(|(w, _)| {
            (
                w.service.name.to_string(),
                w.message.as_deref().map(String::from),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("a".to_string(), Some("192.0.2.1 by node-a".to_string())),
            ("c".to_string(), None),
        ]
    );
    // a's record is owed again with other content: written at once, not held.
    w.update(vec![want("a", Some("192.0.2.1 by node-b (from node-a)"))]);
    settle(Duration::from_secs(2)).await;
    assert_eq!(names(&api), ["a", "c", "a"]);
    assert_eq!(w.counters.removed.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_record_still_owed_after_its_write_is_written_again_only_after_the_repair_wait() {
    let api = Arc::new(Mutex::new(Api::default()));
    let w = writer(&api, 50.0, 50);
    let a = want("a", Some("192.0.2.1 by node-a"));
    w.update(vec![a.clone()]);
    settle(Duration::from_millis(100)).await;
    assert_eq!(names(&api), ["a"]);
    // The Service still says otherwise (its watch is late, or another node wrote last): the
    // plans keep owing it; it is not written again before the repair wait.
    let start = Instant::now();
    for _ in 0..20 {
        w.update(vec![a.clone()]);
        settle(Duration::from_secs(1)).await;
    }
    assert_eq!(names(&api), ["a"]);
    settle(REPAIR_AFTER).await;
    let api_now = api.lock().unwrap();
    assert_eq!(api_now.written.len(), 2);
    let again = api_now.written[1].1 - start;
    assert!(again <= REPAIR_AFTER, "{again:?}");
}

#[tokio::test(start_paused = true)]
async fn a_refused_write_is_tried_again_after_the_retry_wait() {
    let api = Arc::new(Mutex::new(Api {
        failing: 2,
        ..Api::default()
    }));
    let w = writer(&api, 50.0, 50);
    w.update(vec![want("a", Some("192.0.2.1 by node-a"))]);
    settle(Duration::from_millis(100)).await;
    assert!(names(&api).is_empty());
    settle(RETRY_AFTER).await;
    assert!(names(&api).is_empty(), "failed twice");
    settle(RETRY_AFTER).await;
    assert_eq!(names(&api), ["a"]);
    assert_eq!(w.counters.failed.get(), 2);
}

#[test]
fn the_patch_says_the_condition_or_nothing() {
    let p = record_patch(Some("192.0.2.1 by node-a"));
    let c = &p["status"]["conditions"][0];
    assert_eq!(c["type"], CONDITION);
    assert_eq!(c["status"], "True");
    assert_eq!(c["reason"], REASON);
    assert_eq!(c["message"], "192.0.2.1 by node-a");
    assert!(c["lastTransitionTime"].is_string());
    let gone = record_patch(None);
    assert_eq!(
        gone,
        serde_json::json!({"apiVersion": "v1", "kind": "Service"})
    );
}
