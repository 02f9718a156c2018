//! The successors' watch of the owners: detection at BFD speed, confirmed before anyone acts.
//!
//! SWIM (foca) finds a dead node by chance: some member probes it, and then the suspicion must
//! run out. That is most of a second, and more at thousands of nodes. The node that matters
//! first when an owner dies is the one that takes its VIPs: each VIP's *successor*, the node
//! the placement picks when the owner is gone. So each owner sends its successors a heartbeat
//! every [`WatchSettings::heartbeat_every`] (tens of ms), and a successor that hears none for
//! [`WatchSettings::miss_after`] does not act on its own view: it asks up to
//! [`WatchSettings::helpers`] other members to reach the owner (SWIM's indirect probe, aimed
//! at the one member that matters, which foca has no call for). Only when the helpers that
//! answered all failed to reach it (at least two of them where two or more were asked) is the
//! owner *confirmed* down; the caller then declares it down in SWIM, which spreads the news.
//! A watcher that is slow (its own timers late), cut off (no helper answers) or on a lossy
//! link (a helper reaches the owner) moves nothing.
//!
//! Sans-IO: messages and the time come in, datagrams to send and confirmed deaths come out.
//! Time is in milliseconds on the caller's clock; addresses are where each member's
//! membership socket listens.

use super::peer::Peer;
use crate::announce::placement::NodeName;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

/// The watch's timings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchSettings {
    /// How often an owner tells each of its successors it is alive.
    pub heartbeat_every: Duration,
    /// A successor that heard nothing from its owner for this long asks the helpers.
    pub miss_after: Duration,
    /// How long a helper tries to reach the owner (it asks twice: at once and halfway).
    pub probe_wait: Duration,
    /// How long the watcher waits for the helpers' verdicts.
    pub check_wait: Duration,
    /// How many other members a watcher asks.
    pub helpers: usize,
}

impl Default for WatchSettings {
    fn default() -> Self {
        WatchSettings {
            heartbeat_every: Duration::from_millis(20),
            miss_after: Duration::from_millis(100),
            probe_wait: Duration::from_millis(40),
            check_wait: Duration::from_millis(60),
            helpers: 3,
        }
    }
}

impl WatchSettings {
    /// Refuse timings the watch cannot work with.
    pub fn check(&self) -> Result<(), String> {
        let ms = |d: Duration| d.as_millis();
        if [
            self.heartbeat_every,
            self.miss_after,
            self.probe_wait,
            self.check_wait,
        ]
        .contains(&Duration::ZERO)
        {
            return Err("watch intervals must not be zero".into());
        }
        if self.miss_after < 2 * self.heartbeat_every {
            return Err(format!(
                "the watch's miss time ({} ms) must be at least two heartbeats ({} ms each)",
                ms(self.miss_after),
                ms(self.heartbeat_every)
            ));
        }
        if self.check_wait <= self.probe_wait {
            return Err(format!(
                "the watch's check wait ({} ms) must outlast the helpers' probe wait ({} ms)",
                ms(self.check_wait),
                ms(self.probe_wait)
            ));
        }
        Ok(())
    }
}

/// One watch datagram (inside the seal, [`super::seal::Channel::Watch`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WatchMessage {
    /// Owner to successor: alive. `watch: false`: no longer yours to watch.
    Beat {
        from: String,
        addr: SocketAddr,
        watch: bool,
    },
    /// Watcher to helper: can you reach `target` at `target_addr`?
    Check {
        from: String,
        addr: SocketAddr,
        nonce: u64,
        target: String,
        target_addr: SocketAddr,
    },
    /// Helper to owner.
    Ping { addr: SocketAddr, nonce: u64 },
    /// Owner to helper.
    Pong { nonce: u64 },
    /// Helper to watcher: whether it reached the target.
    Verdict {
        from: String,
        nonce: u64,
        alive: bool,
    },
}

#[derive(Debug, Error)]
pub enum WatchError {
    #[error("watch datagram not understood: {0}")]
    Decode(#[from] postcard::Error),
}

impl WatchMessage {
    pub fn encode(&self) -> Vec<u8> {
        // Serializing these plain fields into a Vec cannot fail; an empty datagram (refused
        // by the receiver) would be the only outcome if it did.
        postcard::to_allocvec(self).unwrap_or_default()
    }

