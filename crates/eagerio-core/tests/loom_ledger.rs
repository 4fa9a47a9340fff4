//! Loom models of the staging / job-ledger invariant:
//!
//! > A buffer that the kernel or a worker still owns is never reused or freed. After an error, a
//! > panic or a dropped future, in-flight reads keep their staging slots until their completion
//! > is observed; only then can a slot serve the next gather.
//!
//! Every access to a slot's bytes goes through `SlotLease::{with_mut, with}`, i.e. through the
//! slot's loom `UnsafeCell`, so a slot handed to the next gather while a previous owner still
//! writes it is reported by loom as a concurrent access. The engine below simulates a kernel with
//! `loom::thread`s ("workers") that claim extents, write into a slot and complete them.
//!
//! Run with:
//! `RUSTFLAGS="--cfg eagerio_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
//!  cargo test -p eagerio-core --release --test loom_ledger`
#![cfg(eagerio_loom)]

use std::{
    cell::{Cell, RefCell},
    io,
    ops::Range,
    panic::{catch_unwind, resume_unwind, AssertUnwindSafe},
    path::PathBuf,
    sync::Arc as StdArc,
};

use bytes::Bytes;
use eagerio_core::{
    backend::{JobHandle, ReadEngine, Staging},
    loom::explore,
    mem::{MemEngine, MemFile},
    DataSink, Error, FileInfo, Op, RowLayout, Sink, SinkOptions, Source,
};
use loom::thread::JoinHandle;

const SLOT: usize = 4096;
const SIMULATED_PANIC: &str = "simulated worker panic";

/// What the simulated kernel does to the next gather.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Every read succeeds.
    None,
    /// The read of this extent fails with EIO (after the kernel wrote into the slot).
    Eio(usize),
    /// The worker panics right after writing this extent's slot (caught, as real backends do).
    Panic(usize),
    /// BROKEN engine: returns the slot to the pool *before* the kernel write into it, keeping a
    /// forged lease to write through. Only the negative model uses it.
    EarlyRelease,
}

/// A test-only backend: `submit` spawns `workers` loom threads per gather, each a simulated
/// kernel reading from an in-memory file into staging slots.
struct KernelEngine {
    data: StdArc<Vec<u8>>,
    info: FileInfo,
    staging: Staging,
    workers: Cell<usize>,
    fault: Cell<Fault>,
    threads: RefCell<Vec<JoinHandle<()>>>,
}

impl KernelEngine {
    fn new(data: Vec<u8>, staging: Staging) -> KernelEngine {
        let info = FileInfo {
            path: PathBuf::from("/loom/file"),
            len: data.len() as u64,
            align: 1,
            max_read: staging.slot_size() as u64,
        };
        KernelEngine {
            data: StdArc::new(data),
            info,
            staging,
            workers: Cell::new(1),
            fault: Cell::new(Fault::None),
            threads: RefCell::new(Vec::new()),
        }
    }

    /// Sets how the next gathers are served.
    fn serve(&self, workers: usize, fault: Fault) {
        self.workers.set(workers);
        self.fault.set(fault);
    }

    /// Joins every worker spawned so far.
    fn join_all(&self) {
        for t in self.threads.borrow_mut().drain(..) {
            t.join().expect("a worker thread panicked past its catch_unwind");
        }
    }
}

/// One simulated kernel worker: the body real backends run inside `catch_unwind`.
fn worker(job: &JobHandle, staging: &Staging, data: &[u8], fault: Fault) {
    while let Some(i) = job.next_extent() {
        let e = job.plan().extents()[i];
        let mut slot = staging.acquire_blocking();
        if fault == Fault::EarlyRelease {
            // BUG (deliberate): hand the slot back to the pool now, while we still write into it.
            // The forged copy's drop returns the slot and releases one reference; the original is
            // forgotten below, so the reference count stays balanced.
            // SAFETY: not sound, on purpose: this is the bug the negative model must catch.
            drop(unsafe { std::ptr::read(&slot) });
        }
        let len = e.len as usize;
        let start = (e.offset as usize).min(data.len());
        let n = len.min(data.len() - start);
        // The simulated kernel write (a tracked write access to the slot under loom).
        slot.with_mut(|buf| buf[..n].copy_from_slice(&data[start..start + n]));
        if fault == Fault::Panic(i) {
            panic!("{SIMULATED_PANIC}");
        }
        let result = if fault == Fault::Eio(i) { Err(io::Error::from_raw_os_error(libc::EIO)) } else { Ok(n) };
        slot.with(|buf| job.complete(i, buf, result));
        if fault == Fault::EarlyRelease {
            std::mem::forget(slot);
        }
    }
}

