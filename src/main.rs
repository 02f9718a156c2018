//! vipflow: keeps OpenFlow flows on br-ex and OVN Northbound rows for Kubernetes Service VIPs.
//!
//! The agent itself lands with the agent issues; for now the binary only reports its version.

fn main() {
    println!("vipflow {}", env!("CARGO_PKG_VERSION"));
}
