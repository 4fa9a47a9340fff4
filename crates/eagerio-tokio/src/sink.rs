//! Writes on the blocking pool.

use std::{fs::File, path::Path, path::PathBuf, sync::Arc};

use eagerio_core::{
    backend::{SyncOp, WriteEngine, WriteOp},
    fault::{self, with_hook, Hook, IoKind, IoPoint},
    sys, Result, Sink, SinkOptions,
};

/// Options of the tokio writer: `WriterOptions::default().keep(true)`.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct WriterOptions {
    /// Sink options: in-flight bound, first append offset.
    pub sink: SinkOptions,
    /// Keep the file's contents and append after them (default: truncate).
    pub keep: bool,
}

eagerio_core::options_setters!(WriterOptions { sink: SinkOptions, keep: bool });

/// An open file whose writes and syncs run on a tokio runtime's blocking pool: the engine of
/// [`TokioWriter`], and of any other sink that falls back to the blocking pool (the io_uring
/// sink does where the ring is refused).
pub struct BlockingFile {
    file: File,
    path: PathBuf,
    name: sys::NewName,
    /// Whole aligned blocks go through this `O_DIRECT` descriptor ([`sys::DirectWrites`]).
    direct: Option<sys::DirectWrites>,
    hook: Option<Hook>,
    rt: tokio::runtime::Handle,
}

impl BlockingFile {
    /// Creates (or, with `keep`, opens) `path` for writing on the current runtime's blocking
    /// pool; returns it with the file's length (where appends start when `keep` is set). The
    /// fault hook installed for `path` ([`fault::inject`]), if any, applies to its writes.
    ///
    /// # Errors
    /// [`eagerio_core::Error::Unavailable`] outside a tokio runtime; as
    /// [`sys::open_sink_file`] otherwise.
    pub fn create(path: &Path, keep: bool) -> Result<(Arc<BlockingFile>, u64)> {
        let rt = crate::runtime(path)?;
        let name = sys::NewName::before_open(path);
        let (file, end) = sys::open_sink_file(path, keep)?;
        let direct = sys::DirectWrites::open(path);
        let hook = fault::injected(path);
        Ok((Arc::new(BlockingFile { file, path: path.to_path_buf(), name, direct, hook, rt }), end))
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The alignment (offset, length, buffer address) at which writes go through `O_DIRECT`,
    /// or `None` where the filesystem refuses it and every write is buffered.
    pub fn direct_alignment(&self) -> Option<u64> {
        self.direct.as_ref().map(sys::DirectWrites::alignment)
    }

    /// Starts `op` on the blocking pool: a `pwrite` loop to its end; a short write is an error.
    /// A write of whole aligned blocks from an aligned buffer goes through `O_DIRECT`
    /// ([`direct_alignment`](Self::direct_alignment)), the rest through the page cache.
    pub fn write<W: WriteEngine>(self: &Arc<Self>, op: WriteOp<W>)
    where
        WriteOp<W>: Send + 'static,
    {
        let this = self.clone();
        drop(self.rt.spawn_blocking(move || {
            let point = IoPoint { kind: IoKind::Write, offset: op.offset(), len: op.data().len() };
            let res = with_hook(this.hook.as_ref(), point, || {
                match &this.direct {
                    Some(d) => d.write_all(&this.file, op.data(), op.offset()),
                    None => sys::pwrite_all(&this.file, op.data(), op.offset()),
                }
                .map(|()| op.data().len())
            });
            let res = match res {
                Ok(n) if n < op.data().len() => Err(std::io::Error::new(
                    std::io::ErrorKind::WriteZero,
                    format!("short write: {n} of {} bytes", op.data().len()),
                )),
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            };
            op.complete(res);
        }));
    }

    /// Starts `op` on the blocking pool: an `fdatasync`, and after the first one that succeeds
    /// for a file this sink created, the `fsync` of its directory ([`sys::NewName`]).
    pub fn sync<W: WriteEngine>(self: &Arc<Self>, op: SyncOp<W>)
    where
        SyncOp<W>: Send + 'static,
    {
        let this = self.clone();
        drop(self.rt.spawn_blocking(move || {
            let point = IoPoint { kind: IoKind::Sync, offset: 0, len: 0 };
            let res = with_hook(this.hook.as_ref(), point, || this.file.sync_data().map(|()| 0));
            op.complete(res.and_then(|_| this.name.sync(this.hook.as_ref())));
        }));
    }
}

/// Writes one file on tokio's blocking pool; the engine of a [`Sink`].
#[derive(Clone)]
pub struct TokioWriter {
    inner: Arc<BlockingFile>,
}

impl std::fmt::Debug for TokioWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokioWriter").field("path", &self.inner.path).finish()
    }
}

impl TokioWriter {
    /// The alignment (file offset, length, buffer address) at which this sink's writes go
    /// through `O_DIRECT`, or `None` where the filesystem refuses it and every write is
    /// buffered. An [`EagerArrowWriter`](https://docs.rs/eagerio-parquet)'s blocks are aligned.
    pub fn direct_alignment(&self) -> Option<u64> {
        self.inner.direct_alignment()
    }

    /// Creates (or opens) `path` for writing and returns its eager sink.
    ///
    /// # Errors
    /// [`Error::Io`](eagerio_core::Error::Io) if the path is not a regular file or block device,
    /// or cannot be opened for writing (a read-only file or filesystem);
    /// [`Error::InvalidOptions`](eagerio_core::Error::InvalidOptions) for a zero in-flight bound;
    /// [`Error::Unavailable`](eagerio_core::Error::Unavailable) outside a
    /// tokio runtime.
    pub async fn create(path: impl AsRef<Path>, opts: WriterOptions) -> Result<Sink<TokioWriter>> {
        let path = path.as_ref().to_path_buf();
        let p = path.clone();
        crate::unblock(&path, move || Self::create_blocking(&p, opts)).await
    }

    /// [`create`](Self::create), blocking the calling thread; it must be inside a tokio runtime
    /// context.
    ///
    /// # Errors
    /// As [`create`](Self::create).
    pub fn create_blocking(path: impl AsRef<Path>, mut opts: WriterOptions) -> Result<Sink<TokioWriter>> {
        let (inner, end) = BlockingFile::create(path.as_ref(), opts.keep)?;
        opts.sink.append_from = opts.sink.append_from.max(end);
        Sink::new(TokioWriter { inner }, opts.sink)
    }
}

impl WriteEngine for TokioWriter {
    fn path(&self) -> &Path {
        &self.inner.path
    }

    fn submit_write(&self, op: WriteOp<Self>) {
        self.inner.write(op);
    }

    fn submit_sync(&self, op: SyncOp<Self>) {
        self.inner.sync(op);
    }
}
