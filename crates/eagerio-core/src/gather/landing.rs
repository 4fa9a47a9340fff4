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
    /// A landing woke the stream already.
    woke: bool,
}

/// Landings queued before the stream is woken, after the first (which wakes it at once): a
/// stream that keeps up would otherwise be woken for nearly every request, a context switch
/// each on the consumer's side and a futex wake each on the reading thread's. Requests queued
/// below it are yielded at the next wake, at the latest when the job ends (its own wake).
const WAKE_BATCH: usize = 16;

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
            queue: Mutex::new(Landed { ready, waker: None, woke: false }),
        }
    }

    /// An extent's `pieces` are in the output: queues the requests they complete, and wakes the
    /// stream for the first of the job's landings and then for every [`WAKE_BATCH`] queued.
    pub(super) fn landed(&self, pieces: &[Piece]) {
        let mut queue = None;
        for p in pieces {
            if self.remaining[p.request as usize].fetch_sub(1, Ordering::AcqRel) == 1 {
                queue.get_or_insert_with(|| lock(&self.queue)).ready.push_back(p.request);
            }
        }
        let Some(mut q) = queue else { return };
        if q.woke && q.ready.len() < WAKE_BATCH {
            return;
        }
        q.woke = true;
        if let Some(w) = q.waker.take() {
            drop(q);
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

#[cfg(all(test, not(eagerio_loom)))]
mod tests {
    use futures_test::task::new_count_waker;

    use super::*;
    use crate::plan::PlanOptions;

    #[test]
    fn landing_wakes_for_the_first_then_for_every_batch() {
        // 40 requests far apart: one extent each, landing one at a time while the stream keeps
        // up (it drains the queue after every wake, which registers its waker again).
        let requests: Vec<(u64, u64)> = (0..40).map(|i| (i * 65_536, 100)).collect();
        let plan = Plan::new(&requests, &PlanOptions { max_gap: 0, align: 1, max_read: 4096 }).unwrap();
        let landing = Landing::new(&plan, &requests, |_| true);
        let (waker, count) = new_count_waker();
        assert!(landing.next(&waker).is_none(), "nothing landed yet");
        let (mut yielded, mut seen) = (Vec::new(), 0);
        for i in 0..plan.extents().len() {
            landing.landed(plan.pieces(i));
            if count.get() > seen {
                seen = count.get();
                while let Some((r, _)) = landing.next(&waker) {
                    yielded.push(r);
                }
            }
        }
        // The first landing, then the 17th and the 33rd; the 7 after wait for the job's end.
        assert_eq!(seen, 3, "one wake for the first landing, then one per {WAKE_BATCH}");
        assert_eq!(yielded.len(), 33);
        while let Some((r, _)) = landing.next(&waker) {
            yielded.push(r);
        }
        yielded.sort_unstable();
        assert_eq!(yielded, (0..40).collect::<Vec<_>>());
    }
}
