//! deploy/: every manifest is validated offline against Kubernetes' own schemas (the
//! `kubernetes-validate` package, strict: unknown fields are errors), and checked for what the
//! agent depends on: host network, the OVS and OVN socket directories, the node name from the
//! downward API, probes on the HTTP port, a restrictive securityContext, least-privilege RBAC,
//! and a config file that vipflow's own loader accepts.
//!
//! deploy/bgp, the kustomize Component that puts FRR beside every agent, is rendered onto the
//! base (and held to kustomize's own rendering where kustomize or kubectl is installed), and
//! its DaemonSet validated and checked the same way; as root with FRR installed, the frr
//! container's own command and probes run on this machine's FRR with exactly its capabilities.
//!
//! The validator is installed by scripts/install-deps.sh into target-tools/venv. Under CI
//! (`CI` set) a missing validator fails the test; elsewhere the schema test is skipped with a
//! loud message, and every other check still runs.

mod common;

use serde_yaml_ng::Value;
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use vipflow::config::Config;

/// Kubernetes versions whose schemas the manifests must satisfy: the oldest supported and the
/// one the agent's API types (k8s-openapi) are built for.
const KUBERNETES_VERSIONS: &[&str] = &["1.31", "1.33"];
const NAMESPACE: &str = "vipflow-system";
const SERVICE_ACCOUNT: &str = "vipflow";
const HTTP_PORT: u64 = 9475;
const CONFIG_PATH: &str = "/etc/vipflow/config.yaml";
const OVS_RUNDIR: &str = "/var/run/openvswitch";
const OVN_RUNDIR: &str = "/var/run/ovn";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every Kubernetes manifest in deploy/ (kustomization.yaml is kustomize's, not an object).
fn manifest_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("deploy"))
        .expect("read deploy/")
        .map(|e| e.expect("deploy/ entry").path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "yaml" || e == "yml")
                && p.file_name().is_some_and(|n| n != "kustomization.yaml")
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests in deploy/");
    files
}

fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("read manifest");
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| {
            serde::Deserialize::deserialize(d)
                .unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display()))
        })
        .filter(|v: &Value| !v.is_null())
        .collect()
}

struct Object {
    file: String,
    value: Value,
}

impl Object {
    fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or_default()
    }
    fn name(&self) -> &str {
        self.value["metadata"]["name"].as_str().unwrap_or_default()
    }
}

fn objects() -> Vec<Object> {
    manifest_files()
        .iter()
        .flat_map(|p| {
            let file = p.file_name().unwrap().to_string_lossy().into_owned();
            documents(p).into_iter().map(move |value| Object {
                file: file.clone(),
                value,
            })
        })
        .collect()
}

fn object(kind: &str, name: &str) -> Value {
    let all = objects();
    let mut found = all.iter().filter(|o| o.kind() == kind && o.name() == name);
    let o = found
        .next()
        .unwrap_or_else(|| panic!("no {kind}/{name} in deploy/"));
    assert!(found.next().is_none(), "{kind}/{name} defined twice");
    o.value.clone()
}

fn daemonset() -> Value {
    object("DaemonSet", "vipflow")
}

fn container(ds: &Value) -> Value {
    let cs = ds["spec"]["template"]["spec"]["containers"]
        .as_sequence()
        .expect("containers");
    assert_eq!(cs.len(), 1, "one container");
    cs[0].clone()
}

fn seq(v: &Value) -> &[Value] {
    v.as_sequence().map(Vec::as_slice).unwrap_or_default()
}

fn strs(v: &Value) -> Vec<&str> {
    seq(v).iter().filter_map(Value::as_str).collect()
}

/// The element of a list of named things (`name:`) called `name`.
fn named<'a>(list: &'a Value, name: &str) -> &'a Value {
    seq(list)
        .iter()
        .find(|e| e["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no entry named {name} in {list:?}"))
}

// ---------------------------------------------------------------------------------------------
// Schema validation

/// The validator: $KUBERNETES_VALIDATE, else scripts/install-deps.sh's virtualenv, else PATH.
fn validator() -> Option<(PathBuf, String)> {
    let candidates = [
        std::env::var_os("KUBERNETES_VALIDATE").map(PathBuf::from),
        Some(repo().join("target-tools/venv/bin/kubernetes-validate")),
        Some(PathBuf::from("kubernetes-validate")),
    ];
    candidates.into_iter().flatten().find_map(|bin| {
        let out = Command::new(&bin).arg("--version").output().ok()?;
        out.status.success().then(|| {
            let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            (bin, version)
        })
    })
}

fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// The validator, or None (after a loud message) when it is missing outside CI.
fn validator_or_skip(test: &str) -> Option<(PathBuf, String)> {
    let v = validator();
    if v.is_none() {
        let msg = "kubernetes-validate not found (looked at $KUBERNETES_VALIDATE, \
                   target-tools/venv/bin/kubernetes-validate, PATH): run scripts/install-deps.sh";
        assert!(!under_ci(), "{msg}");
        // Straight to stderr: the test harness captures eprintln! of passing tests.
        let _ = writeln!(
            std::io::stderr(),
            "\n!!!!! SKIPPED {test}: {msg} (CI would fail) !!!!!\n"
        );
    }
    v
}

