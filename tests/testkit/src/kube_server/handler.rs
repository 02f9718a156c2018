//! HTTP routing: discovery, list (pagination, selectors), watch (history replay, bookmarks,
//! 410), and writes. Every failure is a `Status` response; nothing here panics on request data.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::resources::{self, ResourceDef};
use super::store::{ApiError, Change, ChangeType, Store, UpdateMode, meta_str};
use super::util::{
    FieldReq, LabelReq, apply_patch, fields_match, json_patch, labels_match, merge_patch,
    parse_field_selector, parse_label_selector, parse_query,
};
use super::{RequestRecord, Shared};

pub(crate) type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Largest request body accepted.
const MAX_BODY: usize = 16 << 20;

struct Params(Vec<(String, String)>);

impl Params {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
    }

    fn dry_run(&self) -> bool {
        self.get("dryRun") == Some("All")
    }

    fn selectors(&self) -> Result<Selectors, ApiError> {
        let labels = parse_label_selector(self.get("labelSelector").unwrap_or(""))
            .map_err(ApiError::bad_request)?;
        let fields = parse_field_selector(self.get("fieldSelector").unwrap_or(""))
            .map_err(ApiError::bad_request)?;
        Ok(Selectors { labels, fields })
    }
}

struct Selectors {
    labels: Vec<LabelReq>,
    fields: Vec<FieldReq>,
}

impl Selectors {
    fn matches(&self, obj: &Value) -> bool {
        labels_match(&self.labels, obj) && fields_match(&self.fields, obj)
    }
}

fn json_response(code: u16, value: &Value) -> Response<Body> {
    bytes_response(code, serde_json::to_vec(value).unwrap_or_default())
}

fn bytes_response(code: u16, bytes: Vec<u8>) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(bytes)).boxed_unsync());
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

fn error_response(err: &ApiError) -> Response<Body> {
    json_response(err.code, &err.status())
}

/// What a request addresses.
enum Target {
    Collection {
        def: ResourceDef,
        ns: Option<String>,
    },
    Object {
        def: ResourceDef,
        ns: String,
        name: String,
        status: bool,
    },
}

fn resolve(store: &Store, group: &str, version: &str, rest: &[&str]) -> Result<Target, ApiError> {
    let (def, ns, tail) = match rest {
        ["namespaces", ns, plural, tail @ ..] if *plural != "status" => {
            let def = store
                .lookup(group, version, plural)
                .ok_or_else(ApiError::no_route)?;
            if !def.namespaced {
                return Err(ApiError::no_route());
            }
            (def, Some(ns.to_string()), tail)
        }
        [plural, tail @ ..] => {
            let def = store
                .lookup(group, version, plural)
                .ok_or_else(ApiError::no_route)?;
            if def.namespaced && !tail.is_empty() {
                return Err(ApiError::no_route());
            }
            let ns = if def.namespaced {
                None
            } else {
                Some(String::new())
            };
            (def, ns, tail)
        }
        [] => return Err(ApiError::no_route()),
    };
    match tail {
        [] => Ok(Target::Collection {
            ns: ns.filter(|_| def.namespaced),
            def,
        }),
        [name] => Ok(Target::Object {
            def,
            ns: ns.unwrap_or_default(),
            name: name.to_string(),
            status: false,
        }),
        [name, "status"] if def.status_subresource => Ok(Target::Object {
            def,
            ns: ns.unwrap_or_default(),
            name: name.to_string(),
            status: true,
        }),
        _ => Err(ApiError::no_route()),
    }
}

/// Serves one request and records it in the request log.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let content_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut verb = "unknown";
    let mut resource = String::new();
    let body = match http_body_util::Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
    {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => Err(ApiError::new(
            413,
            "RequestEntityTooLarge",
            format!("cannot read the request body: {e}"),
        )),
    };
    let resp = match body {
        Ok(body) => {
            let req = Req {
                method: &method,
                path: &path,
                query: &query,
                content_type: content_type.as_deref(),
                body,
            };
            match route(&shared, &req, &mut verb, &mut resource) {
                Ok(r) => r,
                Err(e) => error_response(&e),
            }
        }
        Err(e) => error_response(&e),
    };
    shared.log(RequestRecord {
        method: method.to_string(),
        path,
        query,
        content_type,
        verb: verb.to_string(),
        resource,
        status: resp.status().as_u16(),
    });
    Ok(resp)
}

