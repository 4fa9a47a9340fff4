//! The lane's state machine, independent of the kernel interface it drives.
//!
//! A lane owns a [`Ring`] (a submission/completion queue pair) and a [`Staging`] pool, and
//! serves every file opened on its driver. Work arrives through an [`Inbox`]: gather jobs, writes
//! and syncs, each naming its [`LaneFile`], and the registrations of files in the ring's table.
//! The loop is:
//!
//! 1. take new work from the inbox;
//! 2. **fill the window**: while fewer than `depth` operations are in flight, claim the next
//!    extent of an active job (round robin over jobs), lease a staging slot for it and queue its
//!    read; queue pending writes;
//! 3. submit and wait for at least one completion (or a wake-up from the inbox);
//! 4. reap: report each completed read to its job (which copies the rows out), then release the
//!    slot; a job whose extents are all claimed and whose reads have all completed drops the
//!    lane's party handle.
//!
//! So the window refills as each completion arrives; the lane never submits a batch and waits
//! for the whole batch.
//!
//! # The slot state machine
//! A slot is `Free` (in the staging pool), `InFlight` (leased, its read queued to the kernel:
//! the lease lives in `inflight[tag]`), or `Completing` (its completion was reaped; the lease
//! was taken out of `inflight` and the rows are being copied out). Only the end of
//! `Completing`, after the copy-out returned or panicked, drops the lease and makes the slot
//! `Free`. There is no path from `InFlight` to `Free` that does not pass a reaped completion:
//! errors, short reads, copy-out panics and cancelled jobs all go through [`LaneCore::reap`].
//!
//! # Cancellation
//! When a gather ends early (its future dropped, its deadline passed) the job's canceller marks
//! the lane's [`Signal`] and wakes it. The lane stops claiming the job's extents and, where the
//! ring can ([`Ring::can_cancel`]), sends one `ASYNC_CANCEL` per read of the job in flight. A
//! cancelled read still completes (with `ECANCELED`, or with its bytes if it won the race), and
//! only that completion frees its slot, as above. Tags carry a generation beside the table index,
//! so a cancel that arrives late can only miss: it never names a later read that reuses the
//! index.
//!
//! When the lane stops (or its loop unwinds), [`Drop`] waits for every in-flight operation to
//! complete before the staging or the ring can be freed; if the ring can no longer be waited
//! on, the leases are leaked rather than freed.
//!
//! The module is generic over [`Ring`] so the same code runs over io_uring in production and
//! over a simulated kernel under loom (`tests/loom_lane.rs`).

use std::{
    collections::VecDeque,
    io,
    os::fd::RawFd,
    panic::{catch_unwind, AssertUnwindSafe},
    path::{Path, PathBuf},
    sync::{atomic, Arc},
};

use bytes::Bytes;
use eagerio_core::{
    backend::{JobClaims, JobHandle, SlotLease, Staging, SyncOp, WriteEngine, WriteOp},
    fault::{self, Action, Hook, IoKind, IoPoint},
    loom::{lock, AtomicUsize, Mutex, Ordering},
    Error, Op,
};

/// The file an operation targets: its index in the lane's registered file table, if it was
/// given one, and its descriptor, used where the ring has no table entry for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileRef {
    /// Index in every lane's registered file table of the driver.
    pub id: Option<u32>,
    /// The open descriptor.
    pub fd: RawFd,
}

/// One operation for the kernel.
#[derive(Debug, Clone, Copy)]
pub enum Sqe {
    /// Read `len` bytes at `offset` into `ptr`, which lies in staging slot `slot`.
    Read {
        /// Completion tag.
        tag: u64,
        /// The file.
        file: FileRef,
        /// The staging slot holding `ptr`.
        slot: usize,
        /// Destination.
        ptr: *mut u8,
        /// Bytes.
        len: u32,
        /// File offset.
        offset: u64,
    },
    /// Write `len` bytes from `ptr` at `offset`.
    Write {
        /// Completion tag.
        tag: u64,
        /// The file.
        file: FileRef,
        /// Source (owned by the write op until its completion).
        ptr: *const u8,
        /// Bytes.
        len: u32,
        /// File offset.
        offset: u64,
    },
    /// `fdatasync` the file.
    Sync {
        /// Completion tag.
        tag: u64,
        /// The file.
        file: FileRef,
    },
    /// Cancel the operation tagged `target` (`IORING_OP_ASYNC_CANCEL`), if it is still in flight.
    /// Only queued where [`Ring::can_cancel`].
    Cancel {
        /// Completion tag of the cancel itself.
        tag: u64,
        /// The tag of the operation to cancel.
        target: u64,
    },
}

