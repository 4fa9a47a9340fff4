//! `UringWriter`: a sink whose writes go through a lane's ring.

use std::{path::Path, sync::Arc};

use eagerio_core::{
    backend::{SyncOp, WriteEngine, WriteOp},
    fault,
    sys::{self, NewName},
    Error, Result, Sink, SinkOptions,
};

use eagerio_tokio::BlockingFile;

use crate::{
    driver::Driver,
    lane::{Inbox, LaneFile, LaneSync, Work},
    ring::Mode,
};

/// Options of the io_uring sink: `WriterOptions::default().keep(true)`.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct WriterOptions {
    /// The sink's in-flight bound and append start.
    pub sink: SinkOptions,
    /// Keep the file's contents (appends start at its end) instead of truncating it.
    pub keep: bool,
    /// The driver whose lane carries the writes. `None`: the process-wide [`Driver::shared`].
    pub driver: Option<Driver>,
}

eagerio_core::options_setters!(WriterOptions { sink: SinkOptions, keep: bool } some { driver: Driver });

enum Kind {
    /// Writes go through a lane of the driver.
    Lane {
        file: Arc<LaneFile>,
        /// The same file opened `O_DIRECT`, and its alignment: whole aligned blocks from aligned
        /// buffers are written through it ([`sys::DirectWrites`]).
        direct: Option<(Arc<LaneFile>, u64)>,
        inbox: Arc<Inbox>,
        driver: Driver,
        name: Arc<NewName>,
        hook: Option<fault::Hook>,
    },
    /// io_uring was refused: writes run on tokio's blocking pool.
    Tokio(Arc<BlockingFile>),
}

/// Writes one file through a lane of a [`Driver`]: each write is an io_uring `WRITE` from the
/// caller's bytes (no copy), submitted by the lane thread as soon as the sink hands it over.
/// Where io_uring is refused, the writes run on tokio's blocking pool instead ([`Mode::Tokio`]).
#[derive(Clone)]
pub struct UringWriter {
    kind: Arc<Kind>,
}

impl std::fmt::Debug for UringWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringWriter").field("path", &self.path()).field("mode", &self.mode()).finish()
    }
}

impl UringWriter {
    /// Creates (or, with `keep`, opens) `path` on `opts.driver` (or the process-wide
    /// [`Driver::shared`], started here if nothing holds it). The sink's writes all go through
    /// one of the driver's lanes, chosen round robin at creation. The fault hook installed for
    /// `path` ([`fault::inject`]), if any, runs on the lane thread at each completion.
    ///
    /// Inside a tokio runtime the blocking steps run on its blocking pool; elsewhere in the poll
    /// (as [`UringEngine::open`](crate::UringEngine::open) does).
    ///
    /// If the shared driver cannot start because io_uring is refused (`EPERM`, `ENOSYS`,
    /// seccomp), the sink writes on the current tokio runtime's blocking pool instead, logging
    /// why with `tracing` ([`mode`](Self::mode) is then [`Mode::Tokio`]).
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be opened; [`Error::InvalidOptions`] for a path that is
    /// not a regular file or block device; [`Error::Unavailable`] if io_uring is refused and no
    /// tokio runtime is there to fall back to.
    pub async fn create(path: impl AsRef<Path>, opts: WriterOptions) -> Result<Sink<UringWriter>> {
        crate::unblock(path.as_ref(), move |p| Self::create_blocking(p, opts)).await
    }

    /// [`create`](Self::create) on the calling thread.
    ///
    /// # Errors
    /// As [`create`](Self::create).
    pub fn create_blocking(path: impl AsRef<Path>, mut opts: WriterOptions) -> Result<Sink<UringWriter>> {
        let path = path.as_ref();
        let driver = match opts.driver.take() {
            Some(d) => d,
            None => match Driver::shared() {
                Ok(d) => d,
                Err(Error::Unavailable { reason, .. }) => return Self::tokio(path, opts, reason),
                Err(other) => return Err(other),
            },
        };
        let name = Arc::new(NewName::before_open(path));
        let (file, end) = eagerio_core::sys::open_sink_file(path, opts.keep)?;
        opts.sink.append_from = opts.sink.append_from.max(end);
        let hook = fault::injected(path);
        let direct = sys::DirectWrites::open(path).map(|d| {
            let align = d.alignment();
            (driver.attach(d.into_file(), 1, path.to_path_buf(), hook.clone()), align)
        });
        let file = driver.attach(file, 1, path.to_path_buf(), hook.clone());
        let inbox = driver.sink_lane();
        let w = UringWriter { kind: Arc::new(Kind::Lane { file, direct, inbox, driver, name, hook }) };
        Sink::new(w, opts.sink)
    }