struct Req<'a> {
    method: &'a Method,
    path: &'a str,
    query: &'a str,
    content_type: Option<&'a str>,
    body: Bytes,
}

fn route(
    shared: &Arc<Shared>,
    req: &Req<'_>,
    verb: &mut &'static str,
    resource: &mut String,
) -> Result<Response<Body>, ApiError> {
    let segs: Vec<&str> = req.path.split('/').filter(|s| !s.is_empty()).collect();
    let discovery = |doc: Option<Value>| -> Result<Response<Body>, ApiError> {
        if req.method != Method::GET {
            return Err(ApiError::method_not_allowed());
        }
        doc.map(|d| json_response(200, &d))
            .ok_or_else(ApiError::no_route)
    };
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => {
            *verb = "discovery";
            return discovery(Some(resources::version_info()));
        }
        ["api"] => {
            *verb = "discovery";
            return discovery(Some(resources::core_versions(&shared.addr.to_string())));
        }
        ["apis"] => {
            *verb = "discovery";
            let store = shared.lock();
            return discovery(Some(resources::group_list(&store.served_defs())));
        }
        ["apis", g] => {
            *verb = "discovery";
            let store = shared.lock();
            return discovery(resources::group(&store.served_defs(), g));
        }
        ["api", v] => {
            *verb = "discovery";
            let store = shared.lock();
            return discovery(resources::resource_list(&store.served_defs(), "", v));
        }
        ["apis", g, v] => {
            *verb = "discovery";
            let store = shared.lock();
            return discovery(resources::resource_list(&store.served_defs(), g, v));
        }
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(ApiError::no_route()),
    };
    let params = Params(parse_query(req.query));
    let target = resolve(&shared.lock(), group, version, rest)?;
    match target {
        Target::Collection { def, ns } => {
            *resource = def.plural.clone();
            match *req.method {
                Method::GET if params.flag("watch") => {
                    *verb = "watch";
                    watch(shared, def, ns, &params)
                }
                Method::GET => {
                    *verb = "list";
                    list(&shared.lock(), &def, ns.as_deref(), &params)
                }
                Method::POST => {
                    *verb = "create";
                    let Some(ns) = ns.or_else(|| (!def.namespaced).then(String::new)) else {
                        return Err(ApiError::method_not_allowed());
                    };
                    let obj = parse_body(req.content_type, &req.body)?;
                    let created =
                        shared.write(|s| s.create(&def, &ns, obj, false, params.dry_run()))?;
                    Ok(json_response(201, &created))
                }
                Method::DELETE => {
                    *verb = "deletecollection";
                    let sel = params.selectors()?;
                    let dry = params.dry_run();
                    let items = shared.write(|s| {
                        let names: Vec<(String, String)> = s
                            .list(&def, ns.as_deref())
                            .filter(|o| sel.matches(o))
                            .map(|o| {
                                let ns = meta_str(o, "namespace").unwrap_or("").to_string();
                                (ns, meta_str(o, "name").unwrap_or("").to_string())
                            })
                            .collect();
                        let mut gone = Vec::new();
                        for (ns, name) in names {
                            gone.push(s.delete(&def, &ns, &name, None, None, dry)?);
                        }
                        Ok(gone)
                    })?;
                    let rv = shared.lock().rv;
                    Ok(list_reply(&def, rv, None, &items, false))
                }
                _ => Err(ApiError::method_not_allowed()),
            }
        }
        Target::Object {
            def,
            ns,
            name,
            status,
        } => {
            *resource = if status {
                format!("{}/status", def.plural)
            } else {
                def.plural.clone()
            };
            match *req.method {
                Method::GET => {
                    *verb = "get";
                    let store = shared.lock();
                    let obj = store
                        .get(&def, &ns, &name)
                        .ok_or_else(|| ApiError::not_found(&def, &name))?;
                    Ok(json_response(200, obj))
                }
                Method::PUT => {
                    *verb = "update";
                    let obj = parse_body(req.content_type, &req.body)?;
                    let mode = if status {
                        UpdateMode::Status
                    } else {
                        UpdateMode::Main
                    };
                    let updated = shared
                        .write(|s| s.update(&def, &ns, &name, obj, mode, params.dry_run()))?;
                    Ok(json_response(200, &updated))
                }
                Method::PATCH => {
                    *verb = "patch";
                    let (code, obj) =
                        shared.write(|s| patch(s, &def, &ns, &name, status, req, &params))?;
                    Ok(json_response(code, &obj))
                }
                Method::DELETE if !status => {
                    *verb = "delete";
                    let opts = if req.body.iter().all(u8::is_ascii_whitespace) {
                        Value::Null
                    } else {
                        parse_body(req.content_type, &req.body)?
                    };
                    let rv = opts
                        .pointer("/preconditions/resourceVersion")
                        .and_then(Value::as_str);
                    let uid = opts.pointer("/preconditions/uid").and_then(Value::as_str);
                    let dry = params.dry_run()
                        || opts
                            .get("dryRun")
                            .and_then(Value::as_array)
                            .is_some_and(|a| a.iter().any(|v| v == "All"));
                    let gone = shared.write(|s| s.delete(&def, &ns, &name, rv, uid, dry))?;
                    Ok(json_response(200, &gone))
                }
                _ => Err(ApiError::method_not_allowed()),
            }
        }
    }
}

