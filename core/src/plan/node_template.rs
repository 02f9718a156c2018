//! Template load balancers for node-scoped rows (`northbound.node-rows: template`).
//!
//! externalTrafficPolicy Local needs, on each node's gateway router, a load balancer holding
//! only that node's endpoints. Written as one row per Service per node, 2,000 nodes and 2,000
//! Local Services make 4 million rows, and one endpoint change rewrites a row per node. OVN
//! (22.12+) can instead take one *template* row per Service (`options:template=true`) whose
//! backends name a variable, `^vf_…`, that each chassis expands from its own
//! `Chassis_Template_Var` row: the row count is O(Services + nodes), a variable is set only on
//! the nodes with endpoints (O(endpoints) values), and an endpoint change rewrites the
//! variable on the nodes whose local endpoints changed, nothing else.
//!
//! A node without local endpoints has no value: `ovn-controller` there cannot expand the
//! backends and installs no balancing for the VIP:port. The router would then route the
//! packet on, by its connected or default route, to whoever holds the VIP on the LAN, where
//! it is served after all (the client's connection goes around the node it was sent to). So
//! the template row also holds each of its VIPs without a port and without backends (`"VIP"
//! = ""`, [`refusal_key`]): with `reject=true` OVN makes that a reject at a priority below the
//! VIP:port's balancing (110 against 120 in the router's DNAT stage), so where the variable
//! expands the node balances, and where it does not (no value, or `""`) the node refuses the
//! connection (a TCP reset, an ICMP port unreachable for UDP), as per-node rows with no
//! backends do. The key is plain text, no variable: every chassis has it.
//!
//! What templates cannot express falls back to per-node rows, per VIP:port:
//! - IPv6 VIPs: OVN parses a template row's VIP key by splitting at `:`, so an IPv6 literal
//!   cannot be a template VIP (it would need a variable per VIP on every chassis, which is
//!   the O(Services × nodes) this avoids).
//!
//! The variables of a Service are planned with its rows ([`LbRow::template_vars`]), so a
//! changed endpoint marks its Service changed and the writer updates just those variables.

use super::northbound::{LbRow, TemplateVar};
use crate::model::{Protocol, ServiceKey};
use std::net::IpAddr;

/// How node-scoped rows are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum NodeRows {
    /// One row per Service per node.
    PerNode,
    /// One template row per Service, its backends in a variable per chassis.
    Template,
    /// Template rows where the Northbound database has `Chassis_Template_Var` (OVN 22.12 and
    /// later), per-node rows where it has not: decided from its schema when the agent starts.
    #[default]
    Auto,
}

impl NodeRows {
    /// Whether rows are planned as templates. `Auto` not yet made definite ([`NodeRows::Auto`]
    /// is decided where the database is read) plans per-node rows, which every OVN takes.
    pub fn templates(self) -> bool {
        self == NodeRows::Template
    }
}

/// The prefix of every template variable vipflow owns: the writer reads and writes only
/// these keys of a chassis's `variables`, which other writers (OVN-Kubernetes' NodePort
/// templates) share.
pub const VAR_PREFIX: &str = "vf_";

/// The variable that holds, on each chassis, the local backends of `owner`'s
/// `vip:port/protocol` (`ip:port,ip:port`, empty where the node has none). A name OVN's lexer
/// takes as one identifier: the prefix and 16 hex digits of a hash of the four.
pub fn backends_var(owner: &ServiceKey, vip: IpAddr, port: u16, protocol: Protocol) -> String {
    let text = format!("{owner} {vip} {port} {protocol}");
    let h = blake3::hash(text.as_bytes());
    let mut name = String::with_capacity(VAR_PREFIX.len() + 16);
    name.push_str(VAR_PREFIX);
    for b in &h.as_bytes()[..8] {
        name.push_str(&format!("{b:02x}"));
    }
    name
}

/// Whether a VIP can be a template row's VIP ([`NodeRows::Template`] falls back to per-node
/// rows for the others).
pub fn templatable(vip: IpAddr) -> bool {
    vip.is_ipv4()
}

/// The `vips` key that refuses new connections to `vip` on every port and protocol its
/// VIP:port keys do not balance: the address alone (a key without a port), its value empty.
pub fn refusal_key(vip: IpAddr) -> String {
    vip.to_string()
}

/// Turn `row` (built with every backend as its VIPs' values) into the template row: each VIP's
/// backends become its variable, each VIP gets its refusal ([`refusal_key`]), and `vars` gets
/// each node's value of the variables.
pub(super) fn make_template(
    row: &mut LbRow,
    vars: Vec<TemplateVar>,
    names: impl IntoIterator<Item = (IpAddr, String, String)>,
) {
    let mut vips: Vec<(String, String)> = Vec::new();
    for (vip, key, var) in names {
        vips.push((key, format!("^{var}")));
        vips.push((refusal_key(vip), String::new()));
    }
    row.vips = vips.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    row.options = row
        .options
        .iter()
        .chain([("template", "true"), ("address-family", "ipv4")])
        .collect();
    row.template_vars = vars;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_variable_name_is_one_identifier_and_differs_per_vip_port_and_protocol() {
        let web = ServiceKey::new("shop", "web");
        let vip: IpAddr = "192.0.2.10".parse().unwrap();
        let a = backends_var(&web, vip, 80, Protocol::Tcp);
        assert!(
            a.starts_with(VAR_PREFIX) && a.len() == VAR_PREFIX.len() + 16,
            "{a}"
        );
        assert!(
            a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{a}"
        );
        assert_eq!(a, backends_var(&web, vip, 80, Protocol::Tcp));
        let others = [
            backends_var(&web, vip, 443, Protocol::Tcp),
            backends_var(&web, vip, 80, Protocol::Udp),
            backends_var(&web, "192.0.2.11".parse().unwrap(), 80, Protocol::Tcp),
            backends_var(&ServiceKey::new("shop", "api"), vip, 80, Protocol::Tcp),
        ];
        assert!(others.iter().all(|o| *o != a));
    }
}
