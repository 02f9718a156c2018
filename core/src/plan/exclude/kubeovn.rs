//! The Kube-OVN check: VIPs inside a Subnet's cidrBlock that its excludeIps does not cover.

use crate::plan::exclude::ranges::IpRange;
use crate::plan::exclude::ranges::RangeError;
use crate::plan::exclude::ranges::RangeSet;
use crate::plan::exclude::ranges::gaps;
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

impl From<&crate::model::KubeOvnSubnet> for KubeOvnSubnetIpam {
    fn from(s: &crate::model::KubeOvnSubnet) -> KubeOvnSubnetIpam {
        KubeOvnSubnetIpam {
            name: s.metadata.name.clone().unwrap_or_default(),
            cidr_block: s.spec.cidr_block.clone(),
            exclude_ips: s.spec.exclude_ips.clone(),
            gateway: s.spec.gateway.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FindingReason {
    #[error("inside cidrBlock {cidr} but not in excludeIps: Kube-OVN may give it to a pod")]
    NotExcluded { cidr: IpNet },
    #[error("cidrBlock entry `{cidr}` is not a CIDR")]
    BadCidr { cidr: String },
    #[error("excludeIps: {0}")]
    BadExcludeIp(RangeError),
    #[error(
        "pool `{pool}` has {uncovered} inside cidrBlock {cidr} that excludeIps does not cover \
         ({count} addresses): Kube-OVN may give them to pods"
    )]
    PoolNotExcluded {
        pool: String,
        cidr: IpNet,
        /// The first uncovered part.
        uncovered: IpRange,
        count: u128,
    },
}

/// One address range of a vipflow pool, for the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolRange {
    pub pool: String,
    pub range: IpRange,
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
    check_kubeovn_with_pools(vips, &[], subnets)
}

/// [`check_kubeovn`], and every pool range with addresses inside a Subnet's CIDR that its
/// excludeIps does not cover (a pool address handed to a Service must never go to a pod too).
pub fn check_kubeovn_with_pools(
    vips: &BTreeSet<IpAddr>,
    pools: &[PoolRange],
    subnets: &[KubeOvnSubnetIpam],
) -> Vec<Finding> {
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
        for p in pools {
            for cidr in &cidrs {
                let gaps = pool_gaps(cidr, p.range, &excluded);
                if let Some(&(s, e)) = gaps.first() {
                    let count = gaps.iter().map(|(s, e)| e - s + 1).sum();
                    let at = |x: u128| match cidr {
                        IpNet::V4(_) => IpAddr::from(std::net::Ipv4Addr::from(x as u32)),
                        IpNet::V6(_) => IpAddr::from(std::net::Ipv6Addr::from(x)),
                    };
                    if let Ok(uncovered) = IpRange::new(at(s), at(e)) {
                        finding(
                            None,
                            FindingReason::PoolNotExcluded {
                                pool: p.pool.clone(),
                                cidr: *cidr,
                                uncovered,
                                count,
                            },
                        );
                    }
                }
            }
        }
    }
    findings
}

/// The parts of `range` that Kube-OVN could hand out from `cidr` (its network address and
/// IPv4 broadcast address aside) and that `excluded` does not cover, as integer intervals.
fn pool_gaps(cidr: &IpNet, range: IpRange, excluded: &RangeSet) -> Vec<(u128, u128)> {
    let int = |ip: IpAddr| match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    };
    if range.start().is_ipv4() != cidr.addr().is_ipv4() {
        return Vec::new();
    }
    let mut lo = int(cidr.network()).saturating_add(1);
    let mut hi = int(cidr.broadcast());
    if cidr.addr().is_ipv4() {
        hi = hi.saturating_sub(1);
    }
    lo = lo.max(int(range.start()));
    hi = hi.min(int(range.end()));
    if lo > hi {
        return Vec::new();
    }
    match cidr {
        IpNet::V4(_) => {
            // Both bounds are IPv4 addresses here: they fit.
            gaps(&excluded.v4, lo as u32, hi as u32)
                .into_iter()
                .map(|(s, e)| (u128::from(s), u128::from(e)))
                .collect()
        }
        IpNet::V6(_) => gaps(&excluded.v6, lo, hi),
    }
}
