//! The lane's bookkeeping, driven turn by turn over a ring whose "kernel" completes exactly the
//! reads a test releases: how two gathers share the window, the per-file and per-lane counts,
//! the registered file table, and a refused inbox. Deterministic and fast (no real ring), so
//! the lane's mutation tests run them for every mutant.

use std::{
    io,
    ops::Range,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use eagerio_core::{
    backend::{JobHandle, Staging, SyncOp, WriteEngine, WriteOp},
    DataSink, FileInfo, GatherFuture, Sink, SinkOptions, Source,
};
use eagerio_uring::lane::{FileIds, FileRef, Inbox, LaneConfig, LaneCore, LaneFile, Release, Ring, Sqe, Work};

/// A gather of byte ranges.
type Ranges = GatherFuture<Vec<bytes::Bytes>>;

#[path = "support/lane_rig.rs"]
mod lane_rig;

use lane_rig::{Capture, NoNotify};

const SLOT: usize = 4096;
/// Bytes between two rows: far enough apart that no two share a read.
const STRIDE: u64 = 8192;

/// What the test's "kernel" holds: reads submitted and not completed, in submission order, and
/// the file table calls.
#[derive(Default)]
struct Kernel {
    reads: Vec<(u64, *mut u8, u32, u64)>,
    /// Reads whose offset is in this range complete at the next reap.
    release: Option<Range<u64>>,
    /// Every read completes at the next reap (the rig is being dropped: the lane drains).
    all: bool,
    registered: Vec<u32>,
    forgotten: Vec<u32>,
    /// Cancels submitted and not yet run: (the cancel's tag, the tag it targets).
    cancels: Vec<(u64, u64)>,
    /// Cancels sent in all.
    cancels_sent: usize,
    /// Run the held cancels at the next reap.
    run_cancels: bool,
    /// The `wait` argument of each `submit_and_wait`.
    waits: Vec<bool>,
    /// Reads pushed so far (`read_lens.len()`) at each `submit_and_wait`.
    pushed_at_submit: Vec<usize>,
    /// The offset of every read pushed, in order.
    read_offsets: Vec<u64>,
    /// Errors for the next `submit_and_wait` calls to return, in order (errnos).
    wait_errors: std::collections::VecDeque<i32>,
    /// Pushes to refuse (a full submission queue); the submit that follows a refusal fails
    /// with `EBADF` (the ring is gone).
    refuse_pushes: usize,
    ring_gone: bool,
    /// Writes submitted and not yet completed (each completes whole at the next reap).
    writes: Vec<(u64, u32)>,
    /// Results for the next reads to complete, in order, instead of their whole length: a
    /// negated errno, or a byte count short of the read's (the bytes are copied).
    read_results: std::collections::VecDeque<i32>,
    /// The length of every read submitted (continuations and retries included).
    read_lens: Vec<u32>,
    /// As `read_results`, for writes.
    write_results: std::collections::VecDeque<i32>,
    /// The length of every write submitted (continuations and retries included).
    write_lens: Vec<u32>,
    /// Syncs submitted and not yet completed (each at the next reap, with `sync_result`).
    syncs: Vec<u64>,
    sync_result: i32,
    /// Operations the kernel holds now, and the most it ever held.
    held_now: usize,
    held_peak: usize,
}

impl Kernel {
    fn hold(&mut self) {
        self.held_now += 1;
        self.held_peak = self.held_peak.max(self.held_now);
    }
}

// SAFETY: the raw pointers are staging slots the lane keeps leased until their completion; the
// test thread is the only one that touches them (through the ring, inside `LaneCore::turn`).
unsafe impl Send for Kernel {}

/// A ring over [`Kernel`], completing reads from `file`. It keeps the trait's default
/// `can_cancel` (false); it records a cancel anyway, so a test can tell that none was sent to a
/// ring that cannot take one.
struct HeldRing {
    file: Arc<Vec<u8>>,
    kernel: Arc<Mutex<Kernel>>,
}

/// The rig's ring: [`HeldRing`], taking cancels if `cancels` (else the lane sees the trait's
/// default `can_cancel`, through `HeldRing`).
struct AnyRing {
    ring: HeldRing,
    cancels: bool,
}

impl Ring for AnyRing {
    fn push(&mut self, sqe: Sqe) -> bool {
        self.ring.push(sqe)
    }

    fn submit_and_wait(&mut self, wait: bool) -> io::Result<()> {
        self.ring.submit_and_wait(wait)
    }

    fn reap(&mut self, f: &mut dyn FnMut(u64, i32)) {
        self.ring.reap(f)
    }

    fn register_file(&mut self, file: FileRef) {
        self.ring.register_file(file)
    }

    fn forget_file(&mut self, file: FileRef) {
        self.ring.forget_file(file)
    }

    fn can_cancel(&self) -> bool {
        self.cancels || self.ring.can_cancel()
    }
}

impl Ring for HeldRing {
    fn push(&mut self, sqe: Sqe) -> bool {
        {
            let mut k = lock(&self.kernel);
            if k.refuse_pushes > 0 {
                k.refuse_pushes -= 1;
                k.ring_gone = true;
                return false;
            }
        }
        match sqe {
            Sqe::Read { tag, ptr, len, offset, .. } => {
                let mut k = lock(&self.kernel);
                k.reads.push((tag, ptr, len, offset));
                k.read_lens.push(len);
                k.read_offsets.push(offset);
                k.hold();
            }
            Sqe::Write { tag, len, .. } => {
                let mut k = lock(&self.kernel);
                k.write_lens.push(len);
                k.writes.push((tag, len));
                k.hold();
            }
            Sqe::Sync { tag, .. } => {
                let mut k = lock(&self.kernel);
                k.syncs.push(tag);
                k.hold();
            }
            Sqe::Cancel { tag, target } => {
                let mut k = lock(&self.kernel);
                k.cancels.push((tag, target));
                k.cancels_sent += 1;
                k.hold();
            }
        }
        true
    }

    fn submit_and_wait(&mut self, wait: bool) -> io::Result<()> {
        let mut k = lock(&self.kernel);
        k.waits.push(wait);
        let pushed = k.read_lens.len();
        k.pushed_at_submit.push(pushed);
        if std::mem::take(&mut k.ring_gone) {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        match k.wait_errors.pop_front() {
            Some(errno) => Err(io::Error::from_raw_os_error(errno)),
            None => Ok(()),
        }
    }

    fn reap(&mut self, f: &mut dyn FnMut(u64, i32)) {
        let mut k = lock(&self.kernel);
        let release = if k.all { 0..u64::MAX } else { k.release.take().unwrap_or(0..0) };
        let (done, held): (Vec<_>, Vec<_>) = k.reads.drain(..).partition(|r| release.contains(&r.3));
        k.reads = held;
        let writes = std::mem::take(&mut k.writes);
        let syncs = std::mem::take(&mut k.syncs);
        let sync_result = k.sync_result;
        let write_results: Vec<i32> =
            writes.iter().map(|&(_, len)| k.write_results.pop_front().unwrap_or(len as i32)).collect();
        let results: Vec<i32> = done.iter().map(|_| k.read_results.pop_front().unwrap_or(i32::MAX)).collect();
        let cancels = if k.run_cancels || k.all { std::mem::take(&mut k.cancels) } else { Vec::new() };
        k.run_cancels = false;
        // A cancel whose target is still held cancels it (the read completes with ECANCELED);
        // otherwise it finds nothing (ENOENT), as the kernel's would.
        let mut cancelled = Vec::new();
        for &(tag, target) in &cancels {
            match k.reads.iter().position(|r| r.0 == target) {
                Some(at) => {
                    cancelled.push(k.reads.remove(at).0);
                    f(tag, 0);
                }
                None => f(tag, -libc::ENOENT),
            }
        }
        k.held_now -= cancels.len() + cancelled.len() + done.len() + writes.len() + syncs.len();
        drop(k);
        for tag in cancelled {
            f(tag, -libc::ECANCELED);
        }
        for ((tag, _), result) in writes.into_iter().zip(write_results) {
            f(tag, result);
        }
        for tag in syncs {
            f(tag, sync_result);
        }
        for ((tag, ptr, len, offset), result) in done.into_iter().zip(results) {
            if result < 0 {
                f(tag, result);
                continue;
            }
            let n = (result as u32).min(len);
            let src = &self.file[offset as usize..(offset + u64::from(n)) as usize];
            // SAFETY: `ptr` points into a staging slot of at least `len` bytes whose lease the
            // lane keeps until this completion is handed to it (as a kernel read would write it).
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), ptr, src.len()) };
            f(tag, n as i32);
        }
    }

    fn register_file(&mut self, file: FileRef) {
        lock(&self.kernel).registered.extend(file.id);
    }

    fn forget_file(&mut self, file: FileRef) {
        lock(&self.kernel).forgotten.extend(file.id);
    }
}

