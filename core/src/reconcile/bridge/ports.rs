//! Which ports play a bridge's roles (uplink, patch) and their OpenFlow numbers: pure
//! functions of the bridge's config, the switch's PORT_DESC and the node's OVS database.
//!
//! OpenFlow carries port names in 15 bytes, and OVN-Kubernetes' localnet patch port
//! (`patch-br-ex_<node>-to-br-int`) is longer, so a full name is looked up in the OVS database
//! (`Interface.ofport`) and checked against PORT_DESC. Without the database, names of at most
//! 15 bytes are still found in PORT_DESC alone.
//!
//! A role left unconfigured is found in the database the way ovn-controller lays a node out:
//! `Open_vSwitch` `external_ids:ovn-bridge-mappings` names OVN's bridges; on such a bridge the
//! patch port is the patch interface whose Port carries `external_ids:ovn-localnet-port`
//! (ovn-controller's `controller/patch.c` puts it there), and the uplink is the one port that
//! is neither internal nor a patch port. Anything else (no mappings, none or several
//! candidates) is an error that names the candidates and the flag to set.

use crate::config::BridgeConfig;
use crate::keys::{OVN_BRIDGE_MAPPINGS_KEY, OVN_LOCALNET_PORT_KEY};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// OpenFlow's port name field holds 15 bytes and a NUL.
pub const OPENFLOW_NAME_MAX: usize = 15;

/// One interface of a bridge, as the OVS database has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OvsIface {
    /// The Port row's name (a bond's interfaces share it).
    pub port: String,
    pub name: String,
    /// `Interface.type`: empty for a system device, `internal`, `patch`, `dummy`, ...
    pub kind: String,
    /// `Interface.ofport`, once OVS assigned one.
    pub ofport: Option<u32>,
    /// `ovn-localnet-port` from the Port's external_ids (where ovn-controller sets it) or the
    /// Interface's.
    pub localnet: Option<String>,
}

/// What vipflow reads of the OVS database.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OvsView {
    /// `Open_vSwitch` `external_ids:ovn-bridge-mappings`.
    pub bridge_mappings: Option<String>,
    /// The bridge ovn-controller programs (`external_ids:ovn-bridge`, `br-int` by default)
    /// when this node is an OVN chassis (`external_ids:ovn-remote` is set).
    pub integration_bridge: Option<String>,
    /// Each bridge's interfaces, by bridge name.
    pub bridges: BTreeMap<String, Vec<OvsIface>>,
}

/// What is known of the OVS database.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum OvsDb {
    /// Not consulted: names come from PORT_DESC only.
    #[default]
    NotUsed,
    Unreachable {
        remote: String,
        reason: String,
    },
    Known(Arc<OvsView>),
}

impl OvsDb {
    /// Why the database cannot answer, if it cannot.
    fn unavailable(&self) -> Option<String> {
        match self {
            OvsDb::NotUsed => Some("not used".into()),
            OvsDb::Unreachable { remote, reason } => {
                Some(format!("{remote} is unreachable ({reason})"))
            }
            OvsDb::Known(_) => None,
        }
    }
}

/// A port role that can be configured or found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    Uplink,
    Patch,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Uplink => "uplink",
            Role::Patch => "patch",
        })
    }
}

