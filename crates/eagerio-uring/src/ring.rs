//! The lane's ring over the `io-uring` crate: setup with the chosen flags, opcode probe, buffer
//! registration, the sparse registered file table, and the eventfd the lane sleeps on between
//! gathers.

use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::Arc,
};

use io_uring::{cqueue, opcode, squeue, types, IoUring, Probe};

use crate::lane::{FileRef, Notify, Ring, Sqe};

/// Ring setup flags. Each is tried and dropped (with a log line) if the kernel refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetupFlags {
    /// `IORING_SETUP_COOP_TASKRUN`: no inter-processor interrupt to run completion work; it runs
    /// when the lane next enters the kernel, which it does anyway.
    pub coop_taskrun: bool,
    /// `IORING_SETUP_SINGLE_ISSUER`: only the lane's thread submits (true by construction).
    pub single_issuer: bool,
    /// `IORING_SETUP_DEFER_TASKRUN` (needs `single_issuer`): completion work runs only when the
    /// lane waits for completions.
    pub defer_taskrun: bool,
}

impl SetupFlags {
    /// No flags: the plain setup.
    pub const PLAIN: SetupFlags = SetupFlags { coop_taskrun: false, single_issuer: false, defer_taskrun: false };
}

impl Default for SetupFlags {
    /// `COOP_TASKRUN | SINGLE_ISSUER`: see the crate docs for the measurement behind it.
    fn default() -> Self {
        SetupFlags { coop_taskrun: true, single_issuer: true, defer_taskrun: false }
    }
}

/// How a lane ended up reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `READ_FIXED` into staging registered with `io_uring_register_buffers`.
    Registered,
    /// Plain `READ` into the same staging (registration was refused or not wanted).
    Unregistered,
    /// No ring: the gathers run on the tokio backend.
    Tokio,
}

const WAKE: u64 = u64::MAX;

/// A lane's ring.
pub struct UringRing {
    ring: IoUring<squeue::Entry, cqueue::Entry>,
    /// Which indices of the sparse file table hold a file now (empty if the kernel refused the
    /// table: every operation then goes by descriptor).
    fixed: Vec<bool>,
    registered_buffers: bool,
    eventfd: Arc<OwnedFd>,
    wake_buf: Box<u64>,
    wake_armed: bool,
    /// The kernel has `IORING_OP_ASYNC_CANCEL`.
    can_cancel: bool,
}

/// What the setup gives back besides the ring.
#[derive(Debug)]
pub struct RingSetup {
    /// How reads are issued.
    pub mode: Mode,
    /// Why the lane reads unregistered, if it does.
    pub reason: Option<String>,
    /// The flags the ring was built with.
    pub flags: SetupFlags,
}

/// Why a ring could not be had at all.
#[derive(Debug)]
pub struct Refused {
    /// What failed.
    pub what: &'static str,
    /// The error.
    pub source: io::Error,
}