/// Parses a JSON body (or YAML when the content type says so).
fn parse_body(content_type: Option<&str>, body: &[u8]) -> Result<Value, ApiError> {
    let yaml = content_type.is_some_and(|c| c.contains("yaml"));
    let parsed: Result<Value, String> = if yaml {
        serde_yaml_ng::from_slice(body).map_err(|e| e.to_string())
    } else {
        serde_json::from_slice(body).map_err(|e| e.to_string())
    };
    parsed.map_err(|e| {
        ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
    })
}

fn patch(
    store: &mut Store,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    status: bool,
    req: &Req<'_>,
    params: &Params,
) -> Result<(u16, Value), ApiError> {
    #[derive(PartialEq)]
    enum Kind {
        Merge,
        Json,
        Apply,
    }
    let ct = req
        .content_type
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim();
    let kind = match ct {
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => Kind::Merge,
        "application/json-patch+json" => Kind::Json,
        "application/apply-patch+yaml" => Kind::Apply,
        _ => {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unknown format ({ct:?}) - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json"
                ),
            ));
        }
    };
    let body = parse_body(
        Some(if kind == Kind::Apply { "yaml" } else { "json" }),
        &req.body,
    )?;
    if kind == Kind::Apply && params.get("fieldManager").is_none() {
        return Err(ApiError::invalid(
            def,
            name,
            "fieldManager: Required value: is required for apply patch",
        ));
    }
    if kind != Kind::Json && !body.is_object() {
        return Err(ApiError::bad_request(
            "a merge or apply patch must be a JSON object",
        ));
    }
    let dry = params.dry_run();
    let Some(mut doc) = store.get(def, ns, name).cloned() else {
        if kind == Kind::Apply && !status {
            let mut obj = body;
            if meta_str(&obj, "name").is_none() {
                obj["metadata"]["name"] = json!(name);
            }
            if meta_str(&obj, "name") != Some(name) {
                return Err(ApiError::bad_request(
                    "the name of the object does not match the name on the URL",
                ));
            }
            return store.create(def, ns, obj, false, dry).map(|o| (201, o));
        }
        return Err(ApiError::not_found(def, name));
    };
    match kind {
        Kind::Json => json_patch(&mut doc, &body).map_err(|e| ApiError::invalid(def, name, e))?,
        Kind::Merge => merge_patch(&mut doc, &body),
        Kind::Apply => {
            let manager = params.get("fieldManager").unwrap_or_default();
            apply_patch(&mut doc, &body, manager, status)
        }
    }
    let mode = if status {
        UpdateMode::Status
    } else {
        UpdateMode::Main
    };
    store
        .update(def, ns, name, doc, mode, dry)
        .map(|o| (200, o))
}

/// A list reply of `items` at `rv` (with `cont`, a page of a longer list), written from the
/// objects without copying them; without their own `kind` and `apiVersion` with `strip_type`.
fn list_reply<'a>(
    def: &ResourceDef,
    rv: u64,
    cont: Option<String>,
    items: impl IntoIterator<Item = &'a Value>,
    strip_type: bool,
) -> Response<Body> {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        metadata["continue"] = json!(c);
    }
    let doc = ListDoc {
        kind: format!("{}List", def.kind),
        api_version: def.api_version(),
        metadata,
        items: (items.into_iter())
            .map(|obj| ListItem { obj, strip_type })
            .collect(),
    };
    bytes_response(200, serde_json::to_vec(&doc).unwrap_or_default())
}

