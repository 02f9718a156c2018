//! Leader election for the Northbound writer on a `coordination.k8s.io/v1` Lease.
//!
//! A small module rather than a crate: the maintained kube-5 crate (kube-lease-manager) takes
//! the lock with server-side apply and relies on field-ownership conflicts; this one uses the
//! plain compare-and-swap client-go's leaderelection uses — read the Lease, write it back with
//! its `resourceVersion`; a `409 Conflict` means someone else wrote first.
//!
//! - **Expiry without trusting clocks**: a candidate does not compare the holder's `renewTime`
//!   with its own clock (nodes' clocks differ); it notes when it last saw the record change and
//!   takes the Lease only after `duration` of no change, measured locally.
//! - **Stepping down first**: the holder renews every `renew_every`; if it has not renewed for
//!   `duration - 2 * renew_every` it stops acting as leader, a full `renew_every` before any
//!   candidate may take over (`duration - renew_every` after it last saw the record change).
//!   A candidate polls every `renew_every`, so a crashed holder is replaced within `duration`.
//! - **Handover**: on shutdown the holder clears `holderIdentity`, so a candidate takes over at
//!   its next poll instead of waiting for expiry.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

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
            // Several renewals per duration, and candidates notice a release quickly.
            renew_every: (duration / 8).clamp(Duration::from_millis(100), Duration::from_secs(2)),
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

fn whole_seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

/// What a candidate remembers of the record it last saw.
struct Observed {
    /// (holder, renewTime, resourceVersion) as last seen.
    record: Option<(Option<String>, Option<String>, Option<String>)>,
    /// When (our clock) that record was first seen.
    since: Instant,
}

async fn run(
    client: Client,
    cfg: LeaderConfig,
    leader: watch::Sender<bool>,
    mut stop: oneshot::Receiver<()>,
) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let mut observed = Observed {
        record: None,
        since: Instant::now(),
    };
    let mut last_renew: Option<Instant> = None;
    loop {
        let acted = step(&api, &cfg, &mut observed).await;
        match acted {
            Ok(true) => last_renew = Some(Instant::now()),
            Ok(false) => last_renew = None,
            Err(e) => tracing::warn!(lease = %cfg.name, error = %e, "lease update failed"),
        }
        // Leader only while the last renewal is fresh enough that nobody else can have taken
        // over yet.
        let fresh = last_renew.is_some_and(|t| t.elapsed() + 2 * cfg.renew_every < cfg.duration);
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
        if let Err(e) = release(&api, &cfg).await {
            tracing::warn!(lease = %cfg.name, error = %e, "could not release the lease; it will expire");
        } else {
            tracing::info!(lease = %cfg.name, "lease released");
        }
    }
}

/// One round: renew if ours, take it if free or expired. Returns whether we hold it now.
async fn step(
    api: &Api<Lease>,
    cfg: &LeaderConfig,
    observed: &mut Observed,
) -> Result<bool, kube::Error> {
    let lease = match api.get_opt(&cfg.name).await? {
        Some(l) => l,
        None => {
            let mut l = Lease {
                metadata: ObjectMeta {
                    name: Some(cfg.name.clone()),
                    namespace: Some(cfg.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec::default()),
            };
            hold(&mut l, cfg, true);
            return match api.create(&PostParams::default(), &l).await {
                Ok(_) => Ok(true),
                // Someone created it first: look again next round.
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        }
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    let record = (
        holder.clone(),
        spec.renew_time.as_ref().map(|t| t.0.to_string()),
        lease.metadata.resource_version.clone(),
    );
    if observed.record.as_ref() != Some(&record) {
        observed.record = Some(record);
        observed.since = Instant::now();
    }
    let ours = holder.as_deref() == Some(cfg.identity.as_str());
    let duration = Duration::from_secs(
        u64::try_from(spec.lease_duration_seconds.unwrap_or(0).max(0)).unwrap_or(0),
    );
    // The holder has stopped acting `renew_every` before this (see the module doc).
    let expiry = duration.max(cfg.duration).saturating_sub(cfg.renew_every);
    let free = holder.is_none() || observed.since.elapsed() >= expiry;
    if !ours && !free {
        return Ok(false);
    }
    let mut l = lease;
    hold(&mut l, cfg, !ours);
    match api.replace(&cfg.name, &PostParams::default(), &l).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Make `l` ours: renew, or acquire (new acquireTime, one more transition).
fn hold(l: &mut Lease, cfg: &LeaderConfig, acquire: bool) {
    let spec = l.spec.get_or_insert_with(LeaseSpec::default);
    let t = now();
    if acquire {
        spec.acquire_time = Some(t.clone());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.holder_identity = Some(cfg.identity.clone());
    spec.lease_duration_seconds = Some(whole_seconds(cfg.duration));
    spec.renew_time = Some(t);
}

/// Clear the holder if it is still us.
async fn release(api: &Api<Lease>, cfg: &LeaderConfig) -> Result<(), kube::Error> {
    let Some(mut l) = api.get_opt(&cfg.name).await? else {
        return Ok(());
    };
    let spec = l.spec.get_or_insert_with(LeaseSpec::default);
    if spec.holder_identity.as_deref() != Some(cfg.identity.as_str()) {
        return Ok(());
    }
    spec.holder_identity = None;
    spec.renew_time = Some(now());
    api.replace(&cfg.name, &PostParams::default(), &l)
        .await
        .map(|_| ())
}
