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

use super::list_stream;
use super::stamp::Stamp;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::watch;
use vipflow_core::decode::ItemCache;
use vipflow_core::decode::{DEFAULT_MAX_BYTES, parse, parse_cached, parse_streamed};
use vipflow_core::model::Loaded;

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

/// Read `path` whole, refusing a file over `max` bytes before and while reading (it may grow).
pub(crate) fn read_bounded(path: &Path, max: u64) -> Result<String, FileError> {
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

/// Read `path` in 64 KiB pieces, at most `max` bytes, handing each piece to `piece` until it
/// returns `false`; an error it returns is a read error. Returns how many bytes were read.
pub(super) fn read_pieces(
    path: &Path,
    max: u64,
    mut piece: impl FnMut(&[u8]) -> std::io::Result<bool>,
) -> Result<usize, FileError> {
    use std::io::Read;
    let rd = |source| FileError::Read {
        path: path.into(),
        source,
    };
    let mut f = std::fs::File::open(path).map_err(rd)?;
    let mut buf = vec![0u8; 1 << 16];
    let mut len = 0usize;
    loop {
        let n = f.read(&mut buf).map_err(rd)?;
        if n == 0 {
            return Ok(len);
        }
        len += n;
        if len as u64 > max {
            return Err(FileError::TooLarge {
                path: path.into(),
                size: len as u64,
                limit: max,
            });
        }
        if !piece(&buf[..n]).map_err(rd)? {
            return Ok(len);
        }
    }
}

/// The [`Digest`] of `path`'s content, read in pieces: checking that a file stayed the same
/// holds no second copy of it.
fn digest_bounded(path: &Path, max: u64) -> Result<Digest, FileError> {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let len = read_pieces(path, max, |piece| {
        h.update(piece);
        Ok(true)
    })?;
    Ok(Digest {
        len,
        hash: h.digest128(),
    })
}

/// Read and parse a file of at most `max_bytes`.
pub fn load(path: &Path, max_bytes: u64) -> Result<Loaded, FileError> {
    let text = read_bounded(path, max_bytes)?;
    parse(&text).map_err(|detail| FileError::Parse {
        path: path.into(),
        detail,
    })
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

/// [`watch`](fn@watch) with a file size limit other than [`DEFAULT_MAX_BYTES`].
pub fn watch_bounded(
    path: PathBuf,
    interval: Duration,
    max_bytes: u64,
) -> Result<(watch::Receiver<Arc<Loaded>>, tokio::task::JoinHandle<()>), FileError> {
    // Taken before the stamp: a write after it moves the stamp on (see [`Stamp::trusted`]).
    let verified = SystemTime::now();
    let stamp = Stamp::of(&path);
    let text = read_bounded(&path, max_bytes)?;
    let mut cache = ItemCache::default();
    let (first, _) = parse_cached(&text, &mut cache).map_err(|detail| FileError::Parse {
        path: path.clone(),
        detail,
    })?;
    tracing::info!(file = %path.display(), services = first.objects.services.len(),
        slices = first.objects.endpoint_slices.len(), nodes = first.objects.nodes.len(),
        took_ms = verified.elapsed().unwrap_or_default().as_millis() as u64, "objects loaded");
    let (tx, rx) = watch::channel(Arc::new(first));
    let task = tokio::spawn(poll(
        path,
        interval,
        max_bytes,
        tx,
        (Digest::of(text.as_bytes()), stamp, verified),
        cache,
    ));
    Ok((rx, task))
}

/// What identifies a file's content without keeping it: its length and a 128-bit hash
/// (XXH3: the file is hashed on every poll while its time stamp is too recent to trust, so the
/// hash must cost little beside reading it). The agent keeps this, not the last text, and
/// compares a second read by it, so a big file is held once, while it is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Digest {
    len: usize,
    hash: u128,
}

impl Digest {
    fn of(bytes: &[u8]) -> Digest {
        Digest {
            len: bytes.len(),
            hash: xxhash_rust::xxh3::xxh3_128(bytes),
        }
    }
}

/// How long a changed file must stay the same before it is read as a snapshot.
pub const SETTLE: Duration = Duration::from_millis(100);

/// Run `f` on a blocking thread, off the async workers; one that could not finish is a read
/// error.
async fn off_workers<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, FileError> + Send + 'static,
) -> Result<T, FileError> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(worker_lost(e)))
}

fn worker_lost(e: tokio::task::JoinError) -> FileError {
    FileError::Read {
        path: PathBuf::new(),
        source: std::io::Error::other(e.to_string()),
    }
}

/// A new version of the file as read: cut into a List's items as it was read, or whole.
enum Version {
    List(list_stream::StreamedList),
    Whole(String),
}

impl Version {
    fn digest(&self) -> Digest {
        match self {
            Version::List(l) => Digest {
                len: l.len,
                hash: l.hash,
            },
            Version::Whole(text) => Digest::of(text.as_bytes()),
        }
    }

    /// Its objects, taking unchanged items from `cache`. A List that needs its whole text
    /// after all (see [`parse_streamed`]) is read again whole; should
    /// the file have changed since, the check after the settle time finds that the content is
    /// not the one hashed, and the version is not taken.
    fn parse(
        self,
        path: &Path,
        max: u64,
        cache: &mut ItemCache,
    ) -> Result<(Loaded, usize), String> {
        match self {
            Version::Whole(text) => parse_cached(&text, cache),
            Version::List(list) => {
                if let Some(detail) = list.refused {
                    return Err(detail);
                }
                let items = list.list_items();
                if let Some(r) = parse_streamed(list.syntax, &list.root, &items, cache) {
                    return r;
                }
                drop(items);
                drop(list);
                let text = read_bounded(path, max).map_err(|e| e.to_string())?;
                parse_cached(&text, cache)
            }
        }
    }
}

