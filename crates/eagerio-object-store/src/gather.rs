//! Gathers as range GETs on tokio tasks.

use std::{
    fmt,
    path::PathBuf,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc,
    },
};

use eagerio_core::{
    fault::{Action, Hook, IoKind, IoPoint},
    Error, FileInfo, JobHandle, Op, ReadEngine, Result, RowLayout, RowTable, Source,
};
use object_store::{path::Path, ObjectStore};

use crate::error::to_io;

/// Default gap bound: two wanted byte ranges closer than this are fetched by one GET.
///
/// A hole is worth reading when it costs less than another request: below the latency times one
/// stream's bandwidth (2 ms x 100 MB/s = 200 KB). Measured with `examples/remote_gather.rs`
/// (10,000 random 4 KiB rows of a 1 GiB object, 64 GETs in flight, 2 ms + 10 ns/byte per GET):
/// 0 B 530 ms, 64 KiB 321 ms, 256 KiB 225 ms, 1 MiB 222 ms (fewer requests, 2.5x the bytes).
/// Raise it for higher-latency stores (S3 across regions: 1-4 MiB), lower it when bytes are
/// billed.
pub const DEFAULT_MAX_GAP: u64 = 256 * 1024;

/// Default largest range per GET: 8 MiB. Longer extents are split so they fetch in parallel.
pub const DEFAULT_MAX_REQUEST: u64 = 8 << 20;

/// Options of an [`ObjectStoreEngine`].
#[derive(Debug, Clone)]
pub struct ObjectStoreOptions {
    /// GETs in flight per gather: the number of tokio tasks a gather spawns, each issuing one GET
    /// at a time. Default 64, a load most stores take from one client. Where the store allows
    /// more, more is faster: 256 took the benchmark's gather from 225 ms to 132 ms (see
    /// `docs/bench/remote-gather.md`); 16 took it to 687 ms.
    pub concurrency: usize,
    /// Largest hole fetched to join two wanted ranges (the read-amplification bound). Default
    /// [`DEFAULT_MAX_GAP`].
    pub max_gap: u64,
    /// Largest range of one GET, 1 byte to 1 GiB. Default [`DEFAULT_MAX_REQUEST`]. Smaller
    /// GETs spread a dense gather over more streams: with 256 in flight, 1 MiB took the
    /// benchmark's gather from 132 ms to 92 ms. Stores that pay per request (moto reads the whole
    /// object for each) want it larger.
    pub max_request: u64,
    /// The name used for the object in errors. Default `<store>/<path>` (e.g.
    /// `AmazonS3(bucket)/tables/t.bin`).
    pub name: Option<PathBuf>,
    /// A fault or latency hook, called before every GET (see [`eagerio_core::fault`]). A hook
    /// that sleeps blocks a runtime worker thread while it sleeps.
    pub hook: Option<Hook>,
}

impl Default for ObjectStoreOptions {
    fn default() -> Self {
        ObjectStoreOptions {
            concurrency: 64,
            max_gap: DEFAULT_MAX_GAP,
            max_request: DEFAULT_MAX_REQUEST,
            name: None,
            hook: None,
        }
    }
}

struct Inner {
    store: Arc<dyn ObjectStore>,
    location: Path,
    info: FileInfo,
    concurrency: usize,
    hook: Option<Hook>,
    rt: tokio::runtime::Handle,
    requests: AtomicU64,
    bytes_fetched: AtomicU64,
    workers: AtomicUsize,
}

/// Reads one object with range GETs on tokio tasks; the engine of a [`Source`]. Cloning shares
/// the object and the counters.
///
/// Each gather spawns up to [`ObjectStoreOptions::concurrency`] tasks on the runtime the engine
/// was opened on, before the gather call returns. A task issues one GET at a time, for the next
/// unclaimed extent of the plan, until none is left or the gather's future was dropped. There is
/// no staging: each GET's `Bytes` is copied into the gather's output and released.
#[derive(Clone)]
pub struct ObjectStoreEngine {
    inner: Arc<Inner>,
}

impl fmt::Debug for ObjectStoreEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectStoreEngine")
            .field("object", &self.inner.info.path)
            .field("len", &self.inner.info.len)
            .field("requests", &self.requests())
            .field("bytes_fetched", &self.bytes_fetched())
            .finish()
    }
}

