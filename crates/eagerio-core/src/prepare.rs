//! The threads that prepare large gathers away from the caller's thread.
//!
//! Planning a gather and copying its page-cache-resident rows cost about 30 ns and 30-150 ns a
//! row: milliseconds for tens of thousands of rows, which an async service must not spend on
//! its executor's thread. A backend whose [`ReadEngine::remote`](crate::backend::ReadEngine::remote)
//! hands jobs over from any thread has gathers of at least [`PREPARE_ELSEWHERE`] requests
//! validated in the call and then planned, served from the cache and submitted here, at once
//! and without waiting for a poll.
//!
//! The threads (`eagerio-prepare-N`, one per core up to four) start with the first such gather
//! and live as long as the process. They run in the `SCHED_BATCH` class, so handing them work
//! never preempts the caller: on 2 cores, a preparing thread woken onto the caller's CPU made a
//! 40,000-row call last 1.6 ms instead of 0.4. The reads they submit run on the backend; the only I/O they
//! wait for is a major fault while copying a resident row that was evicted after its check (one
//! synchronous page read, counted in `GatherStats::resident_faults`). A gather whose future is
//! gone before its turn comes is not started at all. Work that panics is reported to its gather as [`Error::Panicked`](crate::Error)
//! and the thread goes on. Where no thread can be started, the work runs in the call, as for a
//! small gather.

/// Requests in a gather from which, on a backend that can take jobs from any thread, the
/// planning and cache copies leave the caller's thread. Below it they cost less than handing
/// them over (about 100 µs at this size).
pub const PREPARE_ELSEWHERE: usize = 2048;

/// Requests at the head of a large streamed gather ([`GatherStream`](crate::GatherStream)) that
/// are planned and submitted in the call, as a job of their own, while a preparing thread plans
/// the rest: their rows land after about one read's latency instead of after the whole plan.
/// Planning them costs the call about 20 µs; they are fewer than a gap fit takes
/// ([`MIN_FIT_READS`](crate::tune::MIN_FIT_READS)), so they never probe the device's price.
/// A stream of fewer than `PREPARE_ELSEWHERE + STREAM_HEAD` requests is one job.
pub const STREAM_HEAD: usize = 192;

/// One gather's preparation.
pub(crate) type Work = Box<dyn FnOnce() + Send + 'static>;

/// Runs `work` on a preparing thread, or here if none can be started.
#[cfg(not(eagerio_loom))]
pub(crate) fn run(work: Work) {
    use std::sync::{mpsc, Arc, Mutex, OnceLock};

    static QUEUE: OnceLock<Option<mpsc::Sender<Work>>> = OnceLock::new();
    let queue = QUEUE.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Work>();
        let rx = Arc::new(Mutex::new(rx));
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(4);
        let started = (0..threads)
            .filter(|i| {
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name(format!("eagerio-prepare-{i}"))
                    .spawn(move || {
                        // Woken by a gather call, this thread must not take that caller's CPU:
                        // the call would then last until it is scheduled again.
                        if !crate::sys::batch_scheduling() {
                            tracing::debug!("eagerio-prepare: SCHED_BATCH refused; a wake-up may preempt the caller");
                        }
                        loop {
                            let next = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                            let Ok(work) = next else { return };
                            // The work reports its own panics to its gather; this keeps the thread.
                            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
                        }
                    })
                    .is_ok()
            })
            .count();
        (started > 0).then_some(tx)
    });
    match queue {
        Some(tx) => {
            if let Err(mpsc::SendError(work)) = tx.send(work) {
                work();
            }
        }
        None => work(),
    }
}

/// Under loom the preparation runs in the call: the models check the ledger, not this queue.
#[cfg(eagerio_loom)]
pub(crate) fn run(work: Work) {
    work();
}
