//! The fence: a node whose agent dies stops answering ARP/ND for its VIPs at once, before the
//! others find the agent gone and take them.
//!
//! The answers are flows on the switch, and a switch keeps its flows when the process that
//! wrote them dies; without a fence, a killed agent's node would answer beside the VIP's new
//! owner until its agent came back. OpenFlow has nothing that removes a controller's flows when
//! it disconnects, and its timeouts count whole seconds, so the fence is a process of its own:
//! the agent starts `vipflow fence` beside it, in a process group of its own, and tells it on
//! its standard input which VIPs it answers for. When that input ends (the agent exited, was
//! killed, or crashed) the fence deletes those answers from every announcing bridge, by cookie,
//! and exits. The other flows stay, the bypass that keeps OVN from answering included. A fence
//! that dies is started again; one that outlives a graceful stop deletes answers that the stop
//! already withdrew, which changes nothing.
//!
//! The agent tells the fence before the bridges get a plan, and names the VIPs of the last
//! two plans, so that an answer on its way to a switch is always one the fence knows.

use crate::plan::flows::{answer_keys, cookie};
use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::net::IpAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The cookies of the answer flows for `vips` under `cookie_prefix`.
pub fn answer_cookies(cookie_prefix: u16, vips: &BTreeSet<IpAddr>) -> Vec<u64> {
    vips.iter()
        .flat_map(|v| answer_keys(*v))
        .map(|k| cookie(cookie_prefix, &k.to_string()))
        .collect()
}

/// One line of the agent's input to the fence: the VIPs it answers for, space-separated.
pub fn encode_line(vips: &BTreeSet<IpAddr>) -> String {
    let mut s = String::from("vips");
    for v in vips {
        s.push(' ');
        s.push_str(&v.to_string());
    }
    s.push('\n');
    s
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FenceLineError {
    #[error("fence input line does not start with `vips`")]
    Head,
    #[error("fence input names {0:?}, not an IP address")]
    Address(String),
}

/// The VIPs one input line names.
pub fn decode_line(line: &str) -> Result<BTreeSet<IpAddr>, FenceLineError> {
    let mut words = line.split_whitespace();
    if words.next() != Some("vips") {
        return Err(FenceLineError::Head);
    }
    words
        .map(|w| {
            w.parse::<IpAddr>()
                .map_err(|_| FenceLineError::Address(w.chars().take(64).collect()))
        })
        .collect()
}

/// What the fence process needs: the bridges' OpenFlow targets and the agent's cookie prefix.
#[derive(Debug, Clone)]
pub struct FenceTargets {
    pub targets: Vec<String>,
    pub cookie_prefix: u16,
}

/// Set by the `vipflow` binary: only it can start `vipflow fence` from its own executable (a
/// test harness that runs the agent in-process would start itself).
static ENABLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Let agents in this process start the fence.
pub fn enable() {
    ENABLED.store(true, std::sync::atomic::Ordering::Relaxed);
}

impl FenceTargets {
    /// The announcing bridges of `cfg`, when the fence is enabled, a bridge announces and the
    /// membership runs. Without the membership no other node takes a VIP while its owner's Node
    /// is Ready, so a stopped or killed agent's answers stay, as every other flow does: the
    /// node goes on carrying its VIPs while the agent restarts.
    pub fn of(cfg: &crate::config::Config) -> Option<FenceTargets> {
        if !ENABLED.load(std::sync::atomic::Ordering::Relaxed) || cfg.membership.key_file.is_none()
        {
            return None;
        }
        let announcing = crate::announce::Announcing::of(cfg);
        let targets: Vec<String> = cfg
            .bridges
            .iter()
            .filter(|b| announcing.bridge(&b.name))
            .map(|b| b.target(&cfg.ovs_rundir))
            .collect();
        (!targets.is_empty()).then_some(FenceTargets {
            targets,
            cookie_prefix: cfg.cookie_prefix,
        })
    }
}

/// The agent's side: starts the fence and keeps it told. Dropping it leaves the fence running
/// until this process exits (its input closes then).
pub struct FenceKeeper {
    tx: mpsc::Sender<BTreeSet<IpAddr>>,
}

impl FenceKeeper {
    /// Start the fence for `targets` (the announcing bridges); its log goes to this process's
    /// standard error.
    pub fn start(targets: FenceTargets) -> FenceKeeper {
        let (tx, rx) = mpsc::channel::<BTreeSet<IpAddr>>();
        // A thread of its own: writes to a pipe block, and a fence that died is started again
        // without the planner waiting.
        let spawned = std::thread::Builder::new()
            .name("vipflow-fence".into())
            .spawn(move || keep(targets, rx));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "fence not started: a killed agent's node keeps answering until the agent is back");
        }
        FenceKeeper { tx }
    }

    /// The VIPs this node answers for now (or is about to).
    pub fn note(&self, vips: BTreeSet<IpAddr>) {
        // The thread only ends with the process.
        let _ = self.tx.send(vips);
    }
}

fn spawn(targets: &FenceTargets) -> std::io::Result<(Child, ChildStdin)> {
    let exe = std::env::current_exe()?;
    let mut c = Command::new(exe);
    c.arg("fence")
        .arg("--cookie-prefix")
        .arg(format!("0x{:04x}", targets.cookie_prefix));
    for t in &targets.targets {
        c.arg("--target").arg(t);
    }
    c.stdin(Stdio::piped()).stdout(Stdio::null());
    // Out of the agent's process group: a Ctrl-C at a terminal reaches the agent, which stops
    // in order, and not the fence.
    std::os::unix::process::CommandExt::process_group(&mut c, 0);
    let mut child = c.spawn()?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("the fence's standard input is not piped"))?;
    Ok((child, stdin))
}

