//! Agent configuration: a YAML/JSON file (`--config`) with every setting, each overridable by a
//! command-line flag. Unknown keys are an error, so a typo never silently falls back to a
//! default.

use openflow::oxm::MacAddr;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// vipflow's default cookie prefix: the top 16 bits of every flow it owns.
pub const DEFAULT_COOKIE_PREFIX: u16 = 0x7f1f;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("read config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parse config {path}: {detail}")]
    Parse { path: PathBuf, detail: String },
    #[error("invalid config: {0}")]
    Invalid(String),
}

/// Where traffic for a VIP goes after it reaches the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum GatewayMode {
    /// OVN shared gateway: VIP traffic from the uplink is steered into OVN through the patch
    /// port and its replies sent back out of the uplink.
    #[default]
    Shared,
    /// Local gateway: VIP traffic goes through the host stack; only the ARP/ND bypass is needed.
    Local,
}

/// What kind of bridge this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// The node's external bridge (br-ex) in front of the OVN gateway router.
    #[default]
    Gateway,
    /// An underlay provider bridge (br-provider): VIP traffic from the NIC is rewritten to the
    /// router's MAC and sent to the patch port.
    Underlay,
}

/// One bridge vipflow programs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct BridgeConfig {
    /// Bridge name (also the default management socket `<ovs-rundir>/<name>.mgmt`).
    pub name: String,
    /// OpenFlow target: `unix:PATH` or `tcp:HOST:PORT`. Default: the bridge's mgmt socket.
    pub target: Option<String>,
    pub profile: Profile,
    /// The physical uplink port (ARP/ND requests and VIP traffic arrive here), by its full OVS
    /// name. `None`: the bridge's one port that is neither internal nor a patch port, found in
    /// the OVS database.
    pub uplink: Option<String>,
    /// The patch port towards OVN (br-int), by its full OVS name. `None`: the localnet patch
    /// port ovn-controller created on the bridge, found in the OVS database.
    pub patch: Option<String>,
    pub gateway_mode: GatewayMode,
    /// 802.1Q VLAN of the uplink, when tagged: bypass flows match it and pop the tag.
    pub vlan: Option<u16>,
    /// OpenFlow table for vipflow's flows.
    pub table: u8,
    /// Priority of vipflow's flows; the return-path flows use the same priority.
    pub priority: u16,
    /// The bridge's MAC, matched as dl_src on the return path. Default: learned from the
    /// bridge's LOCAL port.
    #[serde(with = "opt_mac")]
    pub bridge_mac: Option<MacAddr>,
    /// Underlay profile: the OVN router port's MAC that VIP traffic is rewritten to.
    #[serde(with = "opt_mac")]
    pub router_mac: Option<MacAddr>,
    /// Announce the VIPs on this bridge's uplink: for each IPv4 VIP one live node (the same
    /// choice on every node, from the Nodes that are Ready) answers ARP requests from the
    /// switch with the bridge's MAC, and sends gratuitous ARP when it takes the VIP; every
    /// other node drops the requests. Off: requests go to the host (someone else announces).
    pub announce: bool,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        BridgeConfig {
            name: "br-ex".into(),
            target: None,
            profile: Profile::Gateway,
            uplink: None,
            patch: None,
            gateway_mode: GatewayMode::Shared,
            vlan: None,
            table: 0,
            priority: 500,
            bridge_mac: None,
            router_mac: None,
            announce: false,
        }
    }
}