impl UringRing {
    /// Builds a ring of at least `depth + 1` entries on the calling thread (which must be the
    /// lane's thread when `single_issuer` is set), probes the opcodes, registers a sparse file
    /// table of `files` entries and, if `register` and `staging` are given, the staging region.
    ///
    /// # Errors
    /// [`Refused`] if the ring cannot be set up or lacks an opcode the lane needs.
    pub fn new(
        depth: usize,
        flags: SetupFlags,
        files: u32,
        staging: Option<(*mut u8, usize)>,
        register: bool,
    ) -> Result<(UringRing, RingSetup), Refused> {
        let entries = (depth + 1).next_power_of_two().min(32768) as u32;
        let (ring, flags) = build(entries, flags)?;
        let mut probe = Probe::new();
        ring.submitter().register_probe(&mut probe).map_err(|source| Refused { what: "probe", source })?;
        for (code, name) in
            [(opcode::Read::CODE, "READ"), (opcode::Write::CODE, "WRITE"), (opcode::Fsync::CODE, "FSYNC")]
        {
            if !probe.is_supported(code) {
                return Err(Refused { what: name, source: io::Error::from_raw_os_error(libc::EOPNOTSUPP) });
            }
        }
        let fixed = match ring.submitter().register_files_sparse(files) {
            Ok(()) => vec![false; files as usize],
            Err(e) => {
                tracing::info!(error = %e, files, "io_uring: the file table was refused; using descriptors");
                Vec::new()
            }
        };
        let mut reason = None;
        let mut registered_buffers = false;
        if let Some((ptr, len)) = staging {
            if !register {
                reason = Some("registered buffers turned off by the options".to_string());
            } else if !probe.is_supported(opcode::ReadFixed::CODE) {
                reason = Some("the kernel lacks READ_FIXED".to_string());
            } else {
                let iov = libc::iovec { iov_base: ptr.cast(), iov_len: len };
                // SAFETY: the region stays allocated for the ring's life: the lane owns the
                // staging pool and drops it only after the ring (field order in the lane) and
                // after every read into it completed.
                match unsafe { ring.submitter().register_buffers(&[iov]) } {
                    Ok(()) => registered_buffers = true,
                    Err(e) => {
                        let r = format!(
                            "register_buffers of {len} bytes refused ({e}); RLIMIT_MEMLOCK is {} bytes: raise it \
                             (ulimit -l, LimitMEMLOCK=) or lower DriverOptions::staging_bytes",
                            memlock_limit()
                        );
                        tracing::warn!(reason = %r, "io_uring: falling back to unregistered buffers");
                        reason = Some(r);
                    }
                }
            }
        }
        // SAFETY: eventfd returns a new descriptor or -1.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(Refused { what: "eventfd", source: io::Error::last_os_error() });
        }
        // SAFETY: `efd` is a fresh descriptor nobody else owns.
        let eventfd = Arc::new(unsafe { OwnedFd::from_raw_fd(efd) });
        let mode = if registered_buffers { Mode::Registered } else { Mode::Unregistered };
        let can_cancel = probe.is_supported(opcode::AsyncCancel::CODE);
        let ring = UringRing {
            ring,
            fixed,
            registered_buffers,
            eventfd,
            wake_buf: Box::new(0),
            wake_armed: false,
            can_cancel,
        };
        Ok((ring, RingSetup { mode, reason, flags }))
    }

    /// The handle that wakes this ring's lane.
    pub fn notifier(&self) -> EventFd {
        EventFd(self.eventfd.clone())
    }

    fn arm_wake(&mut self) -> bool {
        if self.wake_armed {
            return true;
        }
        let e = opcode::Read::new(types::Fd(self.eventfd.as_raw_fd()), (&mut *self.wake_buf as *mut u64).cast(), 8)
            .build()
            .user_data(WAKE);
        // SAFETY: `wake_buf` lives as long as the ring and is read back only after the wake
        // read's completion (or in `Drop`, after draining it).
        if unsafe { self.ring.submission().push(&e) }.is_ok() {
            self.wake_armed = true;
        }
        self.wake_armed
    }
}

fn build(entries: u32, flags: SetupFlags) -> Result<(IoUring, SetupFlags), Refused> {
    let attempt = |f: SetupFlags| {
        let mut b = IoUring::builder();
        if f.coop_taskrun {
            b.setup_coop_taskrun();
        }
        if f.single_issuer {
            b.setup_single_issuer();
        }
        if f.defer_taskrun {
            b.setup_defer_taskrun();
        }
        b.setup_cqsize(entries * 2).build(entries)
    };
    match attempt(flags) {
        Ok(r) => Ok((r, flags)),
        Err(e) if flags != SetupFlags::PLAIN && e.raw_os_error() == Some(libc::EINVAL) => {
            tracing::info!(?flags, "io_uring: setup flags refused (EINVAL); using the plain setup");
            attempt(SetupFlags::PLAIN)
                .map(|r| (r, SetupFlags::PLAIN))
                .map_err(|source| Refused { what: "io_uring_setup", source })
        }
        Err(source) => Err(Refused { what: "io_uring_setup", source }),
    }
}

