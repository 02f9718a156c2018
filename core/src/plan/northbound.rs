//! The desired OVN Northbound `Load_Balancer` rows: a pure function of the model and config.
//!
//! - Cluster scope: one row per (Service, protocol) with every VIP:port of the Service as a
//!   `vips` key and the ready endpoints as its value, attached to the cluster targets: the
//!   Load_Balancer_Group ([`NorthboundConfig::cluster_group`]), `switches` and `routers`.
//! - `externalTrafficPolicy: Local`, as OVN-Kubernetes does it: only the gateway routers are
//!   node-local. One row per (Service, protocol, node) on that node's router with only that
//!   node's endpoints; none -> an empty backend list, which with `reject=true` resets
//!   connections instead of black-holing them; `skip_snat=true` keeps the client's address.
//!   Pods reach the VIP through their node's switch, where node-locality means nothing: one
//!   row per (Service, protocol) of scope `switches` with all endpoints, attached to the
//!   configured switches and every node's switch, never to a router or the group (a group is
//!   usually on the routers too, and two rows with one VIP on a router are ambiguous).
//! - prefer-local (config flag, or the `vipflow.io/prefer-local: "true"` annotation): one row
//!   per (Service, protocol, node) with the node's endpoints when it has any, else all of them,
//!   on the node's router and switch (both see traffic of that node only, from outside or from
//!   its pods). Without node templates there is nowhere to put such rows: a cluster row then.
//!   In the Kube-OVN dialect the patched OVN does this itself: one cluster row with
//!   `options:prefer_local_backend=true` and `ip_port_mappings` (backend IP -> its Pod's
//!   logical switch port, as Kube-OVN names it).
//! - Where cluster rows land: VIP traffic is steered into each node's gateway router, so with
//!   node templates and no `lb_group` of the user's, cluster rows join vipflow's own group
//!   ([`OWN_GROUP`], see [`own_group`]), which the writer creates and attaches to every node's
//!   router and switch through their `load_balancer_group` column. One group, not every row on
//!   every router: the attachments stay one per node instead of one per (Service, node), and
//!   northd handles a group's rows once for all its routers (why OVN-Kubernetes uses groups).
//! - Endpoints: ready ones; when none is ready, the serving ones (terminating included), as
//!   kube-proxy does. Only addresses of the VIP's family are used.
//! - Rows carry `external_ids` `vipflow.io/owner=<ns>/<name>` and `vipflow.io/scope=cluster`,
//!   `switches` or `node/<node>`: that is how the reconciler finds its rows (names are not
//!   unique in the schema) and never touches anyone else's. `vipflow.io/managed=true` marks
//!   them all at once.

use super::node_template;
use super::northbound_config::template;
pub use super::northbound_config::{
    GroupPlan, NorthboundConfig, OWN_GROUP, OWN_ROUTERS_GROUP, OWN_SWITCHES_GROUP, own_group,
    own_groups,
};
use super::str_map::StrMap;
use crate::keys::{MANAGED_KEY, OWNER_KEY, SCOPE_KEY};
use crate::model::{
    EndpointSlice, Model, Protocol, Service, ServiceKey, Text, TrafficPolicy, VipPort,
};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    Cluster,
    /// `externalTrafficPolicy: Local`'s row for pod traffic: all endpoints, on switches only.
    Switches,
    Node(String),
    /// `externalTrafficPolicy: Local`'s one row for every node's gateway router, its backends
    /// a variable each chassis expands to its own endpoints ([`super::node_template`]).
    Template,
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Cluster => f.write_str("cluster"),
            Scope::Switches => f.write_str("switches"),
            Scope::Node(n) => write!(f, "node/{n}"),
            Scope::Template => f.write_str("template"),
        }
    }
}

impl Scope {
    /// The `vipflow.io/scope` value back to a scope; `None`: not one vipflow writes.
    pub fn parse(s: &str) -> Option<Scope> {
        match s {
            "cluster" => Some(Scope::Cluster),
            "switches" => Some(Scope::Switches),
            "template" => Some(Scope::Template),
            s => Some(Scope::Node(s.strip_prefix("node/")?.to_owned())),
        }
    }
}

