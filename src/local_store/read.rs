//! Reads: a bounded cache of open sources, `get_ranges` as one gather, `get_opts` as a window
//! of gathers.

use std::{
    collections::{HashMap, VecDeque},
    fmt,
    ops::Range,
    path::{Path, PathBuf},
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
};

use bytes::Bytes;
use eagerio_core::{GatherFuture, OutputPool, Source};
use futures::{Future, Stream};
use object_store::path::Path as ObjectPath;

use super::resolve::{generic, Ident, Resolved};
use crate::open::{local_source, LocalEngine};

/// A `get` of more than this many bytes is read as consecutive gathers of this size.
pub(super) const GET_CHUNK: u64 = 8 << 20;
/// Gathers of one `get` in flight at once (so a streamed `get` buffers at most 32 MiB).
pub(super) const GET_WINDOW: usize = 4;

/// The sources open for reading, by path relative to the root, each with the file version it
/// was opened on. At most `max` are kept; past it the least recently used is closed (its
/// gathers in flight keep their own reference).
pub(super) struct OpenFiles {
    map: HashMap<PathBuf, Entry>,
    tick: u64,
    max: usize,
    /// Shared by every source: large outputs recycled across reads.
    pool: Arc<OutputPool>,
}

struct Entry {
    source: Arc<Source<LocalEngine>>,
    ident: Ident,
    used: u64,
}

impl OpenFiles {
    pub(super) fn new(max: usize, pool: Arc<OutputPool>) -> OpenFiles {
        OpenFiles { map: HashMap::new(), tick: 0, max, pool }
    }

    pub(super) fn pool(&self) -> &Arc<OutputPool> {
        &self.pool
    }

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    fn get(&mut self, rel: &Path, ident: Ident) -> Option<Arc<Source<LocalEngine>>> {
        self.tick += 1;
        let tick = self.tick;
        match self.map.get_mut(rel) {
            Some(e) if e.ident == ident => {
                e.used = tick;
                Some(e.source.clone())
            }
            _ => None,
        }
    }

    fn insert(&mut self, rel: PathBuf, ident: Ident, source: Arc<Source<LocalEngine>>) {
        self.tick += 1;
        if !self.map.contains_key(&rel) && self.map.len() >= self.max {
            if let Some(oldest) = self.map.iter().min_by_key(|(_, e)| e.used).map(|(k, _)| k.clone()) {
                self.map.remove(&oldest);
            }
        }
        self.map.insert(rel, Entry { source, ident, used: self.tick });
    }

    /// Every open file's source.
    pub(super) fn sources(&self) -> Vec<Arc<Source<LocalEngine>>> {
        self.map.values().map(|e| e.source.clone()).collect()
    }

    /// Closes the source of `rel`, if open: its object was replaced or deleted, and the
    /// descriptor would keep the old file's blocks allocated.
    pub(super) fn forget(&mut self, rel: &Path) {
        self.map.remove(rel);
    }
}

/// The source for the file `resolved` found at `rel`: the cached one if the file is unchanged,
/// else a new one, opened through the resolved descriptor on the blocking pool (the engines'
/// own `open`).
pub(super) async fn source(
    files: &Mutex<OpenFiles>,
    rel: &Path,
    resolved: &Resolved,
    location: &ObjectPath,
) -> object_store::Result<Arc<Source<LocalEngine>>> {
    let ident = resolved.ident();
    if let Some(s) = files.lock().expect("open files").get(rel, ident) {
        return Ok(s);
    }
    // The open runs in its own task holding a second descriptor of the file, so the
    // `/proc/self/fd` path stays this file's even if this future is dropped mid-open.
    let fd = resolved.keep().map_err(generic)?;
    let path = resolved.reopen_path();
    let opened = tokio::spawn(async move {
        let source = local_source(path).await;
        drop(fd);
        source
    });
    let source = opened.await.map_err(|e| generic(std::io::Error::other(e)))?;
    let source = source.map_err(|e| failed(location, e))?;
    let mut files = files.lock().expect("open files");
    let source = Arc::new(source.with_output_pool(files.pool.clone()));
    files.insert(rel.to_path_buf(), ident, source.clone());
    Ok(source)
}

/// An eagerio failure while reading `location`.
#[derive(Debug)]
struct ReadFailed {
    location: String,
    source: eagerio_core::Error,
}

