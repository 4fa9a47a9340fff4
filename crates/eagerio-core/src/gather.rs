//! Gathers: the job ledger shared by a [`GatherFuture`] and the backend serving it, and the
//! sources that create them.
//!
//! # When the I/O starts
//! [`Source::gather_ranges`] and [`RowTable::gather`] validate the request, plan it and hand the
//! job to the backend's [`ReadEngine::submit`] *before they return*; a large gather on a backend
//! that takes jobs from any thread is handed, once validated, to a preparing thread that plans
//! and submits it at once (below). Either way no poll is needed: the returned [`GatherFuture`]
//! never starts anything, it only waits for the job to settle.
//!
//! # What the call costs the caller's thread
//! A gather of fewer than [`PREPARE_ELSEWHERE`](crate::prepare::PREPARE_ELSEWHERE) (2,048)
//! requests is planned (about 40 ns a request), served from the page cache where the adaptive
//! mode finds its rows resident, and submitted in the call. A larger one, on a backend that can
//! take jobs from any thread ([`ReadEngine::remote`]: every local backend; glommio's takes
//! them back on its executor through a channel), is only
//! checked in the call (every error a bad request can cause is returned there, before any I/O:
//! about 1 ns a request, plus copying the requests) and handed to a preparing thread
//! ([`crate::prepare`]), which plans it, copies its resident rows and submits it at once, with
//! no poll needed. A 40,000-row gather's call then takes well under a millisecond, cold or
//! warm, instead of milliseconds. Until the preparing thread is done, the future's
//! [`stats`](GatherFuture::stats) are zero; dropping it ends the job as soon as it is built.
//!
//! # What dropping the future does
//! It cancels the job: no further extent is issued, and a backend that can cancel reads in flight
//! is asked to (the io_uring lanes send `IORING_OP_ASYNC_CANCEL`). Reads already issued keep their
//! staging slots and the output buffer alive (both are owned by the in-flight party, not by the
//! future) until their completions are observed; only then do the slots return to the pool.
//! Nothing the kernel or a worker still writes is ever freed or handed to the next gather.
//!
//! # Deadlines
//! A gather can carry a deadline ([`GatherFuture::with_deadline`], [`GatherFuture::with_timeout`],
//! or [`Source::with_timeout`] for every gather of a source). When it passes, the job is cancelled
//! as if its future were dropped, and the future resolves at once with [`Error::TimedOut`],
//! naming how many rows were not read, without waiting for the reads still in flight: they
//! return their slots when they complete, as above. A process-wide thread, `eagerio-deadlines`,
//! started by the first deadline, wakes the future at its deadline.
//!
//! # The party protocol
//! A job is settled when no [`JobHandle`] is left. The `gather` call holds one while it submits;
//! a backend clones one for every worker or lane that may still touch the job, and drops it when
//! that worker's last read has completed. The last drop records the statistics and wakes the
//! future. The future reads the output only after that, so no backend write can race with it.

use std::{
    fmt,
    future::Future,
    ops::Range,
    path::{Path, PathBuf},
    pin::Pin,
    sync::Arc as StdArc,
    task::{Context, Poll, Waker},
    time::{Duration, Instant},
};

use bytes::{Bytes, BytesMut};

use crate::deadline::{Expire, Ticket};
use crate::error::{Error, Op, Result, Target};
use crate::loom::{lock, Arc, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Mutex, Ordering, UnsafeCell};
use crate::plan::{Plan, PlanOptions};
use crate::residency::{Residency, Served};
use crate::stats::{GatherStats, SourceLatencies, SourceStats, SourceTotals};

/// What a backend tells the core about the file it serves.
#[derive(Debug, Clone)]
pub struct FileInfo {
    /// The file's path, for error messages.
    pub path: PathBuf,
    /// The file's length when it was opened; range gathers past it are refused before any I/O.
    pub len: u64,
    /// Alignment every read must have (the logical block for `O_DIRECT`, `1` when buffered).
    pub align: u64,
    /// Largest single read: the staging slot size.
    pub max_read: u64,
}

/// A backend that executes gather jobs.
///
/// Implementing it right is small: in [`submit`](ReadEngine::submit), start reading. Take extents
/// with [`JobHandle::next_extent`], read each into a staging slot you own, report it with
/// [`JobHandle::complete`], and drop your handle(s) once your last read has completed. Keep a
/// slot's lease until the read into it has completed, whatever happens to the job.
pub trait ReadEngine {
    /// The file this engine reads.
    fn info(&self) -> &FileInfo;

    /// Starts executing `job`. Reads must be in flight (or queued to a party that runs without
    /// being polled) when this returns.
    fn submit(&self, job: JobHandle);

    /// The largest hole to read to join two extents in the next plan, for an engine that
    /// measures what a read costs (a remote store: a request's latency against its bandwidth).
    /// `None`, the default, keeps the source's bound ([`Source::with_max_gap`]).
    fn max_gap(&self) -> Option<u64> {
        None
    }

    /// A way to [`submit`](ReadEngine::submit) from any thread, for an engine that allows it
    /// (build one with [`remote`]). With it, a gather of at least
    /// [`PREPARE_ELSEWHERE`](crate::prepare::PREPARE_ELSEWHERE) requests is planned, served
    /// from the page cache and submitted on a preparing thread, and the gather call returns
    /// after validating it. `None`, the default, does all of it in the call. An engine tied to
    /// its thread (glommio's) returns a sender that hands the job back to that thread.
    fn remote(&self) -> Option<Remote> {
        None
    }
}

/// Submits a job to an engine from any thread: see [`ReadEngine::remote`].
pub type Remote = StdArc<dyn Fn(JobHandle) + Send + Sync>;

/// [`ReadEngine::remote`] for an engine that may be shared across threads: submits through a
/// clone of it.
pub fn remote<E: ReadEngine + Clone + Send + Sync + 'static>(engine: &E) -> Remote {
    let engine = engine.clone();
    StdArc::new(move |job| engine.submit(job))
}

#[derive(Debug)]
enum Targets {
    Rows(Vec<u64>),
    Ranges,
}

impl Targets {
    /// What the requests are, in errors.
    fn what(&self) -> &'static str {
        match self {
            Targets::Rows(_) => "rows",
            Targets::Ranges => "ranges",
        }
    }
}

#[derive(Clone, Copy)]
struct OutPtr(*mut u8);

// SAFETY: the pointer targets the job's output buffer, which lives as long as the job. Parties
// write disjoint piece ranges through it (planner invariant) and the future reads the buffer only
// after every party is gone (Acquire on `parties`), so sharing it across threads is sound.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

/// Where one extent of a job stands. Kept as a byte per extent; only [`JobHandle`] moves it, and
/// only forward: `UNCLAIMED -> CLAIMED -> DONE`, or `CLAIMED -> FAILED` for a read that failed
/// or came back short. An extent served from the page cache starts `DONE`.
struct ExtentState;

impl ExtentState {
    const UNCLAIMED: u8 = 0;
    const CLAIMED: u8 = 1;
    const DONE: u8 = 2;
    const FAILED: u8 = 3;
}

/// Whether a job's future still waits for it, kept in `GatherJob::ending`. Moves once, from
/// `LIVE` to one of the others.
struct Ending;

impl Ending {
    const LIVE: u8 = 0;
    /// The future was dropped.
    const DROPPED: u8 = 1;
    /// The deadline passed; the future resolves with [`Error::TimedOut`].
    const TIMED_OUT: u8 = 2;
}

/// Run when a job ends early, by [`JobHandle::on_cancel`].
type Canceller = Box<dyn FnOnce() + Send>;