/// The kernel side of a lane: a submission queue, a completion queue and a way to wait.
pub trait Ring {
    /// Queues `sqe`. Returns `false` if the submission queue is full (the caller submits and
    /// retries).
    fn push(&mut self, sqe: Sqe) -> bool;
    /// Submits what was queued and, if `wait`, blocks until at least one completion or a
    /// wake-up from [`Notify::notify`] arrives.
    fn submit_and_wait(&mut self, wait: bool) -> io::Result<()>;
    /// Calls `f(tag, result)` for every completion available now (`result` as the kernel's:
    /// bytes transferred, or a negated errno).
    fn reap(&mut self, f: &mut dyn FnMut(u64, i32));
    /// Puts `file` into the ring's registered file table at its index. Best effort: operations
    /// on a file the table does not hold go by descriptor. The default keeps no table.
    fn register_file(&mut self, file: FileRef) {
        let _ = file;
    }
    /// Clears `file`'s entry from the table (no operation on it is queued or in flight).
    fn forget_file(&mut self, file: FileRef) {
        let _ = file;
    }
    /// Whether the ring takes [`Sqe::Cancel`]. The default cannot: cancelled gathers then only
    /// stop claiming, and their reads in flight run to completion.
    fn can_cancel(&self) -> bool {
        false
    }
}

/// How a lane's users reach its thread: the wake-up, and the flag that some gather on it ended
/// early.
pub struct Signal {
    notify: Box<dyn Notify>,
    cancelled: atomic::AtomicBool,
}

impl Signal {
    /// Some gather of the lane was cancelled or timed out: look for its reads in flight.
    fn cancel(&self) {
        self.cancelled.store(true, atomic::Ordering::Release);
        self.notify.notify();
    }
}

/// Wakes a lane that waits in [`Ring::submit_and_wait`].
pub trait Notify: Send + Sync {
    /// Wakes the lane (idempotent; a wake-up with nothing new is harmless).
    fn notify(&self);
}

/// A file as the lanes see it, shared by every job and write on it.
///
/// The last handle's drop drops the owner given with [`with_owner`](Self::with_owner): the
/// driver's registration, which closes the descriptor and has every lane clear the file's table
/// entry. A lane holds a handle until its last operation on the file has completed, so an entry is
/// never cleared, nor its index reused, under an operation.
pub struct LaneFile {
    file: FileRef,
    align: u64,
    path: PathBuf,
    hook: Option<Hook>,
    /// Staging slots held now by this file's reads, on every lane.
    leased: AtomicUsize,
    _owner: Option<Box<dyn Send + Sync>>,
}

impl LaneFile {
    /// A file reached through `file`, whose reads are continued after a short read only at
    /// multiples of `align`, named `path` in errors, with an optional fault `hook`.
    pub fn new(file: FileRef, align: u64, path: PathBuf, hook: Option<Hook>) -> LaneFile {
        LaneFile { file, align: align.max(1), path, hook, leased: AtomicUsize::new(0), _owner: None }
    }

    /// Keeps `owner` until the last handle is dropped.
    pub fn with_owner(mut self, owner: Box<dyn Send + Sync>) -> LaneFile {
        self._owner = Some(owner);
        self
    }

    /// How the ring reaches the file.
    pub fn file_ref(&self) -> FileRef {
        self.file
    }

    /// The path, for errors.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Staging slots this file's reads hold now, on every lane (0 when nothing of it is in flight).
    pub fn leased(&self) -> usize {
        self.leased.load(Ordering::Acquire)
    }
}

/// The indices of a driver's registered file tables (the same in every lane): each open file takes
/// one, and it comes back once every lane has cleared it ([`Release`]).
#[derive(Debug)]
pub struct FileIds {
    free: std::sync::Mutex<Vec<u32>>,
}

impl FileIds {
    /// `slots` indices, `0..slots`.
    pub fn new(slots: u32) -> FileIds {
        FileIds { free: std::sync::Mutex::new((0..slots).rev().collect()) }
    }

    /// A free index, or `None` when the table is full (the file then goes by descriptor).
    pub fn take(&self) -> Option<u32> {
        self.free.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }

    fn give(&self, id: u32) {
        self.free.lock().unwrap_or_else(|p| p.into_inner()).push(id);
    }
}

/// A closed file's table entry, cleared by every lane: the last lane to clear it gives the index
/// back.
pub struct Release {
    file: FileRef,
    left: atomic::AtomicUsize,
    ids: Arc<FileIds>,
}

