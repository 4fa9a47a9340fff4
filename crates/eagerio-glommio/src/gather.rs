//! Gathers over a `DmaFile`, on the executor that opened it.
//!
//! One *lane* per opened file (shared by every clone of its [`GlommioEngine`]): a queue of jobs
//! in call order and at most [`GlommioOptions::depth`] reads in flight. A read holds one of the
//! `depth` slots from the moment it is queued to the ring until the moment its completion has
//! been copied out; the memory it lands in is a DMA buffer glommio allocates when the read is
//! dispatched (from the executor's registered `io_memory`, else the heap) and that the
//! `ReadResult` owns until the lane drops it, after the copy.

use std::{
    cell::{Cell, RefCell},
    collections::VecDeque,
    io,
    panic::{catch_unwind, AssertUnwindSafe},
    path::{Path, PathBuf},
    rc::Rc,
};

use eagerio_core::{
    backend::{JobClaims, JobHandle, ReadEngine, Remote},
    fault::{self, Action, Hook, IoKind, IoPoint},
    Error, FileInfo, Result, RowLayout, RowTable, Source,
};
use futures::StreamExt;
use glommio::io::{DmaFile, ReadResult};

use crate::pump::Pump;

/// Options of the glommio gather engine: `GlommioOptions::default().depth(256)`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GlommioOptions {
    /// Reads in flight per opened file, across all its concurrent gathers: the slots. Default 128
    /// (glommio's default ring depth; more are queued in glommio's submission queue).
    pub depth: usize,
    /// Largest single read (a multiple of the device's alignment). Default 64 KiB.
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
    /// Adaptive mode: rows whose pages are resident are copied from the page cache before the
    /// reads are queued (in the gather call, or on a preparing thread for a gather of
    /// [`PREPARE_ELSEWHERE`](eagerio_core::prepare::PREPARE_ELSEWHERE) requests or more); only
    /// the misses are read with `O_DIRECT` (see [`eagerio_core::residency`]). Default on.
    pub adaptive: bool,
}

impl Default for GlommioOptions {
    fn default() -> Self {
        GlommioOptions {
            depth: 128,
            max_read: 64 * 1024,
            max_gap: eagerio_core::DEFAULT_MAX_GAP,
            tune_gap: true,
            gap_limit: eagerio_core::DEFAULT_GAP_LIMIT,
            adaptive: true,
        }
    }
}

eagerio_core::options_setters!(GlommioOptions {
    depth: usize,
    max_read: usize,
    max_gap: u64,
    tune_gap: bool,
    gap_limit: u64,
    adaptive: bool,
});

/// One job in the lane's queue.
struct Entry {
    handle: JobHandle,
    /// The extents this lane claimed and its reads holding a slot.
    claims: Cell<JobClaims>,
}

impl Entry {
    fn claims(&self, f: impl FnOnce(&mut JobClaims) -> Option<usize>) -> Option<usize> {
        let mut claims = self.claims.get();
        let out = f(&mut claims);
        self.claims.set(claims);
        out
    }
}

#[derive(Default)]
struct LaneState {
    /// Slots held: reads queued, in the kernel, or being copied out.
    in_flight: usize,
    /// Jobs in call order. A job leaves from the front only, once it is exhausted and drained,
    /// so a gather settles only after every read issued before its last one has completed.
    jobs: VecDeque<Rc<Entry>>,
}

struct Lane {
    file: Rc<DmaFile>,
    info: FileInfo,
    depth: usize,
    hook: Option<Hook>,
    pump: Pump,
    st: RefCell<LaneState>,
}

/// Reads one file with glommio's `DmaFile` on the executor that opened it. Cloning shares the
/// file, its slots and its queue.
///
/// The engine is `Rc`-based and neither `Send` nor `Sync`: it belongs to the executor (thread)
/// that opened it. To use a table from N executors, open it once on each (see the crate docs).
/// The [`GatherFuture`](eagerio_core::GatherFuture)s it returns are `Send`, but only this
/// executor drives their reads, so await them here.
#[derive(Clone)]
pub struct GlommioEngine {
    lane: Rc<Lane>,
}