fn run_validator(bin: &Path, files: &[PathBuf]) -> (bool, String) {
    let mut cmd = Command::new(bin);
    cmd.arg("--strict");
    for v in KUBERNETES_VERSIONS {
        cmd.args(["--kubernetes-version", v]);
    }
    let out = cmd.args(files).output().expect("run kubernetes-validate");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn manifests_validate_strictly_against_kubernetes_schemas() {
    let Some((bin, version)) =
        validator_or_skip("manifests_validate_strictly_against_kubernetes_schemas")
    else {
        return;
    };
    let files = manifest_files();
    let (ok, out) = run_validator(&bin, &files);
    assert!(ok, "kubernetes-validate {version} rejected deploy/:\n{out}");
    // A kind without a schema is only a WARN (exit 0) for kubernetes-validate: not here.
    for line in out.lines() {
        assert!(
            line.starts_with("INFO ") && line.contains(" passed for resource "),
            "kubernetes-validate {version}: unexpected output line {line:?}\n{out}"
        );
    }
    // Every object, against every version.
    for o in objects() {
        for v in KUBERNETES_VERSIONS {
            let want = format!(
                "{} passed for resource {}/{} against version {v}",
                o.file,
                o.kind().to_lowercase(),
                o.name()
            );
            assert!(
                out.lines().any(|l| l.ends_with(&want)),
                "not validated: {want}\n{out}"
            );
        }
    }
}

/// The validation is strict: a misspelt field (which kubectl would drop with a warning) fails.
#[test]
fn the_validator_rejects_unknown_fields() {
    let Some((bin, version)) = validator_or_skip("the_validator_rejects_unknown_fields") else {
        return;
    };
    let text = std::fs::read_to_string(repo().join("deploy/daemonset.yaml")).unwrap();
    let bad = text.replacen("      hostNetwork: true", "      hostNetwrk: true", 1);
    assert_ne!(bad, text);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("daemonset.yaml");
    std::fs::write(&path, bad).unwrap();
    let (ok, out) = run_validator(&bin, &[path]);
    assert!(
        !ok && out.contains("ERROR") && out.contains("hostNetwrk"),
        "kubernetes-validate {version} accepted an unknown field:\n{out}"
    );
}

// ---------------------------------------------------------------------------------------------
// What the agent depends on

#[test]
fn kustomization_lists_every_manifest() {
    let k = documents(&repo().join("deploy/kustomization.yaml"));
    assert_eq!(k.len(), 1);
    let listed: BTreeSet<&str> = strs(&k[0]["resources"]).into_iter().collect();
    let files: BTreeSet<String> = manifest_files()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let files: BTreeSet<&str> = files.iter().map(String::as_str).collect();
    assert_eq!(listed, files);
}

#[test]
fn every_object_is_labelled_and_namespaced_objects_live_in_vipflows_namespace() {
    let ns = object("Namespace", NAMESPACE);
    assert_eq!(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"].as_str(),
        Some("privileged"),
        "hostNetwork and hostPath need the privileged Pod Security level"
    );
    for o in objects() {
        let meta = &o.value["metadata"];
        assert_eq!(
            meta["labels"]["app.kubernetes.io/name"].as_str(),
            Some("vipflow"),
            "{}/{} in {}",
            o.kind(),
            o.name(),
            o.file
        );
        let cluster_scoped = matches!(
            o.kind(),
            "Namespace" | "ClusterRole" | "ClusterRoleBinding" | "CustomResourceDefinition"
        );
        assert_eq!(
            meta["namespace"].as_str(),
            (!cluster_scoped).then_some(NAMESPACE),
            "{}/{}",
            o.kind(),
            o.name()
        );
    }
}

#[test]
fn daemonset_runs_on_the_host_network_of_every_node() {
    let ds = daemonset();
    let spec = &ds["spec"];
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["hostNetwork"].as_bool(), Some(true));
    assert_eq!(pod["dnsPolicy"].as_str(), Some("ClusterFirstWithHostNet"));
    assert_eq!(pod["serviceAccountName"].as_str(), Some(SERVICE_ACCOUNT));
    object("ServiceAccount", SERVICE_ACCOUNT);
    assert_eq!(
        pod["priorityClassName"].as_str(),
        Some("system-node-critical")
    );
    // Every node, whatever its taints (control plane, NoExecute ones included).
    let tolerations = seq(&pod["tolerations"]);
    assert!(
        tolerations
            .iter()
            .any(|t| t["operator"].as_str() == Some("Exists") && t["key"].is_null()),
        "no catch-all toleration: {tolerations:?}"
    );
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(
        (5..=60).contains(&grace),
        "terminationGracePeriodSeconds {grace}"
    );
    // Rolling, one node at a time, never two agents on one node.
    assert_eq!(
        spec["updateStrategy"]["type"].as_str(),
        Some("RollingUpdate")
    );
    let ru = &spec["updateStrategy"]["rollingUpdate"];
    assert!(!ru["maxUnavailable"].is_null());
    assert_eq!(ru["maxSurge"].as_u64(), Some(0));
    // The selector selects the template.
    let labels = &spec["template"]["metadata"]["labels"];
    let selector = spec["selector"]["matchLabels"].as_mapping().unwrap();
    assert!(!selector.is_empty());
    for (k, v) in selector {
        assert_eq!(&labels[k.as_str().unwrap()], v);
    }
    // Requests and limits for both resources.
    let c = container(&ds);
    for kind in ["requests", "limits"] {
        for r in ["cpu", "memory"] {
            assert!(
                c["resources"][kind][r].as_str().is_some(),
                "resources.{kind}.{r} missing"
            );
        }
    }
}

#[test]
fn daemonset_mounts_the_ovs_and_ovn_run_directories_and_the_config() {
    let ds = daemonset();
    let pod = &ds["spec"]["template"]["spec"];
    let c = container(&ds);
    let mounts = &c["volumeMounts"];
    for (volume, path) in [("ovs-run", OVS_RUNDIR), ("ovn-run", OVN_RUNDIR)] {
        let v = named(&pod["volumes"], volume);
        assert_eq!(v["hostPath"]["path"].as_str(), Some(path), "{volume}");
        let m = named(mounts, volume);
        assert_eq!(m["mountPath"].as_str(), Some(path), "{volume}");
        assert_eq!(m["readOnly"].as_bool(), Some(true), "{volume} read-only");
    }
    // No other host path.
    let host_paths = seq(&pod["volumes"])
        .iter()
        .filter(|v| !v["hostPath"].is_null())
        .count();
    assert_eq!(host_paths, 2);
    // The config: the ConfigMap's config.yaml at CONFIG_PATH, which the agent is given.
    let cfg = named(&pod["volumes"], "config");
    assert_eq!(cfg["configMap"]["name"].as_str(), Some("vipflow-config"));
    object("ConfigMap", "vipflow-config");
    let (dir, file) = CONFIG_PATH.rsplit_once('/').unwrap();
    let m = named(mounts, "config");
    assert_eq!(m["mountPath"].as_str(), Some(dir));
    assert_eq!(m["readOnly"].as_bool(), Some(true));
    assert!(
        seq(&cfg["configMap"]["items"])
            .iter()
            .any(|i| i["key"].as_str() == Some("config.yaml") && i["path"].as_str() == Some(file))
    );
    let args = strs(&c["args"]);
    assert_eq!(args.first(), Some(&"agent"));
    assert!(
        args.windows(2).any(|w| w == ["--config", CONFIG_PATH]),
        "{args:?}"
    );
}

#[test]
fn daemonset_env_carries_the_node_and_pod_from_the_downward_api() {
    let c = container(&daemonset());
    for (name, field) in [
        ("NODE_NAME", "spec.nodeName"),
        ("POD_NAMESPACE", "metadata.namespace"),
        ("POD_NAME", "metadata.name"),
    ] {
        let e = named(&c["env"], name);
        assert_eq!(
            e["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
            Some(field),
            "{name}"
        );
    }
}

#[test]
fn probes_point_at_the_http_port() {
    let c = container(&daemonset());
    let args = strs(&c["args"]);
    let addr = args
        .windows(2)
        .find(|w| w[0] == "--http-addr")
        .map(|w| w[1])
        .expect("--http-addr");
    assert_eq!(addr, format!("0.0.0.0:{HTTP_PORT}"));
    let port = named(&c["ports"], "http");
    assert_eq!(port["containerPort"].as_u64(), Some(HTTP_PORT));
    // hostNetwork: the container port is the node's port; claim it.
    assert_eq!(port["hostPort"].as_u64(), Some(HTTP_PORT));
    assert_eq!(port["protocol"].as_str(), Some("TCP"));
    for (probe, path) in [
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ] {
        let get = &c[probe]["httpGet"];
        assert_eq!(get["path"].as_str(), Some(path), "{probe}");
        let p = &get["port"];
        assert!(
            p.as_str() == Some("http") || p.as_u64() == Some(HTTP_PORT),
            "{probe} port {p:?}"
        );
    }
}

#[test]
fn security_context_is_as_restrictive_as_the_ovs_sockets_allow() {
    let ds = daemonset();
    let pod = &ds["spec"]["template"]["spec"];
    for host in ["hostPID", "hostIPC"] {
        assert_ne!(pod[host].as_bool(), Some(true), "{host}");
    }
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"].as_str(),
        Some("RuntimeDefault")
    );
    let c = container(&ds);
    let sc = &c["securityContext"];
    assert_eq!(sc["privileged"].as_bool(), Some(false));
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(strs(&sc["capabilities"]["drop"]), ["ALL"]);
    assert!(
        sc["capabilities"]["add"].is_null(),
        "no capability is added: {:?}",
        sc["capabilities"]["add"]
    );
    assert_eq!(
        sc["seccompProfile"]["type"].as_str(),
        Some("RuntimeDefault")
    );
    // uid 0 only as the owner of OVS's root:root 0750 sockets (see the comment in
    // daemonset.yaml); explicit, never implied by the image.
    assert_eq!(sc["runAsUser"].as_u64(), Some(0));
    assert_eq!(sc["runAsNonRoot"].as_bool(), Some(false));
}