    pub fn decode(bytes: &[u8]) -> Result<WatchMessage, WatchError> {
        Ok(postcard::from_bytes(bytes)?)
    }
}

/// Something the watch found, for the log (and the caller's action on `Confirmed`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchFinding {
    /// This node is a successor of `node`'s VIPs now (its first heartbeat came), or no longer.
    Watching { node: NodeName, watching: bool },
    /// No heartbeat from `node` for `silent_ms`: the helpers are asked.
    Checking {
        node: NodeName,
        silent_ms: u64,
        helpers: Vec<NodeName>,
    },
    /// `node` is alive after all (a helper reached it, or it spoke again).
    Cleared { node: NodeName, by: String },
    /// Too few helpers answered: this node may be the one cut off; nothing is done.
    Inconclusive { node: NodeName, lost: usize },
    /// `node` is down: silent here for `silent_ms`, and unreachable for `by`.
    Confirmed {
        node: NodeName,
        silent_ms: u64,
        by: Vec<NodeName>,
    },
}

/// A member the watch may talk to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub node: NodeName,
    pub addr: SocketAddr,
}

/// What a step produced.
#[derive(Debug, Default)]
pub struct WatchOutputs {
    pub sends: Vec<(SocketAddr, WatchMessage)>,
    pub events: Vec<WatchFinding>,
}

struct Watched {
    addr: SocketAddr,
    /// When it was last heard (a heartbeat) or forgiven (this node was late itself).
    heard: u64,
    check: Option<Check>,
}

struct Check {
    nonce: u64,
    deadline: u64,
    asked: BTreeSet<NodeName>,
    lost: BTreeSet<NodeName>,
}

/// A helper's attempt to reach a target for a watcher.
struct Probe {
    watcher: SocketAddr,
    watcher_nonce: u64,
    target: SocketAddr,
    again_at: Option<u64>,
    deadline: u64,
}

