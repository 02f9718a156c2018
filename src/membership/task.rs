//! The membership's I/O: the UDP socket, the timers, the seeds taken from the Nodes, the live
//! set handed to the planner and the successors it hands back (for the watch). Everything else
//! is [`MemberSet`].

use super::member_set::{MemberSet, MembershipSettings, Outputs};
use super::peer::Peer;
use super::seal::Key;
use super::watch::WatchEvent;
use crate::announce::placement::NodeName;
use crate::source::file::Loaded;
use foca::Timer;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio::time::Instant;

/// The live set as the planner takes it: `None` until the membership settled (joined others,
/// or found none to join), so that a starting agent does not take every VIP for a moment.
pub type LiveMembers = Option<Arc<BTreeSet<NodeName>>>;

/// The nodes that take this node's VIPs if it goes (each VIP's successor), as the planner
/// places them: the membership sends them heartbeats ([`super::watch`]).
pub type Successors = Arc<Vec<NodeName>>;

/// How long a starting member waits to hear from the others before it trusts its own view.
const SETTLE: Duration = Duration::from_secs(2);
/// How often one seed that is not a member is asked again (a node that starts later, the other
/// side of a healed partition).
const REJOIN_EVERY: Duration = Duration::from_millis(500);
/// After leaving, how long this node keeps answering while the others take its VIPs over.
pub const HANDOVER: Duration = Duration::from_secs(1);
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
        let mut timers: BTreeMap<(Instant, u64), Timer<Peer>> = BTreeMap::new();
        let mut seq = 0u64;
        let started = Instant::now();
        let mut settled = false;
        let mut refused = 0u64;
        let mut warned: Option<Instant> = None;
        let mut rejoin = tokio::time::interval(REJOIN_EVERY);
        let mut turn = 0usize;
        let mut buf = vec![0u8; 65_536];
        let out = set.join(now_ms(), &seeds);
        self.handle(&socket, &mut set, out, &mut timers, &mut seq, settled)
            .await;
        loop {
            let next = timers.keys().next().map(|(t, _)| *t);
            let settle_at = (!settled).then_some(started + SETTLE);
            // The watch's clock is the datagrams' (milliseconds of the wall clock).
            let watch_at = set
                .next_wake()
                .map(|at| Instant::now() + Duration::from_millis(at.saturating_sub(now_ms())));
            let wake = [next, settle_at, watch_at].into_iter().flatten().min();
            tokio::select! {
                r = socket.recv_from(&mut buf) => {
                    let Ok((n, from)) = r else { continue };
                    self.receive(&socket, &mut set, &buf[..n], from, &mut timers, &mut seq, &mut settled, &mut refused, &mut warned).await;
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
                    self.handle(&socket, &mut set, out, &mut timers, &mut seq, settled).await;
                }
                _ = sleep_until(wake) => {
                    // What arrived meanwhile first: a node that was slow (stopped, starved)
                    // reads the heartbeats that reached it before it judges anyone silent.
                    while let Ok((n, from)) = socket.try_recv_from(&mut buf) {
                        self.receive(&socket, &mut set, &buf[..n], from, &mut timers, &mut seq, &mut settled, &mut refused, &mut warned).await;
                    }
                    let now = Instant::now();
                    if !settled && now >= started + SETTLE {
                        settled = true;
                        self.publish(&set);
                    }
                    if set.next_wake().is_some_and(|at| at <= now_ms()) {
                        let out = set.tick(now_ms());
                        self.handle(&socket, &mut set, out, &mut timers, &mut seq, settled).await;
                    }
                    let due: Vec<(Instant, u64)> = timers.range(..=(now, u64::MAX)).map(|(k, _)| *k).collect();
                    for k in due {
                        if let Some(t) = timers.remove(&k) {
                            let out = set.timer(now_ms(), t);
                            self.handle(&socket, &mut set, out, &mut timers, &mut seq, settled).await;
                        }
                    }
                }
                _ = rejoin.tick() => {
                    turn = turn.wrapping_add(1);
                    if let Some(s) = set.rejoin_target(&seeds, turn) {
                        let out = set.join(now_ms(), &[s]);
                        self.handle(&socket, &mut set, out, &mut timers, &mut seq, settled).await;
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
                        self.handle(&socket, &mut set, out, &mut timers, &mut seq, settled).await;
                    }
                }
                _ = self.stop.changed() => {
                    let out = set.leave(now_ms());
                    for (to, d) in out.sends {
                        let _ = socket.send_to(&d, to).await;
                    }
                    // Make before break: the others take this node's VIPs and announce them
                    // first; then this node stops answering (the planner sees it not live).
                    tracing::info!(handover = ?HANDOVER, "left the membership; handing this node's VIPs over");
                    tokio::time::sleep(HANDOVER).await;
                    let mut rest = set.live().clone();
                    rest.remove(self.node.as_str());
                    self.live.send_replace(Some(Arc::new(rest)));
                    return;
                }
            }
        }
    }

    /// One datagram from `from`: to the core, or refused (reported at most once a minute).
    #[allow(clippy::too_many_arguments)]
    async fn receive(
        &self,
        socket: &UdpSocket,
        set: &mut MemberSet,
        datagram: &[u8],
        from: SocketAddr,
        timers: &mut BTreeMap<(Instant, u64), Timer<Peer>>,
        seq: &mut u64,
        settled: &mut bool,
        refused: &mut u64,
        warned: &mut Option<Instant>,
    ) {
        match set.receive(now_ms(), datagram) {
            Ok(out) => {
                if !*settled && set.live().len() > 1 {
                    *settled = true;
                    self.publish(set);
                }
                self.handle(socket, set, out, timers, seq, *settled).await;
            }
            Err(e) => {
                *refused += 1;
                if warned.is_none_or(|w| w.elapsed() >= WARN_EVERY) {
                    tracing::warn!(from = %from, error = %e, refused = *refused, "membership datagram refused");
                    *warned = Some(Instant::now());
                }
            }
        }
    }

    /// Send, schedule, and publish a changed live set (once settled).
    async fn handle(
        &self,
        socket: &UdpSocket,
        set: &mut MemberSet,
        out: Outputs,
        timers: &mut BTreeMap<(Instant, u64), Timer<Peer>>,
        seq: &mut u64,
        settled: bool,
    ) {
        for e in &out.watch {
            match e {
                WatchEvent::Watching { node, watching } => {
                    if *watching {
                        tracing::info!(owner = %node, "watch: watching an owner (this node takes its VIPs if it goes)")
                    } else {
                        tracing::info!(owner = %node, "watch: no longer watching an owner")
                    }
                }
                WatchEvent::Checking {
                    node,
                    silent_ms,
                    helpers,
                } => {
                    tracing::info!(node = %node, silent_ms, helpers = ?helpers, "watch: no heartbeat from the owner; asking others to reach it")
                }
                WatchEvent::Cleared { node, by } => {
                    tracing::info!(node = %node, by = %by, "watch: the owner is alive; nothing moves")
                }
                WatchEvent::Inconclusive { node, lost } => {
                    tracing::info!(node = %node, unreachable_for = lost, "watch: too few others answered; nothing moves (SWIM decides)")
                }
                WatchEvent::Confirmed {
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
            *seq += 1;
            timers.insert((now + after, *seq), t);
        }
        if out.live_changed && settled {
            self.publish(set);
        }
    }

    fn publish(&self, set: &MemberSet) {
        let live = Arc::new(set.live().clone());
        tracing::info!(live = ?live, "membership changed");
        self.live.send_replace(Some(live));
    }
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