// ---------------------------------------------------------------------------------------------
// RBAC

/// (apiGroup, resource, resourceNames, verbs) of every rule, flattened.
fn grants(role: &Value) -> BTreeSet<(String, String, Vec<String>, Vec<String>)> {
    let mut out = BTreeSet::new();
    for rule in seq(&role["rules"]) {
        assert!(
            rule["nonResourceURLs"].is_null(),
            "nonResourceURLs: {rule:?}"
        );
        let names: Vec<String> = strs(&rule["resourceNames"])
            .into_iter()
            .map(String::from)
            .collect();
        let mut verbs: Vec<String> = strs(&rule["verbs"]).into_iter().map(String::from).collect();
        verbs.sort();
        for g in strs(&rule["apiGroups"]) {
            for r in strs(&rule["resources"]) {
                out.insert((g.into(), r.into(), names.clone(), verbs.clone()));
            }
        }
    }
    out
}

fn grant(
    g: &str,
    r: &str,
    names: &[&str],
    verbs: &[&str],
) -> (String, String, Vec<String>, Vec<String>) {
    let mut verbs: Vec<String> = verbs.iter().map(|s| s.to_string()).collect();
    verbs.sort();
    (
        g.into(),
        r.into(),
        names.iter().map(|s| s.to_string()).collect(),
        verbs,
    )
}

#[test]
fn rbac_grants_exactly_what_the_agent_needs() {
    for o in objects() {
        if !matches!(o.kind(), "ClusterRole" | "Role") {
            continue;
        }
        for rule in seq(&o.value["rules"]) {
            for field in ["apiGroups", "resources", "verbs", "resourceNames"] {
                for s in strs(&rule[field]) {
                    assert!(
                        !s.contains('*'),
                        "wildcard in {}/{}: {rule:?}",
                        o.kind(),
                        o.name()
                    );
                    assert!(
                        !matches!(s, "secrets" | "escalate" | "bind" | "impersonate"),
                        "{s} in {}/{}",
                        o.kind(),
                        o.name()
                    );
                }
            }
        }
    }
    let read = ["list", "watch"];
    let cluster: BTreeSet<_> = [
        grant("", "services", &[], &read),
        grant("discovery.k8s.io", "endpointslices", &[], &read),
        grant("", "nodes", &[], &["get", "list", "watch"]),
        grant("kubeovn.io", "subnets", &[], &read),
        grant("", "services/status", &[], &["patch"]),
        grant("", "namespaces", &[], &read),
        grant("vipflow.io", "vippools", &[], &read),
        grant("vipflow.io", "vippools/status", &[], &["patch"]),
        grant("vipflow.io", "bgppeers", &[], &read),
        grant("vipflow.io", "bgpadvertisements", &[], &read),
        grant("vipflow.io", "bfdprofiles", &[], &read),
        grant("metallb.io", "ipaddresspools", &[], &read),
        grant("metallb.io", "l2advertisements", &[], &read),
        grant("metallb.io", "bgppeers", &[], &read),
        grant("metallb.io", "bgpadvertisements", &[], &read),
        grant("metallb.io", "bfdprofiles", &[], &read),
        grant("metallb.io", "communities", &[], &read),
        grant(
            "frrk8s.metallb.io",
            "frrnodestates",
            &[],
            &["get", "list", "watch"],
        ),
        grant(
            "frrk8s.metallb.io",
            "bgpsessionstates",
            &[],
            &["get", "list", "watch"],
        ),
        grant(
            "frrk8s.metallb.io",
            "frrconfigurations",
            &[],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        grant("events.k8s.io", "events", &[], &["create", "list", "patch"]),
        grant("", "events", &[], &["create", "patch"]),
    ]
    .into();
    assert_eq!(grants(&object("ClusterRole", "vipflow")), cluster);
    // Leases only in vipflow's namespace, and only its own once it exists.
    let ns: BTreeSet<_> = [
        grant("coordination.k8s.io", "leases", &[], &["create"]),
        grant(
            "coordination.k8s.io",
            "leases",
            &["vipflow-northbound", "vipflow-cluster"],
            &["get", "update"],
        ),
    ]
    .into();
    assert_eq!(grants(&object("Role", "vipflow-leader-election")), ns);

    for (kind, name, role_kind) in [
        ("ClusterRoleBinding", "vipflow", "ClusterRole"),
        ("RoleBinding", "vipflow-leader-election", "Role"),
    ] {
        let b = object(kind, name);
        assert_eq!(b["roleRef"]["kind"].as_str(), Some(role_kind));
        object(role_kind, b["roleRef"]["name"].as_str().unwrap());
        let subjects = seq(&b["subjects"]);
        assert_eq!(subjects.len(), 1, "{kind}/{name}");
        assert_eq!(subjects[0]["kind"].as_str(), Some("ServiceAccount"));
        assert_eq!(subjects[0]["name"].as_str(), Some(SERVICE_ACCOUNT));
        assert_eq!(subjects[0]["namespace"].as_str(), Some(NAMESPACE));
    }
    // Nothing else grants anything.
    let bindings = objects()
        .iter()
        .filter(|o| o.kind().ends_with("Binding"))
        .count();
    assert_eq!(bindings, 2);
}

// ---------------------------------------------------------------------------------------------
// The config file

fn configmap_config_text() -> String {
    object("ConfigMap", "vipflow-config")["data"]["config.yaml"]
        .as_str()
        .expect("data.config.yaml")
        .to_owned()
}

#[test]
fn configmap_config_loads_with_vipflows_loader() {
    let text = configmap_config_text();
    let cfg: Config =
        serde_yaml_ng::from_str(&text).expect("config.yaml parses as vipflow's Config");
    cfg.validate().expect("config.yaml is valid");
    // The node name comes from NODE_NAME per pod, never from the shared file.
    assert_eq!(cfg.node_name, "");
    // The socket directory is the one the DaemonSet mounts.
    assert_eq!(cfg.ovs_rundir, Path::new(OVS_RUNDIR));
    assert_eq!(cfg.bridges[0].name, "br-ex");
    assert!(cfg.nb_remote.is_some(), "the example shows nb-remote");

    // And through the real binary, the way the agent will read it.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, &text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_vipflow"))
        .arg("plan")
        .arg("--config")
        .arg(&path)
        .arg("--objects")
        .arg(repo().join("examples/services.yaml"))
        .env("NODE_NAME", "node-a")
        .env_remove("VIPFLOW_CONFIG")
        .env_remove("VIPFLOW_OBJECTS")
        .env_remove("OVS_RUNDIR")
        .env_remove("OVN_NB_DB")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "vipflow plan --config <configmap's config.yaml> failed:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("# bridge br-ex"), "{stdout}");
    assert!(
        stdout.contains("# northbound Load_Balancer rows"),
        "{stdout}"
    );
}

#[test]
fn the_image_ships_a_release_binary_without_debug_info() {
    // The Containerfile builds the release profile and copies that binary; the profile must
    // leave out debug info (122 MB with it, about 22 MB without), while benchmarks keep it.
    let containerfile = std::fs::read_to_string(repo().join("deploy/Containerfile")).unwrap();
    assert!(
        containerfile.contains("cargo build --release")
            && containerfile.contains("target/release/vipflow"),
        "{containerfile}"
    );
    let manifest = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    // `key = value` lines of one `[profile.NAME]` table.
    let profile = |name: &str| -> Vec<(String, String)> {
        manifest
            .lines()
            .skip_while(|l| l.trim() != format!("[profile.{name}]"))
            .skip(1)
            .take_while(|l| !l.trim_start().starts_with('['))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect()
    };
    let release = profile("release");
    let get = |p: &[(String, String)], k: &str| {
        p.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone())
    };
    assert!(
        get(&release, "debug").is_none_or(|d| d == "0" || d == "false"),
        "the release profile keeps debug info: {release:?}"
    );
    assert_eq!(get(&release, "strip").as_deref(), Some("\"debuginfo\""));
    assert_eq!(get(&profile("bench"), "debug").as_deref(), Some("1"));
}

