//! The planner: one incremental model of the Services, and from it the flows of every bridge
//! and the Northbound rows of every Service, brought up to date by each snapshot of the source.
//!
//! The agent's planner task, the one-shot commands' tests and the benchmarks all plan through
//! [`Planner::update`], so what they measure and check is what the agent does.

use super::bgp_node::BgpAdvertiser;
use super::eligibility::Eligibility;
use super::flows::{FlowMaker, answer_keys};
use super::northbound::{GroupPlan, NorthboundConfig};
use super::order;
use super::row_table::{NbDelta, RowIndex, RowTable};
use super::service_index::{FlowDelta, FlowIndex, ServiceIndex};
use crate::announce::announcements::Announcements;
use crate::announce::{AnnouncerKind, Announcing};
use crate::config::{BridgeConfig, Config};
use crate::model::{ModelOptions, Objects};
use std::net::IpAddr;
use std::sync::Arc;

/// Services, flows per bridge and (when asked for) rows per Service, kept incrementally.
pub struct Planner {
    services: ServiceIndex,
    rows: Option<RowTable>,
    /// Which VIPs this node announces, when a bridge announces, and which nodes may announce
    /// each VIP.
    announcements: Option<(Announcements, Eligibility)>,
    /// What this node advertises over BGP, when it speaks BGP.
    bgp: Option<BgpAdvertiser>,
    /// frr-k8s mode, while this agent writes the shared objects: their namespace, and what
    /// was last handed on.
    frr_k8s_pools: Option<(String, Option<FrrK8sPools>)>,
    /// What the membership says, when one runs.
    members: Membership,
    /// The agent is stopping: this node takes nothing more and announces nothing again.
    stopping: bool,
    /// The agent handed its VIPs over: it answers for none.
    withdrawn: bool,
    /// The withdrawal was planned: nothing more to do for the announcements.
    withdrawn_applied: bool,
    /// The last announcement state handed on.
    announce_state: Option<Arc<AnnounceState>>,
    generation: u64,
}

/// One bridge's flows after an update, and what changed.
#[derive(Debug, Clone)]
pub struct BridgeFlows {
    pub flows: FlowIndex,
    /// Makes each flow of `flows` from its key.
    pub maker: FlowMaker,
    pub delta: FlowDelta,
    /// VIPs this node answers for whose answer did not change but must be announced again
    /// (a node came back; see [`crate::announce::announcements::PlacementChange::joined`]).
    pub announce: Vec<IpAddr>,
    /// This node is on the small side of a partition (or cut off): what it owns, the others
    /// may have taken meanwhile.
    pub doubt: bool,
}

/// The Northbound rows after an update, and what changed.
#[derive(Debug, Clone)]
pub struct NorthboundRows {
    pub rows: RowIndex,
    /// The number of rows in `rows`.
    pub row_count: usize,
    pub delta: NbDelta,
    /// Every VIP of this plan.
    pub vips: imbl::OrdSet<IpAddr>,
    /// The previous plan's VIPs.
    pub previous_vips: imbl::OrdSet<IpAddr>,
    /// vipflow's own Load_Balancer_Group and where it goes.
    pub groups: Arc<Vec<GroupPlan>>,
    /// With template rows: the chassis that need a `Chassis_Template_Var` row.
    pub template_chassis: Option<Arc<std::collections::BTreeSet<String>>>,
    /// Rows serving the previous plan and this one, to commit before the flows change (see
    /// [`order`]); `None` when this plan's rows can go first.
    pub make_first: Option<RowIndex>,
}

/// What the membership says, as the planner takes it.
#[derive(Debug, Clone, Default)]
pub enum Membership {
    /// None runs: the Nodes' Ready condition says who is live.
    #[default]
    Off,
    /// One runs but has not settled: this node does not know who owns what yet, and
    /// announces nothing.
    Waiting,
    View(Arc<crate::announce::announcements::MembershipView>),
}

impl Membership {
    /// What the membership says, once it has settled.
    pub fn view(&self) -> Option<&crate::announce::announcements::MembershipView> {
        match self {
            Membership::View(v) => Some(v.as_ref()),
            _ => None,
        }
    }
}

