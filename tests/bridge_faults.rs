//! The bridge side against outside changes and a misbehaving switch: drift on a real
//! ovs-vswitchd repaired within a second; a switch that never answers a BARRIER, drops every
//! session right after the handshake, or never ends a multipart reply, met with a WARN, a
//! reconnect and bounded memory. The misbehaving switch is a relay in front of the real one
//! that changes exactly one thing.

mod common;

use common::expect::{default_resolved, expected_flows, ofctl_ours};
use common::{Agent, base_yaml};
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use testkit::{KillOnDrop, Sandbox};

async fn repaired_within(h: &Agent, limit: Duration) -> Duration {
    let b = &h.cfg.bridges[0];
    let want = expected_flows(&h.cfg, b, &base_yaml(), &default_resolved());
    let start = Instant::now();
    while start.elapsed() < limit {
        if ofctl_ours(&h.sb, "br-ex") == want {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("flows not repaired within {limit:?}");
}

fn drift_repairs(h: &Agent) -> u64 {
    h.running.status[0].1.borrow().drift_repairs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_deleted_or_changed_by_someone_else_are_put_back_within_a_second() {
    let sb = Sandbox::openflow_only();
    sb.ofctl(&[
        "add-flow",
        "br-ex",
        "cookie=0x1234,priority=7,ip,nw_dst=192.0.2.9 actions=drop",
    ]);
    let h = Agent::start(sb, false, |_| {}, &base_yaml()).await;
    repaired_within(&h, Duration::from_secs(5)).await;

    // Left alone, the audit finds nothing to repair.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(drift_repairs(&h), 0, "no drift seen where there is none");

    // One of ours deleted.
    let one = ofctl_ours(&h.sb, "br-ex")
        .into_iter()
        .find(|l| l.contains("arp"))
        .unwrap();
    let m = one.split_once(' ').unwrap().1;
    let m = m.split(" actions=").next().unwrap().to_string();
    h.sb.ofctl(&["--strict", "del-flows", "br-ex", &m]);
    let t = repaired_within(&h, Duration::from_secs(10)).await;
    println!("one of vipflow's flows deleted: put back in {t:?}");
    assert!(t < Duration::from_secs(10));

    // One of ours changed (its actions).
    h.sb.ofctl(&[
        "--strict",
        "mod-flows",
        "br-ex",
        &format!("{m},actions=drop"),
    ]);
    let t = repaired_within(&h, Duration::from_secs(10)).await;
    println!("one of vipflow's flows changed: put back in {t:?}");

    // The whole bridge wiped.
    h.sb.ofctl(&["del-flows", "br-ex"]);
    let t = repaired_within(&h, Duration::from_secs(10)).await;
    println!("ovs-ofctl del-flows br-ex: vipflow's flows back in {t:?}");
    assert_eq!(drift_repairs(&h), 3);
}

/// A relay between the agent and the real br-ex.mgmt that can drop the agent's BARRIER
/// requests, close each session right after it was set up, or answer the agent's flow dump
/// with a multipart reply that never ends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Misbehaviour {
    SwallowBarrier,
    CloseAfterSetup,
    EndlessMultipart,
}

struct Relay {
    path: PathBuf,
    sessions: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Relay {
    fn start(dir: &Path, upstream: PathBuf, how: Misbehaviour) -> Relay {
        let path = dir.join("relay.mgmt");
        let l = UnixListener::bind(&path).unwrap();
        l.set_nonblocking(true).unwrap();
        let sessions = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (n, st) = (sessions.clone(), stop.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                let Ok((agent, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                };
                let _ = agent.set_nonblocking(false);
                let Ok(switch) = UnixStream::connect(&upstream) else {
                    continue;
                };
                n.fetch_add(1, Ordering::SeqCst);
                relay(agent, switch, how);
            }
        });
        Relay {
            path,
            sessions,
            stop,
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

const OFPT_BARRIER_REQUEST: u8 = 20;
const OFPT_MULTIPART_REQUEST: u8 = 18;
const OFPT_MULTIPART_REPLY: u8 = 19;
const OFPMP_FLOW: u16 = 1;

fn read_msg(s: &mut UnixStream) -> Option<Vec<u8>> {
    let mut head = [0u8; 8];
    s.read_exact(&mut head).ok()?;
    let len = usize::from(u16::from_be_bytes([head[2], head[3]])).max(8);
    let mut msg = head.to_vec();
    msg.resize(len, 0);
    s.read_exact(&mut msg[8..]).ok()?;
    Some(msg)
}

fn relay(agent: UnixStream, switch: UnixStream, how: Misbehaviour) {
    let (Ok(mut a2), Ok(mut s2)) = (agent.try_clone(), switch.try_clone()) else {
        return;
    };
    let a3 = agent.try_clone().ok();
    std::thread::spawn(move || {
        let mut replies = 0;
        while let Some(m) = read_msg(&mut s2) {
            if a2.write_all(&m).is_err() {
                break;
            }
            if m[1] == OFPT_MULTIPART_REPLY {
                replies += 1;
            }
            // The second multipart reply is the flow dump of the first sync: the session was
            // fully set up, then it drops.
            if how == Misbehaviour::CloseAfterSetup && replies == 2 {
                std::thread::sleep(Duration::from_millis(20));
                let _ = a2.shutdown(std::net::Shutdown::Both);
                let _ = s2.shutdown(std::net::Shutdown::Both);
                break;
            }
        }
        let _ = a2.shutdown(std::net::Shutdown::Both);
    });
    std::thread::spawn(move || {
        let (mut agent, mut switch) = (agent, switch);
        while let Some(m) = read_msg(&mut agent) {
            if how == Misbehaviour::SwallowBarrier && m[1] == OFPT_BARRIER_REQUEST {
                continue;
            }
            if how == Misbehaviour::EndlessMultipart
                && m[1] == OFPT_MULTIPART_REQUEST
                && m.len() >= 10
                && u16::from_be_bytes([m[8], m[9]]) == OFPMP_FLOW
            {
                // One empty flow-stats part after another, each saying "more".
                let Some(mut out) = a3.as_ref().and_then(|a| a.try_clone().ok()) else {
                    break;
                };
                // An OpenFlow 1.3 flow-stats reply part with no flows: header, type, flags
                // (OFPMPF_REPLY_MORE), pad.
                let mut part = [0u8; 16];
                part[0] = 4;
                part[1] = OFPT_MULTIPART_REPLY;
                part[2..4].copy_from_slice(&16u16.to_be_bytes());
                part[4..8].copy_from_slice(&m[4..8]);
                part[8..10].copy_from_slice(&OFPMP_FLOW.to_be_bytes());
                part[10..12].copy_from_slice(&1u16.to_be_bytes());
                let burst: Vec<u8> = part.repeat(4096);
                while out.write_all(&burst).is_ok() {}
                break;
            }
            if switch.write_all(&m).is_err() {
                break;
            }
        }
        let _ = switch.shutdown(std::net::Shutdown::Both);
    });
}

/// `vipflow agent` on `sb`, talking to br-ex through `target`, logging to `log`.
fn agent_process(sb: &Sandbox, target: &Path, log: &Path, extra: &[&str]) -> Child {
    let objects = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/services.yaml");
    let f = std::fs::File::create(log).unwrap();
    let cfg = sb.path().join("vipflow.yaml");
    std::fs::write(
        &cfg,
        format!(
            "bridges:\n- name: br-ex\n  target: unix:{}\n",
            target.display()
        ),
    )
    .unwrap();
    Command::new(env!("CARGO_BIN_EXE_vipflow"))
        .arg("agent")
        .arg("--config")
        .arg(&cfg)
        .arg("--objects")
        .arg(&objects)
        .args(["--node-name", "node-a"])
        .arg("--ovs-rundir")
        .arg(sb.path())
        .args(extra)
        .env("VIPFLOW_LOG", "info")
        .stdin(Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .unwrap()
}

fn wait_log(log: &Path, needle: &str, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if std::fs::read_to_string(log)
            .unwrap_or_default()
            .contains(needle)
        {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

#[test]
fn a_barrier_never_answered_is_warned_about_and_the_connection_made_again() {
    let sb = Sandbox::openflow_only();
    let relay = Relay::start(
        sb.path(),
        sb.mgmt_sock("br-ex"),
        Misbehaviour::SwallowBarrier,
    );
    let log = sb.path().join("agent.log");
    let _agent = KillOnDrop(agent_process(
        &sb,
        &relay.path,
        &log,
        &["--openflow-timeout-ms", "1000"],
    ));
    let took = wait_log(&log, "no reply within", Duration::from_secs(20)).unwrap_or_else(|| {
        panic!(
            "no WARN about the unanswered request:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    });
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let line = text
        .lines()
        .find(|l| l.contains("no reply within"))
        .unwrap_or_default();
    assert!(line.contains("WARN"), "{line}");
    let t0 = Instant::now();
    while relay.sessions.load(Ordering::SeqCst) < 2 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        relay.sessions.load(Ordering::SeqCst) >= 2,
        "connected again"
    );
    println!(
        "BARRIER never answered (timeout 1 s): WARN {took:?} after the start, then a new session: {line}"
    );
}

#[test]
fn a_switch_that_drops_every_session_once_set_up_is_not_hammered() {
    let sb = Sandbox::openflow_only();
    let relay = Relay::start(
        sb.path(),
        sb.mgmt_sock("br-ex"),
        Misbehaviour::CloseAfterSetup,
    );
    let log = sb.path().join("agent.log");
    let _agent = KillOnDrop(agent_process(&sb, &relay.path, &log, &[]));
    std::thread::sleep(Duration::from_secs(2));
    let n = relay.sessions.load(Ordering::SeqCst);
    println!("sessions dropped right after they were set up: {n} connections in 2 s");
    assert!(n <= 6, "{n} connections in 2 s: a reconnect storm");
    assert!(n >= 2, "it does try again: {n}");
}

#[test]
fn a_multipart_reply_that_never_ends_is_cut_off_with_bounded_memory() {
    let sb = Sandbox::openflow_only();
    let relay = Relay::start(
        sb.path(),
        sb.mgmt_sock("br-ex"),
        Misbehaviour::EndlessMultipart,
    );
    let log = sb.path().join("agent.log");
    let agent = KillOnDrop(agent_process(&sb, &relay.path, &log, &[]));
    let took = wait_log(
        &log,
        "multipart reply over the limit",
        Duration::from_secs(30),
    )
    .unwrap_or_else(|| {
        panic!(
            "no WARN about the endless reply:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    });
    std::thread::sleep(Duration::from_millis(500));
    let peak = testkit::proc_status_kib(agent.0.id(), "VmHWM:");
    println!(
        "endless multipart reply: cut off {took:?} after the start; agent peak memory {} MiB",
        peak / 1024
    );
    assert!(peak > 0 && peak < 256 * 1024, "peak {peak} KiB");
}
