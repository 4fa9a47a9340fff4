//! A gather as a stream: [`GatherStream`] yields each request's bytes, with its index, as soon as
//! every read it needs has landed, instead of all of them in request order at the end.
//!
//! It is the same gather as a [`GatherFuture`](super::GatherFuture)'s, started the same way (in
//! the call, or by a preparing thread for a large one); its job only also keeps account of which
//! requests have every byte in the output (`super::landing`), and the stream yields each as a
//! view of the output, not a copy. A large one is two jobs, so that its first rows do not wait for the whole plan:
//! its head ([`STREAM_HEAD`](crate::prepare::STREAM_HEAD) requests), planned and submitted in the
//! call, and the rest, prepared elsewhere; the stream polls both and names each request by its
//! place in the call. Dropping it ends its jobs as dropping a future does; the ledger keeps every
//! buffer a read still owns, so nothing here frees or reuses one. This file touches the jobs
//! only through the ledger's crate-private API.

use std::{
    fmt,
    future::poll_fn,
    pin::Pin,
    sync::Arc as StdArc,
    task::{Context, Poll},
    time::Instant,
};

use bytes::Bytes;

use crate::deadline::Expire;
use crate::error::{Error, Result, Target};
use crate::loom::{lock, Arc, Ordering};
use crate::stats::GatherStats;

use super::future::{arm, Armed, Preparing, Started};
use super::ledger::{Ending, GatherJob};

/// A gather that yields each request as it lands: `(index, bytes)`, where `index` is the
/// request's place in the call (the row's place in `rows`, or the range's in `ranges`), in the
/// order the reads complete. Every request comes exactly once, then `None`; or, if the gather
/// fails, the requests that landed and then the error, once, then `None`.
///
/// The reads were submitted by the call that made it ([`RowTable::gather_stream`],
/// [`Source::gather_ranges_stream`]); for a large gather, the call submits the first
/// [`STREAM_HEAD`](crate::prepare::STREAM_HEAD) requests' reads and a preparing thread plans and
/// submits the rest's at once (a request asked for in both parts is read by each). Polling only
/// waits. Each yielded `Bytes` is a view of its job's output, as a future's are, not a copy: it
/// keeps that output allocated until every `Bytes` yielded from it is dropped (copy a row with
/// `Bytes::copy_from_slice` to keep it alone).
///
/// # When a request is yielded
/// The stream's task is woken for its job's first landing at once, and then once every 16
/// landings: a stream that keeps up would otherwise be woken for nearly every request, a
/// context switch on its side and a wake-up call on the reading thread's for each. A request
/// that lands between two wakes is yielded at the next one, and at the latest when its job
/// ends; at depth, that is tens of microseconds after its read. A poll yields every request
/// landed so far, woken or not.
///
/// Dropping it cancels what is left to read, as dropping a gather future does; reads already in
/// flight keep their buffers until they complete, and the source stays fully usable.
///
/// Use it with [`next`](Self::next), or as a [`futures::Stream`].
///
/// # Errors
/// The gather's first error, after the requests that landed before it: [`Error::Io`] or
/// [`Error::ShortRead`] naming the row, [`Error::Panicked`], [`Error::TimedOut`] if the source's
/// deadline passed first (counting the requests not yielded), or [`Error::Abandoned`] if the
/// backend shut down.
///
/// [`RowTable::gather_stream`]: super::RowTable::gather_stream
/// [`Source::gather_ranges_stream`]: super::Source::gather_ranges_stream
#[must_use = "the reads run anyway; dropping the stream discards their result"]
pub struct GatherStream {
    /// The gather's jobs in request order: one, or for a large gather its head (started in the
    /// call) and the rest (see [`Source::gather_ranges_stream`](super::Source::gather_ranges_stream)).
    parts: Vec<Part>,
    /// Requests yielded so far, and in all.
    yielded: u64,
    requested: u64,
    /// Every request, or the error, was yielded.
    ended: bool,
}

/// One job of a streamed gather: its requests start at `first` in the call.
struct Part {
    state: State,
    first: usize,
    /// The job's counters as it ended, kept once it is gone.
    settled: GatherStats,
}

/// Where a [`Part`] stands.
enum State {
    /// Being prepared on another thread; the job arrives in its slot.
    Preparing(StdArc<Preparing>),
    /// The job runs (or has settled with requests still to yield), under this deadline.
    Job(Arc<GatherJob>, Armed),
    /// Every request and the outcome were yielded, or the job was cancelled.
    Ended,
}

impl GatherStream {
    /// The stream of a gather of `requested` requests, whose requests from `first` on are the
    /// job the call `started`.
    pub(super) fn new(first: usize, started: Started, requested: usize) -> GatherStream {
        GatherStream { parts: vec![Part::new(first, started)], yielded: 0, requested: requested as u64, ended: false }
    }

    /// Adds the job that serves the requests from `first` on (after those of the jobs before).
    pub(super) fn then(&mut self, first: usize, started: Started) {
        self.parts.push(Part::new(first, started));
    }

    /// The next request to land, as `(index, bytes)`; `None` once every request and the outcome
    /// were yielded.
    pub async fn next(&mut self) -> Option<Result<(usize, Bytes)>> {
        poll_fn(|cx| self.poll_next(cx)).await
    }

