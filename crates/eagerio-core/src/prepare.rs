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
//!
//! A large copy from the page cache is shared (`share`): the thread preparing the gather
//! offers its parts to the other preparing threads and copies parts itself until none is left.
//! A warm gather's copy is bound by memory latency (a TLB and a cache miss a random row), so two
//! threads copy 40,000 random rows of 4 KiB in about half the time (of 90 B, the copy is about
//! as short as the hand-over and the wake-ups around it, and the gather gained 10-30%). A thread
//! busy elsewhere takes no part; the owner waits only for a part a helper has begun (a
//! helper preempted or taking a major fault in its part delays it by that part). The protocol
//! is model-checked with loom (`loom_models` below).

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

use crate::loom::{thread, thread_panicking, Arc, AtomicBool, AtomicUsize, Ordering::SeqCst};

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

/// Runs `part(i)` for every `i` in `0..parts`: on this thread, and on a preparing thread that is
/// free to help (see the module's docs). Returns when every part has returned, also when one
/// panicked: the panic then goes on from here, after no other thread runs a part any more.
/// Parts may run in any order and at the same time, so each must touch only what is its own.
pub(crate) fn share(parts: usize, part: &(dyn Fn(usize) + Sync)) {
    share_with(parts, part, run);
}

/// [`share`], with `offer` handing the helpers' work to another thread (or running it in
/// place; it may run at any time, also after `share_with` returned).
pub(crate) fn share_with(parts: usize, part: &(dyn Fn(usize) + Sync), offer: impl FnOnce(Work)) {
    if parts <= 1 {
        (0..parts).for_each(part);
        return;
    }
    let shared = Arc::new(Shares::new(parts, part));
    // Waits, also while a part of ours (or `offer`) unwinds, until no helper runs a part: `part`
    // borrows from the caller's frame, which must outlive every call of it.
    let _wait = Wait(&shared);
    let helper = shared.clone();
    offer(Box::new(move || helper.help()));
    while let Some(i) = shared.claim() {
        part(i);
    }
}

/// The parts of one [`share`]: which is next, and how many helpers are inside one. Its atomics
/// and park are the loom shim's, so the models below check this protocol as it runs.
struct Shares {
    parts: usize,
    next: AtomicUsize,
    /// Helpers counted just before their claim (whether or not it gets a part) until the end of
    /// their part.
    helping: AtomicUsize,
    /// A helper's part panicked.
    panicked: AtomicBool,
    owner: thread::Thread,
    /// The caller's `part`. Dereferenced only by a helper holding a claimed part, and the
    /// caller does not leave `share` while one does ([`Wait`]), so it is alive whenever used.
    part: *const (dyn Fn(usize) + Sync + 'static),
}

// SAFETY: `part` points at a `Sync` closure, called from several threads by design; the pointer
// is only dereferenced while the closure is alive (see the field's docs). Every other field is
// `Send + Sync`.
unsafe impl Send for Shares {}
// SAFETY: as for `Send`: shared access only ever calls the `Sync` closure.
unsafe impl Sync for Shares {}

impl Shares {
    fn new(parts: usize, part: &(dyn Fn(usize) + Sync)) -> Shares {
        let part: *const (dyn Fn(usize) + Sync + '_) = part;
        // SAFETY: only the trait object's lifetime bound changes (the same fat pointer); the
        // field's docs say why it is never used past the real lifetime.
        let part = unsafe {
            std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), *const (dyn Fn(usize) + Sync + 'static)>(part)
        };
        Shares {
            parts,
            next: AtomicUsize::new(0),
            helping: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            owner: thread::current(),
            part,
        }
    }

    /// The next part nobody has claimed.
    fn claim(&self) -> Option<usize> {
        let i = self.next.fetch_add(1, SeqCst);
        (i < self.parts).then_some(i)
    }

    /// A helper's turn: claims and runs parts until none is left.
    fn help(&self) {
        loop {
            // Counted before the claim: once the owner has seen no part left, and then no
            // helper counted, no helper can hold a part.
            self.helping.fetch_add(1, SeqCst);
            let leave = Leave(self);
            let Some(i) = self.claim() else { return };
            // SAFETY: we hold claimed part `i` and are counted in `helping`, so the owner is
            // still inside `share_with` and `part` is alive (see the field's docs).
            let part = unsafe { &*self.part };
            part(i);
            drop(leave);
        }
    }
}

/// A helper leaving its part (also by unwinding): uncounts it, and wakes the owner when it was
/// the last.
struct Leave<'a>(&'a Shares);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        if thread_panicking() {
            self.0.panicked.store(true, SeqCst);
        }
        // The helper's own `Arc` keeps `Shares` alive after the owner left.
        if self.0.helping.fetch_sub(1, SeqCst) == 1 {
            self.0.owner.unpark();
        }
    }
}

