//! Whether and how this node announces, read from the configuration in one place: every part
//! of the agent that acts differently on an announcing bridge or node asks this, so a second
//! announcer changes one reader, not each of them.

use crate::config::{BridgeConfig, Config};

/// An announcer a node may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AnnouncerKind {
    /// One node answers ARP/ND for each VIP from its bridges ([`super::l2`]).
    L2,
    /// Every node that may carry a VIP advertises it to its BGP peers through the node's FRR
    /// ([`super::BgpAnnouncer`]).
    Bgp,
}

/// Whether and how this node announces its VIPs, from its [`Config`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Announcing {
    /// The bridges that answer ARP/ND for the VIPs placed on this node, in config order.
    l2: Vec<String>,
    /// The node advertises over BGP: it drives an FRR (`bgp.frr-socket-dir`), or frr-k8s
    /// runs there (`bgp.frr-k8s`, `on` once a cluster-mode agent found it).
    bgp: bool,
}

impl Announcing {
    /// What `cfg` says.
    pub fn of(cfg: &Config) -> Announcing {
        Announcing {
            l2: cfg
                .bridges
                .iter()
                .filter(|b| Announcing::l2_on(b))
                .map(|b| b.name.clone())
                .collect(),
            bgp: cfg.bgp.frr_socket_dir.is_some()
                || cfg.bgp.frr_k8s == crate::config::FrrK8sMode::On,
        }
    }

    /// Whether bridge `b` answers ARP/ND for the VIPs placed on this node (and drops the
    /// requests for the others): the user's `announce`. For code that holds one bridge's
    /// configuration, not the whole.
    pub fn l2_on(b: &BridgeConfig) -> bool {
        b.announce
    }

    /// Whether this node places each VIP on one owner (the L2 announcer): it runs the
    /// membership, and its Services carry the record of who announces them. BGP places
    /// nothing (every node that may carry a VIP advertises it) and does not count here.
    pub fn any(&self) -> bool {
        !self.l2.is_empty()
    }

    /// Whether this node runs the announcer `kind`.
    pub fn uses(&self, kind: AnnouncerKind) -> bool {
        match kind {
            AnnouncerKind::L2 => !self.l2.is_empty(),
            AnnouncerKind::Bgp => self.bgp,
        }
    }

    /// Whether the bridge named `name` answers ARP/ND.
    pub fn bridge(&self, name: &str) -> bool {
        self.l2.iter().any(|b| b == name)
    }

    /// The bridges that answer ARP/ND, in config order.
    pub fn l2_bridges(&self) -> impl Iterator<Item = &str> {
        self.l2.iter().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::{AnnouncerKind, Announcing};
    use crate::config::{BridgeConfig, Config};

    fn config(bridges: &[(&str, bool)]) -> Config {
        Config {
            bridges: bridges
                .iter()
                .map(|(name, announce)| BridgeConfig {
                    name: (*name).into(),
                    announce: *announce,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_bridges_that_announce_are_the_ones_the_user_set() {
        let a = Announcing::of(&config(&[("br-ex", false), ("br-a", true), ("br-b", true)]));
        assert!(a.any());
        assert!(a.uses(AnnouncerKind::L2));
        assert!(!a.bridge("br-ex"));
        assert!(a.bridge("br-a"));
        assert!(!a.bridge("br-none"));
        assert_eq!(a.l2_bridges().collect::<Vec<_>>(), ["br-a", "br-b"]);
    }

    #[test]
    fn a_node_without_an_announcing_bridge_announces_nothing() {
        for cfg in [config(&[]), config(&[("br-ex", false)])] {
            let a = Announcing::of(&cfg);
            assert!(!a.any());
            assert!(!a.uses(AnnouncerKind::L2));
            assert!(!a.uses(AnnouncerKind::Bgp));
            assert_eq!(a.l2_bridges().count(), 0);
        }
    }

    #[test]
    fn a_node_with_an_frr_advertises_over_bgp_whatever_its_bridges_do() {
        let mut cfg = config(&[("br-ex", false)]);
        cfg.bgp.frr_socket_dir = Some("/var/run/frr".into());
        let a = Announcing::of(&cfg);
        assert!(a.uses(AnnouncerKind::Bgp));
        assert!(!a.uses(AnnouncerKind::L2));
        // BGP places nothing: no membership, no record of who answers.
        assert!(!a.any());
    }
}
