//! The pure part of a bridge's reconciler: the plan it is given, the bridge's ports and the
//! roles they play, how a planned flow becomes a concrete one, and the diff of two sets of
//! concrete flows. What is applied is in [`super::applied`], what the flow monitor reported in
//! [`super::heard`]. No I/O here: the task ([`super::task`]) feeds it and sends what it returns.

use crate::config::{BridgeConfig, format_mac};
use crate::keys::L3_GATEWAY_CONFIG_ANNOTATION;
use crate::plan::flows::{FlowMaker, PlannedFlow, PortRef, Resolved, steer_rewrite};
use crate::plan::service_index::{FlowDelta, FlowIndex};
use crate::reconcile::bridge::ports::{self, OvsDb, PortError, Role};
use openflow::action::port as ofport;
use openflow::oxm::MacAddr;
use openflow::port::PortReason;
use openflow::{FlowMod, Instruction, Match, Message};
use std::collections::BTreeMap;
use std::time::Duration;

/// What the reconciler is asked to make true: a plan and its generation number.
#[derive(Debug, Clone, Default)]
pub struct DesiredFlows {
    pub generation: u64,
    /// The whole plan: the keys of its flows (a persistent set: cheap to hand over).
    pub flows: FlowIndex,
    /// Makes each flow of `flows` from its key.
    pub maker: FlowMaker,
    /// What changed since plan `generation - 1`. A reconciler that applied that plan writes
    /// just these keys; any other falls back to a full diff.
    pub delta: Option<FlowDelta>,
    /// This node's OVN gateway router MAC, from its Node annotation
    /// ([`crate::model::gateway_router_mac`]).
    pub router_mac: Option<MacAddr>,
    /// VIPs to announce again once this plan is on the switch, though their answer flows did
    /// not change (a node came back: the network may have moved to another node meanwhile).
    pub announce: Vec<std::net::IpAddr>,
    /// This node sees fewer than half of the nodes: another may have taken what it owns. A
    /// session that starts meanwhile (the switch came back) holds the answers back until this
    /// clears (the bridge task).
    pub doubt: bool,
}

/// Something about the bridge that keeps flows from working as planned, reported in the
/// status and the log while it lasts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, thiserror::Error)]
pub enum BridgeProblem {
    /// A role's port could not be found.
    #[error("{0}")]
    Ports(String),
    #[error(
        "{bridge}: the OVS database {remote} is unreachable ({reason}): ports are looked up by name in OpenFlow PORT_DESC only (names of at most 15 bytes; no default uplink/patch)"
    )]
    OvsDbUnreachable {
        bridge: String,
        remote: String,
        reason: String,
    },
    #[error(
        "{bridge}: its MAC {bridge_mac} ({mac_from}) differs from the OVN gateway router's {router_mac} (Node annotation {annotation}): VIP traffic steered into OVN is rewritten to the router's MAC",
        annotation = L3_GATEWAY_CONFIG_ANNOTATION
    )]
    RouterMacDiffers {
        bridge: String,
        bridge_mac: String,
        mac_from: &'static str,
        router_mac: String,
    },
}

/// What the reconciler reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BridgeStatus {
    pub connected: bool,
    /// The generation of the last plan fully applied.
    pub applied_generation: Option<u64>,
    /// Flows of ours on the switch after the last sync.
    pub flows: usize,
    /// Planned flows that could not be written (missing port, rejected by the switch).
    pub skipped: Vec<String>,
    pub last_error: Option<crate::reconcile::error::ReconcileError>,
    pub full_syncs: u64,
    /// Syncs done (full and incremental) and how long the last one took.
    pub syncs: u64,
    pub last_sync: Duration,
    /// Times flows changed by someone else were found and put back.
    pub drift_repairs: u64,
    /// What keeps the bridge's flows from working as planned (ports not found, the OVS
    /// database unreachable, a gateway router MAC that differs from the bridge's).
    pub problems: Vec<BridgeProblem>,
    /// The node's OVN integration bridge (`br-int`), as the OVS database names it; `None`
    /// where the node is no OVN chassis (or the database was not read yet).
    pub integration_bridge: Option<String>,
}

