//! The membership's I/O: the UDP socket, the timers, the seeds taken from the Nodes, the view
//! handed to the planner (live members and their claims) and what it hands back (this node's
//! claims, and the successors that watch it). Everything else is [`MemberSet`].

use crate::announce::announcements::MembershipView;
use crate::announce::placement::NodeName;
use crate::membership::claims::ClaimsMessage;
use crate::membership::heard::HeardClaims;
use crate::membership::member_set::{MemberSet, MembershipSettings, Outputs, Received};
use crate::membership::peer::Peer;
use crate::membership::seal::Key;
use crate::membership::watch::WatchFinding;
use crate::model::Loaded;
use foca::Timer;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio::time::Instant;

/// The membership as the planner takes it: `None` until it settled (this node heard every
/// Node's agent out, claims included, or found none to hear), so that a starting agent takes
/// no VIP before it knows who owns what.
pub type LiveMembers = Option<Arc<MembershipView>>;

/// This node's claims as the planner makes them: each VIP it owns, with its epoch.
pub type OwnClaims = Arc<BTreeMap<IpAddr, u64>>;

/// The nodes that take this node's VIPs if it goes (each VIP's successor), as the planner
/// places them: the membership sends them heartbeats ([`crate::membership::watch`]).
pub type Successors = Arc<Vec<NodeName>>;