// ---------------------------------------------------------------------------------------------
// BGP: deploy/bgp, a kustomize Component that puts FRR beside every agent

const FRR_RUNDIR: &str = "/var/run/frr";
const FRR_VOLUME: &str = "frr-run";
/// The capabilities FRR's daemons ask for (and exit without), and KILL for the shell that
/// stops them.
const FRR_CAPABILITIES: &[&str] = &[
    "NET_ADMIN",
    "NET_RAW",
    "NET_BIND_SERVICE",
    "SYS_ADMIN",
    "SETUID",
    "SETGID",
    "KILL",
];
/// deploy/kustomization.yaml's commented-out switch for the component, and the same switched on.
const COMPONENT_OFF: &str = "# components:\n#   - bgp\n";
const COMPONENT_ON: &str = "components:\n  - bgp\n";

fn bgp_dir() -> PathBuf {
    repo().join("deploy/bgp")
}

fn bgp_component() -> Value {
    let k = documents(&bgp_dir().join("kustomization.yaml"));
    assert_eq!(k.len(), 1);
    k[0].clone()
}

/// The Kubernetes merge key of a list in a strategic merge patch, for the lists the BGP patch
/// merges into; any other list the patch gives would replace the base's, which the renderer
/// refuses rather than guess.
fn merge_key(field: &str) -> Option<&'static str> {
    match field {
        "containers" | "env" | "volumes" => Some("name"),
        "volumeMounts" => Some("mountPath"),
        _ => None,
    }
}

/// `patch` merged into `base` as kustomize merges a strategic merge patch: maps key by key, a
/// keyed list item by item (the patch's items first, in its order, then the base's others),
/// scalars replaced.
fn strategic_merge(base: &mut Value, patch: &Value, field: &str) {
    match (base, patch) {
        (Value::Mapping(b), Value::Mapping(p)) => {
            for (k, pv) in p {
                let name = k.as_str().unwrap_or_default();
                assert!(
                    !name.starts_with('$'),
                    "patch directive {name} under {field}: not rendered here"
                );
                match b.get_mut(k) {
                    Some(bv) => strategic_merge(bv, pv, name),
                    None => {
                        b.insert(k.clone(), pv.clone());
                    }
                }
            }
        }
        (Value::Sequence(b), Value::Sequence(p)) => {
            let key = merge_key(field).unwrap_or_else(|| {
                panic!("the patch would replace the base's list {field}: give merge_key its key")
            });
            let mut merged = Vec::new();
            for item in p {
                match b.iter().position(|bi| bi[key] == item[key]) {
                    Some(i) => {
                        let mut old = b.remove(i);
                        strategic_merge(&mut old, item, field);
                        merged.push(old);
                    }
                    None => merged.push(item.clone()),
                }
            }
            merged.append(b);
            *b = merged;
        }
        (b, p) => *b = p.clone(),
    }
}

/// The value at a kustomize field path (`a.b.[name=x].c`), or None.
fn field_mut<'a>(mut v: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    for segment in path.split('.') {
        v = match segment
            .strip_prefix('[')
            .and_then(|s| s.strip_suffix(']'))
            .and_then(|s| s.split_once('='))
        {
            Some((k, want)) => v
                .as_sequence_mut()?
                .iter_mut()
                .find(|e| e[k].as_str() == Some(want))?,
            None => v.get_mut(segment)?,
        };
    }
    Some(v)
}

fn selects(select: &Value, o: &Object) -> bool {
    select["kind"].as_str() == Some(o.kind()) && select["name"].as_str() == Some(o.name())
}

/// deploy/ with the BGP component turned on, rendered as kustomize renders what the component
/// uses: each patch merged into the object it names, then the replacements.
/// `the_bgp_component_renders_as_kustomize_renders_it` holds this to kustomize itself.
fn bgp_objects() -> Vec<Object> {
    let mut all = objects();
    let component = bgp_component();
    for p in seq(&component["patches"]) {
        let file = p["path"].as_str().expect("a patch given by its path");
        let docs = documents(&bgp_dir().join(file));
        assert_eq!(docs.len(), 1, "{file}: one patch");
        let patch = &docs[0];
        let target = all
            .iter_mut()
            .find(|o| {
                Some(o.kind()) == patch["kind"].as_str()
                    && Some(o.name()) == patch["metadata"]["name"].as_str()
            })
            .unwrap_or_else(|| panic!("{file} patches nothing in deploy/"));
        strategic_merge(&mut target.value, patch, "");
    }
    for r in seq(&component["replacements"]) {
        let source = &r["source"];
        let path = source["fieldPath"].as_str().expect("source.fieldPath");
        let from = all
            .iter_mut()
            .find(|o| selects(source, o))
            .unwrap_or_else(|| panic!("replacement source {source:?} not in deploy/"));
        let value = field_mut(&mut from.value, path)
            .unwrap_or_else(|| panic!("no {path}"))
            .clone();
        for t in seq(&r["targets"]) {
            for o in all.iter_mut().filter(|o| selects(&t["select"], o)) {
                for path in strs(&t["fieldPaths"]) {
                    *field_mut(&mut o.value, path).unwrap_or_else(|| panic!("no {path}")) =
                        value.clone();
                }
            }
        }
    }
    all
}

fn bgp_daemonset() -> Value {
    let all = bgp_objects();
    let mut found = all
        .iter()
        .filter(|o| o.kind() == "DaemonSet" && o.name() == "vipflow");
    let ds = found.next().expect("DaemonSet vipflow");
    assert!(found.next().is_none());
    ds.value.clone()
}

fn containers(ds: &Value) -> &Value {
    &ds["spec"]["template"]["spec"]["containers"]
}

/// `[/bin/bash, -c, SCRIPT]`: the script.
fn bash_script(command: &Value) -> &str {
    let c = strs(command);
    assert_eq!(c.len(), 3, "{c:?}");
    assert_eq!(c[..2], ["/bin/bash", "-c"]);
    c[2]
}

#[test]
fn bgp_is_off_in_deploy_until_its_components_lines_are_uncommented() {
    let text = std::fs::read_to_string(repo().join("deploy/kustomization.yaml")).unwrap();
    let k = documents(&repo().join("deploy/kustomization.yaml"));
    assert!(k[0]["components"].is_null(), "BGP is on by default");
    assert_eq!(text.matches(COMPONENT_OFF).count(), 1, "{text}");
    // Without the component: one container, no FRR, no BGP setting anywhere.
    let ds = daemonset();
    let c = container(&ds);
    assert!(
        seq(&c["env"])
            .iter()
            .all(|e| e["name"].as_str() != Some("VIPFLOW_FRR_SOCKET_DIR"))
    );
    assert!(
        seq(&ds["spec"]["template"]["spec"]["volumes"])
            .iter()
            .all(|v| v["name"].as_str() != Some(FRR_VOLUME))
    );
    let cfg: Config = serde_yaml_ng::from_str(&configmap_config_text()).unwrap();
    assert_eq!(cfg.bgp.frr_socket_dir, None);
    assert!(!configmap_config_text().contains("frr"));
}

