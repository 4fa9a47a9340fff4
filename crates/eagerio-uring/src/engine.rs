//! `UringEngine`: a file served by one or more lanes, or by the tokio backend when io_uring is
//! refused.

use std::{
    fmt,
    fs::File,
    panic::AssertUnwindSafe,
    path::Path,
    sync::{mpsc, Arc},
};

use eagerio_core::{
    fault::Hook,
    sys::{self, DirectIo},
    Error, FileInfo, JobHandle, ReadEngine, Result, RowLayout, RowTable, Source, Staging,
};
use eagerio_tokio::{TokioEngine, TokioOptions};

use crate::{
    lane::{Inbox, LaneConfig, LaneCore, Work},
    ring::{Mode, Refused, SetupFlags, UringRing},
    sink::UringWriter,
};

/// Which fallback to take even if io_uring works: for tests and for comparing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fallback {
    /// Use registered buffers when the kernel allows it, else unregistered, else tokio.
    #[default]
    Auto,
    /// Use a ring, but read into unregistered staging (plain `READ`).
    Unregistered,
    /// Use the tokio backend (needs a tokio runtime).
    Tokio,
}

/// Options of the io_uring engine.
#[derive(Debug, Clone)]
pub struct UringOptions {
    /// Lanes (rings, each with its own thread and staging). Default 1. More lanes add depth.
    pub lanes: usize,
    /// Reads in flight per lane: the ring's depth. Default 128.
    pub depth: usize,
    /// Staging per lane; `None` means `depth * max_read`, so the window is never short of slots.
    pub staging_bytes: Option<usize>,
    /// Largest single read and staging slot size (a multiple of 4096). Default 64 KiB.
    pub max_read: usize,
    /// Largest hole read to join two extents. Default 4096.
    pub max_gap: u64,
    /// Direct or buffered reads. Default [`DirectIo::Auto`].
    pub direct: DirectIo,
    /// Ring setup flags. Default `COOP_TASKRUN | SINGLE_ISSUER`.
    pub setup: SetupFlags,
    /// A gather with at least this many reads is spread over every lane; smaller ones run on
    /// the least loaded lane. Default 4096 (see the crate docs).
    pub split_threshold: usize,
    /// Force a fallback.
    pub fallback: Fallback,
    /// A fault hook for tests, evaluated on the lane thread at each completion.
    pub hook: Option<Hook>,
    /// Adaptive mode: rows whose pages are resident are copied from the page cache in the
    /// gather call; only the misses go to the lanes (see [`eagerio_core::residency`]). Default on.
    pub adaptive: bool,
}

impl Default for UringOptions {
    fn default() -> Self {
        UringOptions {
            lanes: 1,
            depth: 128,
            staging_bytes: None,
            max_read: 64 * 1024,
            max_gap: eagerio_core::DEFAULT_MAX_GAP,
            direct: DirectIo::Auto,
            setup: SetupFlags::default(),
            split_threshold: 4096,
            fallback: Fallback::Auto,
            hook: None,
            adaptive: true,
        }
    }
}

/// The options that size a lane's staging, as errors name them.
const STAGING_NAMES: [&str; 2] = ["UringOptions::staging_bytes", "UringOptions::max_read"];

/// The user side of one lane.
pub(crate) struct LaneHandle {
    pub(crate) inbox: Arc<Inbox<UringWriter>>,
    staging: Staging,
}

enum Kind {
    Lanes(Vec<LaneHandle>),
    Tokio(TokioEngine),
}

struct Inner {
    info: FileInfo,
    kind: Kind,
    mode: Mode,
    direct: bool,
    reason: Option<String>,
    split_threshold: usize,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Kind::Lanes(lanes) = &self.kind {
            for l in lanes {
                l.inbox.close();
            }
        }
    }
}

/// Reads one file through io_uring lanes. Cloning shares the lanes.
///
/// Dropping the last clone (with its [`Source`]) closes the lanes: each finishes the gathers it
/// holds, waits for its reads, and its thread exits.
#[derive(Clone)]
pub struct UringEngine {
    inner: Arc<Inner>,
}

impl fmt::Debug for UringEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UringEngine")
            .field("path", &self.inner.info.path)
            .field("mode", &self.inner.mode)
            .field("lanes", &self.lanes())
            .field("direct", &self.inner.direct)
            .finish()
    }
}

/// What one lane thread needs.
pub(crate) struct LaneSpec {
    pub(crate) name: String,
    pub(crate) depth: usize,
    pub(crate) flags: SetupFlags,
    pub(crate) file: Arc<File>,
    pub(crate) staging: Staging,
    pub(crate) register: bool,
    pub(crate) cfg: LaneConfig,
}