fn list(
    store: &Store,
    def: &ResourceDef,
    ns: Option<&str>,
    params: &Params,
) -> Result<Response<Body>, ApiError> {
    let sel = params.selectors()?;
    let limit = match params.get("limit") {
        None => None,
        Some(l) => Some(
            l.parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        ),
    }
    .filter(|l| *l > 0);
    let (list_rv, after) = match params.get("continue") {
        None => (store.rv, None),
        Some(tok) => {
            let bad = || ApiError::bad_request(format!("continue key is not valid: {tok:?}"));
            let mut parts = tok.splitn(3, '/');
            let rv: u64 = parts.next().and_then(|r| r.parse().ok()).ok_or_else(bad)?;
            let ns = parts.next().ok_or_else(bad)?.to_string();
            let name = parts.next().ok_or_else(bad)?.to_string();
            if rv < store.compacted {
                return Err(ApiError::new(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                ));
            }
            (rv, Some((ns, name)))
        }
    };
    let after = after.as_ref().map(|(n, name)| (n.as_str(), name.as_str()));
    let mut items: Vec<&Value> = Vec::new();
    let mut cont = None;
    for o in store.list_after(def, ns, after).filter(|o| sel.matches(o)) {
        if limit.is_some_and(|l| items.len() >= l) {
            let last = items.last().copied().unwrap_or(o);
            let ns = meta_str(last, "namespace").unwrap_or("");
            let name = meta_str(last, "name").unwrap_or("");
            cont = Some(format!("{list_rv}/{ns}/{name}"));
            break;
        }
        items.push(o);
    }
    // The apiserver's JSON lists of built-in types carry no kind/apiVersion per item.
    Ok(list_reply(def, list_rv, cont, items, !def.crd))
}

/// A list reply ([`list_reply`]).
#[derive(serde::Serialize)]
struct ListDoc<'a> {
    kind: String,
    #[serde(rename = "apiVersion")]
    api_version: String,
    metadata: Value,
    items: Vec<ListItem<'a>>,
}

/// One stored object in a list reply, without its `kind` and `apiVersion` when `strip_type`.
struct ListItem<'a> {
    obj: &'a Value,
    strip_type: bool,
}

impl serde::Serialize for ListItem<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self.obj.as_object() {
            Some(m) if self.strip_type => {
                let mut out = s.serialize_map(None)?;
                for (k, v) in m.iter().filter(|(k, _)| *k != "kind" && *k != "apiVersion") {
                    out.serialize_entry(k, v)?;
                }
                out.end()
            }
            _ => self.obj.serialize(s),
        }
    }
}

/// What one watch delivers.
struct WatchSpec {
    res: String,
    kind: String,
    api_version: String,
    ns: Option<String>,
    sel: Selectors,
    bookmarks: bool,
}

impl WatchSpec {
    /// The event a change produces for this watch, if any (selector transitions become
    /// ADDED/DELETED, as with the apiserver).
    fn event(&self, c: &Change) -> Option<Bytes> {
        if c.res != self.res || self.ns.as_ref().is_some_and(|n| *n != c.ns) {
            return None;
        }
        let now = self.sel.matches(&c.object);
        let kind = match c.kind {
            ChangeType::Modified => {
                let before = c.prev.as_ref().is_some_and(|p| self.sel.matches(p));
                match (before, now) {
                    (true, true) => ChangeType::Modified,
                    (false, true) => ChangeType::Added,
                    (true, false) => ChangeType::Deleted,
                    (false, false) => return None,
                }
            }
            k if now => k,
            _ => return None,
        };
        Some(event_line(kind.as_str(), &c.object))
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({"kind": self.kind, "apiVersion": self.api_version, "metadata": metadata});
        event_line("BOOKMARK", &obj)
    }
}

fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

/// Decrements the open-watch count when a watch task ends.
struct WatchGuard(Arc<Shared>);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.lock().open_watches -= 1;
        self.0.observed();
    }
}

