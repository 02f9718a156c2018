//! The agent's status document: what `/status` serves and `vipflow status` prints. One type
//! for both sides, so a renamed field is a compile error, not a blank column.

mod vip_list;
pub use vip_list::VipList;

use crate::model::{Protocol, ServiceKey};
use serde::{Deserialize, Serialize};
use std::fmt;

/// What a running agent holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusDoc {
    pub node: String,
    /// The latest plan's generation.
    pub generation: u64,
    /// Every bridge (and the Northbound writer, when this agent is it) has applied a plan.
    pub ready: bool,
    /// Whether this agent writes the Northbound database; absent without leader election.
    pub leader: Option<bool>,
    pub vips: VipList,
    /// Problems with the objects, as sentences.
    pub problems: Vec<String>,
    pub bridges: Vec<BridgeDoc>,
    /// Absent when no Northbound database is configured.
    pub northbound: Option<NorthboundDoc>,
    /// The address pools and their usage, on the agent that allocates (`--allocate-ips`,
    /// elected); empty elsewhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<PoolDoc>,
    /// What this node announces, when a bridge announces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub announce: Option<AnnounceDoc>,
    /// What this node advertises over BGP, when it drives an FRR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bgp: Option<BgpDoc>,
}

/// This node's BGP speaker: its sessions, what it advertises, and why each VIP of a BGP pool
/// is or is not advertised here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BgpDoc {
    /// The AS this node speaks as; absent when no `BGPPeer` selects it (or FRR was not
    /// configured yet).
    pub asn: Option<u32>,
    /// FRR holds the configuration and every prefix the node's dataplane carries.
    pub current: bool,
    pub sessions: Vec<BgpSessionDoc>,
    /// The prefixes FRR originates.
    pub advertised: Vec<ipnet::IpNet>,
    /// Every VIP of a pool a `BGPAdvertisement` selects.
    pub vips: Vec<BgpVipDoc>,
    /// Batches of `network` lines applied since the agent started.
    pub batches: u64,
    pub last_error: Option<String>,
}

/// One BGP session, one address family, with its BFD session's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BgpSessionDoc {
    pub peer: std::net::IpAddr,
    /// FRR's name of the family (`ipv4Unicast`).
    pub family: String,
    /// FRR's word for the state (`Established`, `Active`, ...).
    pub state: String,
    /// The BFD session's state (`up`, `down`, `init`); absent without BFD.
    pub bfd: Option<String>,
}

/// One VIP of a BGP pool: `advertised`, `waiting` (planned here, not yet in FRR: the bridges
/// or FRR have not taken it yet), or why this node does not advertise it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BgpVipDoc {
    pub vip: std::net::IpAddr,
    pub state: String,
}

impl BgpDoc {
    /// The document's sessions and VIPs from what the plan says of each VIP, what FRR
    /// originates and its sessions.
    pub fn with(
        vips: &std::collections::BTreeMap<std::net::IpAddr, crate::plan::bgp_node::BgpReason>,
        originated: &std::collections::BTreeSet<ipnet::IpNet>,
        bgp: &[crate::bgp::frr_state::BgpSession],
        bfd: &[crate::bgp::frr_state::BfdSession],
    ) -> BgpDoc {
        use crate::plan::bgp_node::BgpReason;
        let vips = vips
            .iter()
            .map(|(vip, reason)| {
                let state = match reason {
                    BgpReason::Advertised if originated.iter().any(|n| n.contains(vip)) => {
                        "advertised".to_string()
                    }
                    BgpReason::Advertised => "waiting for the bridges or FRR".to_string(),
                    other => other.to_string(),
                };
                BgpVipDoc { vip: *vip, state }
            })
            .collect();
        let sessions = bgp
            .iter()
            .map(|s| BgpSessionDoc {
                peer: s.peer,
                family: s.family.clone(),
                state: s.state.clone(),
                bfd: bfd
                    .iter()
                    .find(|b| b.peer == s.peer)
                    .map(|b| b.status.clone()),
            })
            .collect();
        BgpDoc {
            sessions,
            advertised: originated.iter().copied().collect(),
            vips,
            ..BgpDoc::default()
        }
    }
}

/// The VIPs this node answers ARP for and the nodes it sees as live ([`crate::announce`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnnounceDoc {
    pub live: Vec<String>,
    pub here: Vec<std::net::IpAddr>,
    /// The VIPs no node announces over L2 because no MetalLB `L2Advertisement` selects
    /// their pool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unadvertised: Vec<UnadvertisedDoc>,
}

