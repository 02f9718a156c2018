//! Random histories of Services, pools, restarts and leader changes against a model of
//! the API (each Service's request and status), checking after every step that no address
//! is in two statuses unless the two may share it, and that no address leaves a status
//! unless its Service asked for something else or went.

use super::*;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// Create or replace Service `n` with request variant `v`.
    Put(u8, u8),
    Delete(u8),
    Pools(u8),
    /// The allocator starts again from the statuses (a restart, or another leader taking
    /// over after a pass whose last writes did not go through).
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..10, 0u8..64).prop_map(|(n, v)| Op::Put(n, v)),
        1 => (0u8..10).prop_map(Op::Delete),
        1 => (0u8..5).prop_map(Op::Pools),
        1 => Just(Op::Restart),
    ]
}

fn pools(v: u8) -> Vec<PoolSpec> {
    let a = pool("a", &["10.0.0.0/29"]);
    let b = pool("b", &["10.0.1.0/30", "fd00::/126"]);
    match v {
        0 => vec![a, b],
        1 => vec![a],
        2 => vec![pool("a", &["10.0.0.0/30"]), b],
        3 => vec![a, b, pool("c", &["10.0.0.4/30"])],
        _ => vec![],
    }
}

fn request(n: u8, v: u8) -> AllocRequest {
    let mut r = req(&format!("s{n}"));
    r.sharing_key = (v & 1 == 1).then(|| "k".to_string());
    r.ports = match (v >> 1) & 3 {
        0 => [(Protocol::Tcp, 80)].into(),
        1 => [(Protocol::Tcp, 443)].into(),
        2 => [(Protocol::Udp, 53)].into(),
        _ => [(Protocol::Tcp, 80), (Protocol::Tcp, 443)].into(),
    };
    r.policy = match (v >> 3) & 3 {
        0 | 1 => StackPolicy::SingleStack,
        2 => StackPolicy::PreferDualStack,
        _ => StackPolicy::RequireDualStack,
    };
    r.requested_pool = (v >> 5 == 1).then(|| "b".to_string());
    r.requested_ips = match v % 7 {
        0 => vec![ip("10.0.0.1")],
        1 => vec![ip("10.0.1.1")],
        _ => vec![],
    };
    r.local = v.is_multiple_of(5);
    r.selector = format!("app={}", v % 3);
    r
}

/// Whether two Services may hold one address (written apart from the allocator's own
/// check, from the rules).
fn may_share(a: &AllocRequest, b: &AllocRequest) -> bool {
    a.sharing_key.is_some()
        && a.sharing_key == b.sharing_key
        && a.ports.is_disjoint(&b.ports)
        && (!(a.local || b.local) || a.selector == b.selector)
}

/// One Service in the API.
#[derive(Debug, Clone)]
struct Svc {
    req: AllocRequest,
    status: Vec<IpAddr>,
    /// The request its status was last written for.
    written_for: Option<AllocRequest>,
}

struct World {
    pools: Vec<PoolSpec>,
    api: BTreeMap<u8, Svc>,
    alloc: Allocator,
}

impl World {
    /// The elected instance's pass over every Service, writing statuses; only the first
    /// `limit` writes go through (the others fail, or are lost with a leader that stops
    /// mid-burst).
    fn pass(&mut self, limit: usize) {
        let keys: Vec<u8> = self.api.keys().copied().collect();
        for (i, k) in keys.into_iter().enumerate() {
            let svc = self.api[&k].clone();
            let Ok(a) = self.alloc.assign(&svc.req) else {
                continue;
            };
            if i < limit {
                let s = self.api.get_mut(&k).expect("listed");
                s.status = a.ips;
                s.written_for = Some(svc.req);
            } else {
                // The write failed: the decision is taken back.
                self.alloc.undo(a);
            }
        }
    }

    fn restart(&mut self) {
        self.alloc = Allocator::new(self.pools.clone());
        let written: Vec<Option<Terms>> = self
            .api
            .values()
            .map(|s| s.written_for.as_ref().map(Terms::of))
            .collect();
        let entries = self
            .api
            .values()
            .zip(&written)
            .map(|(s, w)| (&s.req, s.status.as_slice(), w.as_ref()));
        // Statuses as written never conflict.
        let conflicts = self.alloc.reserve_all(entries);
        assert!(conflicts.is_empty(), "{conflicts:?}");
    }

    fn check(&self) -> Result<(), TestCaseError> {
        let mut by_ip: BTreeMap<IpAddr, Vec<&AllocRequest>> = BTreeMap::new();
        // Every status by the terms it was written for.
        for s in self.api.values() {
            let uniq: BTreeSet<&IpAddr> = s.status.iter().collect();
            prop_assert_eq!(uniq.len(), s.status.len());
            let Some(terms) = &s.written_for else {
                continue;
            };
            for ip in &s.status {
                by_ip.entry(*ip).or_default().push(terms);
            }
        }
        for (ip, holders) in by_ip {
            for (i, a) in holders.iter().enumerate() {
                for b in &holders[i + 1..] {
                    prop_assert!(may_share(a, b), "{} in {} and {}", ip, a.service, b.service);
                }
            }
        }
        Ok(())
    }
}

proptest! {
    #[test]
    fn no_address_twice_and_none_moves_unasked(
        ops in proptest::collection::vec((op(), 0usize..12), 1..60)
    ) {
        let mut w = World {
            pools: pools(0),
            api: BTreeMap::new(),
            alloc: Allocator::new(pools(0)),
        };
        for (op, limit) in ops {
            let before = w.api.clone();
            match op {
                Op::Put(n, v) => {
                    let req = request(n, v);
                    match w.api.get_mut(&n) {
                        Some(s) => s.req = req,
                        None => {
                            w.api.insert(n, Svc { req, status: Vec::new(), written_for: None });
                        }
                    }
                }
                Op::Delete(n) => {
                    if let Some(s) = w.api.remove(&n) {
                        w.alloc.release(&s.req.service);
                    }
                }
                Op::Pools(v) => {
                    w.pools = pools(v);
                    w.alloc.set_pools(w.pools.clone());
                }
                Op::Restart => w.restart(),
            }
            w.pass(limit);
            w.check()?;
            // Nothing left a status written for the request its Service still makes.
            for (k, now) in &w.api {
                if let Some(old) = before.get(k)
                    && old.written_for.as_ref() == Some(&now.req)
                {
                    for ip in &old.status {
                        prop_assert!(
                            now.status.contains(ip),
                            "{} lost {} though it asked for nothing new",
                            now.req.service,
                            ip
                        );
                    }
                }
            }
        }
    }
}
