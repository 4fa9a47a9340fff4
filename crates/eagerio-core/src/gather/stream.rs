//! A gather as a stream: [`GatherStream`] yields each request's bytes, with its index, as soon as
//! every read it needs has landed, instead of all of them in request order at the end.
//!
//! It is the same gather as a [`GatherFuture`](super::GatherFuture)'s, on the same plan, started
//! the same way (in the call, or by a preparing thread for a large one); its job only also keeps
//! account of which requests have every byte in the output (`super::landing`), and the stream
//! copies each out as it is yielded. Dropping it ends the job as dropping a future does; the
//! ledger keeps every buffer a read still owns, so nothing here frees or reuses one. This file
//! touches the job only through the ledger's crate-private API.

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
use crate::error::{Error, Result};
use crate::loom::{lock, Arc, Ordering};
use crate::stats::GatherStats;

use super::future::{arm, disarm, drop_job, Armed, Preparing, Started, Taken};
use super::ledger::{Ending, GatherJob};

/// A gather that yields each request as it lands: `(index, bytes)`, where `index` is the
/// request's place in the call (the row's place in `rows`, or the range's in `ranges`), in the
/// order the reads complete. Every request comes exactly once, then `None`; or, if the gather
/// fails, the requests that landed and then the error, once, then `None`.
///
/// The reads were submitted by the call that made it ([`RowTable::gather_stream`],
/// [`Source::gather_ranges_stream`]), or are being submitted by a preparing thread for a large
/// gather; polling only waits, and copies each request's bytes out of the gather's output (the
/// one cost a [`GatherFuture`](super::GatherFuture) does not have: a `memcpy` of the bytes).
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
    state: State,
    /// The job's counters as it ended, kept once it is gone.
    settled: GatherStats,
}

/// Where a [`GatherStream`] stands.
enum State {
    /// Being prepared on another thread; the job arrives in its slot.
    Preparing(StdArc<Preparing>),
    /// The job runs (or has settled with requests still to yield), under this deadline.
    Job(Arc<GatherJob>, Armed),
    /// Every request and the outcome were yielded.
    Ended,
}

impl GatherStream {
    /// The stream of a gather the call `started`.
    pub(super) fn new(started: Started) -> GatherStream {
        let state = match started {
            Started::Job(job, deadline) => {
                let armed = deadline.and_then(|at| arm(&job, at));
                State::Job(job, armed)
            }
            Started::Preparing(p) => State::Preparing(p),
        };
        GatherStream { state, settled: GatherStats::default() }
    }

    /// The next request to land, as `(index, bytes)`; `None` once every request and the outcome
    /// were yielded.
    pub async fn next(&mut self) -> Option<Result<(usize, Bytes)>> {
        poll_fn(|cx| self.poll_next(cx)).await
    }

    /// [`next`](Self::next) as a poll: `Ready(Some(..))` for a request that landed or the
    /// gather's error, `Ready(None)` at the end, `Pending` (the waker kept) while reads run.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<(usize, Bytes)>>> {
        if let State::Preparing(p) = &self.state {
            let p = p.clone();
            match p.take(Some(cx.waker()), None) {
                Taken::Job(job, armed) => self.state = State::Job(job, armed),
                Taken::Failed(e) => return self.end(Some(e)),
                Taken::Waiting(at) => {
                    // The watcher wakes this stream when `at` passes.
                    let Some(at) = at.filter(|&at| Instant::now() >= at) else { return Poll::Pending };
                    p.abandon(Ending::TIMED_OUT);
                    return self.end(Some(p.timed_out(at)));
                }
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

    /// Ends the stream: yields `failure` if there is one, else the end.
    fn end(&mut self, failure: Option<Error>) -> Poll<Option<Result<(usize, Bytes)>>> {
        if let State::Job(job, armed) = std::mem::replace(&mut self.state, State::Ended) {
            self.settled = job.stats();
            disarm(armed);
        }
        Poll::Ready(failure.map(Err))
    }

    /// The gather's counters so far (final once the stream has ended; all zero while it is being
    /// prepared).
    pub fn stats(&self) -> GatherStats {
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
        matches!(self.state, State::Ended)
    }
}

impl fmt::Debug for GatherStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Preparing(_) => "preparing",
            State::Job(..) => "running",
            State::Ended => "ended",
        };
        f.debug_struct("GatherStream").field("state", &state).finish()
    }
}

impl Drop for GatherStream {
    fn drop(&mut self) {
        match std::mem::replace(&mut self.state, State::Ended) {
            State::Job(job, armed) => drop_job(&job, armed, Ending::DROPPED),
            State::Preparing(p) => p.abandon(Ending::DROPPED),
            State::Ended => {}
        }
    }
}