impl ReadEngine for KernelEngine {
    fn info(&self) -> &FileInfo {
        &self.info
    }

    fn submit(&self, job: JobHandle) {
        let fault = self.fault.get();
        for _ in 0..self.workers.get() {
            let job = job.clone();
            let staging = self.staging.clone();
            let data = self.data.clone();
            let t = loom::thread::spawn(move || {
                if fault == Fault::EarlyRelease {
                    // No catch_unwind: loom's own report must propagate.
                    return worker(&job, &staging, &data, fault);
                }
                if let Err(payload) = catch_unwind(AssertUnwindSafe(|| worker(&job, &staging, &data, fault))) {
                    let message = payload
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    if message != SIMULATED_PANIC {
                        // A loom report (or any real failure) must not be swallowed.
                        resume_unwind(payload);
                    }
                    job.fail(Error::Panicked {
                        op: Op::Read,
                        path: job.path().to_path_buf(),
                        offset: None,
                        target: None,
                        message,
                    });
                }
                drop(job);
            });
            self.threads.borrow_mut().push(t);
        }
    }
}

/// A file whose byte at offset `o` is `(o % 251) as u8`, so misplaced bytes show.
fn file(len: usize) -> Vec<u8> {
    (0..len).map(|o| (o % 251) as u8).collect()
}

fn expected(data: &[u8], ranges: &[Range<u64>]) -> Vec<Vec<u8>> {
    ranges.iter().map(|r| data[r.start as usize..r.end as usize].to_vec()).collect()
}

fn check(data: &[u8], ranges: &[Range<u64>], got: Vec<Bytes>) {
    let got: Vec<Vec<u8>> = got.iter().map(|b| b.to_vec()).collect();
    assert_eq!(got, expected(data, ranges), "second gather returned wrong bytes");
}

const FILE_LEN: usize = 3 * SLOT;
/// Two extents (max_gap 0, 4 KiB max read): slot-sized pieces at different file offsets.
const FIRST: &[Range<u64>] = &[10..110, 5000..5100];
/// The follow-up gather: two extents as well, reusing the same slots.
const SECOND: &[Range<u64>] = &[200..300, 9000..9100];

/// A file, `slots` staging slots and a source over them with the gap bound 0 (so `FIRST` and
/// `SECOND` are two extents each).
fn setup(slots: usize) -> (Vec<u8>, Staging, Source<KernelEngine>) {
    let data = file(FILE_LEN);
    let staging = Staging::new(slots * SLOT, SLOT).unwrap();
    let engine = KernelEngine::new(data.clone(), staging.clone());
    (data, staging, Source::new(engine).with_max_gap(0))
}

/// The follow-up every model ends with: a clean gather of `SECOND` on the same source and
/// staging returns the right bytes; then, every worker joined, every slot is back exactly once.
fn next_gather_then_drained(data: &[u8], staging: &Staging, source: &Source<KernelEngine>) {
    source.engine().serve(1, Fault::None);
    check(data, SECOND, loom::future::block_on(source.gather_ranges(SECOND).unwrap()).unwrap());
    source.engine().join_all();
    // `SlotLease::drop` debug-asserts against a double free, but the loom run is `--release`
    // (no debug assertions): a double free would leave more free entries than slots.
    assert!(staging.is_full(), "a slot leaked");
    assert_eq!(staging.free_slots(), staging.slots(), "a slot was handed back twice");
}

/// Shared body of models (a) and (b): a first gather that fails through `fault`, then a second
/// gather on the same source and staging that must succeed with the right bytes.
fn fail_then_gather(fault: Fault, slots: usize, first_workers: usize) {
    let (data, staging, source) = setup(slots);
    source.engine().serve(first_workers, fault);
    let first = source.gather_ranges(FIRST).unwrap();
    let err = loom::future::block_on(first).expect_err("the first gather must fail");
    match (fault, &err) {
        (Fault::Eio(_), Error::Io { .. }) => assert_eq!(err.raw_os_error(), Some(libc::EIO)),
        (Fault::Panic(_), Error::Panicked { .. }) => {}
        _ => panic!("unexpected error for {fault:?}: {err:?}"),
    }
    next_gather_then_drained(&data, &staging, &source);
}