    fn tokio(path: &Path, mut opts: WriterOptions, why: String) -> Result<Sink<UringWriter>> {
        let (file, end) = BlockingFile::create(path, opts.keep).map_err(|e| match e {
            Error::Unavailable { .. } => Error::Unavailable {
                backend: "io_uring",
                reason: format!(
                    "{why}, and the fallback to the blocking pool needs a tokio runtime (eagerio_tokio::TokioWriter \
                     is the sink for it)"
                ),
                source: None,
            },
            other => other,
        })?;
        tracing::warn!(path = %path.display(), reason = %why, "writes run on tokio's blocking pool");
        opts.sink.append_from = opts.sink.append_from.max(end);
        Sink::new(UringWriter { kind: Arc::new(Kind::Tokio(file)) }, opts.sink)
    }

    /// The alignment (file offset, length, buffer address) at which this sink's writes go
    /// through `O_DIRECT`, or `None` where the filesystem refuses it and every write is
    /// buffered.
    pub fn direct_alignment(&self) -> Option<u64> {
        match &*self.kind {
            Kind::Lane { direct, .. } => direct.as_ref().map(|(_, a)| *a),
            Kind::Tokio(file) => file.direct_alignment(),
        }
    }

    /// How the writes run: [`Mode::Tokio`] after a fallback, else the driver's mode.
    pub fn mode(&self) -> Mode {
        match &*self.kind {
            Kind::Lane { driver, .. } => driver.mode(),
            Kind::Tokio(_) => Mode::Tokio,
        }
    }
}

impl WriteEngine for UringWriter {
    fn path(&self) -> &Path {
        match &*self.kind {
            Kind::Lane { file, .. } => file.path(),
            Kind::Tokio(file) => file.path(),
        }
    }

    fn submit_write(&self, op: WriteOp<Self>) {
        match &*self.kind {
            Kind::Lane { file, direct, inbox, .. } => {
                let target = match direct {
                    Some((d, align)) if sys::direct_fits(*align, op.data(), op.offset()) => d,
                    _ => file,
                };
                inbox.push(Work::Write(Box::new(op), target.clone()))
            }
            Kind::Tokio(file) => file.write(op),
        }
    }

    fn submit_sync(&self, op: SyncOp<Self>) {
        match &*self.kind {
            Kind::Lane { file, inbox, name, hook, .. } if !name.is_durable() => {
                let op = NameAfterSync { op, name: name.clone(), hook: hook.clone() };
                inbox.push(Work::Sync(Box::new(op), file.clone()))
            }
            Kind::Lane { file, inbox, .. } => inbox.push(Work::Sync(Box::new(op), file.clone())),
            Kind::Tokio(file) => file.sync(op),
        }
    }
}

/// A sync of a file this sink created, whose directory still owes an `fsync` ([`NewName`]):
/// the lane hands a successful `fdatasync` to a short-lived thread for the directory's `fsync`,
/// so the lane thread never blocks on it.
struct NameAfterSync {
    op: SyncOp<UringWriter>,
    name: Arc<NewName>,
    hook: Option<fault::Hook>,
}

impl LaneSync for NameAfterSync {
    fn complete(self: Box<Self>, result: std::io::Result<()>) {
        let NameAfterSync { op, name, hook } = *self;
        match result {
            Err(e) => op.complete(Err(e)),
            Ok(()) => name.sync_on_thread(hook, move |res| op.complete(res)),
        }
    }
}
