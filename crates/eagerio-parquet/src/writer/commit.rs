//! Atomic files: written under a temporary name beside the target, renamed into place on
//! close, and the rename made durable. A reader never sees a half-written file under the
//! target's name, and a writer that fails or is dropped leaves nothing behind.

use std::{
    io,
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
};

use eagerio_core::{fault, sys, Error};

/// A file that appears at [`path`](Self::path) only when it is complete and durable.
///
/// Create the sink at [`temp_path`](Self::temp_path), then hand this to
/// [`EagerArrowWriter::commit_to`](crate::EagerArrowWriter::commit_to): a successful `close`
/// syncs the sink, renames the temporary file to the target (replacing any file there, as
/// `rename(2)` does) and `fsync`s the directory so the new name survives a crash. Dropping it
/// uncommitted (the writer failed, or was dropped before `close`) removes the temporary file.
/// If the rename succeeds but the directory's `fsync` fails, `close` reports that failure with
/// the complete file already at the target: its name may not survive a crash.
///
/// # Examples
/// ```no_run
/// # async fn f(batch: arrow_array::RecordBatch) -> Result<(), Box<dyn std::error::Error>> {
/// use eagerio_parquet::{AtomicFile, EagerArrowWriter};
///
/// let target = AtomicFile::new("table/part-0.parquet")?;
/// let sink = eagerio_tokio::TokioWriter::create(target.temp_path(), Default::default()).await?;
/// let mut w = EagerArrowWriter::try_new(sink, batch.schema(), None)?.commit_to(target);
/// w.write_async(&batch).await?;
/// w.close_async().await?; // part-0.parquet now exists, whole and durable
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct AtomicFile {
    path: PathBuf,
    temp: PathBuf,
    committed: bool,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

impl AtomicFile {
    /// A target at `path`, and a fresh temporary name beside it
    /// (`.<name>.<pid>-<n>.eagerio-tmp`, in the same directory so the rename is atomic).
    ///
    /// # Errors
    /// `InvalidInput` if `path` has no file name or is a directory; the error of `metadata` if
    /// its directory is missing or unreadable. No file is created yet.
    pub fn new(path: impl AsRef<Path>) -> io::Result<AtomicFile> {
        let path = path.as_ref().to_path_buf();
        let Some(name) = path.file_name() else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{path:?} has no file name")));
        };
        if path.is_dir() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{path:?} is a directory")));
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        std::fs::metadata(dir).map_err(|e| io::Error::new(e.kind(), format!("the directory of {path:?}: {e}")))?;
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let temp = dir.join(format!(".{}.{}-{n}.eagerio-tmp", name.to_string_lossy(), std::process::id()));
        Ok(AtomicFile { path, temp, committed: false })
    }

    /// Where the file appears once committed.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the sink writes until then.
    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// Renames the (already synced) temporary file to the target, then `fsync`s the directory.
    /// The fault hook installed for the target's path sees the directory's `fsync`.
    pub(crate) fn commit(mut self) -> Result<(), Error> {
        std::fs::rename(&self.temp, &self.path).map_err(|source| Error::Io {
            op: eagerio_core::Op::Write,
            path: self.path.clone(),
            offset: None,
            target: None,
            source: io::Error::new(source.kind(), format!("renaming {:?} into place: {source}", self.temp)),
        })?;
        self.committed = true;
        sys::sync_parent(&self.path, fault::injected(&self.path).as_ref())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.committed {
            // Nothing to report to: a temporary file that was never created is fine too.
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}