/// What identifies one of our rows.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LbKey {
    pub owner: ServiceKey,
    pub protocol: Protocol,
    pub scope: Scope,
}

/// Where a row is attached.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Attach {
    pub group: Option<String>,
    pub switches: BTreeSet<String>,
    pub routers: BTreeSet<String>,
}

impl Attach {
    /// Attached to nothing: its VIPs are served nowhere.
    pub fn is_nowhere(&self) -> bool {
        self.group.is_none() && self.switches.is_empty() && self.routers.is_empty()
    }
}

/// One desired `Load_Balancer` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbRow {
    pub key: LbKey,
    pub name: String,
    pub vips: StrMap,
    pub options: StrMap,
    pub external_ids: StrMap,
    pub ip_port_mappings: StrMap,
    pub attach: Attach,
    /// A template row's variables: each node's value of each (not a column of this row:
    /// the writer keeps them in `Chassis_Template_Var`).
    pub template_vars: Vec<TemplateVar>,
}

/// One template variable's value on one chassis.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TemplateVar {
    pub chassis: String,
    pub name: String,
    pub value: String,
}

impl fmt::Display for LbRow {
    /// A compact, ovn-nbctl-like rendering: name, protocol, scope, each VIP and its backends,
    /// options and attachment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} ({}, {})",
            self.name, self.key.protocol, self.key.scope
        )?;
        for (vip, backends) in self.vips.iter() {
            let b = if backends.is_empty() {
                "(no backends: reject)"
            } else {
                backends
            };
            writeln!(f, "    {vip:<24} {b}")?;
        }
        let opts: Vec<String> = self
            .options
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        write!(f, "    options: {}", opts.join(" "))?;
        if !self.ip_port_mappings.is_empty() {
            let m: Vec<String> = self
                .ip_port_mappings
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            write!(f, "\n    ip_port_mappings: {}", m.join(" "))?;
        }
        // A template row's values, per chassis (no value: that node rejects the VIP's traffic).
        for v in &self.template_vars {
            write!(f, "\n    ^{} on chassis {}: {}", v.name, v.chassis, v.value)?;
        }
        let a = &self.attach;
        let mut on = Vec::new();
        if let Some(g) = &a.group {
            on.push(format!("group {g}"));
        }
        on.extend(a.routers.iter().map(|r| format!("router {r}")));
        on.extend(a.switches.iter().map(|s| format!("switch {s}")));
        if !on.is_empty() {
            write!(f, "\n    attached to: {}", on.join(", "))?;
        }
        Ok(())
    }
}

/// The problem when some of a Service's rows are attached to nothing: their VIPs are served
/// nowhere, while their traffic may well be steered into OVN.
pub fn unattached(owner: &ServiceKey, rows: &[LbRow]) -> Option<String> {
    let nowhere: Vec<&LbRow> = rows.iter().filter(|r| r.attach.is_nowhere()).collect();
    let first = nowhere.first()?;
    // Node rows attached nowhere are ETP=Local's without a node router (prefer-local ones
    // exist only with a node template, and go to the node's switch too).
    let fix = match first.key.scope {
        Scope::Node(_) => {
            "externalTrafficPolicy: Local rows go to each node's gateway router: set node-router (e.g. 'GR_{node}')"
        }
        _ => {
            "set node-router and node-switch (e.g. 'GR_{node}', '{node}'), lb-group, nb-router or nb-switch"
        }
    };
    Some(format!(
        "Service {owner}: {} Load_Balancer row(s) attached to no switch, router or group, so VIP traffic finds no load balancer (first: {}); {fix}",
        nowhere.len(),
        first.name
    ))
}

/// `VIP:port`, brackets around IPv6 (the `vips` key syntax).
pub fn socket(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

/// One backend address with the node it runs on and the Pod behind it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Backend {
    ip: IpAddr,
    port: u16,
    node: Option<Text>,
    pod: Option<Text>,
}