/// The soft `RLIMIT_MEMLOCK`, in bytes.
pub fn memlock_limit() -> u64 {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `r` is a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } == 0 {
        r.rlim_cur
    } else {
        0
    }
}

/// Builds an entry on `file`: by its index in the registered table where the ring holds it,
/// else by descriptor (`types::Fixed` and `types::Fd` are distinct types, hence a macro).
macro_rules! on_file {
    ($ring:expr, $file:expr, |$target:ident| $build:expr) => {
        match $ring.table_index($file) {
            Some(id) => {
                let $target = types::Fixed(id);
                $build
            }
            None => {
                let $target = types::Fd($file.fd);
                $build
            }
        }
    };
}

impl UringRing {
    fn table_index(&self, file: FileRef) -> Option<u32> {
        file.id.filter(|&id| self.fixed.get(id as usize).copied().unwrap_or(false))
    }

    fn update_table(&mut self, id: u32, fd: i32) -> io::Result<()> {
        self.ring.submitter().register_files_update(id, &[fd]).map(|_| ())
    }
}

impl Ring for UringRing {
    fn push(&mut self, sqe: Sqe) -> bool {
        let e = match sqe {
            Sqe::Read { tag, file, ptr, len, offset, .. } => if self.registered_buffers {
                on_file!(self, file, |t| opcode::ReadFixed::new(t, ptr, len, 0).offset(offset).build())
            } else {
                on_file!(self, file, |t| opcode::Read::new(t, ptr, len).offset(offset).build())
            }
            .user_data(tag),
            Sqe::Write { tag, file, ptr, len, offset } => {
                on_file!(self, file, |t| opcode::Write::new(t, ptr, len).offset(offset).build()).user_data(tag)
            }
            Sqe::Sync { tag, file } => {
                on_file!(self, file, |t| opcode::Fsync::new(t).flags(types::FsyncFlags::DATASYNC).build())
                    .user_data(tag)
            }
            Sqe::Cancel { tag, target } => opcode::AsyncCancel::new(target).build().user_data(tag),
        };
        // SAFETY: the buffers an entry names stay valid until its completion is reaped: reads
        // target a staging slot whose lease the lane keeps in its in-flight table, writes the
        // data of a `WriteOp` kept there too (see `lane`). A registered read's range lies in the
        // registered region (buffer index 0): staging slots are inside it. A fixed file index
        // names a file the lane registered and clears only once nothing on it is queued.
        unsafe { self.ring.submission().push(&e) }.is_ok()
    }

    fn register_file(&mut self, file: FileRef) {
        let Some(id) = file.id.filter(|&id| (id as usize) < self.fixed.len()) else { return };
        match self.update_table(id, file.fd) {
            Ok(()) => self.fixed[id as usize] = true,
            Err(e) => tracing::debug!(error = %e, id, "io_uring: file not registered; using its descriptor"),
        }
    }

    fn can_cancel(&self) -> bool {
        self.can_cancel
    }

    fn forget_file(&mut self, file: FileRef) {
        let Some(id) = self.table_index(file) else { return };
        self.fixed[id as usize] = false;
        if let Err(e) = self.update_table(id, -1) {
            tracing::debug!(error = %e, id, "io_uring: clearing a file table entry failed");
        }
    }

