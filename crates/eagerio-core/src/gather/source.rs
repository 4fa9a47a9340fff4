//! The user's handles: [`Source`] (a file gathered by byte ranges) and [`RowTable`] (by row
//! id), as futures or as streams ([`GatherStream`]).
//!
//! A gather call checks its requests (every bad request is an error here, before any I/O),
//! then either plans and starts it in the call or, for a large one on an engine that takes jobs
//! from any thread, hands it to a preparing thread ([`crate::prepare`]). Starting means: plan,
//! copy what the page cache holds (adaptive mode, [`crate::residency`]), and give the rest to the
//! ledger ([`GatherJob::launch`](super::GatherJob)). This file may touch the planner, residency,
//! the preparing thread and the ledger's constructor; the job's accounting is the ledger's.

use std::{
    ops::Range,
    path::Path,
    sync::Arc as StdArc,
    time::{Duration, Instant},
};

use bytes::{Bytes, BytesMut};

use crate::error::{Error, Op, Result};
use crate::loom::Arc;
use crate::plan::{Plan, PlanOptions};
use crate::residency::{Residency, Served};
use crate::stats::{GatherStats, SourceLatencies, SourceStats, SourceTotals};
use crate::tune::GapTuner;

use super::engine::{FileInfo, ReadEngine, Remote};
use super::future::{split, whole, GatherFuture, Preparing, Started};
use super::ledger::{Ending, GatherJob, JobHandle, NewJob, Targets, Tuning};
use super::pool::OutputPool;
use super::stream::GatherStream;

/// A file served by a [`ReadEngine`], gathered by byte ranges.
#[derive(Debug, Clone)]
pub struct Source<E> {
    engine: E,
    opts: PlanOptions,
    stats: StdArc<SourceStats>,
    residency: Option<StdArc<Residency>>,
    timeout: Option<Duration>,
    /// The device's tuner and the source's bound on the tuned gap, when the gap is tuned.
    tuned: Option<(StdArc<GapTuner>, u64)>,
    /// Where large outputs come from and go back to ([`with_output_pool`](Self::with_output_pool)).
    pool: Option<StdArc<OutputPool>>,
}

/// The default gap: two extents closer than this are read as one. A tuned gap starts here.
pub const DEFAULT_MAX_GAP: u64 = 4096;

/// Outputs of at least this many bytes, planned on a preparing thread, are faulted in there
/// while the engine reads (see `Start::run`).
const POPULATE_MIN: u64 = 4 * 1024 * 1024;

/// The default bound on a tuned gap (see [`Source::with_tuned_gap`]).
pub const DEFAULT_GAP_LIMIT: u64 = 32 << 10;