/// (table, priority, normalized match): how OpenFlow identifies a flow.
pub type FlowId = (u8, u16, Match);

/// A flow's content, compared to decide whether to rewrite it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowBody {
    pub cookie: u64,
    pub instructions: Vec<Instruction>,
}

pub type FlowSet = BTreeMap<FlowId, FlowBody>;

/// What is known of the bridge's ports: PORT_DESC (OpenFlow names, cut to 15 bytes, by
/// number), the LOCAL port's MAC, and the OVS database.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ports {
    pub desc: BTreeMap<u32, String>,
    pub local_mac: Option<MacAddr>,
    pub db: OvsDb,
}

impl Ports {
    /// From PORT_DESC alone (the database not consulted).
    pub fn from_desc(ports: &[openflow::Port]) -> Ports {
        let mut p = Ports::default();
        p.set_desc(ports);
        p
    }

    /// Replace what PORT_DESC said, keeping the database's view.
    pub fn set_desc(&mut self, ports: &[openflow::Port]) {
        self.desc.clear();
        self.local_mac = None;
        for port in ports {
            self.apply(PortReason::Add, port);
        }
    }

    pub fn apply(&mut self, reason: PortReason, port: &openflow::Port) {
        if port.port_no == ofport::LOCAL {
            self.local_mac = Some(port.hw_addr);
        }
        match reason {
            PortReason::Delete => {
                if self.desc.get(&port.port_no) == Some(&port.name) {
                    self.desc.remove(&port.port_no);
                }
            }
            _ => {
                self.desc.insert(port.port_no, port.name.clone());
            }
        }
    }
}

/// Port numbers and MACs of a bridge's roles, looked up once for many flows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roles {
    pub uplink: Result<u32, PortError>,
    pub patch: Result<u32, PortError>,
    /// The bridge MAC: configured, else the LOCAL port's.
    pub mac: Option<MacAddr>,
    /// Where traffic into OVN is rewritten to ([`steer_rewrite`]).
    pub steer_dst: Option<MacAddr>,
}

impl Roles {
    /// The roles of bridge `b`, given what is known of its ports and this node's gateway
    /// router MAC.
    pub fn of(b: &BridgeConfig, ports: &Ports, router_mac: Option<MacAddr>) -> Roles {
        let mac = b.bridge_mac.or(ports.local_mac);
        Roles {
            uplink: ports::resolve_role(b, Role::Uplink, &ports.desc, &ports.db),
            patch: ports::resolve_role(b, Role::Patch, &ports.desc, &ports.db),
            mac,
            steer_dst: steer_rewrite(b, router_mac, mac),
        }
    }

    /// What is wrong, for the status and the log.
    pub fn problems(&self, b: &BridgeConfig, ports: &Ports) -> Vec<BridgeProblem> {
        let mut out = Vec::new();
        if let OvsDb::Unreachable { remote, reason } = &ports.db {
            out.push(BridgeProblem::OvsDbUnreachable {
                bridge: b.name.clone(),
                remote: remote.clone(),
                reason: reason.clone(),
            });
        }
        for e in [&self.uplink, &self.patch]
            .into_iter()
            .filter_map(|r| r.as_ref().err())
        {
            if e.is_problem() {
                out.push(BridgeProblem::Ports(e.to_string()));
            }
        }
        if let (Some(router), Some(mac)) = (self.steer_dst, self.mac) {
            out.push(BridgeProblem::RouterMacDiffers {
                bridge: b.name.clone(),
                bridge_mac: format_mac(&mac),
                mac_from: if b.bridge_mac.is_some() {
                    "bridge-mac"
                } else {
                    "LOCAL port"
                },
                router_mac: format_mac(&router),
            });
        }
        out.sort();
        out.dedup();
        out
    }