impl std::fmt::Debug for GlommioEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.lane.st.borrow();
        f.debug_struct("GlommioEngine")
            .field("path", &self.lane.info.path)
            .field("align", &self.lane.info.align)
            .field("depth", &self.lane.depth)
            .field("in_flight", &st.in_flight)
            .field("jobs", &st.jobs.len())
            .finish()
    }
}

/// A glommio error as an `io::Error`, keeping the OS error code (glommio's own conversion keeps
/// only the kind for its "enhanced" errors).
pub(crate) fn io_error<T>(e: glommio::GlommioError<T>) -> io::Error {
    match e {
        glommio::GlommioError::IoError(e) | glommio::GlommioError::EnhancedIoError { source: e, .. } => e,
        other => io::Error::from(other),
    }
}

pub(crate) fn open_error(path: &Path, e: glommio::GlommioError<()>) -> Error {
    let source = io_error(e);
    if source.raw_os_error() == Some(libc::EINVAL) {
        Error::DirectIoUnsupported { path: path.to_path_buf(), source }
    } else {
        Error::open(path, source)
    }
}

/// The direct-I/O alignment of `path`: the device's logical block (what glommio found) or the
/// filesystem's `STATX_DIOALIGN`, whichever is larger.
pub(crate) fn alignment(path: &Path, file: &DmaFile) -> u64 {
    let statx = std::fs::File::open(path).ok().and_then(|f| eagerio_core::sys::dio_alignment(&f)).unwrap_or(1);
    file.alignment().max(statx).max(1)
}

impl GlommioEngine {
    /// Opens `path` for gathers with `O_DIRECT`, on the current glommio executor. With
    /// [`GlommioOptions::adaptive`] (the default) the file is also mapped read-only, so that rows
    /// already in the page cache are copied instead of read; if it cannot be
    /// mapped, every row is read and the reason is logged.
    ///
    /// Must be called (and the engine used) on a glommio `LocalExecutor`; build one with
    /// [`executor`](crate::executor) to get a clear error where glommio cannot run.
    ///
    /// # Cost
    /// About 0.2 ms: glommio opens and `statx`es the file through its ring. The first `DmaFile`
    /// a process opens on a device costs more: glommio probes whether the device takes polled
    /// I/O with one real read on its poll ring, which on a device without poll queues waits
    /// until it is refused (8-17 ms on a virtio disk). glommio keeps the answer for the process.
    ///
    /// # Errors
    /// [`Error::InvalidOptions`] for a zero depth or a `max_read` that is not a non-zero multiple
    /// of the device's alignment; [`Error::DirectIoUnsupported`] if the filesystem refuses
    /// `O_DIRECT`; [`Error::Io`] if the file cannot be opened or sized.
    ///
    /// # Panics
    /// Outside a glommio executor.
    ///
    /// # Examples
    /// ```no_run
    /// use eagerio_core::RowLayout;
    /// use eagerio_glommio::{GlommioEngine, GlommioOptions};
    /// # fn main() -> eagerio_core::Result<()> {
    /// eagerio_glommio::block_on(async {
    ///     let table = GlommioEngine::open("table.bin", GlommioOptions::default()).await?
    ///         .rows(RowLayout { base: 0, row_size: 90, rows: None })?;
    ///     let fut = table.gather(&[42, 7, 42])?; // queued to this executor's ring now
    ///     let rows = fut.await?;                 // 270 bytes: rows 42, 7, 42
    ///     assert_eq!(rows.len(), 270);
    ///     Ok(())
    /// })?
    /// # }
    /// ```
    pub async fn open(path: impl AsRef<Path>, opts: GlommioOptions) -> Result<Source<GlommioEngine>> {
        let path = path.as_ref();
        if opts.depth == 0 {
            return Err(Error::invalid_option("GlommioOptions::depth", "at least one read must be in flight"));
        }
        eagerio_core::sys::check_kind(path)?;
        let file = DmaFile::open(path).await.map_err(|e| open_error(path, e))?;
        let len = file.file_size().await.map_err(|e| Error::open(path, io_error(e)))?;
        let align = alignment(path, &file);
        if opts.max_read == 0 || opts.max_read as u64 % align != 0 {
            return Err(Error::invalid_option(
                "max_read",
                format!(
                    "{} must be a non-zero multiple of the device's alignment ({align}) of {path:?}",
                    opts.max_read
                ),
            ));
        }
        let info = FileInfo { path: PathBuf::from(path), len, align, max_read: opts.max_read as u64 };
        let lane = Lane {
            file: Rc::new(file),
            info,
            depth: opts.depth,
            hook: fault::injected(path),
            pump: Pump::new(),
            st: RefCell::new(LaneState::default()),
        };
        let source = Source::new(GlommioEngine { lane: Rc::new(lane) }).with_gap_options(
            opts.max_gap,
            opts.tune_gap,
            opts.gap_limit,
        );
        Ok(source.maybe_adaptive(opts.adaptive))
    }

