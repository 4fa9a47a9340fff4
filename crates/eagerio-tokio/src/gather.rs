//! Gathers on the blocking pool.

use std::{
    collections::VecDeque,
    fs::File,
    panic::AssertUnwindSafe,
    path::Path,
    sync::{Arc, Mutex},
};

use eagerio_core::{
    backend::{remote, JobHandle, ReadEngine, Remote, Staging, DEFAULT_STAGING_BYTES},
    fault::{self, with_hook, Hook, IoKind, IoPoint},
    sys::{self, DirectIo},
    Error, FileInfo, Result, RowLayout, RowTable, Source,
};

/// Options of the tokio gather engine: `TokioOptions::default().depth(128)`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TokioOptions {
    /// Reads in flight for this engine, across all its gathers: the most blocking workers it
    /// runs at once, however many gathers are in flight. Default 64.
    pub depth: usize,
    /// Staging per source. Default 8 MiB.
    pub staging_bytes: usize,
    /// Largest single read and staging slot size (a multiple of 4096). Default 64 KiB.
    pub max_read: usize,
    /// The gap: the largest hole read to join two extents. With `tune_gap` it is where the tuned
    /// gap starts; without, every gather uses it. Default 4096.
    pub max_gap: u64,
    /// Tune the gap to the device's price, fitted from this device's whole gathers (see
    /// [`eagerio_core::tune`]). Default on.
    pub tune_gap: bool,
    /// The tuned gap's bound. Default [`DEFAULT_GAP_LIMIT`](eagerio_core::DEFAULT_GAP_LIMIT)
    /// (32 KiB).
    pub gap_limit: u64,
    /// Direct or buffered reads. Default [`DirectIo::Auto`].
    pub direct: DirectIo,
    /// Adaptive mode: rows whose pages are resident are copied from the page cache in the
    /// gather call; only the misses are read (see [`eagerio_core::residency`]). Default on.
    pub adaptive: bool,
}

impl Default for TokioOptions {
    fn default() -> Self {
        TokioOptions {
            depth: 64,
            staging_bytes: DEFAULT_STAGING_BYTES,
            max_read: 64 * 1024,
            max_gap: eagerio_core::DEFAULT_MAX_GAP,
            tune_gap: true,
            gap_limit: eagerio_core::DEFAULT_GAP_LIMIT,
            direct: DirectIo::Auto,
            adaptive: true,
        }
    }
}

eagerio_core::options_setters!(TokioOptions {
    depth: usize,
    staging_bytes: usize,
    max_read: usize,
    max_gap: u64,
    tune_gap: bool,
    gap_limit: u64,
    direct: DirectIo,
    adaptive: bool,
});

struct Inner {
    file: File,
    info: FileInfo,
    direct: bool,
    staging: Staging,
    depth: usize,
    hook: Option<Hook>,
    rt: tokio::runtime::Handle,
    queue: Mutex<Queue>,
}

/// The gathers with extents left to claim, and the workers serving them.
#[derive(Default)]
struct Queue {
    /// Served round robin, one extent at a time, so a large gather cannot starve a small one.
    jobs: VecDeque<JobHandle>,
    /// Blocking workers running (at most `depth`).
    workers: usize,
}

fn lock(m: &Mutex<Queue>) -> std::sync::MutexGuard<'_, Queue> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Reads one file on tokio's blocking pool. Cloning shares the file and its staging.
#[derive(Clone)]
pub struct TokioEngine {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for TokioEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokioEngine")
            .field("path", &self.inner.info.path)
            .field("direct", &self.inner.direct)
            .field("depth", &self.inner.depth)
            .field("staging", &self.inner.staging)
            .finish()
    }
}

impl TokioEngine {
    /// Opens `path` for gathers: the `open(2)` and `statx` run on the blocking pool, so the
    /// caller's task only waits. The file's fault hook, if a test installed one for `path`, is
    /// taken now ([`fault::inject`]).
    ///
    /// # Errors
    /// [`Error::InvalidOptions`] for a zero depth or bad staging sizes; [`Error::Io`] if the
    /// file cannot be opened; [`Error::DirectIoUnsupported`] for [`DirectIo::On`] on a
    /// filesystem without it; [`Error::Unavailable`] outside a tokio runtime.
    pub async fn open(path: impl AsRef<Path>, opts: TokioOptions) -> Result<Source<TokioEngine>> {
        let path = path.as_ref().to_path_buf();
        let p = path.clone();
        crate::unblock(&path, move || Self::open_blocking(&p, opts)).await
    }

