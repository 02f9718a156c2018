//! The watch in memory: a few [`Watch`]es on a network of 1 ms latency, stepped a millisecond
//! at a time. A dead owner is confirmed by its successor within about `miss_after` plus a probe
//! wait; a successor that is slow, cut off or alone moves nothing.

use super::*;
use std::collections::BTreeMap;

fn peer(i: usize) -> Peer {
    Peer {
        node: format!("n{i}"),
        addr: SocketAddr::from(([10, 0, 0, u8::try_from(i).unwrap()], 7947)),
        bump: 1,
    }
}

fn name(i: usize) -> NodeName {
    Arc::from(format!("n{i}").as_str())
}

struct Net {
    nodes: Vec<Watch>,
    /// Nothing in or out (dead, or cut off).
    silent: Vec<bool>,
    /// Not polled (its process stopped); what reaches it waits.
    stopped: Vec<bool>,
    inbox: Vec<(u64, usize, WatchMessage)>,
    held: Vec<(usize, WatchMessage)>,
    now: u64,
    events: Vec<(u64, usize, WatchFinding)>,
}

impl Net {
    fn new(n: usize) -> Net {
        Net {
            nodes: (0..n)
                .map(|i| Watch::new(&peer(i), WatchSettings::default(), i as u64 + 1))
                .collect(),
            silent: vec![false; n],
            stopped: vec![false; n],
            inbox: Vec::new(),
            held: Vec::new(),
            now: 0,
            events: Vec::new(),
        }
    }

    fn members(&self) -> Vec<Member> {
        (0..self.nodes.len())
            .map(|i| Member {
                node: name(i),
                addr: peer(i).addr,
            })
            .collect()
    }

    fn index(addr: SocketAddr) -> usize {
        match addr.ip() {
            std::net::IpAddr::V4(a) => usize::from(a.octets()[3]),
            std::net::IpAddr::V6(_) => unreachable!(),
        }
    }

    fn send(&mut self, from: usize, out: WatchOutputs) {
        for e in out.events {
            self.events.push((self.now, from, e));
        }
        if self.silent[from] {
            return;
        }
        for (to, m) in out.sends {
            self.inbox.push((self.now + 1, Net::index(to), m));
        }
    }

    /// `owner` sends heartbeats to `watchers`.
    fn watch(&mut self, owner: usize, watchers: &[usize]) {
        let map: BTreeMap<NodeName, SocketAddr> =
            watchers.iter().map(|w| (name(*w), peer(*w).addr)).collect();
        let out = self.nodes[owner].set_watchers(self.now, map);
        self.send(owner, out);
    }

    fn run(&mut self, ms: u64) {
        let until = self.now + ms;
        while self.now < until {
            self.now += 1;
            let due: Vec<(u64, usize, WatchMessage)> = {
                let (due, rest) = std::mem::take(&mut self.inbox)
                    .into_iter()
                    .partition(|(t, _, _)| *t <= self.now);
                self.inbox = rest;
                due
            };
            for (_, to, m) in due {
                if self.silent[to] {
                    continue;
                }
                if self.stopped[to] {
                    self.held.push((to, m));
                    continue;
                }
                let out = self.nodes[to].receive(self.now, m);
                self.send(to, out);
            }
            let members = self.members();
            // A silent node still runs (cut off, or dead: what it sends goes nowhere).
            for i in 0..self.nodes.len() {
                if self.stopped[i] {
                    continue;
                }
                if self.nodes[i].next_wake().is_some_and(|t| t <= self.now) {
                    let out = self.nodes[i].poll(self.now, &members);
                    self.send(i, out);
                }
            }
        }
    }

    /// Resume a stopped node: what reached it meanwhile is read first, then its timers run.
    fn resume(&mut self, i: usize) {
        self.stopped[i] = false;
        let held: Vec<WatchMessage> = {
            let (mine, rest) = std::mem::take(&mut self.held)
                .into_iter()
                .partition(|(to, _)| *to == i);
            self.held = rest;
            mine.into_iter().map(|(_, m)| m).collect()
        };
        for m in held {
            let out = self.nodes[i].receive(self.now, m);
            self.send(i, out);
        }
        let members = self.members();
        let out = self.nodes[i].poll(self.now, &members);
        self.send(i, out);
    }

    /// The events but `Watching`.
    fn findings(&self) -> Vec<&(u64, usize, WatchFinding)> {
        self.events
            .iter()
            .filter(|(_, _, e)| !matches!(e, WatchFinding::Watching { .. }))
            .collect()
    }

    fn confirmed(&self) -> Vec<(u64, usize, NodeName)> {
        self.events
            .iter()
            .filter_map(|(t, i, e)| match e {
                WatchFinding::Confirmed { node, .. } => Some((*t, *i, node.clone())),
                _ => None,
            })
            .collect()
    }

