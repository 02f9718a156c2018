//! The node's OVS database (`Open_vSwitch`), read for port names and roles
//! ([`vipflow_core::reconcile::bridge::ports`]): a monitor of the few columns needed, turned into an [`OvsView`]
//! on every change. Read-only: vipflow never writes here.

use crate::keys::{OVN_BRIDGE_KEY, OVN_BRIDGE_MAPPINGS_KEY, OVN_LOCALNET_PORT_KEY, OVN_REMOTE_KEY};
use ovsdb::{Atom, Cache, Client, ClientOptions, MonitorSpec, Row, Uuid, Value};
use retry::{Backoff, Policy, SharedBackoff};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use vipflow_core::reconcile::bridge::ports::{OvsDb, OvsIface, OvsView};

pub const DB: &str = "Open_vSwitch";

/// How long a first connection is tried before the database counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The watcher's reconnect waits ([`retry`]'s rule), its client's own reconnects included.
const BACKOFF: Policy = Policy::new(Duration::from_millis(200), Duration::from_secs(5));

/// The columns the port roles depend on.
pub fn monitor_spec() -> MonitorSpec {
    MonitorSpec::new()
        .columns("Open_vSwitch", &["external_ids"])
        .columns("Bridge", &["name", "ports"])
        .columns("Port", &["name", "interfaces", "external_ids"])
        .columns("Interface", &["name", "type", "ofport", "external_ids"])
}

fn str_of(row: &Row, col: &str) -> String {
    row.get(col)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_default()
}

fn map_get(row: &Row, col: &str, key: &str) -> Option<String> {
    row.get(col)?
        .as_map()?
        .get(&Atom::string(key))?
        .as_str()
        .map(str::to_owned)
}

fn uuids(row: &Row, col: &str) -> Vec<Uuid> {
    row.get(col)
        .map(|v| v.to_set().iter().filter_map(Atom::as_uuid).collect())
        .unwrap_or_default()
}

/// OVS writes -1 for an interface it could not add; real numbers are 1..=0xfeff.
fn ofport_of(row: &Row) -> Option<u32> {
    let v = row.get("ofport")?.to_set();
    let n = v.iter().find_map(Atom::as_integer)?;
    u32::try_from(n).ok().filter(|n| (1..=0xfeff).contains(n))
}

/// The view of the monitored tables. Rows that reference missing rows are skipped, not
/// fatal: the cache follows the server, which keeps references whole.
pub fn view(cache: &Cache) -> OvsView {
    let empty = BTreeMap::new();
    let table = |t: &str| cache.table(t).unwrap_or(&empty);
    let (ovs, bridges, ports, ifaces) = (
        table("Open_vSwitch"),
        table("Bridge"),
        table("Port"),
        table("Interface"),
    );
    let root = ovs.values().next();
    let bridge_mappings = root.and_then(|r| map_get(r, "external_ids", OVN_BRIDGE_MAPPINGS_KEY));
    let integration_bridge = root
        .filter(|r| map_get(r, "external_ids", OVN_REMOTE_KEY).is_some())
        .map(|r| map_get(r, "external_ids", OVN_BRIDGE_KEY).unwrap_or_else(|| "br-int".into()));
    let mut out = OvsView {
        bridge_mappings,
        integration_bridge,
        bridges: BTreeMap::new(),
    };
    for br in bridges.values() {
        let mut list = Vec::new();
        for p in uuids(br, "ports").iter().filter_map(|u| ports.get(u)) {
            let port_localnet = map_get(p, "external_ids", OVN_LOCALNET_PORT_KEY);
            for i in uuids(p, "interfaces").iter().filter_map(|u| ifaces.get(u)) {
                list.push(OvsIface {
                    port: str_of(p, "name"),
                    name: str_of(i, "name"),
                    kind: str_of(i, "type"),
                    ofport: ofport_of(i),
                    localnet: port_localnet
                        .clone()
                        .or_else(|| map_get(i, "external_ids", OVN_LOCALNET_PORT_KEY)),
                });
            }
        }
        list.sort_by(|a, b| a.name.cmp(&b.name));
        out.bridges.insert(str_of(br, "name"), list);
    }
    out
}

/// A client of the database at `remote` and its monitor; the client's dials go by `backoff`
/// (`None`: its own).
async fn subscribe(
    remote: &str,
    backoff: Option<&SharedBackoff>,
) -> Result<(Client, ovsdb::Monitor), ovsdb::Error> {
    let mut o = ClientOptions::new(remote, DB)?;
    // A node's local, standalone database: no cluster leader to look for.
    o.leader_only = false;
    o.wait_timeout = CONNECT_TIMEOUT;
    o.backoff_min = BACKOFF.min;
    o.backoff_max = BACKOFF.max;
    o.shared_backoff = backoff.cloned();
    let client = Client::connect(o).await?;
    let monitor = client.monitor(monitor_spec()).await?;
    Ok((client, monitor))
}

/// Read the database once (`vipflow agent --once`, `vipflow verify`).
pub async fn read(remote: &str) -> OvsDb {
    match subscribe(remote, None).await {
        Ok((_client, monitor)) => OvsDb::Known(Arc::new(view(&monitor.cache()))),
        Err(e) => {
            tracing::warn!(remote, error = %e, "OVS database unreachable: ports are looked up by name in OpenFlow PORT_DESC only (names of at most 15 bytes; no default uplink/patch)");
            OvsDb::Unreachable {
                remote: remote.into(),
                reason: e.to_string(),
            }
        }
    }
}

/// A task that stops when this is dropped (with the reconciler that owns it).
pub struct Watcher(tokio::task::JoinHandle<()>);