#[test]
fn the_bgp_component_lists_every_file_beside_it() {
    let k = bgp_component();
    assert_eq!(k["kind"].as_str(), Some("Component"));
    assert_eq!(
        k["apiVersion"].as_str(),
        Some("kustomize.config.k8s.io/v1alpha1")
    );
    let listed: BTreeSet<&str> = seq(&k["patches"])
        .iter()
        .filter_map(|p| p["path"].as_str())
        .chain(strs(&k["resources"]))
        .collect();
    let files: BTreeSet<String> = std::fs::read_dir(bgp_dir())
        .expect("read deploy/bgp")
        .map(|e| e.expect("deploy/bgp entry").file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| n != "kustomization.yaml")
        .collect();
    let files: BTreeSet<&str> = files.iter().map(String::as_str).collect();
    assert_eq!(listed, files);
}

#[test]
fn the_bgp_daemonset_validates_strictly_against_kubernetes_schemas() {
    let Some((bin, version)) =
        validator_or_skip("the_bgp_daemonset_validates_strictly_against_kubernetes_schemas")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bgp-daemonset.yaml");
    std::fs::write(&path, serde_yaml_ng::to_string(&bgp_daemonset()).unwrap()).unwrap();
    let (ok, out) = run_validator(&bin, std::slice::from_ref(&path));
    assert!(
        ok,
        "kubernetes-validate {version} rejected the BGP DaemonSet:\n{out}"
    );
    for v in KUBERNETES_VERSIONS {
        let want =
            format!("bgp-daemonset.yaml passed for resource daemonset/vipflow against version {v}");
        assert!(
            out.lines().any(|l| l.ends_with(&want)),
            "not validated: {want}\n{out}"
        );
    }
    for line in out.lines() {
        assert!(
            line.starts_with("INFO "),
            "unexpected output line {line:?}\n{out}"
        );
    }
}

/// The component adds FRR, its volume, the agent's setting and mount, and the pod's frrvty
/// group; it changes nothing else of the base.
#[test]
fn the_bgp_component_only_adds_to_the_base_daemonset() {
    let base = daemonset();
    let mut ds = bgp_daemonset();
    let pod = &mut ds["spec"]["template"]["spec"];
    let groups = pod["securityContext"]
        .as_mapping_mut()
        .unwrap()
        .remove("supplementalGroups");
    assert!(groups.is_some());
    let remove_one = |list: &mut Value, key: &str, value: &str| {
        let s = list.as_sequence_mut().unwrap();
        let before = s.len();
        s.retain(|e| e[key].as_str() != Some(value));
        assert_eq!(s.len(), before - 1, "no {key} {value}");
    };
    remove_one(&mut pod["containers"], "name", "frr");
    remove_one(&mut pod["volumes"], "name", FRR_VOLUME);
    let agent = pod["containers"]
        .as_sequence_mut()
        .and_then(|cs| {
            cs.iter_mut()
                .find(|c| c["name"].as_str() == Some("vipflow"))
        })
        .expect("the agent's container");
    remove_one(&mut agent["env"], "name", "VIPFLOW_FRR_SOCKET_DIR");
    remove_one(&mut agent["volumeMounts"], "mountPath", FRR_RUNDIR);
    assert_eq!(normalized(&ds, ""), normalized(&base, ""));
}

#[test]
fn frr_and_the_agent_share_frrs_socket_directory() {
    let ds = bgp_daemonset();
    let pod = &ds["spec"]["template"]["spec"];
    let v = named(&pod["volumes"], FRR_VOLUME);
    assert!(
        v["emptyDir"].is_mapping(),
        "an emptyDir: it outlives either container's restart: {v:?}"
    );
    let agent = named(containers(&ds), "vipflow");
    let frr = named(containers(&ds), "frr");
    for (c, read_only) in [(agent, true), (frr, false)] {
        let m = named(&c["volumeMounts"], FRR_VOLUME);
        assert_eq!(m["mountPath"].as_str(), Some(FRR_RUNDIR), "{c:?}");
        assert_eq!(m["readOnly"].as_bool().unwrap_or(false), read_only, "{m:?}");
    }
    // The agent drives FRR there: bgp.frr-socket-dir, as the environment gives it.
    let e = named(&agent["env"], "VIPFLOW_FRR_SOCKET_DIR");
    assert_eq!(e["value"].as_str(), Some(FRR_RUNDIR));
    // The probes ask FRR there too.
    for probe in ["readinessProbe", "livenessProbe"] {
        let script = bash_script(&frr[probe]["exec"]["command"]);
        assert!(
            script.contains(&format!("vtysh --vty_socket {FRR_RUNDIR} ")),
            "{probe}: {script}"
        );
    }
    // Both containers run one image: the agent's vtysh and FRR's daemons are one build.
    assert_eq!(frr["image"], agent["image"]);
    assert!(seq(&bgp_component()["replacements"]).iter().any(|r| {
        r["source"]["fieldPath"].as_str()
            == Some("spec.template.spec.containers.[name=vipflow].image")
            && seq(&r["targets"]).iter().any(|t| {
                strs(&t["fieldPaths"]) == ["spec.template.spec.containers.[name=frr].image"]
            })
    }));
}

