//! Sinks: writes that start when they are called.
//!
//! # When the I/O starts
//! [`DataSink::write_at`] and [`DataSink::append`] hand the write to the backend before they
//! return; `append` also reserves its offset then, so concurrent appends get disjoint, contiguous
//! offsets in call order. The returned [`WriteFuture`] only waits.
//!
//! # Overlapping writes land in call order
//! Writes whose byte ranges do not overlap run concurrently and may complete in any order. A
//! write that overlaps an earlier one still in flight (or still waiting) is held in the sink and
//! started by the completion that clears the overlap, so overlapping writes reach the file in the
//! order they were called: `append(a)` then `write_at(0, header)` leaves the header in place
//! however slow the append is. A held write still starts without being polled. Every backend
//! gets this from the sink; [`SinkStats::held`] counts the writes that waited.
//!
//! # Backpressure
//! At most [`SinkOptions::max_in_flight_bytes`] are in flight. A write that would pass the bound
//! is queued inside the sink and started, in call order, by the completion that makes room: it
//! still starts without being polled. A single write larger than the bound starts once nothing
//! else is in flight. Producers that want to bound their own memory await [`DataSink::ready`]
//! before making the next chunk.
//!
//! # What dropping a write's future does
//! Nothing to the write: it runs to completion. Its outcome is kept by the sink, and a failure is
//! reported by the next `flush`, `sync` or `close`. Nothing is lost silently.
//!
//! # Errors
//! `flush`, `sync` and `close` report *every* write that failed since the last report, in one
//! [`Error::WriteFailed`] whose failures each name the offset and length, whether or not the
//! write's own future already reported it.
//!
//! # Why one file
//! Over 600 lines because the sink's ledger is one state machine under one lock: offset
//! reservation, the in-flight map that holds overlapping writes, the backpressure queue and the
//! error ledger each decide what the others do at every completion. Split, one invariant (a
//! write is started, held or queued exactly once, and its outcome reported once) would span files.

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    fmt,
    future::Future,
    io,
    path::{Path, PathBuf},
    pin::Pin,
    sync::Arc as StdArc,
    task::{Context, Poll, Waker},
};

use bytes::Bytes;

use crate::error::{Error, Op, Result, WriteFailure};
use crate::loom::{lock, AtomicU64, Mutex, Ordering};

/// A backend that performs a sink's writes.
///
/// Implementing it right is small: start the write in [`submit_write`](WriteEngine::submit_write)
/// (write the whole buffer, retrying short writes) and call [`WriteOp::complete`] with the
/// outcome from wherever it finishes. Dropping a `WriteOp` without completing it reports the write
/// as abandoned, so a panicking worker cannot lose a write silently.
pub trait WriteEngine: Sized + 'static {
    /// The file or object written, for error messages.
    fn path(&self) -> &Path;
    /// Starts `op`'s write before returning.
    fn submit_write(&self, op: WriteOp<Self>);
    /// Starts making every completed write durable (`fdatasync`), then completes `op`.
    fn submit_sync(&self, op: SyncOp<Self>);
}

/// Options of a sink: `SinkOptions::default().max_in_flight_bytes(8 << 20)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SinkOptions {
    /// Bound on bytes in flight (see the module docs). Default 64 MiB.
    pub max_in_flight_bytes: usize,
    /// Where the first `append` lands. Default 0.
    pub append_from: u64,
}

impl Default for SinkOptions {
    fn default() -> Self {
        SinkOptions { max_in_flight_bytes: 64 << 20, append_from: 0 }
    }
}

crate::options_setters!(SinkOptions { max_in_flight_bytes: usize, append_from: u64 });

/// Counters of a sink.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkStats {
    /// Writes accepted.
    pub writes: u64,
    /// Bytes accepted.
    pub bytes: u64,
    /// Writes that failed.
    pub failed: u64,
    /// Writes in flight now (started, not completed).
    pub in_flight: u64,
    /// Bytes in flight now.
    pub in_flight_bytes: u64,
    /// The most bytes ever in flight at once.
    pub peak_in_flight_bytes: u64,
    /// Writes not started yet: queued behind the in-flight bound, or held behind an overlapping
    /// earlier write.
    pub queued: u64,
    /// Writes that were held because they overlapped an earlier write still in flight or waiting
    /// (see the module docs), in total.
    pub held: u64,
}