impl BridgeConfig {
    /// The OpenFlow target: explicit, or `unix:<ovs_rundir>/<name>.mgmt`.
    pub fn target(&self, ovs_rundir: &Path) -> String {
        self.target.clone().unwrap_or_else(|| {
            format!(
                "unix:{}",
                ovs_rundir.join(format!("{}.mgmt", self.name)).display()
            )
        })
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.name.is_empty() {
            return Err(ConfigError::Invalid("bridge name is empty".into()));
        }
        if [&self.uplink, &self.patch]
            .into_iter()
            .any(|p| p.as_ref().is_some_and(|p| p.is_empty()))
        {
            return Err(ConfigError::Invalid(format!(
                "bridge {}: an uplink or patch port name is empty (leave it out to find the port in the OVS database)",
                self.name
            )));
        }
        if crate::announce::Announcing::l2_on(self) && self.priority == u16::MAX {
            return Err(ConfigError::Invalid(format!(
                "bridge {}: announce answers ARP one priority above the flows' priority, so the priority must be below 65535",
                self.name
            )));
        }
        if let Some(v) = self.vlan
            && !(1..=4094).contains(&v)
        {
            return Err(ConfigError::Invalid(format!(
                "bridge {}: vlan {v} is not in 1..4094",
                self.name
            )));
        }
        if self.table >= 0xfe {
            return Err(ConfigError::Invalid(format!(
                "bridge {}: table {} is reserved",
                self.name, self.table
            )));
        }
        if self.profile == Profile::Underlay && self.router_mac.is_none() {
            return Err(ConfigError::Invalid(format!(
                "bridge {}: the underlay profile needs router-mac",
                self.name
            )));
        }
        Ok(())
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// The whole agent configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Config {
    /// This node's name (Kubernetes Node); VIPs are checked against its addresses.
    pub node_name: String,
    /// Directory of the OVS management sockets.
    pub ovs_rundir: PathBuf,
    /// The node's OVS database (`unix:PATH` or `tcp:HOST:PORT`), where port names are resolved
    /// and default ports found. Default: `unix:<ovs-rundir>/db.sock`.
    pub ovs_db: Option<String>,
    pub bridges: Vec<BridgeConfig>,
    /// Top 16 bits of every cookie vipflow writes; flows are owned and found by it.
    #[serde(with = "hex_u16")]
    pub cookie_prefix: u16,
    /// Only Services with this `spec.loadBalancerClass` (and, for externalIPs, any Service).
    pub load_balancer_class: Option<String>,
    /// Allocate LoadBalancer addresses from `VipPool`s (cluster mode; the elected agent
    /// writes them into the Services' status).
    pub allocate_ips: bool,
    /// Kubernetes objects file (the file source).
    pub objects: Option<PathBuf>,
    pub log_format: LogFormat,
    /// OVN Northbound database (`unix:PATH`, `tcp:a:6641,tcp:b:6641`): when set, vipflow also
    /// keeps the Services' Load_Balancer rows there.
    pub nb_remote: Option<String>,
    /// How Load_Balancer rows are shaped and attached.
    pub northbound: crate::plan::northbound::NorthboundConfig,
    /// Address of the HTTP endpoint (`/metrics`, `/healthz`, `/readyz`, `/status`), e.g.
    /// `0.0.0.0:9475`; none when unset.
    pub http_addr: Option<String>,
    /// Leader election of the Northbound writer (Kubernetes source only).
    pub lease: LeaseConfig,
    /// Who is alive among the nodes that announce (see `bridges[].announce`).
    pub membership: crate::membership::config::MembershipConfig,
    /// The node's BGP speaker, when VIPs are advertised over BGP.
    pub bgp: BgpConfig,
    /// Give up on an OpenFlow request (a bundle commit, a BARRIER, a flow dump) after this
    /// many milliseconds without a reply: WARN, drop the connection and resync on a new one.
    pub openflow_timeout_ms: u64,
    /// Read vipflow's flows back (by cookie) this often, in milliseconds, and repair any that
    /// someone else deleted or changed; 0: never. Where the switch keeps a flow monitor (Open
    /// vSwitch 3.0 and later) changes are heard and put back as they happen, and the read-back
    /// is only a safety net run at most every 30 s. Stretched to 20 times the last read's
    /// cost, so a big flow table never keeps the switch busy more than 5% of the time.
    pub flow_audit_ms: u64,
    /// Give up on a Northbound request (transaction, monitor, writer-token read) after this
    /// many milliseconds without a reply: WARN, drop the session and connect again.
    pub nb_timeout_ms: u64,
    /// Largest objects file read, in bytes: a larger one is refused (and not read again until
    /// it changes), keeping the last good objects.
    pub objects_max_bytes: u64,
}

/// The node's FRR, through which this node advertises VIPs over BGP.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct BgpConfig {
    /// Directory of the node's FRR vty sockets (`vtysh --vty_socket`, e.g. `/var/run/frr`):
    /// when set, this node advertises the VIPs of the pools a `BGPAdvertisement` selects
    /// through that FRR, configured from the `BGPPeer` and `BFDProfile` objects. Unset: no BGP.
    pub frr_socket_dir: Option<PathBuf>,
    /// The `vtysh` program that gives it its configuration (the prefixes go over bgpd's own
    /// vty socket in `frr_socket_dir`; vtysh is the fallback).
    pub vtysh: PathBuf,
    /// Advertise through frr-k8s (`FRRConfiguration` objects) rather than driving FRR: `auto`
    /// where frr-k8s runs on the node (its `FRRNodeState` for the node exists), `on`, `off`.
    /// Cluster mode only.
    pub frr_k8s: FrrK8sMode,
    /// The namespace frr-k8s reads its `FRRConfiguration`s from.
    pub frr_k8s_namespace: String,
}

