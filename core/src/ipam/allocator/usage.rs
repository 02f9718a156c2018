//! What the allocator reports: usage per pool and family, and addresses left outside every
//! pool.

use super::Allocator;
use crate::ipam::pool::{Family, buggy_in, is_buggy, num};
use crate::ipam::request::Usage;
use crate::model::ServiceKey;
use std::net::IpAddr;

impl Allocator {
    /// Held addresses that are in no usable pool (their pool shrank, went away, or cannot be
    /// used now): they stay with their Services, and are reported.
    pub fn outside_pools(&self) -> Vec<(ServiceKey, IpAddr)> {
        let mut out: Vec<(ServiceKey, IpAddr)> = self
            .holders
            .iter()
            .filter(|(ip, _)| self.pool_of(**ip).is_none())
            .flat_map(|(ip, hs)| hs.iter().map(move |h| (h.service.clone(), *ip)))
            .collect();
        out.sort();
        out
    }

    /// Assigned and available addresses of `pool` for `family`.
    pub fn usage(&self, pool: &str, family: Family) -> Usage {
        let Some(st) = self.usable.get(pool) else {
            return Usage::default();
        };
        let ranges = || {
            st.pool
                .ranges
                .iter()
                .filter(move |r| Family::of(r.start()) == family)
        };
        // Held addresses in the pool are exactly those not free in it.
        let assigned: u128 = ranges()
            .map(|r| self.holders.range(r.start()..=r.end()).count() as u128)
            .sum();
        let free = match family {
            Family::V4 => st.free_v4.count(),
            Family::V6 => st.free_v6.count(),
        };
        let avoided = if st.pool.spec.avoid_buggy_ips && family == Family::V4 {
            let total: u128 = ranges()
                .map(|r| buggy_in(num(r.start()), num(r.end())))
                .sum();
            let held = ranges()
                .flat_map(|r| self.holders.range(r.start()..=r.end()))
                .filter(|(ip, _)| is_buggy(**ip))
                .count() as u128;
            total.saturating_sub(held)
        } else {
            0
        };
        Usage {
            assigned,
            available: free.saturating_sub(avoided),
        }
    }
}
