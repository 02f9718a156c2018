//! A member of the membership: the node it runs on and where it listens.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// One agent in the membership. Two identities with the same address are the same member at
/// two times: the one with the larger `bump` (taken from the clock at start, and raised by one
/// when the agent learns it was declared down) is the current one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Peer {
    /// The Kubernetes Node name (the agent's `node-name`).
    pub node: String,
    /// Where its membership socket listens (the node's address on the node network).
    pub addr: SocketAddr,
    pub bump: u64,
}

impl Peer {
    /// A placeholder for an address to join through: its real identity arrives with its answer
    /// and replaces this one (an empty name and the smallest bump lose every conflict).
    pub fn seed(addr: SocketAddr) -> Peer {
        Peer {
            node: String::new(),
            addr,
            bump: 0,
        }
    }
}

impl foca::Identity for Peer {
    type Addr = SocketAddr;

    fn renew(&self) -> Option<Self> {
        Some(Peer {
            bump: self.bump.wrapping_add(1),
            ..self.clone()
        })
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        self.bump > adversary.bump
    }
}