struct Waiter<T> {
    state: Mutex<WaitState<T>>,
}

enum WaitState<T> {
    Pending(Option<Waker>),
    Done(T),
    Taken,
    /// The future was dropped before it took the value: nobody will read one.
    Abandoned,
}

impl<T> Waiter<T> {
    fn new() -> StdArc<Waiter<T>> {
        StdArc::new(Waiter { state: Mutex::new(WaitState::Pending(None)) })
    }

    fn done(value: T) -> StdArc<Waiter<T>> {
        StdArc::new(Waiter { state: Mutex::new(WaitState::Done(value)) })
    }

    /// Hands `value` to the future; gives it back if the future was dropped (nobody reads it).
    fn set(&self, value: T) -> Option<T> {
        let mut g = lock(&self.state);
        if matches!(*g, WaitState::Abandoned) {
            return Some(value);
        }
        let prev = std::mem::replace(&mut *g, WaitState::Done(value));
        drop(g);
        if let WaitState::Pending(Some(w)) = prev {
            crate::loom::wake(w);
        }
        None
    }

    /// The future is being dropped: returns the value it was handed and never took, if any.
    fn abandon(&self) -> Option<T> {
        match std::mem::replace(&mut *lock(&self.state), WaitState::Abandoned) {
            WaitState::Done(v) => Some(v),
            _ => None,
        }
    }

    fn poll(&self, cx: &mut Context<'_>) -> Poll<T> {
        let mut g = lock(&self.state);
        match std::mem::replace(&mut *g, WaitState::Taken) {
            WaitState::Done(v) => Poll::Ready(v),
            WaitState::Pending(_) => {
                *g = WaitState::Pending(Some(cx.waker().clone()));
                Poll::Pending
            }
            WaitState::Taken | WaitState::Abandoned => panic!("sink future polled after completion"),
        }
    }
}

enum BarrierKind {
    Flush(StdArc<Waiter<Result<()>>>),
    Sync(StdArc<Waiter<Result<()>>>),
}

struct Barrier {
    /// Settled once every write with a sequence number below this has completed.
    before: u64,
    kind: BarrierKind,
}

struct State<E: WriteEngine> {
    next_seq: u64,
    outstanding: BTreeSet<u64>,
    /// Writes not started yet, in call order.
    pending: VecDeque<WriteOp<E>>,
    /// The byte ranges in flight: `(start, seq) -> end`, for the overlap check.
    ranges: BTreeMap<(u64, u64), u64>,
    /// The longest range in flight since the map was last empty: no range starting more than
    /// this before a write can reach it.
    longest: u64,
    held: u64,
    in_flight: u64,
    in_flight_bytes: usize,
    peak: usize,
    writes: u64,
    bytes: u64,
    failed_total: u64,
    barriers: Vec<Barrier>,
    ready_waiters: Vec<StdArc<Waiter<()>>>,
    closed: bool,
}

struct Inner<E: WriteEngine> {
    engine: E,
    path: PathBuf,
    opts: SinkOptions,
    next_append: AtomicU64,
    state: Mutex<State<E>>,
    /// Locked after `state` where both are held.
    reports: SharedReports,
}

/// The eager sink over a [`WriteEngine`]. Cloning shares it.
pub struct Sink<E: WriteEngine> {
    inner: StdArc<Inner<E>>,
}

impl<E: WriteEngine> Clone for Sink<E> {
    fn clone(&self) -> Self {
        Sink { inner: self.inner.clone() }
    }
}

impl<E: WriteEngine> fmt::Debug for Sink<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sink").field("path", &self.inner.path).field("stats", &self.stats()).finish()
    }
}

/// A write handed to a [`WriteEngine`]: write [`data`](Self::data) at [`offset`](Self::offset),
/// then call [`complete`](Self::complete).
pub struct WriteOp<E: WriteEngine> {
    seq: u64,
    offset: u64,
    data: Bytes,
    /// Counted in [`SinkStats::held`] already.
    held: bool,
    waiter: StdArc<Waiter<Result<()>>>,
    sink: Option<StdArc<Inner<E>>>,
}

impl<E: WriteEngine> fmt::Debug for WriteOp<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteOp").field("offset", &self.offset).field("len", &self.data.len()).finish()
    }
}