/// The backends of one VIP:port: ready endpoints, else serving ones (terminating included).
fn backends(slices: &[EndpointSlice], vp: &VipPort) -> Vec<Backend> {
    let mut ready = BTreeSet::new();
    let mut serving = BTreeSet::new();
    for s in slices {
        // The slice port that serves this Service port: same name (both unnamed for a
        // single-port Service) and protocol. Its number is the resolved targetPort.
        let Some(port) = s
            .ports
            .iter()
            .find(|p| {
                p.protocol == vp.protocol
                    && p.name.as_deref().unwrap_or("") == vp.port_name.as_deref().unwrap_or("")
            })
            .map(|p| p.port)
        else {
            continue;
        };
        for e in &s.endpoints {
            for &ip in e
                .addresses
                .iter()
                .filter(|a| a.is_ipv4() == vp.vip.is_ipv4())
            {
                let b = Backend {
                    ip,
                    port,
                    node: e.node.clone(),
                    pod: e.pod.clone(),
                };
                if e.ready {
                    ready.insert(b.clone());
                }
                if e.serving {
                    serving.insert(b);
                }
            }
        }
    }
    if ready.is_empty() {
        serving.into_iter().collect()
    } else {
        ready.into_iter().collect()
    }
}

/// A backend's `ip_port_mappings` entry as Kube-OVN's controller writes it for prefer-local:
/// the backend's address (an IPv6 one in brackets) to `<logical switch port>:<check IP>`.
/// Kube-OVN's northd picks each node's own backends by the chassis their port is bound to; the
/// port of a Pod on Kube-OVN's default network is `<pod>.<namespace>`, and the check IP is
/// Kube-OVN's masquerade address, used by nothing without a health check.
fn kube_ovn_port_mapping(ip: IpAddr, pod: &str, namespace: &str) -> (String, String) {
    let key = match ip {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("[{a}]"),
    };
    (key, format!("{pod}.{namespace}:0.0.0.0"))
}

fn join(bs: &[Backend]) -> String {
    bs.iter()
        .map(|b| socket(b.ip, b.port))
        .collect::<Vec<_>>()
        .join(",")
}

fn row_name(key: &LbKey) -> String {
    match &key.scope {
        Scope::Cluster => format!(
            "vipflow/{}/{}/{}",
            key.owner.namespace, key.owner.name, key.protocol
        ),
        Scope::Node(n) => format!(
            "vipflow/{}/{}/{}/{n}",
            key.owner.namespace, key.owner.name, key.protocol
        ),
        // Names are informational (identity is in external_ids); a node named "switches"
        // would share this one's name, never its identity.
        Scope::Switches => format!(
            "vipflow/{}/{}/{}/switches",
            key.owner.namespace, key.owner.name, key.protocol
        ),
        Scope::Template => format!(
            "vipflow/{}/{}/{}/template",
            key.owner.namespace, key.owner.name, key.protocol
        ),
    }
}

/// The desired rows, sorted by key.
pub fn plan(model: &Model, cfg: &NorthboundConfig) -> Vec<LbRow> {
    let no_slices = Vec::new();
    let nodes: BTreeSet<String> = model.nodes.keys().cloned().collect();
    let chassis: BTreeMap<String, String> = model
        .nodes
        .values()
        .filter_map(|n| Some((n.name.clone(), n.chassis.clone()?)))
        .filter(|(n, c)| n != c)
        .collect();
    let mut rows = Vec::new();
    for svc in model.services.values() {
        let slices = model.endpoint_slices.get(&svc.key).unwrap_or(&no_slices);
        rows.extend(service_rows(svc, slices, &nodes, &chassis, cfg));
    }
    rows.sort_by(|a, b| a.key.cmp(&b.key));
    rows
}