impl Release {
    /// The release of `file`'s entry on `lanes` lanes.
    pub fn new(file: FileRef, lanes: usize, ids: Arc<FileIds>) -> Release {
        Release { file, left: atomic::AtomicUsize::new(lanes), ids }
    }

    fn done(&self) {
        if self.left.fetch_sub(1, atomic::Ordering::AcqRel) == 1 {
            if let Some(id) = self.file.id {
                self.ids.give(id);
            }
        }
    }
}

/// A write a lane carries, whatever sink it came from: its bytes, where they go, and how to
/// report it. Every sink's [`WriteOp`] is one, so neither the lane nor the driver that owns it
/// names a writer type (the sink depends on the driver, not the reverse).
pub trait LaneWrite: Send {
    /// Where the bytes go.
    fn offset(&self) -> u64;
    /// The bytes: they stay where they are until [`complete`](Self::complete), so the kernel
    /// may write from them meanwhile.
    fn data(&self) -> &Bytes;
    /// Reports the write's outcome to its sink.
    fn complete(self: Box<Self>, result: io::Result<()>);
}

impl<W: WriteEngine> LaneWrite for WriteOp<W>
where
    WriteOp<W>: Send,
{
    fn offset(&self) -> u64 {
        WriteOp::offset(self)
    }

    fn data(&self) -> &Bytes {
        WriteOp::data(self)
    }

    fn complete(self: Box<Self>, result: io::Result<()>) {
        WriteOp::complete(*self, result)
    }
}

/// A sync a lane carries, whatever sink it came from: see [`LaneWrite`].
pub trait LaneSync: Send {
    /// Reports the sync's outcome to its sink.
    fn complete(self: Box<Self>, result: io::Result<()>);
}

impl<W: WriteEngine> LaneSync for SyncOp<W>
where
    SyncOp<W>: Send,
{
    fn complete(self: Box<Self>, result: io::Result<()>) {
        SyncOp::complete(*self, result)
    }
}

/// Work for a lane.
pub enum Work {
    /// A gather job on a file: the lane holds one party of it.
    Gather(JobHandle, Arc<LaneFile>),
    /// A write to start.
    Write(Box<dyn LaneWrite>, Arc<LaneFile>),
    /// A sync to start.
    Sync(Box<dyn LaneSync>, Arc<LaneFile>),
    /// Put a newly opened file in the ring's file table (queued before any work on it).
    Register(Arc<LaneFile>),
    /// Clear a closed file's table entry.
    Release(Arc<Release>),
}

/// Where the inbox stands.
enum Phase {
    /// Taking work.
    Open,
    /// Told to stop: the lane finishes what it holds and exits.
    Closing,
    /// The lane stopped for good: new work fails at once with this reason.
    Stopped(String),
}

struct InboxState {
    work: VecDeque<Work>,
    phase: Phase,
}

/// The queue between the lane's users and its thread.
pub struct Inbox {
    state: Mutex<InboxState>,
    signal: Arc<Signal>,
    /// Extents of gathers queued or active on this lane (for choosing a lane).
    load: AtomicUsize,
}

impl Inbox {
    /// An empty inbox waking the lane through `notify`.
    pub fn new(notify: Box<dyn Notify>) -> Inbox {
        Inbox {
            state: Mutex::new(InboxState { work: VecDeque::new(), phase: Phase::Open }),
            signal: Arc::new(Signal { notify, cancelled: atomic::AtomicBool::new(false) }),
            load: AtomicUsize::new(0),
        }
    }

    /// Hands `work` to the lane and wakes it.
    pub fn push(&self, work: Work) {
        let mut st = lock(&self.state);
        if let Phase::Stopped(why) = &st.phase {
            let why = why.clone();
            drop(st);
            return stopped(&why, work);
        }
        if let Work::Gather(job, _) = &work {
            self.load.fetch_add(job.plan().extents().len(), Ordering::Relaxed);
            let signal = self.signal.clone();
            job.on_cancel(move || signal.cancel());
        }
        st.work.push_back(work);
        drop(st);
        self.signal.notify.notify();
    }

    /// Marks the lane stopped for good: queued and future work fails with `why`.
    pub fn refuse(&self, why: String) {
        let queued: Vec<_> = {
            let mut st = lock(&self.state);
            st.phase = Phase::Stopped(why.clone());
            st.work.drain(..).collect()
        };
        for w in queued {
            stopped(&why, w);
        }
    }

    /// Tells the lane to stop once everything queued and in flight has completed.
    pub fn close(&self) {
        let mut st = lock(&self.state);
        if let Phase::Open = st.phase {
            st.phase = Phase::Closing;
        }
        drop(st);
        self.signal.notify.notify();
    }

