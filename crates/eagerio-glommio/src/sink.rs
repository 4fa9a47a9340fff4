//! Writes over a `DmaFile` (the aligned middle of each write) and a buffered glommio file (its
//! unaligned head and tail), on the executor that created them.
//!
//! # Why two files
//! `O_DIRECT` writes need an aligned offset, length and buffer; a sink takes arbitrary ones
//! (`append` of 90 bytes, a 4-byte header at offset 0). Each write is cut into at most three
//! pieces: the whole aligned blocks inside it go through [`DmaFile::write_at`] from a glommio
//! `DmaBuffer` (one copy), the bytes before the first and after the last aligned block through a
//! `BufferedFile` on the same path. Both are io_uring writes on this executor's ring, started in
//! the call. The split alignment is at least the page size, so a page is either written whole by
//! one direct write or only through the page cache, never both by writes that do not overlap:
//! the mixed direct/buffered coherence hazard (a stale cached page written back over direct
//! data) cannot arise.
//!
//! # Overlapping writes
//! The sink itself holds a write that overlaps an earlier one until that one completes (see
//! [`eagerio_core::sink`]), so two writes this engine runs at once never share a page's bytes.

use std::{
    cell::RefCell,
    io,
    path::{Path, PathBuf},
    rc::Rc,
};

use bytes::Bytes;
use eagerio_core::{
    backend::{SyncOp, WriteEngine, WriteOp},
    fault::{self, Hook, IoKind, IoPoint},
    Error, Result, Sink, SinkOptions,
};
use glommio::io::{BufferedFile, DmaFile, OpenOptions};

use crate::gather::{alignment, io_error, open_error};
use crate::pump::Pump;

/// The page size the direct/buffered split never goes under.
const PAGE: u64 = 4096;

/// Options of the glommio writer: `WriterOptions::default().keep(true)`.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct WriterOptions {
    /// Sink options: in-flight bound, first append offset.
    pub sink: SinkOptions,
    /// Keep the file's contents and append after them (default: truncate).
    pub keep: bool,
    /// Write everything through the page cache, no `O_DIRECT` (default: direct for the aligned
    /// middle of each write).
    pub buffered_only: bool,
}

eagerio_core::options_setters!(WriterOptions { sink: SinkOptions, keep: bool, buffered_only: bool });

/// Bytes written by each path, for tests and tuning.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Bytes written with `O_DIRECT` from DMA buffers.
    pub direct_bytes: u64,
    /// Bytes written through the page cache (unaligned heads and tails).
    pub buffered_bytes: u64,
}

#[derive(Default)]
struct State {
    stats: WriterStats,
}

struct Inner {
    direct: Option<Rc<DmaFile>>,
    buffered: Rc<BufferedFile>,
    path: PathBuf,
    align: u64,
    hook: Option<Hook>,
    /// The directory `fsync` a created file owes after its first `fdatasync`.
    name: std::sync::Arc<eagerio_core::sys::NewName>,
    pump: Pump,
    st: RefCell<State>,
}

/// Writes one file on the executor that created it; the engine of a [`Sink`].
///
/// `Rc`-based, neither `Send` nor `Sync`: the sink belongs to this executor.
#[derive(Clone)]
pub struct GlommioWriter {
    inner: Rc<Inner>,
}

impl std::fmt::Debug for GlommioWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlommioWriter")
            .field("path", &self.inner.path)
            .field("direct", &self.inner.direct.is_some())
            .field("align", &self.inner.align)
            .finish()
    }
}

fn range_of(op: &WriteOp<GlommioWriter>) -> (u64, u64) {
    (op.offset(), op.offset() + op.data().len() as u64)
}

impl GlommioWriter {
    /// Creates (or opens) `path` for writing, on the current glommio executor, and returns its
    /// eager sink: every `write_at`/`append` is queued to the ring before it returns.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be opened for writing (a read-only file or directory);
    /// [`Error::InvalidOptions`] for a zero in-flight bound. A filesystem without `O_DIRECT` is
    /// not an error: every write then goes through the page cache.
    ///
    /// # Panics
    /// Outside a glommio executor.
    pub async fn create(path: impl AsRef<Path>, mut opts: WriterOptions) -> Result<Sink<GlommioWriter>> {
        let path = path.as_ref();
        let io_err = |source: io::Error| Error::open(path, source);
        eagerio_core::sys::check_kind(path)?;
        let name = std::sync::Arc::new(eagerio_core::sys::NewName::before_open(path));
        let buffered = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(!opts.keep)
            .buffered_open(path)
            .await
            .map_err(|e| io_err(io_error(e)))?;
        let direct = if opts.buffered_only {
            None
        } else {
            match OpenOptions::new().write(true).dma_open(path).await {
                Ok(f) => Some(f),
                Err(e) => match open_error(path, e) {
                    Error::DirectIoUnsupported { source, .. } => {
                        tracing::debug!(?path, error = %source, "O_DIRECT refused; writing through the page cache");
                        None
                    }
                    other => return Err(other),
                },
            }
        };
        if opts.keep {
            let len = buffered.file_size().await.map_err(|e| io_err(io_error(e)))?;
            opts.sink.append_from = opts.sink.append_from.max(len);
        }
        let align = direct.as_ref().map_or(PAGE, |d| alignment(path, d).max(PAGE));
        let w = GlommioWriter {
            inner: Rc::new(Inner {
                direct: direct.map(Rc::new),
                buffered: Rc::new(buffered),
                path: path.to_path_buf(),
                align,
                hook: fault::injected(path),
                name,
                pump: Pump::new(),
                st: RefCell::new(State::default()),
            }),
        };
        Sink::new(w, opts.sink)
    }

