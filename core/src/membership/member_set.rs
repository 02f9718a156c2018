//! The membership's sans-IO core: foca (SWIM with suspicion) driven by the caller, who hands
//! in datagrams and due timers with the current time, and sends and schedules what comes back;
//! beside it the successors' watch of the owners ([`super::watch`]), whose confirmed deaths it
//! declares in SWIM. Tested in memory with a simulated network (`member_set_tests.rs`).

use super::peer::Peer;
use super::seal::{Channel, Key, SealError};
use super::watch::{self, Watch, WatchFinding, WatchSettings};
use crate::announce::placement::NodeName;
use foca::{AccumulatingRuntime, Foca, NoCustomBroadcast, OwnedNotification, PostcardCodec, Timer};
use rand::SeedableRng;
use rand::rngs::StdRng;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

/// How the membership probes. The defaults detect a dead node in well under a second on a LAN:
/// a member is probed by someone about once per `probe_period`, a probe unanswered directly
/// within `probe_rtt` is retried through three other members, and a member suspected for
/// `suspect_to_down_after` without refuting it is down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipSettings {
    /// UDP port of the membership on every node.
    pub port: u16,
    pub probe_period: Duration,
    pub probe_rtt: Duration,
    pub suspect_to_down_after: Duration,
    /// How often a few random members are sent the latest updates besides the probes, so that
    /// news of a death (or of a refuted suspicion) spreads in a few rounds.
    pub gossip_every: Duration,
    /// The expected number of members, which sets how many times each update is passed on.
    pub cluster_size: u32,
    /// The successors' watch of the owners ([`super::watch`]).
    pub watch: WatchSettings,
}

impl Default for MembershipSettings {
    fn default() -> Self {
        MembershipSettings {
            port: 7947,
            probe_period: Duration::from_millis(200),
            probe_rtt: Duration::from_millis(60),
            suspect_to_down_after: Duration::from_millis(400),
            gossip_every: Duration::from_millis(50),
            cluster_size: 100,
            watch: WatchSettings::default(),
        }
    }
}

impl MembershipSettings {
    /// Refuse timings SWIM cannot work with.
    pub fn check(&self) -> Result<(), MembershipError> {
        let zero = [
            self.probe_period,
            self.probe_rtt,
            self.suspect_to_down_after,
            self.gossip_every,
        ]
        .contains(&Duration::ZERO);
        if zero {
            return Err(MembershipError::Settings(
                "probe period, probe rtt, suspicion and gossip intervals must not be zero".into(),
            ));
        }
        if self.probe_rtt >= self.probe_period {
            return Err(MembershipError::Settings(format!(
                "probe rtt ({:?}) must be shorter than the probe period ({:?}), which also waits for the indirect probes",
                self.probe_rtt, self.probe_period
            )));
        }
        self.watch.check().map_err(MembershipError::Settings)?;
        Ok(())
    }

    fn foca_config(&self) -> foca::Config {
        let mut c = foca::Config::new_lan(
            NonZeroU32::new(self.cluster_size.max(1)).unwrap_or(NonZeroU32::MIN),
        );
        c.probe_period = self.probe_period;
        c.probe_rtt = self.probe_rtt;
        c.suspect_to_down_after = self.suspect_to_down_after;
        c.periodic_gossip = Some(foca::PeriodicParams {
            frequency: self.gossip_every,
            num_members: NonZeroUsize::new(3).unwrap_or(NonZeroUsize::MIN),
        });
        // Datagrams stay under a 1500-byte MTU with the seal in front.
        c.max_packet_size =
            NonZeroUsize::new(1400 - super::seal::OVERHEAD).unwrap_or(NonZeroUsize::MIN);
        c
    }
}