/// What this node announces after an update, when a bridge announces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnounceState {
    pub here: Vec<IpAddr>,
    pub live: Vec<crate::announce::placement::NodeName>,
    /// The nodes that take this node's VIPs if it goes: the membership sends them heartbeats
    /// ([`crate::membership::watch`]).
    pub successors: Vec<crate::announce::placement::NodeName>,
    /// Every VIP's owner, as this node sees it: whose answer each Service's record names
    /// ([`crate::announce::record`]).
    pub owners: imbl::OrdMap<IpAddr, crate::announce::placement::NodeName>,
    /// The VIPs no node announces because no MetalLB `L2Advertisement` selects their pool,
    /// with the pool ([`Eligibility::unadvertised`]).
    pub unadvertised: imbl::OrdMap<IpAddr, Arc<str>>,
}

/// What one update produced.
#[derive(Debug, Clone)]
pub struct Plans {
    /// Counts updates from 1.
    pub generation: u64,
    /// One per bridge, in the order the planner was given them.
    pub bridges: Vec<BridgeFlows>,
    /// `None` when the planner keeps no rows.
    pub northbound: Option<NorthboundRows>,
    /// `None` when no bridge announces; unchanged state is shared from the last update.
    pub announce: Option<Arc<AnnounceState>>,
    /// VIPs this update made this node take (announcing).
    pub taken: usize,
    /// This node's claims (VIP and epoch), for the membership to tell the others; `None` when
    /// unchanged or not announcing.
    pub claims: Option<Arc<std::collections::BTreeMap<IpAddr, u64>>>,
    /// What this node advertises over BGP, and why each VIP is or is not; `None` when it
    /// speaks no BGP.
    pub bgp: Option<super::bgp_node::NodeBgp>,
    /// frr-k8s mode, while this agent writes them: the shared objects of every pool's
    /// externalTrafficPolicy Cluster VIPs (the same `Arc` while unchanged).
    pub frr_k8s_pools: Option<FrrK8sPools>,
}

/// The shared `FRRConfiguration`s by name ([`crate::frrk8s::shared::pool_configurations`]).
pub type FrrK8sPools =
    Arc<std::collections::BTreeMap<String, crate::frrk8s::objects::FrrConfiguration>>;

impl Planner {
    /// A planner for `bridges`; with `northbound`, it keeps the rows too.
    pub fn new(
        opts: ModelOptions,
        bridges: &[BridgeConfig],
        cookie_prefix: u16,
        northbound: Option<NorthboundConfig>,
    ) -> Planner {
        Planner {
            services: ServiceIndex::new(opts, bridges, cookie_prefix),
            rows: northbound.map(RowTable::new),
            announcements: None,
            bgp: None,
            frr_k8s_pools: None,
            members: Membership::Off,
            stopping: false,
            withdrawn: false,
            withdrawn_applied: false,
            announce_state: None,
            generation: 0,
        }
    }

    /// What the membership says, for the next updates.
    pub fn set_members(&mut self, members: Membership) {
        self.members = members;
    }

    /// The agent stops: from now on this node takes no VIP and announces none again (the
    /// others take its VIPs; it keeps answering for those it has until [`Planner::withdraw`]).
    pub fn stop_announcing(&mut self) {
        self.stopping = true;
        if let Some(b) = &mut self.bgp {
            b.stop(false);
        }
    }

    /// The hand-over is over: the next update removes every answer of this node.
    pub fn withdraw(&mut self) {
        self.stopping = true;
        self.withdrawn = true;
        if let Some(b) = &mut self.bgp {
            b.stop(true);
        }
    }

    /// Keep this node's VIPs while it is marked for drain
    /// ([`Announcements::hold_while_draining`], [`BgpAdvertiser::hold_while_draining`]).
    pub fn hold_while_draining(&mut self, hold: bool) {
        if let Some((a, _)) = &mut self.announcements {
            a.hold_while_draining(hold);
        }
        if let Some(b) = &mut self.bgp {
            b.hold_while_draining(hold);
        }
    }

    /// Plan the ARP answers of the bridges that announce, as node `node`.
    pub fn announcing_as(mut self, node: &str) -> Planner {
        self.announcements = Some((Announcements::new(node), Eligibility::for_l2()));
        self
    }

    /// Plan what this node advertises over BGP, as node `node`.
    pub fn advertising_as(mut self, node: &str) -> Planner {
        self.bgp = Some(BgpAdvertiser::new(node));
        self
    }

