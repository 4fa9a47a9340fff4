//! `UringEngine`: a file served by one or more lanes, or by the tokio backend when io_uring is
//! refused.

use std::{fmt, path::Path, sync::Arc};

use eagerio_core::{
    backend::{remote, JobHandle, ReadEngine, Remote},
    fault,
    sys::{self, DirectIo},
    Error, FileInfo, Result, RowLayout, RowTable, Source,
};
use eagerio_tokio::{TokioEngine, TokioOptions};

use crate::{
    driver::{Driver, DriverOptions},
    lane::LaneFile,
    ring::Mode,
};

/// Which fallback to take even if io_uring works: for tests and for comparing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fallback {
    /// Use the driver's lanes when io_uring works, else the tokio backend.
    #[default]
    Auto,
    /// Use the tokio backend (needs a tokio runtime).
    Tokio,
}

/// Options of one file opened on io_uring lanes: `UringOptions::default().driver(d)`. The lanes,
/// their depth and staging are the [`Driver`]'s ([`DriverOptions`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct UringOptions {
    /// The driver whose lanes serve the file. `None`: the process-wide [`Driver::shared`].
    pub driver: Option<Driver>,
    /// The gap: the largest hole read to join two extents. With `tune_gap` it is where the tuned
    /// gap starts; without, every gather uses it. Default 4096.
    pub max_gap: u64,
    /// Tune the gap to the device's price, fitted from this device's whole gathers (see
    /// [`eagerio_core::tune`]). Default on.
    pub tune_gap: bool,
    /// The tuned gap's bound. Default [`DEFAULT_GAP_LIMIT`](eagerio_core::DEFAULT_GAP_LIMIT)
    /// (32 KiB).
    pub gap_limit: u64,
    /// Direct or buffered reads. Default [`DirectIo::Auto`].
    pub direct: DirectIo,
    /// A gather with at least this many reads is spread over every lane of the driver; smaller
    /// ones run on the least loaded lane. Default 4096 (see the crate docs).
    pub split_threshold: usize,
    /// Force a fallback.
    pub fallback: Fallback,
    /// Adaptive mode: rows whose pages are resident are copied from the page cache in the
    /// gather call; only the misses go to the lanes (see [`eagerio_core::residency`]). Default on.
    pub adaptive: bool,
}

impl Default for UringOptions {
    fn default() -> Self {
        UringOptions {
            driver: None,
            max_gap: eagerio_core::DEFAULT_MAX_GAP,
            tune_gap: true,
            gap_limit: eagerio_core::DEFAULT_GAP_LIMIT,
            direct: DirectIo::Auto,
            split_threshold: 4096,
            fallback: Fallback::Auto,
            adaptive: true,
        }
    }
}

eagerio_core::options_setters!(UringOptions {
    max_gap: u64,
    tune_gap: bool,
    gap_limit: u64,
    direct: DirectIo,
    split_threshold: usize,
    fallback: Fallback,
    adaptive: bool,
} some {
    driver: Driver,
});

enum Kind {
    Lanes { driver: Driver, file: Arc<LaneFile> },
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

/// Reads one file through a driver's io_uring lanes. Cloning shares the file.
///
/// Dropping the last clone (with its [`Source`]) closes the file once its gathers are done; the
/// lanes stop with the driver's last handle.
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

impl UringEngine {
    /// Opens `path` for gathers on `opts.driver` (or the process-wide [`Driver::shared`],
    /// started here if nothing holds it): opens the file (`O_DIRECT` per `opts.direct`) and
    /// queues its registration in each lane's file table, on the calling thread. Gathers need
    /// no executor. The fault hook installed for `path` ([`fault::inject`]), if any, runs on the
    /// lane thread at each of the file's completions.
    ///
    /// Falls back to the tokio backend, logging why with `tracing`, if the ring is refused
    /// (`EPERM`, `ENOSYS`, seccomp, a missing opcode); see [`mode`](Self::mode).
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be opened; [`Error::InvalidOptions`] for a file that is
    /// not a regular file or block device; [`Error::DirectIoUnsupported`] for [`DirectIo::On`]
    /// where the filesystem lacks it; [`Error::Unavailable`] if io_uring is refused and no tokio
    /// runtime is there to fall back to.
    pub fn open_blocking(path: impl AsRef<Path>, opts: UringOptions) -> Result<Source<UringEngine>> {
        let path = path.as_ref();
        let driver = match (&opts.fallback, &opts.driver) {
            (Fallback::Tokio, _) => Err("the tokio fallback was forced by the options".to_string()),
            (Fallback::Auto, Some(d)) => Ok(d.clone()),
            (Fallback::Auto, None) => Driver::shared().map_err(|e| match e {
                Error::Unavailable { reason, .. } => reason,
                other => other.to_string(),
            }),
        };
        let max_read = driver.as_ref().map_or(DriverOptions::default().max_read, |d| d.max_read());
        let gf = sys::open_for_gather(path, opts.direct)?;
        let info = FileInfo { path: path.to_path_buf(), len: gf.len, align: gf.align, max_read: max_read as u64 };
        let direct = gf.direct;
        let driver = match driver {
            Ok(d) => d,
            Err(why) => {
                if opts.fallback == Fallback::Auto {
                    tracing::warn!(path = %path.display(), reason = %why, "falling back to the tokio backend");
                }
                return Self::tokio(path, &opts, info, direct, why);
            }
        };
        let align = if direct { info.align } else { 1 };
        let file = driver.attach(gf.file, align, path.to_path_buf(), fault::injected(path));
        let inner = Inner {
            info,
            mode: driver.mode(),
            reason: driver.fallback_reason().map(str::to_string),
            kind: Kind::Lanes { driver, file },
            direct,
            split_threshold: opts.split_threshold.max(1),
        };
        let source = Source::new(UringEngine { inner: Arc::new(inner) }).with_gap_options(
            opts.max_gap,
            opts.tune_gap,
            opts.gap_limit,
        );
        Ok(source.maybe_adaptive(opts.adaptive))
    }

