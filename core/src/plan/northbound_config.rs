//! What the configuration says about vipflow's Load_Balancer rows: where they are attached,
//! the options they carry, and the Load_Balancer_Groups vipflow owns for them.

use super::node_template::NodeRows;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The Load_Balancer_Group vipflow owns when cluster rows must reach every node's router and
/// switch and no group is configured. Known by this name: the schema gives groups no
/// `external_ids`, and keeps names unique.
pub const OWN_GROUP: &str = "vipflow-cluster";
/// The Load_Balancer_Group vipflow owns for template rows: on every node's gateway router
/// (not on switches: pod traffic must reach every endpoint), so that a Service's template row
/// joins one group instead of being attached to each router.
pub const OWN_ROUTERS_GROUP: &str = "vipflow-node-routers";
/// The Load_Balancer_Group vipflow owns for externalTrafficPolicy Local's switch rows (every
/// endpoint, for pod traffic): on every node's switch, so that such a row joins one group
/// instead of being attached to each switch (at 2,000 nodes and 2,000 Local Services, direct
/// attachments made each switch hold 2,000 references and the monitor's snapshot outgrew
/// 64 MiB).
pub const OWN_SWITCHES_GROUP: &str = "vipflow-node-switches";

/// How rows are attached and which options they carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct NorthboundConfig {
    /// Load_Balancer_Group that cluster-scope rows join; none: vipflow's own when a node
    /// template is set ([`NorthboundConfig::cluster_group`]).
    pub lb_group: Option<String>,
    /// Logical switches cluster-scope rows and ETP=Local's switch rows attach to.
    pub switches: Vec<String>,
    /// Logical routers cluster-scope rows attach to.
    pub routers: Vec<String>,
    /// Gateway router of a node, `{node}` replaced (e.g. `GR_{node}`): ETP=Local and
    /// prefer-local node rows, and vipflow's own group.
    pub node_router: Option<String>,
    /// Switch of a node, `{node}` replaced (e.g. `{node}`): prefer-local node rows, ETP=Local's
    /// switch rows, and vipflow's own group.
    pub node_switch: Option<String>,
    /// prefer-local for every Service (otherwise per Service by annotation).
    pub prefer_local: bool,
    /// `options:hairpin_snat_ip` for every row.
    pub hairpin_snat_ip: Option<String>,
    /// Kube-OVN's dialect: prefer-local via `prefer_local_backend` + `ip_port_mappings`.
    pub kube_ovn: bool,
    /// Keep VIPs out of the IPAM (`other_config:exclude_ips`) of logical switches whose
    /// subnet holds them.
    pub exclude_ips: bool,
    /// How ETP=Local's gateway router rows are written: one per node, or one template row.
    pub node_rows: NodeRows,
}

impl Default for NorthboundConfig {
    fn default() -> Self {
        NorthboundConfig {
            lb_group: None,
            switches: Vec::new(),
            routers: Vec::new(),
            node_router: None,
            node_switch: None,
            prefer_local: false,
            hairpin_snat_ip: None,
            kube_ovn: false,
            // A VIP handed to a pod breaks both: on by default.
            exclude_ips: true,
            node_rows: NodeRows::Auto,
        }
    }
}

impl NorthboundConfig {
    /// A node template is set: each node's router or switch gets rows.
    pub fn has_node_templates(&self) -> bool {
        self.node_router.is_some() || self.node_switch.is_some()
    }

    /// The group cluster rows join: the configured one, else vipflow's own when node
    /// templates say where VIP traffic lands.
    pub fn cluster_group(&self) -> Option<&str> {
        match &self.lb_group {
            Some(g) => Some(g),
            None => self.has_node_templates().then_some(OWN_GROUP),
        }
    }

    /// Cluster rows are attached somewhere (a group, a switch or a router).
    pub fn attaches_cluster_rows(&self) -> bool {
        self.cluster_group().is_some() || !self.switches.is_empty() || !self.routers.is_empty()
    }
}

/// vipflow's own Load_Balancer_Group and where it must be attached: every node's router and
/// switch (from the templates).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupPlan {
    pub name: String,
    pub routers: BTreeSet<String>,
    pub switches: BTreeSet<String>,
}

/// vipflow's own groups: the cluster rows' ([`own_group`]), the node switches'
/// ([`OWN_SWITCHES_GROUP`]) and, with template rows, the node routers' ([`OWN_ROUTERS_GROUP`]).
pub fn own_groups(cfg: &NorthboundConfig, nodes: &BTreeSet<String>) -> Vec<GroupPlan> {
    let mut groups: Vec<GroupPlan> = own_group(cfg, nodes).into_iter().collect();
    if cfg.node_switch.is_some() {
        groups.push(GroupPlan {
            name: OWN_SWITCHES_GROUP.to_string(),
            routers: BTreeSet::new(),
            switches: every_node(&cfg.node_switch, nodes),
        });
    }
    if cfg.node_rows.templates() && cfg.node_router.is_some() {
        groups.push(GroupPlan {
            name: OWN_ROUTERS_GROUP.to_string(),
            routers: every_node(&cfg.node_router, nodes),
            switches: BTreeSet::new(),
        });
    }
    groups
}

/// vipflow's own group, when cluster rows use it ([`NorthboundConfig::cluster_group`]).
pub fn own_group(cfg: &NorthboundConfig, nodes: &BTreeSet<String>) -> Option<GroupPlan> {
    if cfg.lb_group.is_some() || !cfg.has_node_templates() {
        return None;
    }
    Some(GroupPlan {
        name: OWN_GROUP.to_string(),
        routers: every_node(&cfg.node_router, nodes),
        switches: every_node(&cfg.node_switch, nodes),
    })
}

/// Node template `t` (`GR_{node}`) for `node`; `None` without a template.
pub(super) fn template(t: &Option<String>, node: &str) -> Option<String> {
    t.as_ref().map(|t| t.replace("{node}", node))
}

/// Template `t` for every node (none without a template).
fn every_node(t: &Option<String>, nodes: &BTreeSet<String>) -> BTreeSet<String> {
    nodes.iter().filter_map(|n| template(t, n)).collect()
}