fn keep(targets: FenceTargets, rx: mpsc::Receiver<BTreeSet<IpAddr>>) {
    let mut fence: Option<(Child, ChildStdin)> = None;
    let mut prev: BTreeSet<IpAddr> = BTreeSet::new();
    let mut last_line = encode_line(&prev);
    let mut failed_at: Option<Instant> = None;
    loop {
        // Wake now and then to start a fence that could not be started.
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(mut vips) => {
                // Any later sets queued: the newest counts, beside the one before it.
                while let Ok(v) = rx.try_recv() {
                    prev.extend(std::mem::replace(&mut vips, v));
                }
                let both: BTreeSet<IpAddr> = prev.union(&vips).copied().collect();
                last_line = encode_line(&both);
                prev = vips;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        if let Some((child, _)) = &mut fence
            && !matches!(child.try_wait(), Ok(None))
        {
            tracing::warn!("the fence exited; starting it again");
            fence = None;
        }
        if fence.is_none() {
            if failed_at.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
                continue;
            }
            match spawn(&targets) {
                Ok(f) => {
                    failed_at = None;
                    fence = Some(f);
                }
                Err(e) => {
                    failed_at = Some(Instant::now());
                    tracing::error!(error = %e, "fence not started: a killed agent's node keeps answering until the agent is back");
                    continue;
                }
            }
        }
        if let Some((_, stdin)) = &mut fence
            && let Err(e) = stdin
                .write_all(last_line.as_bytes())
                .and_then(|()| stdin.flush())
        {
            tracing::warn!(error = %e, "the fence stopped listening; starting it again");
            fence = None;
        }
    }
}

/// The fence process: read the agent's lines until its input ends, then delete the answers
/// the last line named from every target. Returns how many answer flows it asked each target
/// to delete.
pub async fn run(targets: FenceTargets, openflow: openflow::Config) -> Vec<(String, usize)> {
    let (tx, mut rx) = tokio::sync::watch::channel(BTreeSet::<IpAddr>::new());
    // Blocking reads on a thread: standard input ends when the agent is gone, however it went.
    let reader = std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            match decode_line(&line) {
                Ok(v) => {
                    tx.send_replace(v);
                }
                Err(e) => tracing::warn!(error = %e, "fence input line ignored"),
            }
        }
    });
    while rx.changed().await.is_ok() {}
    let _ = reader.join();
    let vips = rx.borrow().clone();
    let cookies = answer_cookies(targets.cookie_prefix, &vips);
    let started = Instant::now();
    let mut done = Vec::new();
    for t in &targets.targets {
        let n = fence_one(t, &cookies, openflow.clone()).await;
        done.push((t.clone(), n));
    }
    tracing::info!(
        vips = vips.len(),
        took_ms = started.elapsed().as_millis() as u64,
        "fence: the agent is gone; its ARP/ND answers are off the switch"
    );
    done
}

async fn fence_one(target: &str, cookies: &[u64], openflow: openflow::Config) -> usize {
    if cookies.is_empty() {
        return 0;
    }
    let conn = match tokio::time::timeout(
        Duration::from_secs(2),
        openflow::Connection::connect(target, openflow),
    )
    .await
    {
        Ok(Ok((conn, _events))) => conn,
        Ok(Err(e)) => {
            tracing::warn!(target, error = %e, "fence: the switch cannot be reached (its answers went with it)");
            return 0;
        }
        Err(_) => {
            tracing::warn!(target, "fence: the switch did not answer within 2 s");
            return 0;
        }
    };
    let msgs: Vec<openflow::Message> = cookies
        .iter()
        .map(|c| openflow::Message::FlowMod(openflow::FlowMod::delete_by_cookie(*c, u64::MAX)))
        .collect();
    match crate::reconcile::bridge::apply_bundle(&conn, msgs).await {
        Ok(rejected) => {
            for r in rejected {
                tracing::warn!(target, "fence: {r}");
            }
            cookies.len()
        }
        Err(e) => {
            tracing::warn!(target, error = %e, "fence: the answers could not be deleted");
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_says_the_vips_and_anything_else_is_refused() {
        let vips: BTreeSet<IpAddr> = ["172.18.0.100", "fd00:18::100"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(decode_line(&encode_line(&vips)), Ok(vips));
        assert_eq!(decode_line("vips\n"), Ok(BTreeSet::new()));
        assert_eq!(decode_line("hello 1.2.3.4"), Err(FenceLineError::Head));
        assert_eq!(
            decode_line("vips 1.2.3.4 nope"),
            Err(FenceLineError::Address("nope".into()))
        );
    }

    #[test]
    fn the_cookies_are_those_of_the_answer_flows_the_planner_makes() {
        let vips: BTreeSet<IpAddr> = ["172.18.0.100", "fd00:18::100"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let c = answer_cookies(0x7f1f, &vips);
        // One ARP answer, and the two steps of the ND answer.
        assert_eq!(c.len(), 3);
        assert!(c.iter().all(|c| c >> 48 == 0x7f1f));
        assert_eq!(c[0], cookie(0x7f1f, "arp answer 172.18.0.100"));
    }
}