/// The shared state of one gather: the plan, the output, the progress and the first error.
pub struct GatherJob {
    plan: Plan,
    requests: Vec<(u64, u64)>,
    targets: Targets,
    path: StdArc<Path>,
    out: UnsafeCell<BytesMut>,
    out_ptr: OutPtr,
    next: AtomicUsize,
    /// The extents left for the engine when some were served resident (adaptive mode).
    order: Option<Vec<u32>>,
    /// Per extent, its [`ExtentState`]: an extent's bytes count only if it was claimed and then
    /// completed exactly once.
    extent_states: Box<[AtomicU8]>,
    completed: AtomicUsize,
    parties: AtomicUsize,
    /// Set by the last party after the statistics are final; the future waits for this.
    settled: AtomicBool,
    /// An [`Ending`]: whether the future still waits.
    ending: AtomicU8,
    /// What to run when the job ends early (dropped unrun with the job).
    cancellers: Mutex<Vec<Canceller>>,
    /// The deadline, in ns since `started` (`u64::MAX`: none), for [`Error::TimedOut`].
    deadline_ns: AtomicU64,
    failed: AtomicBool,
    error: Mutex<Option<Error>>,
    waker: Mutex<Option<Waker>>,
    reads_issued: AtomicU64,
    bytes_read: AtomicU64,
    resident: AtomicU64,
    resident_faults: AtomicU64,
    started: Instant,
    submit_ns: AtomicU64,
    wait_ns: AtomicU64,
    source_stats: Option<StdArc<SourceStats>>,
    /// Built on a preparing thread: the call's time was recorded by the call itself.
    prepared_elsewhere: bool,
    /// Per extent, when it was claimed (µs since `started`), for the read latency histogram.
    claimed_at: Box<[std::sync::atomic::AtomicU32]>,
    /// When the job was handed to the engine, and when the engine claimed its first extent (ns
    /// since `started`; `u64::MAX` until then), for the queue histogram.
    handed_off_ns: std::sync::atomic::AtomicU64,
    first_claim_ns: std::sync::atomic::AtomicU64,
    /// The gather's `tracing` span (debug level): open from the call until the job is dropped.
    span: tracing::Span,
}

// SAFETY: the only non-`Sync` field is `out`, whose cell is accessed once, by the future, after
// every party is gone (Acquire on `parties`); parties write the buffer through `out_ptr` at
// disjoint offsets (see `OutPtr`).
unsafe impl Sync for GatherJob {}
// SAFETY: nothing in the job is tied to a thread.
unsafe impl Send for GatherJob {}

impl fmt::Debug for GatherJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatherJob")
            .field("path", &self.path)
            .field("extents", &self.plan.extents().len())
            .field("completed", &self.completed.load(Ordering::Relaxed))
            .field("parties", &self.parties.load(Ordering::Relaxed))
            .finish()
    }
}

impl GatherJob {
    fn target(&self, request: u32) -> Target {
        match &self.targets {
            Targets::Rows(rows) => Target::Row(rows[request as usize]),
            Targets::Ranges => Target::Range(request as usize),
        }
    }

    fn stats(&self) -> GatherStats {
        GatherStats {
            requested: self.plan.requests() as u64,
            unique: self.plan.unique_requests() as u64,
            resident: self.resident.load(Ordering::Relaxed),
            resident_faults: self.resident_faults.load(Ordering::Relaxed),
            reads_planned: self.plan.extents().len() as u64,
            reads_issued: self.reads_issued.load(Ordering::Relaxed),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            useful_bytes: self.plan.useful_bytes(),
            submit: Duration::from_nanos(self.submit_ns.load(Ordering::Relaxed)),
            wait: Duration::from_nanos(self.wait_ns.load(Ordering::Relaxed)),
        }
    }

    fn record_error(&self, err: Error) {
        let mut slot = lock(&self.error);
        if slot.is_none() {
            *slot = Some(err);
        }
        self.failed.store(true, Ordering::Release);
    }

    /// Nanoseconds since the gather call began.
    fn now_ns(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Run by the last party: makes the statistics final, then lets the future finish.
    fn settle(&self) {
        let total = self.started.elapsed();
        let submit = Duration::from_nanos(self.submit_ns.load(Ordering::Relaxed));
        self.wait_ns.store(total.saturating_sub(submit).as_nanos() as u64, Ordering::Relaxed);
        if let Some(s) = &self.source_stats {
            let relaxed = std::sync::atomic::Ordering::Relaxed;
            let first = self.first_claim_ns.load(relaxed);
            let queue = (first != u64::MAX)
                .then(|| Duration::from_nanos(first.saturating_sub(self.handed_off_ns.load(relaxed))));
            if !self.prepared_elsewhere {
                s.record_call(submit);
            }
            s.record_times(queue, total);
            let ended = self.ending.load(Ordering::Acquire) == Ending::TIMED_OUT;
            s.record(&self.stats(), self.failed.load(Ordering::Acquire) || ended);
        }
        // Release: a future that sees `settled` sees the final statistics and every party's
        // writes to the output (each party's drop was AcqRel on `parties`, before this).
        self.settled.store(true, Ordering::Release);
        let waker = lock(&self.waker).take();
        if let Some(w) = waker {
            wake(w);
        }
    }

    /// Ends the job early (`how` is [`Ending::DROPPED`] or [`Ending::TIMED_OUT`]): no further
    /// extent is claimed, and the backend's cancellers run. Whether this call ended it.
    fn end(&self, how: u8) -> bool {
        if self.ending.compare_exchange(Ending::LIVE, how, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return false;
        }
        let cancellers = std::mem::take(&mut *lock(&self.cancellers));
        for cancel in cancellers {
            cancel();
        }
        true
    }

    /// [`Error::TimedOut`] if the deadline passed before every extent was read, counting the
    /// requests with a byte in an extent not read (whether unclaimed, in flight, cancelled or
    /// failed).
    fn timed_out(&self) -> Option<Error> {
        if self.ending.load(Ordering::Acquire) != Ending::TIMED_OUT {
            return None;
        }
        let mut unread = vec![false; self.plan.requests()];
        for (i, state) in self.extent_states.iter().enumerate() {
            if state.load(Ordering::Acquire) != ExtentState::DONE {
                for p in self.plan.pieces(i) {
                    unread[p.request as usize] = true;
                }
            }
        }
        let unread = unread.iter().filter(|&&u| u).count() as u64;
        (unread > 0).then(|| Error::TimedOut {
            op: Op::Read,
            path: self.path.to_path_buf(),
            after: Duration::from_nanos(self.deadline_ns.load(Ordering::Relaxed)),
            unread,
            requested: self.plan.requests() as u64,
            what: self.targets.what(),
        })
    }

    fn take_output(&self) -> Result<Bytes> {
        // A read cancelled at the deadline fails with `ECANCELED`: the deadline is the cause.
        if let Some(e) = self.timed_out() {
            return Err(e);
        }
        if let Some(e) = lock(&self.error).take() {
            return Err(e);
        }
        // `completed` counts extents moved CLAIMED -> DONE (or served resident), each once.
        if self.completed.load(Ordering::Acquire) != self.plan.extents().len() {
            return Err(Error::Abandoned { op: Op::Read, path: self.path.to_path_buf() });
        }
        let len = self.plan.out_len() as usize;
        self.out.with_mut(|out| {
            // SAFETY: the job is settled (the caller saw `settled` with Acquire), so no party is
            // left to touch the buffer.
            let out = unsafe { &mut *out };
            // SAFETY: every extent reached DONE exactly once, each through a copy of all its
            // pieces, and the pieces of a plan cover `0..out_len` exactly (planner invariant,
            // property-tested), so the first `len` bytes are initialised. A plan made by
            // `Plan::missing` covers only the requests it names; `copy_in_order` wrote every
            // other request whole at its place in the output before the job was made.
            // `reserve(len)` at creation made the capacity.
            unsafe { out.set_len(len) };
            Ok(std::mem::take(out).freeze())
        })
    }
}

impl Expire for GatherJob {
    fn expire(&self) {
        if self.end(Ending::TIMED_OUT) {
            if let Some(w) = lock(&self.waker).take() {
                wake(w);
            }
        }
    }
}

/// Wakes `waker`, catching a panic inside it (logged). Wakers run on the thread that completes
/// an operation (a lane, a worker); a panicking one must not unwind through the ledger's
/// bookkeeping and leave other waiters unwoken.
pub(crate) fn wake(waker: Waker) {
    if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| waker.wake())) {
        tracing::error!(panic = %crate::error::panic_message(&*payload), "a waker panicked; the panic was caught");
    }
}

