//! Gathers as range GETs on tokio tasks.

use std::{
    fmt,
    path::PathBuf,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use eagerio_core::{
    backend::{JobHandle, ReadEngine},
    fault::{self, Action, Hook, IoKind, IoPoint},
    tune::PriceFit,
    Error, FileInfo, Result, RowLayout, RowTable, Source,
};
use object_store::{path::Path, ObjectStore, ObjectStoreExt};

use crate::error::to_io;

/// Default gap bound: two wanted byte ranges closer than this are fetched by one GET.
///
/// A hole is worth reading when it costs less than another request: below the latency times one
/// stream's bandwidth (2 ms x 100 MB/s = 200 KB). Measured with `examples/remote_gather.rs`
/// (10,000 random 4 KiB rows of a 1 GiB object, 64 GETs in flight, 2 ms + 10 ns/byte per GET):
/// 0 B 544 ms, 64 KiB 323 ms, 256 KiB 216 ms, 1 MiB 222 ms. It is where a tuned gap
/// ([`ObjectStoreOptions::tune_gap`]) starts; as a fixed bound, raise it for higher-latency
/// stores (at 20 ms per GET, 1 MiB took 258 ms against 451 ms) and lower it when bytes are
/// billed.
pub const DEFAULT_MAX_GAP: u64 = 256 * 1024;

/// Default largest range per GET: 8 MiB. Longer extents are split so they fetch in parallel.
pub const DEFAULT_MAX_READ: u64 = 8 << 20;

/// The bounds of a tuned gap ([`ObjectStoreOptions::tune_gap`]).
pub const TUNED_GAP_RANGE: std::ops::RangeInclusive<u64> = (4 << 10)..=(16 << 20);

/// Options of an [`ObjectStoreEngine`]: `ObjectStoreOptions::default().depth(256)`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ObjectStoreOptions {
    /// GETs in flight for the engine as a whole, however many gathers run on it (and its
    /// clones): the size of its [`RequestLimit`], unless [`limit`](Self::limit) shares one.
    /// Default 64, a load most stores take from one client. Where the store allows more, more is
    /// faster: 256 took the benchmark's gather from 216 ms to 139 ms (see
    /// `docs/bench/remote-gather.md`); 16 took it to 681 ms.
    pub depth: usize,
    /// A request cap shared with other engines (other objects of the same store, say): GETs in
    /// flight for all of them together. `None`: the engine's own cap of `depth`.
    pub limit: Option<RequestLimit>,
    /// Largest hole fetched to join two wanted ranges (the read-amplification bound). Default
    /// [`DEFAULT_MAX_GAP`]. With [`tune_gap`](Self::tune_gap) it is the starting bound.
    pub max_gap: u64,
    /// Measure the GETs and plan each gather with the gap their cost calls for. Default on.
    ///
    /// A hole is worth fetching when fetching it takes less than another request. The engine
    /// fits each GET's duration to `latency + bytes / bandwidth` (least squares, weighted
    /// toward the last few hundred GETs) and sets the gap to `latency x bandwidth`, within
    /// [`TUNED_GAP_RANGE`]; until 16 GETs of differing sizes have been seen it uses `max_gap`.
    /// A store at 20 ms per request and 100 MB/s per stream gets about 2 MB; one whose bytes
    /// cost nothing gets the upper bound. Turn it off for a fixed read-amplification bound
    /// (bytes are billed) or for reproducible plans.
    pub tune_gap: bool,
    /// Largest range of one GET, 1 byte to 1 GiB. Default [`DEFAULT_MAX_READ`]. Smaller
    /// GETs spread a dense gather over more streams: with 256 in flight, 1 MiB took the
    /// benchmark's gather from 139 ms to 86 ms. Stores that pay per request (moto reads the whole
    /// object for each) want it larger.
    pub max_read: u64,
    /// The name used for the object in errors, and the one a fault hook is installed for
    /// ([`fault::inject`]). Default `<store>/<path>` (e.g. `AmazonS3(bucket)/tables/t.bin`).
    pub name: Option<PathBuf>,
}

