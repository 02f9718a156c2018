//! Leader election for the Northbound writer on a `coordination.k8s.io/v1` Lease.
//!
//! A small module rather than a crate: the maintained kube-5 crate (kube-lease-manager) takes
//! the lock with server-side apply and relies on field-ownership conflicts; this one uses the
//! plain compare-and-swap client-go's leaderelection uses — read the Lease, write it back with
//! its `resourceVersion`; a `409 Conflict` means someone else wrote first.
//!
//! This module does the reading and writing; what to do with what it read (take, renew, wait,
//! step down, release) is [`crate::lease`]'s, which has the why of each.
//!
//! - The holder renews every `renew_every`, and a candidate polls as often, so a crashed holder
//!   is replaced within `duration`.
//! - **Handover**: on shutdown the holder clears `holderIdentity`, so a candidate takes over at
//!   its next poll instead of waiting for expiry.

use crate::lease::{Candidate, Decision, LeaseRecord, LeaseTerms, RoundOutcome, Write};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

#[derive(Debug, Clone)]
pub struct LeaderConfig {
    pub namespace: String,
    pub name: String,
    /// This instance's identity (pod name, else node name).
    pub identity: String,
    /// Lease duration: a crashed holder is replaced within about this long.
    pub duration: Duration,
    /// How often the holder renews (and candidates poll).
    pub renew_every: Duration,
}

impl LeaderConfig {
    pub fn new(namespace: &str, name: &str, identity: &str, duration: Duration) -> Self {
        LeaderConfig {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            duration,
            renew_every: crate::lease::renew_every(duration),
        }
    }
}

/// A running election: `is_leader` follows our state; `stop` releases the Lease.
pub struct Election {
    pub is_leader: watch::Receiver<bool>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Election {
    /// Step down and release the Lease (graceful shutdown), waiting briefly for the write.
    pub async fn release(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(3), &mut self.task).await;
    }
}

impl Drop for Election {
    fn drop(&mut self) {
        if self.stop.is_some() {
            self.task.abort();
        }
    }
}

pub fn start(client: Client, cfg: LeaderConfig) -> Election {
    let (tx, rx) = watch::channel(false);
    let (stop_tx, stop_rx) = oneshot::channel();
    let task = tokio::spawn(run(client, cfg, tx, stop_rx));
    Election {
        is_leader: rx,
        stop: Some(stop_tx),
        task,
    }
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

async fn run(
    client: Client,
    cfg: LeaderConfig,
    leader: watch::Sender<bool>,
    mut stop: oneshot::Receiver<()>,
) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let mut candidate = Candidate::new(LeaseTerms {
        identity: cfg.identity.clone(),
        duration: cfg.duration,
        renew_every: cfg.renew_every,
    });
    loop {
        let outcome = match step(&api, &cfg, &mut candidate).await {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(lease = %cfg.name, error = %e, "lease update failed");
                RoundOutcome::Failed
            }
        };
        candidate.outcome(Instant::now(), outcome);
        let fresh = candidate.leading(Instant::now());
        if *leader.borrow() != fresh {
            tracing::info!(lease = %cfg.name, identity = %cfg.identity, leader = fresh, "leadership changed");
            let _ = leader.send(fresh);
        }
        tokio::select! {
            _ = tokio::time::sleep(cfg.renew_every) => {}
            _ = &mut stop => break,
        }
    }
    if *leader.borrow() {
        let _ = leader.send(false);
        if let Err(e) = release(&api, &cfg, &candidate).await {
            tracing::warn!(lease = %cfg.name, error = %e, "could not release the lease; it will expire");
        } else {
            tracing::info!(lease = %cfg.name, "lease released");
        }
    }
}

/// One round: read the Lease, and write it as the candidate decides.
async fn step(
    api: &Api<Lease>,
    cfg: &LeaderConfig,
    candidate: &mut Candidate,
) -> Result<RoundOutcome, kube::Error> {
    let lease = api.get_opt(&cfg.name).await?;
    let record = lease.as_ref().map(record);
    let written = match (candidate.decide(Instant::now(), record.as_ref()), lease) {
        (Decision::Wait, _) => return Ok(RoundOutcome::NotHeld),
        (Decision::Create(w), _) => {
            let mut l = Lease {
                metadata: ObjectMeta {
                    name: Some(cfg.name.clone()),
                    namespace: Some(cfg.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec::default()),
            };
            apply(&mut l, w);
            api.create(&PostParams::default(), &l).await
        }
        (Decision::Replace(w), Some(mut l)) => {
            apply(&mut l, w);
            api.replace(&cfg.name, &PostParams::default(), &l).await
        }
        // A Lease to write back is one that was read.
        (Decision::Replace(_), None) => return Ok(RoundOutcome::NotHeld),
    };
    match written {
        Ok(_) => Ok(RoundOutcome::Held),
        // Someone wrote (or created it) first: look again next round.
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(RoundOutcome::NotHeld),
        Err(e) => Err(e),
    }
}

/// The fields of `l` the candidate decides on.
fn record(l: &Lease) -> LeaseRecord {
    let spec = l.spec.as_ref();
    LeaseRecord {
        holder: spec.and_then(|s| s.holder_identity.clone()),
        renew_time: spec.and_then(|s| s.renew_time.as_ref().map(|t| t.0.to_string())),
        resource_version: l.metadata.resource_version.clone(),
        duration_seconds: spec.and_then(|s| s.lease_duration_seconds),
        transitions: spec.and_then(|s| s.lease_transitions),
    }
}

/// Write `w` into `l`, with the time of writing as renewTime (and acquireTime when taking it).
fn apply(l: &mut Lease, w: Write) {
    let spec = l.spec.get_or_insert_with(LeaseSpec::default);
    let t = now();
    if let Some(n) = w.transitions {
        spec.acquire_time = Some(t.clone());
        spec.lease_transitions = Some(n);
    }
    spec.holder_identity = w.holder;
    if let Some(d) = w.duration_seconds {
        spec.lease_duration_seconds = Some(d);
    }
    spec.renew_time = Some(t);
}

/// Clear the holder if it is still us.
async fn release(
    api: &Api<Lease>,
    cfg: &LeaderConfig,
    candidate: &Candidate,
) -> Result<(), kube::Error> {
    let Some(mut l) = api.get_opt(&cfg.name).await? else {
        return Ok(());
    };
    let Some(w) = candidate.release(Some(&record(&l))) else {
        return Ok(());
    };
    apply(&mut l, w);
    api.replace(&cfg.name, &PostParams::default(), &l)
        .await
        .map(|_| ())
}