/// The setting reaches the agent: `vipflow plan` with the ConfigMap's file and the agent
/// container's environment plans BGP, and without that environment it does not.
#[test]
fn the_agent_in_the_bgp_daemonset_plans_bgp_and_the_base_agent_does_not() {
    let ds = bgp_daemonset();
    let agent = named(containers(&ds), "vipflow");
    let env: Vec<(&str, &str)> = seq(&agent["env"])
        .iter()
        .filter_map(|e| Some((e["name"].as_str()?, e["value"].as_str()?)))
        .collect();
    assert!(
        env.contains(&("VIPFLOW_FRR_SOCKET_DIR", FRR_RUNDIR)),
        "{env:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, configmap_config_text()).unwrap();
    let plan = |env: &[(&str, &str)]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_vipflow"));
        c.arg("plan")
            .arg("--config")
            .arg(&path)
            .arg("--objects")
            .arg(repo().join("examples/services.yaml"))
            .env("NODE_NAME", "node-a");
        for v in [
            "VIPFLOW_CONFIG",
            "VIPFLOW_OBJECTS",
            "OVS_RUNDIR",
            "OVN_NB_DB",
            "VIPFLOW_FRR_SOCKET_DIR",
        ] {
            c.env_remove(v);
        }
        c.envs(env.iter().copied());
        let out = c.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let with = plan(&env);
    assert!(with.contains("# bgp: "), "{with}");
    let without = plan(&[]);
    assert!(!without.contains("# bgp"), "{without}");
}

#[test]
fn frr_runs_zebra_bgpd_and_bfdd_empty_and_is_probed_on_each() {
    let ds = bgp_daemonset();
    let frr = named(containers(&ds), "frr");
    let script = bash_script(&frr["command"]);
    for daemon in ["zebra", "bfdd", "bgpd"] {
        let line = script
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("start {daemon} ")))
            .unwrap_or_else(|| panic!("{daemon} not started: {script}"));
        // An empty configuration: the agent gives FRR all of it.
        assert!(line.contains(" -f /dev/null"), "{line}");
    }
    // No vty on the node's TCP ports, only the sockets.
    assert!(script.contains("-P 0"), "{script}");
    // Any daemon exiting ends the container; SIGTERM stops the daemons.
    assert!(script.contains("wait -n") && script.contains("trap 'stop 0' TERM"));
    assert!(frr["args"].is_null());
    for probe in ["readinessProbe", "livenessProbe"] {
        let p = &frr[probe];
        let script = bash_script(&p["exec"]["command"]);
        assert!(
            script.contains("for d in mgmtd zebra bfdd bgpd"),
            "{script}"
        );
        assert!(
            p["timeoutSeconds"].as_u64().is_some_and(|t| t >= 2),
            "{p:?}"
        );
    }
    for kind in ["requests", "limits"] {
        for r in ["cpu", "memory"] {
            assert!(
                frr["resources"][kind][r].as_str().is_some(),
                "resources.{kind}.{r}"
            );
        }
    }
    let ports: BTreeSet<(u64, &str)> = seq(&frr["ports"])
        .iter()
        .map(|p| {
            assert_eq!(p["hostPort"], p["containerPort"], "{p:?}");
            (
                p["containerPort"].as_u64().unwrap(),
                p["protocol"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(ports, [(179, "TCP"), (3784, "UDP"), (4784, "UDP")].into());
}

#[test]
fn frr_runs_with_only_the_capabilities_its_daemons_ask_for() {
    let ds = bgp_daemonset();
    let frr = named(containers(&ds), "frr");
    let sc = &frr["securityContext"];
    assert_eq!(sc["privileged"].as_bool(), Some(false));
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(strs(&sc["capabilities"]["drop"]), ["ALL"]);
    let add: BTreeSet<&str> = strs(&sc["capabilities"]["add"]).into_iter().collect();
    assert_eq!(add, FRR_CAPABILITIES.iter().copied().collect());
    // no_new_privs is no boundary with CAP_SYS_ADMIN, and the API refuses false with it.
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(true));
    assert_eq!(
        sc["seccompProfile"]["type"].as_str(),
        Some("RuntimeDefault")
    );
    assert_eq!(sc["runAsUser"].as_u64(), Some(0));
    // The agent keeps its own context: no capability at all.
    let agent = named(containers(&ds), "vipflow");
    assert_eq!(
        agent["securityContext"],
        container(&daemonset())["securityContext"]
    );
}

/// FRR's vty sockets are `frr:frrvty` 0770: the agent reaches them through frrvty, whose gid
/// the image fixes and the pod is given.
#[test]
fn the_pod_runs_with_the_gid_the_image_gives_frrvty() {
    let ds = bgp_daemonset();
    let groups: Vec<u64> =
        seq(&ds["spec"]["template"]["spec"]["securityContext"]["supplementalGroups"])
            .iter()
            .filter_map(Value::as_u64)
            .collect();
    let containerfile = std::fs::read_to_string(repo().join("deploy/Containerfile")).unwrap();
    // The runtime stage: after the last FROM.
    let runtime = containerfile
        .rsplit_once("\nFROM ")
        .map(|(_, s)| s)
        .unwrap();
    let gid: u64 = runtime
        .split_once("groupadd --system --gid ")
        .and_then(|(_, s)| s.split_once(" frrvty"))
        .and_then(|(g, _)| g.parse().ok())
        .unwrap_or_else(|| panic!("no fixed frrvty gid in the runtime stage:\n{runtime}"));
    assert_eq!(groups, [gid]);
    let install = runtime
        .lines()
        .find(|l| l.contains("apt-get install"))
        .unwrap();
    assert!(install.split_whitespace().any(|w| w == "frr"), "{install}");
}

/// Lists that Kubernetes merges by a key, sorted by it: their order means nothing to the
/// objects, and kustomize versions differ in it.
fn normalized(v: &Value, field: &str) -> Value {
    match v {
        Value::Mapping(m) => Value::Mapping(
            m.iter()
                .map(|(k, v)| (k.clone(), normalized(v, k.as_str().unwrap_or_default())))
                .collect(),
        ),
        Value::Sequence(s) => {
            let mut s: Vec<Value> = s.iter().map(|e| normalized(e, field)).collect();
            if let Some(key) = merge_key(field) {
                s.sort_by_key(|e| e[key].as_str().unwrap_or_default().to_string());
            }
            Value::Sequence(s)
        }
        other => other.clone(),
    }
}

/// `kustomize build` or `kubectl kustomize`, whichever is there.
fn kustomize() -> Option<Vec<&'static str>> {
    let works = |cmd: &[&str]| {
        Command::new(cmd[0])
            .args(&cmd[1..])
            .arg("--help")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    [vec!["kustomize", "build"], vec!["kubectl", "kustomize"]]
        .into_iter()
        .find(|c| works(c))
}

/// deploy/ copied to a temporary directory with its kustomization.yaml changed by `edit`,
/// rendered by kustomize.
fn kustomize_deploy(cmd: &[&str], edit: impl Fn(String) -> String) -> Vec<Value> {
    let tmp = tempfile::tempdir().unwrap();
    let deploy = tmp.path().join("deploy");
    for (from, to) in [
        (repo().join("deploy"), deploy.clone()),
        (bgp_dir(), deploy.join("bgp")),
    ] {
        std::fs::create_dir_all(&to).unwrap();
        for e in std::fs::read_dir(&from).unwrap() {
            let p = e.unwrap().path();
            if p.is_file() {
                std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
            }
        }
    }
    let k = deploy.join("kustomization.yaml");
    std::fs::write(&k, edit(std::fs::read_to_string(&k).unwrap())).unwrap();
    let out = Command::new(cmd[0])
        .args(&cmd[1..])
        .arg(&deploy)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// The renderer above against kustomize itself, with the component switched on as
/// deploy/README.md says (uncommenting `components:`); and an image set with `images:` reaches
/// both containers. Skipped, loudly, where neither kustomize nor kubectl is installed.
#[test]
fn the_bgp_component_renders_as_kustomize_renders_it() {
    let Some(cmd) = kustomize() else {
        let _ = writeln!(
            std::io::stderr(),
            "\n!!!!! SKIPPED the_bgp_component_renders_as_kustomize_renders_it: \
             neither kustomize nor kubectl found !!!!!\n"
        );
        return;
    };
    let on = |text: String| {
        assert_eq!(text.matches(COMPONENT_OFF).count(), 1);
        text.replace(COMPONENT_OFF, COMPONENT_ON)
    };
    let theirs = kustomize_deploy(&cmd, on);
    let ours = bgp_objects();
    assert_eq!(theirs.len(), ours.len());
    for o in &ours {
        let t = theirs
            .iter()
            .find(|t| {
                t["kind"].as_str() == Some(o.kind())
                    && t["metadata"]["name"].as_str() == Some(o.name())
            })
            .unwrap_or_else(|| panic!("kustomize did not render {}/{}", o.kind(), o.name()));
        assert_eq!(
            normalized(t, ""),
            normalized(&o.value, ""),
            "{}/{}: kustomize renders\n{}",
            o.kind(),
            o.name(),
            serde_yaml_ng::to_string(t).unwrap()
        );
    }
    // And without the component, deploy/ is the files as they are.
    let base = kustomize_deploy(&cmd, |t| t);
    assert_eq!(base.len(), objects().len());
    let ds = base
        .iter()
        .find(|v| v["kind"].as_str() == Some("DaemonSet"))
        .unwrap();
    assert_eq!(normalized(ds, ""), normalized(&daemonset(), ""));

    let images = |text: String| {
        let text = on(text);
        let commented = "# images:\n#   - name: vipflow\n#     newName: <registry>/<path>/vipflow\n#     newTag: 0.1.0\n";
        assert_eq!(text.matches(commented).count(), 1, "{text}");
        text.replace(
            commented,
            "images:\n  - name: vipflow\n    newName: registry.example/vipflow\n    newTag: \"9.9\"\n",
        )
    };
    let rendered = kustomize_deploy(&cmd, images);
    let ds = rendered
        .iter()
        .find(|v| v["kind"].as_str() == Some("DaemonSet"))
        .unwrap();
    let images: Vec<&str> = seq(containers(ds))
        .iter()
        .filter_map(|c| c["image"].as_str())
        .collect();
    assert_eq!(images, ["registry.example/vipflow:9.9"; 2]);
}

/// The frr container's command and probes as the pod runs them, in namespaces of their own
/// (network, mounts, pids): a read-only root with an empty directory mounted at FRR's, exactly
/// the container's capabilities, and the agent as uid 0 with none. Each step says `== what`.
const POD_HARNESS: &str = r#"
set -u
say() { echo "== $*"; }
mount --make-rprivate /
mount --bind "$OUT" "$OUT"
run=$(readlink -f /var/run)
mount -t tmpfs -o mode=0755 run "$run"
mkdir "$run/frr"
mount -t tmpfs -o mode=0777 frr-run "$run/frr"
mount -o remount,bind,ro "$run"
mount -o remount,bind,ro /
ip link set lo up
in_frr() { local caps=$1; shift; setpriv --bounding-set=-all,$caps --inh-caps=-all --groups "$FRRVTY" $FRR_NNP "$@"; }
as_agent() { setpriv --bounding-set=-all --inh-caps=-all --groups "$FRRVTY" --no-new-privs "$@"; }
# Not through in_frr: $! must be the container's shell itself, which SIGTERM is sent to.
start() {
  setpriv --bounding-set=-all,$1 --inh-caps=-all --groups "$FRRVTY" $FRR_NNP \
    /bin/bash -c "$(cat "$OUT/command.sh")" >>"$OUT/frr.log" 2>&1 &
  pid=$!
}
probe() { in_frr "$CAPS" timeout 5 /bin/bash -c "$(cat "$OUT/$1.sh")" >/dev/null 2>&1; }
ready() {
  for _ in $(seq 200); do
    probe readiness && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
ended() {
  for _ in $(seq 100); do
    if ! kill -0 "$pid" 2>/dev/null; then wait "$pid"; END="exited $?"; return; fi
    sleep 0.1
  done
  # What is left of the container, for a failure to show.
  END="running ($(ps -o pid=,stat=,wchan=,args= --ppid "$pid" | tr -s ' ' | paste -sd';'))"
}
left() { pgrep -c -f '^/usr/lib/frr/' || true; }
without() {
  local out=
  for c in ${CAPS//,/ }; do [ "$c" = "$1" ] || out="$out,$c"; done
  echo "${out#,}"
}

start "$CAPS"
ready && say ready
probe liveness && say live
as_agent vtysh --vty_socket "$AGENT_DIR" -f "$OUT/frr.conf" >/dev/null 2>&1 && say agent configured
as_agent vtysh --vty_socket "$AGENT_DIR" -c 'show bgp ipv4 unicast json' 2>/dev/null \
  | grep -q '"198.51.100.7/32"' && say agent read back
setpriv --bounding-set=-all --inh-caps=-all --clear-groups --no-new-privs \
  vtysh --vty_socket "$AGENT_DIR" -c 'show version' >/dev/null 2>&1 || say refused without frrvty
kill -KILL "$(cat "$run/frr/bgpd.pid")"
ended; say "bgpd killed: $END, $(left) daemons left"
start "$CAPS"
ready && say ready again on the same directory
kill -TERM "$pid"
ended; say "SIGTERM: $END, $(left) daemons left"
for cap in ${CAPS//,/ }; do
  [ "$cap" = +kill ] && continue
  start "$(without "$cap")"
  ended; say "without ${cap#+}: $END"
done
start "$(without +kill)"
ready
kill -TERM "$pid"
sleep 2
kill -0 "$pid" 2>/dev/null && say "without kill: SIGTERM leaves FRR running"
kill -KILL -1
"#;

/// FRR's configuration as the agent would give it: a BFD profile, a peer, one prefix.
const AGENT_FRR_CONFIG: &str = "\
bfd
 profile vipflow-test
  receive-interval 300
 exit
exit
router bgp 64512
 bgp router-id 192.0.2.1
 no bgp ebgp-requires-policy
 no bgp network import-check
 no bgp default ipv4-unicast
 neighbor 192.0.2.2 remote-as 64513
 neighbor 192.0.2.2 bfd profile vipflow-test
 address-family ipv4 unicast
  network 198.51.100.7/32
  neighbor 192.0.2.2 activate
 exit-address-family
exit
";

/// frrvty's gid on this machine (FRR's package made it), standing in for the image's.
fn frrvty_gid() -> Option<u32> {
    std::fs::read_to_string("/etc/group")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("frrvty:x:")?.split(':').next()?.parse().ok())
}

/// The frr container on this machine's FRR (Debian's, as the image's): its command starts FRR
/// with the container's capabilities on a read-only root, its probes pass, the agent (uid 0
/// without capabilities, in frrvty) configures it and reads it back through the shared
/// directory and cannot without frrvty; a daemon that dies ends the container, which starts
/// again on the same directory, and SIGTERM stops every daemon; without any one of the
/// capabilities it does not work. Needs root (namespaces) and FRR (scripts/install-deps.sh).
#[test]
fn the_frr_container_runs_as_the_pod_runs_it() {
    const TEST: &str = "the_frr_container_runs_as_the_pod_runs_it";
    if !testkit::netns::can_make_namespaces() {
        let _ = writeln!(
            std::io::stderr(),
            "\n!!!!! SKIPPED {TEST}: needs root and network namespaces !!!!!\n"
        );
        return;
    }
    let gid = frrvty_gid();
    if !testkit::frr::installed() || gid.is_none() {
        let msg = "FRR is not installed: run scripts/install-deps.sh";
        assert!(!under_ci(), "{msg}");
        let _ = writeln!(std::io::stderr(), "\n!!!!! SKIPPED {TEST}: {msg} !!!!!\n");
        return;
    }
    let ds = bgp_daemonset();
    let frr = named(containers(&ds), "frr");
    let agent = named(containers(&ds), "vipflow");
    let sc = &frr["securityContext"];
    let caps: Vec<String> = strs(&sc["capabilities"]["add"])
        .iter()
        .map(|c| format!("+{}", c.to_lowercase()))
        .collect();
    let nnp = if sc["allowPrivilegeEscalation"].as_bool() == Some(false) {
        "--no-new-privs"
    } else {
        ""
    };
    let agent_dir = named(&agent["env"], "VIPFLOW_FRR_SOCKET_DIR")["value"]
        .as_str()
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path();
    for (file, text) in [
        ("command.sh", bash_script(&frr["command"])),
        (
            "readiness.sh",
            bash_script(&frr["readinessProbe"]["exec"]["command"]),
        ),
        (
            "liveness.sh",
            bash_script(&frr["livenessProbe"]["exec"]["command"]),
        ),
        ("frr.conf", AGENT_FRR_CONFIG),
    ] {
        std::fs::write(out_dir.join(file), text).unwrap();
    }
    let out = Command::new("unshare")
        .args([
            "--mount",
            "--net",
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
        ])
        .args(["/bin/bash", "-c", POD_HARNESS])
        .env("OUT", out_dir)
        .env("CAPS", caps.join(","))
        .env("FRR_NNP", nnp)
        .env("FRRVTY", gid.unwrap_or_default().to_string())
        .env("AGENT_DIR", agent_dir)
        .output()
        .expect("unshare");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let said: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("== "))
        .collect();
    let mut want = vec![
        "ready".to_string(),
        "live".into(),
        "agent configured".into(),
        "agent read back".into(),
        "refused without frrvty".into(),
        "bgpd killed: exited 1, 0 daemons left".into(),
        "ready again on the same directory".into(),
        "SIGTERM: exited 0, 0 daemons left".into(),
    ];
    for c in FRR_CAPABILITIES.iter().filter(|c| **c != "KILL") {
        want.push(format!("without {}: exited 1", c.to_lowercase()));
    }
    want.push("without kill: SIGTERM leaves FRR running".into());
    assert_eq!(
        said,
        want,
        "\n{stdout}{}\nFRR's log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(out_dir.join("frr.log")).unwrap_or_default()
    );
}

/// Whether `role`'s rules allow `verb` on `group`/`resource` (named `name`, if the request
/// names one), as the API server's RBAC decides it.
fn allows(role: &Value, group: &str, resource: &str, verb: &str, name: Option<&str>) -> bool {
    seq(&role["rules"]).iter().any(|rule| {
        let has = |key: &str, want: &str| strs(&rule[key]).iter().any(|v| *v == want || *v == "*");
        let names = strs(&rule["resourceNames"]);
        has("apiGroups", group)
            && has("resources", resource)
            && has("verbs", verb)
            && (names.is_empty() || name.is_some_and(|n| names.contains(&n)))
    })
}

/// A request as RBAC sees it, from its path: (API group, namespace, object name).
fn rbac_target(path: &str) -> (String, Option<String>, Option<String>) {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => (String::new(), rest),
        ["apis", group, _version, rest @ ..] => (group.to_string(), rest),
        _ => return (String::new(), None, None),
    };
    let (ns, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
        _ => (None, rest),
    };
    (group, ns, rest.get(1).map(|n| n.to_string()))
}

/// Every request a cluster-mode agent makes is one the shipped RBAC grants: the ClusterRole
/// anywhere, the leader-election Role in the agent's own namespace. The agent runs in frr-k8s
/// mode beside MetalLB's objects (a field it does not carry out, so it writes an Event on the
/// object), writes a pool's shared object and its own, and puts back an FRRConfiguration
/// someone else deletes. The API test server grants everything; this is what
/// a real one would refuse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_the_agent_makes_is_granted_by_the_shipped_rbac() {
    use serde_json::json;
    use testkit::eventually_async;
    use testkit::kube_server::KubeServer;
    const FRR: &str = "frrk8s.metallb.io/v1beta1";
    let kube = KubeServer::start().await;
    testkit::bgp_objects::BgpObjects::serve_kinds(&kube);
    for (api, plural, kind, namespaced) in [
        (FRR, "frrconfigurations", "FRRConfiguration", true),
        (FRR, "frrnodestates", "FRRNodeState", false),
        (FRR, "bgpsessionstates", "BGPSessionState", true),
        (
            "metallb.io/v1beta1",
            "ipaddresspools",
            "IPAddressPool",
            true,
        ),
        (
            "metallb.io/v1beta1",
            "l2advertisements",
            "L2Advertisement",
            true,
        ),
    ] {
        kube.register_resource(api, plural, kind, namespaced);
        kube.enable_crd(api, plural);
    }
    kube.apply(json!({"apiVersion": FRR, "kind": "FRRNodeState", "metadata": {"name": "n1"}}));
    kube.apply_yaml(
        r#"
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {kubernetes.io/hostname: n1}}
status: {addresses: [{type: InternalIP, address: 192.168.10.11}], conditions: [{type: Ready, status: 'True'}]}
---
apiVersion: vipflow.io/v1alpha1
kind: BGPPeer
metadata: {name: tor}
spec: {myASN: 64513, peerASN: 64512, peerAddress: 10.9.0.1}
---
apiVersion: vipflow.io/v1alpha1
kind: VipPool
metadata: {name: blue}
spec: {addresses: [198.51.100.0/24]}
---
apiVersion: vipflow.io/v1alpha1
kind: BGPAdvertisement
metadata: {name: all}
spec: {}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: lan, namespace: metallb-system}
spec: {addresses: [172.18.0.200-172.18.0.210]}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: l2, namespace: metallb-system}
spec: {ipAddressPools: [lan], interfaces: [eth9]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {externalIPs: [198.51.100.11], externalTrafficPolicy: Local, ports: [{port: 80, protocol: TCP}]}
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: shop}
spec: {externalIPs: [198.51.100.12], ports: [{port: 443, protocol: TCP}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: shop, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{port: 80, protocol: TCP}]
endpoints: [{addresses: [10.0.0.9], nodeName: n1, conditions: {ready: true}}]
"#,
    );
    let sb = testkit::Sandbox::openflow_only();
    let cluster = vipflow::agent::start_cluster(
        common::cluster_config(&sb, "n1", None),
        common::cluster_options(&kube, "agent-n1"),
    )
    .await
    .expect("the agent starts");
    let frr_configurations = || kube.list(FRR, "FRRConfiguration");
    eventually_async("the pool's object and n1's own", 30, || {
        frr_configurations().len() == 2
    })
    .await;
    eventually_async("an Event on the L2Advertisement", 30, || {
        kube.events()
            .iter()
            .any(|e| e["regarding"]["name"] == "l2" || e["involvedObject"]["name"] == "l2")
    })
    .await;
    kube.delete(FRR, "FRRConfiguration", "frr-k8s-system", "vipflow-node-n1");
    eventually_async("n1's object written again", 30, || {
        frr_configurations().len() == 2
    })
    .await;
    cluster.shutdown().await;

    let cluster_role = object("ClusterRole", "vipflow");
    let role = object("Role", "vipflow-leader-election");
    let mut refused = BTreeSet::new();
    let mut seen = BTreeSet::new();
    for r in kube.request_log() {
        if matches!(r.verb.as_str(), "discovery" | "unknown") {
            continue;
        }
        let (group, ns, name) = rbac_target(&r.path);
        let name = match r.verb.as_str() {
            "list" | "watch" | "create" | "deletecollection" => None,
            _ => name,
        };
        let key = format!("{} {group}/{} in {ns:?} named {name:?}", r.verb, r.resource);
        let granted = allows(&cluster_role, &group, &r.resource, &r.verb, name.as_deref())
            || (ns.as_deref() == Some("default")
                && allows(&role, &group, &r.resource, &r.verb, name.as_deref()));
        if !granted {
            refused.insert(key.clone());
        }
        seen.insert(key);
    }
    println!(
        "{} kinds of request, e.g.:\n{}",
        seen.len(),
        seen.iter().take(60).cloned().collect::<Vec<_>>().join("\n")
    );
    assert!(
        seen.iter()
            .any(|k| k.starts_with("watch frrk8s.metallb.io/frrconfigurations")),
        "the agent watched its FRRConfigurations: {seen:#?}"
    );
    assert!(
        refused.is_empty(),
        "not granted by deploy/rbac.yaml:\n{refused:#?}"
    );
}
