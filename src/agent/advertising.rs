//! The agent's side of BGP: what the planner hands the node's FRR task
//! ([`crate::reconcile::frr`]), and when.
//!
//! - **The configuration** (peers, BFD profiles) follows every snapshot as
//!   [`for_node_with`] makes it; a problem in it is logged once per change of what is wrong.
//! - **The dataplane gate.** A prefix goes to FRR only once every bridge has applied the plan
//!   that added it and OVN has programmed its VIP on the node's integration bridge (as the L2
//!   answers wait for it): a route must not draw traffic the node would drop. A withdrawal goes
//!   at once, and the planner waits (up to [`ORDER_WAIT`]) for FRR to have taken it before the
//!   plan's flows are handed over: traffic leaves a node before the node stops carrying it.
//! - **Nothing is written before the first plan is carried**, so an agent that restarts while
//!   the bridges still hold the flows (and FRR still holds the routes) changes nothing.

use super::planner_task::ORDER_WAIT;
use crate::bgp::frr_config::{FrrConfigProblem, for_node_with};
use crate::frrk8s::objects::FrrConfiguration;
use crate::model::Objects;
use crate::reconcile::bridge::{BrIntFlows, BridgeStatus, PROGRAMMED_WAIT};
use crate::reconcile::frr::{FrrInputs, FrrStatus, WantedPrefixes};
use ipnet::IpNet;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
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
    /// frr-k8s mode: the node's own object and the shared ones go there instead.
    frr_k8s: Option<FrrK8sOutputs>,
}

/// Where frr-k8s mode's objects go ([`crate::reconcile::frrk8s`]).
pub(super) struct FrrK8sOutputs {
    pub namespace: String,
    /// The node's own object, with every Local VIP the plan wants (the writer keeps what the
    /// gate let through).
    pub object: watch::Sender<Option<Arc<Option<FrrConfiguration>>>>,
    /// The shared objects, written while this agent leads.
    pub pools: watch::Sender<Option<crate::plan::planner::FrrK8sPools>>,
}

impl Advertising {
    /// The planner's handle and the FRR task's inputs; the gate runs as a task of its own,
    /// watching the bridges and what OVN programmed.
    pub(super) fn start(
        node: &str,
        gate_inputs: GateInputs,
        tasks: &mut Vec<tokio::task::JoinHandle<()>>,
    ) -> (Advertising, FrrInputs) {
        let (config, config_rx) = watch::channel(None);
        let (pending, pending_rx) = watch::channel(None);
        let (published_tx, published) = watch::channel(None);
        let frr = gate_inputs.frr.clone();
        tasks.push(tokio::spawn(gate(pending_rx, published_tx, gate_inputs)));
        (
            Advertising {
                node: node.to_string(),
                config,
                pending,
                published: published.clone(),
                frr,
                problems: Vec::new(),
                frr_k8s: None,
            },
            FrrInputs {
                config: config_rx,
                wanted: published,
            },
        )
    }

    /// Advertise through frr-k8s: the configuration goes in objects to `outputs`.
    pub(super) fn through_frr_k8s(mut self, outputs: FrrK8sOutputs) -> Advertising {
        self.frr_k8s = Some(outputs);
        self
    }

    /// A new plan: the node's configuration from its snapshot (its BGP instance in graceful
    /// shutdown when `graceful`), and its prefixes for the gate. Returns the prefixes it
    /// withdraws (FRR originates them and the plan does not want them).
    pub(super) fn plan(
        &mut self,
        objects: &Objects,
        generation: u64,
        bgp: &crate::plan::bgp_node::NodeBgp,
        pools: Option<&crate::plan::planner::FrrK8sPools>,
    ) -> BTreeSet<IpNet> {
        if let Some(out) = &self.frr_k8s {
            // The node's own object holds its Local VIPs; the shared ones the rest.
            let (object, problems) = crate::frrk8s::shared::local_configuration(
                objects,
                &self.node,
                &bgp.local,
                &out.namespace,
            );
            out.object.send_if_modified(|cur| {
                let same = cur.as_deref() == Some(&object);
                if !same {
                    *cur = Some(Arc::new(object));
                }
                !same
            });
            // `None` while this agent does not lead: a leader that comes back writes nothing
            // it planned before, only what it plans now.
            out.pools.send_if_modified(|cur| {
                let same = match (cur.as_ref(), pools) {
                    (Some(c), Some(p)) => Arc::ptr_eq(c, p),
                    (None, None) => true,
                    _ => false,
                };
                if !same {
                    *cur = pools.cloned();
                }
                !same
            });
            self.said(problems);
            return self.hand_to_gate(generation, &bgp.local);
        }
        let prefixes = &bgp.prefixes;
        let (config, problems) = for_node_with(objects, &self.node, bgp.graceful_shutdown);
        self.said(problems);
        self.config.send_if_modified(|cur| {
            let same = cur.as_deref() == Some(&config);
            if !same {
                *cur = Some(Arc::new(config));
            }
            !same
        });
        self.hand_to_gate(generation, prefixes)
    }