/// Counts a live worker; the drop (also while unwinding) un-counts it.
struct Live(Arc<Inner>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.workers.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ObjectStoreEngine {
    /// Opens `location` in `store` for gathers: one `HEAD` for its length, then a [`Source`]
    /// with the options' gap bound. The length is fixed at open: ranges past it are refused
    /// before any request, and an object that shrinks later gives short reads.
    ///
    /// # Errors
    /// [`Error::Io`] (op `Open`) if the `HEAD` fails, e.g. `NotFound` for a missing object, with
    /// the HTTP status in the message; [`Error::InvalidOptions`] for a zero concurrency or a
    /// `max_request` outside 1 byte..=1 GiB; [`Error::Unavailable`] outside a tokio runtime.
    pub async fn open(
        store: Arc<dyn ObjectStore>,
        location: Path,
        opts: ObjectStoreOptions,
    ) -> Result<Source<ObjectStoreEngine>> {
        crate::runtime("opening an object")?;
        let meta = store.head(&location).await.map_err(|e| Error::Io {
            op: Op::Open,
            path: name(&opts, &*store, &location),
            offset: None,
            target: None,
            source: to_io(&format!("HEAD {location}"), &e),
        })?;
        Self::with_len(store, location, meta.size, opts)
    }

    /// [`open`](Self::open) for an object whose length is already known (from a listing or an
    /// earlier `HEAD`): no request is made. It must be called inside a tokio runtime.
    ///
    /// # Errors
    /// As [`open`](Self::open), less the `HEAD`.
    pub fn with_len(
        store: Arc<dyn ObjectStore>,
        location: Path,
        len: u64,
        opts: ObjectStoreOptions,
    ) -> Result<Source<ObjectStoreEngine>> {
        let rt = crate::runtime("opening an object")?;
        if opts.concurrency == 0 {
            return Err(Error::invalid_option("concurrency", "a gather needs at least one GET in flight"));
        }
        if opts.max_request == 0 || opts.max_request > 1 << 30 {
            return Err(Error::invalid_option(
                "max_request",
                format!("{} bytes is outside 1 byte..=1 GiB", opts.max_request),
            ));
        }
        let info = FileInfo { path: name(&opts, &*store, &location), len, align: 1, max_read: opts.max_request };
        let engine = ObjectStoreEngine {
            inner: Arc::new(Inner {
                store,
                location,
                info,
                concurrency: opts.concurrency,
                hook: opts.hook,
                rt,
                requests: AtomicU64::new(0),
                bytes_fetched: AtomicU64::new(0),
                workers: AtomicUsize::new(0),
            }),
        };
        Ok(Source::new(engine).with_max_gap(opts.max_gap))
    }

    /// [`open`](Self::open), then a table of fixed-size rows.
    ///
    /// # Errors
    /// As [`open`](Self::open) and [`RowTable::new`].
    pub async fn open_rows(
        store: Arc<dyn ObjectStore>,
        location: Path,
        layout: RowLayout,
        opts: ObjectStoreOptions,
    ) -> Result<RowTable<ObjectStoreEngine>> {
        Self::open(store, location, opts).await?.rows(layout)
    }

    /// Requests sent over the wire so far: range GETs, plus the `HEAD` that tells a shrunken
    /// object from a failed GET after an error. Monotonic, over every gather of this engine.
    pub fn requests(&self) -> u64 {
        self.inner.requests.load(Ordering::Relaxed)
    }

    /// Bytes the GETs returned so far (wanted bytes plus the holes fetched to join ranges).
    /// Monotonic, over every gather of this engine.
    pub fn bytes_fetched(&self) -> u64 {
        self.inner.bytes_fetched.load(Ordering::Relaxed)
    }

    /// Tasks still serving some gather (each finishing at most one GET); `0` once every gather,
    /// dropped ones included, has released its requests.
    pub fn workers(&self) -> usize {
        self.inner.workers.load(Ordering::Acquire)
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.inner.store
    }

    /// The object's path in the store.
    pub fn location(&self) -> &Path {
        &self.inner.location
    }
}

fn name(opts: &ObjectStoreOptions, store: &dyn ObjectStore, location: &Path) -> PathBuf {
    opts.name.clone().unwrap_or_else(|| PathBuf::from(format!("{store}/{location}")))
}

impl ReadEngine for ObjectStoreEngine {
    fn info(&self) -> &FileInfo {
        &self.inner.info
    }

    fn submit(&self, job: JobHandle) {
        let tasks = self.inner.concurrency.min(job.plan().extents().len());
        for _ in 0..tasks {
            self.inner.workers.fetch_add(1, Ordering::AcqRel);
            let live = Live(self.inner.clone());
            let job = job.clone();
            // Dropping the JoinHandle detaches the task; it owns its job handle. If the runtime is
            // gone the task is dropped unrun, its handle with it, and the gather reports
            // `Abandoned`.
            drop(self.inner.rt.spawn(worker(live, job)));
        }
    }
}

/// One task: a GET at a time, for the next unclaimed extent, until none is left.
async fn worker(live: Live, job: JobHandle) {
    let inner = &*live.0;
    while let Some(i) = job.next_extent() {
        let e = job.plan().extents()[i];
        let range = e.offset..e.offset + u64::from(e.len);
        // A hook that panics unwinds this task: the job handle records the panic as it drops.
        let cap = match inner
            .hook
            .as_ref()
            .map(|h| h.check(IoPoint { kind: IoKind::Read, offset: e.offset, len: e.len as usize }))
        {
            Some(Action::Fail(err)) => {
                job.complete(i, &[], Err(err));
                continue;
            }
            Some(Action::Short(n)) => Some(n),
            _ => None,
        };
        inner.requests.fetch_add(1, Ordering::Relaxed);
        match inner.store.get_range(&inner.location, range.clone()).await {
            Ok(bytes) => {
                inner.bytes_fetched.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                let n = cap.map_or(bytes.len(), |c| c.min(bytes.len()));
                job.complete(i, &bytes, Ok(n));
            }
            Err(err) => {
                // Every store refuses a range that starts past the end (InMemory and local with
                // an error, HTTP stores with 416): ask for the length to tell a shrunken object,
                // a short read, from a failure.
                inner.requests.fetch_add(1, Ordering::Relaxed);
                if let Ok(meta) = inner.store.head(&inner.location).await {
                    if meta.size <= e.offset {
                        job.complete(i, &[], Ok(0));
                        continue;
                    }
                }
                let what = format!("GET bytes {}..{}", range.start, range.end);
                job.complete(i, &[], Err(to_io(&what, &err)));
            }
        }
    }
}
