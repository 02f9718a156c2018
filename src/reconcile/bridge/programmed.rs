//! Whether OVN has programmed a VIP on the node's integration bridge: a node answers and
//! announces a VIP only once it can carry it.

use super::BridgeSettings;
use openflow::{Connection, Match};

/// Whether OVN has programmed a VIP on the node's integration bridge, read from that bridge
/// over OpenFlow: ovn-controller installs a VIP's load balancer as flows that match the VIP as
/// destination (its gateway router's DNAT stage), all of a full install in one go after the
/// switch restarted. The OVS database tells nothing here: ovn-controller's `ovn-nb-cfg` and
/// `ovn-installed` marks are written when the Northbound configuration or a port binding
/// changes, and stay as they were across a restart of ovs-vswitchd. Only a node the database
/// names an OVN chassis (`external_ids:ovn-remote`) waits; its integration bridge is
/// `external_ids:ovn-bridge` (`br-int`), reached beside the bridge vipflow writes.
pub struct BrIntFlows {
    /// The directory of the bridge's `unix:` socket; `None` over TCP (no local integration
    /// bridge known).
    rundir: Option<std::path::PathBuf>,
    config: openflow::Config,
    /// The integration bridge's target and a session with it.
    conn: Option<(String, Connection)>,
    /// Said once that there is no integration bridge to read.
    told: bool,
}

impl BrIntFlows {
    pub fn new(s: &BridgeSettings) -> BrIntFlows {
        let rundir = s
            .target
            .strip_prefix("unix:")
            .and_then(|path| Some(std::path::Path::new(path).parent()?.to_path_buf()));
        BrIntFlows {
            rundir,
            config: s.openflow.clone(),
            conn: None,
            told: false,
        }
    }

    /// Those of `vips` that OVN has programmed on `bridge` (the integration bridge; `None`:
    /// this node is no OVN chassis, nothing to wait for).
    pub async fn ready(
        &mut self,
        bridge: Option<&str>,
        vips: &[std::net::IpAddr],
    ) -> Vec<std::net::IpAddr> {
        let (Some(bridge), Some(dir)) = (bridge, &self.rundir) else {
            return vips.to_vec();
        };
        let target = format!("unix:{}", dir.join(format!("{bridge}.mgmt")).display());
        if self.conn.as_ref().is_none_or(|(t, _)| *t != target) {
            self.conn = None;
            match Connection::connect(&target, self.config.clone()).await {
                Ok((c, _events)) => {
                    self.conn = Some((target.clone(), c));
                    self.told = false;
                }
                Err(e) => {
                    // Not up yet (the switch is starting): the answers wait, at most
                    // PROGRAMMED_WAIT.
                    if !self.told {
                        tracing::warn!(target = %target, error = %e, "the integration bridge cannot be read yet; answers wait for it");
                        self.told = true;
                    }
                    return Vec::new();
                }
            }
        }
        let Some((_, conn)) = &self.conn else {
            return vips.to_vec();
        };
        let mut ready = Vec::new();
        for v in vips {
            let m = match v {
                std::net::IpAddr::V4(a) => Match::new()
                    .with(openflow::oxm::OxmField::eth_type(
                        openflow::oxm::eth_type::IPV4,
                    ))
                    .with(openflow::oxm::OxmField::ipv4_dst(*a)),
                std::net::IpAddr::V6(a) => Match::new()
                    .with(openflow::oxm::OxmField::eth_type(
                        openflow::oxm::eth_type::IPV6,
                    ))
                    .with(openflow::oxm::OxmField::ipv6_dst(*a)),
            };
            let req = openflow::multipart::FlowStatsRequest {
                match_: m,
                ..Default::default()
            };
            match conn.flow_stats(req).await {
                Ok(f) if !f.is_empty() => ready.push(*v),
                Ok(_) => {}
                Err(e) => {
                    // Read again on a new connection next time (the switch restarted).
                    tracing::debug!(error = %e, "integration bridge not read");
                    self.conn = None;
                    return ready;
                }
            }
        }
        ready
    }
}
