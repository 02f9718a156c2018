//! FRR as the node's BGP speaker: a change of the prefixes goes in as one batch
//! ([`crate::plan::bgp::frr_batch`]) over bgpd's own vty socket ([`vipflow_core::bgp::vty`];
//! `vtysh -f` where that socket cannot be reached), the node's configuration through `vtysh -f`
//! (it spans bgpd and bfdd), and what FRR holds is read back as its own JSON (read by the
//! core's [`vipflow_core::bgp::frr_state`]: the prefixes, the BGP and BFD sessions).
//!
//! What bgpd originates itself is read from `show bgp <family> unicast json`: the prefixes with
//! a path of its own (no peer: `peerId` `(unspec)`), not the routes it learned. An agent that
//! starts reads it first and takes it as what is held, so a restart withdraws nothing that is
//! still planned (FRR outlives the agent).

use ipnet::IpNet;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use vipflow_core::bgp::frr_state::{
    BfdSession, BgpSession, BgpTable, FrrAnswerError, bfd_sessions, bgp_sessions, bgp_table,
};
use vipflow_core::bgp::speaker::{Speaker, SpeakerAction, SpeakerPhase};

#[derive(Debug, thiserror::Error)]
pub enum FrrError {
    #[error("vtysh ({what}): {source}")]
    Run {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("vtysh ({what}) failed: {output}")]
    Failed { what: &'static str, output: String },
    #[error(transparent)]
    Answer(#[from] FrrAnswerError),
}

/// One FRR instance, reached through the directory of its vty sockets: bgpd's own vty socket
/// for what is bgpd's alone (the `network` lines, its tables and sessions: far cheaper than
/// starting `vtysh` for each), `vtysh` for the rest (the configuration, which spans bgpd and
/// bfdd) and where bgpd's socket cannot be reached.
#[derive(Debug, Clone)]
pub struct Vtysh {
    /// `vtysh --vty_socket`: where bgpd's and zebra's vty sockets are.
    pub socket_dir: PathBuf,
    /// The vtysh program.
    pub program: PathBuf,
    /// A session with bgpd's vty socket, opened on first use and dropped on any error.
    bgpd: Arc<tokio::sync::Mutex<Option<tokio::net::UnixStream>>>,
}

/// Commands written to bgpd's vty before their answers are read.
const VTY_PIPELINE: usize = 256;
/// The longest one call on FRR (a vtysh run, an exchange on bgpd's vty) may take: past it the
/// call fails (vtysh is killed, the vty session dropped) and the task goes on.
pub const FRR_CALL_TIMEOUT: Duration = Duration::from_secs(20);

impl Vtysh {
    pub fn new(socket_dir: impl Into<PathBuf>) -> Vtysh {
        Vtysh {
            socket_dir: socket_dir.into(),
            program: PathBuf::from("vtysh"),
            bgpd: Arc::default(),
        }
    }

    /// The same FRR, driven by the vtysh program at `program`.
    pub fn with_program(mut self, program: impl Into<PathBuf>) -> Vtysh {
        self.program = program.into();
        self
    }

    /// Run `commands` on bgpd's own vty socket: each one's output and status (0: done). A
    /// session that does not answer within [`FRR_CALL_TIMEOUT`] is dropped (the next call opens
    /// a new one).
    async fn on_bgpd(&self, commands: &[&str]) -> std::io::Result<Vec<(String, u8)>> {
        let mut session = self.bgpd.lock().await;
        match tokio::time::timeout(FRR_CALL_TIMEOUT, self.exchange(&mut session, commands)).await {
            Ok(r) => r,
            Err(_) => {
                *session = None;
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "bgpd did not answer on its vty socket",
                ))
            }
        }
    }