/// The kernel's lock, also after a failed assertion poisoned it (the rig's drop still drains).
fn lock(kernel: &Mutex<Kernel>) -> std::sync::MutexGuard<'_, Kernel> {
    kernel.lock().unwrap_or_else(|p| p.into_inner())
}

/// A write engine that only records the writes and syncs it is given (the test hands them to
/// the lane).
#[derive(Clone, Default)]
struct CaptureWrites(Arc<Mutex<Vec<WriteOp<CaptureWrites>>>>, Arc<Mutex<Vec<SyncOp<CaptureWrites>>>>);

impl WriteEngine for CaptureWrites {
    fn path(&self) -> &std::path::Path {
        std::path::Path::new("w")
    }

    fn submit_write(&self, op: WriteOp<Self>) {
        self.0.lock().unwrap().push(op);
    }

    fn submit_sync(&self, op: SyncOp<Self>) {
        self.1.lock().unwrap().push(op);
    }
}

/// A lane of depth `depth` over as many staging slots, and the source whose gathers it serves.
struct Rig {
    file: Arc<Vec<u8>>,
    kernel: Arc<Mutex<Kernel>>,
    inbox: Arc<Inbox>,
    lane: LaneCore<AnyRing>,
    src: Source<Capture>,
    jobs: Arc<Mutex<Vec<JobHandle>>>,
    /// The lane's staging pool (shared: a test can hold slots).
    staging: Staging,
}

