//! A simulated network of [`MemberSet`]s in virtual time: datagrams take a fixed latency and
//! may be lost at random (more on some nodes' links), timers and the watch's ticks fire when
//! due, and nodes can be cut off. The tests and the large-cluster benchmark run the real
//! membership core on it (SWIM and the successors' watch), thousands of nodes in one process,
//! and read off detection times, false positives and packet rates.

use super::member_set::{MemberSet, MembershipSettings, Outputs};
use super::peer::Peer;
use super::seal::Key;
use super::watch::WatchFinding;
use crate::announce::placement::NodeName;
use foca::Timer;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

enum SimEvent {
    Deliver {
        to: usize,
        data: Vec<u8>,
    },
    Timer {
        node: usize,
        timer: Timer<Peer>,
    },
    /// The watch's work ([`MemberSet::tick`]), when it asked for it.
    Tick {
        node: usize,
    },
}

/// The network and its nodes.
pub struct SimNetwork {
    nodes: Vec<MemberSet>,
    /// Cut off: nothing in or out, no timers.
    cut: Vec<bool>,
    by_addr: HashMap<SocketAddr, usize>,
    queue: BTreeMap<(u64, u64), SimEvent>,
    seq: u64,
    now_ms: u64,
    latency_ms: u64,
    loss: f64,
    rng: StdRng,
    /// Datagrams sent by each node.
    pub sent: Vec<u64>,
    /// When a node's live set last changed.
    pub changed_at: Vec<u64>,
    /// Every (time, observer, node) at which an observer declared a node down.
    pub downs: Vec<(u64, usize, String)>,
    /// Every (time, node, event) of the watch.
    pub watch_events: Vec<(u64, usize, WatchFinding)>,
    /// When each node's next tick is queued.
    tick_at: Vec<Option<u64>>,
    /// Extra loss on each node's link (in and out), on top of `loss`.
    link_loss: Vec<f64>,
    next_rejoin: u64,
    turn: usize,
}

/// How often a simulated node that does not see everyone asks one more node to let it in.
pub const REJOIN_EVERY_MS: u64 = 500;

/// The name of simulated node `i`.
pub fn sim_node(i: usize) -> String {
    format!("node{i}")
}

fn sim_addr(i: usize) -> SocketAddr {
    let i = u32::try_from(i).unwrap_or(u32::MAX);
    SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)), 7947)
}

fn sim_peer(i: usize) -> Peer {
    Peer {
        node: sim_node(i),
        addr: sim_addr(i),
        bump: 1,
    }
}

impl SimNetwork {
    /// `n` nodes with `settings`, each joining through node 0; `loss` is the chance that a
    /// datagram is lost.
    pub fn new(
        n: usize,
        settings: &MembershipSettings,
        latency_ms: u64,
        loss: f64,
        seed: u64,
    ) -> SimNetwork {
        let mut net = SimNetwork::alone(n, settings, latency_ms, loss, seed);
        for i in 1..n {
            let out = net.nodes[i].join(0, &[sim_addr(0)]);
            net.apply(i, out);
        }
        net
    }

    /// [`SimNetwork::new`] with every node already a member of every other: the steady state
    /// of a formed cluster, without simulating thousands of joins.
    pub fn formed(
        n: usize,
        settings: &MembershipSettings,
        latency_ms: u64,
        loss: f64,
        seed: u64,
    ) -> SimNetwork {
        let mut net = SimNetwork::alone(n, settings, latency_ms, loss, seed);
        for i in 0..n {
            let out = net.nodes[i].assume_members(0, (0..n).map(sim_peer));
            net.apply(i, out);
        }
        net
    }

    /// `n` nodes that know no one yet.
    fn alone(
        n: usize,
        settings: &MembershipSettings,
        latency_ms: u64,
        loss: f64,
        seed: u64,
    ) -> SimNetwork {
        let key =
            Key::from_secret(b"simulated membership secret").unwrap_or_else(|_| unreachable!());
        let nodes: Vec<MemberSet> = (0..n)
            .map(|i| {
                MemberSet::new(
                    sim_peer(i),
                    settings,
                    key.clone(),
                    seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                )
                .unwrap_or_else(|e| panic!("simulated member: {e}"))
            })
            .collect();
        SimNetwork {
            by_addr: (0..n).map(|i| (sim_addr(i), i)).collect(),
            cut: vec![false; n],
            nodes,
            queue: BTreeMap::new(),
            seq: 0,
            now_ms: 0,
            latency_ms,
            loss,
            rng: StdRng::seed_from_u64(seed),
            sent: vec![0; n],
            changed_at: vec![0; n],
            downs: Vec::new(),
            watch_events: Vec::new(),
            tick_at: vec![None; n],
            link_loss: vec![0.0; n],
            next_rejoin: REJOIN_EVERY_MS,
            turn: 0,
        }
    }

    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `i`'s live set.
    pub fn live(&self, i: usize) -> &BTreeSet<NodeName> {
        self.nodes[i].live()
    }

    /// Whether node `i` sees node `j` as live.
    pub fn sees(&self, i: usize, j: usize) -> bool {
        self.nodes[i]
            .live()
            .contains(&NodeName::from(sim_node(j).as_str()))
    }

    /// Cut node `i` off the network, as a pulled cable or a dead host.
    pub fn cut(&mut self, i: usize) {
        self.cut[i] = true;
    }

