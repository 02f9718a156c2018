//! Shared by the agent integration tests: the agent on a file source, in a sandbox.
#![allow(dead_code)]

pub mod expect;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use testkit::Sandbox;
use vipflow::agent::{self, Running};
use vipflow::config::Config;
use vipflow::source::file;

/// Replace the objects file atomically, as an editor or a config-map update would.
pub fn write_objects(path: &Path, yaml: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, yaml).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// examples/services.yaml.
pub fn base_yaml() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/services.yaml"))
        .unwrap()
}

/// Poll `f` every 50 ms for up to `secs` seconds.
pub async fn eventually(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {what}");
}

/// A running agent on `<sandbox>/objects.yaml` (polled every 20 ms), programming the
/// sandbox's bridges and, with `nb`, its Northbound database.
pub struct Agent {
    pub sb: Sandbox,
    pub objects: PathBuf,
    pub cfg: Config,
    pub running: Running,
    _watcher: tokio::task::JoinHandle<()>,
}

impl Agent {
    pub async fn start(sb: Sandbox, nb: bool, edit: impl FnOnce(&mut Config), yaml: &str) -> Agent {
        let objects = sb.path().join("objects.yaml");
        write_objects(&objects, yaml);
        let mut cfg = Config {
            ovs_rundir: sb.path().to_path_buf(),
            objects: Some(objects.clone()),
            nb_remote: nb.then(|| format!("unix:{}", sb.nb_sock().display())),
            ..Config::default()
        };
        edit(&mut cfg);
        cfg.validate().unwrap();
        let (rx, watcher) = file::watch(objects.clone(), Duration::from_millis(20)).unwrap();
        let mut running = agent::start(cfg.clone(), rx);
        tokio::time::timeout(Duration::from_secs(20), running.wait_applied(1))
            .await
            .expect("first sync");
        Agent {
            sb,
            objects,
            cfg,
            running,
            _watcher: watcher,
        }
    }

    /// Write new objects and wait until every bridge (and the NB writer) applied the plan.
    pub async fn update(&mut self, yaml: &str) {
        let before = *self.running.generation.borrow();
        write_objects(&self.objects, yaml);
        let g = tokio::time::timeout(
            Duration::from_secs(10),
            self.running.generation.wait_for(|g| *g > before),
        )
        .await
        .expect("the file change was picked up")
        .map(|g| *g)
        .unwrap();
        tokio::time::timeout(Duration::from_secs(20), self.running.wait_applied(g))
            .await
            .expect("plan applied");
    }
}