impl Rig {
    fn new(depth: usize, rows: u64) -> Rig {
        Rig::with(depth, depth, rows, false)
    }

    /// As [`new`](Self::new), over a ring that takes cancels if `cancels`.
    fn with_cancel(depth: usize, rows: u64, cancels: bool) -> Rig {
        Rig::with(depth, depth, rows, cancels)
    }

    /// A lane of depth `depth` over `slots` staging slots.
    fn with(depth: usize, slots: usize, rows: u64, cancels: bool) -> Rig {
        let file: Arc<Vec<u8>> = Arc::new((0..rows * STRIDE).map(|i| (i / 7) as u8).collect());
        let info = FileInfo { path: PathBuf::from("t"), len: file.len() as u64, align: 1, max_read: SLOT as u64 };
        let jobs = Arc::new(Mutex::new(Vec::new()));
        let src = Source::new(Capture(info, jobs.clone())).with_max_gap(0);
        let kernel = Arc::new(Mutex::new(Kernel::default()));
        let inbox: Arc<Inbox> = Arc::new(Inbox::new(Box::new(NoNotify)));
        let held = HeldRing { file: file.clone(), kernel: kernel.clone() };
        let ring = AnyRing { ring: held, cancels };
        let staging = Staging::new(slots * SLOT, SLOT).unwrap();
        let lane = LaneCore::new(ring, staging.clone(), inbox.clone(), LaneConfig { depth, name: "lane".into() });
        Rig { file, kernel, inbox, lane, src, jobs, staging }
    }

    /// Gathers 10 bytes of each of `rows` (one read each) and queues the job on the lane, on
    /// `file`.
    fn gather(&self, rows: Range<u64>, file: &Arc<LaneFile>) -> (Ranges, Vec<Range<u64>>) {
        self.gather_ranges(rows.map(|r| r * STRIDE..r * STRIDE + 10).collect(), file)
    }

    /// Gathers `ranges` and queues the job on the lane, on `file`.
    fn gather_ranges(&self, ranges: Vec<Range<u64>>, file: &Arc<LaneFile>) -> (Ranges, Vec<Range<u64>>) {
        let fut = self.src.gather_ranges(&ranges).unwrap();
        for job in self.jobs.lock().unwrap().drain(..) {
            self.inbox.push(Work::Gather(job, file.clone()));
        }
        (fut, ranges)
    }

    /// Reads in flight whose offsets lie in `rows`.
    fn held(&self, rows: Range<u64>) -> usize {
        let span = rows.start * STRIDE..rows.end * STRIDE;
        lock(&self.kernel).reads.iter().filter(|r| span.contains(&r.3)).count()
    }

    /// Completes the reads in flight of `rows` at the next reap, and runs one turn (fill, then
    /// reap).
    fn complete(&mut self, rows: Range<u64>) {
        lock(&self.kernel).release = Some(rows.start * STRIDE..rows.end * STRIDE);
        self.lane.turn(false).unwrap();
    }

    /// Completes every read, turn after turn, until `fut` settles; checks its bytes.
    fn finish(&mut self, fut: Ranges, ranges: &[Range<u64>]) {
        for turn in 0.. {
            if fut.is_settled() {
                break;
            }
            assert!(turn < 100, "the gather never settles: {} in flight, {:?}", self.lane.in_flight(), fut.stats());
            self.complete(0..u64::MAX / STRIDE);
        }
        self.check(fut, ranges);
    }

    fn check(&self, fut: Ranges, ranges: &[Range<u64>]) {
        let got = futures::executor::block_on(fut).unwrap();
        for (k, r) in ranges.iter().enumerate() {
            assert_eq!(&got[k][..], &self.file[r.start as usize..r.end as usize]);
        }
    }
}

impl Drop for Rig {
    /// The lane drains what the kernel holds when it is dropped: let every read complete (also
    /// after a failed assertion, so the test reports it instead of hanging).
    fn drop(&mut self) {
        lock(&self.kernel).all = true;
    }
}