/// How long a starting member waits to hear from the others before it trusts its own view.
const SETTLE: Duration = Duration::from_secs(2);
/// Hearing nothing from any other node for this long, this node is cut off (its uplink or its
/// switch is gone): every other member probes it, and answers its probes, several times as
/// often. Shorter than the membership takes to find a member dead, so that a node that is cut
/// off knows it before it finds the others dead. With a single other Node, silence cannot tell
/// this node's cut from the other's death, and the survivor must take over: only a node with
/// two others or more counts itself cut off.
const ISOLATED_AFTER: Duration = Duration::from_millis(400);
/// How often this node's complete claims go to one member in turn, besides the sends on every
/// change and to every member that joins: a lost datagram is made good within a few rounds.
const RESEND_EVERY: Duration = Duration::from_secs(2);
/// How often one seed that is not a member is asked again (a node that starts later, the other
/// side of a healed partition).
const REJOIN_EVERY: Duration = Duration::from_millis(500);
pub use crate::membership::HANDOVER;
/// Refused datagrams are reported at most this often.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// What the membership task needs.
pub struct MembershipTask {
    pub settings: MembershipSettings,
    pub key: Key,
    /// This agent's node name.
    pub node: String,
    /// The address others reach this node at; `None`: this node's InternalIP (else first
    /// address) from its Node.
    pub address: Option<IpAddr>,
    /// The objects, for the Nodes: this node's address and the seeds.
    pub objects: watch::Receiver<Arc<Loaded>>,
    pub live: watch::Sender<LiveMembers>,
    /// This node's claims, from the planner: sent to the others as they change.
    pub claims: watch::Receiver<OwnClaims>,
    /// From the planner: who watches this node.
    pub successors: watch::Receiver<Successors>,
    /// Set to true to leave the membership and stop.
    pub stop: watch::Receiver<bool>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Every Node's membership address but this node's, and this node's own.
fn addresses(loaded: &Loaded, node: &str, port: u16) -> (Option<IpAddr>, Vec<SocketAddr>) {
    let mut own = None;
    let mut seeds = Vec::new();
    for n in &loaded.objects.nodes {
        let addrs: Vec<&k8s_openapi::api::core::v1::NodeAddress> = n
            .status
            .iter()
            .flat_map(|s| s.addresses.iter().flatten())
            .collect();
        let pick = addrs
            .iter()
            .find(|a| a.type_ == "InternalIP")
            .or_else(|| addrs.first())
            .and_then(|a| a.address.parse::<IpAddr>().ok());
        let Some(ip) = pick else { continue };
        if n.metadata.name.as_deref() == Some(node) {
            own = Some(ip);
        } else {
            seeds.push(SocketAddr::new(ip, port));
        }
    }
    seeds.sort();
    (own, seeds)
}

/// The loop's state beside the socket and the member set.
struct Looping {
    book: HeardClaims,
    timers: BTreeMap<(Instant, u64), Timer<Peer>>,
    seq: u64,
    settled: bool,
    /// The claims last sent to every member.
    sent: BTreeMap<IpAddr, u64>,
    /// Which member gets the next complete resend.
    resend_turn: usize,
    /// When a datagram from another node last arrived.
    last_heard: Instant,
    /// Nothing arrived for [`ISOLATED_AFTER`].
    isolated: bool,
    /// Datagrams refused so far, and when that was last reported.
    refused: u64,
    warned: Option<Instant>,
}

impl MembershipTask {
    pub async fn run(mut self) {
        // This node's address comes from its Node, which may not be listed yet.
        let (ip, mut seeds) = loop {
            let loaded = self.objects.borrow_and_update().clone();
            let (own, seeds) = addresses(&loaded, &self.node, self.settings.port);
            if let Some(ip) = self.address.or(own) {
                break (ip, seeds);
            }
            tracing::warn!(node = %self.node, "membership waits for this node's address (its Node's InternalIP, or set membership.address)");
            tokio::select! {
                r = self.objects.changed() => if r.is_err() { return },
                _ = self.stop.changed() => return,
            }
        };
        let me = Peer {
            node: self.node.clone(),
            addr: SocketAddr::new(ip, self.settings.port),
            bump: now_ms(),
        };
        let bind = SocketAddr::new(
            match ip {
                IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
                IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
            },
            self.settings.port,
        );
        let socket = match UdpSocket::bind(bind).await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(address = %bind, error = %e, "membership cannot listen; VIPs are placed by Node readiness alone");
                return;
            }
        };
        // How many times each update is passed on grows with the cluster: size it by the
        // Nodes listed now (the settings' figure is only a default).
        let settings = MembershipSettings {
            cluster_size: u32::try_from(seeds.len() + 1)
                .unwrap_or(u32::MAX)
                .max(self.settings.cluster_size),
            ..self.settings.clone()
        };
        let mut set = match MemberSet::new(me.clone(), &settings, self.key.clone(), me.bump) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "membership not started; VIPs are placed by Node readiness alone");
                return;
            }
        };
        tracing::info!(me = %me.addr, seeds = seeds.len(), "membership listening");
        let mut st = Looping {
            book: HeardClaims::new(&self.node),
            timers: BTreeMap::new(),
            seq: 0,
            settled: false,
            sent: BTreeMap::new(),
            resend_turn: 0,
            last_heard: Instant::now(),
            isolated: false,
            refused: 0,
            warned: None,
        };
        let started = Instant::now();
        let mut rejoin = tokio::time::interval(REJOIN_EVERY);
        let mut resend = tokio::time::interval(RESEND_EVERY);
        let mut turn = 0usize;
        let mut claims_open = true;
        let mut buf = vec![0u8; 65_536];
        let out = set.join(now_ms(), &seeds);
        self.handle(&socket, &mut set, out, &mut st).await;
        loop {
            let next = st.timers.keys().next().map(|(t, _)| *t);
            let settle_at = (!st.settled).then_some(started + SETTLE);
            let expiry = st
                .book
                .next_expiry()
                .map(|at| Instant::now() + Duration::from_millis(at.saturating_sub(now_ms())));
            let cut_at =
                (!st.isolated && seeds.len() >= 2).then_some(st.last_heard + ISOLATED_AFTER);
            // The watch's clock is the datagrams' (milliseconds of the wall clock).
            let watch_at = set
                .next_wake()
                .map(|at| Instant::now() + Duration::from_millis(at.saturating_sub(now_ms())));
            let wake = [next, settle_at, expiry, cut_at, watch_at]
                .into_iter()
                .flatten()
                .min();
            tokio::select! {
                r = socket.recv_from(&mut buf) => {
                    let Ok((n, from)) = r else { continue };
                    self.receive(&socket, &mut set, &buf[..n], from, &mut st).await;
                    self.settle(&set, &seeds, &mut st, false);
                }
                r = self.successors.changed() => {
                    if r.is_err() {
                        // The planner is gone (the agent stops): keep the membership until told.
                        self.successors = watch::channel(Successors::default()).1;
                        continue;
                    }
                    let next = self.successors.borrow_and_update().clone();
                    tracing::info!(successors = ?next, "watch: the successors of this node's VIPs watch it");
                    let out = set.set_watchers(now_ms(), next.iter().cloned().collect());
                    self.handle(&socket, &mut set, out, &mut st).await;
                }
                _ = sleep_until(wake) => {
                    // What arrived meanwhile first: a node that was slow (stopped, starved)
                    // reads the heartbeats that reached it before it judges anyone silent.
                    while let Ok((n, from)) = socket.try_recv_from(&mut buf) {
                        self.receive(&socket, &mut set, &buf[..n], from, &mut st).await;
                    }
                    let now = Instant::now();
                    if !st.isolated && seeds.len() >= 2 && now >= st.last_heard + ISOLATED_AFTER {
                        st.isolated = true;
                        set.set_isolated(now_ms(), true);
                        tracing::info!(silent_for = ?now.duration_since(st.last_heard), "membership: hearing no one; this node is cut off");
                        if st.settled {
                            self.publish(&st);
                        }
                    }
                    self.settle(&set, &seeds, &mut st, now >= started + SETTLE);
                    if st.book.expire(now_ms()) && st.settled {
                        self.publish(&st);
                    }
                    if set.next_wake().is_some_and(|at| at <= now_ms()) {
                        let out = set.tick(now_ms());
                        self.handle(&socket, &mut set, out, &mut st).await;
                    }
                    let due: Vec<(Instant, u64)> = st.timers.range(..=(now, u64::MAX)).map(|(k, _)| *k).collect();
                    for k in due {
                        if let Some(t) = st.timers.remove(&k) {
                            let out = set.timer(now_ms(), t);
                            self.handle(&socket, &mut set, out, &mut st).await;
                        }
                    }
                }
                _ = rejoin.tick() => {
                    turn = turn.wrapping_add(1);
                    if let Some(s) = set.rejoin_target(&seeds, turn) {
                        let out = set.join(now_ms(), &[s]);
                        self.handle(&socket, &mut set, out, &mut st).await;
                    }
                }
                _ = resend.tick() => {
                    let members = set.member_addrs();
                    if !members.is_empty() {
                        st.resend_turn = st.resend_turn.wrapping_add(1);
                        let (_, to) = &members[st.resend_turn % members.len()];
                        let mine = self.claims.borrow().clone();
                        self.send_claims(&socket, &set, &mine, true, &[*to]).await;
                    }
                }
                r = self.claims.changed(), if claims_open => {
                    if r.is_err() {
                        // The planner is gone: the agent stops.
                        claims_open = false;
                        continue;
                    }
                    let mine = self.claims.borrow_and_update().clone();
                    let changed: BTreeMap<IpAddr, u64> = mine
                        .iter()
                        .filter(|(v, e)| st.sent.get(v) != Some(e))
                        .map(|(v, e)| (*v, *e))
                        .collect();
                    st.sent = (*mine).clone();
                    if !changed.is_empty() {
                        let to: Vec<SocketAddr> = set.member_addrs().into_iter().map(|(_, a)| a).collect();
                        self.send_claims(&socket, &set, &changed, false, &to).await;
                    }
                }
                r = self.objects.changed() => {
                    if r.is_err() {
                        return;
                    }
                    let loaded = self.objects.borrow_and_update().clone();
                    let (_, now) = addresses(&loaded, &self.node, self.settings.port);
                    if now != seeds {
                        let new: Vec<SocketAddr> = now.iter().filter(|s| !seeds.contains(s)).copied().collect();
                        seeds = now;
                        let out = set.join(now_ms(), &new);
                        self.handle(&socket, &mut set, out, &mut st).await;
                    }
                }
                _ = self.stop.changed() => {
                    let out = set.leave(now_ms());
                    for (to, d) in out.sends {
                        let _ = socket.send_to(&d, to).await;
                    }
                    // Make before break: the others take this node's VIPs and announce them
                    // first; the agent stops answering after HANDOVER.
                    tracing::info!(handover = ?HANDOVER, "left the membership; handing this node's VIPs over");
                    return;
                }
            }
        }
    }

    /// One datagram from `from`: to the core (the membership's own, or a member's claims), or
    /// refused (reported at most once a minute).
    async fn receive(
        &self,
        socket: &UdpSocket,
        set: &mut MemberSet,
        datagram: &[u8],
        from: SocketAddr,
        st: &mut Looping,
    ) {
        let got = set.receive(now_ms(), datagram);
        if got.is_ok() {
            st.last_heard = Instant::now();
            if st.isolated {
                st.isolated = false;
                tracing::info!("membership: hearing the others again");
                set.set_isolated(now_ms(), false);
                if st.settled {
                    self.publish(st);
                }
            }
        }
        match got {
            Ok(Received::Membership(out)) => {
                self.handle(socket, set, out, st).await;
            }
            Ok(Received::Claims(msg)) => {
                if st.book.heard(&msg) && st.settled {
                    self.publish(st);
                }
            }
            Err(e) => {
                st.refused += 1;
                if st.warned.is_none_or(|w| w.elapsed() >= WARN_EVERY) {
                    tracing::warn!(from = %from, error = %e, refused = st.refused, "membership datagram refused");
                    st.warned = Some(Instant::now());
                }
            }
        }
    }

    /// Settle once every Node's agent is a member and was heard out (`force`: the wait is
    /// over), and publish the first view.
    fn settle(&self, set: &MemberSet, seeds: &[SocketAddr], st: &mut Looping, force: bool) {
        if st.settled {
            return;
        }
        let everyone = set.rejoin_target(seeds, 0).is_none() && set.live().len() > 1;
        if force || (everyone && st.book.all_heard()) {
            st.settled = true;
            self.publish(st);
        }
    }

    /// Send `claims` (all of this node's when `complete`) to `to`.
    async fn send_claims(
        &self,
        socket: &UdpSocket,
        set: &MemberSet,
        claims: &BTreeMap<IpAddr, u64>,
        complete: bool,
        to: &[SocketAddr],
    ) {
        let list: Vec<(IpAddr, u64)> = claims.iter().map(|(v, e)| (*v, *e)).collect();
        let parts =
            ClaimsMessage::encode_all(&self.node, complete, &list, MemberSet::CLAIMS_BUDGET);
        let now = now_ms();
        for p in parts {
            let d = set.seal_claims(now, &p);
            for addr in to {
                if let Err(e) = socket.send_to(&d, addr).await {
                    tracing::debug!(to = %addr, error = %e, "claims not sent");
                }
            }
        }
    }

    /// Send, schedule, tell members that joined this node's claims, and publish a changed
    /// view (once settled).
    async fn handle(
        &self,
        socket: &UdpSocket,
        set: &mut MemberSet,
        out: Outputs,
        st: &mut Looping,
    ) {
        for e in &out.watch {
            match e {
                WatchFinding::Watching { node, watching } => {
                    if *watching {
                        tracing::info!(owner = %node, "watch: watching an owner (this node takes its VIPs if it goes)")
                    } else {
                        tracing::info!(owner = %node, "watch: no longer watching an owner")
                    }
                }
                WatchFinding::Checking {
                    node,
                    silent_ms,
                    helpers,
                } => {
                    tracing::info!(node = %node, silent_ms, helpers = ?helpers, "watch: no heartbeat from the owner; asking others to reach it")
                }
                WatchFinding::Cleared { node, by } => {
                    tracing::info!(node = %node, by = %by, "watch: the owner is alive; nothing moves")
                }
                WatchFinding::Inconclusive { node, lost } => {
                    tracing::info!(node = %node, unreachable_for = lost, "watch: too few others answered; nothing moves (SWIM decides)")
                }
                WatchFinding::Confirmed {
                    node,
                    silent_ms,
                    by,
                } => {
                    tracing::info!(node = %node, silent_ms, unreachable_for = ?by, "watch: owner confirmed down")
                }
            }
        }
        for node in &out.down {
            tracing::info!(node = %node, "membership: node down");
        }
        for (to, d) in out.sends {
            if let Err(e) = socket.send_to(&d, to).await {
                tracing::debug!(to = %to, error = %e, "membership datagram not sent");
            }
        }
        let now = Instant::now();
        for (after, t) in out.timers {
            st.seq += 1;
            st.timers.insert((now + after, st.seq), t);
        }
        if out.live_changed {
            let joined = st.book.members(set.live(), now_ms());
            if !joined.is_empty() {
                let addrs: Vec<SocketAddr> = set
                    .member_addrs()
                    .into_iter()
                    .filter(|(n, _)| joined.contains(n))
                    .map(|(_, a)| a)
                    .collect();
                let mine = self.claims.borrow().clone();
                self.send_claims(socket, set, &mine, true, &addrs).await;
            }
            if st.settled {
                self.publish(st);
            }
        }
    }

    fn publish(&self, st: &Looping) {
        let view = MembershipView {
            isolated: st.isolated,
            ..st.book.view()
        };
        let changed = self.live.borrow().as_ref().is_none_or(|v| {
            v.live != view.live || v.claims != view.claims || v.isolated != view.isolated
        });
        if changed {
            if self
                .live
                .borrow()
                .as_ref()
                .is_none_or(|v| v.live != view.live)
            {
                tracing::info!(live = ?view.live, "membership changed");
            }
            self.live.send_replace(Some(Arc::new(view)));
        }
    }
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
