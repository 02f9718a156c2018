//! The object store: JSON objects keyed by (resource, namespace, name), one global
//! resourceVersion counter, the change history that watches replay, and apiserver-shaped errors.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::RequestRecord;
use super::resources::{ResourceDef, default_resources};

/// Changes kept for watches before the oldest are forgotten (as a watch cache would).
const HISTORY_LIMIT: usize = 100_000;

/// An error the apiserver would return, rendered as a `Status` object.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    pub(crate) fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub(crate) fn invalid(def: &ResourceDef, name: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        ApiError {
            code: 422,
            reason: "Invalid",
            message: format!("{} {:?} is invalid: {message}", def.kind, name),
            details: Some(json!({"name": name, "group": def.group, "kind": def.kind})),
        }
    }

    pub(crate) fn not_found(def: &ResourceDef, name: &str) -> Self {
        ApiError {
            code: 404,
            reason: "NotFound",
            message: format!("{} {:?} not found", def.group_resource(), name),
            details: Some(json!({"name": name, "group": def.group, "kind": def.plural})),
        }
    }

    pub(crate) fn no_route() -> Self {
        ApiError {
            code: 404,
            reason: "NotFound",
            message: "the server could not find the requested resource".into(),
            details: Some(json!({})),
        }
    }

    pub(crate) fn already_exists(def: &ResourceDef, name: &str) -> Self {
        ApiError {
            code: 409,
            reason: "AlreadyExists",
            message: format!("{} {:?} already exists", def.group_resource(), name),
            details: Some(json!({"name": name, "group": def.group, "kind": def.plural})),
        }
    }

    pub(crate) fn conflict(def: &ResourceDef, name: &str) -> Self {
        ApiError {
            code: 409,
            reason: "Conflict",
            message: format!(
                "Operation cannot be fulfilled on {} {:?}: the object has been modified; please apply your changes to the latest version and try again",
                def.group_resource(),
                name
            ),
            details: Some(json!({"name": name, "group": def.group, "kind": def.plural})),
        }
    }

    pub(crate) fn expired(requested: &str, oldest: u64) -> Self {
        Self::new(
            410,
            "Expired",
            format!("too old resource version: {requested} ({oldest})"),
        )
    }

    pub(crate) fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    /// The `Status` object.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeType {
    Added,
    Modified,
    Deleted,
}

impl ChangeType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// One committed change, replayed to watches.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub rv: u64,
    pub res: String,
    pub ns: String,
    pub kind: ChangeType,
    /// The object after the change (for a deletion: its last state, with the deletion's RV).
    pub object: Value,
    /// The object before a modification (for selector transitions).
    pub prev: Option<Value>,
}

/// How an update treats the stored object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpdateMode {
    /// PUT/PATCH on the resource: status kept from the stored object if it has a status subresource.
    Main,
    /// PUT/PATCH on `/status`: only the status changes.
    Status,
    /// The test control API: everything as given.
    Control,
}

pub(crate) type ObjKey = (String, String, String);

pub(crate) struct Store {
    pub rv: u64,
    pub objects: BTreeMap<ObjKey, Value>,
    pub history: VecDeque<Change>,
    /// History at or before this RV is forgotten: a watch from an older RV gets 410.
    pub compacted: u64,
    pub resources: Vec<ResourceDef>,
    pub enabled: BTreeSet<String>,
    pub log: Vec<RequestRecord>,
    /// Bumped by `expire_watches`: open watches end with a 410 ERROR event.
    pub expire_gen: u64,
    /// Bumped by `close_watches`: open watches end cleanly.
    pub close_gen: u64,
    pub stopped: bool,
    pub bookmark_interval: Duration,
    pub open_watches: usize,
    /// Highest resourceVersion sent in a periodic BOOKMARK so far.
    pub last_bookmark_rv: u64,
    uid_seed: u64,
    uid_counter: u64,
}