/// A backend's share of a gather job. Cloning it adds a party; the job settles when the last one
/// is dropped, so hold one for as long as you may still read into the job or complete it.
pub struct JobHandle {
    job: Arc<GatherJob>,
}

impl fmt::Debug for JobHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.job.fmt(f)
    }
}

impl Clone for JobHandle {
    fn clone(&self) -> Self {
        self.job.parties.fetch_add(1, Ordering::Relaxed);
        JobHandle { job: self.job.clone() }
    }
}

impl Drop for JobHandle {
    fn drop(&mut self) {
        if crate::loom::thread_panicking() {
            self.job.record_error(Error::Panicked {
                op: Op::Read,
                path: self.job.path.to_path_buf(),
                offset: None,
                target: None,
                message: "a party panicked while serving the gather".into(),
            });
        }
        if self.job.parties.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.job.settle();
        }
    }
}

impl JobHandle {
    /// The plan being executed.
    pub fn plan(&self) -> &Plan {
        &self.job.plan
    }

    /// The file, for error messages.
    pub fn path(&self) -> &Path {
        &self.job.path
    }

    /// Whether further extents should still be issued (not cancelled, not timed out, not
    /// failed).
    pub fn is_live(&self) -> bool {
        self.job.ending.load(Ordering::Relaxed) == Ending::LIVE && !self.job.failed.load(Ordering::Relaxed)
    }

    /// Runs `cancel` when the job ends early, its future dropped or its deadline passed (at once,
    /// on this thread, if it already has): for a backend that can stop reads already issued. It
    /// runs on the thread that ends the job (the future's, or the deadline watcher), so it should
    /// only signal the backend. Dropped unrun with the job if it never ends early.
    pub fn on_cancel(&self, cancel: impl FnOnce() + Send + 'static) {
        let mut cancellers = lock(&self.job.cancellers);
        if self.job.ending.load(Ordering::Acquire) == Ending::LIVE {
            cancellers.push(Box::new(cancel));
        } else {
            drop(cancellers);
            cancel();
        }
    }

    /// Claims the next extent to read, or `None` when all are claimed or the job was cancelled
    /// or failed. Every claimed extent must be reported through [`complete`](Self::complete) or
    /// [`fail`](Self::fail).
    pub fn next_extent(&self) -> Option<usize> {
        if !self.is_live() {
            return None;
        }
        let claim = self.job.next.fetch_add(1, Ordering::Relaxed);
        let i = match &self.job.order {
            Some(order) => order.get(claim).map_or(usize::MAX, |&x| x as usize),
            None => claim,
        };
        if i < self.job.plan.extents().len() {
            let job = &*self.job;
            let now = job.now_ns();
            let relaxed = std::sync::atomic::Ordering::Relaxed;
            if claim == 0 {
                job.first_claim_ns.store(now, relaxed);
            }
            job.claimed_at[i].store(u32::try_from(now / 1000).unwrap_or(u32::MAX), relaxed);
            job.extent_states[i].store(ExtentState::CLAIMED, Ordering::Relaxed);
            job.reads_issued.fetch_add(1, Ordering::Relaxed);
            Some(i)
        } else {
            None
        }
    }

    /// Reports extent `extent`'s read: `result` is the syscall's (bytes read or the error) and
    /// `buf` the buffer it read into. Checks for a short read, naming the first row it cut, and
    /// copies the extent's pieces into the output.
    ///
    /// An extent counts only once, and only if [`next_extent`](Self::next_extent) handed it out:
    /// reporting an extent that was never claimed, or reporting one twice, fails the job with
    /// [`Error::Protocol`] instead of copying, so a broken engine can never make a gather return
    /// bytes that no read wrote.
    ///
    /// # Panics
    /// If `extent` is not an extent of the plan, or `buf` is shorter than the bytes the result
    /// claims.
    pub fn complete(&self, extent: usize, buf: &[u8], result: std::io::Result<usize>) {
        let job = &*self.job;
        let e = job.plan.extents()[extent];
        if let Err(state) = job.extent_states[extent].compare_exchange(
            ExtentState::CLAIMED,
            ExtentState::DONE,
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            let what = match state {
                ExtentState::DONE | ExtentState::FAILED => "completed twice",
                _ => "completed but never claimed",
            };
            return self.fail(Error::Protocol {
                path: job.path.to_path_buf(),
                message: format!("extent {extent} (offset {}) was {what}", e.offset),
            });
        }
        let claimed = job.claimed_at[extent].load(std::sync::atomic::Ordering::Relaxed);
        let latency = Duration::from_micros((job.now_ns() / 1000).saturating_sub(u64::from(claimed)));
        if let Some(s) = &job.source_stats {
            s.record_read(latency);
        }
        tracing::debug!(parent: &job.span, offset = e.offset, len = e.len, ok = result.is_ok(), ?latency, "read");
        let got = match result {
            Ok(n) => n,
            Err(source) => {
                job.extent_states[extent].store(ExtentState::FAILED, Ordering::Relaxed);
                let first = job.plan.pieces(extent)[0];
                return self.fail(Error::Io {
                    op: Op::Read,
                    path: job.path.to_path_buf(),
                    offset: Some(e.offset),
                    target: Some(job.target(first.request)),
                    source,
                });
            }
        };
        job.bytes_read.fetch_add(got as u64, Ordering::Relaxed);
        if got < e.needed as usize {
            job.extent_states[extent].store(ExtentState::FAILED, Ordering::Relaxed);
            let p = job.plan.pieces(extent).iter().find(|p| (p.extent_offset + p.len) as usize > got);
            let p = p.expect("a piece needs bytes past a short read");
            let (offset, wanted) = job.requests[p.request as usize];
            let file_end = e.offset + got as u64;
            return self.fail(Error::ShortRead {
                target: job.target(p.request),
                offset,
                wanted,
                got: file_end.saturating_sub(offset),
                path: job.path.to_path_buf(),
            });
        }
        let buf = &buf[..got];
        for p in job.plan.pieces(extent) {
            let src = &buf[p.extent_offset as usize..(p.extent_offset + p.len) as usize];
            // SAFETY: `out_ptr` points at a buffer with capacity `out_len` that outlives this
            // handle; `p.out_offset + p.len <= out_len`, and no other piece of the plan writes
            // these output bytes, so this copy races with no other access.
            unsafe {
                std::ptr::copy_nonoverlapping(src.as_ptr(), job.out_ptr.0.add(p.out_offset as usize), src.len());
            }
        }
        job.completed.fetch_add(1, Ordering::Release);
    }

    /// Fails the job with `err` (the first error wins); no further extents are issued.
    pub fn fail(&self, err: Error) {
        self.job.record_error(err);
    }

    /// Fails the job with [`Error::Panicked`] for a panic caught while serving `extent` (a hook,
    /// the read, or the copy-out): the error names the extent's offset and the first row or
    /// range it serves, and carries the panic's message.
    pub fn fail_panicked(&self, extent: usize, payload: &(dyn std::any::Any + Send)) {
        let job = &*self.job;
        let first = job.plan.pieces(extent)[0];
        self.fail(Error::Panicked {
            op: Op::Read,
            path: job.path.to_path_buf(),
            offset: Some(job.plan.extents()[extent].offset),
            target: Some(job.target(first.request)),
            message: crate::error::panic_message(payload),
        });
    }
}

/// Where a party stands with one job: see [`JobClaims`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimPhase {
    /// Claiming extents as slots free up.
    Claiming,
    /// Nothing left to claim (all claimed, or the job failed or ended): waiting for the reads in
    /// flight.
    Draining,
    /// The job ended early and the party asked for its reads in flight to be cancelled; waiting
    /// for them.
    Cancelling,
}

/// One party's account of a job it serves: the extents it claimed and the reads it has in flight,
/// kept by a backend beside the job's [`JobHandle`] (the io_uring lane and the glommio lane keep
/// one per job). The party may drop its handle once [`is_drained`](Self::is_drained).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobClaims {
    phase: ClaimPhase,
    in_flight: usize,
    claimed: usize,
}

impl Default for JobClaims {
    fn default() -> Self {
        JobClaims { phase: ClaimPhase::Claiming, in_flight: 0, claimed: 0 }
    }
}