/// (a) An EIO mid-gather: the future fails, in-flight slots stay owned until their completion,
/// and the next gather's slot writes never race with the first gather's.
#[test]
fn eio_mid_gather_then_gather() {
    explore(|| fail_then_gather(Fault::Eio(0), 2, 2));
}

/// (a') The same with a single slot, so the two gathers contend for it.
#[test]
fn eio_mid_gather_one_slot() {
    explore(|| fail_then_gather(Fault::Eio(1), 1, 2));
}

/// (b) A worker panics right after its slot write; it catches the panic (as real backends do)
/// and fails the job. The future reports `Panicked`; the next gather is correct.
#[test]
fn panic_mid_gather_then_gather() {
    explore(|| fail_then_gather(Fault::Panic(0), 2, 2));
}

/// (c) The future is dropped right after `gather_ranges` returns, before the workers finish.
/// Their slots stay leased until their reads complete; the next gather (contending for the one
/// slot) is correct; afterwards nothing leaked and nothing was handed back twice.
#[test]
fn dropped_future_then_gather() {
    explore(|| {
        let (data, staging, source) = setup(1);
        source.engine().serve(2, Fault::None);
        drop(source.gather_ranges(FIRST).unwrap());
        next_gather_then_drained(&data, &staging, &source);
    });
}

/// (c3) A streamed gather dropped after its first range: the range it yielded is right, and
/// stays right while the other's read completes into the same output (it is a view of it, not a
/// copy); that read keeps its slot until it completes, and the next gather (contending for the
/// one slot) is correct; nothing leaked, nothing was handed back twice.
#[test]
fn dropped_stream_then_gather() {
    explore(|| {
        let (data, staging, source) = setup(1);
        source.engine().serve(2, Fault::None);
        let mut stream = source.gather_ranges_stream(FIRST).unwrap();
        let (i, bytes) = loom::future::block_on(stream.next()).expect("a first range").expect("no error");
        assert_eq!(bytes.to_vec(), expected(&data, FIRST)[i], "range {i}");
        drop(stream);
        next_gather_then_drained(&data, &staging, &source);
        assert_eq!(bytes.to_vec(), expected(&data, FIRST)[i], "range {i}, after the stream");
    });
}

/// (c4) A streamed gather served by two workers yields each range once, with its bytes, and
/// then ends: whichever worker completes last, no landing is lost and the stream never waits
/// past the job's end.
#[test]
fn stream_yields_every_range_then_ends() {
    explore(|| {
        let (data, staging, source) = setup(2);
        source.engine().serve(2, Fault::None);
        let mut stream = source.gather_ranges_stream(FIRST).unwrap();
        let mut got = vec![None; FIRST.len()];
        loom::future::block_on(async {
            while let Some(item) = stream.next().await {
                let (i, bytes) = item.expect("no error");
                assert!(got[i].replace(bytes.to_vec()).is_none(), "range {i} came twice");
            }
        });
        let got: Vec<Vec<u8>> = got.into_iter().map(|g| g.expect("every range comes")).collect();
        assert_eq!(got, expected(&data, FIRST));
        next_gather_then_drained(&data, &staging, &source);
    });
}

/// (c'') A gather whose deadline passes while its worker reads (a deadline already past, set
/// right after the call: under loom there is no watcher thread). The future resolves with
/// `TimedOut` without waiting for them; their slots stay leased until their reads complete, and
/// the next gather, contending for the one slot, is correct.
#[test]
fn timed_out_gather_then_gather() {
    explore(|| {
        let (data, staging, source) = setup(1);
        source.engine().serve(1, Fault::None);
        let first = source.gather_ranges(FIRST).unwrap();
        let past = std::time::Instant::now() - std::time::Duration::from_secs(1);
        match loom::future::block_on(first.with_deadline(past)) {
            Err(Error::TimedOut { requested: 2, unread, .. }) => assert!(unread <= 2),
            // Both reads finished before the deadline was set.
            Ok(got) => check(&data, FIRST, got),
            Err(e) => panic!("unexpected error: {e:?}"),
        }
        next_gather_then_drained(&data, &staging, &source);
    });
}