/// Why a role has no port number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    #[error(
        "port {port} not on {bridge} (`ovs-vsctl list-ports {bridge}` lists its ports; name the right one with --uplink / --patch)"
    )]
    NotOnBridge { port: String, bridge: String },
    #[error("port {port} on {bridge} has no OpenFlow number yet")]
    NoNumber { port: String, bridge: String },
    #[error(
        "port {port}: a name longer than OpenFlow's 15 bytes is resolved through the OVS database, which is {why}"
    )]
    NeedsDatabase { port: String, why: String },
    #[error(
        "{bridge}: no {role} port configured and the OVS database, where it is looked up, is {why}; set --{role}"
    )]
    NoDatabase {
        bridge: String,
        role: Role,
        why: String,
    },
    #[error(
        "{bridge}: no {role} port configured and Open_vSwitch external_ids:{key} is not set (not an OVN node?); set --{role}",
        key = OVN_BRIDGE_MAPPINGS_KEY
    )]
    NoMappings { bridge: String, role: Role },
    #[error(
        "{bridge}: no {role} port configured and {key} {mappings:?} is not a list of NETWORK:BRIDGE; set --{role}",
        key = OVN_BRIDGE_MAPPINGS_KEY
    )]
    BadMappings {
        bridge: String,
        role: Role,
        mappings: String,
    },
    #[error(
        "{bridge}: no {role} port configured and {bridge} is not in {key} {mappings:?}; set --{role}",
        key = OVN_BRIDGE_MAPPINGS_KEY
    )]
    NotMapped {
        bridge: String,
        role: Role,
        mappings: String,
    },
    #[error(
        "{bridge}: no {role} port configured and the bridge is not in the OVS database; set --{role}"
    )]
    NoBridge { bridge: String, role: Role },
    #[error(
        "{bridge}: no patch port configured and no localnet patch port on it (type patch, Port external_ids:{key}, created by ovn-controller){}; set --patch",
        list_suffix(" other patch ports", .others),
        key = OVN_LOCALNET_PORT_KEY
    )]
    NoPatch { bridge: String, others: Vec<String> },
    #[error(
        "{bridge}: no uplink port configured and no port on it besides internal and patch ports; set --uplink"
    )]
    NoUplink { bridge: String },
    #[error(
        "{bridge}: no {role} port configured and {} candidates: {}; set --{role} to one of them",
        .candidates.len(),
        .candidates.join(", ")
    )]
    Ambiguous {
        bridge: String,
        role: Role,
        candidates: Vec<String>,
    },
}

fn list_suffix(what: &str, items: &[String]) -> String {
    if items.is_empty() {
        String::new()
    } else {
        format!(";{what}: {}", items.join(", "))
    }
}

impl PortError {
    /// Whether the error is about finding the role's port (a configuration matter worth a
    /// problem report) rather than a port that is momentarily absent.
    pub fn is_discovery(&self) -> bool {
        !matches!(
            self,
            PortError::NotOnBridge { .. } | PortError::NoNumber { .. }
        )
    }

    /// Whether the error is worth a problem report (a WARN): all but a port that exists and
    /// is only waiting for its OpenFlow number. A named port missing from the bridge is
    /// reported too: it may be on its way back (recreated), or a wrong name that would
    /// otherwise leave the bridge without flows in silence.
    pub fn is_problem(&self) -> bool {
        !matches!(self, PortError::NoNumber { .. })
    }
}

/// The name under which the switch lists a port in PORT_DESC: its first 15 bytes.
pub fn openflow_name(name: &str) -> String {
    let b = name.as_bytes();
    String::from_utf8_lossy(&b[..b.len().min(OPENFLOW_NAME_MAX)]).into_owned()
}

/// The bridges `ovn-bridge-mappings` names (`physnet:br-ex,other:br-foo`), or `None` when an
/// entry is not NETWORK:BRIDGE.
pub fn mapped_bridges(mappings: &str) -> Option<Vec<&str>> {
    let mut out = Vec::new();
    for entry in mappings.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (net, br) = entry.split_once(':')?;
        if net.is_empty() || br.is_empty() {
            return None;
        }
        out.push(br);
    }
    Some(out)
}

/// An interface as an error message names it.
fn describe(i: &OvsIface) -> String {
    let kind = if i.kind.is_empty() { "system" } else { &i.kind };
    format!("{} ({kind})", i.name)
}