/// A parsed file version: its objects, how many objects are new or changed, and how many of
/// its items were taken unchanged from the version before.
type Parsed = Result<(Loaded, usize, usize), String>;

/// Poll `path` every `interval`; send a new [`Loaded`] whenever its content differs from
/// the last and stayed so for the settle time. A read or parse failure is logged and the
/// previous objects stay in force. Ends when every receiver is gone.
async fn poll(
    path: PathBuf,
    interval: Duration,
    max_bytes: u64,
    tx: watch::Sender<Arc<Loaded>>,
    (last, stamp, verified): (Digest, Option<Stamp>, SystemTime),
    cache: ItemCache,
) {
    let mut last = last;
    let mut last_stamp = stamp;
    // When a read began whose outcome stands for the file (its content was `last`, or it
    // gave the error last said); `None` when unknown.
    let mut verified = Some(verified);
    let mut last_err: Option<String> = None;
    let mut cache = cache;
    // A file whose stamp stayed the same but is not trusted yet is first hashed in pieces:
    // only a new version is read, so polling a big unchanged file holds no copy of it. One
    // whose stamp moved is nearly always a new version: it is read at once, cut into items
    // as it is read (see [`list_stream`]); only what is not read that way is read whole.
    let read_if_new = |p: PathBuf, last: Digest, moved: bool, cache: ItemCache| {
        tokio::task::spawn_blocking(move || {
            let read = || -> Result<Option<Version>, FileError> {
                if !moved && digest_bounded(&p, max_bytes)? == last {
                    return Ok(None);
                }
                Ok(Some(
                    match list_stream::read_list(&p, max_bytes, |id| cache.knows(id))? {
                        Some(list) => Version::List(list),
                        None => Version::Whole(read_bounded(&p, max_bytes)?),
                    },
                ))
            };
            let r = read();
            (r, cache)
        })
    };
    loop {
        // Taken before the stamp, as at the first read.
        let began = SystemTime::now();
        let stamp = Stamp::of(&path);
        let moved = stamp.is_none() || stamp != last_stamp;
        let unchanged = !moved && stamp.as_ref().is_some_and(|s| s.trusted(verified));
        let got: Result<Option<(Parsed, Digest)>, FileError> = if unchanged {
            Ok(None)
        } else {
            last_stamp = stamp;
            verified = None;
            let (read, c) = read_if_new(path.clone(), last, moved, std::mem::take(&mut cache))
                .await
                .unwrap_or_else(|e| (Err(worker_lost(e)), ItemCache::default()));
            cache = c;
            match read.map(|v| v.map(|v| (v.digest(), v))) {
                Ok(None) => {
                    verified = Some(began);
                    Ok(None)
                }
                Ok(Some((digest, version))) if digest != last => {
                    // Parsed while the file settles, off the async workers (a big file must
                    // not hold up shutdown). What did not change keeps its previous
                    // allocation: the planner re-plans only the rest.
                    let previous = Arc::clone(&tx.borrow());
                    let mut c = std::mem::take(&mut cache);
                    let p = path.clone();
                    let parsing = tokio::task::spawn_blocking(move || {
                        let parsed =
                            version
                                .parse(&p, max_bytes, &mut c)
                                .map(|(mut loaded, reused)| {
                                    let changed = loaded.objects.share_unchanged(&previous.objects);
                                    (loaded, changed, reused)
                                });
                        (parsed, c)
                    });
                    // A writer may still be at work: take the text only if it stays the same.
                    tokio::time::sleep(SETTLE).await;
                    let p = path.clone();
                    let again_began = SystemTime::now();
                    let again = off_workers(move || digest_bounded(&p, max_bytes)).await;
                    let parsed = match parsing.await {
                        Ok((parsed, c)) => {
                            cache = c;
                            parsed
                        }
                        Err(e) => Err(e.to_string()),
                    };
                    match again {
                        Ok(again) if again == digest => {
                            // Read again a settle time later: usually late enough past the
                            // modification time for the stamp to be trusted from now on.
                            verified = Some(again_began);
                            Ok(Some((parsed, digest)))
                        }
                        Ok(_) => Ok(None),
                        Err(e) => {
                            verified = Some(began);
                            Err(e)
                        }
                    }
                }
                Ok(Some(_)) => {
                    // Read whole and the same as before (the stamp moved, the content not).
                    verified = Some(began);
                    Ok(None)
                }
                Err(e) => {
                    // What this content gives is known (the error, said once): a file that
                    // is too large is not read again until it changes.
                    verified = Some(began);
                    Err(e)
                }
            }
        };
        match got {
            Ok(Some((parsed, digest))) => {
                match parsed {
                    Ok((loaded, changed, reused)) => {
                        tracing::info!(file = %path.display(), services = loaded.objects.services.len(),
                            slices = loaded.objects.endpoint_slices.len(), nodes = loaded.objects.nodes.len(), changed, reused, "objects loaded");
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
                last = digest;
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