/// (c') Issue 16 (11): a gather that fails while another of its reads is still in the kernel
/// resolves only once that read has completed: when its error is seen, every slot it used is back
/// and its statistics are recorded. A future that resolved on the failure alone would be caught
/// here with a slot still leased. Then the next gather, contending for the same slots.
#[test]
fn failed_gather_resolves_after_its_reads_drain() {
    explore(|| {
        let data = file(FILE_LEN);
        let staging = Staging::new(2 * SLOT, SLOT).unwrap();
        let engine = KernelEngine::new(data.clone(), staging.clone());
        let source = Source::new(engine).with_max_gap(0);

        source.engine().serve(2, Fault::Eio(0));
        let err = loom::future::block_on(source.gather_ranges(FIRST).unwrap()).expect_err("extent 0 fails");
        assert_eq!(err.raw_os_error(), Some(libc::EIO));
        assert!(staging.is_full(), "the failed gather resolved while one of its reads held a slot");
        assert_eq!(source.stats().failed, 1, "the failed gather resolved before its statistics were recorded");

        source.engine().serve(1, Fault::None);
        check(&data, SECOND, loom::future::block_on(source.gather_ranges(SECOND).unwrap()).unwrap());
        source.engine().join_all();
        assert!(staging.is_full(), "a slot leaked");
    });
}

/// (c'') Issue 16 (6): a settled future sees final statistics. The last party's drop records the
/// wait and the source's totals before the future may finish; a future that finished as soon as
/// the party count reached zero could see neither.
#[test]
fn settled_gather_has_final_statistics() {
    explore(|| {
        let data = file(FILE_LEN);
        let staging = Staging::new(SLOT, SLOT).unwrap();
        let engine = KernelEngine::new(data.clone(), staging.clone());
        let source = Source::new(engine).with_max_gap(0);

        source.engine().serve(1, Fault::None);
        let mut fut = source.gather_ranges(&FIRST[..1]).unwrap();
        let got = loom::future::block_on(&mut fut).unwrap();
        check(&data, &FIRST[..1], got);
        assert_eq!(source.stats().gathers, 1, "the source's totals were not recorded yet");
        assert_eq!(fut.stats().reads_issued, 1);
        assert!(fut.is_settled());
        source.engine().join_all();
    });
}

/// (b') Issue 16 (7): a panic on one thread is never charged to another thread's gather. Under
/// loom every model thread shares one OS thread, so `std::thread::panicking()` in a handle's drop
/// would answer for whichever thread is unwinding; a clean gather whose last handle drops while a
/// worker of another gather unwinds must still succeed.
#[test]
fn panic_on_one_thread_is_not_charged_to_another_gather() {
    explore(|| {
        let data = file(FILE_LEN);
        let staging = Staging::new(2 * SLOT, SLOT).unwrap();
        let engine = KernelEngine::new(data.clone(), staging.clone());
        let source = Source::new(engine).with_max_gap(0);

        source.engine().serve(1, Fault::Panic(0));
        let failing = source.gather_ranges(&FIRST[..1]).unwrap();
        source.engine().serve(1, Fault::None);
        let clean = source.gather_ranges(&SECOND[..1]).unwrap();
        check(&data, &SECOND[..1], loom::future::block_on(clean).expect("the clean gather"));
        let err = loom::future::block_on(failing).expect_err("the panicking gather");
        assert!(matches!(err, Error::Panicked { .. }), "{err:?}");
        source.engine().join_all();
        assert!(staging.is_full(), "a slot leaked");
    });
}

