//! The lane's state machine, independent of the kernel interface it drives.
//!
//! A lane owns a [`Ring`] (a submission/completion queue pair) and a [`Staging`] pool. Work
//! arrives through an [`Inbox`]: gather jobs, writes and syncs. The loop is:
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
//! When the lane stops (or its loop unwinds), [`Drop`] waits for every in-flight operation to
//! complete before the staging or the ring can be freed; if the ring can no longer be waited
//! on, the leases are leaked rather than freed.
//!
//! The module is generic over [`Ring`] so the same code runs over io_uring in production and
//! over a simulated kernel under loom (`tests/loom_lane.rs`).

use std::{
    collections::VecDeque,
    io,
    panic::{catch_unwind, AssertUnwindSafe},
    path::PathBuf,
    sync::Arc,
};

use eagerio_core::{
    fault::{self, Action, Hook, IoKind, IoPoint},
    loom::{lock, AtomicUsize, Mutex, Ordering},
    Error, JobHandle, Op, SlotLease, Staging, SyncOp, WriteEngine, WriteOp,
};

/// One operation for the kernel.
#[derive(Debug, Clone, Copy)]
pub enum Sqe {
    /// Read `len` bytes at `offset` into `ptr`, which lies in staging slot `slot`.
    Read {
        /// Completion tag.
        tag: u64,
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
}

/// Wakes a lane that waits in [`Ring::submit_and_wait`].
pub trait Notify: Send + Sync {
    /// Wakes the lane (idempotent; a wake-up with nothing new is harmless).
    fn notify(&self);
}

/// Work for a lane.
pub enum Work<W: WriteEngine> {
    /// A gather job: the lane holds one party of it.
    Gather(JobHandle),
    /// A write to start.
    Write(WriteOp<W>),
    /// A sync to start.
    Sync(SyncOp<W>),
}

struct InboxState<W: WriteEngine> {
    work: VecDeque<Work<W>>,
    closed: bool,
    /// Set when the lane stopped for good: new work fails at once with this reason.
    dead: Option<String>,
}

/// The queue between the lane's users and its thread.
pub struct Inbox<W: WriteEngine> {
    state: Mutex<InboxState<W>>,
    notify: Box<dyn Notify>,
    path: PathBuf,
    /// Extents of gathers queued or active on this lane (for choosing a lane).
    load: AtomicUsize,
}

impl<W: WriteEngine> Inbox<W> {
    /// An empty inbox waking the lane through `notify`.
    pub fn new(notify: Box<dyn Notify>, path: PathBuf) -> Inbox<W> {
        Inbox {
            state: Mutex::new(InboxState { work: VecDeque::new(), closed: false, dead: None }),
            notify,
            path,
            load: AtomicUsize::new(0),
        }
    }

    /// Hands `work` to the lane and wakes it.
    pub fn push(&self, work: Work<W>) {
        let mut st = lock(&self.state);
        if let Some(why) = &st.dead {
            let why = why.clone();
            drop(st);
            return stopped(&self.path, &why, work);
        }
        if let Work::Gather(job) = &work {
            self.load.fetch_add(job.plan().extents().len(), Ordering::Relaxed);
        }
        st.work.push_back(work);
        drop(st);
        self.notify.notify();
    }

    /// Marks the lane stopped for good: queued and future work fails with `why`.
    pub fn refuse(&self, why: String) {
        let queued: Vec<_> = {
            let mut st = lock(&self.state);
            st.dead = Some(why.clone());
            st.work.drain(..).collect()
        };
        for w in queued {
            stopped(&self.path, &why, w);
        }
    }

    /// Tells the lane to stop once everything queued and in flight has completed.
    pub fn close(&self) {
        lock(&self.state).closed = true;
        self.notify.notify();
    }

