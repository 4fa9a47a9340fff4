//! The in-flight ledger of one gather: what a job owns, how its extents move from claimed to
//! done, who may still touch its output, and when it settles.
//!
//! # The invariant, kept here and only here
//! A buffer that the kernel or a worker still owns is never reused or freed. The job's output
//! buffer belongs to the job, not to the future; every party that may still write into it holds
//! a [`JobHandle`], and the job settles only when the last handle is dropped. A party drops its
//! handle only once its reads have completed ([`JobClaims::is_drained`](super::JobClaims::is_drained)), and keeps each staging
//! slot's lease until the read into it has completed, so ending a job early (a dropped future, a
//! deadline, an error, a panic) stops new claims but never takes a buffer from a read in
//! flight. Extents move forward only (`UNCLAIMED -> CLAIMED -> DONE`, or `-> FAILED`), each
//! counts once, and the future reads the output only after it sees the job settled.
//! `tests/loom_ledger.rs` model-checks it under `--cfg eagerio_loom`; every atomic and lock here
//! comes from the loom shim for that reason.
//!
//! This file may touch the plan, the statistics, the deadline watcher's [`Expire`] and the loom
//! shim; it knows nothing of sources, residency or preparing threads.

use std::{
    fmt,
    path::Path,
    sync::Arc as StdArc,
    task::Waker,
    time::{Duration, Instant},
};

use bytes::{Bytes, BytesMut};

use crate::deadline::Expire;
use crate::error::{Error, Op, Result, Target};
use crate::loom::{lock, wake, Arc, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Mutex, Ordering, UnsafeCell};
use crate::plan::Plan;
use crate::stats::{GatherStats, SourceStats};
use crate::tune::{DevicePrice, GapTuner, MIN_FIT_READS};

use super::landing::Landing;
use super::pool::{OutputPool, Owned};

/// What a job's requests are: rows (their ids, for errors) or byte ranges.
#[derive(Debug)]
pub(super) enum Targets {
    Rows(Vec<u64>),
    Ranges,
}

impl Targets {
    /// What the requests are, in errors.
    pub(super) fn what(&self) -> &'static str {
        match self {
            Targets::Rows(_) => "rows",
            Targets::Ranges => "ranges",
        }
    }

    /// The targets of the requests from `at` on, leaving those before it.
    pub(super) fn split_off(&mut self, at: usize) -> Targets {
        match self {
            Targets::Rows(rows) => Targets::Rows(rows.split_off(at)),
            Targets::Ranges => Targets::Ranges,
        }
    }
}

#[derive(Clone, Copy)]
struct OutPtr(*mut u8);

// SAFETY: the pointer targets the job's output buffer, which lives as long as the job (and, for a
// streamed job, as long as any view of it). Parties write disjoint piece ranges through it
// (planner invariant); the future reads the buffer only after every party is gone (Acquire on
// `parties`), and a stream's view reads only a request whose pieces were all written and are
// never written again (the landing's `AcqRel` count), so sharing it across threads is sound.
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
pub(super) struct Ending;

impl Ending {
    const LIVE: u8 = 0;
    /// The future was dropped.
    pub(super) const DROPPED: u8 = 1;
    /// The deadline passed; the future resolves with [`Error::TimedOut`].
    pub(super) const TIMED_OUT: u8 = 2;
}

/// Run when a job ends early, by [`JobHandle::on_cancel`].
type Canceller = Box<dyn FnOnce() + Send>;

/// The shared state of one gather: the plan, the output, the progress and the first error.
pub struct GatherJob {
    plan: Plan,
    pub(super) requests: Vec<(u64, u64)>,
    targets: Targets,
    path: StdArc<Path>,
    out: UnsafeCell<BytesMut>,
    out_ptr: OutPtr,
    /// A streamed job's output (then `out` is empty), shared with the views it yields.
    streamed_out: Option<StdArc<Owned>>,
    next: AtomicUsize,
    /// The extents left for the engine when some were served resident (adaptive mode).
    order: Option<Vec<u32>>,
    /// Per extent, its [`ExtentState`]: an extent's bytes count only if it was claimed and then
    /// completed exactly once.
    extent_states: Box<[AtomicU8]>,
    completed: AtomicUsize,
    parties: AtomicUsize,
    /// Set by the last party after the statistics are final; the future waits for this.
    pub(super) settled: AtomicBool,
    /// An [`Ending`]: whether the future still waits.
    ending: AtomicU8,
    /// What to run when the job ends early (dropped unrun with the job).
    cancellers: Mutex<Vec<Canceller>>,
    /// The deadline, in ns since `started` (`u64::MAX`: none), for [`Error::TimedOut`].
    pub(super) deadline_ns: AtomicU64,
    failed: AtomicBool,
    error: Mutex<Option<Error>>,
    pub(super) waker: Mutex<Option<Waker>>,
    reads_issued: AtomicU64,
    bytes_read: AtomicU64,
    resident: AtomicU64,
    resident_faults: AtomicU64,
    pub(super) started: Instant,
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
    /// A streamed gather's account of which requests have every byte in the output.
    landing: Option<Landing>,
    /// The gap the plan was made with, and the tuner the job's time goes to.
    tuning: Tuning,
    /// Where the output goes back to: when the result's last `Bytes` drops, or with the job if
    /// no future took it.
    pool: Option<StdArc<OutputPool>>,
}

