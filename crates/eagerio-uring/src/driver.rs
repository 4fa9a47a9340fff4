//! The driver: lanes shared by every table and sink opened on them, one staging budget, one
//! registered file table per lane, and the process-wide default driver.

use std::{
    fmt,
    fs::File,
    os::fd::AsRawFd,
    panic::AssertUnwindSafe,
    path::PathBuf,
    sync::{
        atomic::{AtomicUsize, Ordering},
        mpsc, Arc, Mutex, Weak,
    },
};

use eagerio_core::{
    backend::{JobHandle, Staging},
    fault::Hook,
    Error, Result,
};

use crate::{
    lane::{FileIds, FileRef, Inbox, LaneConfig, LaneCore, LaneFile, Release, Work},
    ring::{memlock_limit, Mode, SetupFlags, UringRing},
};

/// How a [`Driver`] is built: `DriverOptions::default().lanes(2).depth(256)`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DriverOptions {
    /// Lanes: threads with a ring and a share of the staging each. Default 1. More lanes add
    /// depth and a core's worth of completion handling each.
    pub lanes: usize,
    /// Operations in flight per lane: the ring's depth. Default 128.
    pub depth: usize,
    /// Staging for the whole driver, shared out evenly between its lanes. `None` sizes it to
    /// `lanes * depth * max_read`, lowered where needed to three quarters of `RLIMIT_MEMLOCK`
    /// so that it can be registered (see [`default_staging`]).
    pub staging_bytes: Option<usize>,
    /// Largest single read, the size of a staging slot (a multiple of 4096). Default 64 KiB.
    pub max_read: usize,
    /// Ring setup flags. Default `COOP_TASKRUN | SINGLE_ISSUER`.
    pub setup: SetupFlags,
    /// Register the staging with the kernel and read with `READ_FIXED`. Default on; off reads
    /// with plain `READ` into the same staging.
    pub register_buffers: bool,
    /// Entries of each lane's registered file table: files opened beyond it go by descriptor.
    /// Default the soft `RLIMIT_NOFILE` (the kernel's cap on the table), at most 4096.
    pub files: Option<u32>,
    /// Names the lane threads `{name}-{lane}` (at most 15 bytes are kept by Linux). Default
    /// `eagerio-d{driver number}`.
    pub name: Option<String>,
}

impl Default for DriverOptions {
    fn default() -> Self {
        DriverOptions {
            lanes: 1,
            depth: 128,
            staging_bytes: None,
            max_read: 64 * 1024,
            setup: SetupFlags::default(),
            register_buffers: true,
            files: None,
            name: None,
        }
    }
}

eagerio_core::options_setters!(DriverOptions {
    lanes: usize,
    depth: usize,
    max_read: usize,
    setup: SetupFlags,
    register_buffers: bool,
} some {
    staging_bytes: usize,
    files: u32,
    name: String,
});

/// The options that size the staging, as errors name them.
const STAGING_NAMES: [&str; 2] = ["DriverOptions::staging_bytes", "DriverOptions::max_read"];

/// The default staging of a driver: `lanes * depth * max_read`, lowered (to whole slots, at
/// least one per lane) to three quarters of the soft `RLIMIT_MEMLOCK` when that is lower and
/// the process cannot lock memory beyond it (it is not root). Registered buffers count against
/// that limit, per user, and a common default is 8 MiB: exactly the staging one lane wants, which
/// the kernel then refuses once anything else is locked. The quarter left is for the rest of the
/// process (another driver, glommio, a ring's own pages on older kernels).
pub fn default_staging(lanes: usize, depth: usize, max_read: usize) -> usize {
    let want = lanes.saturating_mul(depth).saturating_mul(max_read);
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let limit = memlock_limit();
    if root || limit == libc::RLIM_INFINITY {
        return want;
    }
    let fit = usize::try_from(limit / 4 * 3).unwrap_or(usize::MAX);
    let slots_per_lane = (fit / max_read.max(1) / lanes.max(1)).max(1);
    want.min(slots_per_lane * max_read * lanes)
}