impl JobClaims {
    /// Claims the next extent of `job` for a read about to be issued ([`JobHandle::next_extent`]),
    /// counting it in flight; `None`, and the phase moves to `Draining`, once there is none.
    pub fn claim(&mut self, job: &JobHandle) -> Option<usize> {
        if self.phase != ClaimPhase::Claiming {
            return None;
        }
        let Some(extent) = job.next_extent() else {
            self.phase = ClaimPhase::Draining;
            return None;
        };
        self.in_flight += 1;
        self.claimed += 1;
        Some(extent)
    }

    /// A read this party claimed has completed (and was reported to `job`). A job that is no
    /// longer live stops claiming.
    pub fn completed(&mut self, job: &JobHandle) {
        self.in_flight -= 1;
        if self.phase == ClaimPhase::Claiming && !job.is_live() {
            self.phase = ClaimPhase::Draining;
        }
    }

    /// The job ended early: stop claiming. Whether this is the first call, i.e. whether the
    /// caller should now cancel the reads in flight.
    pub fn cancel(&mut self) -> bool {
        let first = self.phase != ClaimPhase::Cancelling;
        self.phase = ClaimPhase::Cancelling;
        first
    }

    /// Where the party stands.
    pub fn phase(&self) -> ClaimPhase {
        self.phase
    }

    /// Whether the party may claim more.
    pub fn is_claiming(&self) -> bool {
        self.phase == ClaimPhase::Claiming
    }

    /// Nothing left to claim and no read in flight: the party may drop its handle.
    pub fn is_drained(&self) -> bool {
        self.phase != ClaimPhase::Claiming && self.in_flight == 0
    }

    /// Reads this party has in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Extents of `job` this party has not claimed (an upper bound on what is left when several
    /// parties claim from one job).
    pub fn unclaimed(&self, job: &JobHandle) -> usize {
        job.plan().extents().len().saturating_sub(self.claimed)
    }
}

/// The wait for an eagerly started gather. Resolves to the gathered bytes in request order.
///
/// The reads were submitted by the gather call, or are being submitted by a preparing thread
/// (a large gather, see [`crate::prepare`]); polling only waits.
/// Dropping it cancels the remaining reads and leaves the in-flight ones to their owners (see the
/// module docs); the source stays fully usable.
///
/// # Errors
/// The first error of the job: [`Error::Io`] naming the row and offset, [`Error::ShortRead`]
/// naming the row, offset and file, [`Error::Panicked`] if a worker panicked,
/// [`Error::TimedOut`] if its deadline passed first, or [`Error::Abandoned`] if the backend shut
/// down.
#[must_use = "the reads run anyway; dropping the future discards their result"]
pub struct GatherFuture<T> {
    job: Option<Arc<GatherJob>>,
    /// The job's counters as it settled, kept once the job is taken.
    settled: GatherStats,
    finish: fn(Bytes, &GatherJob) -> T,
    /// What a future not backed by a job yields ([`ready`](Self::ready),
    /// [`from_future`](Self::from_future)).
    other: Other<T>,
    /// The deadline, and its registration with the watcher thread.
    deadline: Option<(Instant, Option<Ticket>)>,
}

/// The value of a [`GatherFuture`] that no job of this crate serves.
enum Other<T> {
    /// Backed by a job (or completed).
    None,
    /// Already at hand; taken by the first poll.
    Ready(Option<Result<T>>),
    /// Any future. The mutex is only ever reached through `&mut` (`get_mut`, no locking): it
    /// makes the `GatherFuture` `Sync` whatever the inner future is.
    Future(std::sync::Mutex<Pin<Box<dyn Future<Output = Result<T>> + Send>>>),
    /// Being prepared on another thread; the job arrives in the slot.
    Preparing(StdArc<Preparing>),
}

/// A gather handed to a preparing thread ([`crate::prepare`]): where that thread leaves the
/// submitted job, or the error, for the future to take, and the deadline that applies meanwhile.
struct Preparing {
    /// When the gather call began.
    started: Instant,
    /// For the error of a deadline that passes first.
    requests: u64,
    what: &'static str,
    path: StdArc<Path>,
    slot: std::sync::Mutex<Prepared>,
}

/// What a [`Preparing`] holds.
#[derive(Default)]
struct Prepared {
    /// The submitted job, with its deadline armed.
    job: Option<(Arc<GatherJob>, Armed)>,
    error: Option<Error>,
    waker: Option<Waker>,
    /// The gather's deadline: the source's timeout, or the one [`GatherFuture::with_deadline`]
    /// gave in its place. Armed on the job when it arrives.
    deadline: Option<Instant>,
    /// The deadline's registration with the watcher, which wakes the future when it passes.
    watch: Option<Ticket>,
    /// How the future ended before taking its job ([`Ending::DROPPED`], or
    /// [`Ending::TIMED_OUT`] when its deadline resolved it): the job is ended the same way, or
    /// never built if its preparation had not begun.
    abandoned: Option<u8>,
}

/// A deadline and its registration with the watcher thread.
type Armed = Option<(Instant, Option<Ticket>)>;

/// What [`Preparing::take`] found.
enum Taken {
    Job(Arc<GatherJob>, Armed),
    Failed(Error),
    /// Still being prepared, under this deadline.
    Waiting(Option<Instant>),
}

impl Preparing {
    /// A gather about to be handed to a preparing thread, under `deadline` (the source's
    /// timeout).
    fn new(
        started: Instant,
        requests: u64,
        what: &'static str,
        path: StdArc<Path>,
        deadline: Option<Instant>,
    ) -> StdArc<Preparing> {
        let p = StdArc::new(Preparing { started, requests, what, path, slot: Default::default() });
        p.watch(&mut p.slot(), deadline);
        p
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Prepared> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the deadline (replacing the one before) and has the watcher wake the future when it
    /// passes.
    fn watch(self: &StdArc<Self>, slot: &mut Prepared, deadline: Option<Instant>) {
        if let Some(ticket) = slot.watch.take() {
            crate::deadline::cancel(ticket);
        }
        slot.deadline = deadline;
        let target: std::sync::Weak<Preparing> = StdArc::downgrade(self);
        slot.watch = deadline.and_then(|at| watch(at, target));
    }

    /// Run by the preparing thread once the job is submitted (or preparing it failed): arms the
    /// deadline on the job and wakes the future.
    fn deliver(&self, result: Result<Arc<GatherJob>>) {
        let mut slot = self.slot();
        if let Some(ticket) = slot.watch.take() {
            crate::deadline::cancel(ticket);
        }
        if let Some(how) = slot.abandoned {
            drop(slot);
            if let Ok(job) = result {
                job.end(how);
            }
            return;
        }
        match result {
            Ok(job) => {
                let armed = slot.deadline.and_then(|at| arm(&job, at));
                slot.job = Some((job, armed));
            }
            Err(e) => slot.error = Some(e),
        }
        let waker = slot.waker.take();
        drop(slot);
        if let Some(w) = waker {
            wake(w);
        }
    }

    /// Takes the job or the error. If neither has arrived, keeps `waker` for the delivery,
    /// replaces the deadline with `deadline` if one is given, and returns the deadline.
    fn take(self: &StdArc<Self>, waker: Option<&Waker>, deadline: Option<Instant>) -> Taken {
        let mut slot = self.slot();
        if let Some((job, armed)) = slot.job.take() {
            return Taken::Job(job, armed);
        }
        if let Some(e) = slot.error.take() {
            return Taken::Failed(e);
        }
        if let Some(w) = waker {
            slot.waker = Some(w.clone());
        }
        if deadline.is_some() {
            self.watch(&mut slot, deadline);
        }
        Taken::Waiting(slot.deadline)
    }

    /// The future ended (`how`: dropped, or timed out) before taking its job: a job already
    /// delivered is ended so, and one still being prepared will be when it arrives.
    fn abandon(&self, how: u8) {
        let job = {
            let mut slot = self.slot();
            slot.abandoned = Some(how);
            if let Some(ticket) = slot.watch.take() {
                crate::deadline::cancel(ticket);
            }
            slot.job.take()
        };
        if let Some((job, armed)) = job {
            drop_job(&job, armed, how);
        }
    }

    /// How the future ended, if it did before taking its job.
    fn abandoned(&self) -> Option<u8> {
        self.slot().abandoned
    }

    /// The job's statistics if it has arrived, and whether polling would return at once.
    fn peek(&self) -> (Option<GatherStats>, bool) {
        let slot = self.slot();
        match &slot.job {
            Some((job, _)) => (Some(job.stats()), job.settled.load(Ordering::Acquire)),
            None => (None, slot.error.is_some()),
        }
    }

    /// The error of a deadline that passed before the job arrived: nothing was read.
    fn timed_out(&self, at: Instant) -> Error {
        Error::TimedOut {
            op: Op::Read,
            path: self.path.to_path_buf(),
            after: at.saturating_duration_since(self.started),
            unread: self.requests,
            requested: self.requests,
            what: self.what,
        }
    }
}

/// Ends a job whose future is gone (`how`: dropped or timed out), as dropping its future does.
fn drop_job(job: &GatherJob, armed: Armed, how: u8) {
    if let Some((_, Some(ticket))) = armed {
        crate::deadline::cancel(ticket);
    }
    job.end(how);
}

impl Expire for Preparing {
    /// The deadline passed while the gather was being prepared: wakes the future, whose poll
    /// resolves it with [`Error::TimedOut`].
    fn expire(&self) {
        let waker = self.slot().waker.take();
        if let Some(w) = waker {
            wake(w);
        }
    }
}

impl<T> fmt::Debug for GatherFuture<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let other = match &self.other {
            Other::None => "none",
            Other::Ready(_) => "ready",
            Other::Future(_) => "future",
            Other::Preparing(..) => "preparing",
        };
        f.debug_struct("GatherFuture").field("job", &self.job).field("other", &other).finish()
    }
}