    /// Opens `path` as a table of fixed-size rows.
    ///
    /// # Errors
    /// As [`open`](Self::open) and [`RowTable::new`].
    ///
    /// # Panics
    /// Outside a glommio executor.
    pub async fn open_rows(
        path: impl AsRef<Path>,
        layout: RowLayout,
        opts: GlommioOptions,
    ) -> Result<RowTable<GlommioEngine>> {
        RowTable::new(Self::open(path, opts).await?, layout)
    }

    /// Reads holding a slot right now (queued, in the kernel, or being copied out).
    pub fn in_flight(&self) -> usize {
        self.lane.st.borrow().in_flight
    }

    /// Whether every slot is free and no job is queued: nothing of any gather is in flight.
    pub fn is_idle(&self) -> bool {
        let st = self.lane.st.borrow();
        st.in_flight == 0 && st.jobs.is_empty() && self.lane.pump.live() == 0
    }

    /// The slot count ([`GlommioOptions::depth`]).
    pub fn depth(&self) -> usize {
        self.lane.depth
    }

    /// The glommio file underneath.
    pub fn file(&self) -> &Rc<DmaFile> {
        &self.lane.file
    }
}

impl ReadEngine for GlommioEngine {
    fn info(&self) -> &FileInfo {
        &self.lane.info
    }

    /// Queues the job and issues reads into every free slot before returning; each is polled
    /// once here, which puts its request on the executor's submission queue.
    fn submit(&self, job: JobHandle) {
        self.lane.submit(job);
    }

    /// A large gather is planned and served from the page cache on a preparing thread, then
    /// handed back to this executor through a channel: a pumped future drains it and submits
    /// the job as [`submit`](Self::submit) does. The preparing thread's send wakes the
    /// executor (glommio queues a wake from another thread to the executor and interrupts its
    /// sleep). The future lives until the returned sender is dropped, so [`is_idle`] stays false
    /// while a gather is being prepared; a job sent after this executor is gone is dropped on
    /// the preparing thread, and its gather fails with `Abandoned`.
    ///
    /// [`is_idle`]: GlommioEngine::is_idle
    fn remote(&self) -> Option<Remote> {
        let (tx, mut rx) = futures::channel::mpsc::unbounded::<JobHandle>();
        let lane = self.lane.clone();
        self.lane.pump.start(async move {
            while let Some(job) = rx.next().await {
                lane.submit(job);
            }
        });
        Some(std::sync::Arc::new(move |job| {
            // A closed channel hands the job back; dropping it ends the gather as abandoned.
            drop(tx.unbounded_send(job));
        }))
    }
}

/// The bytes of one extent's read.
enum ReadBuf {
    /// Straight from glommio's DMA buffer.
    Dma(ReadResult),
    /// A read the kernel returned in parts, joined.
    Joined(Vec<u8>),
}

impl ReadBuf {
    fn bytes(&self) -> &[u8] {
        match self {
            ReadBuf::Dma(r) => r,
            ReadBuf::Joined(v) => v,
        }
    }
}