impl<E: WriteEngine> WriteOp<E> {
    /// The bytes it covers, `start..end`.
    fn range(&self) -> (u64, u64) {
        (self.offset, self.offset.saturating_add(self.data.len() as u64))
    }

    /// Where to write.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// What to write.
    pub fn data(&self) -> &Bytes {
        &self.data
    }

    /// Reports the write's outcome.
    pub fn complete(mut self, result: io::Result<()>) {
        let sink = self.sink.take().expect("a write op completes once");
        sink.finish(&self, result);
    }
}

impl<E: WriteEngine> Drop for WriteOp<E> {
    fn drop(&mut self) {
        if let Some(sink) = self.sink.take() {
            let why = if crate::loom::thread_panicking() {
                "the write's worker panicked"
            } else {
                "the backend dropped the write"
            };
            sink.finish(self, Err(io::Error::other(why)));
        }
    }
}

/// A sync handed to a [`WriteEngine`]: make the file durable, then call
/// [`complete`](Self::complete).
pub struct SyncOp<E: WriteEngine> {
    waiter: Option<StdArc<Waiter<Result<()>>>>,
    sink: StdArc<Inner<E>>,
}

impl<E: WriteEngine> fmt::Debug for SyncOp<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncOp").field("path", &self.sink.path).finish()
    }
}

impl<E: WriteEngine> SyncOp<E> {
    /// Reports the sync's outcome.
    pub fn complete(mut self, result: io::Result<()>) {
        let w = self.waiter.take().expect("a sync op completes once");
        let unread = w.set(result.map_err(|source| Error::Io {
            op: Op::Sync,
            path: self.sink.path.clone(),
            offset: None,
            target: None,
            source,
        }));
        if let Some(Err(report)) = unread {
            requeue(&self.sink.reports, report);
        }
    }
}

impl<E: WriteEngine> Drop for SyncOp<E> {
    fn drop(&mut self) {
        if let Some(w) = self.waiter.take() {
            w.set(Err(Error::Abandoned { op: Op::Sync, path: self.sink.path.clone() }));
        }
    }
}

/// What the next flush, sync or close reports. Apart from [`State`] (and not generic over the
/// engine), so that a flush future dropped unread can hand its report back from any thread.
///
/// A plain `std` mutex, also under loom: its critical sections hold no loom operation, so a
/// model thread is never switched out while holding it, and it adds no interleavings.
#[derive(Default)]
struct Reports {
    /// Failed writes not reported yet, in the order they failed.
    failures: Vec<WriteFailure>,
    /// A failed `fdatasync` whose sync or close future was dropped unread: reported by the next
    /// barrier, after the failures of writes.
    sync_failure: Option<Error>,
}

type SharedReports = StdArc<std::sync::Mutex<Reports>>;

fn reports(r: &SharedReports) -> std::sync::MutexGuard<'_, Reports> {
    r.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Gives back a report that no future read: write failures go before any that came since; a
/// failed sync is kept for the next barrier. Other reports (`Closed`, `Abandoned`) concern that
/// future alone.
fn requeue(r: &SharedReports, report: Error) {
    let mut r = reports(r);
    match report {
        Error::WriteFailed { failures, .. } => {
            r.failures.splice(0..0, failures);
        }
        e @ Error::Io { op: Op::Sync, .. } => {
            r.sync_failure.get_or_insert(e);
        }
        _ => {}
    }
}

impl<E: WriteEngine> Inner<E> {
    fn finish(self: &StdArc<Self>, op: &WriteOp<E>, result: io::Result<()>) {
        let len = op.data.len();
        let outcome = match result {
            Ok(()) => Ok(()),
            Err(e) => Err(StdArc::new(e)),
        };
        let (to_start, fired) = {
            let mut st = lock(&self.state);
            st.outstanding.remove(&op.seq);
            st.in_flight -= 1;
            st.in_flight_bytes -= len;
            st.ranges.remove(&(op.offset, op.seq));
            if st.ranges.is_empty() {
                st.longest = 0;
            }
            if let Err(e) = &outcome {
                st.failed_total += 1;
                reports(&self.reports).failures.push(WriteFailure { offset: op.offset, len, error: e.clone() });
            }
            let to_start = self.admit(&mut st);
            let fired = self.fire(&mut st);
            (to_start, fired)
        };
        // The barriers first: a caller who sees this write's result and then flushes must find
        // the failure delivered to a flush, or back in the reports, never in transit.
        self.run(fired);
        op.waiter.set(outcome.map_err(|e| Error::Io {
            op: Op::Write,
            path: self.path.clone(),
            offset: Some(op.offset),
            target: None,
            source: clone_io(&e),
        }));
        for op in to_start {
            self.engine.submit_write(op);
        }
    }

