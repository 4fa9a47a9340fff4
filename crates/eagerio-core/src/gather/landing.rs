//! A streamed gather's account of its requests ([`GatherStream`](super::GatherStream)): which
//! have every byte in the job's output, in the order they got there.
//!
//! The ledger tells it each extent that completes ([`Landing::landed`], after the extent's
//! pieces are copied to the output); the stream takes the requests it queued
//! ([`Landing::next`]) and reads their bytes through the ledger. It touches no buffer itself.
//! The counts use the loom shim's atomics and lock, so the loom models check its ordering too.

use std::{collections::VecDeque, task::Waker};

use crate::loom::{lock, wake, AtomicUsize, Mutex, Ordering};
use crate::plan::{Piece, Plan};

/// A streamed gather's requests as they land ([`GatherStream`](super::GatherStream)): per
/// request, the pieces it still waits for; and the requests whose every piece is in the output
/// but that the stream has not yielded yet.
pub(super) struct Landing {
    /// Per request, its pieces not yet copied to the output. The party that takes one to zero
    /// queues the request; `AcqRel`, so that the copies of every piece, whichever party made
    /// them, happen before the stream reads the request.
    remaining: Box<[AtomicUsize]>,
    /// Where each request's bytes start in the output.
    starts: Box<[u64]>,
    queue: Mutex<Landed>,
}

/// The requests landed and not yet yielded, and the stream's waker.
struct Landed {
    ready: VecDeque<u32>,
    waker: Option<Waker>,
}

impl Landing {
    /// The account of a job about to start: every request waits for its pieces in the extents
    /// left to read (`unread`); the others (served from the page cache, or copied before
    /// planning) are ready now.
    pub(super) fn new(plan: &Plan, requests: &[(u64, u64)], unread: impl Fn(usize) -> bool) -> Landing {
        let mut left = vec![0usize; requests.len()];
        for i in (0..plan.extents().len()).filter(|&i| unread(i)) {
            for p in plan.pieces(i) {
                left[p.request as usize] += 1;
            }
        }
        let ready = (0..requests.len() as u32).filter(|&r| left[r as usize] == 0).collect();
        let mut at = 0;
        let starts = requests
            .iter()
            .map(|&(_, len)| {
                at += len;
                at - len
            })
            .collect();
        Landing {
            remaining: left.into_iter().map(AtomicUsize::new).collect(),
            starts,
            queue: Mutex::new(Landed { ready, waker: None }),
        }
    }

    /// An extent's `pieces` are in the output: queues the requests they complete and wakes the
    /// stream.
    pub(super) fn landed(&self, pieces: &[Piece]) {
        let mut queue = None;
        for p in pieces {
            if self.remaining[p.request as usize].fetch_sub(1, Ordering::AcqRel) == 1 {
                queue.get_or_insert_with(|| lock(&self.queue)).ready.push_back(p.request);
            }
        }
        if let Some(w) = queue.and_then(|mut q| q.waker.take()) {
            wake(w);
        }
    }

    /// The next request landed and not yet yielded, with where its bytes start in the output;
    /// `None` if none is waiting, and then the next landing wakes `waker`.
    pub(super) fn next(&self, waker: &Waker) -> Option<(usize, u64)> {
        let mut q = lock(&self.queue);
        let Some(r) = q.ready.pop_front() else {
            if !q.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
                q.waker = Some(waker.clone());
            }
            return None;
        };
        Some((r as usize, self.starts[r as usize]))
    }
}