impl<E: ReadEngine> Source<E> {
    /// Wraps an engine. For a local file the gap is tuned to its device's price
    /// ([`with_tuned_gap`](Self::with_tuned_gap) from [`DEFAULT_MAX_GAP`] within
    /// [`DEFAULT_GAP_LIMIT`]); otherwise it is [`DEFAULT_MAX_GAP`].
    pub fn new(engine: E) -> Source<E> {
        let info = engine.info();
        let opts = PlanOptions { max_gap: DEFAULT_MAX_GAP, align: info.align.max(1), max_read: info.max_read };
        let stats = StdArc::new(SourceStats::new(&info.path));
        let tuned = crate::tune::for_file(&info.path).map(|t| (t, DEFAULT_GAP_LIMIT));
        Source { engine, opts, stats, residency: None, timeout: None, tuned, pool: None }
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

    /// [`adaptive`](Self::adaptive) when `on`; if the file cannot be mapped, logs why and returns
    /// the source without the adaptive mode (every row is then read by the engine). For a
    /// backend's `adaptive` option.
    pub fn maybe_adaptive(mut self, on: bool) -> Source<E> {
        if on {
            if let Err(e) = self.enable_adaptive() {
                tracing::info!(error = %e, "adaptive gathers off: the file cannot be mapped");
            }
        }
        self
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

    /// Pins the gap: every gather joins extents whose hole is at most `max_gap` bytes (each
    /// join reads at most that many useless bytes), and the gap is not tuned.
    pub fn with_max_gap(mut self, max_gap: u64) -> Source<E> {
        self.opts.max_gap = max_gap;
        self.tuned = None;
        self
    }

    /// Tunes the gap to the device's price, fitted from this device's whole gathers (see
    /// [`crate::tune`]): it starts at `start` and never exceeds `limit`. A file that is not local
    /// (no device to fit) keeps `start`. Each gather's [`GatherStats::gap`] and
    /// [`GatherStats::price`] say what it was planned with.
    pub fn with_tuned_gap(mut self, start: u64, limit: u64) -> Source<E> {
        self.opts.max_gap = start.min(limit);
        self.tuned = crate::tune::for_file(&self.engine.info().path).map(|t| (t, limit));
        self
    }

    /// [`with_tuned_gap`](Self::with_tuned_gap) with a tuner of the caller's instead of the
    /// device's shared one: for sources whose gathers should not teach (or learn from) the
    /// device's others, or a file that is not local.
    pub fn with_gap_tuner(mut self, tuner: StdArc<GapTuner>, start: u64, limit: u64) -> Source<E> {
        self.opts.max_gap = start.min(limit);
        self.tuned = Some((tuner, limit));
        self
    }

    /// A backend's gap options: tuned from `max_gap` within `gap_limit` when `tune_gap`
    /// ([`with_tuned_gap`](Self::with_tuned_gap)), else pinned at `max_gap`
    /// ([`with_max_gap`](Self::with_max_gap)).
    pub fn with_gap_options(self, max_gap: u64, tune_gap: bool, gap_limit: u64) -> Source<E> {
        if tune_gap {
            self.with_tuned_gap(max_gap, gap_limit)
        } else {
            self.with_max_gap(max_gap)
        }
    }

    /// The device's tuner, when the gap is tuned.
    pub fn gap_tuner(&self) -> Option<&GapTuner> {
        self.tuned.as_ref().map(|(t, _)| &**t)
    }

    /// Gives every gather of this source a deadline `timeout` after its call
    /// ([`GatherFuture::with_timeout`]); a gather still running then resolves with
    /// [`Error::TimedOut`]. A gather's own [`with_deadline`](GatherFuture::with_deadline)
    /// replaces it.
    pub fn with_timeout(mut self, timeout: Duration) -> Source<E> {
        self.timeout = Some(timeout);
        self
    }

    /// Takes the output buffer of every gather of at least [`OutputPool::MIN`] bytes from
    /// `pool` when it keeps one, and gives it back when the last `Bytes` of the gather's result
    /// drops, so that a caller who hands large gathers' bytes away does not pay for fresh,
    /// zeroed memory each time (see [`OutputPool`]). Such a result's `Bytes` do not convert back
    /// to a `BytesMut` (`try_into_mut` fails): the pool recycles the buffer instead.
    pub fn with_output_pool(mut self, pool: StdArc<OutputPool>) -> Source<E> {
        self.pool = Some(pool);
        self
    }

    /// A table of fixed-size rows over this source.
    ///
    /// # Errors
    /// As [`RowTable::new`].
    pub fn rows(self, layout: RowLayout) -> Result<RowTable<E>> {
        RowTable::new(self, layout)
    }

    /// The plan options the next gather is planned with (unless it probes): the source's, with
    /// the engine's measured gap bound where it gives one ([`ReadEngine::max_gap`]), or the
    /// tuned gap.
    pub fn plan_options(&self) -> PlanOptions {
        let max_gap = match (self.engine.max_gap(), &self.tuned) {
            (Some(max_gap), _) => max_gap,
            (None, Some((tuner, limit))) => tuner.gap().unwrap_or(self.opts.max_gap).min(*limit),
            (None, None) => self.opts.max_gap,
        };
        PlanOptions { max_gap, ..self.opts }
    }

    /// The next gather's plan options, and how its gap was chosen: the tuner's pick (which may
    /// be a probe) for a tuned source. A gather of fewer requests than a fit needs reads
    /// ([`MIN_FIT_READS`](crate::tune::MIN_FIT_READS)) cannot teach the tuner, so it never
    /// probes.
    fn next_plan(&self, requests: usize) -> (PlanOptions, Tuning) {
        let (Some((tuner, limit)), None) = (&self.tuned, self.engine.max_gap()) else {
            let opts = self.plan_options();
            return (opts, Tuning { gap: opts.max_gap, ..Tuning::default() });
        };
        let p = if (requests as u64) < crate::tune::MIN_FIT_READS {
            tuner.settled(self.opts.max_gap, *limit)
        } else {
            tuner.next(self.opts.max_gap, *limit)
        };
        let tuning = Tuning { gap: p.gap, price: p.price, tuner: Some(tuner.clone()) };
        (PlanOptions { max_gap: p.gap, ..self.opts }, tuning)
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
    /// [module docs](super)).
    ///
    /// # Errors
    /// Before any I/O: [`Error::InvalidRange`] for an empty or inverted range or one past the
    /// file's length (as it was at open).
    pub fn gather_ranges(&self, ranges: &[Range<u64>]) -> Result<GatherFuture<Vec<Bytes>>> {
        self.gather_ranges_into(ranges, BytesMut::new())
    }

    /// [`gather_ranges`](Self::gather_ranges) into a caller's buffer, reused when its capacity
    /// suffices (recover it from a result with `Bytes::try_into_mut`, unless the source has an
    /// [output pool](Self::with_output_pool) and the output is of at least
    /// [`OutputPool::MIN`] bytes: the pool then takes it back).
    ///
    /// # Errors
    /// As [`gather_ranges`](Self::gather_ranges).
    pub fn gather_ranges_into(&self, ranges: &[Range<u64>], out: BytesMut) -> Result<GatherFuture<Vec<Bytes>>> {
        self.submit(self.range_requests(ranges)?, Targets::Ranges, out, split)
    }

    /// Gathers byte ranges as a stream: each range with its index, as soon as all its bytes are
    /// read, in the order they land (see [`GatherStream`]). For a caller that can use a range
    /// before the others are read: the first arrives after about one read's latency, not the
    /// whole gather's.
    ///
    /// The reads are submitted before this returns, as for [`gather_ranges`](Self::gather_ranges),
    /// on the same plan; each range's bytes are a view of the gather's output (no copy).
    ///
    /// # Errors
    /// As [`gather_ranges`](Self::gather_ranges), before any I/O.
    pub fn gather_ranges_stream(&self, ranges: &[Range<u64>]) -> Result<GatherStream> {
        self.stream(self.range_requests(ranges)?, Targets::Ranges)
    }

    /// Starts a streamed gather of `requests`. A large one on an engine that takes jobs from any
    /// thread runs as two jobs: its first [`STREAM_HEAD`](crate::prepare::STREAM_HEAD) requests
    /// planned and submitted in the call, so that they land while a preparing thread plans the
    /// rest (milliseconds for tens of thousands of requests); the rest, started as any large
    /// gather. Every request is checked before either starts.
    fn stream(&self, mut requests: Vec<(u64, u64)>, mut targets: Targets) -> Result<GatherStream> {
        use crate::prepare::{PREPARE_ELSEWHERE, STREAM_HEAD};
        let n = requests.len();
        let remote = (n >= PREPARE_ELSEWHERE + STREAM_HEAD).then(|| self.engine.remote()).flatten();
        let Some(remote) = remote else {
            return Ok(GatherStream::new(0, self.start(requests, targets, BytesMut::new(), true)?, n));
        };
        let started = Instant::now();
        Plan::check(&requests, &self.opts)?;
        let rest = requests.split_off(STREAM_HEAD);
        let rest_targets = targets.split_off(STREAM_HEAD);
        let head = self.start_checked(None, started, requests, targets, BytesMut::new(), true)?;
        let mut stream = GatherStream::new(0, head, n);
        // Should the rest fail to start, dropping `stream` cancels the head.
        let rest = self.start_checked(Some(remote), Instant::now(), rest, rest_targets, BytesMut::new(), true)?;
        stream.then(STREAM_HEAD, rest);
        Ok(stream)
    }

    /// The `(offset, len)` requests of `ranges`, each checked against the file.
    fn range_requests(&self, ranges: &[Range<u64>]) -> Result<Vec<(u64, u64)>> {
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
        Ok(requests)
    }

    /// A gather of `requests`, yielding `finish` of its output.
    fn submit<T>(
        &self,
        requests: Vec<(u64, u64)>,
        targets: Targets,
        out: BytesMut,
        finish: fn(Bytes, &GatherJob) -> T,
    ) -> Result<GatherFuture<T>> {
        Ok(GatherFuture::started(self.start(requests, targets, out, false)?, finish))
    }

    /// Starts a gather of `requests`: in this call, or, for a large one on an engine that takes
    /// jobs from any thread, on a preparing thread after checking the requests here. A
    /// `streamed` job keeps account of the requests as they land.
    fn start(&self, requests: Vec<(u64, u64)>, targets: Targets, out: BytesMut, streamed: bool) -> Result<Started> {
        let started = Instant::now();
        let remote = (requests.len() >= crate::prepare::PREPARE_ELSEWHERE).then(|| self.engine.remote()).flatten();
        if remote.is_some() {
            // Planning on the preparing thread checks them too late for an error of the call.
            Plan::check(&requests, &self.opts)?;
        }
        self.start_checked(remote, started, requests, targets, out, streamed)
    }

    /// [`start`](Self::start) with the place chosen: on a preparing thread that submits through
    /// `remote`, for requests already checked ([`Plan::check`]); in this call if `None`. The call
    /// began at `started`.
    fn start_checked(
        &self,
        remote: Option<Remote>,
        started: Instant,
        requests: Vec<(u64, u64)>,
        targets: Targets,
        out: BytesMut,
        streamed: bool,
    ) -> Result<Started> {
        let (opts, tuning) = self.next_plan(requests.len());
        let start = Start {
            opts,
            tuning,
            residency: self.residency.clone(),
            pool: self.pool.clone(),
            stats: self.stats.clone(),
            path: StdArc::from(self.engine.info().path.as_path()),
            span: tracing::Span::current(),
            elsewhere: false,
            streamed,
        };
        let deadline = self.timeout.map(|t| started + t);
        let Some(remote) = remote else {
            // The job records its submit time as the call's when it settles.
            let job = start.run(requests, targets, out, started, |h| self.engine.submit(h))?;
            return Ok(Started::Job(job, deadline));
        };
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
            // A party of the job's, held until it is delivered: a future that ended meanwhile
            // (dropped, or timed out) has `deliver` end the job, and the job must not settle
            // as whole before that, however fast the engine is.
            let mut held = None;
            let submit = |h: JobHandle| {
                held = Some(h.clone());
                remote(h)
            };
            let run = std::panic::AssertUnwindSafe(|| start.run(requests, targets, out, started, submit));
            let result = std::panic::catch_unwind(run).unwrap_or_else(|payload| {
                Err(Error::Panicked {
                    op: Op::Read,
                    path: path.to_path_buf(),
                    offset: None,
                    target: None,
                    message: crate::error::panic_message(&*payload),
                })
            });
            // The engine's sender goes first: an engine that counts a gather as on its way while
            // its sender lives (glommio's) is idle by the time the job can settle.
            drop(remote);
            slot.deliver(result);
            drop(held);
        }));
        self.stats.record_call(started.elapsed());
        Ok(Started::Preparing(preparing))
    }
}

