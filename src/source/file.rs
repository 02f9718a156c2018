//! The file source: Kubernetes objects from a file, re-read when it changes.
//!
//! Accepts what `kubectl get svc,endpointslices,nodes -A -o yaml` (or `-o json`) prints: a
//! `List` with `items`, several YAML documents, or single objects. Each item is decoded on its
//! own, so one bad item is reported and skipped while the rest still apply; unknown fields are
//! reported (as kubectl warns) but do not reject the object. A file that does not parse at all
//! leaves the last good objects in place: nothing already programmed is lost.
//!
//! A file is acted on only when it can be a complete snapshot, because a reader racing a writer
//! (`kubectl get ... -o yaml > file` truncates, then writes) sees it empty or cut short, and
//! planning that would delete what is programmed:
//! - it holds at least one document: an empty or comment-only file is no snapshot (zero objects
//!   is said with an empty List, `kind: List` and `items: []`, as kubectl prints it);
//! - every top-level document has a `kind`, and a List its `items`: kubectl writes `kind: List`
//!   after `items`, so a List cut short has none;
//! - it reads the same twice, [`SETTLE`] apart: a writer still at work changes it in between.
//!
//! A file cut between two complete items of a List whose `kind` comes first (hand-written) and
//! left so longer than [`SETTLE`] reads as a smaller snapshot: write such files to a temporary
//! name and rename them into place.

use crate::model::{Objects, Problem};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parse {path}: {detail}")]
    Parse { path: PathBuf, detail: String },
    #[error("{path} is {size} bytes, over the limit of {limit} (objects-max-bytes): not read")]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
}

/// Default largest objects file read: a `kubectl get svc,endpointslices,nodes -A -o yaml` of
/// 10,000 Services fits several times over.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// Deepest `[`/`{` nesting accepted, checked in one linear pass before any parser runs (a
/// Kubernetes object nests about 10 levels; the YAML parser's cost grows with the square of
/// the depth).
pub const MAX_DEPTH: usize = 64;

/// Read `path` whole, refusing a file over `max` bytes before and while reading (it may grow).
fn read_bounded(path: &Path, max: u64) -> Result<String, FileError> {
    use std::io::Read;
    let rd = |source| FileError::Read {
        path: path.into(),
        source,
    };
    let f = std::fs::File::open(path).map_err(rd)?;
    let size = f.metadata().map_err(rd)?.len();
    let too_large = |size| FileError::TooLarge {
        path: path.into(),
        size,
        limit: max,
    };
    if size > max {
        return Err(too_large(size));
    }
    let mut text = String::with_capacity(size as usize);
    let n = f
        .take(max.saturating_add(1))
        .read_to_string(&mut text)
        .map_err(rd)?;
    if n as u64 > max {
        return Err(too_large(n as u64));
    }
    Ok(text)
}