// SAFETY: the only non-`Sync` field is `out`, whose cell is accessed once, by the future, after
// every party is gone (Acquire on `parties`), or by `Drop`; parties write the buffer through
// `out_ptr` at disjoint offsets, and a streamed job's views read only requests that landed,
// which no party writes again (see `OutPtr`).
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

    pub(super) fn stats(&self) -> GatherStats {
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
            gap: self.tuning.gap,
            price: self.tuning.price,
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
        self.tune();
        // Release: a future that sees `settled` sees the final statistics and every party's
        // writes to the output (each party's drop was AcqRel on `parties`, before this).
        self.settled.store(true, Ordering::Release);
        let waker = lock(&self.waker).take();
        if let Some(w) = waker {
            wake(w);
        }
    }

    /// Gives a tuned source's device tuner this job's reads, bytes and wait, when it is a
    /// measure of the device's price: whole (not failed, dropped or timed out), cold (no piece
    /// from the page cache) and at least [`MIN_FIT_READS`] reads (see [`crate::tune`]).
    fn tune(&self) {
        let Some(tuner) = &self.tuning.tuner else { return };
        let whole = !self.failed.load(Ordering::Acquire) && self.ending.load(Ordering::Acquire) == Ending::LIVE;
        let s = self.stats();
        if whole && s.resident == 0 && s.reads_issued >= MIN_FIT_READS {
            tuner.record(s.reads_issued, s.bytes_read, s.wait);
        }
    }

    /// Ends the job early (`how` is [`Ending::DROPPED`] or [`Ending::TIMED_OUT`]): no further
    /// extent is claimed, and the backend's cancellers run. Whether this call ended it.
    pub(super) fn end(&self, how: u8) -> bool {
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
    pub(super) fn timed_out(&self) -> Option<Error> {
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

    /// Why a settled job did not read every extent, if it did not: the deadline, its first
    /// error, or [`Error::Abandoned`] for extents no party read (a backend that shut down).
    pub(super) fn failure(&self) -> Option<Error> {
        // A read cancelled at the deadline fails with `ECANCELED`: the deadline is the cause.
        if let Some(e) = self.timed_out() {
            return Some(e);
        }
        if let Some(e) = lock(&self.error).take() {
            return Some(e);
        }
        // `completed` counts extents moved CLAIMED -> DONE (or served resident), each once.
        (self.completed.load(Ordering::Acquire) != self.plan.extents().len())
            .then(|| Error::Abandoned { op: Op::Read, path: self.path.to_path_buf() })
    }

    pub(super) fn take_output(&self) -> Result<Bytes> {
        // A streamed job's output is owned apart (`streamed_out`); `out` is empty.
        assert!(self.landing.is_none(), "a streamed job's output is never taken");
        if let Some(e) = self.failure() {
            return Err(e);
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
            let out = std::mem::take(out);
            Ok(match &self.pool {
                Some(pool) => pool.wrap(out),
                None => out.freeze(),
            })
        })
    }

    /// A streamed job's next request whose every byte is in the output, as its index and its
    /// bytes: a view of the output, not a copy (it keeps the output, and nothing else of the job,
    /// alive); `None` if none is waiting, and then the next landing wakes `waker`. Always `None`
    /// for a job that is not streamed.
    pub(super) fn next_landed(&self, waker: &Waker) -> Option<(usize, Bytes)> {
        let (r, start) = self.landing.as_ref()?.next(waker)?;
        let out = self.streamed_out.clone().expect("a streamed job owns its output apart");
        // SAFETY: `start + len <= out_len`, within the capacity reserved at creation.
        let at = OutPtr(unsafe { self.out_ptr.0.add(start as usize) });
        Some((r, Bytes::from_owner(OutputView { _out: out, at, len: self.requests[r].1 as usize })))
    }
}

impl Drop for GatherJob {
    /// Every party is gone: an output no future took (a failed or dropped gather) goes back to
    /// the pool, if the source has one.
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            // SAFETY: `&mut self`: nothing else holds the job, and no party is left to write.
            pool.give_back(self.out.with_mut(|out| unsafe { std::mem::take(&mut *out) }));
        }
    }
}

