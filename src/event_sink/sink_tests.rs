//! Tests of [`super`] in memory, with paused time: what is held back by the rate limit goes out
//! by itself, oldest first; what stops holding first is dropped; what was said before a restart
//! is not said again.

use super::*;
use crate::model::ServiceKey;
use std::sync::{Arc, Mutex};
use tokio::time::Instant;

/// One published Event, as the fake API server keeps it.
#[derive(Debug, Clone)]
struct Written {
    digest: u64,
    event: ServiceEvent,
    at: Instant,
}

/// The Events of every sink that shares it, and whether writes and lists fail.
#[derive(Default)]
struct Api {
    events: Vec<Written>,
    failing_writes: usize,
    list_fails: bool,
}

struct Fake {
    api: Arc<Mutex<Api>>,
}

impl Writer for Fake {
    async fn said(&mut self) -> Result<Vec<u64>, EventsError> {
        let api = self.api.lock().unwrap();
        if api.list_fails {
            return Err(EventsError::Timeout {
                what: "listing".into(),
                after: Duration::ZERO,
            });
        }
        Ok(api.events.iter().map(|w| w.digest).collect())
    }

    async fn write(&mut self, _id: u64, digest: u64, ev: &ServiceEvent) -> Result<(), EventsError> {
        // A round trip takes a little time.
        tokio::time::sleep(Duration::from_millis(1)).await;
        let mut api = self.api.lock().unwrap();
        if api.failing_writes > 0 {
            api.failing_writes -= 1;
            return Err(EventsError::Timeout {
                what: "writing".into(),
                after: Duration::ZERO,
            });
        }
        api.events.push(Written {
            digest,
            event: ev.clone(),
            at: Instant::now(),
        });
        Ok(())
    }

    fn said_by(&self) -> &str {
        "test"
    }
}

fn sink(api: &Arc<Mutex<Api>>, per_second: f64, burst: u32) -> EventSink {
    EventSink::start_with(
        Fake { api: api.clone() },
        per_second,
        burst,
        EventCounters::default(),
    )
}

fn allocated(name: &str, ip: &str) -> ServiceEvent {
    ServiceEvent {
        service: ServiceKey::new("shop", name),
        warning: false,
        reason: "IPAllocated",
        note: format!("assigned {ip}").into(),
    }
}

/// `n` Services' statements, named `prefix` and a number.
fn many(prefix: &str, n: usize) -> BTreeSet<ServiceEvent> {
    (0..n)
        .map(|i| {
            allocated(
                &format!("{prefix}{i:03}"),
                &format!("10.0.{}.{}", i / 256, i % 256),
            )
        })
        .collect()
}

fn names(api: &Arc<Mutex<Api>>) -> Vec<String> {
    let api = api.lock().unwrap();
    api.events
        .iter()
        .map(|w| w.event.service.name.to_string())
        .collect()
}

fn counts(s: &EventSink) -> [i64; 4] {
    let c = &s.counters;
    [
        c.published.get(),
        c.deferred.get(),
        c.dropped.get(),
        c.failed.get(),
    ]
}

#[tokio::test(start_paused = true)]
async fn what_the_rate_limit_holds_back_goes_out_by_itself_and_nothing_is_lost() {
    let api = Arc::new(Mutex::new(Api::default()));
    let start = Instant::now();
    let s = sink(&api, 5.0, 20);
    // One set, and nothing after it: no second set comes to retry anything.
    s.update(many("s", 100));
    tokio::time::sleep(Duration::from_secs(20)).await;
    let written = api.lock().unwrap().events.clone();
    assert_eq!(written.len(), 100, "every statement published");
    let distinct: BTreeSet<&ServiceEvent> = written.iter().map(|w| &w.event).collect();
    assert_eq!(distinct.len(), 100, "each once");
    // The burst at once, then one every 200 ms: the last after (100 - 20) / 5 = 16 s.
    let after = |i: usize| written[i].at - start;
    assert!(after(19) < Duration::from_millis(100), "{:?}", after(19));
    assert!(
        after(20) >= Duration::from_millis(200) && after(20) < Duration::from_millis(300),
        "{:?}",
        after(20)
    );
    assert!(
        after(99) >= Duration::from_secs(16) && after(99) < Duration::from_millis(16_100),
        "{:?}",
        after(99)
    );
    assert_eq!(counts(&s), [100, 80, 0, 0]);
}

#[tokio::test(start_paused = true)]
async fn held_back_statements_go_out_oldest_first() {
    let api = Arc::new(Mutex::new(Api::default()));
    let s = sink(&api, 10.0, 2);
    s.update(many("x", 5));
    tokio::time::sleep(Duration::from_millis(150)).await;
    // Three published by now (two at once, one after 100 ms). Services that sort first
    // become due later: they wait for those due before them.
    let mut now = many("x", 5);
    now.extend(many("a", 2));
    s.update(now);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        names(&api),
        ["x000", "x001", "x002", "x003", "x004", "a000", "a001"]
    );
    assert_eq!(counts(&s), [7, 5, 0, 0]);
}