/// Reads `len` bytes at `offset` (both aligned), continuing after a partial read that ends on an
/// aligned offset (an `O_DIRECT` read that ends unaligned, or returns nothing, is end of file).
async fn read_extent(file: &DmaFile, offset: u64, len: usize, align: u64) -> io::Result<ReadBuf> {
    let first = file.read_at_aligned(offset, len).await.map_err(io_error)?;
    let partial = |got: usize| got > 0 && got < len && (offset + got as u64) % align == 0;
    if !partial(first.len()) {
        return Ok(ReadBuf::Dma(first));
    }
    let mut joined = first.to_vec();
    drop(first);
    while partial(joined.len()) {
        let more = file.read_at_aligned(offset + joined.len() as u64, len - joined.len()).await.map_err(io_error)?;
        if more.is_empty() {
            break;
        }
        joined.extend_from_slice(&more);
    }
    Ok(ReadBuf::Joined(joined))
}

impl Lane {
    fn submit(self: &Rc<Self>, job: JobHandle) {
        let entry = Rc::new(Entry { handle: job, claims: Cell::new(JobClaims::default()) });
        self.st.borrow_mut().jobs.push_back(entry);
        self.fill();
    }

    /// Issues reads into free slots, oldest job first, then settles what can settle.
    fn fill(self: &Rc<Self>) {
        loop {
            let next = {
                let mut st = self.st.borrow_mut();
                if st.in_flight >= self.depth {
                    break;
                }
                let Some(entry) = st.jobs.iter().find(|e| e.claims.get().is_claiming()).cloned() else { break };
                let Some(i) = entry.claims(|c| c.claim(&entry.handle)) else { continue };
                st.in_flight += 1;
                (entry, i)
            };
            self.issue(next.0, next.1);
        }
        self.settle();
    }

    /// Drops the handles of the jobs at the front that are exhausted and drained.
    fn settle(&self) {
        let done: Vec<Rc<Entry>> = {
            let mut st = self.st.borrow_mut();
            let mut done = Vec::new();
            while st.jobs.front().is_some_and(|e| e.claims.get().is_drained()) {
                done.extend(st.jobs.pop_front());
            }
            done
        };
        // Outside the borrow: the last handle's drop settles the job and wakes its future.
        drop(done);
    }

    fn release(&self, entry: &Entry) {
        self.st.borrow_mut().in_flight -= 1;
        entry.claims(|c| {
            c.completed(&entry.handle);
            None
        });
    }

    /// Starts extent `i` of `entry` (its slot is already counted).
    fn issue(self: &Rc<Self>, entry: Rc<Entry>, i: usize) {
        let e = entry.handle.plan().extents()[i];
        let point = IoPoint { kind: IoKind::Read, offset: e.offset, len: e.len as usize };
        let cap = match fault::ask(self.hook.as_ref(), point) {
            Err(payload) => {
                entry.handle.fail_panicked(i, &*payload);
                self.release(&entry);
                return;
            }
            Ok(Action::Fail(err)) => {
                entry.handle.complete(i, &[], Err(err));
                self.release(&entry);
                return;
            }
            Ok(Action::Short(n)) => n,
            Ok(_) => usize::MAX,
        };
        let lane = self.clone();
        // The slot and the job's handle go with the read; both come back in `finish`, after the
        // completion was observed and copied out.
        self.pump.start(async move {
            let res = read_extent(&lane.file, e.offset, e.len as usize, lane.info.align).await;
            lane.finish(&entry, i, res, cap);
        });
    }

    fn finish(self: &Rc<Self>, entry: &Entry, i: usize, res: io::Result<ReadBuf>, cap: usize) {
        let step = catch_unwind(AssertUnwindSafe(|| match res {
            Ok(buf) => {
                let bytes = buf.bytes();
                if let Some(h) = &self.hook {
                    let e = entry.handle.plan().extents()[i];
                    h.check(IoPoint { kind: IoKind::CopyOut, offset: e.offset, len: e.len as usize });
                }
                entry.handle.complete(i, bytes, Ok(bytes.len().min(cap)));
                // `buf` (glommio's DMA buffer) is released here, after the copy.
            }
            Err(err) => entry.handle.complete(i, &[], Err(err)),
        }));
        if let Err(payload) = step {
            entry.handle.fail_panicked(i, &*payload);
        }
        self.release(entry);
        self.fill();
    }
}