/// (d) Two threads append concurrently: the reserved offsets are disjoint and contiguous, and
/// after `flush` the file holds each chunk at its offset.
#[test]
fn sink_concurrent_appends() {
    explore(|| {
        let mem = MemFile::default();
        let engine = MemEngine::new(mem.clone(), "/loom/sink", SLOT).unwrap();
        let sink = Sink::new(engine, SinkOptions::default()).unwrap();

        let chunks: [&'static [u8]; 2] = [b"aaa", b"bbbbb"];
        let threads: Vec<_> = chunks
            .iter()
            .map(|&c| {
                let sink = sink.clone();
                loom::thread::spawn(move || {
                    let w = sink.append(Bytes::from_static(c));
                    let offset = w.offset();
                    loom::future::block_on(w).unwrap();
                    offset
                })
            })
            .collect();
        let offsets: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        loom::future::block_on(sink.flush()).unwrap();

        let (a, b) = (offsets[0], offsets[1]);
        let (la, lb) = (chunks[0].len() as u64, chunks[1].len() as u64);
        assert!(a + la <= b || b + lb <= a, "overlapping offsets {offsets:?}");
        assert_eq!(a.min(b), 0, "appends did not start at 0: {offsets:?}");
        assert_eq!(a.max(b), if a < b { la } else { lb }, "offsets not contiguous: {offsets:?}");
        assert_eq!(sink.append_offset(), la + lb);

        let contents = mem.contents();
        assert_eq!(contents.len() as u64, la + lb);
        assert_eq!(&contents[a as usize..(a + la) as usize], chunks[0]);
        assert_eq!(&contents[b as usize..(b + lb) as usize], chunks[1]);
    });
}

/// Negative sanity model: an engine that returns its slot to the pool *before* the simulated
/// kernel write into it finishes. The next gather acquires the same slot and writes it; loom must
/// report the two unordered accesses to the slot's cell, proving the models above can see reuse.
#[test]
#[should_panic(expected = "Causality violation")]
fn loom_catches_early_slot_release() {
    explore(|| {
        let data = file(FILE_LEN);
        let staging = Staging::new(SLOT, SLOT).unwrap();
        let engine = KernelEngine::new(data, staging.clone());
        let source = Source::new(engine).with_max_gap(0);

        source.engine().serve(1, Fault::EarlyRelease);
        let first = source.gather_ranges(&FIRST[..1]).unwrap();
        source.engine().serve(1, Fault::None);
        let second = source.gather_ranges(&SECOND[..1]).unwrap();
        let _ = loom::future::block_on(second);
        let _ = loom::future::block_on(first);
        source.engine().join_all();
    });
}

/// Clean row gathers back to back through `RowTable`, the second started while the first's
/// worker may still run: both correct, nothing leaked.
#[test]
fn clean_row_gathers_back_to_back() {
    explore(|| {
        let data = file(FILE_LEN);
        let staging = Staging::new(SLOT, SLOT).unwrap();
        let engine = KernelEngine::new(data.clone(), staging.clone());
        let table = Source::new(engine).with_max_gap(0).rows(RowLayout { base: 0, row_size: 100, rows: None }).unwrap();
        let row = |r: u64| data[(r * 100) as usize..(r * 100 + 100) as usize].to_vec();
        let first = table.gather(&[3, 60]).unwrap();
        let second = table.gather(&[90, 1]).unwrap();
        assert_eq!(loom::future::block_on(second).unwrap().to_vec(), [row(90), row(1)].concat());
        assert_eq!(loom::future::block_on(first).unwrap().to_vec(), [row(3), row(60)].concat());
        table.source().engine().join_all();
        assert!(staging.is_full(), "a slot leaked");
    });
}

/// The smallest form of the broken protocol, on `Staging` alone: the lease is dropped before the
/// kernel's write into the slot is done, so the next acquirer's write races with it.
#[test]
#[should_panic(expected = "Causality violation")]
fn loom_catches_a_slot_released_while_the_kernel_writes() {
    loom::model(|| {
        let staging = Staging::new(SLOT, SLOT).unwrap(); // one slot
        let lease = staging.try_acquire().unwrap();
        let idx = lease.index();
        drop(lease); // the bug: released before the kernel is done
        let s2 = staging.clone();
        // SAFETY: deliberately broken (no live lease): this model exists to show loom catches it;
        // the bytes are a live allocation, so the only harm is the race loom reports.
        let kernel = loom::thread::spawn(move || unsafe { s2.access_as_owner(idx, |b| b[0] = 9) });
        if let Some(mut next) = staging.try_acquire() {
            next.with_mut(|b| b[0] = 1);
        }
        kernel.join().unwrap();
    });
}

/// The same shape with the protocol kept (the kernel holds the lease until its write is done):
/// no report.
#[test]
fn loom_kernel_holding_the_lease_is_race_free() {
    explore(|| {
        let staging = Staging::new(SLOT, SLOT).unwrap();
        let lease = staging.try_acquire().unwrap();
        let s2 = staging.clone();
        let kernel = loom::thread::spawn(move || {
            // SAFETY: `lease` is alive and unused for the whole call.
            unsafe { s2.access_as_owner(lease.index(), |b| b[0] = 9) };
            drop(lease);
        });
        if let Some(mut next) = staging.try_acquire() {
            next.with_mut(|b| b[0] = 1);
        }
        kernel.join().unwrap();
        assert!(staging.is_full());
    });
}