eagerio_core::options_setters!(ObjectStoreOptions {
    depth: usize,
    max_gap: u64,
    tune_gap: bool,
    max_read: u64,
} some {
    limit: RequestLimit,
    name: PathBuf,
});

impl Default for ObjectStoreOptions {
    fn default() -> Self {
        ObjectStoreOptions {
            depth: 64,
            limit: None,
            max_gap: DEFAULT_MAX_GAP,
            tune_gap: true,
            max_read: DEFAULT_MAX_READ,
            name: None,
        }
    }
}

/// A cap on GETs in flight, shared by every gather of the engines that hold it. Cloning shares
/// the cap. Requests queue for it in order (a fair semaphore), so a large gather does not starve
/// a small one: each of its workers waits for a permit before each GET, like everyone else's.
#[derive(Debug, Clone)]
pub struct RequestLimit {
    permits: Arc<tokio::sync::Semaphore>,
    max: usize,
}

impl RequestLimit {
    /// At most `max` GETs in flight.
    ///
    /// # Errors
    /// [`Error::InvalidOptions`] for 0, or more than `tokio::sync::Semaphore::MAX_PERMITS`.
    pub fn new(max: usize) -> Result<RequestLimit> {
        if max == 0 || max > tokio::sync::Semaphore::MAX_PERMITS {
            return Err(Error::invalid_option("ObjectStoreOptions::depth", "at least one GET in flight"));
        }
        Ok(RequestLimit { permits: Arc::new(tokio::sync::Semaphore::new(max)), max })
    }

    /// The cap.
    pub fn max(&self) -> usize {
        self.max
    }

    /// GETs in flight now.
    pub fn in_flight(&self) -> usize {
        self.max - self.permits.available_permits()
    }
}

struct Inner {
    store: Arc<dyn ObjectStore>,
    location: Path,
    info: FileInfo,
    limit: RequestLimit,
    hook: Option<Hook>,
    rt: tokio::runtime::Handle,
    requests: AtomicU64,
    bytes_fetched: AtomicU64,
    workers: AtomicUsize,
    /// The GETs' cost fit, when the gap is tuned.
    fit: Option<Mutex<CostFit>>,
    /// The tuned gap; 0 until the fit has enough GETs.
    tuned_gap: AtomicU64,
}

/// The GETs' price, fitted as a device's is ([`PriceFit`]): each GET is one read of its KiB, so
/// the fit's `per_read` is a GET's latency and its `per_kib` the inverse of a stream's bandwidth.
#[derive(Debug)]
struct CostFit {
    fit: PriceFit,
    gets: u64,
}

impl Default for CostFit {
    fn default() -> Self {
        CostFit { fit: PriceFit::new(Self::DECAY), gets: 0 }
    }
}

impl CostFit {
    /// Weight kept by each earlier GET per new one: about the last 200 GETs count.
    const DECAY: f64 = 0.995;
    /// GETs needed before the fit is used.
    const MIN_GETS: u64 = 16;

    /// Adds a GET of `bytes` that took `took`.
    fn add(&mut self, bytes: u64, took: Duration) {
        self.gets += 1;
        self.fit.add(1.0, bytes as f64 / 1024.0, took);
    }

    /// `latency x bandwidth` within [`TUNED_GAP_RANGE`], or `None` while the sizes seen are too
    /// alike to tell latency from bandwidth.
    fn gap(&self) -> Option<u64> {
        if self.gets < Self::MIN_GETS {
            return None;
        }
        Some(self.fit.price()?.gap().clamp(*TUNED_GAP_RANGE.start(), *TUNED_GAP_RANGE.end()))
    }
}