/// The soft `RLIMIT_NOFILE`, at most 4096: the default size of a lane's file table.
fn default_files() -> u32 {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `r` is a valid out-pointer.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0 { r.rlim_cur } else { 0 };
    soft.min(4096) as u32
}

/// The user side of one lane.
pub(crate) struct LaneHandle {
    pub(crate) inbox: Arc<Inbox>,
    staging: Staging,
}

struct DriverInner {
    name: String,
    lanes: Vec<LaneHandle>,
    mode: Mode,
    reason: Option<String>,
    ids: Arc<FileIds>,
    max_read: usize,
    staging_bytes: usize,
    /// Round robin of sinks over the lanes.
    next_sink: AtomicUsize,
}

impl Drop for DriverInner {
    fn drop(&mut self) {
        // Every file and job on the driver holds it, so nothing is left to serve: each lane waits
        // for what its kernel still owns, and its thread exits.
        for l in &self.lanes {
            l.inbox.close();
        }
    }
}

/// io_uring lanes shared by every table and sink opened on them.
///
/// A lane is a thread with a ring, a share of the driver's staging (registered with the kernel
/// where `RLIMIT_MEMLOCK` allows) and a registered file table holding every file opened on the
/// driver. Gathers from any number of tables share the lanes' depth: each lane serves the
/// gathers it holds round robin, one read at a time, so a large gather does not hold back a small
/// one.
///
/// [`Driver::shared`] is the process-wide driver every open without an explicit driver uses; it
/// starts with the first such open and stops when the last table, sink or handle on it is dropped.
/// Cloning a driver shares it; dropping the last handle (tables and sinks hold one) drains and
/// stops its lanes.
#[derive(Clone)]
pub struct Driver {
    inner: Arc<DriverInner>,
}

impl fmt::Debug for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("name", &self.inner.name)
            .field("lanes", &self.inner.lanes.len())
            .field("mode", &self.inner.mode)
            .field("staging_bytes", &self.inner.staging_bytes)
            .finish()
    }
}

/// The process-wide driver, while something holds it.
static SHARED: Mutex<Weak<DriverInner>> = Mutex::new(Weak::new());

/// Numbers drivers for their thread names.
static DRIVERS: AtomicUsize = AtomicUsize::new(0);

