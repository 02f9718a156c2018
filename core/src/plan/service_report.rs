//! What problems, Events and the status document need from the planner: every claim's
//! claimants (so its winner and its losers) and each Service's validation problems, handed
//! over as persistent maps in O(1) after each update. Reports are derived from these at their
//! own pace, off the planning path; nothing rebuilds a model of every Service for them.

use super::service_index::PortClaim;
use crate::model::{Problem, ProblemKind, Rank, ServiceKey, SocketLike, Subject};
use std::net::IpAddr;
use std::sync::Arc;

/// The claimants of one claim, best first (nearly always one). Shared: a persistent map copies
/// the values of a node it changes, and this copy is a count.
pub type Claimants = Arc<[Rank]>;

/// `set` with `r` in its place (`set` unchanged if it has `r`).
pub(super) fn with_rank(set: Option<&Claimants>, r: &Rank) -> Claimants {
    let mut v: Vec<Rank> = set.map(|s| s.to_vec()).unwrap_or_default();
    if let Err(i) = v.binary_search(r) {
        v.insert(i, r.clone());
    }
    v.into()
}

/// `set` without `r`; `None` when nothing is left.
pub(super) fn without_rank(set: &Claimants, r: &Rank) -> Option<Claimants> {
    let rest: Vec<Rank> = set.iter().filter(|x| *x != r).cloned().collect();
    (!rest.is_empty()).then(|| rest.into())
}

/// The planner's Services as of one update, for reports.
#[derive(Debug, Clone, Default)]
pub struct ServiceReport {
    /// Every claim with a claimant, in claim order (so in VIP order), its claimants best first.
    pub claimants: imbl::OrdMap<PortClaim, Claimants>,
    /// The validation problems of each Service that has any.
    pub invalid: imbl::OrdMap<ServiceKey, Arc<[Problem]>>,
    /// The Nodes' problems, keys listed twice, a Service without a name.
    pub other: Arc<[Problem]>,
}

impl ServiceReport {
    /// Every won claim with its winner, in claim order.
    pub fn won(&self) -> impl Iterator<Item = (&PortClaim, &ServiceKey)> {
        (self.claimants.iter()).filter_map(|(c, set)| Some((c, &set.first()?.2)))
    }

    /// The claims on `vip` with their claimants, in claim order.
    pub fn claims_of(&self, vip: IpAddr) -> impl Iterator<Item = (&PortClaim, &Claimants)> {
        use std::ops::Bound;
        let from = (vip, 0, crate::model::Protocol::Tcp);
        (self
            .claimants
            .range((Bound::Included(from), Bound::Unbounded)))
        .take_while(move |(c, _)| c.0 == vip)
    }

    /// Every Service with the VIPs it wins, by key, each one's VIPs ascending.
    pub fn vips_by_service(&self) -> Vec<(&ServiceKey, Vec<IpAddr>)> {
        let mut all: Vec<(&ServiceKey, IpAddr)> = self.won().map(|(c, k)| (k, c.0)).collect();
        all.sort_unstable();
        all.dedup();
        all.chunk_by(|a, b| a.0 == b.0)
            .map(|g| (g[0].0, g.iter().map(|(_, v)| *v).collect()))
            .collect()
    }

    /// The problems the planner knows of (Services', conflicts, Nodes'), sorted, each once:
    /// the problems of a model of the same objects, less the EndpointSlices'.
    pub fn problems(&self) -> Vec<Problem> {
        let mut out: Vec<Problem> = self.other.to_vec();
        for p in self.invalid.values() {
            out.extend(p.iter().cloned());
        }
        for (c, set) in &self.claimants {
            let Some((winner, losers)) = set.split_first() else {
                continue;
            };
            for r in losers {
                out.push(
                    Problem::new(
                        Subject::Service(r.2.clone()),
                        ProblemKind::ConflictLost,
                        format!(
                            "also claimed by the older Service {}; conflict lost",
                            winner.2
                        ),
                    )
                    .with_vip(Some(SocketLike(c.0, c.1, c.2).to_string())),
                );
            }
        }
        out.sort();
        out.dedup();
        out
    }
}