/// The rows of one Service: `svc.vip_ports` are the VIP:ports it won, `nodes` every node's
/// name (for node-scoped rows). Sorted by key.
pub fn service_rows(
    svc: &Service,
    slices: &[EndpointSlice],
    nodes: &BTreeSet<String>,
    chassis: &BTreeMap<String, String>,
    cfg: &NorthboundConfig,
) -> Vec<LbRow> {
    let protocols: BTreeSet<Protocol> = svc.vip_ports.iter().map(|v| v.protocol).collect();
    let mut rows = Vec::new();
    for proto in protocols {
        let ports: Vec<&VipPort> = svc
            .vip_ports
            .iter()
            .filter(|v| v.protocol == proto)
            .collect();
        rows.extend(rows_for(svc, proto, &ports, slices, nodes, chassis, cfg));
    }
    rows.sort_by(|a, b| a.key.cmp(&b.key));
    // Kept for as long as the Service is unchanged, usually one row: without this, the
    // vector's first growth leaves room for four.
    rows.shrink_to_fit();
    rows
}

fn rows_for(
    svc: &Service,
    protocol: Protocol,
    ports: &[&VipPort],
    slices: &[EndpointSlice],
    nodes: &BTreeSet<String>,
    chassis: &BTreeMap<String, String>,
    cfg: &NorthboundConfig,
) -> Vec<LbRow> {
    let per_port: Vec<(&VipPort, Vec<Backend>)> =
        ports.iter().map(|vp| (*vp, backends(slices, vp))).collect();
    let local = svc.traffic_policy == TrafficPolicy::Local;
    let prefer_local = !local && (cfg.prefer_local || svc.prefer_local);
    let mk_some = |scope: Scope,
                   attach: Attach,
                   pick: &dyn Fn(&[Backend]) -> Vec<Backend>,
                   keep: &dyn Fn(&VipPort) -> bool| {
        // Only rows holding nothing but the node's own endpoints may keep the client's
        // address: the reply comes back through the same node.
        let node_local = local && matches!(scope, Scope::Node(_) | Scope::Template);
        let key = LbKey {
            owner: svc.key.clone(),
            protocol,
            scope,
        };
        let mut vips = BTreeMap::new();
        let mut mappings = BTreeMap::new();
        for (vp, bs) in per_port.iter().filter(|(vp, _)| keep(vp)) {
            let chosen = pick(bs);
            vips.insert(socket(vp.vip, vp.port), join(&chosen));
            if cfg.kube_ovn && prefer_local {
                for b in &chosen {
                    if let Some(pod) = &b.pod {
                        let (ip, port) = kube_ovn_port_mapping(b.ip, pod, &svc.key.namespace);
                        mappings.insert(ip, port);
                    }
                }
            }
        }
        let mut options = BTreeMap::from([("reject".to_string(), "true".to_string())]);
        // OVN must not answer ARP/ND for these VIPs on routers: the host does (see the flows).
        let on_routers = !attach.routers.is_empty()
            || attach
                .group
                .as_deref()
                .is_some_and(|g| g != OWN_SWITCHES_GROUP);
        if on_routers {
            options.insert("neighbor_responder".into(), "none".into());
        }
        if node_local {
            options.insert("skip_snat".into(), "true".into());
        }
        if let Some(ip) = &cfg.hairpin_snat_ip {
            options.insert("hairpin_snat_ip".into(), ip.clone());
        }
        if cfg.kube_ovn && prefer_local {
            options.insert("prefer_local_backend".into(), "true".into());
        }
        let external_ids = StrMap::from([
            (MANAGED_KEY, "true".to_string()),
            (OWNER_KEY, key.owner.to_string()),
            (SCOPE_KEY, key.scope.to_string()),
        ]);
        LbRow {
            name: row_name(&key),
            key,
            vips: StrMap::from(&vips),
            options: StrMap::from(&options),
            external_ids,
            ip_port_mappings: mappings.into_iter().collect(),
            attach,
            template_vars: Vec::new(),
        }
    };
    let mk = |scope: Scope, attach: Attach, pick: &dyn Fn(&[Backend]) -> Vec<Backend>| {
        mk_some(scope, attach, pick, &|_| true)
    };
    let all = |bs: &[Backend]| bs.to_vec();

    if local {
        // Gateway routers: the node's endpoints only, in a row per node or in one template
        // row (for the VIPs a template can hold). Switches (pod traffic): all of them.
        let templated = cfg.node_rows.templates();
        let per_node = |vp: &VipPort| !(templated && node_template::templatable(vp.vip));
        let mut rows: Vec<LbRow> = Vec::new();
        if per_port.iter().any(|(vp, _)| per_node(vp)) {
            rows.extend(nodes.iter().map(|node| {
                let attach = Attach {
                    routers: template(&cfg.node_router, node).into_iter().collect(),
                    ..Attach::default()
                };
                mk_some(
                    Scope::Node(node.clone()),
                    attach,
                    &|bs| on_node(bs, node),
                    &per_node,
                )
            }));
        }
        if templated && per_port.iter().any(|(vp, _)| !per_node(vp)) {
            // Every node's router, through vipflow's routers group: one attachment.
            let attach = Attach {
                group: cfg
                    .node_router
                    .as_ref()
                    .map(|_| OWN_ROUTERS_GROUP.to_string()),
                ..Attach::default()
            };
            // The backends are the variables below: none are joined into the row.
            let mut row = mk_some(Scope::Template, attach, &|_| Vec::new(), &|vp| {
                !per_node(vp)
            });
            let mut names = Vec::new();
            let mut vars = Vec::new();
            for (vp, bs) in per_port.iter().filter(|(vp, _)| !per_node(vp)) {
                let var = node_template::backends_var(&svc.key, vp.vip, vp.port, protocol);
                // Only where the node has endpoints: elsewhere the variable stays unset, and the
                // row's refusal key rejects the VIP's connections there (see node_template).
                let on: BTreeSet<&str> = bs.iter().filter_map(|b| b.node.as_deref()).collect();
                for node in on.into_iter().filter(|n| nodes.contains(*n)) {
                    vars.push(TemplateVar {
                        chassis: chassis.get(node).map_or(node, String::as_str).to_string(),
                        name: var.clone(),
                        value: join(&on_node(bs, node)),
                    });
                }
                names.push((vp.vip, socket(vp.vip, vp.port), var));
            }
            vars.sort();
            node_template::make_template(&mut row, vars, names);
            rows.push(row);
        }
        // Every node's switch through vipflow's switches group; configured switches directly.
        let group = cfg
            .node_switch
            .as_ref()
            .map(|_| OWN_SWITCHES_GROUP.to_string());
        let switches: BTreeSet<String> = cfg.switches.iter().cloned().collect();
        if group.is_some() || !switches.is_empty() {
            let attach = Attach {
                group,
                switches,
                ..Attach::default()
            };
            rows.push(mk(Scope::Switches, attach, &all));
        }
        return rows;
    }
    // prefer-local per node, unless Kube-OVN's OVN does it or there are no node targets.
    if prefer_local && !cfg.kube_ovn && cfg.has_node_templates() {
        return nodes
            .iter()
            .map(|node| {
                let attach = Attach {
                    group: None,
                    switches: template(&cfg.node_switch, node).into_iter().collect(),
                    routers: template(&cfg.node_router, node).into_iter().collect(),
                };
                mk(Scope::Node(node.clone()), attach, &|bs| {
                    let mine = on_node(bs, node);
                    if mine.is_empty() { bs.to_vec() } else { mine }
                })
            })
            .collect();
    }
    let attach = Attach {
        group: cfg.cluster_group().map(str::to_owned),
        switches: cfg.switches.iter().cloned().collect(),
        routers: cfg.routers.iter().cloned().collect(),
    };
    vec![mk(Scope::Cluster, attach, &all)]
}

/// The backends on `node`.
fn on_node(bs: &[Backend], node: &str) -> Vec<Backend> {
    bs.iter()
        .filter(|b| b.node.as_deref() == Some(node))
        .cloned()
        .collect()
}

#[cfg(test)]
#[path = "northbound_tests/mod.rs"]
mod tests;