/// The owner leaving [`share_with`] (also by unwinding): takes the parts left away from the
/// helpers, waits until none runs one, and passes a helper's panic on.
struct Wait<'a>(&'a Arc<Shares>);

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        let s = self.0;
        s.next.fetch_max(s.parts, SeqCst);
        while s.helping.load(SeqCst) != 0 {
            thread::park();
        }
        if s.panicked.load(SeqCst) && !thread_panicking() {
            panic!("a part of a shared copy panicked on a helping thread");
        }
    }
}

#[cfg(all(test, not(eagerio_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    use std::sync::{mpsc, Mutex};
    use std::time::Duration;

    /// Hands the helpers' work to a thread of its own, as a free preparing thread takes it.
    fn on_a_thread(work: Work) {
        std::thread::Builder::new().name("share-helper".into()).spawn(work).unwrap();
    }

    fn is_helper() -> bool {
        std::thread::current().name() == Some("share-helper")
    }

    /// Every part runs exactly once, and a free helper takes some of them: the owner's first
    /// part waits until the helper has run one.
    #[test]
    fn share_runs_every_part_once_on_two_threads() {
        let runs: Vec<AtomicUsize> = (0..64).map(|_| AtomicUsize::new(0)).collect();
        let (helped, helper_ran) = mpsc::channel();
        let helped = Mutex::new(helped);
        let helper_ran = Mutex::new(helper_ran);
        share_with(
            64,
            &|i| {
                runs[i].fetch_add(1, SeqCst);
                if is_helper() {
                    let _ = helped.lock().unwrap().send(());
                } else if i == 0 {
                    helper_ran.lock().unwrap().recv_timeout(Duration::from_secs(20)).expect("the helper took no part");
                }
            },
            on_a_thread,
        );
        assert!(runs.iter().all(|r| r.load(SeqCst) == 1), "a part ran other than once: {runs:?}");
    }

    /// `share` returns only after the helper's part has returned, whether the owner's own parts
    /// end or unwind (the part borrows from the caller's frame); unwinding, it leaves no part for
    /// the helper to start. And a helper that comes after `share` returned takes no part.
    #[test]
    fn share_waits_for_the_helpers_part_also_when_the_owner_unwinds() {
        for owner_panics in [false, true] {
            let (started, helper_started) = mpsc::channel();
            let (started, helper_started) = (Mutex::new(started), Mutex::new(helper_started));
            let done = AtomicBool::new(false);
            let others = AtomicUsize::new(0);
            let part = |i: usize| {
                if i == 0 {
                    // The helper's part, taken first: the owner's parts start once it runs.
                    assert!(is_helper());
                    started.lock().unwrap().send(()).unwrap();
                    std::thread::sleep(Duration::from_millis(50));
                    done.store(true, SeqCst);
                    return;
                }
                others.fetch_add(1, SeqCst);
                assert!(!owner_panics, "the owner's part");
            };
            let offer = |work: Work| {
                on_a_thread(work);
                helper_started.lock().unwrap().recv_timeout(Duration::from_secs(20)).unwrap();
            };
            let shared = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| share_with(3, &part, offer)));
            assert_eq!(shared.is_err(), owner_panics);
            assert!(done.load(SeqCst), "share returned (panicking: {owner_panics}) before the helper's part ended");
            // Unwinding, the owner takes the parts left away: nobody runs part 2.
            let want = if owner_panics { 1 } else { 2 };
            assert_eq!(others.load(SeqCst), want, "parts but the helper's (panicking: {owner_panics})");
        }

        let late = Mutex::new(None);
        let ran = AtomicUsize::new(0);
        share_with(
            8,
            &|_| {
                ran.fetch_add(1, SeqCst);
            },
            |w| *late.lock().unwrap() = Some(w),
        );
        assert_eq!(ran.load(SeqCst), 8);
        late.lock().unwrap().take().unwrap()();
        assert_eq!(ran.load(SeqCst), 8, "a helper ran a part after share returned");
    }

    /// A helper's panic goes on from `share`, after the owner's parts ended.
    #[test]
    fn share_passes_a_helpers_panic_on() {
        let (started, helper_started) = mpsc::channel();
        let (started, helper_started) = (Mutex::new(started), Mutex::new(helper_started));
        let done = AtomicUsize::new(0);
        let part = |_| {
            if is_helper() {
                started.lock().unwrap().send(()).unwrap();
                panic!("the helper's part");
            }
            done.fetch_add(1, SeqCst);
        };
        let offer = |work: Work| {
            on_a_thread(work);
            helper_started.lock().unwrap().recv_timeout(Duration::from_secs(20)).unwrap();
        };
        let shared = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| share_with(16, &part, offer)));
        assert!(shared.is_err(), "the helper's panic was lost");
        assert_eq!(done.load(SeqCst), 15, "share returned before the owner's parts ended");
    }
}