    /// Extents queued or active on this lane.
    pub fn load(&self) -> usize {
        self.load.load(Ordering::Relaxed)
    }
}

struct ActiveJob {
    handle: JobHandle,
    file: Arc<LaneFile>,
    claims: JobClaims,
}

impl ActiveJob {
    /// Whether the job may claim one more read of a window of `depth` shared `share` each: a job
    /// within its share may, and so may one with no more than `depth` extents left to claim. A
    /// small gather beside a large one thus takes the few slots it needs at once instead of being
    /// held to its share and queueing behind the large one's reads; only large gathers share.
    fn may_claim(&self, share: usize, depth: usize) -> bool {
        self.claims.is_claiming() && (self.claims.in_flight() < share || self.is_small(depth))
    }

    /// Whether the job has no more extents left to claim than a window of `depth` holds.
    fn is_small(&self, depth: usize) -> bool {
        self.claims.unclaimed(&self.handle) <= depth
    }
}

/// A read the kernel owns: its slot's lease lives here until the completion is reaped.
struct ReadOp {
    lease: SlotLease,
    job: usize,
    extent: usize,
    offset: u64,
    len: u32,
    /// Bytes read so far (a short read is continued).
    done: u32,
    retries: u8,
}

/// A write the kernel owns: the bytes live in `op` until the completion is reaped.
struct WriteInFlight {
    op: Box<dyn LaneWrite>,
    file: Arc<LaneFile>,
    done: usize,
    retries: u8,
}

enum InFlight {
    Read(ReadOp),
    Write(WriteInFlight),
    Sync(Box<dyn LaneSync>, Arc<LaneFile>),
    /// An `ASYNC_CANCEL`: it owns no buffer; its completion only frees its tag.
    Cancel,
}

/// How a lane runs.
#[derive(Debug, Clone)]
pub struct LaneConfig {
    /// Operations in flight at most.
    pub depth: usize,
    /// The lane's name, for logs.
    pub name: String,
}

const RETRIES: u8 = 8;

/// Completions after the last overlap of gathers during which a share of the window stays free
/// for newcomers (about 8 ms at 60,000 reads per second).
const RESERVE_COMPLETIONS: usize = 512;

/// Newcomers the window keeps room for after an overlap with a small gather (one with no more
/// extents left than the window): a large gather beside small ones then holds a quarter of the
/// window when alone, a fifth beside one other, so the small ones' reads find free slots and a
/// device queue that is not full of the large one's reads. Measured with the `uring_lanes`
/// example's fairness run (100-row gathers beside a 1,000,000-row one, depth 128): room for one
/// newcomer put the small gathers' p99 at 3.4-3.7x their p99 alone, room for two at 2.4-3.2x,
/// room for three at 2.4-2.6x, while the large gather took 38% longer.
const SMALL_NEWCOMERS: usize = 3;

/// The most bytes one `WRITE` asks of the kernel. An SQE's length is 32 bits, and Linux moves at
/// most about 2 GiB in one call anyway; a larger write goes out in pieces of this size, each
/// continuing where the kernel stopped, like a short write.
pub const MAX_WRITE: usize = 1 << 30;

/// The lane: a ring, a staging pool and the operations in flight.
pub struct LaneCore<R: Ring> {
    ring: R,
    staging: Staging,
    inbox: Arc<Inbox>,
    cfg: LaneConfig,
    /// Work taken from the inbox, swapped with its queue so the inbox's lock is held for a swap
    /// only (handling work can drop the last handle of a file, which pushes to the inbox).
    incoming: VecDeque<Work>,
    jobs: Vec<Option<ActiveJob>>,
    next_job: usize,
    writes: VecDeque<Work>,
    inflight: Vec<Option<InFlight>>,
    /// Per `inflight` index, the generation of the tag it holds (see [`tag`](Self::tag)).
    generations: Vec<u32>,
    free_tags: Vec<usize>,
    in_flight: usize,
    /// Completions taken off the ring and not yet handled.
    reaped: VecDeque<(u64, i32)>,
    closed: bool,
    /// Completions left during which the lane keeps a share of its window free for newcomers
    /// (see `fill`); reset to `RESERVE_COMPLETIONS` whenever two or more gathers claim at once.
    reserve_left: usize,
    /// How many newcomers that share is for: 1, or [`SMALL_NEWCOMERS`] when a small gather was
    /// in the last overlap.
    reserve_room: usize,
}