fn lane_file(id: Option<u32>) -> Arc<LaneFile> {
    Arc::new(LaneFile::new(FileRef { id, fd: -1 }, 1, PathBuf::from("t"), None))
}

/// A gather alone takes the whole window; a small gather arriving beside it takes every free
/// slot at once (its few extents are not held to a share), while the large one is held to its
/// share of the window; after the small one ends, the large one still leaves room for three
/// newcomers. The counts per file and per lane follow.
#[test]
fn lane_core_shares_the_window_between_gathers() {
    const BIG: Range<u64> = 0..100;
    const SMALL: Range<u64> = 100..105;
    let mut rig = Rig::new(8, 105);
    let (big_file, small_file) = (lane_file(None), lane_file(None));
    let (big, big_ranges) = rig.gather(BIG, &big_file);
    assert_eq!(rig.inbox.load(), 100, "one extent per row, queued");
    rig.lane.turn(false).unwrap();
    assert_eq!((rig.held(BIG), rig.lane.in_flight(), big_file.leased()), (8, 8, 8), "alone: the whole window");

    // Six of the large gather's reads complete; then a 5-row gather arrives.
    rig.complete(0..6);
    assert_eq!(rig.lane.in_flight(), 2);
    let (small, small_ranges) = rig.gather(SMALL, &small_file);
    assert_eq!(rig.inbox.load(), 105);
    rig.lane.turn(false).unwrap();
    // Two gathers plus room for three newcomers (a small gather is in the overlap): a share is
    // 8 / 5 -> 2. The large one holds 2 and may not claim; the small one has no more extents
    // than the window and takes 5 of the 6 free slots at once.
    assert_eq!((rig.held(BIG), rig.held(SMALL)), (2, 5), "the newcomer takes the free slots at once");
    assert_eq!((big_file.leased(), small_file.leased(), rig.lane.in_flight()), (2, 5, 7));

    // The small gather's reads complete; the next pass finds it has nothing left and retires
    // it.
    rig.complete(SMALL);
    assert_eq!((rig.lane.in_flight(), small_file.leased()), (2, 0));
    rig.lane.turn(false).unwrap();
    assert!(small.is_settled());
    assert_eq!(rig.inbox.load(), 100, "the small gather's extents leave the lane's load");
    // Alone again, the large one refills only to a quarter of the window (room kept for three
    // newcomers), not to all of it.
    rig.complete(BIG);
    assert_eq!(rig.lane.in_flight(), 0);
    rig.lane.turn(false).unwrap();
    assert_eq!((rig.held(BIG), rig.lane.in_flight()), (2, 2), "room stays free after an overlap");
    rig.check(small, &small_ranges);

    rig.finish(big, &big_ranges);
    assert_eq!((rig.lane.in_flight(), big_file.leased(), rig.inbox.load()), (0, 0, 0));
}

/// A gather's first read goes to the kernel alone, before the rest of the window is pushed (a
/// device handed a burst may answer none of it until it has served many); so does a second
/// gather's that arrives while the first has reads in flight.
#[test]
fn lane_core_a_gathers_first_read_goes_alone() {
    let mut rig = Rig::new(8, 40);
    let file = lane_file(None);
    let (first, first_ranges) = rig.gather(0..20, &file);
    rig.lane.turn(false).unwrap();
    assert_eq!(lock(&rig.kernel).pushed_at_submit, vec![1, 8], "the first read alone, then the window");
    rig.complete(0..4);
    let (second, second_ranges) = rig.gather(20..40, &file);
    let before = lock(&rig.kernel).pushed_at_submit.len();
    rig.lane.turn(false).unwrap();
    let k = lock(&rig.kernel);
    let submits = &k.pushed_at_submit[before..];
    // The turn pushes the first gather's refills and the second's reads; the first of the
    // second's is submitted alone: some submit comes right after its first read was pushed.
    let second_reads = |n: usize| k.read_offsets[..n].iter().filter(|&&o| o >= 20 * STRIDE).count();
    assert!(submits.iter().any(|&n| second_reads(n) == 1), "{submits:?}");
    drop(k);
    rig.finish(first, &first_ranges);
    rig.finish(second, &second_ranges);
}