/// The deepest `[`/`{` nesting of `text` outside double-quoted strings, or an error once it
/// passes `max`. Linear, so a hostile file is refused before a parser spends time on it.
fn check_depth(text: &str, max: usize) -> Result<(), String> {
    let (mut depth, mut in_str, mut escaped) = (0usize, false, false);
    for (line, b) in text.bytes().scan(1usize, |line, b| {
        let l = *line;
        if b == b'\n' {
            *line += 1;
        }
        Some((l, b))
    }) {
        if in_str {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return Err(format!(
                        "line {line}: nested more than {max} levels deep: not a Kubernetes object"
                    ));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Objects read from a file, with what was wrong in it.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    pub objects: Objects,
    pub problems: Vec<Problem>,
    /// False only for a source's placeholder before its first complete snapshot: planning it
    /// would delete everything programmed.
    pub complete: bool,
}

/// Read and parse a file of at most `max_bytes`.
pub fn load(path: &Path, max_bytes: u64) -> Result<Loaded, FileError> {
    let text = read_bounded(path, max_bytes)?;
    parse(&text).map_err(|detail| FileError::Parse {
        path: path.into(),
        detail,
    })
}

/// Parse the text of an objects file. Only a document that is not YAML/JSON at all, or not a
/// mapping, is an error; problems with single items are returned in [`Loaded::problems`].
pub fn parse(text: &str) -> Result<Loaded, String> {
    check_depth(text, MAX_DEPTH)?;
    let mut docs = Vec::new();
    for (i, de) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let v =
            serde_json::Value::deserialize(de).map_err(|e| format!("document {}: {e}", i + 1))?;
        // A bare string, number or sequence is no object at all (plain text, an error page):
        // reading it as "no objects" would remove every flow, so it is an error like bad YAML.
        match v {
            serde_json::Value::Null => {}
            serde_json::Value::Object(_) => docs.push(v),
            _ => {
                return Err(format!(
                    "document {}: not a mapping (a Kubernetes object or List)",
                    i + 1
                ));
            }
        }
    }
    if docs.is_empty() {
        return Err(
            "no objects at all (empty, or only comments): not taken as a snapshot; \
                    write an empty List (kind: List, items: []) to mean no objects"
                .into(),
        );
    }
    for (i, doc) in docs.iter().enumerate() {
        let kind = doc.get("kind").and_then(|k| k.as_str());
        let has_items = doc.get("items").is_some();
        let cut = match kind {
            None if has_items => Some("has items but no kind: a List cut short?"),
            None => Some("has no kind: cut short?"),
            Some(k) if (k == "List" || k.ends_with("List")) && !has_items => {
                Some("is a List without items: cut short?")
            }
            _ => None,
        };
        if let Some(why) = cut {
            return Err(format!(
                "document {} {why} (not taken as a snapshot; the last complete one stays)",
                i + 1
            ));
        }
    }
    let mut out = Loaded::default();
    for doc in docs {
        let is_list = doc
            .get("kind")
            .and_then(|k| k.as_str())
            .is_some_and(|k| k == "List" || k.ends_with("List"));
        match (is_list, doc.get("items")) {
            (true, Some(serde_json::Value::Array(items))) => {
                // Items of a typed list (`ServiceList`, as the API server returns it) carry no
                // kind or apiVersion of their own: they take the list's.
                let list_kind = doc.get("kind").and_then(|k| k.as_str()).unwrap_or("");
                let item_kind = list_kind.strip_suffix("List").filter(|k| !k.is_empty());
                let list_api = doc.get("apiVersion").cloned();
                for item in items {
                    let mut item = item.clone();
                    if let (Some(kind), Some(obj)) = (item_kind, item.as_object_mut()) {
                        obj.entry("kind")
                            .or_insert_with(|| serde_json::Value::String(kind.into()));
                        if let Some(api) = &list_api {
                            obj.entry("apiVersion").or_insert_with(|| api.clone());
                        }
                    }
                    add_item(item, &mut out);
                }
            }
            (true, _) => out
                .problems
                .push(problem("List", "items is not an array".into())),
            (false, _) => add_item(doc, &mut out),
        }
    }
    out.complete = true;
    Ok(out)
}

fn problem(object: &str, reason: String) -> Problem {
    Problem {
        object: object.into(),
        vip: None,
        reason,
    }
}

fn describe(item: &serde_json::Value, kind: &str) -> String {
    let meta = item.get("metadata");
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(|n| n.as_str())
        .unwrap_or("<unnamed>");
    match meta
        .and_then(|m| m.get("namespace"))
        .and_then(|n| n.as_str())
    {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

fn add_item(item: serde_json::Value, out: &mut Loaded) {
    let kind = item
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or("")
        .to_string();
    let api = item
        .get("apiVersion")
        .and_then(|k| k.as_str())
        .unwrap_or("")
        .to_string();
    let what = describe(&item, if kind.is_empty() { "object" } else { &kind });
    let want_api = match kind.as_str() {
        "Service" | "Node" => "v1",
        "EndpointSlice" => "discovery.k8s.io/v1",
        "Subnet" => "kubeovn.io/v1",
        "" => {
            out.problems
                .push(problem(&what, "has no kind; skipped".into()));
            return;
        }
        // Other kinds in a `kubectl get -A` dump (Endpoints, Pods, ...) are not ours.
        _ => return,
    };
    if api != want_api {
        out.problems.push(problem(
            &what,
            format!("apiVersion {api:?} is not {want_api:?}; skipped"),
        ));
        return;
    }
    let mut unknown = Vec::new();
    let res = match kind.as_str() {
        "Service" => decode::<core::Service>(item, &mut unknown)
            .map(|o| out.objects.services.push(Arc::new(o))),
        "Node" => {
            decode::<core::Node>(item, &mut unknown).map(|o| out.objects.nodes.push(Arc::new(o)))
        }
        // Kube-OVN's many other Subnet fields are not ours to warn about.
        "Subnet" => serde_json::from_value::<crate::model::KubeOvnSubnet>(item)
            .map(|o| out.objects.subnets.push(o))
            .map_err(|e| e.to_string()),
        _ => decode::<discovery::EndpointSlice>(item, &mut unknown)
            .map(|o| out.objects.endpoint_slices.push(Arc::new(o))),
    };
    match res {
        Ok(()) => {
            for path in unknown {
                out.problems
                    .push(problem(&what, format!("unknown field {path} ignored")));
            }
        }
        Err(e) => out
            .problems
            .push(problem(&what, format!("invalid: {e}; skipped"))),
    }
}

fn decode<T: serde::de::DeserializeOwned>(
    v: serde_json::Value,
    unknown: &mut Vec<String>,
) -> Result<T, String> {
    // serde_ignored writes `?` for an Option level; users know the field path without it.
    serde_ignored::deserialize(v, |path| unknown.push(path.to_string().replace("?.", "")))
        .map_err(|e| e.to_string())
}

/// Load `path` now (an error if it cannot be read or parsed: an agent started on a broken
/// file must not plan an empty world and delete its flows), then keep polling it every
/// `interval` in a task; the receiver sees a new [`Loaded`] whenever the content changes.
pub fn watch(
    path: PathBuf,
    interval: Duration,
) -> Result<(watch::Receiver<Arc<Loaded>>, tokio::task::JoinHandle<()>), FileError> {
    watch_bounded(path, interval, DEFAULT_MAX_BYTES)
}

/// [`watch`] with a file size limit other than [`DEFAULT_MAX_BYTES`].
pub fn watch_bounded(
    path: PathBuf,
    interval: Duration,
    max_bytes: u64,
) -> Result<(watch::Receiver<Arc<Loaded>>, tokio::task::JoinHandle<()>), FileError> {
    let stamp = Stamp::of(&path);
    let text = read_bounded(&path, max_bytes)?;
    let first = parse(&text).map_err(|detail| FileError::Parse {
        path: path.clone(),
        detail,
    })?;
    let (tx, rx) = watch::channel(Arc::new(first));
    let task = tokio::spawn(poll(path, interval, max_bytes, tx, text, stamp));
    Ok((rx, task))
}

/// What identifies a file version without reading it: a file whose stamp has not changed
/// for [`STAMP_TRUSTED_AFTER`] is not read again (a bad 200 MB file is not re-read every
/// poll). A younger stamp is not trusted: a rewrite of the same size within one timestamp tick
/// would look the same.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    inode: u64,
}

const STAMP_TRUSTED_AFTER: Duration = Duration::from_secs(2);

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(Stamp {
            len: m.len(),
            modified: m.modified().ok(),
            inode: m.ino(),
        })
    }

    fn settled(&self) -> bool {
        self.modified
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= STAMP_TRUSTED_AFTER)
    }
}

