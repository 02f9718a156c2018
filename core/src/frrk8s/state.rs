//! What frr-k8s says of a node, in the terms of the direct mode's status: its BGP and BFD
//! sessions (`BGPSessionState`s labelled with the node) and whether it could merge and load
//! the configurations (`FRRNodeState`).

use super::objects::{BgpSessionState, FrrNodeState};
use crate::bgp::frr_state::{BfdSession, BgpSession};
use std::net::IpAddr;

/// frr-k8s's word for a step that went well.
const SUCCESS: &str = "success";
/// frr-k8s's BFD status of a session without BFD.
const NO_BFD: &str = "N/A";

/// The peer a `BGPSessionState` names: an IPv4 address as is, an IPv6 address expanded with
/// `-` for `:` (a label value cannot hold `:`).
pub fn peer_of(label: &str) -> Option<IpAddr> {
    label
        .parse()
        .ok()
        .or_else(|| label.replace('-', ":").parse().ok())
}

/// The sessions of `states` (one per peer; its family is the peer's own).
pub fn sessions(states: &[BgpSessionState]) -> (Vec<BgpSession>, Vec<BfdSession>) {
    let mut bgp = Vec::new();
    let mut bfd = Vec::new();
    for s in states {
        let Some(peer) = s.status.peer.as_deref().and_then(peer_of) else {
            continue;
        };
        bgp.push(BgpSession {
            peer,
            family: if peer.is_ipv4() {
                "ipv4Unicast"
            } else {
                "ipv6Unicast"
            }
            .into(),
            remote_as: None,
            state: s.status.bgp_status.clone().unwrap_or_default(),
            prefixes_sent: None,
            prefixes_received: None,
        });
        if let Some(b) = s.status.bfd_status.as_deref().filter(|b| *b != NO_BFD) {
            bfd.push(BfdSession {
                peer,
                status: b.to_ascii_lowercase(),
                receive_ms: None,
                transmit_ms: None,
                multiplier: None,
            });
        }
    }
    bgp.sort_by_key(|s| s.peer);
    bfd.sort_by_key(|s| s.peer);
    (bgp, bfd)
}

/// What went wrong in frr-k8s on the node, as its `FRRNodeState` says; `None` when both
/// steps went well (or it has not said yet).
pub fn node_error(state: &FrrNodeState) -> Option<String> {
    fn bad(r: &Option<String>) -> Option<&str> {
        r.as_deref().filter(|r| !r.is_empty() && *r != SUCCESS)
    }
    if let Some(r) = bad(&state.status.last_conversion_result) {
        return Some(format!("frr-k8s cannot merge the FRRConfigurations: {r}"));
    }
    bad(&state.status.last_reload_result)
        .map(|r| format!("frr-k8s's FRR refused the merged configuration: {r}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frrk8s::objects::{BgpSessionStateStatus, FrrNodeStateStatus};

    fn state(peer: &str, bgp: &str, bfd: &str) -> BgpSessionState {
        BgpSessionState {
            metadata: Default::default(),
            status: BgpSessionStateStatus {
                bgp_status: Some(bgp.into()),
                bfd_status: Some(bfd.into()),
                node: Some("n1".into()),
                peer: Some(peer.into()),
            },
        }
    }

    #[test]
    fn sessions_read_as_the_direct_modes() {
        let (bgp, bfd) = sessions(&[
            state("2001-0db8-0000-0000-0000-0000-0000-0001", "Active", "N/A"),
            state("10.9.0.1", "Established", "Up"),
            state("eth0", "Established", "N/A"),
        ]);
        let peers: Vec<String> = bgp.iter().map(|s| s.peer.to_string()).collect();
        assert_eq!(
            peers,
            ["10.9.0.1", "2001:db8::1"],
            "an interface peer is left out"
        );
        assert!(bgp[0].established() && !bgp[1].established());
        assert_eq!(bgp[1].family, "ipv6Unicast");
        assert_eq!(bfd.len(), 1);
        assert!(bfd[0].up(), "{bfd:?}");
    }

    #[test]
    fn a_failed_merge_or_reload_is_an_error_and_success_none() {
        let with = |c: &str, r: &str| FrrNodeState {
            metadata: Default::default(),
            status: FrrNodeStateStatus {
                last_conversion_result: Some(c.into()),
                last_reload_result: Some(r.into()),
            },
        };
        assert_eq!(node_error(&with("success", "success")), None);
        assert_eq!(node_error(&FrrNodeState::default()), None);
        let e = node_error(&with(
            "failed: multiple asns specified for 10.9.0.1",
            "success",
        ));
        assert!(e.is_some_and(|e| e.contains("multiple asns")));
        assert!(node_error(&with("success", "failed: exit status 1")).is_some());
    }
}