    /// Plan the shared frr-k8s objects (in `namespace`) with every update from now on
    /// (`Some`), or no longer (`None`): the agent that writes them asks for them.
    pub fn write_frr_k8s_pools(&mut self, namespace: Option<&str>) {
        match (namespace, &self.frr_k8s_pools) {
            (Some(ns), Some((current, _))) if current == ns => {}
            (Some(ns), _) => self.frr_k8s_pools = Some((ns.to_string(), None)),
            (None, _) => self.frr_k8s_pools = None,
        }
    }

    /// The planner the agent runs for `cfg`: rows only when a Northbound database is set.
    pub fn for_config(cfg: &Config) -> Planner {
        Planner::for_config_with_rows(cfg, cfg.nb_remote.is_some())
    }

    /// [`Planner::for_config`], keeping rows when `rows` is set whatever `cfg` says of the
    /// Northbound database (`vipflow plan` prints them without one).
    pub fn for_config_with_rows(cfg: &Config, rows: bool) -> Planner {
        let p = Planner::new(
            crate::model::ModelOptions::from_config(cfg),
            &cfg.bridges,
            cfg.cookie_prefix,
            rows.then(|| cfg.northbound.clone()),
        );
        let announcing = Announcing::of(cfg);
        // The placement kept here is the L2 announcer's: one owner per VIP.
        let p = if announcing.uses(AnnouncerKind::L2) {
            p.announcing_as(&cfg.node_name)
        } else {
            p
        };
        if announcing.uses(AnnouncerKind::Bgp) {
            let mut p = p.advertising_as(&cfg.node_name);
            if cfg.bgp.frr_k8s == crate::config::FrrK8sMode::On {
                p.write_frr_k8s_pools(Some(&cfg.bgp.frr_k8s_namespace));
            }
            p
        } else {
            p
        }
    }

