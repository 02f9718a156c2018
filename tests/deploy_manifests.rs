//! deploy/: every manifest is validated offline against Kubernetes' own schemas (the
//! `kubernetes-validate` package, strict: unknown fields are errors), and checked for what the
//! agent depends on: host network, the OVS and OVN socket directories, the node name from the
//! downward API, probes on the HTTP port, a restrictive securityContext, least-privilege RBAC,
//! and a config file that vipflow's own loader accepts.
//!
//! The validator is installed by scripts/install-deps.sh into target-tools/venv. Under CI
//! (`CI` set) a missing validator fails the test; elsewhere the schema test is skipped with a
//! loud message, and every other check still runs.

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
            &["vipflow-northbound"],
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