/// Reads that continue each other in the file go to the kernel one after the other, so the
/// block layer can merge them: two gathers of adjacent stretches (four rows each, two reads a
/// row) queued together are not interleaved read by read; each job's reads stay in file order.
#[test]
fn lane_core_adjacent_reads_go_together() {
    let mut rig = Rig::new(8, 40);
    let file = lane_file(None);
    let stretch = |rows: Range<u64>| std::iter::once(rows.start * STRIDE..rows.end * STRIDE).collect();
    let (a, a_ranges) = rig.gather_ranges(stretch(0..2), &file);
    let (b, b_ranges) = rig.gather_ranges(stretch(20..22), &file);
    rig.lane.turn(false).unwrap();
    let offsets = lock(&rig.kernel).read_offsets.clone();
    assert_eq!(offsets.len(), 8, "{offsets:?}");
    let switches = offsets.windows(2).filter(|w| (w[0] < 20 * STRIDE) != (w[1] < 20 * STRIDE)).count();
    assert_eq!(switches, 1, "one gather's reads, then the other's: {offsets:?}");
    assert!(offsets[..4].windows(2).all(|w| w[1] == w[0] + SLOT as u64), "in file order: {offsets:?}");
    rig.finish(a, &a_ranges);
    rig.finish(b, &b_ranges);
}

/// A closed lane whose gather waits for staging slots held elsewhere (the pool is shared) is
/// not idle: with nothing in flight it keeps the gather and serves it once slots come back.
#[test]
fn lane_core_close_waits_for_a_gather_with_nothing_in_flight() {
    let mut rig = Rig::new(4, 8);
    let held: Vec<_> = (0..4).map(|_| rig.staging.try_acquire().expect("a free slot")).collect();
    let file = lane_file(None);
    let (fut, ranges) = rig.gather(0..2, &file);
    rig.inbox.close();
    assert!(rig.lane.turn(false).unwrap(), "a queued gather keeps a closed lane running");
    assert_eq!(rig.lane.in_flight(), 0, "no slot to read into");
    assert!(rig.lane.turn(false).unwrap(), "still not idle");
    drop(held);
    rig.finish(fut, &ranges);
    assert!(!rig.lane.turn(false).unwrap(), "closed and idle: the lane stops");
}

/// However many staging slots and writes there are, the lane keeps at most `depth` operations
/// in the kernel: writes first, then reads.
#[test]
fn lane_core_never_exceeds_its_depth() {
    let mut rig = Rig::with(4, 8, 20, false);
    let file = lane_file(None);
    let engine = CaptureWrites::default();
    let sink = Sink::new(engine.clone(), SinkOptions::default()).unwrap();
    let futs: Vec<_> = (0..6u64).map(|k| sink.write_at(k * 100, bytes::Bytes::from(vec![k as u8; 100]))).collect();
    for op in engine.0.lock().unwrap().drain(..) {
        rig.inbox.push(Work::Write(Box::new(op), file.clone()));
    }
    let (fut, ranges) = rig.gather(0..20, &file);
    rig.lane.turn(false).unwrap();
    assert_eq!(lock(&rig.kernel).held_peak, 4, "four of six writes, no read");
    rig.finish(fut, &ranges);
    assert_eq!(lock(&rig.kernel).held_peak, 4, "never more than the depth, with 8 slots free");
    for f in futs {
        futures::executor::block_on(f).unwrap();
    }
}

/// A sync's completion is the `sync()` future's result: a failed `fdatasync` fails it with the
/// kernel's error, and the next sync that succeeds is `Ok`.
#[test]
fn lane_core_sync_errors_reach_the_sync_future() {
    let mut rig = Rig::new(4, 4);
    let file = lane_file(None);
    let engine = CaptureWrites::default();
    let sink = Sink::new(engine.clone(), SinkOptions::default()).unwrap();
    for (result, ok) in [(-libc::EIO, false), (0, true)] {
        let write = sink.append(bytes::Bytes::from_static(b"row"));
        let flush = sink.sync();
        for op in engine.0.lock().unwrap().drain(..) {
            rig.inbox.push(Work::Write(Box::new(op), file.clone()));
        }
        rig.lane.turn(false).unwrap();
        futures::executor::block_on(write).unwrap();
        for op in engine.1.lock().unwrap().drain(..) {
            rig.inbox.push(Work::Sync(Box::new(op), file.clone()));
        }
        lock(&rig.kernel).sync_result = result;
        rig.lane.turn(false).unwrap();
        let got = futures::executor::block_on(flush);
        if ok {
            got.unwrap();
        } else {
            let e = got.unwrap_err();
            assert!(e.to_string().contains(&io::Error::from_raw_os_error(libc::EIO).to_string()), "{e}");
        }
    }
}