/// The bytes of one request a streamed job yielded, in its output.
struct OutputView {
    _out: StdArc<Owned>,
    at: OutPtr,
    len: usize,
}

impl AsRef<[u8]> for OutputView {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the request was queued once its last piece was copied to the output (or
        // before the job existed, for a request the page cache served), and the `AcqRel` count
        // and the queue's lock order every one of those copies before this read. No party
        // writes these bytes again: each extent completes once, and no two pieces of a plan
        // share an output byte, so the copies of reads still in flight never touch them. The
        // buffer is neither moved nor freed while `_out` lives (its `BytesMut` keeps length 0:
        // nothing else makes a reference to its bytes).
        unsafe { std::slice::from_raw_parts(self.at.0, self.len) }
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
        if let Some(landing) = &job.landing {
            landing.landed(job.plan.pieces(extent));
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

/// What a job is built from: the plan, the output buffer (the pieces the page cache served
/// already copied in), and where its statistics go.
pub(super) struct NewJob {
    pub(super) plan: Plan,
    pub(super) requests: Vec<(u64, u64)>,
    pub(super) targets: Targets,
    pub(super) path: StdArc<Path>,
    pub(super) out: BytesMut,
    /// The extents left for the engine, when the page cache served the others.
    pub(super) order: Option<Vec<u32>>,
    /// Extents served from the page cache, and the rows and page faults that took.
    pub(super) done: usize,
    pub(super) resident: u64,
    pub(super) faults: u64,
    pub(super) started: Instant,
    pub(super) stats: StdArc<SourceStats>,
    /// Built on a preparing thread, not in the gather call.
    pub(super) elsewhere: bool,
    /// Yields each request as it lands ([`GatherStream`](super::GatherStream)).
    pub(super) streamed: bool,
    pub(super) span: tracing::Span,
    pub(super) tuning: Tuning,
    /// Where the output goes back to when its last `Bytes` drops.
    pub(super) pool: Option<StdArc<OutputPool>>,
}

/// How a job's plan was tuned: the gap it was planned with and the device's price then; a tuned
/// source's job also carries the device's tuner, which its time goes to when it settles.
#[derive(Debug, Clone, Default)]
pub(super) struct Tuning {
    pub(super) gap: u64,
    pub(super) price: Option<DevicePrice>,
    pub(super) tuner: Option<StdArc<GapTuner>>,
}

impl GatherJob {
    /// Builds the job and hands it to `submit` unless the page cache served every extent. The
    /// call holds a party of its own meanwhile, so the job cannot settle before `submit`
    /// returns.
    pub(super) fn launch(new: NewJob, submit: impl FnOnce(JobHandle)) -> Arc<GatherJob> {
        let mut out = new.out;
        let out_ptr = OutPtr(out.as_mut_ptr());
        // A streamed job's output is owned apart from the job, so that the requests it yields
        // can read it in place (`OutputView`) without keeping the job (its plan, span, wakers)
        // alive. The job holds it too, so it lives while any party may write it.
        let (out, streamed_out) = match new.streamed {
            true => (BytesMut::new(), Some(StdArc::new(Owned::new(out, new.pool.clone())))),
            false => (out, None),
        };
        let extent_states = extent_states(new.plan.extents().len(), new.order.as_deref());
        let claimed_at = (0..new.plan.extents().len()).map(|_| std::sync::atomic::AtomicU32::new(0)).collect();
        let unread = |i: usize| extent_states[i].load(Ordering::Relaxed) != ExtentState::DONE;
        let landing = new.streamed.then(|| Landing::new(&new.plan, &new.requests, unread));
        let job = Arc::new(GatherJob {
            plan: new.plan,
            requests: new.requests,
            targets: new.targets,
            path: new.path,
            out: UnsafeCell::new(out),
            out_ptr,
            streamed_out,
            next: AtomicUsize::new(0),
            order: new.order,
            extent_states,
            completed: AtomicUsize::new(new.done),
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
            resident: AtomicU64::new(new.resident),
            resident_faults: AtomicU64::new(new.faults),
            started: new.started,
            submit_ns: AtomicU64::new(0),
            wait_ns: AtomicU64::new(0),
            source_stats: Some(new.stats),
            prepared_elsewhere: new.elsewhere,
            claimed_at,
            handed_off_ns: std::sync::atomic::AtomicU64::new(0),
            first_claim_ns: std::sync::atomic::AtomicU64::new(u64::MAX),
            span: new.span,
            landing,
            tuning: new.tuning,
            pool: new.pool,
        });
        let handle = JobHandle { job: job.clone() };
        job.span.in_scope(|| {
            if new.done < job.plan.extents().len() {
                job.handed_off_ns.store(job.now_ns(), std::sync::atomic::Ordering::Relaxed);
                submit(handle.clone());
            }
        });
        job.submit_ns.store(job.started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        drop(handle);
        job
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