/// Find the port of `role` on `bridge` from the node's OVS configuration.
pub fn discover(bridge: &str, role: Role, view: &OvsView) -> Result<String, PortError> {
    let Some(mappings) = view.bridge_mappings.as_deref().filter(|m| !m.is_empty()) else {
        return Err(PortError::NoMappings {
            bridge: bridge.into(),
            role,
        });
    };
    let mapped = mapped_bridges(mappings).ok_or_else(|| PortError::BadMappings {
        bridge: bridge.into(),
        role,
        mappings: mappings.into(),
    })?;
    if !mapped.contains(&bridge) {
        return Err(PortError::NotMapped {
            bridge: bridge.into(),
            role,
            mappings: mappings.into(),
        });
    }
    let ifaces = view
        .bridges
        .get(bridge)
        .ok_or_else(|| PortError::NoBridge {
            bridge: bridge.into(),
            role,
        })?;
    let candidates: Vec<&OvsIface> = match role {
        Role::Patch => ifaces
            .iter()
            .filter(|i| i.kind == "patch" && i.localnet.is_some())
            .collect(),
        // The bridge's own (LOCAL) interface is internal; so are other host ports.
        Role::Uplink => ifaces
            .iter()
            .filter(|i| i.kind != "internal" && i.kind != "patch" && i.name != bridge)
            .collect(),
    };
    match candidates.as_slice() {
        [one] => Ok(one.name.clone()),
        [] => Err(match role {
            Role::Patch => PortError::NoPatch {
                bridge: bridge.into(),
                others: ifaces
                    .iter()
                    .filter(|i| i.kind == "patch")
                    .map(|i| i.name.clone())
                    .collect(),
            },
            Role::Uplink => PortError::NoUplink {
                bridge: bridge.into(),
            },
        }),
        many => Err(PortError::Ambiguous {
            bridge: bridge.into(),
            role,
            candidates: many.iter().map(|i| describe(i)).collect(),
        }),
    }
}

/// The configured name of a role, if any.
pub fn configured(b: &BridgeConfig, role: Role) -> Option<&str> {
    match role {
        Role::Uplink => b.uplink.as_deref(),
        Role::Patch => b.patch.as_deref(),
    }
}

/// The name of the port playing `role`: the configured one (always authoritative), else the
/// one found in the database.
pub fn role_name(b: &BridgeConfig, role: Role, db: &OvsDb) -> Result<String, PortError> {
    if let Some(n) = configured(b, role) {
        return Ok(n.to_string());
    }
    match db {
        OvsDb::Known(view) => discover(&b.name, role, view),
        other => Err(PortError::NoDatabase {
            bridge: b.name.clone(),
            role,
            why: other.unavailable().unwrap_or_default(),
        }),
    }
}

/// The OpenFlow number of port `name` on `bridge`. With the database, its `Interface.ofport`,
/// provided the switch lists that number under the name (so a database that lags the switch
/// never points flows at another port); without it, the PORT_DESC entry of that name, which
/// only works for names that fit OpenFlow.
pub fn number(
    name: &str,
    bridge: &str,
    desc: &BTreeMap<u32, String>,
    db: &OvsDb,
) -> Result<u32, PortError> {
    let not_on = || PortError::NotOnBridge {
        port: name.into(),
        bridge: bridge.into(),
    };
    let short = openflow_name(name);
    match db {
        OvsDb::Known(view) => {
            let iface = view
                .bridges
                .get(bridge)
                .and_then(|ifs| ifs.iter().find(|i| i.name == name))
                .ok_or_else(not_on)?;
            match iface.ofport {
                Some(n) if desc.get(&n) == Some(&short) => Ok(n),
                _ => Err(PortError::NoNumber {
                    port: name.into(),
                    bridge: bridge.into(),
                }),
            }
        }
        other => {
            let why = other.unavailable().unwrap_or_default();
            if name.len() > OPENFLOW_NAME_MAX {
                return Err(PortError::NeedsDatabase {
                    port: name.into(),
                    why,
                });
            }
            let mut found = desc.iter().filter(|(_, n)| **n == short).map(|(k, _)| *k);
            match (found.next(), found.next()) {
                (Some(k), None) => Ok(k),
                (None, _) => Err(not_on()),
                // A longer name cut to this one hides it: only the database can tell.
                (Some(_), Some(_)) => Err(PortError::NeedsDatabase {
                    port: name.into(),
                    why,
                }),
            }
        }
    }
}

/// The number of the port playing `role` on the bridge.
pub fn resolve_role(
    b: &BridgeConfig,
    role: Role,
    desc: &BTreeMap<u32, String>,
    db: &OvsDb,
) -> Result<u32, PortError> {
    let name = role_name(b, role, db)?;
    number(&name, &b.name, desc, db)
}

#[cfg(test)]
#[path = "ports_tests.rs"]
mod tests;
