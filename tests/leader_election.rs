//! The Northbound writer's election on a Lease, against the Kubernetes API test server: at
//! most one leader at any moment among several candidates, a released Lease handed over at the
//! next poll, and a holder cut off from the API server stepping down before anyone else may
//! take over (a renew it cannot make is no leadership), then replaced within the Lease's
//! duration.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use testkit::kube_server::KubeServer;
use tokio::net::{TcpListener, TcpStream};
use vipflow::leader::{self, Election, LeaderConfig};

const DURATION: Duration = Duration::from_secs(2);

fn config(identity: &str) -> LeaderConfig {
    LeaderConfig::new("vipflow", "vipflow-northbound", identity, DURATION)
}

/// Which candidates say they lead now.
fn leaders(all: &[(String, Election)]) -> Vec<String> {
    all.iter()
        .filter(|(_, e)| *e.is_leader.borrow())
        .map(|(n, _)| n.clone())
        .collect()
}

/// Sample `all` every 5 ms until `until` holds or `limit` passes; fails if two lead at once.
async fn watch_until(
    all: &[(String, Election)],
    limit: Duration,
    until: impl Fn(&[String]) -> bool,
) -> Duration {
    let start = Instant::now();
    loop {
        let now = leaders(all);
        assert!(now.len() <= 1, "two leaders at once: {now:?}");
        if until(&now) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "not within {limit:?}: leaders {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Sample `all` every 5 ms for `span`; fails if two lead at once.
async fn never_two_for(all: &[(String, Election)], span: Duration) {
    let start = Instant::now();
    while start.elapsed() < span {
        let now = leaders(all);
        assert!(now.len() <= 1, "two leaders at once: {now:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_and_a_released_lease_is_taken_at_the_next_poll() {
    let srv = KubeServer::start().await;
    let mut all = Vec::new();
    for n in ["a", "b", "c"] {
        all.push((n.to_string(), leader::start(srv.client().await, config(n))));
    }
    let first = watch_until(&all, DURATION * 10, |l| l.len() == 1).await;
    // Steady: the same one leads, and never two.
    let holder = leaders(&all)[0].clone();
    never_two_for(&all, DURATION * 2).await;
    assert_eq!(leaders(&all), std::slice::from_ref(&holder));
    println!("{holder} leads {first:?} after the start");

    // The holder stops and releases: another takes over at its next poll, not at expiry.
    let i = all
        .iter()
        .position(|(n, _)| *n == holder)
        .expect("the holder");
    let (_, election) = all.remove(i);
    let released = Instant::now();
    election.release().await;
    let took = watch_until(&all, DURATION * 10, |l| l.len() == 1).await;
    let took = released.elapsed().max(took);
    println!(
        "after a release, {} leads {took:?} later (renewal every {:?})",
        leaders(&all)[0],
        config("x").renew_every
    );
    assert!(
        took < DURATION,
        "took {took:?}: waited for the Lease to expire"
    );
}

/// A TCP relay to the test server that can stop relaying (connections dropped, new ones
/// closed), as a node cut off from the API server.
async fn relay(to: std::net::SocketAddr) -> (std::net::SocketAddr, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let cut = Arc::new(AtomicBool::new(false));
    let c = cut.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            if c.load(Ordering::SeqCst) {
                continue;
            }
            let c = c.clone();
            tokio::spawn(async move {
                let Ok(mut outbound) = TcpStream::connect(to).await else {
                    return;
                };
                let copy = tokio::io::copy_bidirectional(&mut inbound, &mut outbound);
                tokio::pin!(copy);
                loop {
                    tokio::select! {
                        _ = &mut copy => return,
                        _ = tokio::time::sleep(Duration::from_millis(10)) => {
                            if c.load(Ordering::SeqCst) {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    (addr, cut)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_cut_off_steps_down_before_another_takes_over() {
    let srv = KubeServer::start().await;
    let (via, cut) = relay(srv.addr()).await;
    let mut cfg = srv.kube_config().await;
    cfg.cluster_url = format!("http://{via}").parse().expect("a URL");
    let cut_off = kube::Client::try_from(cfg).expect("a client");
    let a = leader::start(cut_off, config("a"));
    let all = vec![("a".to_string(), a)];
    watch_until(&all, DURATION * 10, |l| l == ["a"]).await;
    let mut all = all;
    all.push((
        "b".to_string(),
        leader::start(srv.client().await, config("b")),
    ));
    never_two_for(&all, DURATION * 2).await;
    assert_eq!(
        leaders(&all),
        ["a"],
        "the holder keeps the Lease while it renews"
    );

    // Cut a off: it must stop leading before b may lead (never two), and b must lead within
    // the Lease's duration of the last renewal a could make.
    cut.store(true, Ordering::SeqCst);
    let start = Instant::now();
    let stepped_down = watch_until(&all, DURATION * 10, |l| l.is_empty()).await;
    let b_leads = watch_until(&all, DURATION * 10, |l| l == ["b"]).await + stepped_down;
    println!(
        "a cut off: it stepped down {stepped_down:?} after the cut, b leads {b_leads:?} after it ({:?} in all)",
        start.elapsed()
    );
    assert!(
        b_leads < DURATION * 3,
        "b took {b_leads:?}; the Lease lasts {DURATION:?}"
    );
}
