//! Announcing: who answers for each VIP, and how a node makes the network send a VIP's traffic
//! to it.
//! - [`placement`]: which node answers for each VIP (rendezvous hashing over the live nodes);
//! - [`announcements`]: the placement kept up to date by each snapshot, and the VIPs this node
//!   took or gave up (the planner turns them into answer flows);
//! - [`record`]: who announces each VIP, on its Service (the
//!   `vipflow.io/Announced` condition), written by the nodes that announce;
//! - [`Announcing`]: whether this node announces, on which bridges and by which announcer,
//!   read from the configuration in one place;
//! - [`Announcer`]: the contract an announcer implements;
//! - [`l2`]: the L2 announcer and its wire: ARP and neighbor solicitations answered in the
//!   switch, and the gratuitous ARP or unsolicited advertisement a new owner sends;
//! - [`BgpAnnouncer`]: the BGP announcer, over the prefixes of [`crate::plan::bgp`].
//!
//! Placement and the wire are apart because a second announcer shares the one and not the
//! other. Which nodes may carry a VIP and which are live is the same question for every
//! announcer; an announcer says how it spreads a VIP over them ([`Spread`]: one owner that
//! moves when it dies for L2, every eligible node for BGP's ECMP) and what this node emits for
//! the VIPs it announces (L2: answer flows on each announcing bridge and a gratuitous ARP/NA on
//! takeover; BGP: host prefixes for FRR). [`L2Announcer`] and [`BgpAnnouncer`] implement
//! [`Announcer`] by delegating to the existing placement, answer flows and prefixes; the agent
//! still plans L2 through the planner and [`announcements`], and BGP plugs in at the trait.

pub mod announcements;
mod announcer;
mod announcing;
mod bgp;
pub mod l2;
pub mod placement;
pub mod record;

pub use announcer::{Announcer, Spread};
pub use announcing::{AnnouncerKind, Announcing};
pub use bgp::BgpAnnouncer;
pub use l2::{L2Announcer, L2Emits};
