//! eagerio's tokio backend: gathers and writes on tokio's blocking pool.
//!
//! # When the I/O starts
//! [`Source::gather_ranges`](eagerio_core::Source::gather_ranges) and
//! [`RowTable::gather`](eagerio_core::RowTable::gather) plan the request, queue it to the engine
//! and start blocking workers for it *before they return*. An engine runs at most
//! [`TokioOptions::depth`] workers, and so at most `depth` reads, however many gathers are in
//! flight: each worker takes the next extent as soon as its previous one is done (the window
//! refills as completions arrive), round robin over the queued gathers so a large one cannot
//! starve a small one, reads it with `pread` into a staging slot and copies the rows out.
//! [`eagerio_core::Sink`] writes are spawned at call time.
//!
//! # What dropping a future does, and deadlines
//! A dropped gather stops issuing extents; workers finish the `pread` they are in (a `pread`
//! cannot be cancelled), release their slots, and exit. A gather past its deadline
//! ([`GatherFuture::with_timeout`](eagerio_core::GatherFuture::with_timeout)) stops the same way
//! and its future resolves at the deadline with
//! [`Error::TimedOut`], without waiting for those `pread`s. A dropped write still runs; its failure is reported by the next flush.
//!
//! # Direct I/O
//! With [`DirectIo::Auto`] (the default) the file is opened with `O_DIRECT` where the filesystem
//! allows it (alignment from `statx(STATX_DIOALIGN)`), else read buffered with
//! `POSIX_FADV_RANDOM`.
//!
//! # Examples
//! ```no_run
//! # async fn f() -> eagerio_core::Result<()> {
//! use eagerio_core::{DataSink, RowLayout};
//! use eagerio_tokio::{TokioEngine, TokioOptions, TokioWriter};
//!
//! let table = TokioEngine::open("table.bin", TokioOptions::default()).await?
//!     .rows(RowLayout { base: 0, row_size: 4096, rows: None })?;
//! let rows = table.gather(&[9, 1, 9])?.await?;
//!
//! let sink = TokioWriter::create("out.bin", Default::default()).await?;
//! let a = sink.append(rows.clone()); // writing now
//! let b = sink.append(rows);         // and this one too
//! a.await?;
//! b.await?;
//! sink.close().await?;
//! # Ok(()) }
//! ```

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod gather;
mod sink;

pub use eagerio_core::sys::DirectIo;
pub use gather::{TokioEngine, TokioOptions};
pub use sink::{BlockingFile, TokioWriter, WriterOptions};

use eagerio_core::{Error, Op, Result};

/// The handle of the runtime the caller is on.
fn runtime(path: &std::path::Path) -> Result<tokio::runtime::Handle> {
    tokio::runtime::Handle::try_current().map_err(|e| Error::Unavailable {
        backend: "eagerio-tokio",
        reason: format!("opening {path:?} needs a tokio runtime: {e}"),
        source: None,
    })
}

/// Runs a blocking open-like step (`open(2)`, `statx`, a registration) of `path` on the current
/// runtime's blocking pool, so that the caller's task only waits; a panic in it becomes
/// [`Error::Panicked`]. The io_uring backend's async constructors use it too.
///
/// # Errors
/// `f`'s error; [`Error::Unavailable`] outside a tokio runtime; [`Error::Panicked`].
pub async fn unblock<T: Send + 'static>(
    path: &std::path::Path,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let rt = runtime(path)?;
    rt.spawn_blocking(f).await.map_err(|e| Error::Panicked {
        op: Op::Open,
        path: path.to_path_buf(),
        offset: None,
        target: None,
        message: e.to_string(),
    })?
}
