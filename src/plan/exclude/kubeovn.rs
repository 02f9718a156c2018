//! The Kube-OVN check: VIPs inside a Subnet's cidrBlock that its excludeIps does not cover.

use super::*;
use ipnet::IpNet;
use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;
use thiserror::Error;

// ---------------------------------------------------------------------------------------------
// The Kube-OVN check

/// The parts of a Kube-OVN `Subnet` (kubeovn.io/v1) this check reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeOvnSubnetIpam {
    pub name: String,
    /// `spec.cidrBlock`: "v4cidr", "v6cidr" or "v4cidr,v6cidr".
    pub cidr_block: String,
    /// `spec.excludeIps`.
    pub exclude_ips: Vec<String>,
    /// `spec.gateway` ("gw4" or "gw4,gw6"); Kube-OVN's controller adds it to excludeIps itself,
    /// so a VIP equal to it is not reported even before that happened.
    pub gateway: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FindingReason {
    #[error("inside cidrBlock {cidr} but not in excludeIps: Kube-OVN may give it to a pod")]
    NotExcluded { cidr: IpNet },
    #[error("cidrBlock entry `{cidr}` is not a CIDR")]
    BadCidr { cidr: String },
    #[error("excludeIps: {0}")]
    BadExcludeIp(RangeError),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub subnet: String,
    /// The VIP concerned, if the finding is about one.
    pub vip: Option<IpAddr>,
    pub reason: FindingReason,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.vip {
            Some(v) => write!(f, "Subnet {}: VIP {}: {}", self.subnet, v, self.reason),
            None => write!(f, "Subnet {}: {}", self.subnet, self.reason),
        }
    }
}

/// Kube-OVN never allocates the network address nor the IPv4 broadcast address.
pub(crate) fn allocatable(net: &IpNet, ip: IpAddr) -> bool {
    net.contains(&ip) && ip != net.network() && !(ip.is_ipv4() && ip == net.broadcast())
}

/// Every VIP inside a Subnet's CIDR that its excludeIps does not cover, plus every bad CIDR or
/// excludeIps entry (a bad entry excludes nothing).
pub fn check_kubeovn(vips: &BTreeSet<IpAddr>, subnets: &[KubeOvnSubnetIpam]) -> Vec<Finding> {
    let mut findings = Vec::new();
    for sn in subnets {
        let mut finding = |vip, reason| {
            findings.push(Finding {
                subnet: sn.name.clone(),
                vip,
                reason,
            })
        };
        let mut cidrs = Vec::new();
        for c in sn.cidr_block.split(',') {
            match c.parse::<IpNet>() {
                Ok(n) => cidrs.push(n.trunc()),
                Err(_) => finding(None, FindingReason::BadCidr { cidr: c.to_owned() }),
            }
        }
        let (mut excluded, errors) = RangeSet::from_kubeovn(&sn.exclude_ips);
        for e in errors {
            finding(None, FindingReason::BadExcludeIp(e));
        }
        let gateways = sn.gateway.as_deref().unwrap_or("").split(',');
        excluded.extend(gateways.filter_map(|g| g.parse().ok().map(IpRange::single)));
        for &vip in vips {
            let hit = cidrs.iter().find(|n| allocatable(n, vip));
            if let Some(&cidr) = hit.filter(|_| !excluded.contains(vip)) {
                finding(Some(vip), FindingReason::NotExcluded { cidr });
            }
        }
    }
    findings
}