impl fmt::Display for ReadFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "reading {}: {}", self.location, self.source)
    }
}

impl std::error::Error for ReadFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

pub(super) fn failed(location: &ObjectPath, source: eagerio_core::Error) -> object_store::Error {
    generic(ReadFailed { location: location.to_string(), source })
}

/// A range outside the object, refused before any read.
#[derive(Debug)]
struct BadRange {
    location: String,
    range: Range<u64>,
    size: u64,
}

impl fmt::Display for BadRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Range { start, end } = self.range;
        let what = if start > end {
            "starts after its end"
        } else if start >= self.size {
            "starts at or past the end of the object"
        } else {
            "ends past the end of the object"
        };
        write!(f, "range {start}..{end} of {} {what} ({} bytes)", self.location, self.size)
    }
}

impl std::error::Error for BadRange {}

/// Checks `ranges` against an object of `size` bytes as `LocalFileSystem::get_ranges` does:
/// every non-empty range must lie inside the object (an empty one reads nothing, anywhere).
pub(super) fn check_ranges(location: &ObjectPath, ranges: &[Range<u64>], size: u64) -> object_store::Result<()> {
    for r in ranges {
        if r.start > r.end || (r.start < r.end && r.end > size) {
            return Err(generic(BadRange { location: location.to_string(), range: r.clone(), size }));
        }
    }
    Ok(())
}

/// Starts one gather of the non-empty `ranges` and returns a future of every range's bytes,
/// in order (empty ranges take no read).
pub(super) fn start_ranges(
    source: &Source<LocalEngine>,
    ranges: &[Range<u64>],
    location: &ObjectPath,
) -> object_store::Result<impl Future<Output = object_store::Result<Vec<Bytes>>>> {
    let reads: Vec<Range<u64>> = ranges.iter().filter(|r| r.start < r.end).cloned().collect();
    let gather =
        if reads.is_empty() { None } else { Some(source.gather_ranges(&reads).map_err(|e| failed(location, e))?) };
    let empty: Vec<bool> = ranges.iter().map(|r| r.start == r.end).collect();
    let location = location.clone();
    Ok(async move {
        let mut read = match gather {
            Some(g) => g.await.map_err(|e| failed(&location, e))?.into_iter(),
            None => Vec::new().into_iter(),
        };
        Ok(empty.into_iter().map(|e| if e { Bytes::new() } else { read.next().expect("one result a read") }).collect())
    })
}

/// The bytes of one `get`: up to [`GET_WINDOW`] gathers of [`GET_CHUNK`] bytes in flight, the
/// first of them started when this is made, yielded in order.
pub(super) struct Chunks {
    source: Arc<Source<LocalEngine>>,
    location: ObjectPath,
    next: u64,
    end: u64,
    in_flight: VecDeque<GatherFuture<Vec<Bytes>>>,
}

impl Chunks {
    pub(super) fn start(
        source: Arc<Source<LocalEngine>>,
        location: ObjectPath,
        range: Range<u64>,
    ) -> object_store::Result<Chunks> {
        let mut c = Chunks { source, location, next: range.start, end: range.end, in_flight: VecDeque::new() };
        c.refill()?;
        Ok(c)
    }

    fn refill(&mut self) -> object_store::Result<()> {
        while self.in_flight.len() < GET_WINDOW && self.next < self.end {
            let end = self.end.min(self.next + GET_CHUNK);
            let range = self.next..end;
            let g = self.source.gather_ranges(std::slice::from_ref(&range)).map_err(|e| failed(&self.location, e))?;
            self.in_flight.push_back(g);
            self.next = end;
        }
        Ok(())
    }

    /// Ends the stream: gathers still in flight are dropped (their reads drain on their own).
    fn stop(&mut self) {
        self.in_flight.clear();
        self.next = self.end;
    }
}

impl Stream for Chunks {
    type Item = object_store::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let Some(front) = this.in_flight.front_mut() else { return Poll::Ready(None) };
        let out = match Pin::new(front).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(out) => out,
        };
        this.in_flight.pop_front();
        let item = out.map_err(|e| failed(&this.location, e)).and_then(|mut v| {
            this.refill()?;
            Ok(v.pop().expect("one range a gather"))
        });
        if item.is_err() {
            this.stop();
        }
        Poll::Ready(Some(item))
    }
}
