//! The flags over the config file. Each setting is merged here, once: a flag given replaces
//! the file's value, a flag left out keeps it.

use super::args::{BridgeFlags, ClusterFlags, Global, NorthboundFlags};
use vipflow::config::{BridgeConfig, Config};

/// `*dst = v` when the flag was given; whether it was.
fn set<T: Clone>(dst: &mut T, flag: &Option<T>) -> bool {
    match flag {
        Some(v) => {
            *dst = v.clone();
            true
        }
        None => false,
    }
}

/// [`set`] for a setting that is itself optional.
fn set_some<T: Clone>(dst: &mut Option<T>, flag: &Option<T>) -> bool {
    if flag.is_some() {
        dst.clone_from(flag);
    }
    flag.is_some()
}

/// The config: the file (if any), then the flags over it, validated.
pub fn build_config(g: &Global) -> Result<Config, String> {
    let mut cfg = match &g.config {
        Some(p) => Config::load(p).map_err(|e| e.to_string())?,
        None => Config::default(),
    };
    set_some(&mut cfg.objects, &g.objects);
    set(&mut cfg.node_name, &g.node_name);
    set(&mut cfg.ovs_rundir, &g.ovs_rundir);
    set_some(&mut cfg.ovs_db, &g.ovs_db);
    set(&mut cfg.cookie_prefix, &g.cookie_prefix);
    set_some(&mut cfg.load_balancer_class, &g.load_balancer_class);
    cfg.allocate_ips |= g.allocate_ips;
    set(&mut cfg.log_format, &g.log_format);
    set(&mut cfg.openflow_timeout_ms, &g.openflow_timeout_ms);
    set(&mut cfg.flow_audit_ms, &g.flow_audit_ms);
    set(&mut cfg.nb_timeout_ms, &g.nb_timeout_ms);
    set(&mut cfg.objects_max_bytes, &g.objects_max_bytes);
    g.northbound.merge(&mut cfg);
    g.cluster.merge(&mut cfg);
    if let Some(name) = &g.bridge.bridge {
        let b = cfg
            .bridges
            .iter()
            .find(|b| &b.name == name)
            .cloned()
            .unwrap_or_else(|| BridgeConfig {
                name: name.clone(),
                ..BridgeConfig::default()
            });
        cfg.bridges = vec![b];
    }
    // Whether any per-bridge flag was given: merged into a scratch bridge first.
    if g.bridge.merge(&mut BridgeConfig::default()) {
        if cfg.bridges.len() != 1 {
            return Err(format!(
                "{} bridges are configured: choose one with --bridge to apply per-bridge flags",
                cfg.bridges.len()
            ));
        }
        g.bridge.merge(&mut cfg.bridges[0]);
    }
    cfg.validate().map_err(|e| e.to_string())?;
    Ok(cfg)
}

impl NorthboundFlags {
    fn merge(&self, cfg: &mut Config) {
        set_some(&mut cfg.nb_remote, &self.nb_remote);
        let nb = &mut cfg.northbound;
        set_some(&mut nb.lb_group, &self.lb_group);
        if !self.nb_switches.is_empty() {
            nb.switches.clone_from(&self.nb_switches);
        }
        if !self.nb_routers.is_empty() {
            nb.routers.clone_from(&self.nb_routers);
        }
        set_some(&mut nb.node_router, &self.node_router);
        set_some(&mut nb.node_switch, &self.node_switch);
        nb.prefer_local |= self.prefer_local;
        if let Some(m) = self.node_rows {
            nb.node_rows = m;
        }
        set_some(&mut nb.hairpin_snat_ip, &self.hairpin_snat_ip);
        nb.kube_ovn |= self.kube_ovn;
        if self.no_exclude_ips {
            nb.exclude_ips = false;
        }
    }
}

impl ClusterFlags {
    fn merge(&self, cfg: &mut Config) {
        set_some(&mut cfg.http_addr, &self.http_addr);
        set_some(&mut cfg.membership.key_file, &self.membership_key_file);
        set(&mut cfg.membership.port, &self.membership_port);
        set_some(&mut cfg.membership.address, &self.membership_address);
        set_some(&mut cfg.bgp.frr_socket_dir, &self.frr_socket_dir);
        set(&mut cfg.bgp.vtysh, &self.vtysh);
        set(&mut cfg.bgp.frr_k8s, &self.frr_k8s);
        set(&mut cfg.bgp.frr_k8s_namespace, &self.frr_k8s_namespace);
        if self.no_leader_election {
            cfg.lease.enabled = false;
        }
        set_some(&mut cfg.lease.namespace, &self.lease_namespace);
        set(&mut cfg.lease.name, &self.lease_name);
        set(&mut cfg.lease.duration_seconds, &self.lease_duration);
    }
}

impl BridgeFlags {
    /// Merge the per-bridge flags into `b`; whether any was given.
    fn merge(&self, b: &mut BridgeConfig) -> bool {
        let given = [
            set_some(&mut b.target, &self.target),
            set(&mut b.profile, &self.profile),
            set_some(&mut b.uplink, &self.uplink),
            set_some(&mut b.patch, &self.patch),
            set(&mut b.gateway_mode, &self.gateway_mode),
            set_some(&mut b.vlan, &self.vlan),
            set(&mut b.table, &self.table),
            set(&mut b.priority, &self.priority),
            set_some(&mut b.bridge_mac, &self.bridge_mac),
            set_some(&mut b.router_mac, &self.router_mac),
            set(&mut b.announce, &self.announce.then_some(true)),
        ];
        given.contains(&true)
    }
}