/// A read the kernel answers with `EAGAIN` or `EINTR` is sent again, up to 8 times; a short
/// read is continued where the kernel stopped. The bytes come out whole.
#[test]
fn lane_core_retries_and_continues_reads() {
    let mut rig = Rig::new(1, 4);
    let file = lane_file(None);
    lock(&rig.kernel).read_results.extend([-libc::EAGAIN, -libc::EINTR, 4, 3]);
    let (fut, ranges) = rig.gather(1..2, &file);
    rig.finish(fut, &ranges);
    assert_eq!(lock(&rig.kernel).read_lens, [10, 10, 10, 6, 3], "two retries, then 4 + 3 + the last 3 bytes");

    // The ninth EAGAIN in a row is the read's error.
    lock(&rig.kernel).read_results.extend([-libc::EAGAIN; 9]);
    let (fut, _) = rig.gather(2..3, &file);
    for _ in 0..20 {
        rig.complete(0..u64::MAX / STRIDE);
    }
    assert!(fut.is_settled());
    let e = futures::executor::block_on(fut).unwrap_err();
    assert!(e.to_string().contains(&io::Error::from_raw_os_error(libc::EAGAIN).to_string()), "{e}");
    assert_eq!(lock(&rig.kernel).read_lens.len(), 5 + 9, "eight retries, no more");
}

/// A short read whose continuation the ring can no longer take fails with the ring's error.
#[test]
fn lane_core_continuation_the_ring_refuses_is_an_error() {
    let mut rig = Rig::new(1, 4);
    let file = lane_file(None);
    lock(&rig.kernel).read_results.push_back(4);
    let (fut, _) = rig.gather(1..2, &file);
    rig.lane.turn(false).unwrap();
    lock(&rig.kernel).refuse_pushes = 1;
    rig.complete(0..u64::MAX / STRIDE);
    rig.lane.turn(false).unwrap();
    assert!(fut.is_settled());
    let e = futures::executor::block_on(fut).unwrap_err();
    assert!(e.to_string().contains(&io::Error::from_raw_os_error(libc::EBADF).to_string()), "{e}");
}

/// The same for writes: `EAGAIN` and `EINTR` are retried, a short write is continued from
/// where the kernel stopped, and the ninth `EAGAIN` in a row is the write's error.
#[test]
fn lane_core_retries_and_continues_writes() {
    let mut rig = Rig::new(1, 4);
    let file = lane_file(None);
    let engine = CaptureWrites::default();
    let sink = Sink::new(engine.clone(), SinkOptions::default()).unwrap();
    let mut write = |data: &'static [u8], results: &[i32]| {
        lock(&rig.kernel).write_results.extend(results);
        let fut = sink.append(bytes::Bytes::from_static(data));
        for op in engine.0.lock().unwrap().drain(..) {
            rig.inbox.push(Work::Write(Box::new(op), file.clone()));
        }
        for _ in 0..20 {
            rig.lane.turn(false).unwrap();
        }
        futures::executor::block_on(fut)
    };
    write(&[1; 100], &[-libc::EAGAIN, -libc::EINTR, 40]).unwrap();
    assert_eq!(lock(&rig.kernel).write_lens, [100, 100, 100, 60]);
    let e = write(&[2; 10], &[-libc::EAGAIN; 9]).unwrap_err();
    assert!(e.to_string().contains(&io::Error::from_raw_os_error(libc::EAGAIN).to_string()), "{e}");
    assert_eq!(lock(&rig.kernel).write_lens.len(), 4 + 9, "eight retries, no more");
    // A write that moves no byte is a short write, not retried.
    let e = write(&[3; 10], &[0]).unwrap_err();
    assert!(e.to_string().contains("short write: 0 of 10 bytes"), "{e}");
    assert_eq!(lock(&rig.kernel).write_lens.len(), 4 + 9 + 1);
}

/// A fault hook's `Short` cap on a write: below the write's length it is a short write; at
/// the length the write is whole.
#[test]
fn lane_core_write_hook_caps_are_short_writes() {
    let mut rig = Rig::new(1, 4);
    let hook = eagerio_core::fault::Hook::new(|p| eagerio_core::fault::Action::Short(p.len.min(50)));
    let file = Arc::new(LaneFile::new(FileRef { id: None, fd: -1 }, 1, PathBuf::from("t"), Some(hook)));
    let engine = CaptureWrites::default();
    let sink = Sink::new(engine.clone(), SinkOptions::default()).unwrap();
    let whole = sink.append(bytes::Bytes::from_static(&[1; 50]));
    let cut = sink.append(bytes::Bytes::from_static(&[2; 100]));
    for op in engine.0.lock().unwrap().drain(..) {
        rig.inbox.push(Work::Write(Box::new(op), file.clone()));
    }
    for _ in 0..4 {
        rig.lane.turn(false).unwrap();
    }
    futures::executor::block_on(whole).unwrap();
    let e = futures::executor::block_on(cut).unwrap_err();
    assert!(e.to_string().contains("short write: 50 of 100 bytes"), "{e}");
}