    async fn exchange(
        &self,
        session: &mut Option<tokio::net::UnixStream>,
        commands: &[&str],
    ) -> std::io::Result<Vec<(String, u8)>> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use vipflow_core::bgp::vty;
        let mut stream = match session.take() {
            Some(s) => s,
            None => tokio::net::UnixStream::connect(self.socket_dir.join("bgpd.vty")).await?,
        };
        let mut out = Vec::with_capacity(commands.len());
        let mut buf: Vec<u8> = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        for group in commands.chunks(VTY_PIPELINE) {
            let mut wire = Vec::new();
            for c in group {
                wire.extend_from_slice(&vty::command(c));
            }
            stream.write_all(&wire).await?;
            let want = out.len() + group.len();
            while out.len() < want {
                if let Some((text, status, used)) = vty::answer(&buf) {
                    buf.drain(..used);
                    out.push((text, status));
                    continue;
                }
                let n = stream.read(&mut chunk).await?;
                if n == 0 {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "bgpd closed its vty socket",
                    ));
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        }
        // Kept for the next call only once every answer was read.
        *session = Some(stream);
        Ok(out)
    }

    /// Apply `batch`, configuration lines that are bgpd's alone (the `network` lines), over
    /// bgpd's own vty socket, every line even past one FRR refuses (as `vtysh -f` does); the
    /// refused lines are reported with FRR's words. Where bgpd's socket cannot be reached, with
    /// `vtysh -f` ([`Vtysh::apply`]).
    pub async fn apply_bgpd(&self, batch: &str) -> Result<(), FrrError> {
        const WHAT: &str = "apply a batch on bgpd's vty";
        let commands = vipflow_core::bgp::vty::batch_commands(batch);
        let answers = match self.on_bgpd(&commands).await {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(error = %e, "bgpd's vty socket not usable; applying with vtysh");
                return self.apply(batch).await;
            }
        };
        // Not let into configuration mode (another client holds FRR's configuration): the
        // lines went nowhere, and vtysh queues behind that client instead.
        if answers.get(1).is_some_and(|(_, status)| *status != 0) {
            tracing::debug!(answer = ?answers.get(1), "bgpd's vty not let into configuration mode; applying with vtysh");
            return self.apply(batch).await;
        }
        let refused: Vec<String> = commands
            .iter()
            .zip(&answers)
            .filter(|(_, (_, status))| *status != 0)
            .map(|(c, (text, _))| format!("{c}: {}", text.trim()))
            .collect();
        if refused.is_empty() {
            Ok(())
        } else {
            Err(FrrError::Failed {
                what: WHAT,
                output: refused.join("; "),
            })
        }
    }

    /// One `show ... json` of bgpd's: over its vty socket, else through vtysh.
    async fn bgpd_show(&self, what: &'static str) -> Result<String, FrrError> {
        if let Ok(mut a) = self.on_bgpd(&[what]).await
            && let Some((text, 0)) = a.pop()
        {
            return Ok(text);
        }
        let mut c = self.command();
        c.args(["-c", what]);
        output_of(c, what).await
    }

    /// Apply `batch` (configuration lines) with `vtysh -f`. vtysh goes on past a line FRR
    /// refuses and then fails the whole call, so a refusal is reported and the rest applied;
    /// read back with [`Vtysh::originated`] for what FRR holds.
    pub async fn apply(&self, batch: &str) -> Result<(), FrrError> {
        use tokio::io::AsyncWriteExt;
        const WHAT: &str = "apply a batch";
        let run_err = |source| FrrError::Run { what: WHAT, source };
        // The batch goes in on standard input: nothing is written to the node's disk.
        let mut c = self.command();
        c.args(["-f", "/dev/stdin"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let run = async {
            let mut child = c.spawn()?;
            if let Some(mut stdin) = child.stdin.take() {
                stdin.write_all(batch.as_bytes()).await?;
            }
            child.wait_with_output().await
        };
        let out = timed(run).await.map_err(run_err)?;
        if out.status.success() {
            Ok(())
        } else {
            Err(FrrError::Failed {
                what: WHAT,
                output: failed_output(&out),
            })
        }
    }

    /// bgpd's default instance and what it originates, both families.
    pub async fn bgp_table(&self) -> Result<BgpTable, FrrError> {
        let mut out = BgpTable::default();
        for what in ["show bgp ipv4 unicast json", "show bgp ipv6 unicast json"] {
            let t = bgp_table(&self.bgpd_show(what).await?)?;
            out.local_as = out.local_as.or(t.local_as);
            out.originated.extend(t.originated);
        }
        Ok(out)
    }

    /// Every prefix bgpd originates itself, both families.
    pub async fn originated(&self) -> Result<BTreeSet<IpNet>, FrrError> {
        Ok(self.bgp_table().await?.originated)
    }

    /// Every BGP session, every family (`show bgp summary json`).
    pub async fn bgp_sessions(&self) -> Result<Vec<BgpSession>, FrrError> {
        Ok(bgp_sessions(
            &self.bgpd_show("show bgp summary json").await?,
        )?)
    }

    /// Every BFD session (`show bfd peers json`).
    pub async fn bfd_sessions(&self) -> Result<Vec<BfdSession>, FrrError> {
        const WHAT: &str = "show bfd peers json";
        let mut c = self.command();
        c.args(["-c", WHAT]);
        Ok(bfd_sessions(&output_of(c, WHAT).await?)?)
    }

    fn command(&self) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(&self.program);
        c.arg("--vty_socket").arg(&self.socket_dir);
        c.kill_on_drop(true);
        c
    }
}