    /// Moves pending writes in flight, in call order, and returns them to start. A write that
    /// overlaps one in flight, or an earlier one still pending, is skipped (held); the first
    /// write that does not fit under the bound stops the pass, so the bound is served in call
    /// order.
    fn admit(&self, st: &mut State<E>) -> Vec<WriteOp<E>> {
        let mut out = Vec::new();
        let mut waiting: Vec<(u64, u64)> = Vec::new();
        let mut i = 0;
        while i < st.pending.len() {
            let range = st.pending[i].range();
            if st.overlaps_in_flight(range) || waiting.iter().any(|&w| overlaps(w, range)) {
                let op = &mut st.pending[i];
                let first_time = !std::mem::replace(&mut op.held, true);
                st.held += u64::from(first_time);
                waiting.push(range);
                i += 1;
                continue;
            }
            let len = st.pending[i].data.len();
            if st.in_flight_bytes != 0 && st.in_flight_bytes + len > self.opts.max_in_flight_bytes {
                break;
            }
            let op = st.pending.remove(i).expect("index in range");
            st.in_flight += 1;
            st.in_flight_bytes += len;
            st.peak = st.peak.max(st.in_flight_bytes);
            if len > 0 {
                st.ranges.insert((op.offset, op.seq), range.1);
                st.longest = st.longest.max(len as u64);
            }
            out.push(op);
        }
        out
    }

    /// Takes the barriers and ready-waiters that are now satisfied.
    fn fire(&self, st: &mut State<E>) -> Fired {
        let low = st.outstanding.first().copied().unwrap_or(u64::MAX);
        let (done, keep): (Vec<_>, Vec<_>) =
            std::mem::take(&mut st.barriers).into_iter().partition(|b| b.before <= low);
        st.barriers = keep;
        let (failures, sync_failure) = if done.is_empty() {
            (Vec::new(), None)
        } else {
            let mut r = reports(&self.reports);
            let failures = std::mem::take(&mut r.failures);
            let sync_failure = if failures.is_empty() { r.sync_failure.take() } else { None };
            (failures, sync_failure)
        };
        let ready = if st.in_flight_bytes < self.opts.max_in_flight_bytes && st.pending.is_empty() {
            std::mem::take(&mut st.ready_waiters)
        } else {
            Vec::new()
        };
        Fired { barriers: done, failures, sync_failure, ready }
    }

    /// Settles the fired barriers with the report (or starts their syncs) and wakes the ready
    /// waiters. A report that no live future received (each was dropped) goes back to the sink.
    fn run(self: &StdArc<Self>, fired: Fired) {
        let report = if fired.failures.is_empty() {
            fired.sync_failure
        } else {
            Some(Error::WriteFailed { path: self.path.clone(), failures: fired.failures })
        };
        let mut delivered = false;
        for b in fired.barriers {
            match (b.kind, &report) {
                (BarrierKind::Flush(w), None) => {
                    w.set(Ok(()));
                }
                (BarrierKind::Sync(w), None) => {
                    self.engine.submit_sync(SyncOp { waiter: Some(w), sink: self.clone() });
                }
                (BarrierKind::Flush(w) | BarrierKind::Sync(w), Some(e)) => {
                    delivered |= w.set(Err(e.duplicate())).is_none();
                }
            }
        }
        if let (Some(report), false) = (report, delivered) {
            requeue(&self.reports, report);
        }
        for w in fired.ready {
            w.set(());
        }
    }

    fn barrier(
        self: &StdArc<Self>,
        kind: impl FnOnce(StdArc<Waiter<Result<()>>>) -> BarrierKind,
    ) -> StdArc<Waiter<Result<()>>> {
        let w = Waiter::new();
        let fired = {
            let mut st = lock(&self.state);
            let before = st.next_seq;
            st.barriers.push(Barrier { before, kind: kind(w.clone()) });
            self.fire(&mut st)
        };
        self.run(fired);
        w
    }
}