/// A lane dropped with reads in the kernel first waits for their completions (the slots are the
/// kernel's until then; an interrupted wait is waited again), and the gather they belong to
/// gets its bytes.
#[test]
fn lane_core_dropped_lane_waits_for_the_kernel() {
    let mut rig = Rig::new(4, 8);
    let (kernel, bytes) = (rig.kernel.clone(), rig.file.clone());
    let file = lane_file(None);
    let (fut, ranges) = rig.gather(0..4, &file);
    rig.lane.turn(false).unwrap();
    assert_eq!(lock(&kernel).held_now, 4);
    // The wait is interrupted once: the lane waits again.
    lock(&kernel).wait_errors.push_back(libc::EINTR);
    drop(rig);
    assert_eq!(lock(&kernel).held_now, 0, "every read completed before the lane let its slots go");
    let got = futures::executor::block_on(fut).unwrap();
    for (k, r) in ranges.iter().enumerate() {
        assert_eq!(&got[k][..], &bytes[r.start as usize..r.end as usize]);
    }
}

/// A lane whose loop failed abandons what it holds: it waits for the kernel's reads, then fails
/// the gathers it still held with the reason.
#[test]
fn lane_core_abandon_fails_what_the_lane_holds() {
    let mut rig = Rig::new(2, 8);
    let file = lane_file(None);
    let (fut, _) = rig.gather(0..6, &file);
    rig.lane.turn(false).unwrap();
    assert_eq!(rig.lane.in_flight(), 2);
    lock(&rig.kernel).all = true;
    rig.lane.abandon("the ring failed");
    assert_eq!(lock(&rig.kernel).held_now, 0, "the kernel's reads complete first");
    assert!(fut.is_settled());
    let e = futures::executor::block_on(fut).unwrap_err();
    assert!(e.to_string().contains("the ring failed"), "{e}");
}

/// The room kept for newcomers after an overlap lasts 512 completions (a cancel's completion does
/// not count): then a large gather alone takes the whole window again.
#[test]
fn lane_core_room_for_newcomers_expires() {
    const BIG: Range<u64> = 0..1000;
    let mut rig = Rig::new(8, 1002);
    let file = lane_file(None);
    let (big, big_ranges) = rig.gather(BIG, &file);
    let (small, small_ranges) = rig.gather(1000..1002, &file);
    rig.finish(small, &small_ranges);
    let mut completed = 0;
    while rig.held(BIG) < 8 {
        assert!(completed < 700, "the large gather never gets the whole window back");
        completed += rig.held(BIG);
        rig.complete(BIG);
        rig.lane.turn(false).unwrap();
    }
    assert!(completed >= 500, "the room lasts about 512 completions, not {completed}");
    rig.finish(big, &big_ranges);
}

/// Two large gathers overlapping share the window with room for one newcomer only (8 / 3 -> 3
/// each), so together they still keep most of the device busy.
#[test]
fn lane_core_two_large_gathers_keep_most_of_the_window() {
    let mut rig = Rig::new(8, 100);
    let file = lane_file(None);
    let (a, a_ranges) = rig.gather(0..50, &file);
    let (b, b_ranges) = rig.gather(50..100, &file);
    rig.lane.turn(false).unwrap();
    assert_eq!((rig.held(0..50), rig.held(50..100)), (3, 3));
    rig.finish(a, &a_ranges);
    rig.finish(b, &b_ranges);
}

/// A file's table entry: registered when the driver says so, forgotten by each lane, and its
/// index given back only once the last lane has forgotten it.
#[test]
fn lane_core_files_enter_and_leave_the_table() {
    let mut rig = Rig::new(4, 8);
    let ids = Arc::new(FileIds::new(2));
    let id = ids.take().expect("a free index");
    let file = lane_file(Some(id));
    rig.inbox.push(Work::Register(file.clone()));
    rig.lane.turn(false).unwrap();
    assert_eq!(lock(&rig.kernel).registered, [id]);
    let (fut, ranges) = rig.gather(0..3, &file);
    rig.finish(fut, &ranges);

    // Two lanes must clear the entry; this lane stands for both, one after the other.
    let release = Arc::new(Release::new(file.file_ref(), 2, ids.clone()));
    rig.inbox.push(Work::Release(release.clone()));
    rig.lane.turn(false).unwrap();
    assert_eq!(lock(&rig.kernel).forgotten, [id]);
    let other = ids.take().expect("the table's other index");
    assert_ne!(other, id, "the index is not back while a lane still holds the entry");
    assert_eq!(ids.take(), None, "a full table has no index to give");
    rig.inbox.push(Work::Release(release));
    rig.lane.turn(false).unwrap();
    assert_eq!(ids.take(), Some(id), "the last lane to clear the entry gives the index back");
}