#[derive(Debug, Error)]
pub enum MembershipError {
    #[error("membership settings refused: {0}")]
    Settings(String),
    #[error("membership datagram refused: {0}")]
    Unsealed(#[from] SealError),
    #[error("membership datagram not understood: {0}")]
    Protocol(String),
    #[error(transparent)]
    Watch(#[from] watch::WatchError),
    #[error("claims datagram refused: {0}")]
    Claims(#[from] super::claims::ClaimsError),
}

/// A datagram this node accepted.
#[derive(Debug)]
pub enum Received {
    /// The membership's own: what it produced.
    Membership(Outputs),
    /// A member's claims to its VIPs.
    Claims(super::claims::ClaimsMessage),
}

/// What a step produced: datagrams to send, timers to set, and whether the live set changed.
#[derive(Debug, Default)]
pub struct Outputs {
    pub sends: Vec<(SocketAddr, Vec<u8>)>,
    pub timers: Vec<(Duration, Timer<Peer>)>,
    pub live_changed: bool,
    /// Members this step declared down (or learned were).
    pub down: Vec<String>,
    /// What the watch of the owners found ([`super::watch`]), for the log.
    pub watch: Vec<WatchFinding>,
}

/// How long after a silence this node still holds its verdicts ([`MemberSet::set_isolated`]):
/// enough for the others to let it in again (it asks every half second) and for the members it
/// suspected to hear of it.
pub const VERDICT_GRACE_MS: u64 = 2_000;

/// This node's view of the membership.
pub struct MemberSet {
    foca: Foca<Peer, PostcardCodec, StdRng, NoCustomBroadcast>,
    runtime: AccumulatingRuntime<Peer>,
    key: Key,
    me: Peer,
    live: BTreeSet<NodeName>,
    watch: Watch,
    /// The other active members, for the watch (its helpers, its watchers' addresses).
    members: Vec<watch::Member>,
    /// The successors of this node's VIPs, by name ([`MemberSet::set_watchers`]).
    watcher_names: BTreeSet<NodeName>,
    /// Until when (on the `now_ms` clock) suspicions that run out are held rather than
    /// judged: `u64::MAX` while this node hears no other ([`MemberSet::set_isolated`]).
    hold_verdicts_until: Option<u64>,
    /// Suspicions that ran out meanwhile: judged again after.
    held: Vec<Timer<Peer>>,
    suspect_to_down_after: Duration,
}

impl MemberSet {
    /// A member set of one (this node), seeded with `seed` for foca's random choices.
    pub fn new(
        me: Peer,
        settings: &MembershipSettings,
        key: Key,
        seed: u64,
    ) -> Result<MemberSet, MembershipError> {
        settings.check()?;
        let foca = Foca::new(
            me.clone(),
            settings.foca_config(),
            StdRng::seed_from_u64(seed),
            PostcardCodec,
        );
        let live = BTreeSet::from([NodeName::from(me.node.as_str())]);
        let watch = Watch::new(&me, settings.watch.clone(), seed.rotate_left(17));
        Ok(MemberSet {
            foca,
            runtime: AccumulatingRuntime::new(),
            key,
            me,
            live,
            watch,
            members: Vec::new(),
            watcher_names: BTreeSet::new(),
            hold_verdicts_until: None,
            held: Vec::new(),
            suspect_to_down_after: settings.suspect_to_down_after,
        })
    }

    /// Ask each of `seeds` (other nodes' membership addresses) to let this node in. Asking a
    /// member again is harmless; this node's own address is skipped.
    pub fn join(&mut self, now_ms: u64, seeds: &[SocketAddr]) -> Outputs {
        for s in seeds.iter().filter(|s| **s != self.me.addr) {
            if let Err(e) = self.foca.announce(Peer::seed(*s), &mut self.runtime) {
                tracing::debug!(seed = %s, error = %e, "membership: cannot announce");
            }
        }
        self.drain(now_ms)
    }

    /// Take `peers` as alive members without asking them (a cluster already formed: the
    /// large simulations start from one instead of thousands of joins).
    pub fn assume_members(
        &mut self,
        now_ms: u64,
        peers: impl IntoIterator<Item = Peer>,
    ) -> Outputs {
        let members = peers
            .into_iter()
            .filter(|p| p.addr != self.me.addr)
            .map(foca::Member::alive);
        if let Err(e) = self.foca.apply_many(members, false, &mut self.runtime) {
            tracing::debug!(error = %e, "membership: cannot take members");
        }
        self.drain(now_ms)
    }

    /// A datagram from the network. One that is not sealed with the key, is stale, or that foca
    /// cannot read changes nothing.
    pub fn receive(&mut self, now_ms: u64, datagram: &[u8]) -> Result<Received, MembershipError> {
        match self.key.open_any(now_ms, datagram)? {
            (Channel::Swim, payload) => {
                let r = self.foca.handle_data(payload, &mut self.runtime);
                let out = self.drain(now_ms);
                r.map_err(|e| MembershipError::Protocol(e.to_string()))?;
                Ok(Received::Membership(out))
            }
            (Channel::Watch, payload) => {
                let msg = watch::WatchMessage::decode(payload)?;
                let w = self.watch.receive(now_ms, msg);
                Ok(Received::Membership(self.watched(now_ms, w)))
            }
            (Channel::Claims, payload) => Ok(Received::Claims(
                super::claims::ClaimsMessage::decode(payload)?,
            )),
        }
    }

    /// The watch's due work ([`MemberSet::next_wake`]): heartbeats, silent owners, helpers'
    /// probes; an owner confirmed dead is declared down here.
    pub fn tick(&mut self, now_ms: u64) -> Outputs {
        let w = self.watch.poll(now_ms, &self.members);
        let mut out = self.watched(now_ms, w);
        if self
            .hold_verdicts_until
            .is_some_and(|until| now_ms >= until)
        {
            self.hold_verdicts_until = None;
            let after = self.suspect_to_down_after;
            out.timers.extend(self.held.drain(..).map(|t| (after, t)));
        }
        out
    }

    /// When [`MemberSet::tick`] has work next (on the `now_ms` clock), if ever.
    pub fn next_wake(&self) -> Option<u64> {
        let verdicts = self.hold_verdicts_until.filter(|u| *u != u64::MAX);
        [self.watch.next_wake(), verdicts]
            .into_iter()
            .flatten()
            .min()
    }

    /// The successors of this node's VIPs (the nodes that take them if it dies): each gets a
    /// heartbeat from now on, and watches this node.
    pub fn set_watchers(&mut self, now_ms: u64, nodes: BTreeSet<NodeName>) -> Outputs {
        self.watcher_names = nodes;
        let w = self.resolve_watchers(now_ms);
        self.watched(now_ms, w)
    }

    /// The successors that get heartbeats (those of [`MemberSet::set_watchers`] that are
    /// members), and the owners this node watches.
    pub fn watching(&self) -> (Vec<NodeName>, Vec<NodeName>) {
        (
            self.watch.watchers().cloned().collect(),
            self.watch.watched().cloned().collect(),
        )
    }

    fn resolve_watchers(&mut self, now_ms: u64) -> watch::WatchOutputs {
        let map: BTreeMap<NodeName, SocketAddr> = self
            .members
            .iter()
            .filter(|m| self.watcher_names.contains(&m.node))
            .map(|m| (m.node.clone(), m.addr))
            .collect();
        self.watch.set_watchers(now_ms, map)
    }

    /// Send what the watch sends, and declare down what it confirmed.
    fn watched(&mut self, now_ms: u64, w: watch::WatchOutputs) -> Outputs {
        let mut sends: Vec<(SocketAddr, Vec<u8>)> = w
            .sends
            .iter()
            .map(|(to, m)| (*to, self.key.seal_as(Channel::Watch, now_ms, &m.encode())))
            .collect();
        let mut out = Outputs::default();
        for e in &w.events {
            if let WatchFinding::Confirmed { node, .. } = e {
                let id = self
                    .foca
                    .iter_members()
                    .map(|m| m.id())
                    .find(|p| p.node == **node)
                    .cloned();
                if let Some(id) = id {
                    let down = std::iter::once(foca::Member::down(id));
                    if let Err(e) = self.foca.apply_many(down, true, &mut self.runtime) {
                        tracing::debug!(error = %e, "membership: cannot declare a member down");
                    }
                }
            }
        }
        if w.events
            .iter()
            .any(|e| matches!(e, WatchFinding::Confirmed { .. }))
        {
            out = self.drain(now_ms);
        }
        sends.append(&mut out.sends);
        out.sends = sends;
        out.watch = w.events;
        out
    }

    /// `payload` (an encoded [`super::claims::ClaimsMessage`]) sealed for sending.
    pub fn seal_claims(&self, now_ms: u64, payload: &[u8]) -> Vec<u8> {
        self.key.seal_as(Channel::Claims, now_ms, payload)
    }

    /// The largest claims payload that keeps a datagram under the MTU.
    pub const CLAIMS_BUDGET: usize = 1400 - super::seal::OVERHEAD;

    /// Where each member other than this node listens.
    pub fn member_addrs(&self) -> Vec<(NodeName, SocketAddr)> {
        self.foca
            .iter_members()
            .map(|m| m.id())
            .filter(|p| !p.node.is_empty())
            .map(|p| (NodeName::from(p.node.as_str()), p.addr))
            .collect()
    }

    /// A foca timer that came due.
    pub fn timer(&mut self, now_ms: u64, timer: Timer<Peer>) -> Outputs {
        let holding = self.hold_verdicts_until.is_some_and(|until| now_ms < until);
        if holding && matches!(timer, Timer::ChangeSuspectToDown { .. }) {
            self.held.push(timer);
            return Outputs::default();
        }
        if let Err(e) = self.foca.handle_timer(timer, &mut self.runtime) {
            tracing::debug!(error = %e, "membership: timer");
        }
        self.drain(now_ms)
    }

    /// Whether this node hears no other member (its uplink or its switch is gone; the shell
    /// tells, from the datagrams it gets). A node that hears no one declares no one down: the
    /// silence is its own cut, and a verdict it reached would spread to the others once it is
    /// back (foca passes on who is down) and move VIPs away from owners that never stopped.
    /// The hold lasts [`VERDICT_GRACE_MS`] past the silence: the others found this node down
    /// meanwhile and answer its probes only once it joined again. Then every suspicion that
    /// ran out in between gets a full `suspect_to_down_after` more, for its member to refute.
    pub fn set_isolated(&mut self, now_ms: u64, isolated: bool) {
        self.hold_verdicts_until = Some(if isolated {
            u64::MAX
        } else {
            now_ms.saturating_add(VERDICT_GRACE_MS)
        });
    }

    /// Leave on purpose (the agent stops): the others take this node's VIPs at once instead
    /// of waiting to find it dead.
    pub fn leave(&mut self, now_ms: u64) -> Outputs {
        // Its successors stop watching it: it is leaving, not dying.
        self.watcher_names.clear();
        let w = self.resolve_watchers(now_ms);
        let mut out = self.watched(now_ms, w);
        if let Err(e) = self.foca.leave_cluster(&mut self.runtime) {
            tracing::debug!(error = %e, "membership: leave");
        }
        let mut rest = self.drain(now_ms);
        out.sends.append(&mut rest.sends);
        out.timers.append(&mut rest.timers);
        out.down.append(&mut rest.down);
        out.live_changed |= rest.live_changed;
        out
    }

    /// The nodes alive as far as this node knows, itself included (a suspected node counts
    /// until it is declared down).
    pub fn live(&self) -> &BTreeSet<NodeName> {
        &self.live
    }

    pub fn me(&self) -> &Peer {
        &self.me
    }

    /// Which of `seeds` to ask again to let this node in, on the `turn`-th try: one that is
    /// not a member, taken in turn, so that a node that starts late, or the other side of a
    /// healed partition, is found within a few tries, while a dead node still listed as a
    /// seed costs one datagram per try and not one per seed.
    pub fn rejoin_target(&self, seeds: &[SocketAddr], turn: usize) -> Option<SocketAddr> {
        let members: std::collections::HashSet<SocketAddr> =
            self.foca.iter_members().map(|m| m.id().addr).collect();
        let outside: Vec<SocketAddr> = seeds
            .iter()
            .filter(|s| **s != self.me.addr && !members.contains(*s))
            .copied()
            .collect();
        (!outside.is_empty()).then(|| outside[turn % outside.len()])
    }

    fn drain(&mut self, now_ms: u64) -> Outputs {
        let mut out = Outputs::default();
        while let Some((to, data)) = self.runtime.to_send() {
            out.sends.push((to.addr, self.key.seal(now_ms, &data)));
        }
        while let Some(t) = self.runtime.to_schedule() {
            out.timers.push(t);
        }
        let mut notified = false;
        while let Some(n) = self.runtime.to_notify() {
            notified = true;
            match n {
                // Declared down, and back under a new identity: foca did it.
                OwnedNotification::Rejoin(id) => self.me = id,
                OwnedNotification::MemberDown(p) if !p.node.is_empty() => {
                    self.watch.forget(&p.node);
                    out.down.push(p.node)
                }
                _ => {}
            }
        }
        if notified {
            self.members = self
                .foca
                .iter_members()
                .map(|m| m.id())
                .filter(|p| !p.node.is_empty())
                .map(|p| watch::Member {
                    node: NodeName::from(p.node.as_str()),
                    addr: p.addr,
                })
                .collect();
            let w = self.resolve_watchers(now_ms);
            out.sends.extend(
                w.sends
                    .iter()
                    .map(|(to, m)| (*to, self.key.seal_as(Channel::Watch, now_ms, &m.encode()))),
            );
            let mut live: BTreeSet<NodeName> = self
                .foca
                .iter_members()
                .map(|m| m.id())
                .filter(|p| !p.node.is_empty())
                .map(|p| NodeName::from(p.node.as_str()))
                .collect();
            live.insert(Arc::from(self.me.node.as_str()));
            if live != self.live {
                self.live = live;
                out.live_changed = true;
            }
        }
        out
    }
}

#[cfg(test)]
#[path = "member_set_tests.rs"]
mod tests;