/// How long a changed file must stay the same before it is read as a snapshot.
pub const SETTLE: Duration = Duration::from_millis(100);

/// Poll `path` every `interval`; send a new [`Loaded`] whenever its content differs from
/// `last` and stayed so for the settle time. A read or parse failure is logged and the previous
/// objects stay in force. Ends when every receiver is gone.
async fn poll(
    path: PathBuf,
    interval: Duration,
    max_bytes: u64,
    tx: watch::Sender<Arc<Loaded>>,
    last: String,
    stamp: Option<Stamp>,
) {
    let mut last = Some(last);
    let mut last_stamp = stamp;
    let mut last_err: Option<String> = None;
    let read = |p: PathBuf| async move {
        tokio::task::spawn_blocking(move || read_bounded(&p, max_bytes))
            .await
            .unwrap_or_else(|e| {
                Err(FileError::Read {
                    path: PathBuf::new(),
                    source: std::io::Error::other(e.to_string()),
                })
            })
    };
    loop {
        let stamp = Stamp::of(&path);
        let unchanged =
            stamp.is_some() && stamp == last_stamp && stamp.as_ref().is_some_and(Stamp::settled);
        let got = if unchanged {
            Ok(None)
        } else {
            last_stamp = stamp;
            match read(path.clone()).await {
                Ok(text) if last.as_deref() != Some(text.as_str()) => {
                    // A writer may still be at work: take the text only if it stays the same.
                    tokio::time::sleep(SETTLE).await;
                    match read(path.clone()).await {
                        Ok(again) if again == text => Ok(Some(text)),
                        Ok(_) => Ok(None),
                        Err(e) => Err(e),
                    }
                }
                Ok(_) => Ok(None),
                Err(e) => Err(e),
            }
        };
        match got {
            Ok(Some(text)) => {
                // Off the async workers: a big file must not hold up shutdown.
                let (text, parsed) = tokio::task::spawn_blocking(move || {
                    let r = parse(&text);
                    (text, r)
                })
                .await
                .unwrap_or_else(|e| (String::new(), Err(e.to_string())));
                match parsed {
                    Ok(loaded) => {
                        tracing::info!(file = %path.display(), services = loaded.objects.services.len(),
                            slices = loaded.objects.endpoint_slices.len(), nodes = loaded.objects.nodes.len(), "objects loaded");
                        last_err = None;
                        if tx.send(Arc::new(loaded)).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        if last_err.as_deref() != Some(e.as_str()) {
                            tracing::error!(file = %path.display(), error = %e, "objects file does not parse; keeping the previous objects");
                            last_err = Some(e);
                        }
                    }
                }
                last = Some(text);
            }
            Ok(None) => {}
            Err(e) => {
                let e = e.to_string();
                if last_err.as_deref() != Some(e.as_str()) {
                    tracing::error!(file = %path.display(), error = %e, "cannot use objects file; keeping the previous objects");
                    last_err = Some(e);
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = tx.closed() => return,
        }
    }
}

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
