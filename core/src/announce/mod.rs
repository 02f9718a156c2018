//! Announcing: who answers for each VIP, and how a node makes the network send the VIP's
//! traffic to it. Placement is the same whatever announces; the wire is the announcer's.
//! - [`placement`]: which node answers for each VIP (rendezvous hashing over the live nodes);
//! - [`announcements`]: the placement kept up to date by each snapshot, and the VIPs this node
//!   took or gave up (the planner turns them into answer flows);
//! - [`record`]: who announces each VIP, on its Service (the
//!   `vipflow.io/Announced` condition), written by the nodes that announce;
//! - [`Announcing`]: whether this node announces, on which bridges and by which announcer,
//!   read from the configuration in one place;
//! - [`l2`]: the L2 announcer's wire: ARP and neighbor solicitations answered in the switch,
//!   and the gratuitous ARP or unsolicited advertisement a new owner sends.

pub mod announcements;
mod announcing;
pub mod l2;
pub mod placement;
pub mod record;

pub use announcing::{AnnouncerKind, Announcing};
