//! L2 announcement (issue 14): one node answers ARP/ND for each VIP from its own br-ex, and the
//! answer moves when that node dies. This module holds the pieces built so far:
//! [`placement`], which node answers for each VIP, and [`arp_answer`], the flow with which it
//! answers ARP in the switch.

pub mod arp_answer;
pub mod placement;