    /// Node `i`'s link loses `loss` of what it carries, each way (on top of the network's).
    pub fn set_link_loss(&mut self, i: usize, loss: f64) {
        self.link_loss[i] = loss;
    }

    /// The successors of node `i`'s VIPs: they get its heartbeats and watch it.
    pub fn set_watchers(&mut self, i: usize, nodes: impl IntoIterator<Item = usize>) {
        let names = nodes
            .into_iter()
            .map(|j| NodeName::from(sim_node(j).as_str()))
            .collect();
        let out = self.nodes[i].set_watchers(self.now_ms, names);
        self.apply(i, out);
    }

    /// Tell node `i` it hears no one (or hears the others again), as the agent's membership
    /// task does after a silence ([`MemberSet::set_isolated`]).
    pub fn set_isolated(&mut self, i: usize, isolated: bool) {
        self.nodes[i].set_isolated(self.now_ms, isolated);
        self.apply(i, Outputs::default());
    }

    /// Node `i`'s successors that get heartbeats, and the owners it watches.
    pub fn watching(&self, i: usize) -> (Vec<NodeName>, Vec<NodeName>) {
        self.nodes[i].watching()
    }

    /// Node `i` leaves on purpose.
    pub fn leave(&mut self, i: usize) {
        let out = self.nodes[i].leave(self.now_ms);
        self.apply(i, out);
        self.cut[i] = true;
    }

    /// Run until `until_ms` of virtual time. Every [`REJOIN_EVERY_MS`] each node asks one
    /// node it does not see to let it in, as the agent's membership task does.
    pub fn run_until(&mut self, until_ms: u64) {
        loop {
            let next_event = self.queue.keys().next().map(|(t, _)| *t);
            let next_rejoin = self.next_rejoin;
            match next_event {
                Some(at) if at <= until_ms && at < next_rejoin => {}
                _ if next_rejoin <= until_ms => {
                    self.now_ms = next_rejoin;
                    self.next_rejoin += REJOIN_EVERY_MS;
                    self.rejoin();
                    continue;
                }
                _ => break,
            }
            let Some(entry) = self.queue.first_entry() else {
                break;
            };
            let (at, _) = *entry.key();
            let ev = entry.remove();
            self.now_ms = at;
            match ev {
                SimEvent::Deliver { to, data } => {
                    if self.cut[to] {
                        continue;
                    }
                    // A refused datagram changes nothing; the core says why in its error.
                    if let Ok(super::member_set::Received::Membership(out)) =
                        self.nodes[to].receive(at, &data)
                    {
                        self.apply(to, out);
                    }
                }
                SimEvent::Timer { node, timer } => {
                    if self.cut[node] {
                        continue;
                    }
                    let out = self.nodes[node].timer(at, timer);
                    self.apply(node, out);
                }
                SimEvent::Tick { node } => {
                    if self.tick_at[node] != Some(at) {
                        continue;
                    }
                    self.tick_at[node] = None;
                    if self.cut[node] {
                        continue;
                    }
                    let out = self.nodes[node].tick(at);
                    self.apply(node, out);
                }
            }
        }
        self.now_ms = until_ms;
    }

    fn rejoin(&mut self) {
        self.turn += 1;
        let all: Vec<SocketAddr> = (0..self.nodes.len()).map(sim_addr).collect();
        for i in 0..self.nodes.len() {
            if self.cut[i] || self.nodes[i].live().len() == self.nodes.len() {
                continue;
            }
            if let Some(s) = self.nodes[i].rejoin_target(&all, self.turn + i) {
                let out = self.nodes[i].join(self.now_ms, &[s]);
                self.apply(i, out);
            }
        }
    }

    fn push(&mut self, at: u64, ev: SimEvent) {
        self.seq += 1;
        self.queue.insert((at, self.seq), ev);
    }

    fn apply(&mut self, from: usize, out: Outputs) {
        if out.live_changed {
            self.changed_at[from] = self.now_ms;
        }
        for d in out.down {
            self.downs.push((self.now_ms, from, d));
        }
        for e in out.watch {
            self.watch_events.push((self.now_ms, from, e));
        }
        if let Some(at) = self.nodes[from].next_wake() {
            let at = at.max(self.now_ms);
            if self.tick_at[from].is_none_or(|t| at < t) {
                self.tick_at[from] = Some(at);
                self.push(at, SimEvent::Tick { node: from });
            }
        }
        for (d, t) in out.timers {
            let at = self.now_ms + u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
            self.push(
                at,
                SimEvent::Timer {
                    node: from,
                    timer: t,
                },
            );
        }
        for (addr, data) in out.sends {
            self.sent[from] += 1;
            let Some(&to) = self.by_addr.get(&addr) else {
                continue;
            };
            let loss = self.loss + self.link_loss[from] + self.link_loss[to];
            if loss > 0.0 && self.rng.random::<f64>() < loss {
                continue;
            }
            self.push(
                self.now_ms + self.latency_ms,
                SimEvent::Deliver { to, data },
            );
        }
    }

    /// The names of every node, for comparing live sets.
    pub fn all_names(&self) -> BTreeSet<NodeName> {
        (0..self.nodes.len())
            .map(|i| Arc::from(sim_node(i).as_str()))
            .collect()
    }
}