/// Reads one object with range GETs on tokio tasks; the engine of a [`Source`]. Cloning shares
/// the object and the counters.
///
/// Each gather spawns up to [`ObjectStoreOptions::depth`] tasks on the runtime the engine
/// was opened on, before the gather call returns. A task waits for a permit of the engine's
/// [`RequestLimit`], then issues one GET for the next unclaimed extent of the plan, and so on
/// until none is left or the gather's future was dropped: however many gathers run, at most the
/// limit's GETs are in flight. There is no staging: each GET's `Bytes` is copied into the
/// gather's output and released.
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
    /// the HTTP status in the message; [`Error::InvalidOptions`] for a zero `depth` or a
    /// `max_read` outside 1 byte..=1 GiB; [`Error::Unavailable`] outside a tokio runtime.
    pub async fn open(
        store: Arc<dyn ObjectStore>,
        location: Path,
        opts: ObjectStoreOptions,
    ) -> Result<Source<ObjectStoreEngine>> {
        crate::runtime("opening an object")?;
        let meta = store
            .head(&location)
            .await
            .map_err(|e| Error::open(&name(&opts, &*store, &location), to_io(&format!("HEAD {location}"), &e)))?;
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
        let limit = match opts.limit.clone() {
            Some(limit) => limit,
            None => RequestLimit::new(opts.depth)?,
        };
        if opts.max_read == 0 || opts.max_read > 1 << 30 {
            return Err(Error::invalid_option(
                "ObjectStoreOptions::max_read",
                format!("{} bytes is outside 1 byte..=1 GiB", opts.max_read),
            ));
        }
        let path = name(&opts, &*store, &location);
        let hook = fault::injected(&path);
        let info = FileInfo { path, len, align: 1, max_read: opts.max_read };
        let engine = ObjectStoreEngine {
            inner: Arc::new(Inner {
                store,
                location,
                info,
                limit,
                hook,
                rt,
                requests: AtomicU64::new(0),
                bytes_fetched: AtomicU64::new(0),
                workers: AtomicUsize::new(0),
                fit: opts.tune_gap.then(|| Mutex::new(CostFit::default())),
                tuned_gap: AtomicU64::new(0),
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

    /// The gap the GETs measured so far call for ([`ObjectStoreOptions::tune_gap`]); `None`
    /// while tuning is off or still has too few GETs.
    pub fn tuned_gap(&self) -> Option<u64> {
        Some(self.inner.tuned_gap.load(Ordering::Relaxed)).filter(|&g| g > 0)
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

/// The store and the object's path a URL names, by object_store's rules: `s3://bucket/key`
/// (feature `aws`), `gs://bucket/key` (`gcp`), `az://container/key` (`azure`), `memory:///key`,
/// `file:///path`. `store_options` are the builders' configuration keys, e.g. `aws_endpoint`,
/// `aws_region`, `aws_access_key_id`, `aws_allow_http`; the environment is not read.
///
/// # Errors
/// [`Error::InvalidOptions`] (option `url`) for a URL that does not parse, names an unknown
/// scheme or one whose feature is off, or has an option its builder does not know.
pub fn store_for_url(url: &str, store_options: &[(String, String)]) -> Result<(Arc<dyn ObjectStore>, Path)> {
    let bad = |why: String| Error::invalid_option("url", format!("{url:?}: {why}"));
    let parsed = url::Url::parse(url).map_err(|e| bad(e.to_string()))?;
    let options = store_options.iter().map(|(k, v)| (k.as_str(), v.clone()));
    let (store, path) = object_store::parse_url_opts(&parsed, options).map_err(|e| bad(e.to_string()))?;
    Ok((Arc::from(store), path))
}

impl ObjectStoreEngine {
    /// The cap on this engine's GETs in flight (shared with other engines if the options gave
    /// one).
    pub fn limit(&self) -> &RequestLimit {
        &self.inner.limit
    }
}

fn name(opts: &ObjectStoreOptions, store: &dyn ObjectStore, location: &Path) -> PathBuf {
    opts.name.clone().unwrap_or_else(|| PathBuf::from(format!("{store}/{location}")))
}

impl ReadEngine for ObjectStoreEngine {
    fn info(&self) -> &FileInfo {
        &self.inner.info
    }

    fn max_gap(&self) -> Option<u64> {
        self.tuned_gap()
    }

    fn submit(&self, job: JobHandle) {
        let tasks = self.inner.limit.max.min(job.plan().extents().len());
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

/// One task: a GET at a time, each under a permit of the limit, for the next unclaimed extent,
/// until none is left. The permit comes first, so a queued task claims nothing it cannot fetch.
async fn worker(live: Live, job: JobHandle) {
    let inner = &*live.0;
    loop {
        let Ok(_permit) = inner.limit.permits.acquire().await else { return };
        let Some(i) = job.next_extent() else { return };
        let e = job.plan().extents()[i];
        let range = e.offset..e.offset + u64::from(e.len);
        // A hook that panics fails this extent's read, naming its row, like any other backend.
        let cap = match fault::ask(
            inner.hook.as_ref(),
            IoPoint { kind: IoKind::Read, offset: e.offset, len: e.len as usize },
        ) {
            Ok(Action::Fail(err)) => {
                job.complete(i, &[], Err(err));
                continue;
            }
            Ok(Action::Short(n)) => Some(n),
            Ok(Action::Proceed | Action::Panic) => None,
            Err(payload) => {
                job.fail_panicked(i, &*payload);
                continue;
            }
        };
        inner.requests.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        match inner.store.get_range(&inner.location, range.clone()).await {
            Ok(bytes) => {
                inner.bytes_fetched.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                if let Some(fit) = &inner.fit {
                    let mut fit = fit.lock().unwrap_or_else(|p| p.into_inner());
                    fit.add(bytes.len() as u64, started.elapsed());
                    inner.tuned_gap.store(fit.gap().unwrap_or(0), Ordering::Relaxed);
                }
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{CostFit, TUNED_GAP_RANGE};

    /// GETs of 64 KiB to 8 MiB that each take `latency + bytes * per_byte` seconds.
    fn fit(latency: f64, per_byte: f64, gets: usize) -> CostFit {
        let mut f = CostFit::default();
        for i in 0..gets {
            let bytes = (64 << 10) * (1 + i as u64 % 128);
            f.add(bytes, Duration::from_secs_f64(latency + bytes as f64 * per_byte));
        }
        f
    }

    #[test]
    fn tuned_gap_is_latency_times_bandwidth() {
        // 20 ms per request, 100 MB/s per stream: 2 MB.
        let gap = fit(0.020, 10e-9, 300).gap().unwrap();
        assert!((1_990_000..=2_010_000).contains(&gap), "{gap}");
        // 2 ms, 100 MB/s: 200 KB.
        let gap = fit(0.002, 10e-9, 300).gap().unwrap();
        assert!((199_000..=201_000).contains(&gap), "{gap}");
    }

    #[test]
    fn tuned_gap_stays_within_its_bounds() {
        // Bytes cost nothing: join everything the bound allows.
        assert_eq!(fit(0.002, 0.0, 300).gap(), Some(*TUNED_GAP_RANGE.end()));
        // No latency at all: join nothing the bound does not force.
        assert_eq!(fit(0.0, 10e-9, 300).gap(), Some(*TUNED_GAP_RANGE.start()));
    }

    #[test]
    fn tuned_gap_waits_for_enough_differing_gets() {
        assert_eq!(fit(0.020, 10e-9, 15).gap(), None, "too few GETs");
        let mut same = CostFit::default();
        for _ in 0..100 {
            same.add(65536, Duration::from_secs_f64(0.021));
        }
        assert_eq!(same.gap(), None, "GETs of one size cannot tell latency from bandwidth");
    }
}
