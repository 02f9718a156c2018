//! Misconfiguration is said, not left to show as missing flows: an `--uplink` that is not on
//! the bridge is a WARN naming it (and `--once` fails), a missing `--node-name` a WARN at start.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use testkit::Sandbox;

fn objects() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/services.yaml")
}

fn once(sb: &Sandbox, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vipflow"))
        .args(["agent", "--once", "--objects"])
        .arg(objects())
        .arg("--ovs-rundir")
        .arg(sb.path())
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn once_with_an_uplink_not_on_the_bridge_fails_naming_it_and_how_to_list_ports() {
    let sb = Sandbox::openflow_only();
    let out = once(&sb, &["--node-name", "node-a", "--uplink", "eth9"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exit 0 with no flows: {err}");
    assert!(
        err.contains("port eth9 not on br-ex") && err.contains("ovs-vsctl list-ports br-ex"),
        "{err}"
    );
    // The right name works.
    let out = once(&sb, &["--node-name", "node-a", "--uplink", "eth0"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Run the long-running agent for a moment; its log.
fn agent_log(sb: &Sandbox, extra: &[&str], until: &str) -> String {
    let log = sb.path().join("agent.log");
    let f = std::fs::File::create(&log).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_vipflow"))
        .args(["agent", "--objects"])
        .arg(objects())
        .arg("--ovs-rundir")
        .arg(sb.path())
        .args(extra)
        .env("VIPFLOW_LOG", "info")
        .env_remove("NODE_NAME")
        .stdin(Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .unwrap();
    let start = Instant::now();
    let mut text = String::new();
    while start.elapsed() < Duration::from_secs(20) {
        text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains(until) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    text
}

#[test]
fn a_running_agent_warns_about_an_uplink_not_on_the_bridge() {
    let sb = Sandbox::openflow_only();
    let text = agent_log(
        &sb,
        &["--node-name", "node-a", "--uplink", "eth9"],
        "port eth9 not on br-ex",
    );
    let line = text
        .lines()
        .find(|l| l.contains("port eth9 not on br-ex"))
        .unwrap_or_else(|| panic!("no word about eth9:\n{text}"));
    assert!(
        line.contains("WARN") && line.contains("list-ports"),
        "{line}"
    );
}

#[test]
fn an_agent_without_a_node_name_warns_at_start() {
    let sb = Sandbox::openflow_only();
    let text = agent_log(&sb, &[], "no --node-name");
    let line = text
        .lines()
        .find(|l| l.contains("no --node-name"))
        .unwrap_or_else(|| panic!("nothing said:\n{text}"));
    assert!(
        line.contains("WARN") && line.contains("NODE_NAME"),
        "{line}"
    );
    // Given, nothing is said.
    let text = agent_log(&sb, &["--node-name", "node-a"], "synced");
    assert!(text.contains("synced"), "{text}");
    assert!(!text.contains("no --node-name"), "{text}");
}