    /// Extents queued or active on this lane.
    pub fn load(&self) -> usize {
        self.load.load(Ordering::Relaxed)
    }
}

struct ActiveJob {
    handle: JobHandle,
    /// No extent left to claim (all claimed, or the job was cancelled or failed).
    exhausted: bool,
    in_flight: usize,
    extents: usize,
}

enum InFlight<W: WriteEngine> {
    Read { lease: SlotLease, job: usize, extent: usize, offset: u64, len: u32, done: u32, retries: u8 },
    Write { op: WriteOp<W>, done: usize, retries: u8 },
    Sync { op: SyncOp<W> },
}

/// What a lane needs to know about its file.
#[derive(Debug, Clone)]
pub struct LaneConfig {
    /// Operations in flight at most.
    pub depth: usize,
    /// Read alignment (a short read is continued only at an aligned offset).
    pub align: u64,
    /// For error messages.
    pub path: PathBuf,
    /// Fault hook, evaluated on each completion.
    pub hook: Option<Hook>,
}

const RETRIES: u8 = 8;

/// The most bytes one `WRITE` asks of the kernel. An SQE's length is 32 bits, and Linux moves at
/// most about 2 GiB in one call anyway; a larger write goes out in pieces of this size, each
/// continuing where the kernel stopped, like a short write.
pub const MAX_WRITE: usize = 1 << 30;

/// The lane: a ring, a staging pool and the operations in flight.
pub struct LaneCore<R: Ring, W: WriteEngine> {
    ring: R,
    staging: Staging,
    inbox: Arc<Inbox<W>>,
    cfg: LaneConfig,
    jobs: Vec<Option<ActiveJob>>,
    next_job: usize,
    writes: VecDeque<Work<W>>,
    inflight: Vec<Option<InFlight<W>>>,
    free_tags: Vec<usize>,
    in_flight: usize,
    /// Completions taken off the ring and not yet handled.
    reaped: VecDeque<(u64, i32)>,
    closed: bool,
}

impl<R: Ring, W: WriteEngine> LaneCore<R, W> {
    /// A lane over `ring` reading into `staging`.
    pub fn new(ring: R, staging: Staging, inbox: Arc<Inbox<W>>, cfg: LaneConfig) -> LaneCore<R, W> {
        LaneCore {
            ring,
            staging,
            inbox,
            cfg,
            jobs: Vec::new(),
            next_job: 0,
            writes: VecDeque::new(),
            inflight: Vec::new(),
            free_tags: Vec::new(),
            in_flight: 0,
            reaped: VecDeque::new(),
            closed: false,
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
            self.take_inbox();
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
        self.take_inbox();
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

    fn take_inbox(&mut self) {
        let mut st = lock(&self.inbox.state);
        self.closed = st.closed;
        for w in st.work.drain(..) {
            match w {
                Work::Gather(handle) => {
                    let extents = handle.plan().extents().len();
                    let job = ActiveJob { handle, exhausted: false, in_flight: 0, extents };
                    match self.jobs.iter().position(Option::is_none) {
                        Some(i) => self.jobs[i] = Some(job),
                        None => self.jobs.push(Some(job)),
                    }
                }
                other => self.writes.push_back(other),
            }
        }
    }

    fn tag(&mut self, op: InFlight<W>) -> u64 {
        self.in_flight += 1;
        match self.free_tags.pop() {
            Some(t) => {
                self.inflight[t] = Some(op);
                t as u64
            }
            None => {
                self.inflight.push(Some(op));
                (self.inflight.len() - 1) as u64
            }
        }
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
                Work::Write(op) => {
                    if op.data().is_empty() {
                        op.complete(Ok(()));
                        continue;
                    }
                    let first = write_sqe(&op, 0);
                    let tag = self.tag(InFlight::Write { op, done: 0, retries: 0 });
                    self.push(with_tag(first, tag))?;
                }
                Work::Sync(op) => {
                    let tag = self.tag(InFlight::Sync { op });
                    self.push(Sqe::Sync { tag })?;
                }
                Work::Gather(_) => unreachable!("gathers are kept in `jobs`"),
            }
        }
        // Round robin over the job slots (indices stay put while the loop runs; `retire` leaves
        // holes). Stop once a whole pass over the slots started no read.
        let mut stalled = 0;
        while self.in_flight < self.cfg.depth && stalled < self.jobs.len() {
            let j = self.next_job % self.jobs.len();
            self.next_job = self.next_job.wrapping_add(1);
            let Some(job) = self.jobs[j].as_mut().filter(|job| !job.exhausted) else {
                stalled += 1;
                continue;
            };
            let Some(mut lease) = self.staging.try_acquire() else { break };
            let Some(extent) = job.handle.next_extent() else {
                // Free the slot before the job can settle (retiring drops the lane's party).
                drop(lease);
                job.exhausted = true;
                self.retire(j);
                stalled += 1;
                continue;
            };
            stalled = 0;
            job.in_flight += 1;
            let e = job.handle.plan().extents()[extent];
            let ptr = lease.as_mut_ptr();
            let slot = lease.index();
            let len = e.len;
            let tag = self.tag(InFlight::Read { lease, job: j, extent, offset: e.offset, len, done: 0, retries: 0 });
            self.push(Sqe::Read { tag, slot, ptr, len, offset: e.offset })?;
        }
        if self.jobs.iter().all(Option::is_none) {
            self.jobs.clear();
        }
        Ok(())
    }