    /// One planned flow with real port numbers, or why it cannot be written now.
    /// Every role is known: then [`Roles::resolve`] makes every flow.
    pub fn complete(&self) -> bool {
        self.uplink.is_ok() && self.patch.is_ok() && self.mac.is_some()
    }

    pub fn resolve(&self, f: &PlannedFlow) -> Result<(FlowId, FlowBody), String> {
        let needs = |p: PortRef| {
            f.in_port == p
                || f.actions
                    .iter()
                    .any(|a| matches!(a, crate::plan::flows::PlannedAction::Output(q) if *q == p))
        };
        let uplink = match &self.uplink {
            Err(e) if needs(PortRef::Uplink) => return Err(e.to_string()),
            r => r.as_ref().copied().unwrap_or(0),
        };
        let patch = match &self.patch {
            Err(e) if needs(PortRef::Patch) => return Err(e.to_string()),
            r => r.as_ref().copied().unwrap_or(0),
        };
        let bridge_mac = match self.mac {
            None if f.dl_src_bridge => return Err("MAC of the bridge unknown".into()),
            m => m.unwrap_or_default(),
        };
        let r = Resolved {
            uplink,
            patch,
            bridge_mac,
            steer_dst: self.steer_dst,
        };
        let fm = f.resolve(&r);
        Ok((
            (fm.table_id, fm.priority, fm.match_),
            FlowBody {
                cookie: fm.cookie,
                instructions: fm.instructions,
            },
        ))
    }
}

/// Turn a plan into concrete flows. Flows whose ports are missing are left out and named in
/// the returned list of skipped keys.
pub fn resolve_plan<'a>(
    flows: impl IntoIterator<Item = &'a PlannedFlow>,
    roles: &Roles,
) -> (FlowSet, Vec<String>) {
    let mut set = FlowSet::new();
    let mut skipped = Vec::new();
    for f in flows {
        match roles.resolve(f) {
            Ok((id, body)) => {
                set.insert(id, body);
            }
            Err(why) => skipped.push(format!("{}: {why}", f.key)),
        }
    }
    (set, skipped)
}

/// The messages that turn `old` into `new`: strict deletes of what goes, adds of what is new
/// or changed (an ADD over an existing (table, priority, match) replaces it, cookie included).
pub fn diff(old: &FlowSet, new: &FlowSet) -> Vec<Message> {
    // Both maps are sorted by the same key: one merge pass, without a tree lookup (and a Match
    // clone) per flow, keeps an incremental change cheap when tens of thousands are installed.
    let mut deletes = Vec::new();
    let mut adds = Vec::new();
    let delete = |((table, prio, m), body): (&FlowId, &FlowBody)| {
        // Exact cookie: of the flows with this match, only ours can be deleted.
        Message::FlowMod(FlowMod::delete_strict(
            *table,
            *prio,
            m.clone(),
            body.cookie,
            u64::MAX,
        ))
    };
    let add = |((table, prio, m), body): (&FlowId, &FlowBody)| {
        Message::FlowMod(FlowMod::add(
            *table,
            *prio,
            body.cookie,
            m.clone(),
            body.instructions.clone(),
        ))
    };
    let (mut o, mut n) = (old.iter().peekable(), new.iter().peekable());
    loop {
        match (o.peek(), n.peek()) {
            (Some(&a), Some(&b)) => match a.0.cmp(b.0) {
                std::cmp::Ordering::Less => {
                    deletes.push(delete(a));
                    o.next();
                }
                std::cmp::Ordering::Greater => {
                    adds.push(add(b));
                    n.next();
                }
                std::cmp::Ordering::Equal => {
                    if a.1 != b.1 {
                        adds.push(add(b));
                    }
                    o.next();
                    n.next();
                }
            },
            (Some(&a), None) => {
                deletes.push(delete(a));
                o.next();
            }
            (None, Some(&b)) => {
                adds.push(add(b));
                n.next();
            }
            (None, None) => break,
        }
    }
    // Deletes, then adds, each in key order: the same messages in the same order as before.
    deletes.append(&mut adds);
    deletes
}
