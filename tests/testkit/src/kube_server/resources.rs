//! The resources the test server knows, and the discovery documents built from them.

use serde_json::{Value, json};

/// A resource the server can serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceDef {
    /// API group, "" for the core group.
    pub group: String,
    pub version: String,
    /// Plural name, as in the URL: `services`.
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    /// Has a `status` subresource: writes to the main resource keep the stored status, writes to
    /// `/status` change only the status.
    pub status_subresource: bool,
    /// Create through HTTP keeps the posted status (Nodes); otherwise it is dropped.
    pub create_keeps_status: bool,
    /// Served only after `KubeServer::enable_crd` (a custom resource).
    pub crd: bool,
    pub short_names: Vec<String>,
}

impl ResourceDef {
    fn new(
        group: &str,
        version: &str,
        plural: &str,
        singular: &str,
        kind: &str,
        namespaced: bool,
    ) -> Self {
        ResourceDef {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            singular: singular.into(),
            kind: kind.into(),
            namespaced,
            status_subresource: false,
            create_keeps_status: false,
            crd: false,
            short_names: Vec::new(),
        }
    }

    fn with_status(mut self, keep_on_create: bool) -> Self {
        self.status_subresource = true;
        self.create_keeps_status = keep_on_create;
        self
    }

    fn short(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    fn crd(mut self) -> Self {
        self.crd = true;
        self
    }

    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `services` or `leases.coordination.k8s.io`, as in apiserver error messages.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The store key of this resource (version-independent).
    pub(crate) fn key(&self) -> String {
        format!("{}/{}", self.group, self.plural)
    }

    fn api_resources(&self) -> Vec<Value> {
        let mut out = vec![json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
        })];
        if !self.short_names.is_empty() {
            out[0]["shortNames"] = json!(self.short_names);
        }
        if self.status_subresource {
            out.push(json!({
                "name": format!("{}/status", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        out
    }
}

/// Resources served from the start, plus known custom resources that need `enable_crd`.
pub(crate) fn default_resources() -> Vec<ResourceDef> {
    vec![
        ResourceDef::new("", "v1", "services", "service", "Service", true)
            .with_status(false)
            .short(&["svc"]),
        ResourceDef::new("", "v1", "nodes", "node", "Node", false)
            .with_status(true)
            .short(&["no"]),
        ResourceDef::new("", "v1", "namespaces", "namespace", "Namespace", false)
            .with_status(true)
            .short(&["ns"]),
        ResourceDef::new("", "v1", "events", "event", "Event", true).short(&["ev"]),
        ResourceDef::new(
            "discovery.k8s.io",
            "v1",
            "endpointslices",
            "endpointslice",
            "EndpointSlice",
            true,
        ),
        ResourceDef::new(
            "coordination.k8s.io",
            "v1",
            "leases",
            "lease",
            "Lease",
            true,
        ),
        ResourceDef::new("events.k8s.io", "v1", "events", "event", "Event", true).short(&["ev"]),
        ResourceDef::new("kubeovn.io", "v1", "subnets", "subnet", "Subnet", false)
            .with_status(false)
            .crd(),
    ]
}

/// `/version`.
pub(crate) fn version_info() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "emulationMajor": "1",
        "emulationMinor": "33",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "32",
        "gitVersion": "v1.33.0",
        "gitCommit": "60a317eadfcb839692a5551a5e8c1c4fd3a6d7f6",
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T13:00:00Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

/// `/api`.
pub(crate) fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    })
}

fn group_doc(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({"name": group, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

fn groups_of(defs: &[&ResourceDef]) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for d in defs.iter().filter(|d| !d.group.is_empty()) {
        match groups.iter_mut().find(|(g, _)| *g == d.group) {
            Some((_, vs)) => {
                if !vs.contains(&d.version) {
                    vs.push(d.version.clone());
                }
            }
            None => groups.push((d.group.clone(), vec![d.version.clone()])),
        }
    }
    groups
}

/// `/apis`: an APIGroupList of the served (enabled) resources.
pub(crate) fn group_list(defs: &[&ResourceDef]) -> Value {
    let groups: Vec<Value> = groups_of(defs)
        .iter()
        .map(|(g, vs)| group_doc(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`, or None when no served resource is in the group.
pub(crate) fn group(defs: &[&ResourceDef], group: &str) -> Option<Value> {
    groups_of(defs)
        .iter()
        .find(|(g, _)| g == group)
        .map(|(g, vs)| {
            let mut doc = group_doc(g, vs);
            doc["kind"] = json!("APIGroup");
            doc["apiVersion"] = json!("v1");
            doc
        })
}

/// `/api/v1` or `/apis/{group}/{version}`, or None when nothing is served there.
pub(crate) fn resource_list(defs: &[&ResourceDef], group: &str, version: &str) -> Option<Value> {
    let served: Vec<&&ResourceDef> = defs
        .iter()
        .filter(|d| d.group == group && d.version == version)
        .collect();
    if served.is_empty() {
        return None;
    }
    let resources: Vec<Value> = served.iter().flat_map(|d| d.api_resources()).collect();
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}
