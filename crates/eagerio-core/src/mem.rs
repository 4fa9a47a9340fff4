//! An in-memory backend: a file held in memory, read and written on the calling thread.
//!
//! It is the smallest complete implementation of [`ReadEngine`] and [`WriteEngine`]: reads go
//! through the same staging slots and job ledger as every other backend, so it runs the
//! conformance suite, and because it uses only the loom shim's types it also runs under loom,
//! where users model-check their own I/O ordering with it.

use std::{io, path::Path, path::PathBuf, sync::Arc as StdArc};

use crate::error::Result;
use crate::gather::{FileInfo, JobHandle, ReadEngine};
use crate::loom::{lock, Mutex};
use crate::sink::{SyncOp, WriteEngine, WriteOp};
use crate::staging::Staging;

/// A growable in-memory file shared by its engines.
#[derive(Debug, Clone, Default)]
pub struct MemFile {
    bytes: StdArc<Mutex<Vec<u8>>>,
}

impl MemFile {
    /// A file holding `bytes`.
    pub fn new(bytes: Vec<u8>) -> MemFile {
        MemFile { bytes: StdArc::new(Mutex::new(bytes)) }
    }

    /// A copy of the contents.
    pub fn contents(&self) -> Vec<u8> {
        lock(&self.bytes).clone()
    }

    /// Current length.
    pub fn len(&self) -> u64 {
        lock(&self.bytes).len() as u64
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Cuts the file to `len` bytes.
    pub fn truncate(&self, len: u64) {
        lock(&self.bytes).truncate(len as usize);
    }

    /// `pread`: copies what exists at `offset` into `buf`, returns the count.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> usize {
        let f = lock(&self.bytes);
        let start = (offset as usize).min(f.len());
        let n = buf.len().min(f.len() - start);
        buf[..n].copy_from_slice(&f[start..start + n]);
        n
    }

    /// `pwrite`: writes `data` at `offset`, zero-filling any hole.
    pub fn write_at(&self, offset: u64, data: &[u8]) {
        let mut f = lock(&self.bytes);
        let end = offset as usize + data.len();
        if f.len() < end {
            f.resize(end, 0);
        }
        f[offset as usize..end].copy_from_slice(data);
    }
}

/// Reads a [`MemFile`] through staging, on the calling thread, at submit time.
#[derive(Debug, Clone)]
pub struct MemEngine {
    file: MemFile,
    info: FileInfo,
    staging: Staging,
}

impl MemEngine {
    /// An engine over `file`, named `path` in errors, with `staging_bytes` of 4 KiB slots.
    ///
    /// # Errors
    /// As [`Staging::new`].
    pub fn new(file: MemFile, path: impl Into<PathBuf>, staging_bytes: usize) -> Result<MemEngine> {
        let staging = Staging::new(staging_bytes, 4096)?;
        let info = FileInfo { path: path.into(), len: file.len(), align: 1, max_read: 4096 };
        Ok(MemEngine { file, info, staging })
    }

    /// The staging pool (full again once every read is done).
    pub fn staging(&self) -> &Staging {
        &self.staging
    }

    /// The file.
    pub fn file(&self) -> &MemFile {
        &self.file
    }
}

impl ReadEngine for MemEngine {
    fn info(&self) -> &FileInfo {
        &self.info
    }

    fn submit(&self, job: JobHandle) {
        while let Some(i) = job.next_extent() {
            let e = job.plan().extents()[i];
            let mut slot = self.staging.acquire_blocking();
            let n = slot.with_mut(|buf| self.file.read_at(e.offset, &mut buf[..e.len as usize]));
            slot.with(|buf| job.complete(i, buf, Ok(n)));
        }
    }
}

impl WriteEngine for MemEngine {
    fn path(&self) -> &Path {
        &self.info.path
    }

    fn submit_write(&self, op: WriteOp<Self>) {
        self.file.write_at(op.offset(), op.data());
        op.complete(Ok(()));
    }

    fn submit_sync(&self, op: SyncOp<Self>) {
        op.complete(Ok::<(), io::Error>(()));
    }
}