impl<E: WriteEngine> State<E> {
    /// Whether `range` overlaps a write in flight.
    fn overlaps_in_flight(&self, range: (u64, u64)) -> bool {
        if range.0 >= range.1 {
            return false;
        }
        let from = (range.0.saturating_sub(self.longest), 0);
        self.ranges.range(from..(range.1, 0)).any(|(&(start, _), &end)| overlaps((start, end), range))
    }
}

/// Whether two non-empty `start..end` ranges share a byte.
fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < a.1 && b.0 < b.1 && a.0 < b.1 && b.0 < a.1
}

struct Fired {
    barriers: Vec<Barrier>,
    failures: Vec<WriteFailure>,
    sync_failure: Option<Error>,
    ready: Vec<StdArc<Waiter<()>>>,
}

fn clone_io(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

impl<E: WriteEngine> Sink<E> {
    /// A sink over `engine`.
    ///
    /// # Errors
    /// [`Error::InvalidOptions`] for a zero in-flight bound.
    pub fn new(engine: E, opts: SinkOptions) -> Result<Sink<E>> {
        if opts.max_in_flight_bytes == 0 {
            return Err(Error::invalid_option("max_in_flight_bytes", "must be at least 1"));
        }
        let path = engine.path().to_path_buf();
        Ok(Sink {
            inner: StdArc::new(Inner {
                engine,
                path,
                opts,
                next_append: AtomicU64::new(opts.append_from),
                state: Mutex::new(State {
                    next_seq: 0,
                    outstanding: BTreeSet::new(),
                    pending: VecDeque::new(),
                    ranges: BTreeMap::new(),
                    longest: 0,
                    held: 0,
                    in_flight: 0,
                    in_flight_bytes: 0,
                    peak: 0,
                    writes: 0,
                    bytes: 0,
                    failed_total: 0,
                    barriers: Vec::new(),
                    ready_waiters: Vec::new(),
                    closed: false,
                }),
                reports: SharedReports::default(),
            }),
        })
    }

    /// The engine.
    pub fn engine(&self) -> &E {
        &self.inner.engine
    }

    /// Where the next `append` will land.
    pub fn append_offset(&self) -> u64 {
        self.inner.next_append.load(Ordering::Relaxed)
    }

    fn flush_future(&self, kind: impl FnOnce(StdArc<Waiter<Result<()>>>) -> BarrierKind) -> FlushFuture {
        FlushFuture { waiter: self.inner.barrier(kind), reports: self.inner.reports.clone() }
    }

    fn start(&self, offset: u64, data: Bytes) -> WriteFuture {
        let inner = &self.inner;
        let waiter = Waiter::new();
        let to_start = {
            let mut st = lock(&inner.state);
            if st.closed {
                return WriteFuture { offset, waiter: Waiter::done(Err(Error::Closed { path: inner.path.clone() })) };
            }
            let seq = st.next_seq;
            st.next_seq += 1;
            st.outstanding.insert(seq);
            st.writes += 1;
            st.bytes += data.len() as u64;
            let op = WriteOp { seq, offset, data, held: false, waiter: waiter.clone(), sink: Some(inner.clone()) };
            st.pending.push_back(op);
            inner.admit(&mut st)
        };
        for op in to_start {
            inner.engine.submit_write(op);
        }
        WriteFuture { offset, waiter }
    }
}

/// The eager sink interface.
///
/// Every call starts its work before returning; the futures only wait. Writes whose byte ranges
/// overlap reach the file in call order; others run concurrently. See the [module docs](self)
/// for ordering, backpressure, dropped futures and error reporting.
pub trait DataSink {
    /// Starts writing `data` at `offset`.
    fn write_at(&self, offset: u64, data: Bytes) -> WriteFuture;
    /// Reserves the next `data.len()` bytes at the append offset and starts writing them there;
    /// [`WriteFuture::offset`] tells where.
    fn append(&self, data: Bytes) -> WriteFuture;
    /// Waits for every write started before this call; reports every failure since the last
    /// report.
    fn flush(&self) -> FlushFuture;
    /// [`flush`](Self::flush), then makes the file durable (`fdatasync`). A local sink that
    /// created its file also `fsync`s the file's directory after the first `fdatasync` that
    /// succeeds, so the name survives a crash as well ([`sys::NewName`](crate::sys::NewName)).
    fn sync(&self) -> FlushFuture;
    /// Refuses further writes ([`Error::Closed`]), then [`sync`](Self::sync)s.
    fn close(&self) -> FlushFuture;
    /// Resolves once the in-flight bytes are under the bound and nothing is queued.
    fn ready(&self) -> ReadyFuture;
    /// The sink's counters.
    fn stats(&self) -> SinkStats;
}

impl<E: WriteEngine> DataSink for Sink<E> {
    fn write_at(&self, offset: u64, data: Bytes) -> WriteFuture {
        self.start(offset, data)
    }

    fn append(&self, data: Bytes) -> WriteFuture {
        let offset = self.inner.next_append.fetch_add(data.len() as u64, Ordering::Relaxed);
        self.start(offset, data)
    }

    fn flush(&self) -> FlushFuture {
        self.flush_future(BarrierKind::Flush)
    }

    fn sync(&self) -> FlushFuture {
        self.flush_future(BarrierKind::Sync)
    }

    fn close(&self) -> FlushFuture {
        lock(&self.inner.state).closed = true;
        self.flush_future(BarrierKind::Sync)
    }

    fn ready(&self) -> ReadyFuture {
        let w = Waiter::new();
        {
            let mut st = lock(&self.inner.state);
            if st.in_flight_bytes < self.inner.opts.max_in_flight_bytes && st.pending.is_empty() {
                return ReadyFuture { waiter: Waiter::done(()) };
            }
            st.ready_waiters.push(w.clone());
        }
        ReadyFuture { waiter: w }
    }

    fn stats(&self) -> SinkStats {
        let st = lock(&self.inner.state);
        SinkStats {
            writes: st.writes,
            bytes: st.bytes,
            failed: st.failed_total,
            in_flight: st.in_flight,
            in_flight_bytes: st.in_flight_bytes as u64,
            peak_in_flight_bytes: st.peak as u64,
            queued: st.pending.len() as u64,
            held: st.held,
        }
    }
}

/// The wait for a started write. Resolves when the write completed.
///
/// # Errors
/// [`Error::Io`] with the write's offset, or [`Error::Closed`].
///
/// # Cancel safety
/// Dropping it does not cancel the write; a failure is still reported by the next flush.
#[must_use = "the write runs anyway; flush() reports its failure if this is dropped"]
pub struct WriteFuture {
    offset: u64,
    waiter: StdArc<Waiter<Result<()>>>,
}

impl fmt::Debug for WriteFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteFuture").field("offset", &self.offset).finish()
    }
}