impl<R: Ring> LaneCore<R> {
    /// A lane over `ring` reading into `staging`.
    pub fn new(ring: R, staging: Staging, inbox: Arc<Inbox>, cfg: LaneConfig) -> LaneCore<R> {
        LaneCore {
            ring,
            staging,
            inbox,
            cfg,
            incoming: VecDeque::new(),
            jobs: Vec::new(),
            next_job: 0,
            writes: VecDeque::new(),
            inflight: Vec::new(),
            generations: Vec::new(),
            free_tags: Vec::new(),
            in_flight: 0,
            reaped: VecDeque::new(),
            closed: false,
            reserve_left: 0,
            reserve_room: 1,
        }
    }

    /// Operations the kernel owns now.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Runs until the inbox is closed and everything has completed.
    ///
    /// # Errors
    /// If the ring cannot be waited on; the caller drops the lane, which drains what it can.
    pub fn run(&mut self) -> io::Result<()> {
        loop {
            self.take_inbox()?;
            self.fill()?;
            if self.closed && self.is_idle() {
                return Ok(());
            }
            self.ring.submit_and_wait(true)?;
            self.reap();
        }
    }

    /// One turn without blocking: take work, fill, submit, reap. For tests and models.
    pub fn turn(&mut self, wait: bool) -> io::Result<bool> {
        self.take_inbox()?;
        self.fill()?;
        if self.closed && self.is_idle() {
            return Ok(false);
        }
        self.ring.submit_and_wait(wait && self.in_flight > 0)?;
        self.reap();
        Ok(true)
    }

    fn is_idle(&self) -> bool {
        self.in_flight == 0 && self.writes.is_empty() && self.jobs.iter().all(Option::is_none)
    }

    fn take_inbox(&mut self) -> io::Result<()> {
        {
            let mut st = lock(&self.inbox.state);
            self.closed = !matches!(st.phase, Phase::Open);
            std::mem::swap(&mut st.work, &mut self.incoming);
        }
        if self.inbox.signal.cancelled.swap(false, atomic::Ordering::AcqRel) {
            self.cancel_reads()?;
        }
        while let Some(w) = self.incoming.pop_front() {
            match w {
                Work::Gather(handle, file) => {
                    let job = ActiveJob { handle, file, claims: JobClaims::default() };
                    match self.jobs.iter().position(Option::is_none) {
                        Some(i) => self.jobs[i] = Some(job),
                        None => self.jobs.push(Some(job)),
                    }
                }
                Work::Register(file) => self.ring.register_file(file.file),
                Work::Release(release) => {
                    self.ring.forget_file(release.file);
                    release.done();
                }
                write => self.writes.push_back(write),
            }
        }
        Ok(())
    }

    /// Sends `ASYNC_CANCEL` to every read in flight of the jobs that ended early, once per job.
    /// Their completions come back as usual and free the slots.
    fn cancel_reads(&mut self) -> io::Result<()> {
        let mut ended = vec![false; self.jobs.len()];
        for (j, job) in self.jobs.iter_mut().enumerate() {
            if let Some(job) = job.as_mut().filter(|job| !job.handle.is_live()) {
                ended[j] = job.claims.cancel() && job.claims.in_flight() > 0;
            }
        }
        for j in 0..ended.len() {
            self.retire(j);
        }
        if !self.ring.can_cancel() || !ended.contains(&true) {
            return Ok(());
        }
        let targets: Vec<u64> = (self.inflight.iter().enumerate())
            .filter_map(|(i, op)| match op {
                Some(InFlight::Read(read)) if ended[read.job] => Some(self.tag_of(i)),
                _ => None,
            })
            .collect();
        for target in targets {
            let tag = self.tag(InFlight::Cancel);
            self.push(Sqe::Cancel { tag, target })?;
        }
        Ok(())
    }

    /// The tag of the operation at `inflight[index]`: its generation above the index, so that a
    /// tag names one operation, not every one that reuses the index (`u64::MAX` stays free for
    /// the ring's own use).
    fn tag_of(&self, index: usize) -> u64 {
        (u64::from(self.generations[index]) << 32) | index as u64
    }

    fn tag(&mut self, op: InFlight) -> u64 {
        self.in_flight += 1;
        let index = match self.free_tags.pop() {
            Some(t) => {
                self.inflight[t] = Some(op);
                self.generations[t] = (self.generations[t] + 1) & 0x7fff_ffff;
                t
            }
            None => {
                self.inflight.push(Some(op));
                self.generations.push(0);
                self.inflight.len() - 1
            }
        };
        self.tag_of(index)
    }

    /// Queues `sqe`, submitting first if the queue is full.
    fn push(&mut self, sqe: Sqe) -> io::Result<()> {
        while !self.ring.push(sqe) {
            self.ring.submit_and_wait(false)?;
        }
        Ok(())
    }