async fn output_of(mut c: tokio::process::Command, what: &'static str) -> Result<String, FrrError> {
    let out = timed(c.output())
        .await
        .map_err(|source| FrrError::Run { what, source })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(FrrError::Failed {
            what,
            output: failed_output(&out),
        })
    }
}

/// `run`, failed with a timeout past [`FRR_CALL_TIMEOUT`] (the child is killed on drop).
async fn timed<T>(
    run: impl std::future::Future<Output = std::io::Result<T>>,
) -> std::io::Result<T> {
    tokio::time::timeout(FRR_CALL_TIMEOUT, run)
        .await
        .unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "vtysh did not finish in time",
            ))
        })
}

/// What a failed vtysh said, on both its outputs.
fn failed_output(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
    .trim()
    .to_string()
}

/// What the FRR task reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrrStatus {
    /// FRR was told the configuration and the prefixes the plan wants (it takes a batch in
    /// the background: its tables follow within moments).
    pub current: bool,
    /// The AS of the BGP instance FRR was given; `None` when it was given none (no peer
    /// selects this node) or not yet.
    pub asn: Option<u32>,
    /// What FRR originates, as last read or written.
    pub originated: BTreeSet<IpNet>,
    /// `originated` is known: read back from FRR (or there is no BGP instance to read).
    pub known: bool,
    /// The BGP sessions and BFD sessions, as last read.
    pub sessions: Vec<BgpSession>,
    pub bfd: Vec<BfdSession>,
    /// The plan whose prefixes FRR was last told in full.
    pub applied_generation: Option<u64>,
    /// Batches of `network` lines applied since the start, and how long vtysh took for the
    /// last.
    pub batches: u64,
    pub last_batch: Duration,
    /// Batches of configuration (peers, BFD profiles) applied since the start.
    pub config_batches: u64,
    /// The last failure, in FRR's words or vtysh's.
    pub last_error: Option<String>,
}

/// The prefixes a plan wants FRR to originate, and that plan's generation.
pub type WantedPrefixes = (u64, Arc<BTreeSet<IpNet>>);

/// What the FRR task is fed: this node's configuration (`Some(None)`: no peer selects the
/// node), and the prefixes the plan wants once the dataplane carries them. `None` until known:
/// nothing is written before.
#[derive(Debug)]
pub struct FrrInputs {
    pub config: tokio::sync::watch::Receiver<Option<Arc<Option<String>>>>,
    pub wanted: tokio::sync::watch::Receiver<Option<WantedPrefixes>>,
}