    /// Log what is wrong with the node's configuration, once per change of it.
    fn said(&mut self, problems: Vec<FrrConfigProblem>) {
        if problems != self.problems {
            for p in &problems {
                tracing::warn!(problem = %p, "the node's BGP configuration leaves this out");
            }
            self.problems = problems;
        }
    }

    /// Hand `prefixes` to the gate; returns those it withdraws.
    fn hand_to_gate(&mut self, generation: u64, prefixes: &Prefixes) -> BTreeSet<IpNet> {
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

/// How long the first hand-over waits for the FRR task to have read what FRR originates: what
/// FRR already advertises is not held back for OVN (it carries it already).
const FIRST_READ_WAIT: Duration = Duration::from_secs(5);
/// How often a prefix held back for OVN is checked again.
const PROGRAMMED_POLL: Duration = Duration::from_millis(10);

/// What the gate reads to know a VIP's dataplane is ready on this node.
pub(super) struct GateInputs {
    pub bridges: Vec<watch::Receiver<BridgeStatus>>,
    /// The node's integration bridge, read over OpenFlow beside the first bridge; `None`
    /// without a bridge.
    pub programmed: Option<BrIntFlows>,
    pub frr: watch::Receiver<FrrStatus>,
}

/// Hand each plan's prefixes on to FRR: withdrawals at once; additions once every bridge
/// applied that plan and OVN has programmed the VIP on the node's integration bridge (at most
/// [`PROGRAMMED_WAIT`], then with a warning), except what FRR already originates (a restarted
/// agent holds nothing back). A newer plan replaces one still waiting.
async fn gate(
    mut pending: watch::Receiver<Option<(u64, Prefixes)>>,
    published: watch::Sender<Option<WantedPrefixes>>,
    mut inputs: GateInputs,
) {
    let mut due = false;
    let mut first = true;
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
        let bridges = inputs.bridges.clone();
        let mut frr = inputs.frr.clone();
        let carried = async {
            for rx in &bridges {
                let mut rx = rx.clone();
                let _ = rx
                    .wait_for(|s| s.applied_generation.is_some_and(|g| g >= generation))
                    .await;
            }
            if first {
                let _ = tokio::time::timeout(FIRST_READ_WAIT, frr.wait_for(|s| s.known)).await;
            }
        };
        tokio::select! {
            () = carried => {}
            r = pending.changed() => {
                if r.is_err() {
                    return;
                }
                due = true;
                continue;
            }
        }
        first = false;
        let since = tokio::time::Instant::now();
        loop {
            let held = held_for_ovn(&mut inputs, &published, &want).await;
            let late = since.elapsed() >= PROGRAMMED_WAIT;
            if late && !held.is_empty() {
                tracing::warn!(
                    vips = held.len(),
                    waited = ?PROGRAMMED_WAIT,
                    "OVN has not programmed these VIPs on the integration bridge; advertising them anyway"
                );
            }
            let out: BTreeSet<IpNet> = if late {
                want.as_ref().clone()
            } else {
                want.iter()
                    .filter(|p| !held.contains(&p.addr()) || p.prefix_len() != p.max_prefix_len())
                    .copied()
                    .collect()
            };
            published.send_if_modified(|cur| {
                let same = cur.as_ref().is_some_and(|(_, c)| **c == out);
                if !same {
                    tracing::debug!(
                        generation,
                        prefixes = out.len(),
                        held = held.len(),
                        "prefixes handed to FRR"
                    );
                    *cur = Some((generation, Arc::new(out.clone())));
                }
                !same
            });
            if late || held.is_empty() {
                break;
            }
            tokio::select! {
                () = tokio::time::sleep(PROGRAMMED_POLL) => {}
                r = pending.changed() => {
                    if r.is_err() {
                        return;
                    }
                    due = true;
                    break;
                }
            }
        }
    }
}

/// The VIPs of `want`'s host routes that FRR is not told yet, does not originate already, and
/// OVN has not programmed on the node's integration bridge. An aggregate covers many VIPs and
/// is not held back.
async fn held_for_ovn(
    inputs: &mut GateInputs,
    published: &watch::Sender<Option<WantedPrefixes>>,
    want: &BTreeSet<IpNet>,
) -> BTreeSet<IpAddr> {
    let Some(programmed) = &mut inputs.programmed else {
        return BTreeSet::new();
    };
    let new: Vec<IpAddr> = {
        let told = published.borrow();
        let frr = inputs.frr.borrow();
        want.iter()
            .filter(|p| p.prefix_len() == p.max_prefix_len())
            .filter(|p| !told.as_ref().is_some_and(|(_, t)| t.contains(p)))
            .filter(|p| !frr.originated.contains(p))
            .map(IpNet::addr)
            .collect()
    };
    if new.is_empty() {
        return BTreeSet::new();
    }
    let integration = inputs
        .bridges
        .first()
        .and_then(|b| b.borrow().integration_bridge.clone());
    let ready = programmed.ready(integration.as_deref(), &new).await;
    new.into_iter().filter(|v| !ready.contains(v)).collect()
}