    /// [`open`](Self::open), blocking the calling thread; it must be inside a tokio runtime
    /// context.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_blocking(path: impl AsRef<Path>, opts: TokioOptions) -> Result<Source<TokioEngine>> {
        let path = path.as_ref();
        if opts.depth == 0 {
            return Err(Error::invalid_option("TokioOptions::depth", "at least one read must be in flight"));
        }
        let rt = crate::runtime(path)?;
        let staging = Staging::for_options(
            opts.staging_bytes,
            opts.max_read,
            ["TokioOptions::staging_bytes", "TokioOptions::max_read"],
        )?;
        let gf = sys::open_for_gather(path, opts.direct)?;
        let info = FileInfo { path: path.to_path_buf(), len: gf.len, align: gf.align, max_read: opts.max_read as u64 };
        let adaptive = opts.adaptive;
        let engine = TokioEngine {
            inner: Arc::new(Inner {
                file: gf.file,
                info,
                direct: gf.direct,
                staging,
                depth: opts.depth,
                hook: fault::injected(path),
                rt,
                queue: Mutex::default(),
            }),
        };
        Ok(Source::new(engine).with_gap_options(opts.max_gap, opts.tune_gap, opts.gap_limit).maybe_adaptive(adaptive))
    }

    /// Opens `path` as a table of fixed-size rows.
    ///
    /// # Errors
    /// As [`open`](Self::open) and [`RowTable::new`].
    pub async fn open_rows(
        path: impl AsRef<Path>,
        layout: RowLayout,
        opts: TokioOptions,
    ) -> Result<RowTable<TokioEngine>> {
        RowTable::new(Self::open(path, opts).await?, layout)
    }

    /// [`open_rows`](Self::open_rows), blocking the calling thread; it must be inside a tokio
    /// runtime context.
    ///
    /// # Errors
    /// As [`open_rows`](Self::open_rows).
    pub fn open_rows_blocking(
        path: impl AsRef<Path>,
        layout: RowLayout,
        opts: TokioOptions,
    ) -> Result<RowTable<TokioEngine>> {
        RowTable::new(Self::open_blocking(path, opts)?, layout)
    }

    /// Whether reads bypass the page cache.
    pub fn is_direct(&self) -> bool {
        self.inner.direct
    }

    /// The staging pool (full when nothing is in flight).
    pub fn staging(&self) -> &Staging {
        &self.inner.staging
    }
}

impl ReadEngine for TokioEngine {
    fn info(&self) -> &FileInfo {
        &self.inner.info
    }

    /// Queues the job and starts blocking workers for it, up to the engine's `depth` in all:
    /// its reads are in flight (or queued to running workers) when this returns.
    fn submit(&self, job: JobHandle) {
        let spawn = {
            let mut q = lock(&self.inner.queue);
            let wanted = job.plan().extents().len();
            q.jobs.push_back(job);
            let n = (self.inner.depth - q.workers).min(wanted);
            q.workers += n;
            n
        };
        for _ in 0..spawn {
            let worker = Worker { inner: self.inner.clone(), counted: true };
            // Dropping the JoinHandle detaches the worker.
            drop(self.inner.rt.spawn_blocking(move || worker.run()));
        }
    }

    /// Jobs may come from any thread: large gathers are prepared off the caller's thread.
    fn remote(&self) -> Option<Remote> {
        Some(remote(self))
    }
}

/// One blocking worker of an engine: serves queued gathers, one extent at a time, until none has
/// an extent left.
struct Worker {
    inner: Arc<Inner>,
    /// Still counted in [`Queue::workers`].
    counted: bool,
}

impl Drop for Worker {
    /// A worker that ends without having counted itself out (the runtime dropped it unrun while
    /// shutting down, or it unwound) gives its place back; if it was the last, the queued gathers
    /// are dropped too, and fail as abandoned instead of waiting forever.
    fn drop(&mut self) {
        if !self.counted {
            return;
        }
        let orphans = {
            let mut q = lock(&self.inner.queue);
            q.workers -= 1;
            if q.workers == 0 {
                std::mem::take(&mut q.jobs)
            } else {
                VecDeque::new()
            }
        };
        drop(orphans);
    }
}

impl Worker {
    fn run(mut self) {
        while let Some((job, i)) = self.next() {
            read_extent(&self.inner, &job, i);
        }
    }

    /// Claims the next extent, round robin over the queued gathers; `None` (the worker then
    /// exits, counted out under the same lock) once no gather has one left.
    fn next(&mut self) -> Option<(JobHandle, usize)> {
        let mut finished = Vec::new();
        let next = {
            let mut q = lock(&self.inner.queue);
            loop {
                let Some(job) = q.jobs.pop_front() else {
                    q.workers -= 1;
                    self.counted = false;
                    break None;
                };
                match job.next_extent() {
                    Some(i) => {
                        q.jobs.push_back(job.clone());
                        break Some((job, i));
                    }
                    None => finished.push(job),
                }
            }
        };
        // Outside the lock: the last handle of a gather settles it and wakes its future.
        drop(finished);
        next
    }
}

/// Reads extent `i` of `job` into a staging slot and completes it; a panic (a hook, the read or
/// the copy-out) fails the gather, naming the extent.
fn read_extent(inner: &Inner, job: &JobHandle, i: usize) {
    let align = if inner.direct { inner.info.align } else { 1 };
    let e = job.plan().extents()[i];
    let mut slot = inner.staging.acquire_blocking();
    // The slot lease lives in this frame: on a panic it is dropped while unwinding, after the
    // pread returned, so a slot never goes back while a read still targets it.
    let step = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let point = IoPoint { kind: IoKind::Read, offset: e.offset, len: e.len as usize };
        let res = slot.with_mut(|buf| {
            with_hook(inner.hook.as_ref(), point, || {
                sys::pread_full(&inner.file, &mut buf[..e.len as usize], e.offset, align)
            })
        });
        if let Some(h) = &inner.hook {
            h.check(IoPoint { kind: IoKind::CopyOut, ..point });
        }
        slot.with(|buf| job.complete(i, buf, res));
    }));
    if let Err(payload) = step {
        job.fail_panicked(i, &*payload);
    }
}