/// How long to wait before asking FRR again after failures in a row, at first and at most
/// (the first failure is followed at once).
const RETRY: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(5);
/// How often FRR's sessions are read, and its BGP instance checked against what it was given.
pub const FRR_POLL: Duration = Duration::from_secs(2);

/// Keep the node's FRR configured as the objects say and originating what the plan wants, as
/// [`Speaker`] decides: configuration first, FRR read back before any prefix is written, then
/// each change as one batch. Every [`FRR_POLL`] the sessions are read for the status, and a
/// bgpd that lost its instance (restarted) is given everything again. Ends when both inputs'
/// senders are gone.
pub async fn run(
    vtysh: Vtysh,
    mut inputs: FrrInputs,
    status: tokio::sync::watch::Sender<FrrStatus>,
) {
    let mut speaker = Speaker::new();
    // What the inputs hold already (the configuration first: the prefixes live in it).
    let mut next = None;
    if let Some(c) = inputs.config.borrow_and_update().clone() {
        next = speaker.configure(c.as_ref().clone());
    }
    let mut generation = None;
    if let Some((g, w)) = inputs.wanted.borrow_and_update().clone() {
        generation = Some(g);
        next = next.or(speaker.want(w.as_ref().clone()));
    }
    // The pause before the next call after a failure: none after the first (a refused line is
    // put right by reading FRR back at once), then doubling from RETRY.
    let mut retry = Duration::ZERO;
    let mut poll = tokio::time::interval(FRR_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // What a poll saw differ from what the speaker holds: drift is acted on when two polls in
    // a row see it (a batch FRR is still taking in the background is not drift).
    let mut drift: Option<BTreeSet<IpNet>> = None;
    loop {
        match next.take() {
            Some(SpeakerAction::ReadBack) => match vtysh.originated().await {
                Ok(held) => {
                    retry = Duration::ZERO;
                    next = speaker.read(held);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read what FRR originates; trying again");
                    status.send_modify(|s| s.last_error = Some(e.to_string()));
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).clamp(RETRY, RETRY_MAX);
                    next = Some(SpeakerAction::ReadBack);
                }
            },
            Some(SpeakerAction::Configure(batch)) => {
                next = apply(&vtysh, &mut speaker, &batch, true, &status, &mut retry).await;
            }
            Some(SpeakerAction::Apply(batch)) => {
                next = apply(&vtysh, &mut speaker, &batch, false, &status, &mut retry).await;
            }
            None => {
                let held = speaker.held().cloned().unwrap_or_default();
                let current = speaker.phase() == SpeakerPhase::Current;
                let asn = speaker.asn();
                let known = speaker.knows_frr();
                status.send_if_modified(|s| {
                    let applied = if current {
                        generation
                    } else {
                        s.applied_generation
                    };
                    let changed = s.current != current
                        || s.originated != held
                        || s.asn != asn
                        || s.known != known
                        || s.applied_generation != applied;
                    s.known = known;
                    s.current = current;
                    s.originated = held;
                    s.asn = asn;
                    s.applied_generation = applied;
                    changed
                });
                tokio::select! {
                    r = inputs.config.changed() => {
                        if r.is_err() { return; }
                        if let Some(c) = inputs.config.borrow_and_update().clone() {
                            next = speaker.configure(c.as_ref().clone());
                        }
                    }
                    r = inputs.wanted.changed() => {
                        if r.is_err() { return; }
                        if let Some((g, w)) = inputs.wanted.borrow_and_update().clone() {
                            generation = Some(g);
                            next = speaker.want(w.as_ref().clone());
                        }
                    }
                    _ = poll.tick() => next = watch_frr(&vtysh, &mut speaker, &mut drift, &status).await,
                }
            }
        }
    }
}

/// What one pass over FRR did (`vipflow agent --once`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrrOnce {
    pub config_batches: u64,
    pub batches: u64,
    /// What FRR originates at the end.
    pub originated: BTreeSet<IpNet>,
}

