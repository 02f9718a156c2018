//! FRR as the node's BGP speaker, driven through `vtysh`: a change goes in as one `vtysh -f`
//! batch ([`crate::plan::bgp::frr_batch`]), and what FRR holds is read back as its own JSON.
//!
//! What bgpd originates itself is read from `show bgp <family> unicast json`: the prefixes with
//! a path of its own (no peer: `peerId` `(unspec)`), not the routes it learned. An agent that
//! starts reads it first and takes it as what is held, so a restart withdraws nothing that is
//! still planned (FRR outlives the agent).

use ipnet::IpNet;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;
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
    #[error("FRR's answer to {what} is not what vipflow reads: {detail}")]
    Answer { what: &'static str, detail: String },
}

/// The prefixes bgpd originates itself in one `show bgp <family> unicast json` answer.
pub fn originated(json: &str) -> Result<BTreeSet<IpNet>, FrrError> {
    let bad = |detail: String| FrrError::Answer {
        what: "show bgp unicast json",
        detail,
    };
    let v: Value = serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
    let Some(routes) = v.get("routes") else {
        // An address family with nothing in it is answered without `routes`.
        return Ok(BTreeSet::new());
    };
    let routes = routes
        .as_object()
        .ok_or_else(|| bad("`routes` is not an object".into()))?;
    let mut out = BTreeSet::new();
    for (prefix, paths) in routes {
        let own = paths
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["peerId"] == "(unspec)"));
        if own {
            out.insert(
                prefix
                    .parse()
                    .map_err(|_| bad(format!("{prefix:?} is not a prefix")))?,
            );
        }
    }
    Ok(out)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_bgpd_originates_is_read_from_its_json_and_learned_routes_are_not() {
        // As FRR 8.4 answers `show bgp ipv4 unicast json` with one network of its own and
        // one route learned from a peer.
        let json = r#"{"vrfId": 0, "localAS": 64513, "routes": {
            "198.51.100.1/32": [{"valid":true,"bestpath":true,"pathFrom":"external",
                "network":"198.51.100.1/32","weight":32768,"peerId":"(unspec)","path":""}],
            "0.0.0.0/0": [{"valid":true,"bestpath":true,"pathFrom":"external",
                "network":"0.0.0.0/0","weight":0,"peerId":"10.9.0.1","path":"64512"}]
        }}"#;
        let got = originated(json).expect("FRR's JSON");
        assert_eq!(
            got.into_iter().map(|n| n.to_string()).collect::<Vec<_>>(),
            ["198.51.100.1/32"]
        );
        // An empty family has no `routes`.
        assert!(originated(r#"{"vrfId": 0}"#).expect("empty").is_empty());
    }

    #[test]
    fn an_answer_vipflow_cannot_read_is_an_error_not_a_panic() {
        for bad in [
            "",
            "not json",
            r#"{"routes": []}"#,
            r#"{"routes": {"nope": [{"peerId": "(unspec)"}]}}"#,
        ] {
            assert!(originated(bad).is_err(), "{bad:?}");
        }
        // A path list of another shape names no path of bgpd's own.
        assert!(
            originated(r#"{"routes": {"198.51.100.1/32": {"x": 1}}}"#)
                .expect("read")
                .is_empty()
        );
    }
}