impl Driver {
    /// Starts `opts.lanes` lane threads, each setting up its ring, probing opcodes, and
    /// registering its share of the staging and a sparse file table. Blocks briefly (a thread
    /// start and a few system calls per lane); works from any executor.
    ///
    /// Falls back to unregistered staging if `register_buffers` is refused (`ENOMEM` under
    /// `RLIMIT_MEMLOCK`), logging why with `tracing` ([`mode`](Self::mode),
    /// [`fallback_reason`](Self::fallback_reason)).
    ///
    /// # Errors
    /// [`Error::InvalidOptions`] for zero lanes or a depth outside 1..=32768, or bad staging
    /// sizes; [`Error::Unavailable`] if io_uring is refused (`EPERM`, `ENOSYS`, seccomp, a
    /// missing opcode) or a lane thread cannot be started.
    pub fn new(opts: DriverOptions) -> Result<Driver> {
        if opts.lanes == 0 || opts.lanes > 64 {
            return Err(Error::invalid_option("DriverOptions::lanes", "between 1 and 64 lanes"));
        }
        if opts.depth == 0 || opts.depth > 32768 {
            return Err(Error::invalid_option("DriverOptions::depth", "between 1 and 32768 operations per lane"));
        }
        let total = opts.staging_bytes.unwrap_or_else(|| default_staging(opts.lanes, opts.depth, opts.max_read));
        Staging::check_options(total, opts.max_read, STAGING_NAMES)?;
        let per_lane = total / opts.lanes / opts.max_read * opts.max_read;
        if per_lane == 0 {
            return Err(Error::invalid_option(
                "DriverOptions::staging_bytes",
                format!("{total} bytes give {} lanes less than one {}-byte slot each", opts.lanes, opts.max_read),
            ));
        }
        let number = DRIVERS.fetch_add(1, Ordering::Relaxed);
        let name = opts.name.clone().unwrap_or_else(|| format!("eagerio-d{number}"));
        let files = opts.files.unwrap_or_else(default_files);
        let mut lanes = Vec::with_capacity(opts.lanes);
        let mut mode = Mode::Registered;
        let mut reason = None;
        for i in 0..opts.lanes {
            let spec = LaneSpec {
                name: format!("{name}-{i}"),
                depth: opts.depth,
                flags: opts.setup,
                files,
                staging: Staging::for_options(per_lane, opts.max_read, STAGING_NAMES)?,
                register: opts.register_buffers,
            };
            match spawn_lane(spec) {
                Ok((lane, m, r)) => {
                    if m == Mode::Unregistered {
                        mode = Mode::Unregistered;
                        reason = reason.or(r);
                    }
                    lanes.push(lane);
                }
                Err(refused) => {
                    for l in &lanes {
                        l.inbox.close();
                    }
                    return Err(Error::Unavailable {
                        backend: "io_uring",
                        reason: format!("io_uring refused ({}: {})", refused.what, refused.source),
                        source: Some(refused.source),
                    });
                }
            }
        }
        if total < opts.lanes * opts.depth * opts.max_read && opts.staging_bytes.is_none() {
            tracing::info!(driver = %name, staging_bytes = total, memlock = memlock_limit(),
                "io_uring: staging lowered to fit RLIMIT_MEMLOCK; fewer reads than the depth can be in flight");
        }
        let inner = DriverInner {
            name,
            lanes,
            mode,
            reason,
            ids: Arc::new(FileIds::new(files)),
            max_read: opts.max_read,
            staging_bytes: per_lane * opts.lanes,
            next_sink: AtomicUsize::new(0),
        };
        Ok(Driver { inner: Arc::new(inner) })
    }

    /// The process-wide driver with [`DriverOptions::default`], started on first use and shared
    /// by every open that names no driver. It stops when nothing holds it any more; the next use
    /// starts it again.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn shared() -> Result<Driver> {
        let mut slot = SHARED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(inner) = slot.upgrade() {
            return Ok(Driver { inner });
        }
        let driver = Driver::new(DriverOptions::default())?;
        *slot = Arc::downgrade(&driver.inner);
        Ok(driver)
    }

    /// How the lanes read: [`Mode::Registered`], or [`Mode::Unregistered`] if any lane's
    /// registration was refused or turned off.
    pub fn mode(&self) -> Mode {
        self.inner.mode
    }

    /// Why the lanes read unregistered, if they do.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.inner.reason.as_deref()
    }

    /// The lane threads' name prefix.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Lanes (threads).
    pub fn lanes(&self) -> usize {
        self.inner.lanes.len()
    }

    /// The staging slot size: the largest single read.
    pub fn max_read(&self) -> usize {
        self.inner.max_read
    }

    /// Staging of all lanes together, in bytes.
    pub fn staging_bytes(&self) -> usize {
        self.inner.staging_bytes
    }

    /// Whether every staging slot of every lane is free (nothing of any file in flight).
    pub fn staging_full(&self) -> bool {
        self.inner.lanes.iter().all(|l| l.staging.is_full())
    }

    /// Whether `self` and `other` are handles of the same driver.
    pub fn same(&self, other: &Driver) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Opens `file` on every lane: gives it a file table index (if one is free) and queues its
    /// registration ahead of any work on it. The returned handle keeps the file and the driver;
    /// its last drop clears the index on every lane.
    pub(crate) fn attach(&self, file: File, align: u64, path: PathBuf, hook: Option<Hook>) -> Arc<LaneFile> {
        let id = self.inner.ids.take();
        let target = FileRef { id, fd: file.as_raw_fd() };
        let owner = Registration { driver: self.inner.clone(), target, _file: file };
        let lane_file = Arc::new(LaneFile::new(target, align, path, hook).with_owner(Box::new(owner)));
        if id.is_some() {
            for l in &self.inner.lanes {
                l.inbox.push(Work::Register(lane_file.clone()));
            }
        }
        lane_file
    }

    /// Queues a gather on `file`: to every lane if it has at least `split` reads (and there is
    /// more than one lane), else to the least loaded lane.
    pub(crate) fn submit(&self, job: JobHandle, file: &Arc<LaneFile>, split: usize) {
        let lanes = &self.inner.lanes;
        if lanes.len() > 1 && job.plan().extents().len() >= split {
            for l in lanes {
                l.inbox.push(Work::Gather(job.clone(), file.clone()));
            }
        } else {
            let lane = lanes.iter().min_by_key(|l| l.inbox.load()).expect("a driver has at least one lane");
            lane.inbox.push(Work::Gather(job, file.clone()));
        }
    }

    /// The lane a new sink writes through (round robin).
    pub(crate) fn sink_lane(&self) -> Arc<Inbox> {
        let lanes = &self.inner.lanes;
        lanes[self.inner.next_sink.fetch_add(1, Ordering::Relaxed) % lanes.len()].inbox.clone()
    }
}

