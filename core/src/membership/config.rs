//! The membership's settings as the config file and the flags give them.

use super::member_set::MembershipSettings;
use super::watch::WatchSettings;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// `membership:` in the config file. The membership runs when a bridge announces and a key
/// file is given; without it, VIPs are placed by the Nodes' Ready condition alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct MembershipConfig {
    /// The shared secret (a mounted Secret's file; at least 16 bytes) every datagram is
    /// authenticated with.
    pub key_file: Option<PathBuf>,
    /// UDP port of the membership on every node.
    pub port: u16,
    /// The address other nodes reach this one at [default: this node's InternalIP].
    pub address: Option<IpAddr>,
    /// How often each member probes one other.
    pub probe_period_ms: u64,
    /// How long a direct probe may take before three other members are asked to try.
    pub probe_rtt_ms: u64,
    /// How long a suspected member has to refute it before it is declared down.
    pub suspect_ms: u64,
    /// How often an owner sends each successor of its VIPs a heartbeat.
    pub heartbeat_ms: u64,
    /// How long a successor hears no heartbeat before it asks others to reach the owner.
    pub heartbeat_miss_ms: u64,
}

impl Default for MembershipConfig {
    fn default() -> Self {
        let s = MembershipSettings::default();
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        MembershipConfig {
            key_file: None,
            port: s.port,
            address: None,
            probe_period_ms: ms(s.probe_period),
            probe_rtt_ms: ms(s.probe_rtt),
            suspect_ms: ms(s.suspect_to_down_after),
            heartbeat_ms: ms(s.watch.heartbeat_every),
            heartbeat_miss_ms: ms(s.watch.miss_after),
        }
    }
}

impl MembershipConfig {
    /// The core's settings for these.
    pub fn settings(&self) -> MembershipSettings {
        MembershipSettings {
            port: self.port,
            probe_period: Duration::from_millis(self.probe_period_ms),
            probe_rtt: Duration::from_millis(self.probe_rtt_ms),
            suspect_to_down_after: Duration::from_millis(self.suspect_ms),
            watch: WatchSettings {
                heartbeat_every: Duration::from_millis(self.heartbeat_ms),
                miss_after: Duration::from_millis(self.heartbeat_miss_ms),
                ..WatchSettings::default()
            },
            ..MembershipSettings::default()
        }
    }
}