fn watch(
    shared: &Arc<Shared>,
    def: ResourceDef,
    ns: Option<String>,
    params: &Params,
) -> Result<Response<Body>, ApiError> {
    let sel = params.selectors()?;
    let bookmarks = params.flag("allowWatchBookmarks");
    let send_initial = params.flag("sendInitialEvents");
    let timeout = match params.get("timeoutSeconds") {
        None => None,
        Some(t) => Some(Duration::from_secs(t.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!("invalid timeoutSeconds {t:?}"))
        })?)),
    }
    .filter(|t| !t.is_zero());
    if send_initial && (!bookmarks || params.get("resourceVersionMatch") != Some("NotOlderThan")) {
        return Err(ApiError::invalid(
            &def,
            "",
            "sendInitialEvents requires allowWatchBookmarks=true and resourceVersionMatch=NotOlderThan",
        ));
    }
    let rv_param = params.get("resourceVersion");
    let requested: Option<u64> = match rv_param {
        None | Some("0") => None,
        Some(r) => Some(
            r.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version {r:?}")))?,
        ),
    };
    let spec = WatchSpec {
        res: def.key(),
        kind: def.kind.clone(),
        api_version: def.api_version(),
        ns,
        sel,
        bookmarks,
    };
    let notify = shared.notify.subscribe();
    let mut store = shared.lock();
    let mut initial = Vec::new();
    let mut expired = None;
    let cursor = match requested {
        Some(rv) if !send_initial => {
            if rv < store.compacted {
                expired = Some(ApiError::expired(&rv.to_string(), store.compacted));
            }
            rv.min(store.rv)
        }
        _ => {
            // Unset or "0" (or sendInitialEvents): synthetic ADDED events for the current state.
            for o in store
                .list(&def, spec.ns.as_deref())
                .filter(|o| spec.sel.matches(o))
            {
                initial.push(event_line("ADDED", o));
            }
            if send_initial {
                initial.push(spec.bookmark(store.rv, true));
            }
            store.rv
        }
    };
    store.open_watches += 1;
    let state = WatchState {
        cursor,
        expire_gen: store.expire_gen,
        close_gen: store.close_gen,
        interval: store.bookmark_interval,
        deadline: timeout.map(|t| Instant::now() + t),
    };
    drop(store);
    shared.observed();
    let (tx, mut rx) = mpsc::channel::<Bytes>(64);
    tokio::spawn(watch_loop(
        shared.clone(),
        spec,
        tx,
        notify,
        initial,
        expired,
        state,
    ));
    let stream =
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b)))));
    let mut resp = Response::new(BodyExt::boxed_unsync(StreamBody::new(stream)));
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(resp)
}

struct WatchState {
    cursor: u64,
    expire_gen: u64,
    close_gen: u64,
    interval: Duration,
    deadline: Option<Instant>,
}

async fn watch_loop(
    shared: Arc<Shared>,
    spec: WatchSpec,
    tx: mpsc::Sender<Bytes>,
    mut notify: tokio::sync::watch::Receiver<u64>,
    initial: Vec<Bytes>,
    expired: Option<ApiError>,
    mut st: WatchState,
) {
    let _guard = WatchGuard(shared.clone());
    for line in initial {
        if tx.send(line).await.is_err() {
            return;
        }
    }
    if let Some(err) = expired {
        let _ = tx.send(event_line("ERROR", &err.status())).await;
        return;
    }
    let interval = st.interval.max(Duration::from_millis(10));
    let mut ticker = tokio::time::interval_at(Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        notify.borrow_and_update();
        let mut lines = Vec::new();
        let mut end = None;
        {
            let store = shared.lock();
            if store.stopped || store.close_gen != st.close_gen {
                return;
            }
            if store.expire_gen != st.expire_gen {
                end = Some(ApiError::expired(&st.cursor.to_string(), store.rv));
            } else if st.cursor < store.compacted {
                end = Some(ApiError::expired(&st.cursor.to_string(), store.compacted));
            } else {
                let start = store.history_after(st.cursor);
                lines.extend(store.history.range(start..).filter_map(|c| spec.event(c)));
                st.cursor = store.rv;
            }
        }
        for line in lines {
            if tx.send(line).await.is_err() {
                return;
            }
        }
        if let Some(err) = end {
            let _ = tx.send(event_line("ERROR", &err.status())).await;
            return;
        }
        let deadline = st.deadline;
        tokio::select! {
            changed = notify.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = ticker.tick(), if spec.bookmarks => {
                if tx.send(spec.bookmark(st.cursor, false)).await.is_err() {
                    return;
                }
                {
                    let mut store = shared.lock();
                    store.last_bookmark_rv = store.last_bookmark_rv.max(st.cursor);
                }
                shared.observed();
            }
            _ = async move {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            } => return,
            _ = tx.closed() => return,
        }
    }
}