impl<T> GatherFuture<T> {
    /// A future that yields `value` at once: for a gather served without I/O, such as a cache
    /// whose every row is a hit. Its [`stats`](Self::stats) are all zero.
    pub fn ready(value: Result<T>) -> GatherFuture<T> {
        GatherFuture {
            job: None,
            settled: GatherStats::default(),
            finish: unreachable_finish,
            other: Other::Ready(Some(value)),
            deadline: None,
        }
    }

    /// A gather future over any future: for implementations of [`Gather`] and [`GatherRows`]
    /// that compose others (a cache that forwards its misses to a source and merges the rows).
    /// The I/O should be started before this is called, as every backend's is: this wrapper only
    /// polls `fut`. Dropping the gather future drops `fut`. Its [`stats`](Self::stats) are zero.
    pub fn from_future(fut: impl Future<Output = Result<T>> + Send + 'static) -> GatherFuture<T> {
        GatherFuture {
            job: None,
            settled: GatherStats::default(),
            finish: unreachable_finish,
            other: Other::Future(std::sync::Mutex::new(Box::pin(fut))),
            deadline: None,
        }
    }

    /// Gives the gather a deadline: if it has not finished by `at`, its queued reads are dropped,
    /// its reads in flight are cancelled where the backend can, and the future resolves with
    /// [`Error::TimedOut`] at once (see the [module docs](self)). A deadline already past ends the
    /// gather now, on this thread. Replaces an earlier deadline. No effect on a gather already
    /// finished, or on a future not backed by a job ([`ready`](Self::ready),
    /// [`from_future`](Self::from_future)).
    ///
    /// A gather still being prepared on another thread ([`crate::prepare`]) gets its deadline
    /// armed when the preparation ends; a deadline that passes before that wakes the future,
    /// which resolves with [`Error::TimedOut`] counting every request unread, and the gather is
    /// not started (or its job is ended as it arrives).
    pub fn with_deadline(mut self, at: Instant) -> GatherFuture<T> {
        if let Other::Preparing(p) = &self.other {
            match p.clone().take(None, Some(at)) {
                Taken::Job(job, armed) => self.adopt(job, armed),
                Taken::Failed(e) => {
                    self.other = Other::Ready(Some(Err(e)));
                    return self;
                }
                Taken::Waiting(_) => return self,
            }
        }
        let Some(job) = self.job.clone() else { return self };
        if job.settled.load(Ordering::Acquire) {
            return self;
        }
        self.forget_deadline();
        self.deadline = arm(&job, at);
        self
    }

    /// [`with_deadline`](Self::with_deadline) at `timeout` after the gather call.
    pub fn with_timeout(self, timeout: Duration) -> GatherFuture<T> {
        let started = match (&self.job, &self.other) {
            (Some(job), _) => job.started,
            (None, Other::Preparing(p)) => p.started,
            (None, _) => return self,
        };
        self.with_deadline(started + timeout)
    }

    /// The gather's counters so far (final once the future has completed; all zero while it is
    /// being prepared).
    pub fn stats(&self) -> GatherStats {
        match (&self.job, &self.other) {
            (Some(j), _) => j.stats(),
            (None, Other::Preparing(p)) => p.peek().0.unwrap_or(self.settled),
            (None, _) => self.settled,
        }
    }

    /// Whether every party has finished and the statistics are final (polling would return at
    /// once). Always `false` for a [`from_future`](Self::from_future) gather not yet complete.
    pub fn is_settled(&self) -> bool {
        match (&self.job, &self.other) {
            (Some(j), _) => j.settled.load(Ordering::Acquire),
            (None, Other::Future(_)) => false,
            (None, Other::Preparing(p)) => p.peek().1,
            (None, _) => true,
        }
    }

    /// Takes the job a preparing thread delivered, with its armed deadline.
    fn adopt(&mut self, job: Arc<GatherJob>, armed: Armed) {
        self.other = Other::None;
        self.deadline = armed;
        self.job = Some(job);
    }
}