    /// Drops the lane's party of job `j` once it has nothing left to claim or complete.
    fn retire(&mut self, j: usize) {
        if let Some(job) = &self.jobs[j] {
            if job.exhausted && job.in_flight == 0 {
                self.inbox.load.fetch_sub(job.extents, Ordering::Relaxed);
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
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| self.complete(tag as usize, res))) {
                tracing::error!(path = %self.cfg.path.display(), panic = %eagerio_core::error::panic_message(&*payload),
                    "a panic while handling an io_uring completion was caught; the lane goes on");
            }
        }
    }

    fn complete(&mut self, tag: usize, res: i32) {
        let op = self.inflight[tag].take().expect("a completion for an operation in flight");
        self.in_flight -= 1;
        self.free_tags.push(tag);
        match op {
            InFlight::Read { mut lease, job, extent, offset, len, mut done, mut retries } => {
                if res > 0 {
                    done += res as u32;
                    let at = offset + u64::from(done);
                    if done < len && at % self.cfg.align == 0 {
                        // A short read that is not at the end of the file: continue it.
                        let ptr = lease.as_mut_ptr().wrapping_add(done as usize);
                        let slot = lease.index();
                        let rest = len - done;
                        let tag = self.tag(InFlight::Read { lease, job, extent, offset, len, done, retries });
                        return self.push_or_fail(Sqe::Read { tag, slot, ptr, len: rest, offset: at }, tag);
                    }
                } else if (res == -libc::EAGAIN || res == -libc::EINTR) && retries < RETRIES {
                    retries += 1;
                    let at = offset + u64::from(done);
                    let ptr = lease.as_mut_ptr().wrapping_add(done as usize);
                    let slot = lease.index();
                    let tag = self.tag(InFlight::Read { lease, job, extent, offset, len, done, retries });
                    return self.push_or_fail(Sqe::Read { tag, slot, ptr, len: len - done, offset: at }, tag);
                }
                let mut result = if res < 0 { Err(io::Error::from_raw_os_error(-res)) } else { Ok(done as usize) };
                let point = IoPoint { kind: IoKind::Read, offset, len: len as usize };
                let hook = self.cfg.hook.as_ref();
                let active = self.jobs[job].as_mut().expect("a read's job is active");
                // The lease is `Completing`: the kernel is done with the slot. It is dropped (and
                // the slot freed) only after the copy-out below, whether it returns or panics.
                let copied = catch_unwind(AssertUnwindSafe(|| {
                    if let Some(h) = hook {
                        result = apply(h.check(point), result);
                        h.check(IoPoint { kind: IoKind::CopyOut, ..point });
                    }
                    lease.with(|buf| active.handle.complete(extent, buf, result));
                }));
                if let Err(payload) = copied {
                    active.handle.fail_panicked(extent, &*payload);
                }
                drop(lease);
                active.in_flight -= 1;
                if !active.handle.is_live() {
                    active.exhausted = true;
                }
                self.retire(job);
            }
            InFlight::Write { op, mut done, mut retries } => {
                let len = op.data().len();
                if res > 0 && done + (res as usize) < len {
                    done += res as usize;
                    return self.continue_write(op, done, retries);
                }
                if (res == -libc::EAGAIN || res == -libc::EINTR) && retries < RETRIES {
                    retries += 1;
                    return self.continue_write(op, done, retries);
                }
                let short =
                    |n: usize| io::Error::new(io::ErrorKind::WriteZero, format!("short write: {n} of {len} bytes"));
                let result = match res {
                    r if r < 0 => Err(io::Error::from_raw_os_error(-r)),
                    0 => Err(short(done)),
                    _ => Ok(()),
                };
                let point = IoPoint { kind: IoKind::Write, offset: op.offset(), len };
                let result = match fault::failure(self.cfg.hook.as_ref(), point) {
                    Err(e) => Err(e),
                    Ok(cap) if cap < len => Err(short(cap)),
                    Ok(_) => result,
                };
                op.complete(result);
            }
            InFlight::Sync { op } => {
                let result = if res < 0 { Err(io::Error::from_raw_os_error(-res)) } else { Ok(()) };
                let point = IoPoint { kind: IoKind::Sync, offset: 0, len: 0 };
                op.complete(fault::failure(self.cfg.hook.as_ref(), point).and(result));
            }
        }
    }