    /// [`open_blocking`](Self::open_blocking) from async code: inside a tokio runtime the
    /// blocking steps (the `open(2)`, starting the shared driver) run on its blocking pool and the
    /// caller's task only waits; on any other executor they run in the poll, a few system calls.
    ///
    /// # Errors
    /// As [`open_blocking`](Self::open_blocking).
    pub async fn open(path: impl AsRef<Path>, opts: UringOptions) -> Result<Source<UringEngine>> {
        crate::unblock(path.as_ref(), move |p| Self::open_blocking(p, opts)).await
    }

    /// Opens `path` as a table of fixed-size rows, as [`open`](Self::open) does.
    ///
    /// # Errors
    /// As [`open_blocking`](Self::open_blocking) and [`RowTable::new`].
    pub async fn open_rows(
        path: impl AsRef<Path>,
        layout: RowLayout,
        opts: UringOptions,
    ) -> Result<RowTable<UringEngine>> {
        RowTable::new(Self::open(path, opts).await?, layout)
    }

    /// [`open_rows`](Self::open_rows) on the calling thread.
    ///
    /// # Errors
    /// As [`open_rows`](Self::open_rows).
    pub fn open_rows_blocking(
        path: impl AsRef<Path>,
        layout: RowLayout,
        opts: UringOptions,
    ) -> Result<RowTable<UringEngine>> {
        RowTable::new(Self::open_blocking(path, opts)?, layout)
    }

    fn tokio(path: &Path, opts: &UringOptions, info: FileInfo, direct: bool, why: String) -> Result<Source<Self>> {
        let topts = TokioOptions::default()
            .max_read(info.max_read as usize)
            .max_gap(opts.max_gap)
            .tune_gap(opts.tune_gap)
            .gap_limit(opts.gap_limit)
            .direct(if direct { DirectIo::On } else { DirectIo::Off })
            .adaptive(false);
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
        let source = Source::new(UringEngine { inner: Arc::new(inner) }).with_gap_options(
            opts.max_gap,
            opts.tune_gap,
            opts.gap_limit,
        );
        Ok(source.maybe_adaptive(opts.adaptive))
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

    /// The driver serving this file (`None` in the tokio fallback).
    pub fn driver(&self) -> Option<&Driver> {
        match &self.inner.kind {
            Kind::Lanes { driver, .. } => Some(driver),
            Kind::Tokio(_) => None,
        }
    }

    /// Lanes serving this file (0 in the tokio fallback).
    pub fn lanes(&self) -> usize {
        self.driver().map_or(0, Driver::lanes)
    }

    /// Whether no staging slot is held for this file's reads (nothing of it in flight). Other
    /// files on the same driver do not count.
    pub fn staging_full(&self) -> bool {
        match &self.inner.kind {
            Kind::Lanes { file, .. } => file.leased() == 0,
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
            Kind::Lanes { driver, file } => driver.submit(job, file, self.inner.split_threshold),
        }
    }

    /// Jobs may come from any thread: large gathers are prepared off the caller's thread.
    fn remote(&self) -> Option<Remote> {
        Some(remote(self))
    }
}