pub(crate) fn now_rfc3339() -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub(crate) fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj)
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The `metadata` map of an object, created if missing. Callers pass objects checked by
/// `check_type` or read from the store, so the fallbacks never trigger on request data.
fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = json!({});
    }
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"]
        .as_object_mut()
        .expect("metadata was just made an object")
}

fn valid_name(name: &str) -> bool {
    name.len() <= 253
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

impl Store {
    pub(crate) fn new() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Store {
            rv: 1,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            compacted: 0,
            resources: default_resources(),
            enabled: BTreeSet::new(),
            log: Vec::new(),
            expire_gen: 0,
            close_gen: 0,
            stopped: false,
            bookmark_interval: Duration::from_secs(1),
            open_watches: 0,
            last_bookmark_rv: 0,
            uid_seed: seed ^ (std::process::id() as u64) << 32,
            uid_counter: 0,
        }
    }

    /// Whether the resource is served over HTTP.
    pub(crate) fn served(&self, def: &ResourceDef) -> bool {
        !def.crd || self.enabled.contains(&def.key())
    }

    pub(crate) fn served_defs(&self) -> Vec<&ResourceDef> {
        self.resources.iter().filter(|d| self.served(d)).collect()
    }

    /// A served resource by URL parts.
    pub(crate) fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<ResourceDef> {
        self.resources
            .iter()
            .find(|d| {
                d.group == group && d.version == version && d.plural == plural && self.served(d)
            })
            .cloned()
    }

    /// Any known resource by apiVersion and kind (served or not).
    pub(crate) fn lookup_kind(&self, api_version: &str, kind: &str) -> Option<ResourceDef> {
        self.resources
            .iter()
            .find(|d| d.api_version() == api_version && d.kind == kind)
            .cloned()
    }

    fn new_uid(&mut self) -> String {
        self.uid_counter += 1;
        let a = self
            .uid_seed
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(self.uid_counter);
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            (a >> 32) as u32,
            (a >> 16) as u16,
            a & 0xfff,
            (self.uid_counter >> 48) & 0xfff,
            self.uid_counter & 0xffff_ffff_ffff
        )
    }

    fn random_suffix(&mut self) -> String {
        const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        self.uid_counter += 1;
        let mut x = self
            .uid_seed
            .wrapping_add(self.uid_counter.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        (0..5)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ALPHA[((x >> 33) % ALPHA.len() as u64) as usize] as char
            })
            .collect()
    }

    pub(crate) fn get(&self, def: &ResourceDef, ns: &str, name: &str) -> Option<&Value> {
        self.objects
            .get(&(def.key(), ns.to_string(), name.to_string()))
    }

    /// Objects of one resource (optionally one namespace) in (namespace, name) order.
    pub(crate) fn list<'a>(
        &'a self,
        def: &ResourceDef,
        ns: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        self.list_after(def, ns, None)
    }

    /// [`Store::list`] from just after `after` (a `continue` token's namespace and name): a
    /// page costs its own objects, as in the apiserver's cache, not a walk from the start.
    pub(crate) fn list_after<'a>(
        &'a self,
        def: &ResourceDef,
        ns: Option<&'a str>,
        after: Option<(&str, &str)>,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        use std::ops::Bound;
        let key = def.key();
        let start = match after {
            Some((n, name)) => Bound::Excluded((key.clone(), n.to_string(), name.to_string())),
            None => Bound::Included((key.clone(), ns.unwrap_or("").to_string(), String::new())),
        };
        self.objects
            .range((start, Bound::Unbounded))
            .take_while(move |((r, n, _), _)| *r == key && ns.is_none_or(|ns| ns == n))
            .map(|(_, v)| v)
    }

    fn record(
        &mut self,
        def: &ResourceDef,
        ns: &str,
        kind: ChangeType,
        object: Value,
        prev: Option<Value>,
    ) {
        self.history.push_back(Change {
            rv: self.rv,
            res: def.key(),
            ns: ns.to_string(),
            kind,
            object,
            prev,
        });
        while self.history.len() > HISTORY_LIMIT {
            if let Some(c) = self.history.pop_front() {
                self.compacted = c.rv;
            }
        }
    }

    /// Checks apiVersion/kind and fills them in.
    fn check_type(def: &ResourceDef, obj: &mut Value) -> Result<(), ApiError> {
        let Value::Object(m) = obj else {
            return Err(ApiError::bad_request(
                "the body of the request is not a JSON object",
            ));
        };
        let api_version = def.api_version();
        if let Some(v) = m.get("apiVersion").and_then(Value::as_str)
            && !v.is_empty()
            && v != api_version
        {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({api_version})"
            )));
        }
        if let Some(k) = m.get("kind").and_then(Value::as_str)
            && !k.is_empty()
            && k != def.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                def.kind
            )));
        }
        m.insert("apiVersion".into(), json!(api_version));
        m.insert("kind".into(), json!(def.kind));
        if m.get("metadata")
            .is_some_and(|v| !v.is_object() && !v.is_null())
        {
            return Err(ApiError::bad_request("metadata must be an object"));
        }
        Ok(())
    }

    /// Checks the namespace in the body against the request's and sets it.
    fn check_namespace(def: &ResourceDef, obj: &mut Value, ns: &str) -> Result<(), ApiError> {
        let m = meta_mut(obj);
        if def.namespaced {
            match m.get("namespace").and_then(Value::as_str) {
                Some(n) if !n.is_empty() && n != ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {
                    m.insert("namespace".into(), json!(ns));
                }
            }
        } else {
            m.remove("namespace");
        }
        Ok(())
    }

    /// Creates an object. `control`: keep the given uid, creationTimestamp and status (the test
    /// control API loading fixtures); otherwise behave as the apiserver does.
    pub(crate) fn create(
        &mut self,
        def: &ResourceDef,
        ns: &str,
        mut obj: Value,
        control: bool,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        Self::check_type(def, &mut obj)?;
        Self::check_namespace(def, &mut obj, ns)?;
        let name = match (meta_str(&obj, "name"), meta_str(&obj, "generateName")) {
            (Some(n), _) => n.to_string(),
            (None, Some(g)) => format!("{g}{}", self.random_suffix()),
            (None, None) => {
                return Err(ApiError::invalid(
                    def,
                    "",
                    "metadata.name: Required value: name or generateName is required",
                ));
            }
        };
        if !valid_name(&name) {
            return Err(ApiError::invalid(
                def,
                &name,
                format!(
                    "metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
                ),
            ));
        }
        if self.get(def, ns, &name).is_some() {
            return Err(ApiError::already_exists(def, &name));
        }
        if def.status_subresource
            && !def.create_keeps_status
            && !control
            && let Some(m) = obj.as_object_mut()
        {
            m.remove("status");
        }
        let uid = self.new_uid();
        let rv = self.rv + 1;
        let given = |m: &Map<String, Value>, k: &str| {
            m.get(k)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
        };
        let m = meta_mut(&mut obj);
        m.insert("name".into(), json!(name));
        if !(control && given(m, "uid")) {
            m.insert("uid".into(), json!(uid));
        }
        if !(control && given(m, "creationTimestamp")) {
            m.insert("creationTimestamp".into(), json!(now_rfc3339()));
        }
        m.insert("resourceVersion".into(), json!(rv.to_string()));
        m.remove("deletionTimestamp");
        if dry_run {
            return Ok(obj);
        }
        self.rv = rv;
        self.objects
            .insert((def.key(), ns.to_string(), name), obj.clone());
        self.record(def, ns, ChangeType::Added, obj.clone(), None);
        Ok(obj)
    }

    /// Replaces an object. A set `metadata.resourceVersion` that differs from the stored one is
    /// a 409 Conflict (except in `Control` mode). An update that changes nothing keeps the RV and
    /// produces no watch event.
    pub(crate) fn update(
        &mut self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        mut obj: Value,
        mode: UpdateMode,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        Self::check_type(def, &mut obj)?;
        Self::check_namespace(def, &mut obj, ns)?;
        match meta_str(&obj, "name") {
            Some(n) if n != name => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
            _ => {}
        }
        let Some(old) = self.get(def, ns, name).cloned() else {
            return Err(ApiError::not_found(def, name));
        };
        let old_rv = meta_str(&old, "resourceVersion").unwrap_or("").to_string();
        if mode != UpdateMode::Control {
            if let Some(rv) = meta_str(&obj, "resourceVersion")
                && rv != old_rv
            {
                return Err(ApiError::conflict(def, name));
            }
            if let (Some(u), Some(old_u)) = (meta_str(&obj, "uid"), meta_str(&old, "uid"))
                && u != old_u
            {
                return Err(ApiError::new(
                    409,
                    "Conflict",
                    format!(
                        "Operation cannot be fulfilled on {} {name:?}: Precondition failed: UID in precondition: {u}, UID in object meta: {old_u}",
                        def.group_resource()
                    ),
                ));
            }
        }
        let mut new = match mode {
            UpdateMode::Status => {
                let mut n = old.clone();
                match obj.get("status") {
                    Some(s) => n["status"] = s.clone(),
                    None => {
                        if let Some(m) = n.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
                // Who applied what changes with the status, as the API server records it.
                let fields = obj.pointer("/metadata/managedFields").cloned();
                let m = meta_mut(&mut n);
                match fields {
                    Some(f) => m.insert("managedFields".into(), f),
                    None => m.remove("managedFields"),
                };
                n
            }
            UpdateMode::Main if def.status_subresource => {
                match old.get("status") {
                    Some(s) => obj["status"] = s.clone(),
                    None => {
                        if let Some(m) = obj.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
                obj
            }
            _ => obj,
        };
        {
            let old_meta = meta(&old).cloned().unwrap_or_default();
            let m = meta_mut(&mut new);
            m.insert("name".into(), json!(name));
            for keep in ["uid", "creationTimestamp"] {
                match old_meta.get(keep) {
                    Some(v) => m.insert(keep.into(), v.clone()),
                    None => m.remove(keep),
                };
            }
            m.insert("resourceVersion".into(), json!(old_rv));
        }
        if new == old {
            return Ok(old);
        }
        let rv = self.rv + 1;
        meta_mut(&mut new).insert("resourceVersion".into(), json!(rv.to_string()));
        if dry_run {
            return Ok(new);
        }
        self.rv = rv;
        self.objects
            .insert((def.key(), ns.to_string(), name.to_string()), new.clone());
        self.record(def, ns, ChangeType::Modified, new.clone(), Some(old));
        Ok(new)
    }

    /// Deletes an object, checking optional resourceVersion/uid preconditions.
    pub(crate) fn delete(
        &mut self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        precondition_rv: Option<&str>,
        precondition_uid: Option<&str>,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let key = (def.key(), ns.to_string(), name.to_string());
        let Some(old) = self.objects.get(&key) else {
            return Err(ApiError::not_found(def, name));
        };
        if precondition_rv.is_some_and(|rv| Some(rv) != meta_str(old, "resourceVersion"))
            || precondition_uid.is_some_and(|u| Some(u) != meta_str(old, "uid"))
        {
            return Err(ApiError::conflict(def, name));
        }
        let mut gone = old.clone();
        if dry_run {
            return Ok(gone);
        }
        self.objects.remove(&key);
        self.rv += 1;
        meta_mut(&mut gone).insert("resourceVersion".into(), json!(self.rv.to_string()));
        self.record(def, ns, ChangeType::Deleted, gone.clone(), None);
        Ok(gone)
    }

    /// Index of the first change after `rv`.
    pub(crate) fn history_after(&self, rv: u64) -> usize {
        self.history.partition_point(|c| c.rv <= rv)
    }

    /// Forget history up to now.
    pub(crate) fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.rv;
    }
}