    fn fill(&mut self) -> io::Result<()> {
        while self.in_flight < self.cfg.depth {
            let Some(w) = self.writes.pop_front() else { break };
            match w {
                Work::Write(op, file) => {
                    if op.data().is_empty() {
                        op.complete(Ok(()));
                        continue;
                    }
                    let first = write_sqe(&*op, file.file, 0);
                    let tag = self.tag(InFlight::Write(WriteInFlight { op, file, done: 0, retries: 0 }));
                    self.push(with_tag(first, tag))?;
                }
                Work::Sync(op, file) => {
                    let target = file.file;
                    let tag = self.tag(InFlight::Sync(op, file));
                    self.push(Sqe::Sync { tag, file: target })?;
                }
                Work::Gather(..) | Work::Register(_) | Work::Release(_) => {
                    unreachable!("only writes and syncs are queued in `writes`")
                }
            }
        }
        // Round robin over the job slots (indices stay put while the loop runs; `retire` leaves
        // holes), each job up to its share of the window. A gather alone takes the whole window.
        // Once gathers overlap, and for `RESERVE_COMPLETIONS` completions after, the share leaves
        // room for newcomers (one; `SMALL_NEWCOMERS` if a small gather was in the overlap): a
        // newcomer then finds free slots and a device queue that is not full of the large
        // gather's reads, instead of queueing behind them (the tail latency of small gathers
        // beside a large one). Stop once a whole pass over the slots started no read.
        let depth = self.cfg.depth;
        let claiming = self.jobs.iter().flatten().filter(|job| job.claims.is_claiming()).count();
        if claiming >= 2 {
            self.reserve_left = RESERVE_COMPLETIONS;
            let small = self.jobs.iter().flatten().any(|job| job.claims.is_claiming() && job.is_small(depth));
            self.reserve_room = if small { SMALL_NEWCOMERS } else { 1 };
        }
        let sharers = if self.reserve_left > 0 { claiming + self.reserve_room } else { claiming.max(1) };
        let share = self.cfg.depth.div_ceil(sharers);
        let mut stalled = 0;
        while self.in_flight < self.cfg.depth && stalled < self.jobs.len() {
            let j = self.next_job % self.jobs.len();
            self.next_job = self.next_job.wrapping_add(1);
            let Some(job) = self.jobs[j].as_mut().filter(|job| job.may_claim(share, depth)) else {
                stalled += 1;
                continue;
            };
            let Some(mut lease) = self.staging.try_acquire() else { break };
            let Some(extent) = job.claims.claim(&job.handle) else {
                // Free the slot before the job can settle (retiring drops the lane's party).
                drop(lease);
                self.retire(j);
                stalled += 1;
                continue;
            };
            stalled = 0;
            // The job's first read on this lane goes to the kernel alone (below).
            let first = job.claims.claimed() == 1;
            job.file.leased.fetch_add(1, Ordering::AcqRel);
            let file = job.file.file;
            let e = job.handle.plan().extents()[extent];
            if job.handle.plan().extents().get(extent + 1).is_some_and(|n| n.offset == e.offset + e.len as u64) {
                // The job's next read continues this one in the file: it goes next, so the two
                // reach the block layer together and it can merge them (round robin between
                // gathers reading a file's adjacent stretches, as a query engine's row groups
                // are, put other reads between them: 3.5x the device reads for a DataFusion
                // scan). A job never takes more than its share this way.
                self.next_job = j;
            }
            let ptr = lease.as_mut_ptr();
            let slot = lease.index();
            let len = e.len;
            let tag =
                self.tag(InFlight::Read(ReadOp { lease, job: j, extent, offset: e.offset, len, done: 0, retries: 0 }));
            self.push(Sqe::Read { tag, file, slot, ptr, len, offset: e.offset })?;
            if first {
                // A job's first read goes to the kernel alone, ahead of the rest of the window:
                // a device handed a burst of reads may answer none of them until it has served
                // many (on a virtio disk, the first of 128 submitted together came back after
                // 4 ms, a lone one after 0.6 ms), and a streamed gather's first row waits for
                // that answer. One `io_uring_enter` more per gather.
                self.ring.submit_and_wait(false)?;
            }
        }
        if self.jobs.iter().all(Option::is_none) {
            self.jobs.clear();
        }
        Ok(())
    }