/// Sets `job`'s deadline and registers it with the watcher (or ends the job now if `at` is
/// past); nothing for a job already settled.
fn arm(job: &Arc<GatherJob>, at: Instant) -> Armed {
    if job.settled.load(Ordering::Acquire) {
        return None;
    }
    let after = at.saturating_duration_since(job.started);
    job.deadline_ns.store(u64::try_from(after.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    Some((at, register_deadline(job, at)))
}

fn unreachable_finish<T>(_: Bytes, _: &GatherJob) -> T {
    unreachable!("a gather future without a job has no output to finish")
}

impl<T> Unpin for GatherFuture<T> {}

impl<T> Future for GatherFuture<T> {
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Other::Preparing(p) = &self.other {
            let p = p.clone();
            match p.take(Some(cx.waker()), None) {
                Taken::Job(job, armed) => self.adopt(job, armed),
                Taken::Failed(e) => {
                    self.other = Other::Ready(None);
                    return Poll::Ready(Err(e));
                }
                Taken::Waiting(at) => {
                    // The watcher wakes this future when `at` passes.
                    let Some(at) = at.filter(|&at| Instant::now() >= at) else { return Poll::Pending };
                    p.abandon(Ending::TIMED_OUT);
                    self.other = Other::Ready(None);
                    return Poll::Ready(Err(p.timed_out(at)));
                }
            }
        }
        let Some(job) = self.job.as_ref() else {
            return match &mut self.other {
                Other::Ready(value) => Poll::Ready(value.take().expect("GatherFuture polled after completion")),
                Other::Future(fut) => {
                    let fut = fut.get_mut().unwrap_or_else(|p| p.into_inner());
                    let out = fut.as_mut().poll(cx);
                    if out.is_ready() {
                        self.other = Other::Ready(None);
                    }
                    out
                }
                Other::None | Other::Preparing(..) => panic!("GatherFuture polled after completion"),
            };
        };
        if !job.settled.load(Ordering::Acquire) {
            if self.deadline.is_some_and(|(at, _)| Instant::now() >= at) {
                job.expire();
            }
            *lock(&job.waker) = Some(cx.waker().clone());
            if !job.settled.load(Ordering::Acquire) {
                // Timed out with reads in flight: they own the output until they complete, and
                // the future resolves without it.
                let Some(timed_out) = job.timed_out() else { return Poll::Pending };
                self.settled = job.stats();
                self.job = None;
                self.forget_deadline();
                return Poll::Ready(Err(timed_out));
            }
        }
        let job = self.job.take().expect("checked above");
        self.forget_deadline();
        self.settled = job.stats();
        let finish = self.finish;
        Poll::Ready(job.take_output().map(|b| finish(b, &job)))
    }
}

impl<T> GatherFuture<T> {
    fn forget_deadline(&mut self) {
        if let Some((_, Some(ticket))) = self.deadline.take() {
            crate::deadline::cancel(ticket);
        }
    }
}

/// Registers `job` with the deadline watcher, or ends it now if `at` is past.
fn register_deadline(job: &Arc<GatherJob>, at: Instant) -> Option<Ticket> {
    if at <= Instant::now() {
        job.expire();
        return None;
    }
    #[cfg(not(eagerio_loom))]
    {
        let weak: std::sync::Weak<GatherJob> = Arc::downgrade(job);
        watch(at, weak)
    }
    #[cfg(eagerio_loom)]
    None
}

/// Has the deadline watcher call `target`'s [`Expire::expire`] at `at` (at once if it is past).
/// Under loom there is no watcher: models set deadlines that are already past.
fn watch(at: Instant, target: std::sync::Weak<dyn Expire>) -> Option<Ticket> {
    #[cfg(not(eagerio_loom))]
    return Some(crate::deadline::register(at, target));
    #[cfg(eagerio_loom)]
    {
        let _ = (at, target);
        None
    }
}

impl<T> Drop for GatherFuture<T> {
    fn drop(&mut self) {
        self.forget_deadline();
        if let Some(job) = &self.job {
            job.end(Ending::DROPPED);
        }
        if let Other::Preparing(p) = &self.other {
            p.abandon(Ending::DROPPED);
        }
    }
}

fn whole(b: Bytes, _: &GatherJob) -> Bytes {
    b
}

fn split(b: Bytes, job: &GatherJob) -> Vec<Bytes> {
    let mut at = 0usize;
    job.requests
        .iter()
        .map(|&(_, len)| {
            let s = b.slice(at..at + len as usize);
            at += len as usize;
            s
        })
        .collect()
}

/// A file served by a [`ReadEngine`], gathered by byte ranges.
#[derive(Debug, Clone)]
pub struct Source<E> {
    engine: E,
    opts: PlanOptions,
    stats: StdArc<SourceStats>,
    residency: Option<StdArc<Residency>>,
    timeout: Option<Duration>,
}

/// Default read-amplification bound: two extents closer than this are read as one.
pub const DEFAULT_MAX_GAP: u64 = 4096;

impl<E: ReadEngine> Source<E> {
    /// Wraps an engine, with the default gap bound.
    pub fn new(engine: E) -> Source<E> {
        let info = engine.info();
        let opts = PlanOptions { max_gap: DEFAULT_MAX_GAP, align: info.align.max(1), max_read: info.max_read };
        let stats = StdArc::new(SourceStats::new(&info.path));
        Source { engine, opts, stats, residency: None, timeout: None }
    }

    /// Turns on the adaptive mode: extents whose pages are resident in the page cache are
    /// copied from a read-only mapping of the file while the gather is started (in the call, or
    /// on a preparing thread for a large gather), and only the misses
    /// go to the engine (see [`residency`](crate::residency)). Counted in
    /// [`GatherStats::resident`].
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be opened or mapped.
    pub fn adaptive(mut self) -> Result<Source<E>> {
        self.enable_adaptive()?;
        Ok(self)
    }

    /// [`adaptive`](Self::adaptive) in place; on error the source is unchanged.
    ///
    /// # Errors
    /// As [`adaptive`](Self::adaptive).
    pub fn enable_adaptive(&mut self) -> Result<()> {
        let info = self.engine.info();
        let io = |source| Error::open(&info.path, source);
        let file = std::fs::File::open(&info.path).map_err(io)?;
        self.residency = Some(StdArc::new(Residency::map(&file, info.len).map_err(io)?));
        Ok(())
    }

    /// Adaptive mode: drops the source mapping's page-table entries so that evicting the file
    /// (`posix_fadvise(DONTNEED)`, `drop_caches`) takes every page (see
    /// [`residency`](crate::residency)). Nothing to do otherwise.
    pub fn unmap_resident(&self) {
        if let Some(r) = &self.residency {
            r.unmap_pages();
        }
    }

    /// Whether the adaptive mode is on.
    pub fn is_adaptive(&self) -> bool {
        self.residency.is_some()
    }

    /// Sets the largest hole read to join two extents (the read-amplification bound).
    pub fn with_max_gap(mut self, max_gap: u64) -> Source<E> {
        self.opts.max_gap = max_gap;
        self
    }

    /// Gives every gather of this source a deadline `timeout` after its call
    /// ([`GatherFuture::with_timeout`]); a gather still running then resolves with
    /// [`Error::TimedOut`]. A gather's own [`with_deadline`](GatherFuture::with_deadline)
    /// replaces it.
    pub fn with_timeout(mut self, timeout: Duration) -> Source<E> {
        self.timeout = Some(timeout);
        self
    }

    /// A table of fixed-size rows over this source.
    ///
    /// # Errors
    /// As [`RowTable::new`].
    pub fn rows(self, layout: RowLayout) -> Result<RowTable<E>> {
        RowTable::new(self, layout)
    }

    /// The plan options the next gather is planned with: the source's, with the engine's
    /// measured gap bound where it gives one ([`ReadEngine::max_gap`]).
    pub fn plan_options(&self) -> PlanOptions {
        match self.engine.max_gap() {
            Some(max_gap) => PlanOptions { max_gap, ..self.opts },
            None => self.opts,
        }
    }

    /// The engine.
    pub fn engine(&self) -> &E {
        &self.engine
    }

    /// The file.
    pub fn info(&self) -> &FileInfo {
        self.engine.info()
    }

    /// Totals over every gather of this source.
    pub fn stats(&self) -> SourceTotals {
        self.stats.snapshot()
    }

    /// This source's latency histograms: time in the gather call, queued before the first read,
    /// per read, and per gather.
    pub fn latencies(&self) -> SourceLatencies {
        self.stats.latencies()
    }

    /// Gathers byte ranges; the future yields one `Bytes` per range, in request order.
    ///
    /// The reads are submitted before this returns, or at once by a preparing thread (see the
    /// [module docs](self)).
    ///
    /// # Errors
    /// Before any I/O: [`Error::InvalidRange`] for an empty or inverted range or one past the
    /// file's length (as it was at open).
    pub fn gather_ranges(&self, ranges: &[Range<u64>]) -> Result<GatherFuture<Vec<Bytes>>> {
        self.gather_ranges_into(ranges, BytesMut::new())
    }

    /// [`gather_ranges`](Self::gather_ranges) into a caller's buffer, reused when its capacity
    /// suffices (recover it from a result with `Bytes::try_into_mut`).
    ///
    /// # Errors
    /// As [`gather_ranges`](Self::gather_ranges).
    pub fn gather_ranges_into(&self, ranges: &[Range<u64>], out: BytesMut) -> Result<GatherFuture<Vec<Bytes>>> {
        let info = self.engine.info();
        let mut requests = Vec::with_capacity(ranges.len());
        for (index, r) in ranges.iter().enumerate() {
            let reason = if r.start > r.end {
                Some("the range is inverted")
            } else if r.start == r.end {
                Some("the range is empty")
            } else if r.end > info.len {
                Some("the range ends past the end of the file")
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(Error::InvalidRange { index, start: r.start, end: r.end, reason, path: info.path.clone() });
            }
            requests.push((r.start, r.end - r.start));
        }
        self.submit(requests, Targets::Ranges, out, split)
    }

    /// Starts a gather of `requests`: in this call, or, for a large one on an engine that takes
    /// jobs from any thread, on a preparing thread after checking the requests here.
    fn submit<T>(
        &self,
        requests: Vec<(u64, u64)>,
        targets: Targets,
        out: BytesMut,
        finish: fn(Bytes, &GatherJob) -> T,
    ) -> Result<GatherFuture<T>> {
        let started = Instant::now();
        let start = Start {
            opts: self.plan_options(),
            residency: self.residency.clone(),
            stats: self.stats.clone(),
            path: StdArc::from(self.engine.info().path.as_path()),
            span: tracing::Span::current(),
            elsewhere: false,
        };
        let deadline = self.timeout.map(|t| started + t);
        let remote = (requests.len() >= crate::prepare::PREPARE_ELSEWHERE).then(|| self.engine.remote()).flatten();
        let Some(remote) = remote else {
            // The job records its submit time as the call's when it settles.
            let job = start.run(requests, targets, out, started, |h| self.engine.submit(h))?;
            let deadline = deadline.and_then(|at| arm(&job, at));
            return Ok(GatherFuture {
                job: Some(job),
                settled: GatherStats::default(),
                finish,
                other: Other::None,
                deadline,
            });
        };
        Plan::check(&requests, &start.opts)?;
        let start = Start { elsewhere: true, ..start };
        let preparing = Preparing::new(started, requests.len() as u64, targets.what(), start.path.clone(), deadline);
        let slot = preparing.clone();
        crate::prepare::run(Box::new(move || {
            if let Some(how) = slot.abandoned() {
                // The future is gone already: nothing to plan or read.
                let stats = GatherStats { requested: requests.len() as u64, ..GatherStats::default() };
                start.stats.record(&stats, how == Ending::TIMED_OUT);
                return;
            }
            let path = start.path.clone();
            let run = std::panic::AssertUnwindSafe(|| start.run(requests, targets, out, started, |h| remote(h)));
            let result = std::panic::catch_unwind(run).unwrap_or_else(|payload| {
                Err(Error::Panicked {
                    op: Op::Read,
                    path: path.to_path_buf(),
                    offset: None,
                    target: None,
                    message: crate::error::panic_message(&*payload),
                })
            });
            slot.deliver(result);
        }));
        self.stats.record_call(started.elapsed());
        Ok(GatherFuture {
            job: None,
            settled: GatherStats::default(),
            finish,
            other: Other::Preparing(preparing),
            deadline: None,
        })
    }
}

/// What starting a gather needs from its source, apart from the engine: sent to a preparing
/// thread for a large gather.
struct Start {
    opts: PlanOptions,
    residency: Option<StdArc<Residency>>,
    stats: StdArc<SourceStats>,
    path: StdArc<Path>,
    /// The caller's span, the parent of the gather's (also on a preparing thread).
    span: tracing::Span,
    /// On a preparing thread, not in the call.
    elsewhere: bool,
}

impl Start {
    /// Plans the gather, copies its page-cache-resident pieces (adaptive mode), builds the job,
    /// and hands it to `submit` unless the cache served it all.
    fn run(
        self,
        requests: Vec<(u64, u64)>,
        targets: Targets,
        mut out: BytesMut,
        started: Instant,
        submit: impl FnOnce(JobHandle),
    ) -> Result<Arc<GatherJob>> {
        let (plan, copied) = match self.copy_mapped(&requests, &mut out)? {
            Some(copied) => copied,
            None => {
                let plan = Plan::new(&requests, &self.opts)?;
                self.reserve(&mut out, plan.out_len());
                (plan, Served::default())
            }
        };
        let out_ptr = OutPtr(out.as_mut_ptr());
        let (order, done, resident, faults) = self.serve_resident(&plan, out_ptr.0, copied);
        let extent_states = extent_states(plan.extents().len(), order.as_deref());
        let span = tracing::debug_span!(parent: &self.span, "gather", path = %self.path.display(), rows = requests.len(),
            extents = plan.extents().len(), bytes = plan.out_len(), resident);
        let claimed_at = (0..plan.extents().len()).map(|_| std::sync::atomic::AtomicU32::new(0)).collect();
        let job = Arc::new(GatherJob {
            plan,
            requests,
            targets,
            path: self.path,
            out: UnsafeCell::new(out),
            out_ptr,
            next: AtomicUsize::new(0),
            order,
            extent_states,
            completed: AtomicUsize::new(done),
            parties: AtomicUsize::new(1),
            settled: AtomicBool::new(false),
            ending: AtomicU8::new(Ending::LIVE),
            cancellers: Mutex::new(Vec::new()),
            deadline_ns: AtomicU64::new(u64::MAX),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            waker: Mutex::new(None),
            reads_issued: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            resident: AtomicU64::new(resident),
            resident_faults: AtomicU64::new(faults),
            started,
            submit_ns: AtomicU64::new(0),
            wait_ns: AtomicU64::new(0),
            source_stats: Some(self.stats),
            prepared_elsewhere: self.elsewhere,
            claimed_at,
            handed_off_ns: std::sync::atomic::AtomicU64::new(0),
            first_claim_ns: std::sync::atomic::AtomicU64::new(u64::MAX),
            span,
        });
        let handle = JobHandle { job: job.clone() };
        job.span.in_scope(|| {
            if done < job.plan.extents().len() {
                job.handed_off_ns.store(job.now_ns(), std::sync::atomic::Ordering::Relaxed);
                submit(handle.clone());
            }
        });
        job.submit_ns.store(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        drop(handle);
        Ok(job)
    }

    /// Makes `out` empty with room for `len` bytes.
    fn reserve(&self, out: &mut BytesMut, len: u64) {
        out.clear();
        out.reserve(len as usize);
        if !self.elsewhere {
            // Not on a preparing thread: there the huge pages a caller's thread freed sit in that
            // CPU's free lists, and faulting fresh ones in made warm 4 KiB gathers 1.3-4x slower
            // (the kernel compacts memory to find them), where 4 KiB pages cost nothing extra.
            crate::sys::huge_pages(out.as_mut_ptr(), out.capacity());
        }
    }

    /// Adaptive mode, before planning: copies the requests whose every byte lies on a page the
    /// source's mapping already maps (a warm table's rows asked for again) to `out` in request
    /// order, as a loop over an mmap would, and plans only the others. Returns that plan and
    /// what the copy served. `None` sends the whole gather to the planner: no mapping, mostly
    /// requests not mapped, or a file cut during the copy.
    fn copy_mapped(&self, requests: &[(u64, u64)], out: &mut BytesMut) -> Result<Option<(Plan, Served)>> {
        let Some(r) = &self.residency else { return Ok(None) };
        if !self.elsewhere {
            // On a preparing thread the call checked them already.
            Plan::check(requests, &self.opts)?;
        }
        let Some((len, missing)) = r.split_mapped(requests) else { return Ok(None) };
        self.reserve(out, len);
        // SAFETY: `out` has room for the requests' total length, reserved above, and no party
        // exists yet, so nothing else touches it; `split_mapped` checked that every request not
        // missing ends within the file, which lies within the mapping.
        let Some(copied) = (unsafe { r.copy_in_order(requests, &missing, out.as_mut_ptr()) }) else { return Ok(None) };
        Ok(Some((Plan::missing(requests, &missing, len, &self.opts), copied)))
    }

    /// Adaptive mode: copies the resident extents' pieces to `out` and returns the extents left
    /// for the engine, how many were served, and the rows served and the faults taken, counting
    /// those of the rows `copied` before planning.
    fn serve_resident(&self, plan: &Plan, out: *mut u8, copied: Served) -> (Option<Vec<u32>>, usize, u64, u64) {
        let Some(r) = self.residency.as_ref().filter(|_| !plan.extents().is_empty()) else {
            return (None, 0, copied.rows, copied.faults);
        };
        // SAFETY: `out` has room for the plan's output (reserved by the caller) and no party
        // exists yet, so nothing else touches it.
        let served = unsafe { r.serve(plan, out) }.and(copied);
        let misses = (served.extents > 0)
            .then(|| (0..plan.extents().len() as u32).filter(|&i| !served.resident[i as usize]).collect());
        (misses, served.extents, served.rows, served.faults)
    }
}

/// The starting state of every extent: all `UNCLAIMED`, except those served from the page cache
/// (every extent not in `misses`), which start `DONE`.
fn extent_states(extents: usize, misses: Option<&[u32]>) -> Box<[AtomicU8]> {
    let start = if misses.is_some() { ExtentState::DONE } else { ExtentState::UNCLAIMED };
    let states: Box<[AtomicU8]> = (0..extents).map(|_| AtomicU8::new(start)).collect();
    for &i in misses.unwrap_or(&[]) {
        states[i as usize].store(ExtentState::UNCLAIMED, Ordering::Relaxed);
    }
    states
}

/// The layout of a table of fixed-size rows in a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowLayout {
    /// File offset of row 0.
    pub base: u64,
    /// Bytes per row.
    pub row_size: u64,
    /// Row count; `None` takes as many whole rows as the file holds after `base`.
    pub rows: Option<u64>,
}

/// A table of fixed-size rows, gathered by row id.
#[derive(Debug, Clone)]
pub struct RowTable<E> {
    source: Source<E>,
    base: u64,
    row_size: u64,
    rows: u64,
}

impl<E: ReadEngine> RowTable<E> {
    /// A row table over `source`.
    ///
    /// # Errors
    /// [`Error::InvalidOptions`] for a zero row size or a row count whose rows would end past
    /// `u64::MAX`. A row count larger than the file allows is accepted (the file may grow); reads
    /// past its end are short reads.
    pub fn new(source: Source<E>, layout: RowLayout) -> Result<RowTable<E>> {
        if layout.row_size == 0 {
            return Err(Error::invalid_option("row_size", "rows must have at least one byte"));
        }
        if layout.row_size > source.opts.max_read.max(1 << 30) {
            return Err(Error::invalid_option("row_size", format!("{} bytes is larger than 1 GiB", layout.row_size)));
        }
        let len = source.info().len;
        let rows = layout.rows.unwrap_or(len.saturating_sub(layout.base) / layout.row_size);
        if rows.checked_mul(layout.row_size).and_then(|b| b.checked_add(layout.base)).is_none() {
            return Err(Error::invalid_option("rows", format!("{rows} rows of {} bytes overflow", layout.row_size)));
        }
        Ok(RowTable { source, base: layout.base, row_size: layout.row_size, rows })
    }

    /// Gives every gather of this table a deadline `timeout` after its call
    /// ([`Source::with_timeout`]).
    pub fn with_timeout(mut self, timeout: Duration) -> RowTable<E> {
        self.source = self.source.with_timeout(timeout);
        self
    }

    /// The source underneath.
    pub fn source(&self) -> &Source<E> {
        &self.source
    }

    /// Row count.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Bytes per row.
    pub fn row_size(&self) -> u64 {
        self.row_size
    }

    /// Totals over every gather of this table's source.
    pub fn stats(&self) -> SourceTotals {
        self.source.stats()
    }

    /// The latency histograms of this table's source ([`Source::latencies`]).
    pub fn latencies(&self) -> SourceLatencies {
        self.source.latencies()
    }

    /// Gathers `rows` (any order, duplicates allowed); the future yields one `Bytes` holding the
    /// rows back to back in request order.
    ///
    /// The reads are submitted before this returns, or at once by a preparing thread; see the
    /// [module docs](self) for what that costs the caller and what dropping the future does.
    ///
    /// # Errors
    /// Before any I/O: [`Error::RowOutOfRange`] naming the first row past the end and the row
    /// count.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn f<E: eagerio_core::backend::ReadEngine>(table: eagerio_core::RowTable<E>) -> eagerio_core::Result<()> {
    /// let bytes = table.gather(&[7, 3, 7])?.await?;
    /// assert_eq!(bytes.len() as u64, 3 * table.row_size());
    /// # Ok(()) }
    /// ```
    pub fn gather(&self, rows: &[u64]) -> Result<GatherFuture<Bytes>> {
        self.gather_into(rows, BytesMut::new())
    }

    /// [`gather`](Self::gather) into a caller's buffer, reused when its capacity suffices
    /// (recover it from a result with `Bytes::try_into_mut`).
    ///
    /// # Errors
    /// As [`gather`](Self::gather).
    pub fn gather_into(&self, rows: &[u64], out: BytesMut) -> Result<GatherFuture<Bytes>> {
        let mut requests = Vec::with_capacity(rows.len());
        for &row in rows {
            if row >= self.rows {
                return Err(Error::RowOutOfRange { row, rows: self.rows, path: self.source.info().path.clone() });
            }
            requests.push((self.base + row * self.row_size, self.row_size));
        }
        self.source.submit(requests, Targets::Rows(rows.to_vec()), out, whole)
    }
}

/// Byte ranges of one file or object, gathered eagerly: the face every backend's sources show
/// users. Object-safe: choose a backend at run time and hold an `Arc<dyn Gather + Send + Sync>`.
///
/// Implemented by every [`Source`] and [`RowTable`]. An implementation of your own (a cache, a
/// router over shards) starts its I/O in [`gather_ranges`](Self::gather_ranges), before it
/// returns, and answers with [`GatherFuture::ready`] or [`GatherFuture::from_future`].
pub trait Gather {
    /// Starts reading `ranges`; the future yields one `Bytes` per range, in request order.
    ///
    /// # Errors
    /// Before any I/O: [`Error::InvalidRange`] for an empty or inverted range or one past the
    /// end.
    fn gather_ranges(&self, ranges: &[Range<u64>]) -> Result<GatherFuture<Vec<Bytes>>>;

    /// The file or object: its name in errors and its length.
    fn info(&self) -> &FileInfo;

    /// Totals over every gather so far.
    fn totals(&self) -> SourceTotals;

    /// Latency histograms so far (empty unless the implementation keeps them).
    fn latencies(&self) -> SourceLatencies {
        SourceLatencies::default()
    }
}

/// A table of fixed-size rows, gathered eagerly by row id: the row face of [`Gather`].
/// Object-safe: `Arc<dyn GatherRows + Send + Sync>`.
///
/// Implemented by every [`RowTable`]. An implementation of your own starts its I/O in
/// [`gather`](Self::gather), before it returns.
pub trait GatherRows {
    /// Starts reading `rows` (any order, duplicates allowed); the future yields them back to
    /// back in request order.
    ///
    /// # Errors
    /// Before any I/O: [`Error::RowOutOfRange`] naming the first row past the end.
    fn gather(&self, rows: &[u64]) -> Result<GatherFuture<Bytes>>;

    /// Bytes per row.
    fn row_size(&self) -> u64;

    /// Row count.
    fn rows(&self) -> u64;

    /// Totals over every gather so far.
    fn totals(&self) -> SourceTotals;

    /// Latency histograms so far (empty unless the implementation keeps them).
    fn latencies(&self) -> SourceLatencies {
        SourceLatencies::default()
    }
}

impl<E: ReadEngine> Gather for Source<E> {
    fn gather_ranges(&self, ranges: &[Range<u64>]) -> Result<GatherFuture<Vec<Bytes>>> {
        Source::gather_ranges(self, ranges)
    }

    fn info(&self) -> &FileInfo {
        Source::info(self)
    }

    fn totals(&self) -> SourceTotals {
        self.stats()
    }

    fn latencies(&self) -> SourceLatencies {
        Self::latencies(self)
    }
}

impl<E: ReadEngine> Gather for RowTable<E> {
    fn gather_ranges(&self, ranges: &[Range<u64>]) -> Result<GatherFuture<Vec<Bytes>>> {
        self.source.gather_ranges(ranges)
    }

    fn info(&self) -> &FileInfo {
        self.source.info()
    }

    fn totals(&self) -> SourceTotals {
        self.stats()
    }

    fn latencies(&self) -> SourceLatencies {
        Self::latencies(self)
    }
}

impl<E: ReadEngine> GatherRows for RowTable<E> {
    fn gather(&self, rows: &[u64]) -> Result<GatherFuture<Bytes>> {
        RowTable::gather(self, rows)
    }

    fn row_size(&self) -> u64 {
        self.row_size
    }

    fn rows(&self) -> u64 {
        self.rows
    }

    fn totals(&self) -> SourceTotals {
        self.stats()
    }

    fn latencies(&self) -> SourceLatencies {
        Self::latencies(self)
    }
}