/// A VIP no node announces over L2, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnadvertisedDoc {
    pub vip: std::net::IpAddr,
    pub reason: String,
}

impl AnnounceDoc {
    /// The document of what the planner says this node announces (`unadvertised`: VIP and
    /// pool).
    pub fn with(
        live: Vec<String>,
        here: Vec<std::net::IpAddr>,
        unadvertised: &imbl::OrdMap<std::net::IpAddr, std::sync::Arc<str>>,
    ) -> AnnounceDoc {
        AnnounceDoc {
            live,
            here,
            unadvertised: unadvertised
                .iter()
                .map(|(vip, pool)| UnadvertisedDoc {
                    vip: *vip,
                    reason: crate::plan::l2_selection::L2Reason::Unadvertised {
                        pool: std::sync::Arc::clone(pool),
                    }
                    .to_string(),
                })
                .collect(),
        }
    }
}

/// One address pool: its name and status (usage per family, whether it can be used).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolDoc {
    pub name: String,
    pub status: crate::ipam::pool_object::VipPoolStatus,
}

/// One VIP: its ports and the Services that have it. Typed, and written as text (an address,
/// `port/protocol`, `namespace/name`): an agent keeps one for each of tens of thousands of
/// VIPs, and the keys are the planner's own (shared, not copied).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VipDoc {
    pub vip: std::net::IpAddr,
    pub ports: Vec<PortDoc>,
    pub services: Vec<ServiceKey>,
}

/// `port/protocol` (`80/tcp`), as the status document writes a VIP's port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PortDoc {
    pub port: u16,
    pub protocol: Protocol,
}

impl PortDoc {
    /// A claim's port and protocol.
    pub fn of(claim: &crate::plan::service_index::PortClaim) -> PortDoc {
        PortDoc {
            port: claim.1,
            protocol: claim.2,
        }
    }
}

impl fmt::Display for PortDoc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.port, self.protocol)
    }
}

impl Serialize for PortDoc {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PortDoc {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<PortDoc, D::Error> {
        let text = String::deserialize(d)?;
        let parsed = text.split_once('/').and_then(|(port, proto)| {
            Some(PortDoc {
                port: port.parse().ok()?,
                protocol: Protocol::from_name(proto)?,
            })
        });
        parsed.ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not port/protocol")))
    }
}

/// Items joined by `, ` as text.
fn joined<T: fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// One bridge's reconciler.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BridgeDoc {
    pub name: String,
    pub connected: bool,
    pub flows: usize,
    pub applied_generation: Option<u64>,
    /// Planned flows the switch does not hold, and why.
    pub skipped: Vec<String>,
    pub last_error: Option<String>,
    pub full_syncs: u64,
    /// Problems with the bridge's ports, as sentences.
    pub problems: Vec<String>,
}

/// The Northbound writer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NorthboundDoc {
    /// Whether this agent is the writer.
    pub writer: bool,
    pub connected: bool,
    pub rows: usize,
    pub applied_generation: Option<u64>,
    pub problems: Vec<String>,
    pub last_error: Option<String>,
    pub transactions: u64,
}

fn or_none<T: fmt::Display>(v: &Option<T>) -> String {
    v.as_ref()
        .map_or_else(|| "null".into(), ToString::to_string)
}

fn error_suffix(e: &Option<String>) -> String {
    e.as_ref()
        .map(|e| format!("  error: {e}"))
        .unwrap_or_default()
}