/// What starting a gather needs from its source, apart from the engine: sent to a preparing
/// thread for a large gather.
struct Start {
    opts: PlanOptions,
    tuning: Tuning,
    residency: Option<StdArc<Residency>>,
    pool: Option<StdArc<OutputPool>>,
    stats: StdArc<SourceStats>,
    path: StdArc<Path>,
    /// The caller's span, the parent of the gather's (also on a preparing thread).
    span: tracing::Span,
    /// On a preparing thread, not in the call.
    elsewhere: bool,
    /// Yields each request as it lands.
    streamed: bool,
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
        let (order, done, resident, faults) = self.serve_resident(&plan, out.as_mut_ptr(), copied);
        let span = tracing::debug_span!(parent: &self.span, "gather", path = %self.path.display(), rows = requests.len(),
            extents = plan.extents().len(), bytes = plan.out_len(), resident);
        let (path, stats, elsewhere, streamed) = (self.path, self.stats, self.elsewhere, self.streamed);
        // On a preparing thread, a large output left for the engine is faulted in here while
        // the reads run, so that the engine's copies into it take no page fault (on an io_uring
        // lane they cost twice the copy itself). The job cannot settle, and so its output cannot
        // leave it, while this thread holds a party.
        let populate = (elsewhere && done < plan.extents().len() && plan.out_len() >= POPULATE_MIN)
            .then(|| (out.as_mut_ptr(), plan.out_len() as usize));
        let new = NewJob {
            plan,
            requests,
            targets,
            path,
            out,
            order,
            done,
            resident,
            faults,
            started,
            stats,
            elsewhere,
            streamed,
            span,
            tuning: self.tuning,
            pool: self.pool,
        };
        let mut held = None;
        let job = GatherJob::launch(new, |h| {
            if populate.is_some() {
                held = Some(h.clone());
            }
            submit(h);
        });
        if let (Some((ptr, len)), Some(party)) = (populate, held) {
            crate::sys::populate_write(ptr, len);
            drop(party);
        }
        Ok(job)
    }

    /// Makes `out` empty with room for `len` bytes.
    fn reserve(&self, out: &mut BytesMut, len: u64) {
        if out.capacity() < len as usize {
            if let Some(kept) = self.pool.as_ref().and_then(|p| p.take(len as usize)) {
                *out = kept;
            }
        }
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
        // missing ends within the file, which lies within the mapping. On a preparing thread
        // the copy is shared with the other preparing threads.
        let copy = unsafe { r.copy_in_order(requests, &missing, out.as_mut_ptr(), self.elsewhere) };
        let Some(copied) = copy else { return Ok(None) };
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
    /// [module docs](super) for what that costs the caller and what dropping the future does.
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
    /// (recover it from a result with `Bytes::try_into_mut`, unless the source has an
    /// [output pool](Source::with_output_pool) and the output is of at least
    /// [`OutputPool::MIN`] bytes: the pool then takes it back).
    ///
    /// # Errors
    /// As [`gather`](Self::gather).
    pub fn gather_into(&self, rows: &[u64], out: BytesMut) -> Result<GatherFuture<Bytes>> {
        self.source.submit(self.row_requests(rows)?, Targets::Rows(rows.to_vec()), out, whole)
    }

    /// Gathers `rows` as a stream: each row with its index in `rows`, as soon as it is read, in
    /// the order rows land (see [`GatherStream`]). A row asked for twice comes twice, once per
    /// index.
    ///
    /// The reads are submitted before this returns, as for [`gather`](Self::gather), on the same
    /// plan; each row's bytes are a view of the gather's output (no copy).
    ///
    /// # Errors
    /// As [`gather`](Self::gather), before any I/O.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn f<E: eagerio_core::backend::ReadEngine>(table: eagerio_core::RowTable<E>) -> eagerio_core::Result<()> {
    /// let rows = [7, 3, 7];
    /// let mut stream = table.gather_stream(&rows)?;
    /// while let Some(landed) = stream.next().await {
    ///     let (i, bytes) = landed?;
    ///     assert_eq!(bytes.len() as u64, table.row_size());
    ///     println!("row {} landed", rows[i]);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn gather_stream(&self, rows: &[u64]) -> Result<GatherStream> {
        self.source.stream(self.row_requests(rows)?, Targets::Rows(rows.to_vec()))
    }

    /// The `(offset, len)` requests of `rows`, each checked against the row count.
    fn row_requests(&self, rows: &[u64]) -> Result<Vec<(u64, u64)>> {
        let mut requests = Vec::with_capacity(rows.len());
        for &row in rows {
            if row >= self.rows {
                return Err(Error::RowOutOfRange { row, rows: self.rows, path: self.source.info().path.clone() });
            }
            requests.push((self.base + row * self.row_size, self.row_size));
        }
        Ok(requests)
    }
}
