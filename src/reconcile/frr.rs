//! FRR as the node's BGP speaker, driven through `vtysh`: a change goes in as one `vtysh -f`
//! batch ([`crate::plan::bgp::frr_batch`]), and what FRR holds is read back as its own JSON
//! (read by the core's [`vipflow_core::bgp::frr_state`]: the prefixes, the BGP and BFD sessions).
//!
//! What bgpd originates itself is read from `show bgp <family> unicast json`: the prefixes with
//! a path of its own (no peer: `peerId` `(unspec)`), not the routes it learned. An agent that
//! starts reads it first and takes it as what is held, so a restart withdraws nothing that is
//! still planned (FRR outlives the agent).

use ipnet::IpNet;
use std::collections::BTreeSet;
use std::path::PathBuf;
use vipflow_core::bgp::frr_state::{
    BfdSession, BgpSession, FrrAnswerError, bfd_sessions, bgp_sessions, originated,
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

/// One FRR instance, reached through the directory of its vty sockets.
#[derive(Debug, Clone)]
pub struct Vtysh {
    /// `vtysh --vty_socket`: where bgpd's and zebra's vty sockets are.
    pub socket_dir: PathBuf,
    /// The vtysh program.
    pub program: PathBuf,
}

impl Vtysh {
    pub fn new(socket_dir: impl Into<PathBuf>) -> Vtysh {
        Vtysh {
            socket_dir: socket_dir.into(),
            program: PathBuf::from("vtysh"),
        }
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
        let mut child = c.spawn().map_err(run_err)?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(batch.as_bytes()).await.map_err(run_err)?;
        }
        let out = child.wait_with_output().await.map_err(run_err)?;
        if out.status.success() {
            Ok(())
        } else {
            Err(FrrError::Failed {
                what: WHAT,
                output: failed_output(&out),
            })
        }
    }

    /// Every prefix bgpd originates itself, both families.
    pub async fn originated(&self) -> Result<BTreeSet<IpNet>, FrrError> {
        let mut out = BTreeSet::new();
        for (family, what) in [
            ("ipv4", "show bgp ipv4 unicast json"),
            ("ipv6", "show bgp ipv6 unicast json"),
        ] {
            let mut c = self.command();
            c.args(["-c", &format!("show bgp {family} unicast json")]);
            out.extend(originated(&output_of(c, what).await?)?);
        }
        Ok(out)
    }

    /// Every BGP session, every family (`show bgp summary json`).
    pub async fn bgp_sessions(&self) -> Result<Vec<BgpSession>, FrrError> {
        const WHAT: &str = "show bgp summary json";
        let mut c = self.command();
        c.args(["-c", WHAT]);
        Ok(bgp_sessions(&output_of(c, WHAT).await?)?)
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
    let out = c
        .output()
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
    /// FRR was told what the plan wants (it takes a batch in the background: its tables
    /// follow within moments).
    pub current: bool,
    /// What FRR originates, as last read or written.
    pub originated: BTreeSet<IpNet>,
    /// Batches applied since the start.
    pub batches: u64,
    /// The last failure, in FRR's words or vtysh's.
    pub last_error: Option<String>,
}

/// How long to wait before asking FRR again after it could not be reached.
const RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Keep what the node's FRR originates equal to `wanted`, as [`Speaker`] decides: FRR is read
/// back before anything is written, then each change goes in as one batch. Ends when `wanted`'s
/// sender is gone.
pub async fn run(
    vtysh: Vtysh,
    asn: u32,
    mut wanted: tokio::sync::watch::Receiver<std::sync::Arc<BTreeSet<IpNet>>>,
    status: tokio::sync::watch::Sender<FrrStatus>,
) {
    let mut speaker = Speaker::new(asn);
    let mut next = speaker.want(wanted.borrow_and_update().as_ref().clone());
    loop {
        match next.take() {
            Some(SpeakerAction::ReadBack) => match vtysh.originated().await {
                Ok(held) => next = speaker.read(held),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read what FRR originates; trying again");
                    status.send_modify(|s| s.last_error = Some(e.to_string()));
                    tokio::time::sleep(RETRY).await;
                    next = Some(SpeakerAction::ReadBack);
                }
            },
            Some(SpeakerAction::Apply(batch)) => match vtysh.apply(&batch).await {
                Ok(()) => {
                    next = speaker.applied();
                    status.send_modify(|s| {
                        s.batches += 1;
                        s.last_error = None;
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "FRR refused part of a batch; reading back what it holds");
                    status.send_modify(|s| s.last_error = Some(e.to_string()));
                    next = speaker.failed();
                }
            },
            None => {
                let held = speaker.held().cloned().unwrap_or_default();
                let current = speaker.phase() == SpeakerPhase::Current;
                status.send_if_modified(|s| {
                    let changed = s.current != current || s.originated != held;
                    s.current = current;
                    s.originated = held;
                    changed
                });
                if wanted.changed().await.is_err() {
                    return;
                }
                next = speaker.want(wanted.borrow_and_update().as_ref().clone());
            }
        }
    }
}