/// Starts a lane thread; returns once its ring is set up (or refused).
pub(crate) fn spawn_lane(spec: LaneSpec) -> std::result::Result<(LaneHandle, Mode, Option<String>), Refused> {
    let (tx, rx) = mpsc::channel();
    let staging = spec.staging.clone();
    let thread = std::thread::Builder::new().name(spec.name.clone()).spawn(move || {
        let region = spec.staging.region();
        let (ring, setup) = match UringRing::new(spec.depth, spec.flags, spec.file, Some(region), spec.register) {
            Ok(r) => r,
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        tracing::debug!(lane = %spec.name, mode = ?setup.mode, flags = ?setup.flags, "io_uring lane started");
        let inbox = Arc::new(Inbox::new(Box::new(ring.notifier()), spec.cfg.path.clone()));
        let _ = tx.send(Ok((inbox.clone(), setup.mode, setup.reason)));
        let path = spec.cfg.path.clone();
        let mut lane = LaneCore::new(ring, spec.staging, inbox.clone(), spec.cfg);
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| lane.run()));
        let why = match outcome {
            Ok(Ok(())) => return,
            Ok(Err(e)) => format!("io_uring lane stopped: {e}"),
            Err(p) => format!("io_uring lane panicked: {}", eagerio_core::error::panic_message(&*p)),
        };
        tracing::error!(path = %path.display(), reason = %why, "io_uring lane failed; failing its queued work");
        // Dropping the lane drains what the kernel still owns before anything is freed.
        lane.abandon(&why);
        drop(lane);
        inbox.refuse(why);
    });
    if let Err(source) = thread {
        return Err(Refused { what: "spawning the lane thread", source });
    }
    match rx.recv() {
        Ok(Ok((inbox, mode, reason))) => Ok((LaneHandle { inbox, staging }, mode, reason)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Refused { what: "lane thread", source: std::io::Error::other("the lane thread exited") }),
    }
}