/// One node's side of the watch: the owner's heartbeats to its successors, the successor's
/// watch of its owners, and the helper's probes for other watchers.
pub struct Watch {
    settings: WatchSettings,
    me: NodeName,
    addr: SocketAddr,
    /// The successors of this node's VIPs, to send heartbeats to.
    watchers: BTreeMap<NodeName, SocketAddr>,
    next_beat: Option<u64>,
    /// The owners this node is a successor of (learned from their heartbeats).
    watched: BTreeMap<NodeName, Watched>,
    probes: HashMap<u64, Probe>,
    next_nonce: u64,
    rng: StdRng,
    /// When this node should have been woken last, to tell when it was late itself.
    due: Option<u64>,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Watch {
    pub fn new(me: &Peer, settings: WatchSettings, seed: u64) -> Watch {
        Watch {
            settings,
            me: Arc::from(me.node.as_str()),
            addr: me.addr,
            watchers: BTreeMap::new(),
            next_beat: None,
            watched: BTreeMap::new(),
            probes: HashMap::new(),
            next_nonce: seed | 1,
            rng: StdRng::seed_from_u64(seed),
            due: None,
        }
    }

    /// The successors of this node's VIPs: each gets a heartbeat from now on; one that is no
    /// longer a successor is told so.
    pub fn set_watchers(
        &mut self,
        now: u64,
        watchers: BTreeMap<NodeName, SocketAddr>,
    ) -> WatchOutputs {
        let mut out = WatchOutputs::default();
        for (node, addr) in &self.watchers {
            if !watchers.contains_key(node) {
                out.sends.push((*addr, self.beat(false)));
            }
        }
        let new: Vec<SocketAddr> = watchers
            .iter()
            .filter(|(n, a)| self.watchers.get(*n) != Some(a))
            .map(|(_, a)| *a)
            .collect();
        for a in new {
            out.sends.push((a, self.beat(true)));
        }
        self.watchers = watchers;
        self.next_beat = (!self.watchers.is_empty()).then(|| {
            self.next_beat
                .unwrap_or(now + ms(self.settings.heartbeat_every))
        });
        self.due = self.next_wake();
        out
    }

    /// The successors this node sends heartbeats to.
    pub fn watchers(&self) -> impl Iterator<Item = &NodeName> {
        self.watchers.keys()
    }

    /// The owners this node watches.
    pub fn watched(&self) -> impl Iterator<Item = &NodeName> {
        self.watched.keys()
    }

    /// Stop watching `node` (SWIM found it down, or it left).
    pub fn forget(&mut self, node: &str) {
        self.watched.remove(node);
    }

    fn beat(&self, watch: bool) -> WatchMessage {
        WatchMessage::Beat {
            from: self.me.to_string(),
            addr: self.addr,
            watch,
        }
    }

    /// A watch datagram arrived.
    pub fn receive(&mut self, now: u64, msg: WatchMessage) -> WatchOutputs {
        let out = self.take(now, msg);
        self.due = self.next_wake();
        out
    }

    fn take(&mut self, now: u64, msg: WatchMessage) -> WatchOutputs {
        let mut out = WatchOutputs::default();
        match msg {
            WatchMessage::Beat { from, addr, watch } => {
                if from == *self.me {
                    return out;
                }
                let node: NodeName = Arc::from(from.as_str());
                if !watch {
                    if self.watched.remove(from.as_str()).is_some() {
                        out.events.push(WatchFinding::Watching {
                            node,
                            watching: false,
                        });
                    }
                    return out;
                }
                let w = self.watched.entry(node.clone()).or_insert_with(|| {
                    out.events.push(WatchFinding::Watching {
                        node: node.clone(),
                        watching: true,
                    });
                    Watched {
                        addr,
                        heard: now,
                        check: None,
                    }
                });
                w.addr = addr;
                w.heard = now;
                if w.check.take().is_some() {
                    out.events.push(WatchFinding::Cleared {
                        node,
                        by: "its heartbeat".into(),
                    });
                }
            }
            WatchMessage::Check {
                addr,
                nonce,
                target,
                target_addr,
                ..
            } => {
                // Heard it lately as its watcher: no need to ask it.
                let fresh = self.watched.get(target.as_str()).is_some_and(|w| {
                    now.saturating_sub(w.heard) <= 2 * ms(self.settings.heartbeat_every)
                });
                if fresh {
                    out.sends.push((
                        addr,
                        WatchMessage::Verdict {
                            from: self.me.to_string(),
                            nonce,
                            alive: true,
                        },
                    ));
                    return out;
                }
                let mine = self.nonce();
                let wait = ms(self.settings.probe_wait);
                self.probes.insert(
                    mine,
                    Probe {
                        watcher: addr,
                        watcher_nonce: nonce,
                        target: target_addr,
                        again_at: Some(now + wait / 2),
                        deadline: now + wait,
                    },
                );
                out.sends.push((
                    target_addr,
                    WatchMessage::Ping {
                        addr: self.addr,
                        nonce: mine,
                    },
                ));
            }
            WatchMessage::Ping { addr, nonce } => {
                out.sends.push((addr, WatchMessage::Pong { nonce }));
            }
            WatchMessage::Pong { nonce } => {
                if let Some(p) = self.probes.remove(&nonce) {
                    out.sends.push((
                        p.watcher,
                        WatchMessage::Verdict {
                            from: self.me.to_string(),
                            nonce: p.watcher_nonce,
                            alive: true,
                        },
                    ));
                }
            }
            WatchMessage::Verdict { from, nonce, alive } => {
                let Some((node, w)) = self
                    .watched
                    .iter_mut()
                    .find(|(_, w)| w.check.as_ref().is_some_and(|c| c.nonce == nonce))
                else {
                    return out;
                };
                let node = node.clone();
                let Some(c) = w.check.as_mut() else {
                    return out;
                };
                if !c.asked.contains(from.as_str()) {
                    return out;
                }
                if alive {
                    // Alive for others: this node's link or timing is at fault. Stop watching
                    // until its next heartbeat comes (one that stopped on purpose sends none).
                    self.watched.remove(&node);
                    out.events.push(WatchFinding::Cleared { node, by: from });
                    return out;
                }
                c.lost.insert(Arc::from(from.as_str()));
                if c.lost.len() == c.asked.len() {
                    self.confirm(now, &node, &mut out);
                }
            }
        }
        out
    }

    /// Due work at `now`: heartbeats, missed owners (asking helpers among `members`), the
    /// helpers' second pings and verdicts, and checks that ran out.
    pub fn poll(&mut self, now: u64, members: &[Member]) -> WatchOutputs {
        let mut out = WatchOutputs::default();
        // This node was late itself (stopped, starved of CPU): it cannot tell whether its
        // owners fell silent or it did not listen. Start their clocks again; and a helper that
        // overslept gives no verdict rather than a false one.
        let late = self
            .due
            .is_some_and(|d| now > d + 2 * ms(self.settings.heartbeat_every));
        if late {
            for w in self.watched.values_mut() {
                w.heard = w.heard.max(now);
            }
            self.probes.retain(|_, p| p.deadline > now);
        }
        if let Some(t) = self.next_beat
            && now >= t
        {
            for a in self.watchers.values() {
                out.sends.push((*a, self.beat(true)));
            }
            let every = ms(self.settings.heartbeat_every);
            // The next one a period after this, not after when it was due: a late node does
            // not send a burst.
            self.next_beat = Some(now.max(t) + every);
        }
        let miss = ms(self.settings.miss_after);
        let silent: Vec<NodeName> = self
            .watched
            .iter()
            .filter(|(_, w)| w.check.is_none() && now >= w.heard + miss)
            .map(|(n, _)| n.clone())
            .collect();
        for node in silent {
            self.start_check(now, &node, members, &mut out);
        }
        let ran_out: Vec<NodeName> = self
            .watched
            .iter()
            .filter(|(_, w)| w.check.as_ref().is_some_and(|c| now >= c.deadline))
            .map(|(n, _)| n.clone())
            .collect();
        for node in ran_out {
            let Some(w) = self.watched.get_mut(&node) else {
                continue;
            };
            let Some(c) = w.check.take() else { continue };
            let need = c.asked.len().min(2);
            if need > 0 && c.lost.len() >= need {
                w.check = Some(c);
                self.confirm(now, &node, &mut out);
            } else {
                // Start its clock again: asked again after another miss, SWIM meanwhile.
                w.heard = now;
                out.events.push(WatchFinding::Inconclusive {
                    node,
                    lost: c.lost.len(),
                });
            }
        }
        let mut done = Vec::new();
        for (nonce, p) in &mut self.probes {
            if now >= p.deadline {
                done.push(*nonce);
                out.sends.push((
                    p.watcher,
                    WatchMessage::Verdict {
                        from: self.me.to_string(),
                        nonce: p.watcher_nonce,
                        alive: false,
                    },
                ));
            } else if p.again_at.is_some_and(|t| now >= t) {
                p.again_at = None;
                out.sends.push((
                    p.target,
                    WatchMessage::Ping {
                        addr: self.addr,
                        nonce: *nonce,
                    },
                ));
            }
        }
        for n in done {
            self.probes.remove(&n);
        }
        self.due = self.next_wake();
        out
    }

    /// When [`Watch::poll`] has work next.
    pub fn next_wake(&self) -> Option<u64> {
        let miss = ms(self.settings.miss_after);
        let watched = self.watched.values().map(|w| match &w.check {
            Some(c) => c.deadline,
            None => w.heard + miss,
        });
        let probes = self
            .probes
            .values()
            .map(|p| p.again_at.unwrap_or(p.deadline).min(p.deadline));
        self.next_beat
            .into_iter()
            .chain(watched)
            .chain(probes)
            .min()
    }

    fn nonce(&mut self) -> u64 {
        self.next_nonce = self.next_nonce.wrapping_add(2);
        self.next_nonce
    }

    fn start_check(
        &mut self,
        now: u64,
        node: &NodeName,
        members: &[Member],
        out: &mut WatchOutputs,
    ) {
        let candidates: Vec<&Member> = members
            .iter()
            .filter(|m| m.node != self.me && m.node != *node)
            .collect();
        let mut picked: Vec<&Member> = Vec::new();
        let mut pool = candidates;
        while picked.len() < self.settings.helpers && !pool.is_empty() {
            let i = self.rng.random_range(0..pool.len());
            picked.push(pool.swap_remove(i));
        }
        let nonce = self.nonce();
        let Some(w) = self.watched.get_mut(node) else {
            return;
        };
        let silent_ms = now.saturating_sub(w.heard);
        if picked.is_empty() {
            // No one to confirm with (two nodes): SWIM decides alone.
            w.heard = now;
            out.events.push(WatchFinding::Inconclusive {
                node: node.clone(),
                lost: 0,
            });
            return;
        }
        for m in &picked {
            out.sends.push((
                m.addr,
                WatchMessage::Check {
                    from: self.me.to_string(),
                    addr: self.addr,
                    nonce,
                    target: node.to_string(),
                    target_addr: w.addr,
                },
            ));
        }
        w.check = Some(Check {
            nonce,
            deadline: now + ms(self.settings.check_wait),
            asked: picked.iter().map(|m| m.node.clone()).collect(),
            lost: BTreeSet::new(),
        });
        out.events.push(WatchFinding::Checking {
            node: node.clone(),
            silent_ms,
            helpers: picked.iter().map(|m| m.node.clone()).collect(),
        });
    }

    fn confirm(&mut self, now: u64, node: &NodeName, out: &mut WatchOutputs) {
        if let Some(w) = self.watched.remove(node) {
            out.events.push(WatchFinding::Confirmed {
                node: node.clone(),
                silent_ms: now.saturating_sub(w.heard),
                by: w
                    .check
                    .map(|c| c.lost.into_iter().collect())
                    .unwrap_or_default(),
            });
        }
    }
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