    fn count(&self, f: impl Fn(&WatchFinding) -> bool) -> usize {
        self.events.iter().filter(|(_, _, e)| f(e)).count()
    }
}

#[test]
fn a_dead_owner_is_confirmed_by_its_successor_within_the_budget() {
    let mut net = Net::new(5);
    net.watch(0, &[1]);
    net.run(1_000);
    assert!(net.findings().is_empty(), "{:?}", net.events);
    assert_eq!(
        net.nodes[1].watched().cloned().collect::<Vec<_>>(),
        [name(0)]
    );
    let died = net.now;
    net.silent[0] = true;
    net.run(1_000);
    let c = net.confirmed();
    assert_eq!(c.len(), 1, "{:?}", net.events);
    let (at, by, node) = &c[0];
    assert_eq!((*by, node.clone()), (1, name(0)));
    let took = at - died;
    // miss_after (100) after the last heartbeat, then the helpers' probe wait (40) and a
    // round trip: within 100 + 40 + a few ms of the death.
    assert!((100..=150).contains(&took), "confirmed after {took} ms");
    // Asked three helpers; all said lost.
    let Some(WatchFinding::Confirmed { by, .. }) = net
        .events
        .iter()
        .map(|(_, _, e)| e)
        .find(|e| matches!(e, WatchFinding::Confirmed { .. }))
    else {
        unreachable!()
    };
    assert_eq!(by.len(), 3);
}

#[test]
fn a_successor_cut_off_confirms_nothing() {
    let mut net = Net::new(4);
    net.watch(0, &[1]);
    net.run(500);
    // The watcher's link goes: it hears nothing, and nobody hears it.
    net.silent[1] = true;
    net.run(2_000);
    assert!(net.confirmed().is_empty(), "{:?}", net.events);
    assert!(net.count(|e| matches!(e, WatchFinding::Inconclusive { .. })) > 5);
}

#[test]
fn a_successor_that_misses_heartbeats_is_told_the_owner_lives() {
    let mut net = Net::new(4);
    net.watch(0, &[1]);
    net.run(500);
    // The owner's heartbeats to the watcher are lost (a lossy or one-way link), the rest flows.
    net.nodes[0].watchers.clear();
    net.nodes[0].next_beat = None;
    net.run(300);
    assert!(net.confirmed().is_empty(), "{:?}", net.events);
    assert_eq!(
        net.count(|e| matches!(e, WatchFinding::Cleared { .. })),
        1,
        "{:?}",
        net.events
    );
    // Cleared, it stops watching until a heartbeat comes again.
    assert_eq!(net.nodes[1].watched().count(), 0);
    net.watch(0, &[1]);
    net.run(50);
    assert_eq!(net.nodes[1].watched().count(), 1);
}

#[test]
fn a_stopped_successor_does_not_judge_on_waking() {
    let mut net = Net::new(4);
    net.watch(0, &[1]);
    net.run(500);
    net.stopped[1] = true;
    net.run(150);
    net.resume(1);
    net.run(500);
    assert!(net.findings().is_empty(), "{:?}", net.events);
    // Stopped longer than the miss time, with nothing queued for it: still no check at once.
    net.stopped[1] = true;
    net.run(150);
    net.held.clear();
    net.resume(1);
    assert!(net.findings().is_empty(), "{:?}", net.events);
    net.run(500);
    assert!(net.confirmed().is_empty());
}

#[test]
fn two_nodes_leave_it_to_swim() {
    let mut net = Net::new(2);
    net.watch(0, &[1]);
    net.run(200);
    net.silent[0] = true;
    net.run(1_000);
    assert!(net.confirmed().is_empty());
    assert!(net.count(|e| matches!(e, WatchFinding::Inconclusive { lost: 0, .. })) > 0);
}

#[test]
fn an_owner_that_drops_a_successor_tells_it() {
    let mut net = Net::new(3);
    net.watch(0, &[1, 2]);
    net.run(100);
    assert_eq!(net.nodes[2].watched().count(), 1);
    net.watch(0, &[1]);
    net.run(500);
    assert_eq!(net.nodes[2].watched().count(), 0);
    assert!(net.findings().is_empty(), "{:?}", net.events);
}

#[test]
fn messages_round_trip_and_garbage_is_refused() {
    let m = WatchMessage::Check {
        from: "n1".into(),
        addr: peer(1).addr,
        nonce: 7,
        target: "n0".into(),
        target_addr: peer(0).addr,
    };
    assert_eq!(WatchMessage::decode(&m.encode()).unwrap(), m);
    assert!(WatchMessage::decode(&[0xff, 0xff, 0xff]).is_err());
    assert!(WatchMessage::decode(&[]).is_err());
}

#[test]
fn settings_that_cannot_work_are_refused() {
    let bad = WatchSettings {
        miss_after: Duration::from_millis(30),
        ..WatchSettings::default()
    };
    assert!(bad.check().is_err());
    assert!(WatchSettings::default().check().is_ok());
}