    /// Drops the lane's party of job `j` once it has nothing left to claim or complete.
    fn retire(&mut self, j: usize) {
        if let Some(job) = &self.jobs[j] {
            if job.claims.is_drained() {
                self.inbox.load.fetch_sub(job.handle.plan().extents().len(), Ordering::Relaxed);
                // Out of the table first: dropping the handle may settle the job and run the
                // user's waker, and the lane's state must be whole whatever that does.
                let job = self.jobs[j].take();
                drop(job);
            }
        }
    }

    /// Reaps every available completion and handles it.
    pub fn reap(&mut self) {
        let reaped = &mut self.reaped;
        self.ring.reap(&mut |tag, res| reaped.push_back((tag, res)));
        self.handle_reaped();
    }

    /// Handles the completions taken off the ring, one at a time. The lane's own bookkeeping for
    /// an operation (its tag, the in-flight count, the job's count) is done before any code
    /// outside the lane runs (a hook, the copy-out, a user's waker), and a panic from that code
    /// is caught here and logged: the lane goes on, and it never waits for a completion it has
    /// already taken off the ring.
    fn handle_reaped(&mut self) {
        while let Some((tag, res)) = self.reaped.pop_front() {
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| self.complete(tag, res))) {
                tracing::error!(lane = %self.cfg.name, panic = %eagerio_core::error::panic_message(&*payload),
                    "a panic while handling an io_uring completion was caught; the lane goes on");
            }
        }
    }

    fn complete(&mut self, tag: u64, res: i32) {
        let index = (tag & 0xffff_ffff) as usize;
        assert_eq!(self.tag_of(index), tag, "a completion for an operation in flight");
        let op = self.inflight[index].take().expect("a completion for an operation in flight");
        self.in_flight -= 1;
        self.free_tags.push(index);
        if !matches!(op, InFlight::Cancel) {
            self.reserve_left = self.reserve_left.saturating_sub(1);
        }
        match op {
            InFlight::Read(read) => self.complete_read(read, res),
            InFlight::Write(write) => self.complete_write(write, res),
            InFlight::Sync(op, file) => {
                let result = if res < 0 { Err(io::Error::from_raw_os_error(-res)) } else { Ok(()) };
                let point = IoPoint { kind: IoKind::Sync, offset: 0, len: 0 };
                op.complete(fault::failure(file.hook.as_ref(), point).and(result));
            }
            // 0 (cancelled), -ENOENT (already completed) or -EALREADY (running, will complete).
            InFlight::Cancel => {}
        }
    }

    /// A read's completion: continue a short read or retry `EAGAIN`, else hand the bytes (or
    /// the error) to the job, then free the slot.
    fn complete_read(&mut self, mut read: ReadOp, res: i32) {
        let retry = (res == -libc::EAGAIN || res == -libc::EINTR) && read.retries < RETRIES;
        if res > 0 {
            read.done += res as u32;
        } else if retry {
            read.retries += 1;
        }
        let at = read.offset + u64::from(read.done);
        let active = self.jobs[read.job].as_mut().expect("a read's job is active");
        let short = res > 0 && read.done < read.len && at % active.file.align == 0;
        if (short || retry) && active.handle.is_live() {
            // Not at the end of the file: continue where the kernel stopped.
            let file = active.file.file;
            let ptr = read.lease.as_mut_ptr().wrapping_add(read.done as usize);
            let (slot, len) = (read.lease.index(), read.len - read.done);
            let tag = self.tag(InFlight::Read(read));
            return self.push_or_fail(Sqe::Read { tag, file, slot, ptr, len, offset: at }, tag);
        }
        let ReadOp { lease, job, extent, offset, len, done, .. } = read;
        let mut result = if res < 0 { Err(io::Error::from_raw_os_error(-res)) } else { Ok(done as usize) };
        let point = IoPoint { kind: IoKind::Read, offset, len: len as usize };
        // The lease is `Completing`: the kernel is done with the slot. It is dropped (and the
        // slot freed) only after the copy-out below, whether it returns or panics.
        let copied = catch_unwind(AssertUnwindSafe(|| {
            if let Some(h) = &active.file.hook {
                result = apply(h.check(point), result);
                h.check(IoPoint { kind: IoKind::CopyOut, ..point });
            }
            lease.with(|buf| active.handle.complete(extent, buf, result));
        }));
        if let Err(payload) = copied {
            active.handle.fail_panicked(extent, &*payload);
        }
        drop(lease);
        active.file.leased.fetch_sub(1, Ordering::AcqRel);
        active.claims.completed(&active.handle);
        self.retire(job);
    }

    /// A write's completion: continue a short write or retry `EAGAIN`, else complete the op.
    fn complete_write(&mut self, mut write: WriteInFlight, res: i32) {
        let len = write.op.data().len();
        let retry = (res == -libc::EAGAIN || res == -libc::EINTR) && write.retries < RETRIES;
        if (res > 0 && write.done + (res as usize) < len) || retry {
            if res > 0 {
                write.done += res as usize;
            } else {
                write.retries += 1;
            }
            let sqe = write_sqe(&*write.op, write.file.file, write.done);
            let tag = self.tag(InFlight::Write(write));
            return self.push_or_fail(with_tag(sqe, tag), tag);
        }
        let WriteInFlight { op, file, done, .. } = write;
        let short = |n: usize| io::Error::new(io::ErrorKind::WriteZero, format!("short write: {n} of {len} bytes"));
        let result = match res {
            r if r < 0 => Err(io::Error::from_raw_os_error(-r)),
            0 => Err(short(done)),
            _ => Ok(()),
        };
        let point = IoPoint { kind: IoKind::Write, offset: op.offset(), len };
        let result = match fault::failure(file.hook.as_ref(), point) {
            Err(e) => Err(e),
            Ok(cap) if cap < len => Err(short(cap)),
            Ok(_) => result,
        };
        op.complete(result);
    }

    /// Queues a continuation; if the ring can no longer take it, completes it as failed.
    fn push_or_fail(&mut self, sqe: Sqe, tag: u64) {
        if let Err(e) = self.push(sqe) {
            self.complete(tag, -e.raw_os_error().unwrap_or(libc::EIO));
        }
    }

    /// Waits for every operation the kernel still owns. Returns `false` if the ring failed
    /// first (the remaining leases are then leaked, never freed).
    pub fn drain(&mut self) -> bool {
        self.handle_reaped();
        while self.in_flight > 0 {
            if let Err(e) = self.ring.submit_and_wait(true) {
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                tracing::error!(lane = %self.cfg.name, error = %e, in_flight = self.in_flight,
                    "io_uring lane cannot wait for its in-flight reads; leaking their buffers");
                for op in self.inflight.drain(..).flatten() {
                    std::mem::forget(op);
                }
                self.in_flight = 0;
                return false;
            }
            self.reap();
        }
        true
    }
}