impl Drop for Watcher {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Follow the database: `None` until the first answer, then the current view, or why it is
/// unreachable. Every dial, the client's reconnects included, goes by one backoff
/// (`BACKOFF`): a client that failed is dropped (which counts its session) and the next
/// connect waits out the backoff before it dials.
pub fn watch(remote: String) -> (watch::Receiver<Option<OvsDb>>, Watcher) {
    let (tx, rx) = watch::channel(None);
    let task = tokio::spawn(async move {
        let backoff = SharedBackoff::new(Backoff::new(BACKOFF));
        let mut warned = false;
        loop {
            match subscribe(&remote, Some(&backoff)).await {
                Ok((_client, mut monitor)) => {
                    tracing::info!(remote = %remote, "OVS database connected");
                    warned = false;
                    loop {
                        let v = OvsDb::Known(Arc::new(view(&monitor.cache())));
                        tx.send_if_modified(|cur| {
                            let changed = cur.as_ref() != Some(&v);
                            *cur = Some(v);
                            changed
                        });
                        // The client resumes the monitor across reconnects; `None` means it
                        // is gone for good.
                        if monitor.next_event().await.is_none() {
                            break;
                        }
                        while monitor.try_event().is_some() {}
                    }
                }
                Err(e) => {
                    if !warned {
                        tracing::warn!(remote = %remote, error = %e, "OVS database unreachable: ports are looked up by name in OpenFlow PORT_DESC only (names of at most 15 bytes; no default uplink/patch); retrying");
                        warned = true;
                    }
                    let _ = tx.send(Some(OvsDb::Unreachable {
                        remote: remote.clone(),
                        reason: e.to_string(),
                    }));
                }
            }
            if tx.is_closed() {
                return;
            }
        }
    });
    (rx, Watcher(task))
}

/// How long a starting reconciler waits for the OVS database's first answer before it goes
/// on without it.
const DB_FIRST_ANSWER: Duration = Duration::from_secs(5);

/// The OVS database as the reconciler follows it.
pub(crate) struct DbFeed {
    rx: watch::Receiver<Option<OvsDb>>,
    _watcher: Option<Watcher>,
}

impl DbFeed {
    pub(crate) fn new(remote: Option<String>) -> DbFeed {
        match remote {
            Some(r) => {
                let (rx, w) = watch(r);
                DbFeed {
                    rx,
                    _watcher: Some(w),
                }
            }
            // A fixed value whose sender is gone: `changed` never fires.
            None => DbFeed {
                rx: watch::channel(Some(OvsDb::NotUsed)).1,
                _watcher: None,
            },
        }
    }

    /// The database's first answer (view or unreachable), waited for a bounded time.
    pub(crate) async fn first(&mut self) {
        let _ = tokio::time::timeout(DB_FIRST_ANSWER, self.rx.wait_for(Option::is_some)).await;
    }

    pub(crate) fn current(&mut self) -> OvsDb {
        self.rx
            .borrow_and_update()
            .clone()
            .unwrap_or(OvsDb::Unreachable {
                remote: "the OVS database".into(),
                reason: format!("no answer within {} s", DB_FIRST_ANSWER.as_secs()),
            })
    }

    pub(crate) async fn changed(&mut self) {
        if self.rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The view of a cache filled the way a monitor's initial reply does it.
    #[test]
    fn view_joins_bridges_ports_and_interfaces() {
        let schema_text = std::fs::read_to_string("/usr/share/openvswitch/vswitch.ovsschema").ok();
        let Some(schema_text) = schema_text else {
            // The OVS schema comes with openvswitch-common (scripts/install-deps.sh).
            eprintln!("vswitch.ovsschema not installed; skipped");
            return;
        };
        let schema: serde_json::Value = serde_json::from_str(&schema_text).unwrap();
        let schema = Arc::new(ovsdb::DatabaseSchema::from_json(&schema).unwrap());
        let u = |n: u8| format!("00000000-0000-0000-0000-0000000000{n:02}");
        let initial = json!({
            "Open_vSwitch": {u(1): {"initial": {"external_ids": ["map", [["ovn-bridge-mappings", "physnet:br-ex"]]]}}},
            "Bridge": {u(2): {"initial": {"name": "br-ex", "ports": ["set", [["uuid", u(3)], ["uuid", u(4)]]]}}},
            "Port": {
                u(3): {"initial": {"name": "patch-br-ex_node-a-to-br-int", "interfaces": ["uuid", u(5)],
                        "external_ids": ["map", [["ovn-localnet-port", "br-ex_node-a"]]]}},
                u(4): {"initial": {"name": "eth0", "interfaces": ["uuid", u(6)]}},
            },
            "Interface": {
                u(5): {"initial": {"name": "patch-br-ex_node-a-to-br-int", "type": "patch", "ofport": 2}},
                u(6): {"initial": {"name": "eth0", "ofport": -1}},
            },
        });
        let mut cache = Cache::new(schema.clone(), monitor_spec());
        let updates = ovsdb::monitor::parse_table_updates2(&initial, &schema).unwrap();
        cache.replace(updates, false).unwrap();
        let v = view(&cache);
        assert_eq!(v.bridge_mappings.as_deref(), Some("physnet:br-ex"));
        let br = &v.bridges["br-ex"];
        assert_eq!(br.len(), 2);
        assert_eq!(br[0].name, "eth0");
        assert_eq!((br[0].kind.as_str(), br[0].ofport), ("", None));
        assert_eq!(br[0].localnet, None);
        assert_eq!(br[1].kind, "patch");
        assert_eq!(br[1].ofport, Some(2));
        assert_eq!(br[1].localnet.as_deref(), Some("br-ex_node-a"));
    }
}
