//! Starting and stopping the membership ([`crate::membership`]) beside the agent.

use super::AgentError;
use crate::config::Config;
use crate::membership::{Key, KeyError};
use crate::membership_task::{LiveMembers, MembershipTask, Successors};
use crate::model::Loaded;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// A running membership.
pub struct Members {
    pub live: watch::Receiver<LiveMembers>,
    /// Where the planner says who takes this node's VIPs if it goes (they watch it).
    pub successors: Arc<watch::Sender<Successors>>,
    /// This node's claims, from the planner.
    pub claims: watch::Sender<crate::membership_task::OwnClaims>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Debug, thiserror::Error)]
pub enum MembersError {
    #[error("membership key file {path}: {source}")]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("membership key file {path}: {source}")]
    Key {
        path: std::path::PathBuf,
        source: KeyError,
    },
}

/// Start the membership when a bridge announces and a key file is set; `None` otherwise (the
/// Nodes' Ready condition places the VIPs).
pub fn start(
    cfg: &Config,
    objects: watch::Receiver<Arc<Loaded>>,
) -> Result<Option<Members>, AgentError> {
    let announcing = crate::announce::Announcing::of(cfg).any();
    let Some(path) = cfg.membership.key_file.clone().filter(|_| announcing) else {
        return Ok(None);
    };
    let secret = std::fs::read(&path).map_err(|source| MembersError::Read {
        path: path.clone(),
        source,
    })?;
    let key = Key::from_secret(&secret).map_err(|source| MembersError::Key { path, source })?;
    let (live_tx, live) = watch::channel(None);
    let (stop, stop_rx) = watch::channel(false);
    let (successors, successors_rx) = watch::channel(Successors::default());
    let (claims, claims_rx) = watch::channel(Arc::default());
    let task = tokio::spawn(
        MembershipTask {
            settings: cfg.membership.settings(),
            key,
            node: cfg.node_name.clone(),
            address: cfg.membership.address,
            objects,
            live: live_tx,
            successors: successors_rx,
            claims: claims_rx,
            stop: stop_rx,
        }
        .run(),
    );
    Ok(Some(Members {
        live,
        successors: Arc::new(successors),
        claims,
        stop,
        task,
    }))
}

impl Members {
    /// Leave the membership: the others take this node's VIPs at once; after
    /// [`crate::membership_task::HANDOVER`] this node's answers go, and this waits until the
    /// bridges hold that.
    pub async fn leave(self, running: &mut super::Running) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(1), self.task).await;
        tokio::time::sleep(crate::membership_task::HANDOVER).await;
        if !running.withdraw(Duration::from_secs(2)).await {
            tracing::warn!("this node's answers may still be on the switch");
        }
    }
}
