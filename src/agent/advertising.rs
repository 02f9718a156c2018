//! The agent's side of BGP: what the planner hands the node's FRR task
//! ([`crate::reconcile::frr`]), and when.
//!
//! - **The configuration** (peers, BFD profiles) follows every snapshot as
//!   [`for_node`] makes it; a problem in it is logged once per change of what is wrong.
//! - **The dataplane gate.** A prefix goes to FRR only once every bridge has applied the plan
//!   that added it: a route must not draw traffic the node would drop. A withdrawal goes at
//!   once, and the planner waits (up to [`ORDER_WAIT`]) for FRR to have taken it before the
//!   plan's flows are handed over: traffic leaves a node before the node stops carrying it.
//! - **Nothing is written before the first plan is carried**, so an agent that restarts while
//!   the bridges still hold the flows (and FRR still holds the routes) changes nothing.

use super::planner_task::ORDER_WAIT;
use crate::bgp::frr_config::{FrrConfigProblem, for_node};
use crate::model::Objects;
use crate::reconcile::bridge::BridgeStatus;
use crate::reconcile::frr::{FrrInputs, FrrStatus, WantedPrefixes};
use ipnet::IpNet;
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::sync::watch;

type Prefixes = Arc<BTreeSet<IpNet>>;

/// The planner's handle on the node's BGP advertisement.
pub(super) struct Advertising {
    node: String,
    config: watch::Sender<Option<Arc<Option<String>>>>,
    /// The newest plan's prefixes, by generation, for the gate.
    pending: watch::Sender<Option<(u64, Prefixes)>>,
    /// What the gate let through to FRR, and the plan it came with.
    published: watch::Receiver<Option<WantedPrefixes>>,
    frr: watch::Receiver<FrrStatus>,
    /// What was last said to be wrong with the node's configuration.
    problems: Vec<FrrConfigProblem>,
}

impl Advertising {
    /// The planner's handle and the FRR task's inputs; the gate runs as a task of its own,
    /// watching `bridges`.
    pub(super) fn start(
        node: &str,
        bridges: Vec<watch::Receiver<BridgeStatus>>,
        frr: watch::Receiver<FrrStatus>,
        tasks: &mut Vec<tokio::task::JoinHandle<()>>,
    ) -> (Advertising, FrrInputs) {
        let (config, config_rx) = watch::channel(None);
        let (pending, pending_rx) = watch::channel(None);
        let (published_tx, published) = watch::channel(None);
        tasks.push(tokio::spawn(gate(pending_rx, published_tx, bridges)));
        (
            Advertising {
                node: node.to_string(),
                config,
                pending,
                published: published.clone(),
                frr,
                problems: Vec::new(),
            },
            FrrInputs {
                config: config_rx,
                wanted: published,
            },
        )
    }

    /// A new plan: the node's configuration from its snapshot, and its prefixes for the gate.
    /// Returns the prefixes it withdraws (FRR originates them and the plan does not want them).
    pub(super) fn plan(
        &mut self,
        objects: &Objects,
        generation: u64,
        prefixes: &Prefixes,
    ) -> BTreeSet<IpNet> {
        let (config, problems) = for_node(objects, &self.node);
        if problems != self.problems {
            for p in &problems {
                tracing::warn!(problem = %p, "the node's BGP configuration leaves this out");
            }
            self.problems = problems;
        }
        self.config.send_if_modified(|cur| {
            let same = cur.as_deref() == Some(&config);
            if !same {
                *cur = Some(Arc::new(config));
            }
            !same
        });
        let withdrawn = self
            .published
            .borrow()
            .as_ref()
            .map(|(_, now)| now.difference(prefixes).copied().collect())
            .unwrap_or_default();
        self.pending
            .send_replace(Some((generation, Arc::clone(prefixes))));
        withdrawn
    }

    /// Wait, at most [`ORDER_WAIT`], until FRR originates none of `withdrawn` (or its task
    /// reports a failure: FRR's own state then decides).
    pub(super) async fn withdrawn(&mut self, withdrawn: &BTreeSet<IpNet>) {
        if withdrawn.is_empty() {
            return;
        }
        let done = self.frr.wait_for(|s| {
            s.last_error.is_some() || s.originated.intersection(withdrawn).next().is_none()
        });
        if tokio::time::timeout(ORDER_WAIT, done).await.is_err() {
            tracing::warn!(
                prefixes = withdrawn.len(),
                wait = ?ORDER_WAIT,
                "FRR did not take a withdrawal in time; changing the flows anyway"
            );
        }
    }
}

/// Hand each plan's prefixes on to FRR: withdrawals at once, additions once every bridge
/// applied that plan (a newer plan replaces one still waiting).
async fn gate(
    mut pending: watch::Receiver<Option<(u64, Prefixes)>>,
    published: watch::Sender<Option<WantedPrefixes>>,
    bridges: Vec<watch::Receiver<BridgeStatus>>,
) {
    let mut due = false;
    loop {
        if !due && pending.changed().await.is_err() {
            return;
        }
        due = false;
        let Some((generation, want)) = pending.borrow_and_update().clone() else {
            continue;
        };
        published.send_if_modified(|cur| {
            let Some((_, now)) = cur else { return false };
            let kept: BTreeSet<IpNet> = now.intersection(&want).copied().collect();
            let changed = kept.len() != now.len();
            if changed {
                *cur = Some((generation, Arc::new(kept)));
            }
            changed
        });
        let carried = async {
            for rx in &bridges {
                let mut rx = rx.clone();
                let _ = rx
                    .wait_for(|s| s.applied_generation.is_some_and(|g| g >= generation))
                    .await;
            }
        };
        tokio::select! {
            () = carried => {
                published.send_if_modified(|cur| {
                    let same = cur.as_ref().is_some_and(|(_, c)| **c == *want);
                    if !same {
                        *cur = Some((generation, want));
                    }
                    !same
                });
            }
            r = pending.changed() => {
                if r.is_err() {
                    return;
                }
                due = true;
            }
        }
    }
}