    /// Bring everything up to date with `objects`. Work is in proportion to what changed since
    /// the last update.
    pub fn update(&mut self, objects: &Objects) -> Plans {
        self.generation += 1;
        let previous_vips = self.services.vips();
        let mut deltas = self.services.update(objects);
        let mut announce = vec![Vec::new(); deltas.len()];
        let mut doubts = vec![false; deltas.len()];
        let mut taken = 0;
        let mut claims = None;
        let waiting = matches!(self.members, Membership::Waiting);
        let done = self.withdrawn_applied;
        if let Some((a, eligibility)) = &mut self.announcements
            && !waiting
            && !done
        {
            let changed = eligibility.update(objects, &self.services);
            let (mut change, doubt) = if self.withdrawn {
                // Every answer goes; the placement is left as it was.
                let turns = a
                    .here()
                    .map(|v| crate::announce::announcements::Turn {
                        vip: *v,
                        here: false,
                    })
                    .collect();
                (
                    crate::announce::announcements::PlacementChange {
                        turns,
                        ..Default::default()
                    },
                    false,
                )
            } else {
                let view = self.members.view();
                let c = a.update_eligible(
                    &self.services.vips(),
                    &objects.nodes,
                    view,
                    &|vip| eligibility.of(vip),
                    &changed,
                );
                (c, a.in_doubt())
            };
            if self.stopping && !self.withdrawn {
                // Leaving: what this node gives up goes, nothing is taken or announced again.
                change.turns.retain(|t| !t.here);
                change.joined = false;
            }
            taken = change.turns.iter().filter(|t| t.here).count();
            if change.claims_changed && !self.stopping {
                claims = Some(Arc::new(a.claims()));
            }
            let here: Vec<IpAddr> = if self.withdrawn {
                Vec::new()
            } else {
                a.here().copied().collect()
            };
            // Successors change with the live set and with who may announce a VIP (its
            // eligible nodes), not only when this node's VIPs do: asked every time, for a few
            // hashes per VIP this node owns.
            let successors: Vec<_> = if self.withdrawn {
                Vec::new()
            } else {
                a.successors().into_iter().collect()
            };
            let owners = a.owners();
            let unadvertised = eligibility.unadvertised();
            // VIPs also move between other nodes (their endpoints, their labels).
            let stale = self.announce_state.as_ref().is_none_or(|s| {
                s.successors != successors
                    || !s.owners.ptr_eq(&owners)
                    || !s.unadvertised.ptr_eq(&unadvertised)
            });
            if stale || !change.turns.is_empty() || change.live_changed || self.withdrawn {
                self.announce_state = Some(Arc::new(AnnounceState {
                    here: here.clone(),
                    live: a.live().iter().cloned().collect(),
                    successors,
                    owners,
                    unadvertised,
                }));
            }
            let again: Vec<IpAddr> = if change.joined { here } else { Vec::new() };
            for (i, delta) in deltas.iter_mut().enumerate() {
                if !self.services.announces(i) {
                    continue;
                }
                announce[i].clone_from(&again);
                doubts[i] = doubt;
                for t in &change.turns {
                    for key in answer_keys(t.vip) {
                        if self.services.set_flow(i, key, t.here) {
                            delta.touched.push(key);
                        }
                    }
                }
                delta.touched.sort();
                delta.touched.dedup();
            }
            if self.withdrawn {
                self.withdrawn_applied = true;
            }
        } else if waiting && self.announce_state.is_none() {
            self.announce_state = Some(Arc::new(AnnounceState {
                here: Vec::new(),
                live: Vec::new(),
                successors: Vec::new(),
                owners: Default::default(),
                unadvertised: Default::default(),
            }));
        }
        let bridges = deltas
            .into_iter()
            .enumerate()
            .zip(announce)
            .zip(doubts)
            .map(|(((i, delta), announce), doubt)| BridgeFlows {
                flows: self.services.flows(i),
                maker: self.services.maker(i),
                delta,
                announce,
                doubt,
            })
            .collect();
        let services = &self.services;
        let northbound = self.rows.as_mut().map(|table| {
            let before = table.rows();
            let delta = table.update(objects, services);
            let rows = table.rows();
            NorthboundRows {
                make_first: order::make_rows(&before, &rows, &delta.touched),
                row_count: table.row_count(),
                rows,
                delta,
                vips: services.vips(),
                previous_vips,
                groups: table.groups(),
                template_chassis: table.template_chassis(),
            }
        });
        let view = self.members.view();
        let collect = self.frr_k8s_pools.is_some();
        let bgp = self.bgp.as_mut().map(|b| {
            b.collect_cluster_vips(collect);
            b.update(objects, &self.services, view)
        });
        let frr_k8s_pools = match (&mut self.frr_k8s_pools, &self.bgp) {
            (Some((namespace, last)), Some(advertiser)) => {
                let live = view.map(|v| &*v.live);
                let (now, problems) = crate::frrk8s::shared::pool_configurations(
                    objects,
                    advertiser.pools(),
                    advertiser.cluster_vips(),
                    crate::frrk8s::shared::Nodes {
                        live,
                        frr_k8s: None,
                    },
                    namespace,
                );
                // The node's own configuration says the same problems.
                let _ = problems;
                if last.as_ref().is_none_or(|l| **l != now) {
                    *last = Some(Arc::new(now));
                }
                last.clone()
            }
            _ => None,
        };
        Plans {
            generation: self.generation,
            bridges,
            northbound,
            announce: self.announce_state.clone(),
            taken,
            claims,
            bgp,
            frr_k8s_pools,
        }
    }

    /// The incremental model: validated Services, claims and their winners.
    pub fn services(&self) -> &ServiceIndex {
        &self.services
    }

    /// Who announces what, when a bridge announces.
    pub fn announcements(&self) -> Option<&Announcements> {
        self.announcements.as_ref().map(|(a, _)| a)
    }

    /// The VIPs MetalLB's `L2Advertisement`s keep `node` from announcing, and why, in VIP
    /// order (`vipflow plan`); empty when no bridge announces. Visits every VIP.
    pub fn l2_withheld(&self, node: &str) -> Vec<(IpAddr, super::l2_selection::L2Reason)> {
        let Some((_, eligibility)) = &self.announcements else {
            return Vec::new();
        };
        self.services
            .vips()
            .iter()
            .filter_map(|v| Some((*v, eligibility.l2_reason(*v, node)?)))
            .collect()
    }

    /// The rows per Service, when the planner keeps them.
    pub fn row_table(&self) -> Option<&RowTable> {
        self.rows.as_ref()
    }

    /// The generation of the last update (0 before the first).
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

#[cfg(test)]
#[path = "planner_tests.rs"]
mod tests;
