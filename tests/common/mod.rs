//! Shared by the agent integration tests: the agent on a file source, in a sandbox.
#![allow(dead_code)]

pub mod expect;

use std::path::{Path, PathBuf};
use std::time::Duration;
use testkit::Sandbox;
use vipflow::agent::{self, Running};
use vipflow::config::Config;
use vipflow::source::file;

// The tests find the agent's flows by testkit's prefix: it is the agent's default.
const _: () = assert!(testkit::COOKIE_PREFIX == vipflow::config::DEFAULT_COOKIE_PREFIX);

/// A `vipflow agent` process whose output goes to a log file; killed (SIGKILL: everything it
/// programmed stays) when dropped.
pub struct LoggedAgent {
    child: std::process::Child,
    log: PathBuf,
}

impl LoggedAgent {
    pub fn new(child: std::process::Child, log: PathBuf) -> LoggedAgent {
        LoggedAgent { child, log }
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for LoggedAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Replace the objects file atomically, as an editor or a config-map update would.
pub fn write_objects(path: &Path, yaml: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, yaml).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Run the `vipflow` binary with `args`; its standard output, once it exited 0 (else the test
/// fails with its standard error).
pub fn vipflow_ok<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vipflow"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// examples/services.yaml.
pub fn base_yaml() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/services.yaml"))
        .unwrap()
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

/// `kubectl get svc,endpointslices -A -o yaml` of `n` LoadBalancer Services made with
/// `kubectl apply` (each carries its last-applied configuration, as such dumps do) and their
/// EndpointSlices.
pub fn kubectl_dump(n: usize, applied: bool) -> String {
    use std::fmt::Write;
    let mut s = String::from("apiVersion: v1\nitems:\n");
    for i in 0..n {
        let (a, b) = (i / 250, i % 250 + 1);
        let (name, ns) = (format!("svc{i}"), format!("team{}", i % 50));
        let last = format!(
            r#"{{"apiVersion":"v1","kind":"Service","metadata":{{"annotations":{{}},"labels":{{"app":"{name}","tier":"web"}},"name":"{name}","namespace":"{ns}"}},"spec":{{"externalTrafficPolicy":"Cluster","loadBalancerSourceRanges":[{ranges}],"ports":[{{"name":"http","port":80,"protocol":"TCP","targetPort":8080}},{{"name":"https","port":443,"protocol":"TCP","targetPort":8443}}],"selector":{{"app":"{name}"}},"type":"LoadBalancer"}}}}"#,
            ranges = vec![r#""10.0.0.0/8""#; 280].join(",")
        );
        let annotations = if applied {
            format!(
                "    annotations:\n      kubectl.kubernetes.io/last-applied-configuration: |\n        {last}\n"
            )
        } else {
            String::new()
        };
        let _ = write!(
            s,
            "- apiVersion: v1
  kind: Service
  metadata:
{annotations}    creationTimestamp: \"2026-01-10T08:00:00Z\"
    labels:
      app: {name}
      tier: web
    name: {name}
    namespace: {ns}
    resourceVersion: \"{rv}\"
    uid: 6f1c2d3e-0000-4000-8000-{i:012}
  spec:
    allocateLoadBalancerNodePorts: true
    clusterIP: 10.96.{a}.{b}
    clusterIPs:
    - 10.96.{a}.{b}
    externalTrafficPolicy: Cluster
    internalTrafficPolicy: Cluster
    ipFamilies:
    - IPv4
    ipFamilyPolicy: SingleStack
    ports:
    - name: http
      nodePort: {np1}
      port: 80
      protocol: TCP
      targetPort: 8080
    - name: https
      nodePort: {np2}
      port: 443
      protocol: TCP
      targetPort: 8443
    selector:
      app: {name}
    sessionAffinity: None
    type: LoadBalancer
  status:
    loadBalancer:
      ingress:
      - ip: 172.{c}.{a2}.{b}
        ipMode: VIP
- addressType: IPv4
  apiVersion: discovery.k8s.io/v1
  endpoints:
  - addresses:
    - 10.244.{a}.{b}
    conditions:
      ready: true
      serving: true
      terminating: false
    nodeName: node-a
    targetRef:
      kind: Pod
      name: {name}-7d9f8b6c5-x2k4p
      namespace: {ns}
      uid: 8a1c2d3e-0000-4000-8000-{i:012}
  kind: EndpointSlice
  metadata:
    generateName: {name}-
    labels:
      endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io
      kubernetes.io/service-name: {name}
    name: {name}-abcde
    namespace: {ns}
    ownerReferences:
    - apiVersion: v1
      blockOwnerDeletion: true
      controller: true
      kind: Service
      name: {name}
      uid: 6f1c2d3e-0000-4000-8000-{i:012}
    resourceVersion: \"{rv2}\"
    uid: 7f1c2d3e-0000-4000-8000-{i:012}
  ports:
  - name: http
    port: 8080
    protocol: TCP
  - name: https
    port: 8443
    protocol: TCP
",
            rv = 100_000 + i,
            rv2 = 200_000 + i,
            np1 = 30_000 + i % 2000,
            np2 = 32_000 + i % 700,
            c = 16 + a / 250,
            a2 = a % 250,
        );
    }
    s.push_str("kind: List\nmetadata:\n  resourceVersion: \"\"\n");
    s
}

/// A cluster-mode agent's configuration for node `node` on `sb`'s switch (with `nb`'s
/// Northbound database), its Lease in the default namespace and short.
pub fn cluster_config(sb: &Sandbox, node: &str, nb: Option<&Sandbox>) -> Config {
    let mut c = Config {
        node_name: node.into(),
        ovs_rundir: sb.path().to_path_buf(),
        nb_remote: nb.map(|n| format!("unix:{}", n.nb_sock().display())),
        ..Config::default()
    };
    c.lease.namespace = Some("default".into());
    c.lease.duration_seconds = 2;
    c
}

/// The cluster-mode options of agent `identity` against `kube`, in the default namespace.
pub fn cluster_options(
    kube: &testkit::kube_server::KubeServer,
    identity: &str,
) -> agent::ClusterOptions {
    agent::ClusterOptions {
        kubeconfig: Some(kube.kubeconfig_path().to_path_buf()),
        identity: identity.into(),
        namespace: "default".into(),
        events_per_second: 50.0,
        events_burst: 50,
        nb_backoff: None,
    }
}
