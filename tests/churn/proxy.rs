//! A unix-socket relay between the agent and a bridge's management socket that can cut the
//! OpenFlow connection in the middle of a bundle: after the n-th ONF BUNDLE_ADD of a bundle it
//! closes both sides and stops listening for a while (the switch "gone"), then listens again.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const OFPT_EXPERIMENTER: u8 = 4;
const ONF_EXPERIMENTER_ID: u32 = 0x4f4e_4600;
const ONFT_BUNDLE_CONTROL: u32 = 2300;
const ONFT_BUNDLE_ADD: u32 = 2301;

#[derive(Default)]
struct Shared {
    /// Cut on this BUNDLE_ADD of the current bundle (0: never).
    cut_at: AtomicUsize,
    /// Set when a cut happened; the listener drops its socket until `back`.
    cut: AtomicBool,
    back: Mutex<Option<Instant>>,
    /// When the listener was bound again after a cut.
    rebound: Mutex<Option<Instant>>,
    hold: Mutex<Duration>,
    stop: AtomicBool,
}

pub struct CutProxy {
    pub path: PathBuf,
    shared: Arc<Shared>,
}

impl CutProxy {
    pub fn start(path: &Path, upstream: &Path) -> CutProxy {
        let shared = Arc::new(Shared::default());
        let (p, up, s) = (path.to_path_buf(), upstream.to_path_buf(), shared.clone());
        std::thread::spawn(move || listen(&p, &up, &s));
        for _ in 0..200 {
            if path.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        CutProxy {
            path: path.to_path_buf(),
            shared,
        }
    }

    /// Cut the connection on the n-th BUNDLE_ADD of a bundle and keep the switch away for
    /// `hold`.
    pub fn arm(&self, n: usize, hold: Duration) {
        *self.shared.hold.lock().unwrap() = hold;
        self.shared.cut.store(false, Ordering::SeqCst);
        self.shared.cut_at.store(n, Ordering::SeqCst);
    }

    pub fn was_cut(&self) -> bool {
        self.shared.cut.load(Ordering::SeqCst)
    }

    /// The moment the relay listened again after the cut.
    pub fn rebound(&self) -> Option<Instant> {
        *self.shared.rebound.lock().unwrap()
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
    }
}

fn listen(path: &Path, upstream: &Path, s: &Arc<Shared>) {
    let _ = std::fs::remove_file(path);
    let Ok(mut l) = UnixListener::bind(path) else {
        return;
    };
    let _ = l.set_nonblocking(true);
    while !s.stop.load(Ordering::SeqCst) {
        let back = *s.back.lock().unwrap();
        if let Some(at) = back {
            // Cut: no socket until the switch is "back".
            if Instant::now() < at {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            let Ok(nl) = UnixListener::bind(path) else {
                return;
            };
            let _ = nl.set_nonblocking(true);
            l = nl;
            *s.back.lock().unwrap() = None;
            *s.rebound.lock().unwrap() = Some(Instant::now());
        }
        match l.accept() {
            Ok((agent, _)) => {
                let _ = agent.set_nonblocking(false);
                let Ok(switch) = UnixStream::connect(upstream) else {
                    continue;
                };
                relay(agent, switch, s.clone(), path.to_path_buf());
            }
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
    let _ = std::fs::remove_file(path);
}

fn relay(agent: UnixStream, switch: UnixStream, s: Arc<Shared>, path: PathBuf) {
    let (Ok(mut a2), Ok(mut s2)) = (agent.try_clone(), switch.try_clone()) else {
        return;
    };
    // Switch to agent: plain copy.
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut s2, &mut a2);
        let _ = a2.shutdown(std::net::Shutdown::Both);
    });
    // Agent to switch: message by message, counting bundle adds.
    std::thread::spawn(move || {
        let (mut agent, mut switch) = (agent, switch);
        let mut adds = 0usize;
        loop {
            let mut head = [0u8; 8];
            if agent.read_exact(&mut head).is_err() {
                break;
            }
            let len = u16::from_be_bytes([head[2], head[3]]) as usize;
            let mut body = vec![0u8; len.saturating_sub(8)];
            if agent.read_exact(&mut body).is_err() {
                break;
            }
            let onf_type = (head[1] == OFPT_EXPERIMENTER
                && body.len() >= 8
                && u32::from_be_bytes([body[0], body[1], body[2], body[3]]) == ONF_EXPERIMENTER_ID)
                .then(|| u32::from_be_bytes([body[4], body[5], body[6], body[7]]));
            if onf_type == Some(ONFT_BUNDLE_CONTROL) {
                adds = 0;
            }
            if onf_type == Some(ONFT_BUNDLE_ADD) {
                adds += 1;
                let n = s.cut_at.load(Ordering::SeqCst);
                if n > 0 && adds == n {
                    // Gone mid-bundle: the switch never sees the rest nor the commit.
                    s.cut_at.store(0, Ordering::SeqCst);
                    let hold = *s.hold.lock().unwrap();
                    *s.back.lock().unwrap() = Some(Instant::now() + hold);
                    let _ = std::fs::remove_file(&path);
                    s.cut.store(true, Ordering::SeqCst);
                    let _ = agent.shutdown(std::net::Shutdown::Both);
                    let _ = switch.shutdown(std::net::Shutdown::Both);
                    break;
                }
            }
            if switch.write_all(&head).is_err() || switch.write_all(&body).is_err() {
                break;
            }
        }
        let _ = switch.shutdown(std::net::Shutdown::Both);
    });
}