/// Loom models of the share's protocol, run as it is built (its atomics and park are the loom
/// shim's): the owner and a helper offered on a thread of its own, in every interleaving. Each
/// part counts its run twice: in an atomic (loom explores the orders of the owner's reads against
/// it) and in a cell of the owner's frame (through loom's `UnsafeCell`, which reports an access
/// not ordered after the part's). Once `share_with` returned, the owner reads both for every part:
/// a part run twice, not yet run, or still running on the helper is a count other than one or a
/// race. Panics are not modelled (under loom no thread is seen unwinding): the unit tests above
/// cover a part that panics, on the owner and on a helper.
///
/// `RUSTFLAGS="--cfg eagerio_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom
/// cargo test -p eagerio-core --release --lib prepare::loom_models`
#[cfg(all(test, eagerio_loom))]
mod loom_models {
    use super::*;
    use crate::loom::{explore, Ordering::Relaxed, UnsafeCell};

    fn on_a_thread(work: Work) {
        // Detached, as a preparing thread takes the work: it may run after `share_with` returned.
        drop(loom::thread::spawn(work));
    }

    /// Each part's runs. The atomic is only relaxed: any order the owner sees comes from the
    /// protocol.
    struct Runs {
        seen: Vec<AtomicUsize>,
        cells: Vec<UnsafeCell<usize>>,
    }

    // SAFETY: the cells are shared so that loom can check the claim this model is about: no two
    // threads touch one cell without an order between them (loom reports a race otherwise).
    unsafe impl Sync for Runs {}

    impl Runs {
        fn new(parts: usize) -> Runs {
            Runs {
                seen: (0..parts).map(|_| AtomicUsize::new(0)).collect(),
                cells: (0..parts).map(|_| UnsafeCell::new(0)).collect(),
            }
        }

        fn run(&self, part: usize) {
            self.seen[part].fetch_add(1, Relaxed);
            // SAFETY: loom checks this claim: the protocol gives each part to one thread.
            self.cells[part].with_mut(|n| unsafe { *n += 1 });
        }

        /// The owner, after `share_with` returned.
        fn check(&self) {
            for (i, cell) in self.cells.iter().enumerate() {
                let seen = self.seen[i].load(Relaxed);
                assert_eq!(seen, 1, "part {i} ran {seen} times when share_with returned");
                // SAFETY: loom checks this claim: no helper touches a cell once `share_with` returned.
                let n = cell.with_mut(|n| unsafe { *n });
                assert_eq!(n, 1, "part {i}");
            }
        }
    }

    fn every_part_once_before_the_owner_leaves(parts: usize) {
        let runs = Runs::new(parts);
        share_with(parts, &|i| runs.run(i), on_a_thread);
        runs.check();
    }

    /// Two parts: the helper takes none, one or both, before, during or after the owner's.
    #[test]
    fn share_model_two_parts_each_once_and_none_after_the_owner_left() {
        explore(|| every_part_once_before_the_owner_leaves(2));
    }

    /// Three parts: the owner may be parked on a helper inside its second part.
    #[test]
    fn share_model_three_parts_each_once_and_none_after_the_owner_left() {
        explore(|| every_part_once_before_the_owner_leaves(3));
    }
}