/// A file's place on a driver: the descriptor, and its index in every lane's file table, which
/// each lane clears when the last handle of the file is gone.
struct Registration {
    driver: Arc<DriverInner>,
    target: FileRef,
    _file: File,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if self.target.id.is_none() {
            return;
        }
        let lanes = &self.driver.lanes;
        let release = Arc::new(Release::new(self.target, lanes.len(), self.driver.ids.clone()));
        for l in lanes {
            l.inbox.push(Work::Release(release.clone()));
        }
    }
}

/// What one lane thread needs.
struct LaneSpec {
    name: String,
    depth: usize,
    flags: SetupFlags,
    files: u32,
    staging: Staging,
    register: bool,
}

/// Starts a lane thread; returns once its ring is set up (or refused).
fn spawn_lane(spec: LaneSpec) -> std::result::Result<(LaneHandle, Mode, Option<String>), crate::ring::Refused> {
    let (tx, rx) = mpsc::channel();
    let staging = spec.staging.clone();
    let thread = std::thread::Builder::new().name(spec.name.clone()).spawn(move || {
        let region = spec.staging.region();
        let (ring, setup) = match UringRing::new(spec.depth, spec.flags, spec.files, Some(region), spec.register) {
            Ok(r) => r,
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        tracing::debug!(lane = %spec.name, mode = ?setup.mode, flags = ?setup.flags, "io_uring lane started");
        let inbox = Arc::new(Inbox::new(Box::new(ring.notifier())));
        let _ = tx.send(Ok((inbox.clone(), setup.mode, setup.reason)));
        let cfg = LaneConfig { depth: spec.depth, name: spec.name.clone() };
        let mut lane = LaneCore::new(ring, spec.staging, inbox.clone(), cfg);
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| lane.run()));
        let why = match outcome {
            Ok(Ok(())) => return,
            Ok(Err(e)) => format!("io_uring lane stopped: {e}"),
            Err(p) => format!("io_uring lane panicked: {}", eagerio_core::error::panic_message(&*p)),
        };
        tracing::error!(lane = %spec.name, reason = %why, "io_uring lane failed; failing its queued work");
        // Dropping the lane drains what the kernel still owns before anything is freed.
        lane.abandon(&why);
        drop(lane);
        inbox.refuse(why);
    });
    if let Err(source) = thread {
        return Err(crate::ring::Refused { what: "spawning the lane thread", source });
    }
    match rx.recv() {
        Ok(Ok((inbox, mode, reason))) => Ok((LaneHandle { inbox, staging }, mode, reason)),
        Ok(Err(e)) => Err(e),
        Err(_) => {
            Err(crate::ring::Refused { what: "lane thread", source: std::io::Error::other("the lane thread exited") })
        }
    }
}
