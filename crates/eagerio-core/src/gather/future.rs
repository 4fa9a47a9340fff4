//! The user's side of a gather: [`GatherFuture`], which only waits for a job already started,
//! and the states it passes through.
//!
//! A future is in one of these states: backed by a job that runs (`job`), being prepared on
//! another thread (`Other::Preparing`, until the job arrives in its slot), a value at hand
//! (`Other::Ready`), or any future a composing implementation gave it (`Other::Future`). Its
//! deadline, if any, is registered with the watcher thread (`crate::deadline`) and armed on the
//! job. Dropping it ends the job ([`Ending::DROPPED`]); the ledger keeps every buffer a read still
//! owns, so nothing here frees or reuses one. This file touches the job only through the
//! ledger's crate-private API.

use std::{
    fmt,
    future::Future,
    path::Path,
    pin::Pin,
    sync::Arc as StdArc,
    task::{Context, Poll, Waker},
    time::{Duration, Instant},
};

use bytes::Bytes;

use crate::deadline::{Expire, Ticket};
use crate::error::{Error, Op, Result};
use crate::loom::{lock, wake, Arc, Ordering};
use crate::stats::GatherStats;

use super::ledger::{Ending, GatherJob};
#[allow(unused_imports)] // doc links
use super::{Gather, GatherRows, Source};

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
    deadline: Armed,
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
pub(super) struct Preparing {
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
    /// The deadline's registration with the watcher, which wakes the future when it passes
    /// (dropping it takes the registration off).
    watch: Option<Ticket>,
    /// How the future ended before taking its job ([`Ending::DROPPED`], or
    /// [`Ending::TIMED_OUT`] when its deadline resolved it): the job is ended the same way, or
    /// never built if its preparation had not begun.
    abandoned: Option<u8>,
}

/// A deadline and its registration with the watcher thread; dropping it disarms the deadline.
pub(super) type Armed = Option<(Instant, Option<Ticket>)>;

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
    pub(super) fn new(
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
        slot.deadline = deadline;
        let target: std::sync::Weak<Preparing> = StdArc::downgrade(self);
        // The replaced registration is cancelled as it drops.
        slot.watch = deadline.and_then(|at| watch(at, target));
    }

    /// Run by the preparing thread once the job is submitted (or preparing it failed): arms the
    /// deadline on the job and wakes the future.
    pub(super) fn deliver(&self, result: Result<Arc<GatherJob>>) {
        let mut slot = self.slot();
        slot.watch = None;
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

    /// [`take`](Self::take) for a poll: the job; or the error that ends the gather (preparing it
    /// failed, or its deadline passed first: the gather is then abandoned as timed out); or
    /// `Pending`, with `cx`'s waker kept for the delivery and for the watcher at the deadline.
    pub(super) fn poll_take(self: &StdArc<Self>, cx: &mut Context<'_>) -> Poll<Result<(Arc<GatherJob>, Armed)>> {
        match self.take(Some(cx.waker()), None) {
            Taken::Job(job, armed) => Poll::Ready(Ok((job, armed))),
            Taken::Failed(e) => Poll::Ready(Err(e)),
            Taken::Waiting(Some(at)) if Instant::now() >= at => {
                self.abandon(Ending::TIMED_OUT);
                Poll::Ready(Err(self.timed_out(at)))
            }
            Taken::Waiting(_) => Poll::Pending,
        }
    }

    /// The future ended (`how`: dropped, or timed out) before taking its job: a job already
    /// delivered is ended so, and one still being prepared will be when it arrives.
    pub(super) fn abandon(&self, how: u8) {
        let job = {
            let mut slot = self.slot();
            slot.abandoned = Some(how);
            slot.watch = None;
            slot.job.take()
        };
        if let Some((job, armed)) = job {
            drop(armed);
            job.end(how);
        }
    }

    /// How the future ended, if it did before taking its job.
    pub(super) fn abandoned(&self) -> Option<u8> {
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
    /// [`Error::TimedOut`] at once (see the [module docs](super)). A deadline already past ends the
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
pub(super) fn arm(job: &Arc<GatherJob>, at: Instant) -> Armed {
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
            match p.clone().poll_take(cx) {
                Poll::Ready(Ok((job, armed))) => self.adopt(job, armed),
                Poll::Ready(Err(e)) => {
                    self.other = Other::Ready(None);
                    return Poll::Ready(Err(e));
                }
                Poll::Pending => return Poll::Pending,
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
            if self.deadline.as_ref().is_some_and(|&(at, _)| Instant::now() >= at) {
                job.expire();
            }
            *lock(&job.waker) = Some(cx.waker().clone());
            if !job.settled.load(Ordering::Acquire) {
                // Timed out with reads in flight: they own the output until they complete, and
                // the future resolves without it.
                let Some(timed_out) = job.timed_out() else { return Poll::Pending };
                self.settled = job.stats();
                self.job = None;
                self.deadline = None;
                return Poll::Ready(Err(timed_out));
            }
        }
        let job = self.job.take().expect("checked above");
        self.deadline = None;
        self.settled = job.stats();
        let finish = self.finish;
        Poll::Ready(job.take_output().map(|b| finish(b, &job)))
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
        // The deadline is disarmed as the field drops, after this: an ended job ignores it.
        if let Some(job) = &self.job {
            job.end(Ending::DROPPED);
        }
        if let Other::Preparing(p) = &self.other {
            p.abandon(Ending::DROPPED);
        }
    }
}

/// The finish of a row gather: the output as it is.
pub(super) fn whole(b: Bytes, _: &GatherJob) -> Bytes {
    b
}

/// The finish of a range gather: one `Bytes` per range, sharing the output.
pub(super) fn split(b: Bytes, job: &GatherJob) -> Vec<Bytes> {
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

/// A gather as its call leaves it: its job, started, under the source's deadline; or a
/// preparing thread that is building and starting it.
pub(super) enum Started {
    Job(Arc<GatherJob>, Option<Instant>),
    Preparing(StdArc<Preparing>),
}

impl<T> GatherFuture<T> {
    /// The future of a gather the call `started`, yielding `finish` of its output.
    pub(super) fn started(started: Started, finish: fn(Bytes, &GatherJob) -> T) -> Self {
        let (job, other, deadline) = match started {
            Started::Job(job, deadline) => {
                let deadline = deadline.and_then(|at| arm(&job, at));
                (Some(job), Other::None, deadline)
            }
            Started::Preparing(preparing) => (None, Other::Preparing(preparing), None),
        };
        GatherFuture { job, settled: GatherStats::default(), finish, other, deadline }
    }
}