/// Give FRR `config` and make it originate `wanted`, as the running agent would, once: the
/// configuration whole, FRR read back, the difference written. The first failure ends it.
pub async fn run_once(
    vtysh: &Vtysh,
    config: Option<String>,
    wanted: BTreeSet<IpNet>,
) -> Result<FrrOnce, FrrError> {
    let mut speaker = Speaker::new();
    let mut once = FrrOnce::default();
    let mut next = speaker.configure(config);
    next = next.or(speaker.want(wanted));
    while let Some(action) = next {
        next = match action {
            SpeakerAction::ReadBack => speaker.read(vtysh.originated().await?),
            SpeakerAction::Configure(batch) => {
                vtysh.apply(&batch).await?;
                once.config_batches += 1;
                speaker.applied()
            }
            SpeakerAction::Apply(batch) => {
                vtysh.apply_bgpd(&batch).await?;
                once.batches += 1;
                speaker.applied()
            }
        };
    }
    once.originated = speaker.held().cloned().unwrap_or_default();
    Ok(once)
}

/// Apply one batch (configuration when `config`, else `network` lines) and tell the speaker.
async fn apply(
    vtysh: &Vtysh,
    speaker: &mut Speaker,
    batch: &str,
    config: bool,
    status: &tokio::sync::watch::Sender<FrrStatus>,
    retry: &mut Duration,
) -> Option<SpeakerAction> {
    let began = std::time::Instant::now();
    let applied = if config {
        vtysh.apply(batch).await
    } else {
        vtysh.apply_bgpd(batch).await
    };
    match applied {
        Ok(()) => {
            *retry = Duration::ZERO;
            tracing::debug!(config, took = ?began.elapsed(), "FRR took a batch");
            status.send_modify(|s| {
                if config {
                    s.config_batches += 1;
                } else {
                    s.batches += 1;
                    s.last_batch = began.elapsed();
                }
                s.last_error = None;
            });
            speaker.applied()
        }
        Err(e) => {
            tracing::warn!(error = %e, "FRR refused part of a batch; reading back what it holds");
            status.send_modify(|s| s.last_error = Some(e.to_string()));
            tokio::time::sleep(*retry).await;
            *retry = (*retry * 2).clamp(RETRY, RETRY_MAX);
            speaker.failed()
        }
    }
}

/// One poll: the sessions for the status, and FRR's BGP instance against what the speaker
/// gave it.
async fn watch_frr(
    vtysh: &Vtysh,
    speaker: &mut Speaker,
    drift: &mut Option<BTreeSet<IpNet>>,
    status: &tokio::sync::watch::Sender<FrrStatus>,
) -> Option<SpeakerAction> {
    let (sessions, bfd) = (vtysh.bgp_sessions().await, vtysh.bfd_sessions().await);
    status.send_if_modified(|s| {
        let mut changed = false;
        if let Ok(v) = sessions
            && s.sessions != v
        {
            s.sessions = v;
            changed = true;
        }
        if let Ok(v) = bfd
            && s.bfd != v
        {
            s.bfd = v;
            changed = true;
        }
        changed
    });
    let asn = speaker.asn()?;
    let held = speaker.held()?.clone();
    let table = match vtysh.bgp_table().await {
        Ok(t) => t,
        Err(e) => {
            tracing::debug!(error = %e, "cannot read FRR's BGP table");
            return None;
        }
    };
    if table.local_as != Some(asn) {
        tracing::warn!(
            asn,
            found = ?table.local_as,
            "FRR lost its BGP instance (a daemon restarted?); configuring it again"
        );
        *drift = None;
        return speaker.lost();
    }
    if table.originated == held {
        *drift = None;
        return None;
    }
    if drift.as_ref() == Some(&table.originated) {
        tracing::warn!("FRR originates other prefixes than vipflow gave it; writing them again");
        *drift = None;
        return speaker.read(table.originated);
    }
    *drift = Some(table.originated);
    None
}