impl UringEngine {
    /// Opens `path` for gathers: opens the file (`O_DIRECT` per `opts.direct`), starts
    /// `opts.lanes` lane threads, each setting up its ring, probing opcodes and registering the
    /// file and its staging. Works from any executor (it blocks briefly); gathers need none.
    ///
    /// Falls back, logging why with `tracing`: to unregistered staging if `register_buffers` is
    /// refused (`ENOMEM` under `RLIMIT_MEMLOCK`), and to the tokio backend if the ring itself is
    /// refused (`EPERM`, `ENOSYS`, seccomp, a missing opcode); see [`mode`](Self::mode).
    ///
    /// # Errors
    /// [`Error::InvalidOptions`] for zero lanes or depth, or bad staging sizes; [`Error::Io`] if
    /// the file cannot be opened; [`Error::DirectIoUnsupported`] for [`DirectIo::On`] where the
    /// filesystem lacks it; [`Error::Unavailable`] if io_uring is refused and no tokio runtime
    /// is there to fall back to.
    pub fn open_blocking(path: impl AsRef<Path>, opts: UringOptions) -> Result<Source<UringEngine>> {
        let path = path.as_ref();
        if opts.lanes == 0 {
            return Err(Error::invalid_option("UringOptions::lanes", "at least one lane is needed"));
        }
        if opts.depth == 0 || opts.depth > 32768 {
            return Err(Error::invalid_option("UringOptions::depth", "between 1 and 32768 reads per lane"));
        }
        let staging_bytes = opts.staging_bytes.unwrap_or(opts.depth.saturating_mul(opts.max_read));
        Staging::check_options(staging_bytes, opts.max_read, STAGING_NAMES)?;
        let gf = sys::open_for_gather(path, opts.direct)?;
        let info = FileInfo { path: path.to_path_buf(), len: gf.len, align: gf.align, max_read: opts.max_read as u64 };
        let direct = gf.direct;
        let file = Arc::new(gf.file);
        if opts.fallback == Fallback::Tokio {
            return Self::tokio(path, &opts, info, direct, "the tokio fallback was forced by the options".into());
        }
        let mut lanes = Vec::with_capacity(opts.lanes);
        let mut mode = Mode::Registered;
        let mut reason = None;
        for i in 0..opts.lanes {
            let spec = LaneSpec {
                name: format!("eagerio-lane-{i}"),
                depth: opts.depth,
                flags: opts.setup,
                file: file.clone(),
                staging: Staging::for_options(staging_bytes, opts.max_read, STAGING_NAMES)?,
                register: opts.fallback != Fallback::Unregistered,
                cfg: LaneConfig {
                    depth: opts.depth,
                    align: if direct { info.align } else { 1 },
                    path: path.to_path_buf(),
                    hook: opts.hook.clone(),
                },
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
                    let why = format!("io_uring refused ({}: {})", refused.what, refused.source);
                    tracing::warn!(path = %path.display(), reason = %why, "falling back to the tokio backend");
                    return Self::tokio(path, &opts, info, direct, why);
                }
            }
        }
        let inner = Inner {
            info,
            kind: Kind::Lanes(lanes),
            mode,
            direct,
            reason,
            split_threshold: opts.split_threshold.max(1),
        };
        let source = Source::new(UringEngine { inner: Arc::new(inner) }).with_max_gap(opts.max_gap);
        Ok(eagerio_core::residency::maybe_adaptive(source, opts.adaptive))
    }

    /// [`open_blocking`](Self::open_blocking) from async code.
    ///
    /// # Errors
    /// As [`open_blocking`](Self::open_blocking).
    pub async fn open(path: impl AsRef<Path>, opts: UringOptions) -> Result<Source<UringEngine>> {
        Self::open_blocking(path, opts)
    }

    /// Opens `path` as a table of fixed-size rows.
    ///
    /// # Errors
    /// As [`open_blocking`](Self::open_blocking) and [`RowTable::new`].
    pub fn open_rows(path: impl AsRef<Path>, layout: RowLayout, opts: UringOptions) -> Result<RowTable<UringEngine>> {
        RowTable::new(Self::open_blocking(path, opts)?, layout)
    }

    fn tokio(path: &Path, opts: &UringOptions, info: FileInfo, direct: bool, why: String) -> Result<Source<Self>> {
        let topts = TokioOptions {
            depth: opts.depth,
            staging_bytes: opts.staging_bytes.unwrap_or(eagerio_core::DEFAULT_STAGING_BYTES),
            max_read: opts.max_read,
            max_gap: opts.max_gap,
            direct: if direct { DirectIo::On } else { DirectIo::Off },
            hook: opts.hook.clone(),
            adaptive: false,
        };
        let source = TokioEngine::open_blocking(path, topts).map_err(|e| match e {
            Error::Unavailable { .. } => Error::Unavailable {
                backend: "io_uring",
                reason: format!("{why}, and the tokio fallback needs a tokio runtime"),
                source: None,
            },
            other => other,
        })?;
        tracing::info!(path = %path.display(), reason = %why, "gathers run on the tokio backend");
        let engine = source.engine().clone();
        let inner = Inner {
            info,
            kind: Kind::Tokio(engine),
            mode: Mode::Tokio,
            direct,
            reason: Some(why),
            split_threshold: usize::MAX,
        };
        let source = Source::new(UringEngine { inner: Arc::new(inner) }).with_max_gap(opts.max_gap);
        Ok(eagerio_core::residency::maybe_adaptive(source, opts.adaptive))
    }

    /// How gathers are served.
    pub fn mode(&self) -> Mode {
        self.inner.mode
    }

    /// Why the engine fell back from registered io_uring reads, if it did.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.inner.reason.as_deref()
    }

    /// Whether reads bypass the page cache.
    pub fn is_direct(&self) -> bool {
        self.inner.direct
    }

    /// Lanes serving this file (0 in the tokio fallback).
    pub fn lanes(&self) -> usize {
        match &self.inner.kind {
            Kind::Lanes(l) => l.len(),
            Kind::Tokio(_) => 0,
        }
    }

    /// Whether every staging slot of every lane is free (nothing in flight).
    pub fn staging_full(&self) -> bool {
        match &self.inner.kind {
            Kind::Lanes(l) => l.iter().all(|l| l.staging.is_full()),
            Kind::Tokio(t) => t.staging().is_full(),
        }
    }
}

impl ReadEngine for UringEngine {
    fn info(&self) -> &FileInfo {
        &self.inner.info
    }

    /// Queues the job to a lane (or, for a gather of at least `split_threshold` reads, to every
    /// lane) and wakes it: the lane thread submits the first window of reads at once.
    fn submit(&self, job: JobHandle) {
        match &self.inner.kind {
            Kind::Tokio(t) => t.submit(job),
            Kind::Lanes(lanes) => {
                if lanes.len() > 1 && job.plan().extents().len() >= self.inner.split_threshold {
                    for l in lanes {
                        l.inbox.push(Work::Gather(job.clone()));
                    }
                } else {
                    let lane = lanes.iter().min_by_key(|l| l.inbox.load()).expect("at least one lane");
                    lane.inbox.push(Work::Gather(job));
                }
            }
        }
    }
}