/// The text `vipflow status` prints.
impl fmt::Display for StatusDoc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "node {}  generation {}  ready {}",
            self.node, self.generation, self.ready
        )?;
        if let Some(leader) = self.leader {
            let who = if leader {
                "this agent"
            } else {
                "another agent"
            };
            writeln!(f, "northbound writer: {who}")?;
        }
        writeln!(f, "\nVIPs ({})", self.vips.len())?;
        for v in self.vips.iter() {
            writeln!(
                f,
                "  {:<28} {:<24} {}",
                v.vip.to_string(),
                joined(&v.ports),
                joined(&v.services)
            )?;
        }
        writeln!(f, "\nbridges")?;
        for b in &self.bridges {
            writeln!(
                f,
                "  {:<12} connected {:<5} flows {:<6} generation {}{}",
                b.name,
                b.connected,
                b.flows,
                or_none(&b.applied_generation),
                error_suffix(&b.last_error)
            )?;
            for p in &b.problems {
                writeln!(f, "    problem: {p}")?;
            }
            for s in &b.skipped {
                writeln!(f, "    not programmed: {s}")?;
            }
        }
        if let Some(n) = &self.northbound {
            writeln!(
                f,
                "\nnorthbound: writer {} connected {} rows {} generation {}{}",
                n.writer,
                n.connected,
                n.rows,
                or_none(&n.applied_generation),
                error_suffix(&n.last_error)
            )?;
            for p in &n.problems {
                writeln!(f, "  {p}")?;
            }
        }
        if !self.pools.is_empty() {
            writeln!(f, "\npools ({})", self.pools.len())?;
            for p in &self.pools {
                let st = &p.status;
                let usable = match st.conditions.iter().find(|c| c.type_ == "Usable") {
                    Some(c) if c.status != "True" => format!("not usable: {}", c.message),
                    _ => "usable".to_string(),
                };
                writeln!(
                    f,
                    "  {:<16} IPv4 {} assigned {} available  IPv6 {} assigned {} available  {usable}",
                    p.name,
                    st.assigned_ipv4,
                    st.available_ipv4,
                    st.assigned_ipv6,
                    st.available_ipv6
                )?;
            }
        }
        if let Some(a) = &self.announce {
            let here: Vec<String> = a.here.iter().map(ToString::to_string).collect();
            writeln!(
                f,
                "\nannounces {} VIPs: {}\n  live nodes ({}): {}",
                here.len(),
                if here.is_empty() {
                    "-".to_string()
                } else {
                    here.join(" ")
                },
                a.live.len(),
                a.live.join(" ")
            )?;
            if !a.unadvertised.is_empty() {
                writeln!(f, "  not announced by any node ({}):", a.unadvertised.len())?;
                for u in &a.unadvertised {
                    writeln!(f, "    {}: {}", u.vip, u.reason)?;
                }
            }
        }
        if let Some(b) = &self.bgp {
            writeln!(
                f,
                "\nbgp: AS {}  current {}  advertises {} prefixes  batches {}{}",
                or_none(&b.asn),
                b.current,
                b.advertised.len(),
                b.batches,
                error_suffix(&b.last_error)
            )?;
            for s in &b.sessions {
                writeln!(
                    f,
                    "  peer {:<28} {:<12} {:<12} bfd {}",
                    s.peer.to_string(),
                    s.family,
                    s.state,
                    s.bfd.as_deref().unwrap_or("-")
                )?;
            }
            for v in &b.vips {
                writeln!(f, "  {:<28} {}", v.vip.to_string(), v.state)?;
            }
        }
        if !self.problems.is_empty() {
            writeln!(f, "\nproblems ({})", self.problems.len())?;
            for p in &self.problems {
                writeln!(f, "  {p}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_reads_back_as_it_was_written_and_keeps_its_keys() {
        let doc = StatusDoc {
            node: "node-a".into(),
            generation: 7,
            ready: true,
            leader: Some(false),
            vips: vec![VipDoc {
                vip: "172.18.0.100".parse().unwrap(),
                ports: vec![PortDoc {
                    port: 80,
                    protocol: Protocol::Tcp,
                }],
                services: vec![ServiceKey::new("shop", "web")],
            }]
            .into(),
            problems: vec!["Service shop/x: no ports".into()],
            bridges: vec![BridgeDoc {
                name: "br-ex".into(),
                connected: true,
                flows: 12,
                applied_generation: Some(7),
                ..BridgeDoc::default()
            }],
            northbound: Some(NorthboundDoc {
                writer: false,
                rows: 3,
                ..NorthboundDoc::default()
            }),
            pools: Vec::new(),
            announce: None,
            bgp: None,
        };
        let json = serde_json::to_value(&doc).unwrap();
        // No pools: no key (documents of agents that do not allocate stay as they were).
        assert!(json.get("pools").is_none());
        assert!(json.get("announce").is_none());
        // What scripts and tests read from /status.
        assert_eq!(json["northbound"]["writer"], false);
        assert_eq!(json["northbound"]["transactions"], 0);
        assert_eq!(json["bridges"][0]["applied_generation"], 7);
        assert_eq!(json["vips"][0]["services"][0], "shop/web");
        assert_eq!(json["vips"][0]["ports"][0], "80/tcp");
        assert_eq!(json["vips"][0]["vip"], "172.18.0.100");
        assert_eq!(json["leader"], false);
        assert_eq!(serde_json::from_value::<StatusDoc>(json).unwrap(), doc);
        let text = doc.to_string();
        assert!(
            text.starts_with("node node-a  generation 7  ready true\n"),
            "{text}"
        );
        assert!(text.contains("northbound writer: another agent"), "{text}");
        assert!(
            text.contains("  br-ex        connected true  flows 12     generation 7\n"),
            "{text}"
        );
    }

    #[test]
    fn pools_are_shown_with_their_usage() {
        let a =
            crate::ipam::Allocator::new(vec![crate::ipam::PoolSpec::new("blue", &["10.0.0.0/30"])]);
        let pool = a.pools().next().unwrap();
        let doc = StatusDoc {
            node: "node-a".into(),
            generation: 1,
            ready: true,
            leader: Some(true),
            vips: Default::default(),
            problems: Vec::new(),
            bridges: Vec::new(),
            northbound: None,
            pools: vec![PoolDoc {
                name: "blue".into(),
                status: crate::ipam::pool_object::VipPoolStatus::of(pool, |f| a.usage("blue", f)),
            }],
            announce: Some(AnnounceDoc::with(
                vec!["node-a".into(), "node-b".into()],
                vec!["172.18.0.100".parse().unwrap()],
                &imbl::OrdMap::unit("172.18.0.200".parse().unwrap(), "green".into()),
            )),
            bgp: None,
        };
        let json = serde_json::to_value(&doc).unwrap();
        assert_eq!(json["pools"][0]["status"]["availableIPv4"], 4);
        assert_eq!(json["announce"]["here"][0], "172.18.0.100");
        assert_eq!(serde_json::from_value::<StatusDoc>(json).unwrap(), doc);
        let text = doc.to_string();
        assert!(
            text.contains("announces 1 VIPs: 172.18.0.100\n  live nodes (2): node-a node-b\n  not announced by any node (1):\n    172.18.0.200: no L2Advertisement selects its pool green\n"),
            "{text}"
        );
        assert!(
            text.contains("  blue             IPv4 0 assigned 4 available  IPv6 0 assigned 0 available  usable"),
            "{text}"
        );
    }

    #[test]
    fn the_bgp_section_says_each_vips_state_and_each_sessions_bfd() {
        use crate::bgp::frr_state::{BfdSession, BgpSession};
        use crate::plan::bgp_node::BgpReason;
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let vips = std::collections::BTreeMap::from([
            (ip("198.51.100.10"), BgpReason::Advertised),
            (ip("198.51.100.11"), BgpReason::Advertised),
            (ip("198.51.100.12"), BgpReason::NoLocalEndpoint),
        ]);
        let originated = std::collections::BTreeSet::from(["198.51.100.10/32".parse().unwrap()]);
        let sessions = [BgpSession {
            peer: ip("172.18.0.1"),
            family: "ipv4Unicast".into(),
            remote_as: Some(64512),
            state: "Established".into(),
            prefixes_sent: Some(1),
            prefixes_received: Some(0),
        }];
        let bfd = [BfdSession {
            peer: ip("172.18.0.1"),
            status: "up".into(),
            receive_ms: Some(300),
            transmit_ms: Some(300),
            multiplier: Some(3),
        }];
        let mut b = BgpDoc::with(&vips, &originated, &sessions, &bfd);
        b.asn = Some(64513);
        b.current = true;
        let states: Vec<&str> = b.vips.iter().map(|v| v.state.as_str()).collect();
        assert_eq!(
            states,
            [
                "advertised",
                "waiting for the bridges or FRR",
                "no ready local endpoint (externalTrafficPolicy Local)"
            ]
        );
        assert_eq!(b.sessions[0].bfd.as_deref(), Some("up"));
        let doc = StatusDoc {
            node: "node-a".into(),
            bgp: Some(b),
            ..StatusDoc::default()
        };
        let json = serde_json::to_value(&doc).unwrap();
        assert_eq!(json["bgp"]["advertised"][0], "198.51.100.10/32");
        assert_eq!(json["bgp"]["sessions"][0]["state"], "Established");
        assert_eq!(serde_json::from_value::<StatusDoc>(json).unwrap(), doc);
        let text = doc.to_string();
        assert!(
            text.contains("bgp: AS 64513  current true  advertises 1 prefixes  batches 0\n"),
            "{text}"
        );
        assert!(
            text.contains("  peer 172.18.0.1                   ipv4Unicast  Established  bfd up\n"),
            "{text}"
        );
        assert!(
            text.contains("  198.51.100.11                waiting for the bridges or FRR\n"),
            "{text}"
        );
    }
}