/// Whether this node advertises through frr-k8s ([`BgpConfig::frr_k8s`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum FrrK8sMode {
    /// Where frr-k8s runs on the node; a cluster-mode agent decides at start.
    #[default]
    Auto,
    On,
    Off,
}

/// Default [`BgpConfig::frr_k8s_namespace`]: frr-k8s's own manifests' namespace.
pub const DEFAULT_FRR_K8S_NAMESPACE: &str = "frr-k8s-system";

impl Default for BgpConfig {
    fn default() -> Self {
        BgpConfig {
            frr_socket_dir: None,
            vtysh: PathBuf::from("vtysh"),
            frr_k8s: FrrK8sMode::Auto,
            frr_k8s_namespace: DEFAULT_FRR_K8S_NAMESPACE.into(),
        }
    }
}

/// Default [`Config::nb_timeout_ms`].
pub const DEFAULT_NB_TIMEOUT_MS: u64 = 10_000;

/// Default [`Config::openflow_timeout_ms`].
pub const DEFAULT_OPENFLOW_TIMEOUT_MS: u64 = 10_000;
/// Default [`Config::flow_audit_ms`].
pub const DEFAULT_FLOW_AUDIT_MS: u64 = 500;

/// Where and how the Northbound writer is elected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct LeaseConfig {
    /// Elect one writer (on by default); off: every agent with nb-remote writes.
    pub enabled: bool,
    /// Namespace of the Lease (default: the pod's namespace, POD_NAMESPACE).
    pub namespace: Option<String>,
    pub name: String,
    /// The Lease that elects the one agent doing the cluster-wide work no Northbound writer
    /// needs: the shared frr-k8s objects, the Events on MetalLB's objects. Its own, so that an
    /// agent without a Northbound database never holds the writer's Lease.
    pub cluster_name: String,
    /// Seconds after which a crashed writer is replaced.
    pub duration_seconds: u64,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig {
            enabled: true,
            namespace: None,
            name: "vipflow-northbound".into(),
            cluster_name: "vipflow-cluster".into(),
            duration_seconds: 4,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            node_name: String::new(),
            ovs_rundir: PathBuf::from("/var/run/openvswitch"),
            ovs_db: None,
            bridges: vec![BridgeConfig::default()],
            cookie_prefix: DEFAULT_COOKIE_PREFIX,
            load_balancer_class: None,
            allocate_ips: false,
            objects: None,
            log_format: LogFormat::Text,
            nb_remote: None,
            northbound: Default::default(),
            http_addr: None,
            lease: LeaseConfig::default(),
            membership: Default::default(),
            bgp: BgpConfig::default(),
            openflow_timeout_ms: DEFAULT_OPENFLOW_TIMEOUT_MS,
            flow_audit_ms: DEFAULT_FLOW_AUDIT_MS,
            nb_timeout_ms: DEFAULT_NB_TIMEOUT_MS,
            objects_max_bytes: crate::decode::DEFAULT_MAX_BYTES,
        }
    }
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        let cfg: Config = serde_yaml_ng::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.into(),
            detail: e.to_string(),
        })?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.membership.key_file.is_some() {
            self.membership
                .settings()
                .check()
                .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        }
        if self.bridges.is_empty() {
            return Err(ConfigError::Invalid("no bridges configured".into()));
        }
        let mut names = std::collections::BTreeSet::new();
        for b in &self.bridges {
            b.validate()?;
            if !names.insert(&b.name) {
                return Err(ConfigError::Invalid(format!(
                    "bridge {} is configured twice",
                    b.name
                )));
            }
        }
        Ok(())
    }

    /// The OVS database remote: explicit, or `unix:<ovs_rundir>/db.sock`.
    pub fn ovs_db(&self) -> String {
        self.ovs_db
            .clone()
            .unwrap_or_else(|| format!("unix:{}", self.ovs_rundir.join("db.sock").display()))
    }

    /// For a command that writes Northbound rows: with `nb-remote`, cluster rows must be
    /// attached somewhere, or the VIP traffic steered into OVN meets no load balancer.
    pub fn validate_nb_writer(&self) -> Result<(), ConfigError> {
        if self.nb_remote.is_some() && !self.northbound.attaches_cluster_rows() {
            return Err(ConfigError::Invalid(
                "nb-remote is set but Load_Balancer rows would be attached to no router or switch, \
                 so VIP traffic would find no load balancer: set node-router (e.g. 'GR_{node}', \
                 the gateway router VIP traffic is steered into) and node-switch (e.g. '{node}'), \
                 or lb-group (a group attached to them), nb-router or nb-switch"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Cookie mask selecting vipflow's flows.
    pub fn cookie_mask(&self) -> u64 {
        0xffff << 48
    }

    /// The cookie prefix in place (top 16 bits).
    pub fn cookie_base(&self) -> u64 {
        u64::from(self.cookie_prefix) << 48
    }
}

/// Parse `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Result<MacAddr, String> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return Err(format!("{s:?} is not a MAC address (aa:bb:cc:dd:ee:ff)"));
    }
    let mut mac = [0u8; 6];
    for (m, p) in mac.iter_mut().zip(parts) {
        *m = u8::from_str_radix(p, 16).map_err(|_| format!("{s:?} is not a MAC address"))?;
    }
    Ok(mac)
}

pub fn format_mac(m: &MacAddr) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

mod opt_mac {
    use super::{format_mac, parse_mac};
    use openflow::oxm::MacAddr;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<MacAddr>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(m) => s.serialize_str(&format_mac(m)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<MacAddr>, D::Error> {
        let v: Option<String> = Option::deserialize(d)?;
        v.map(|s| parse_mac(&s).map_err(serde::de::Error::custom))
            .transpose()
    }
}

mod hex_u16 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &u16, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{v:#06x}"))
    }

    /// Accepts a number or a string such as "0x7f1f".
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum N {
            Num(u16),
            Str(String),
        }
        match N::deserialize(d)? {
            N::Num(n) => Ok(n),
            N::Str(s) => super::parse_u16(&s).map_err(serde::de::Error::custom),
        }
    }
}

/// Parse a decimal or 0x-prefixed hexadecimal u16.
pub fn parse_u16(s: &str) -> Result<u16, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u16::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("{s:?} is not a 16-bit number"))
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