#[tokio::test(start_paused = true)]
async fn a_statement_that_stops_holding_before_its_turn_is_dropped_and_a_changed_one_said() {
    let api = Arc::new(Mutex::new(Api::default()));
    let s = sink(&api, 10.0, 1);
    s.update(many("s", 4));
    tokio::time::sleep(Duration::from_millis(50)).await;
    // s000 is out; s001..s003 wait. s001 goes, s002 changes before its turn.
    let mut now = many("s", 4);
    now.retain(|e| !["s001", "s002"].contains(&&*e.service.name));
    now.insert(allocated("s002", "10.9.9.9"));
    s.update(now);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let written = api.lock().unwrap().events.clone();
    let said: Vec<(String, String)> = written
        .iter()
        .map(|w| (w.event.service.name.to_string(), w.event.note.to_string()))
        .collect();
    assert_eq!(
        said,
        [
            ("s000".into(), "assigned 10.0.0.0".into()),
            ("s003".into(), "assigned 10.0.0.3".into()),
            ("s002".into(), "assigned 10.9.9.9".into()),
        ]
    );
    // s001 and s002's first statement: dropped; every statement but the first was held back.
    assert_eq!(counts(&s), [3, 4, 2, 0]);
}

#[tokio::test(start_paused = true)]
async fn a_failed_write_stays_due_and_goes_out_later() {
    let api = Arc::new(Mutex::new(Api::default()));
    api.lock().unwrap().failing_writes = 1;
    let s = sink(&api, 10.0, 1);
    s.update(many("s", 2));
    tokio::time::sleep(Duration::from_secs(1)).await;
    // s000 failed first, so it went after s001; both waited for a token.
    assert_eq!(names(&api), ["s001", "s000"]);
    assert_eq!(counts(&s), [2, 2, 0, 1]);
}

#[tokio::test(start_paused = true)]
async fn a_restarted_sink_says_only_what_changed_and_says_all_when_it_cannot_list() {
    let api = Arc::new(Mutex::new(Api::default()));
    let first = sink(&api, 100.0, 100);
    first.update(many("s", 10));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(names(&api).len(), 10);
    drop(first);
    // A new instance, with one decision changed: only that one is said.
    let mut now = many("s", 10);
    now.retain(|e| &*e.service.name != "s004");
    now.insert(allocated("s004", "10.9.9.9"));
    let second = sink(&api, 100.0, 100);
    second.update(now.clone());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(names(&api).len(), 11);
    assert_eq!(names(&api)[10], "s004");
    assert_eq!(counts(&second), [1, 0, 0, 0]);
    // A new session learns again; the set is the same: nothing is said.
    second.new_session();
    second.update(now.clone());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(names(&api).len(), 11);
    // The list fails: what holds is said again rather than never.
    api.lock().unwrap().list_fails = true;
    let third = sink(&api, 100.0, 100);
    third.update(now);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(names(&api).len(), 21);
}

#[tokio::test(start_paused = true)]
async fn a_new_session_forgets_what_was_due() {
    let api = Arc::new(Mutex::new(Api::default()));
    let s = sink(&api, 1.0, 1);
    s.update(many("s", 3));
    tokio::time::sleep(Duration::from_millis(100)).await;
    // This instance stops leading: the rest is the next leader's to say.
    s.new_session();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(names(&api), ["s000"]);
    assert_eq!(counts(&s), [1, 2, 0, 0]);
}

#[tokio::test(start_paused = true)]
async fn programmed_statements_are_made_when_published_in_their_turn() {
    let api = Arc::new(Mutex::new(Api::default()));
    let s = sink(&api, 10.0, 1);
    let vips = |ip: &str| vec![ip.parse::<std::net::IpAddr>().unwrap()];
    let services = vec![
        (ServiceKey::new("shop", "a"), vips("192.0.2.1")),
        (ServiceKey::new("shop", "b"), vips("192.0.2.2")),
    ];
    s.say(Sayings {
        statements: BTreeSet::from([allocated("w", "10.0.0.1")]),
        programmed: ProgrammedVips::listed(services, "node-a"),
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let written = api.lock().unwrap().events.clone();
    let notes: Vec<&str> = written.iter().map(|w| &*w.event.note).collect();
    assert_eq!(
        notes,
        [
            "assigned 10.0.0.1",
            "VIPs 192.0.2.1 programmed on node node-a",
            "VIPs 192.0.2.2 programmed on node node-a",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn at_the_instant_the_bucket_names_its_token_is_there() {
    for rate in [3.0, 7.0, 10.0, 33.3, 1000.0] {
        let mut b = Bucket::new(rate, 1);
        assert!(b.take());
        for i in 0..200 {
            assert!(!b.take(), "{rate} #{i}: a token too early");
            let at = b.ready_at().expect("a rate");
            tokio::time::sleep_until(at).await;
            assert!(b.take(), "{rate} #{i}: woken before the token");
        }
    }
}