    fn continue_write(&mut self, op: WriteOp<W>, done: usize, retries: u8) {
        let sqe = write_sqe(&op, done);
        let tag = self.tag(InFlight::Write { op, done, retries });
        self.push_or_fail(with_tag(sqe, tag), tag);
    }

    /// Queues a continuation; if the ring can no longer take it, completes it as failed.
    fn push_or_fail(&mut self, sqe: Sqe, tag: u64) {
        if let Err(e) = self.push(sqe) {
            self.complete(tag as usize, -e.raw_os_error().unwrap_or(libc::EIO));
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
                tracing::error!(path = %self.cfg.path.display(), error = %e, in_flight = self.in_flight,
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

impl<R: Ring, W: WriteEngine> LaneCore<R, W> {
    /// After the loop failed: waits for the kernel, then fails every job and write it held.
    pub fn abandon(&mut self, why: &str) {
        self.drain();
        for job in self.jobs.drain(..).flatten() {
            stopped::<W>(&self.cfg.path, why, Work::Gather(job.handle));
        }
        for w in self.writes.drain(..) {
            stopped(&self.cfg.path, why, w);
        }
    }
}

/// Fails work handed to a lane that has stopped.
fn stopped<W: WriteEngine>(path: &std::path::Path, why: &str, work: Work<W>) {
    let source = io::Error::other(why.to_string());
    match work {
        Work::Gather(job) => {
            job.fail(Error::Io { op: Op::Read, path: path.to_path_buf(), offset: None, target: None, source })
        }
        Work::Write(op) => op.complete(Err(source)),
        Work::Sync(op) => op.complete(Err(source)),
    }
}

impl<R: Ring, W: WriteEngine> Drop for LaneCore<R, W> {
    fn drop(&mut self) {
        // Whatever the reason the lane stops (closed inbox, ring error, a panic unwinding through
        // `run`), the kernel's operations complete before the staging or the ring is freed.
        self.drain();
    }
}

fn with_tag(sqe: Sqe, tag: u64) -> Sqe {
    match sqe {
        Sqe::Read { slot, ptr, len, offset, .. } => Sqe::Read { tag, slot, ptr, len, offset },
        Sqe::Write { ptr, len, offset, .. } => Sqe::Write { tag, ptr, len, offset },
        Sqe::Sync { .. } => Sqe::Sync { tag },
    }
}

/// The `WRITE` of `op`'s bytes from `done` on: at most [`MAX_WRITE`] of them (tag 0, for
/// [`with_tag`]).
fn write_sqe<W: WriteEngine>(op: &WriteOp<W>, done: usize) -> Sqe {
    let rest = &op.data()[done..];
    Sqe::Write { tag: 0, ptr: rest.as_ptr(), len: rest.len().min(MAX_WRITE) as u32, offset: op.offset() + done as u64 }
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