impl WriteFuture {
    /// Where the write lands (for `append`, the reserved offset).
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

impl Future for WriteFuture {
    type Output = Result<()>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.waiter.poll(cx)
    }
}

/// The wait for a flush, sync or close.
///
/// Dropping it unread does not lose its report: the failures it would have returned (and a
/// failed `fdatasync`) go back to the sink and the next flush, sync or close reports them. A
/// report handed to two futures at once (two flushes waiting on the same writes) may so be
/// returned twice, never not at all.
///
/// # Errors
/// [`Error::WriteFailed`] listing every failed write since the last report; for a sync or close,
/// also [`Error::Io`] from `fdatasync`.
#[must_use = "a flush reports the failures of earlier writes"]
pub struct FlushFuture {
    waiter: StdArc<Waiter<Result<()>>>,
    reports: SharedReports,
}

impl Drop for FlushFuture {
    fn drop(&mut self) {
        if let Some(Err(report)) = self.waiter.abandon() {
            requeue(&self.reports, report);
        }
    }
}

impl fmt::Debug for FlushFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FlushFuture")
    }
}

impl Future for FlushFuture {
    type Output = Result<()>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.waiter.poll(cx)
    }
}

/// The wait for room under the in-flight bound.
#[must_use]
pub struct ReadyFuture {
    waiter: StdArc<Waiter<()>>,
}

impl fmt::Debug for ReadyFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReadyFuture")
    }
}

impl Future for ReadyFuture {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.waiter.poll(cx)
    }
}