    /// Bytes written by each path so far.
    pub fn stats(&self) -> WriterStats {
        self.inner.st.borrow().stats
    }

    /// Whether the aligned middles of writes go through `O_DIRECT`.
    pub fn is_direct(&self) -> bool {
        self.inner.direct.is_some()
    }

    /// The alignment the direct/buffered split uses.
    pub fn alignment(&self) -> u64 {
        self.inner.align
    }
}

/// Writes all of `data` at `pos` through the page cache, retrying short writes.
async fn write_buffered(file: &BufferedFile, data: &[u8], pos: u64) -> io::Result<()> {
    let mut done = 0usize;
    while done < data.len() {
        let n = file.write_at(data[done..].to_vec(), pos + done as u64).await.map_err(io_error)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "the kernel accepted no bytes"));
        }
        done += n;
    }
    Ok(())
}

/// Writes the aligned `data` at the aligned `pos` with `O_DIRECT`; a short direct write is
/// finished through the page cache.
async fn write_direct(direct: &DmaFile, buffered: &BufferedFile, data: &[u8], pos: u64) -> io::Result<()> {
    let mut buf = direct.alloc_dma_buffer(data.len());
    buf.as_bytes_mut().copy_from_slice(data);
    let n = direct.write_at(buf, pos).await.map_err(io_error)?;
    if n < data.len() {
        write_buffered(buffered, &data[n..], pos + n as u64).await?;
    }
    Ok(())
}

impl Inner {
    /// Starts `op`, whose range is already registered as in flight.
    fn start(self: &Rc<Self>, op: WriteOp<GlommioWriter>) {
        let (start, end) = range_of(&op);
        let point = IoPoint { kind: IoKind::Write, offset: start, len: op.data().len() };
        let cap = match fault::failure(self.hook.as_ref(), point) {
            Err(e) => return op.complete(Err(e)),
            Ok(cap) => cap,
        };
        // Cut into [start, mid_start) buffered, [mid_start, mid_end) direct, [mid_end, end)
        // buffered; the middle is empty for small or buffered-only writes.
        let mask = self.align - 1;
        let (mid_start, mid_end) = match &self.direct {
            Some(_) => {
                let s = (start + mask) & !mask;
                let e = end & !mask;
                if s < e {
                    (s, e)
                } else {
                    (end, end)
                }
            }
            None => (end, end),
        };
        {
            let mut st = self.st.borrow_mut();
            st.stats.direct_bytes += mid_end - mid_start;
            st.stats.buffered_bytes += (end - start) - (mid_end - mid_start);
        }
        let me = self.clone();
        self.pump.start(async move {
            let data: Bytes = op.data().clone();
            let at = |o: u64| (o - start) as usize;
            let head = async {
                let cut = mid_start.min(end);
                if cut > start {
                    write_buffered(&me.buffered, &data[..at(cut)], start).await
                } else {
                    Ok(())
                }
            };
            let middle = async {
                match &me.direct {
                    Some(d) if mid_end > mid_start => {
                        write_direct(d, &me.buffered, &data[at(mid_start)..at(mid_end)], mid_start).await
                    }
                    _ => Ok(()),
                }
            };
            let tail = async {
                if mid_end > mid_start && end > mid_end {
                    write_buffered(&me.buffered, &data[at(mid_end)..], mid_end).await
                } else {
                    Ok(())
                }
            };
            let (h, m, t) = futures::join!(head, middle, tail);
            let res = h.and(m).and(t).and_then(|()| {
                let len = data.len();
                if cap < len {
                    Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        format!("short write: {cap} of {len} bytes at offset {start}"),
                    ))
                } else {
                    Ok(())
                }
            });
            // No borrow of the state is held here: the core may start held or queued writes,
            // or a sync, from inside `complete`.
            op.complete(res);
        });
    }
}

impl WriteEngine for GlommioWriter {
    fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Queues the write's pieces to the ring before returning (each write future is polled once
    /// here).
    fn submit_write(&self, op: WriteOp<Self>) {
        self.inner.start(op);
    }

    /// Starts `fdatasync` on the file before returning (queued to the ring). After the first one
    /// that succeeds for a file this sink created, its directory is `fsync`ed on a short-lived
    /// thread ([`NewName`](eagerio_core::sys::NewName)): the executor never blocks on it.
    fn submit_sync(&self, op: SyncOp<Self>) {
        let point = IoPoint { kind: IoKind::Sync, offset: 0, len: 0 };
        match fault::failure(self.inner.hook.as_ref(), point) {
            Err(e) => op.complete(Err(e)),
            Ok(_) => {
                let inner = self.inner.clone();
                self.inner.pump.start(async move {
                    let mut res = inner.buffered.fdatasync().await.map_err(io_error);
                    if res.is_ok() && !inner.name.is_durable() {
                        let (tx, rx) = futures::channel::oneshot::channel();
                        inner.name.sync_on_thread(inner.hook.clone(), move |r| drop(tx.send(r)));
                        res = rx.await.unwrap_or_else(|_| Err(io::Error::other("the directory fsync was dropped")));
                    }
                    op.complete(res);
                });
            }
        }
    }
}