    /// [`next`](Self::next) as a poll: `Ready(Some(..))` for a request that landed or the
    /// gather's error, `Ready(None)` at the end, `Pending` (the waker kept) while reads run.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<(usize, Bytes)>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let mut running = false;
        for k in 0..self.parts.len() {
            let first = self.parts[k].first;
            match self.parts[k].poll_next(cx) {
                Poll::Ready(Some(Ok((i, bytes)))) => {
                    self.yielded += 1;
                    return Poll::Ready(Some(Ok((first + i, bytes))));
                }
                Poll::Ready(Some(Err(e))) => {
                    // The first error ends the gather: what the other jobs have left to read is
                    // cancelled, as if the stream were dropped.
                    self.parts.iter_mut().for_each(|p| p.cancel(Ending::DROPPED));
                    self.ended = true;
                    return Poll::Ready(Some(Err(self.in_call(e, first))));
                }
                Poll::Ready(None) => {}
                Poll::Pending => running = true,
            }
        }
        if running {
            return Poll::Pending;
        }
        self.ended = true;
        Poll::Ready(None)
    }

    /// A job's error as the whole gather's: a range named by its place in the job named by its
    /// place in the call, and a deadline counting every request not yielded.
    fn in_call(&self, mut e: Error, first: usize) -> Error {
        match &mut e {
            Error::ShortRead { target: Target::Range(i), .. }
            | Error::Io { target: Some(Target::Range(i)), .. }
            | Error::Panicked { target: Some(Target::Range(i)), .. } => *i += first,
            Error::TimedOut { unread, requested, .. } => {
                *unread = self.requested - self.yielded;
                *requested = self.requested;
            }
            _ => {}
        }
        e
    }

    /// The gather's counters so far, over all its jobs (final once the stream has ended; zero
    /// for a job still being prepared).
    pub fn stats(&self) -> GatherStats {
        self.parts.iter().map(Part::stats).reduce(GatherStats::joined).unwrap_or_default()
    }
}

impl Part {
    fn new(first: usize, started: Started) -> Part {
        let state = match started {
            Started::Job(job, deadline) => {
                let armed = deadline.and_then(|at| arm(&job, at));
                State::Job(job, armed)
            }
            Started::Preparing(p) => State::Preparing(p),
        };
        Part { state, first, settled: GatherStats::default() }
    }

    /// The job's next landed request (its index in the job) or its error, as
    /// [`GatherStream::poll_next`].
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<(usize, Bytes)>>> {
        if let State::Preparing(p) = &self.state {
            match p.clone().poll_take(cx) {
                Poll::Ready(Ok((job, armed))) => self.state = State::Job(job, armed),
                Poll::Ready(Err(e)) => return self.end(Some(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        let failure = {
            let State::Job(job, armed) = &self.state else { return Poll::Ready(None) };
            if let Some(landed) = job.next_landed(cx.waker()) {
                return Poll::Ready(Some(Ok(landed)));
            }
            if armed.as_ref().is_some_and(|&(at, _)| Instant::now() >= at) {
                job.expire();
            }
            *lock(&job.waker) = Some(cx.waker().clone());
            if let Some(timed_out) = job.timed_out() {
                // A deadline ends the stream at once; reads in flight keep the output until
                // they complete.
                Some(timed_out)
            } else if !job.settled.load(Ordering::Acquire) {
                return Poll::Pending;
            } else if let Some(landed) = job.next_landed(cx.waker()) {
                // Settled: the last landings may have come after the first look.
                return Poll::Ready(Some(Ok(landed)));
            } else {
                job.failure()
            }
        };
        self.end(failure)
    }

    /// Ends the job's part: yields `failure` if there is one, else the end.
    fn end(&mut self, failure: Option<Error>) -> Poll<Option<Result<(usize, Bytes)>>> {
        // The deadline is disarmed as the replaced state drops.
        if let State::Job(job, _) = std::mem::replace(&mut self.state, State::Ended) {
            self.settled = job.stats();
        }
        Poll::Ready(failure.map(Err))
    }

    /// Ends the job `how` (dropped, or cancelled by another job's error): what is left to read
    /// is cancelled; reads in flight keep their buffers until they complete.
    fn cancel(&mut self, how: u8) {
        match std::mem::replace(&mut self.state, State::Ended) {
            State::Job(job, armed) => {
                self.settled = job.stats();
                drop(armed);
                job.end(how);
            }
            State::Preparing(p) => p.abandon(how),
            State::Ended => {}
        }
    }

    fn stats(&self) -> GatherStats {
        match &self.state {
            State::Job(job, _) => job.stats(),
            State::Preparing(_) | State::Ended => self.settled,
        }
    }
}

impl futures::Stream for GatherStream {
    type Item = Result<(usize, Bytes)>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        GatherStream::poll_next(self.get_mut(), cx)
    }
}

impl futures::stream::FusedStream for GatherStream {
    fn is_terminated(&self) -> bool {
        self.ended
    }
}

impl fmt::Debug for GatherStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = |p: &Part| match p.state {
            State::Preparing(_) => "preparing",
            State::Job(..) => "running",
            State::Ended => "ended",
        };
        let jobs: Vec<_> = self.parts.iter().map(state).collect();
        f.debug_struct("GatherStream").field("jobs", &jobs).field("yielded", &self.yielded).finish()
    }
}

impl Drop for Part {
    fn drop(&mut self) {
        self.cancel(Ending::DROPPED);
    }
}
