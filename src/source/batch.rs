//! How the Kubernetes source gathers watch changes into snapshots.
//!
//! A change that comes alone, after a quiet spell and with nothing queued behind it, is handed
//! on at once: most changes in a running cluster are lone ones, and any wait here is a wait on
//! the way to the bridge. A change that closely follows the last snapshot, or finds others
//! queued behind it, is part of a burst (a rollout touching hundreds of EndpointSlices): the
//! burst is gathered until no change has come for `debounce`, or until `max_delay` after it
//! began, so that the planner runs a few times per burst, not once per object.

use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// When a batch of changes ends.
#[derive(Debug, Clone, Copy)]
pub struct Gathering {
    /// Quiet period that ends a burst.
    pub debounce: Duration,
    /// The longest a burst is gathered.
    pub max_delay: Duration,
}

/// Hand `first`, and the changes that belong in one batch with it, to `apply`. `last_sent`:
/// when the previous batch went on (`None`: none has yet).
pub async fn gather<T>(
    rx: &mut mpsc::Receiver<T>,
    first: T,
    last_sent: Option<Instant>,
    g: Gathering,
    apply: &mut impl FnMut(T),
) {
    apply(first);
    let mut queued = false;
    while let Ok(c) = rx.try_recv() {
        apply(c);
        queued = true;
    }
    let start = Instant::now();
    let quiet_before = last_sent.is_none_or(|t| start.duration_since(t) >= g.debounce);
    if quiet_before && !queued {
        return;
    }
    let until = start + g.max_delay;
    loop {
        let quiet = (Instant::now() + g.debounce).min(until);
        match tokio::time::timeout_at(quiet, rx.recv()).await {
            Ok(Some(c)) => apply(c),
            Ok(None) | Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: Gathering = Gathering {
        debounce: Duration::from_millis(3),
        max_delay: Duration::from_millis(100),
    };

    async fn gathered(
        rx: &mut mpsc::Receiver<u32>,
        last_sent: Option<Instant>,
    ) -> (Vec<u32>, Duration) {
        let first = rx.recv().await.expect("a first change");
        let t = Instant::now();
        let mut got = Vec::new();
        gather(rx, first, last_sent, G, &mut |c| got.push(c)).await;
        (got, t.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_change_after_a_quiet_spell_goes_on_at_once() {
        let (tx, mut rx) = mpsc::channel(8);
        tx.send(1).await.unwrap();
        assert_eq!(gathered(&mut rx, None).await, (vec![1], Duration::ZERO));
        let sent = Instant::now();
        tokio::time::advance(Duration::from_millis(50)).await;
        tx.send(2).await.unwrap();
        assert_eq!(
            gathered(&mut rx, Some(sent)).await,
            (vec![2], Duration::ZERO)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_right_after_the_last_batch_waits_for_the_quiet_period() {
        let (tx, mut rx) = mpsc::channel(8);
        let sent = Instant::now();
        tokio::time::advance(Duration::from_millis(1)).await;
        tx.send(1).await.unwrap();
        assert_eq!(gathered(&mut rx, Some(sent)).await, (vec![1], G.debounce));
    }

    #[tokio::test(start_paused = true)]
    async fn changes_queued_together_are_one_batch() {
        let (tx, mut rx) = mpsc::channel(8);
        for c in 1..=3 {
            tx.send(c).await.unwrap();
        }
        assert_eq!(gathered(&mut rx, None).await, (vec![1, 2, 3], G.debounce));
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_stream_is_cut_at_the_longest_delay() {
        let (tx, mut rx) = mpsc::channel(8);
        tx.send(0).await.unwrap();
        tx.send(1).await.unwrap();
        // One change every 2 ms, at 1, 3, ..., 99 ms: always within the quiet period.
        let producer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            for c in 2.. {
                if tx.send(c).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        let (got, took) = gathered(&mut rx, None).await;
        assert_eq!(took, G.max_delay);
        assert_eq!(got, (0..52).collect::<Vec<_>>());
        producer.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_closed_channel_ends_the_batch() {
        let (tx, mut rx) = mpsc::channel(8);
        tx.send(1).await.unwrap();
        tx.send(2).await.unwrap();
        drop(tx);
        assert_eq!(gathered(&mut rx, None).await, (vec![1, 2], Duration::ZERO));
    }
}
