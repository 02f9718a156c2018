//! Who is alive among the nodes that announce VIPs ([`crate::announce`]): a SWIM membership
//! (the `foca` crate) over UDP on the node network, every datagram authenticated with a key
//! shared through a Secret.
//!
//! - [`peer`]: a member's identity (node name, address, and a bump that lets a restarted agent
//!   take over its own address);
//! - [`seal`]: the authentication of each datagram (a keyed BLAKE3 tag over a timestamp and
//!   the payload; stale or forged datagrams are dropped before foca sees them);
//! - [`member_set`]: the sans-IO core: foca with an accumulating runtime, fed datagrams and
//!   timers with the current time, handing back datagrams to send, timers to set and the live
//!   node set;
//! - [`watch`]: the successors' watch of the owners (heartbeats every tens of ms, a silence
//!   confirmed through other members before the owner is declared down);
//! - [`claims`]: the owners' claims to their VIPs, which the nodes send each other beside the
//!   membership's own datagrams ([`crate::announce::placement::Claim`]);
//! - [`heard`]: the sans-IO bookkeeping of those claims: the best claim per VIP, and which
//!   newly seen members have not been heard out yet;
//! - the tokio shell (the UDP socket and the timers) is the agent crate's `membership_task`.

pub mod claims;
pub mod config;
pub mod heard;
pub mod member_set;
pub mod peer;
pub mod seal;
// The simulated network: for the tests and the large-cluster benchmark, not for the agent.
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod watch;

pub use member_set::{MemberSet, MembershipError, MembershipSettings, Outputs};
pub use peer::Peer;
pub use seal::{Key, KeyError};

/// After leaving, how long a node keeps answering while the others take its VIPs over (and
/// how long a node marked for drain holds its VIPs).
pub const HANDOVER: std::time::Duration = std::time::Duration::from_secs(1);