impl<R: Ring> LaneCore<R> {
    /// After the loop failed: waits for the kernel, then fails every job and write it held.
    pub fn abandon(&mut self, why: &str) {
        self.drain();
        for job in self.jobs.drain(..).flatten() {
            stopped(why, Work::Gather(job.handle, job.file));
        }
        for w in self.writes.drain(..) {
            stopped(why, w);
        }
    }
}

/// Fails work handed to a lane that has stopped.
fn stopped(why: &str, work: Work) {
    let source = io::Error::other(why.to_string());
    match work {
        Work::Gather(job, file) => {
            job.fail(Error::Io { op: Op::Read, path: file.path.clone(), offset: None, target: None, source })
        }
        Work::Write(op, _) => op.complete(Err(source)),
        Work::Sync(op, _) => op.complete(Err(source)),
        Work::Register(_) => {}
        Work::Release(release) => release.done(),
    }
}

impl<R: Ring> Drop for LaneCore<R> {
    fn drop(&mut self) {
        // Whatever the reason the lane stops (closed inbox, ring error, a panic unwinding through
        // `run`), the kernel's operations complete before the staging or the ring is freed.
        self.drain();
    }
}

fn with_tag(sqe: Sqe, tag: u64) -> Sqe {
    match sqe {
        Sqe::Read { file, slot, ptr, len, offset, .. } => Sqe::Read { tag, file, slot, ptr, len, offset },
        Sqe::Write { file, ptr, len, offset, .. } => Sqe::Write { tag, file, ptr, len, offset },
        Sqe::Sync { file, .. } => Sqe::Sync { tag, file },
        Sqe::Cancel { target, .. } => Sqe::Cancel { tag, target },
    }
}

/// The `WRITE` of `op`'s bytes from `done` on: at most [`MAX_WRITE`] of them (tag 0, for
/// [`with_tag`]).
fn write_sqe(op: &dyn LaneWrite, file: FileRef, done: usize) -> Sqe {
    let rest = &op.data()[done..];
    let len = rest.len().min(MAX_WRITE) as u32;
    Sqe::Write { tag: 0, file, ptr: rest.as_ptr(), len, offset: op.offset() + done as u64 }
}

/// Applies a hook's verdict to a completed read.
fn apply(action: Action, result: io::Result<usize>) -> io::Result<usize> {
    match action {
        Action::Proceed => result,
        Action::Fail(e) => Err(e),
        Action::Short(n) => result.map(|got| got.min(n)),
        Action::Panic => panic!("injected panic in a read completion"),
    }
}
