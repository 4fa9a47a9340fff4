//! `UringWriter`: a sink whose writes go through a lane's ring.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use eagerio_core::{fault::Hook, Error, Result, Sink, SinkOptions, Staging, SyncOp, WriteEngine, WriteOp};

use crate::{
    engine::{spawn_lane, LaneSpec},
    lane::{Inbox, LaneConfig, Work},
    ring::SetupFlags,
};

/// Options of the io_uring sink.
#[derive(Debug, Clone)]
pub struct UringWriterOptions {
    /// The sink's in-flight bound and append start.
    pub sink: SinkOptions,
    /// Keep the file's contents (appends start at its end) instead of truncating it.
    pub keep: bool,
    /// Writes in flight on the ring. Default 64.
    pub depth: usize,
    /// Ring setup flags.
    pub setup: SetupFlags,
    /// A fault hook for tests, evaluated on the lane thread at each completion.
    pub hook: Option<Hook>,
}

impl Default for UringWriterOptions {
    fn default() -> Self {
        UringWriterOptions {
            sink: SinkOptions::default(),
            keep: false,
            depth: 64,
            setup: SetupFlags::default(),
            hook: None,
        }
    }
}

struct Inner {
    path: PathBuf,
    inbox: Arc<Inbox<UringWriter>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.inbox.close();
    }
}

/// Writes one file through its own lane: each write is an io_uring `WRITE` from the caller's
/// bytes (no copy), submitted by the lane thread as soon as the sink hands it over.
#[derive(Clone)]
pub struct UringWriter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for UringWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringWriter").field("path", &self.inner.path).finish()
    }
}

impl UringWriter {
    /// Creates (or, with `keep`, opens) `path` and starts the sink's lane.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be opened; [`Error::Unavailable`] if io_uring is refused
    /// (use `eagerio_tokio::TokioWriter` there); [`Error::InvalidOptions`] for a zero depth.
    pub fn create(path: impl AsRef<Path>, mut opts: UringWriterOptions) -> Result<Sink<UringWriter>> {
        let path = path.as_ref();
        if opts.depth == 0 {
            return Err(Error::invalid_option("UringWriterOptions::depth", "at least one write must be in flight"));
        }
        let (file, end) = eagerio_core::sys::open_sink_file(path, opts.keep)?;
        opts.sink.append_from = opts.sink.append_from.max(end);
        let spec = LaneSpec {
            name: "eagerio-sink-lane".to_string(),
            depth: opts.depth,
            flags: opts.setup,
            file: Arc::new(file),
            staging: Staging::new(4096, 4096)?,
            register: false,
            cfg: LaneConfig { depth: opts.depth, align: 1, path: path.to_path_buf(), hook: opts.hook },
        };
        let (lane, _, _) = spawn_lane(spec).map_err(|r| Error::Unavailable {
            backend: "io_uring",
            reason: format!("{} failed; the tokio sink (eagerio_tokio::TokioWriter) works without it", r.what),
            source: Some(r.source),
        })?;
        let w = UringWriter { inner: Arc::new(Inner { path: path.to_path_buf(), inbox: lane.inbox }) };
        Sink::new(w, opts.sink)
    }
}

impl WriteEngine for UringWriter {
    fn path(&self) -> &Path {
        &self.inner.path
    }

    fn submit_write(&self, op: WriteOp<Self>) {
        self.inner.inbox.push(Work::Write(op));
    }

    fn submit_sync(&self, op: SyncOp<Self>) {
        self.inner.inbox.push(Work::Sync(op));
    }
}