    fn submit_and_wait(&mut self, wait: bool) -> io::Result<()> {
        if wait {
            self.arm_wake();
        }
        loop {
            let r = if wait { self.ring.submit_and_wait(1) } else { self.ring.submit() };
            match r {
                Ok(_) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                // The completion queue is full: reap first (the caller's next `reap`).
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    fn reap(&mut self, f: &mut dyn FnMut(u64, i32)) {
        let mut woke = false;
        for cqe in self.ring.completion() {
            if cqe.user_data() == WAKE {
                woke = true;
            } else {
                f(cqe.user_data(), cqe.result());
            }
        }
        if woke {
            self.wake_armed = false;
        }
    }
}

impl Drop for UringRing {
    fn drop(&mut self) {
        // The wake read targets `wake_buf`: complete it before the buffer is freed.
        if self.wake_armed {
            self.notifier().notify();
            while self.wake_armed {
                if let Err(e) = self.ring.submit_and_wait(1) {
                    if e.raw_os_error() == Some(libc::EINTR) {
                        continue;
                    }
                    // Leak the 8 bytes rather than free what the kernel may still write.
                    std::mem::forget(std::mem::replace(&mut self.wake_buf, Box::new(0)));
                    return;
                }
                for cqe in self.ring.completion() {
                    if cqe.user_data() == WAKE {
                        self.wake_armed = false;
                    }
                }
            }
        }
    }
}

/// Wakes a lane by writing its eventfd.
#[derive(Debug, Clone)]
pub struct EventFd(Arc<OwnedFd>);

impl Notify for EventFd {
    fn notify(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to an eventfd we keep open.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
}

#[cfg(all(test, not(eagerio_loom)))]
mod tests {
    use std::{
        os::fd::AsRawFd,
        path::PathBuf,
        sync::Arc,
        time::{Duration, Instant},
    };

    use eagerio_core::{
        backend::{JobHandle, ReadEngine, Staging},
        Error, FileInfo, Source,
    };

    use super::{SetupFlags, UringRing};
    use crate::lane::{FileRef, Inbox, LaneConfig, LaneCore, LaneFile, Work};

    struct PipeEngine {
        info: FileInfo,
        inbox: Arc<Inbox>,
        file: Arc<LaneFile>,
    }

    impl ReadEngine for PipeEngine {
        fn info(&self) -> &FileInfo {
            &self.info
        }

        fn submit(&self, job: JobHandle) {
            self.inbox.push(Work::Gather(job, self.file.clone()));
        }
    }

    /// A read of an empty pipe waits in the kernel until data comes; none ever does here. Only
    /// the lane's `ASYNC_CANCEL` at the deadline ends it, and only its completion returns the slot.
    #[test]
    fn a_read_waiting_in_the_kernel_is_cancelled_at_the_deadline() {
        let (reader, _writer) = std::io::pipe().expect("pipe");
        let staging = Staging::new(2 * 4096, 4096).unwrap();
        // Plain setup: SINGLE_ISSUER would tie the ring to this thread, and the lane runs on another.
        let (ring, _) = UringRing::new(4, SetupFlags::PLAIN, 0, Some(staging.region()), false)
            .unwrap_or_else(|e| panic!("io_uring refused ({}): {}", e.what, e.source));
        assert!(super::Ring::can_cancel(&ring), "the kernel lacks IORING_OP_ASYNC_CANCEL");
        let inbox = Arc::new(Inbox::new(Box::new(ring.notifier())));
        let cfg = LaneConfig { depth: 4, name: "cancel-test".into() };
        let mut lane = LaneCore::new(ring, staging.clone(), inbox.clone(), cfg);
        let thread = std::thread::spawn(move || lane.run().expect("the lane runs"));

        let path = PathBuf::from("pipe");
        let file = Arc::new(LaneFile::new(FileRef { id: None, fd: reader.as_raw_fd() }, 1, path.clone(), None));
        let info = FileInfo { path, len: 1 << 20, align: 1, max_read: 4096 };
        let source = Source::new(PipeEngine { info, inbox: inbox.clone(), file });
        let fut = source
            .gather_ranges(&[std::ops::Range { start: 0, end: 100 }])
            .unwrap()
            .with_timeout(Duration::from_millis(100));
        let err = futures::executor::block_on(fut).expect_err("nothing was written to the pipe");
        assert!(matches!(err, Error::TimedOut { unread: 1, requested: 1, .. }), "{err}");

        let waited = Instant::now();
        while !staging.is_full() {
            assert!(waited.elapsed() < Duration::from_secs(20), "the cancelled read never returned its slot");
            std::thread::sleep(Duration::from_millis(5));
        }
        inbox.close();
        thread.join().unwrap();
    }
}
