//! L2 announcement (issue 14): one node answers ARP for each VIP from its own bridge, and the
//! answer moves when that node goes.
//! - [`placement`]: which node answers for each VIP (rendezvous hashing over the live nodes);
//! - [`announcements`]: the placement kept up to date by each snapshot, and the VIPs this node
//!   took or gave up (the planner turns them into answer flows);
//! - [`arp_answer`]: the actions that answer ARP in the switch, and the gratuitous ARP a new
//!   owner sends.

pub mod announcements;
pub mod arp_answer;
pub mod placement;