/// A gather dropped while its reads are in flight on a ring that cannot cancel (the default):
/// the lane only stops claiming, sends no cancel, and frees each slot at its read's completion.
#[test]
fn lane_core_dropped_gather_without_cancel_waits_for_its_reads() {
    let mut rig = Rig::new(4, 20);
    let file = lane_file(None);
    let (fut, _) = rig.gather(0..20, &file);
    rig.lane.turn(false).unwrap();
    assert_eq!(rig.lane.in_flight(), 4);
    drop(fut);
    rig.lane.turn(false).unwrap();
    assert_eq!(lock(&rig.kernel).cancels_sent, 0, "no cancel to a ring that cannot take one");
    assert_eq!((rig.lane.in_flight(), file.leased()), (4, 4), "slots stay with the kernel's reads");
    rig.complete(0..20);
    rig.lane.turn(false).unwrap();
    assert_eq!((rig.lane.in_flight(), file.leased(), rig.inbox.load()), (0, 0, 0), "no further read claimed");
}

/// A refused inbox (the lane could not start, or stopped for good) fails what it held and
/// every later gather at once, with the reason.
#[test]
fn lane_core_refused_inbox_fails_gathers_with_the_reason() {
    let rig = Rig::new(4, 8);
    let file = lane_file(None);
    let (queued, _) = rig.gather(0..2, &file);
    rig.inbox.refuse("the ring could not be set up".into());
    let (later, _) = rig.gather(2..4, &file);
    for fut in [queued, later] {
        assert!(fut.is_settled(), "a refused lane fails its work at once");
        let e = futures::executor::block_on(fut).unwrap_err();
        assert!(e.to_string().contains("the ring could not be set up"), "{e}");
    }
}

/// A closed inbox stops the lane only once it is idle: a gather still claiming runs to the end
/// first. A turn never blocks in the ring with nothing in flight.
#[test]
fn lane_core_close_finishes_the_work_it_holds() {
    let mut rig = Rig::new(4, 20);
    let file = lane_file(None);
    let (fut, ranges) = rig.gather(0..20, &file);
    assert!(rig.lane.turn(true).unwrap());
    // The gather's first read went to the kernel alone, without waiting.
    assert_eq!(lock(&rig.kernel).waits, [false, true], "reads in flight: the turn may wait");
    rig.inbox.close();
    for turn in 0.. {
        assert!(turn < 50, "the gather never settles after close");
        lock(&rig.kernel).release = Some(0..u64::MAX);
        let running = rig.lane.turn(false).unwrap();
        if fut.is_settled() {
            break;
        }
        assert!(running, "the lane stopped with a gather unfinished");
    }
    rig.check(fut, &ranges);
    assert!(!rig.lane.turn(true).unwrap(), "closed and idle: the lane stops");
    let mut rig = Rig::new(4, 20);
    assert!(rig.lane.turn(true).unwrap());
    assert_eq!(lock(&rig.kernel).waits, [false], "nothing in flight: a turn must not wait");
}

/// A dropped gather's reads in flight get one cancel each, once, and no other gather's read is
/// cancelled, also when a cancel arrives after its target completed and the target's tag slot
/// was reused by another gather's read (tags carry a generation).
#[test]
fn lane_core_cancels_only_the_dropped_gathers_reads() {
    // Depth 6: the two cancels in flight take window room of their own.
    let mut rig = Rig::with_cancel(6, 40, true);
    let file = lane_file(None);
    let (dropped, _) = rig.gather(0..2, &file);
    let (kept, kept_ranges) = rig.gather(20..22, &file);
    rig.lane.turn(false).unwrap();
    assert_eq!((rig.held(0..2), rig.held(20..22)), (2, 2));
    drop(dropped);
    rig.lane.turn(false).unwrap();
    assert_eq!(lock(&rig.kernel).cancels_sent, 2, "one cancel per read of the dropped gather");
    // Another gather ends early with nothing in flight: the first one's reads are not cancelled
    // again.
    let (empty, _) = rig.gather(30..31, &file);
    drop(empty);
    rig.lane.turn(false).unwrap();
    assert_eq!(lock(&rig.kernel).cancels_sent, 2, "cancels are sent once per read");
    // The dropped gather's reads complete before their cancels run; their tag slots are
    // reused by a new gather's reads, and once more by the next one's; then the stale cancels
    // run.
    rig.complete(0..2);
    let (late, late_ranges) = rig.gather(10..12, &file);
    rig.lane.turn(false).unwrap();
    assert_eq!(rig.held(10..12), 2);
    rig.finish(late, &late_ranges);
    let (later, later_ranges) = rig.gather(12..14, &file);
    rig.lane.turn(false).unwrap();
    assert_eq!(rig.held(12..14), 2);
    lock(&rig.kernel).run_cancels = true;
    rig.lane.turn(false).unwrap();
    assert_eq!(rig.held(12..14), 2, "a stale cancel must not hit a read that reused its slot");
    rig.finish(later, &later_ranges);
    rig.finish(kept, &kept_ranges);
}
