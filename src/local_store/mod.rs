//! [`EagerLocalStore`](crate::local_store::EagerLocalStore): an
//! [`ObjectStore`](::object_store::ObjectStore) over a local directory whose reads are eagerio
//! gathers, a drop-in for object_store's [`LocalFileSystem`] in DataFusion, delta-rs, parquet's
//! `ParquetObjectReader` and anything else that takes an `Arc<dyn ObjectStore>`.
//!
//! # What is eagerio's, and what is `LocalFileSystem`'s
//! - **Reads** are eagerio's. `get_ranges` is one gather of all its ranges (planned: sorted,
//!   deduplicated, coalesced, aligned, split; direct where the file allows it; copied from the
//!   page cache where the rows are already there), on the io_uring lanes of the process-wide
//!   driver, or on tokio's blocking pool where the ring is refused. `get_range` and `get_opts`
//!   read a range of up to 8 MiB as one gather, and a larger one as gathers of 8 MiB, four in
//!   flight, yielded in order. The buffer of a read of 4 MiB or more goes back to the store when
//!   the last `Bytes` of its result drops, and the next large read reuses it (up to
//!   [`LocalStoreOptions::output_pool_bytes`](crate::local_store::LocalStoreOptions::output_pool_bytes) kept): the allocator would hand such blocks back to
//!   the kernel, and fresh ones cost their zeroing again.
//! - **Writes** are eagerio's tokio sink: `put` and `put_multipart` write a staged file
//!   `<name>#<n>` beside the target, starting each write at call time, then make it durable
//!   (`fdatasync`), rename it into place (hard-link it for `PutMode::Create`, which refuses an
//!   existing object) and `fsync` the directory. A reader never sees half an object, and an
//!   acknowledged object survives a crash.
//! - **Names and listings** are `LocalFileSystem`'s own, called through: path rules and their
//!   errors, `list`, `list_with_delimiter`, `delete`, `copy`, `rename` (with `fsync` on, as
//!   the writes). Objects written by either store read the same through the other, with the
//!   same ETags.
//!
//! # When the I/O starts, and what the caller's thread does
//! The reads of `get_ranges` and `get_opts` are in flight when the first poll of their future
//! returns. That poll resolves the object's path (`openat2` + `fstat`, a few microseconds when
//! the directory is cached), plans the gather and submits it. The first read of a file also
//! opens it, on the blocking pool; the open source is cached (at most
//! [`LocalStoreOptions::max_open_files`](crate::local_store::LocalStoreOptions::max_open_files), least recently used closed first) and reused while
//! the file's inode, size and times are unchanged, so an object replaced by a `put` is read
//! anew. Dropping a read's future or stream stops the reads not yet started; buffers the kernel
//! still writes into are freed only when it is done (eagerio's invariant).
//!
//! # Paths outside the root
//! Every read resolves its path beneath the root with `openat2(RESOLVE_BENEATH)`, from a
//! descriptor of the root opened with the store: a symlink that leaves the root is refused with
//! `PermissionDenied`, never followed (where `LocalFileSystem` follows it). Writes, copies and
//! renames check the same way that their source is a file beneath the root and that their
//! target's directory resolves beneath it. A FIFO, socket or device is refused before it is
//! opened, so a read never blocks on one. A directory reads as `NotFound`, as in
//! `LocalFileSystem`. If the root directory itself is replaced (renamed away and made anew),
//! reads keep resolving in the directory the store opened, while names and listings follow the
//! path: make a new store.
//!
//! # Examples
//! ```no_run
//! # async fn f() -> object_store::Result<()> {
//! use std::sync::Arc;
//! use object_store::{path::Path, ObjectStore, ObjectStoreExt};
//!
//! let store: Arc<dyn ObjectStore> = Arc::new(eagerio::local_store::EagerLocalStore::new("/data")?);
//! store.put(&Path::from("t.bin"), vec![7u8; 1 << 20].into()).await?;
//! let parts = store.get_ranges(&Path::from("t.bin"), &[0..90, 4096..4186]).await?;
//! # Ok(()) }
//! ```
//!
//! [`LocalFileSystem`]: ::object_store::local::LocalFileSystem

mod read;
mod resolve;
mod write;

use std::{
    fmt,
    ops::Range,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use bytes::Bytes;
use futures::{stream::BoxStream, StreamExt};
use object_store::{
    local::LocalFileSystem, path::Path as ObjectPath, CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult,
    MultipartUpload, ObjectMeta, ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult,
    RenameOptions,
};

use read::{Chunks, OpenFiles, GET_CHUNK};
use resolve::{generic, Root};
use write::{Publish, Staged, Upload};

/// The name this store gives in `object_store::Error::Generic`.
const STORE: &str = "EagerLocalStore";

/// Default bound on the files a store keeps open for reading.
pub const DEFAULT_MAX_OPEN_FILES: usize = 128;

/// Default bound on the read buffers a store keeps for reuse (see
/// [`LocalStoreOptions::output_pool_bytes`]).
pub const DEFAULT_OUTPUT_POOL_BYTES: usize = 512 << 20;

/// Options of [`EagerLocalStore::with_options`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LocalStoreOptions {
    /// Files kept open for reading (default [`DEFAULT_MAX_OPEN_FILES`]); the least recently
    /// used is closed past it. At least 1.
    pub max_open_files: usize,
    /// Bytes of free read buffers kept for the next read (default
    /// [`DEFAULT_OUTPUT_POOL_BYTES`]; 0 keeps none). The buffer of a read of at least
    /// [`OutputPool::MIN`](eagerio_core::OutputPool::MIN) bytes (a `get_ranges` of a Parquet
    /// row group's columns) goes back to the store when the last `Bytes` of its result drops,
    /// and the next large read takes it instead of fresh memory the kernel must zero: the
    /// allocator returns blocks that large to the kernel at once. Buffers kept stay resident
    /// until a read takes them or [`EagerLocalStore::output_pool`]'s `clear` frees them.
    pub output_pool_bytes: usize,
}

impl Default for LocalStoreOptions {
    fn default() -> LocalStoreOptions {
        LocalStoreOptions { max_open_files: DEFAULT_MAX_OPEN_FILES, output_pool_bytes: DEFAULT_OUTPUT_POOL_BYTES }
    }
}

impl LocalStoreOptions {
    /// Sets [`max_open_files`](Self::max_open_files).
    #[must_use]
    pub fn max_open_files(mut self, n: usize) -> LocalStoreOptions {
        self.max_open_files = n;
        self
    }

    /// Sets [`output_pool_bytes`](Self::output_pool_bytes).
    #[must_use]
    pub fn output_pool_bytes(mut self, bytes: usize) -> LocalStoreOptions {
        self.output_pool_bytes = bytes;
        self
    }
}

/// An [`ObjectStore`] over the files beneath a local directory; see the [module
/// docs](self) for what it does and when.
pub struct EagerLocalStore {
    fs: LocalFileSystem,
    /// The root (its canonical path, as `LocalFileSystem` spells it, and its descriptor).
    root: Root,
    files: Arc<Mutex<OpenFiles>>,
}

impl EagerLocalStore {
    /// A store over the directory `root`, with default options. Call it, and use the store,
    /// inside a tokio runtime (the blocking pool runs its opens and writes).
    ///
    /// # Errors
    /// As [`with_options`](Self::with_options).
    pub fn new(root: impl AsRef<Path>) -> object_store::Result<EagerLocalStore> {
        EagerLocalStore::with_options(root, LocalStoreOptions::default())
    }

    /// A store over the directory `root`.
    ///
    /// # Errors
    /// `Generic` if `root` is not an existing directory, if the kernel lacks `openat2` (Linux
    /// 5.6), or if `max_open_files` is 0; `LocalFileSystem::new_with_prefix`'s errors.
    pub fn with_options(root: impl AsRef<Path>, opts: LocalStoreOptions) -> object_store::Result<EagerLocalStore> {
        if opts.max_open_files == 0 {
            return Err(generic(eagerio_core::Error::invalid_option(
                "LocalStoreOptions::max_open_files",
                "at least one file must stay open",
            )));
        }
        let base = std::fs::canonicalize(root.as_ref())
            .map_err(|e| generic(std::io::Error::new(e.kind(), format!("{}: {e}", root.as_ref().display()))))?;
        let root = Root::open(&base)
            .map_err(|e| generic(std::io::Error::new(e.kind(), format!("{}: {e}", base.display()))))?;
        let fs = LocalFileSystem::new_with_prefix(&base)?.with_fsync(true);
        let files = OpenFiles::new(opts.max_open_files, eagerio_core::OutputPool::new(opts.output_pool_bytes));
        Ok(EagerLocalStore { fs, root, files: Arc::new(Mutex::new(files)) })
    }

    /// The root directory (canonical).
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// Files open for reading now.
    pub fn open_files(&self) -> usize {
        self.files.lock().expect("open files").len()
    }

    /// The read buffers kept for reuse ([`LocalStoreOptions::output_pool_bytes`]): how many
    /// bytes are kept, how often a read took one, and `clear` to free them.
    pub fn output_pool(&self) -> Arc<eagerio_core::OutputPool> {
        self.files.lock().expect("open files").pool().clone()
    }

    /// Drops the page-table entries of every open file's mapping, so that evicting the files
    /// (`posix_fadvise(DONTNEED)`, `drop_caches`) takes every page. Reads copy cached pages
    /// through a mapping of the file, and the kernel skips mapped pages when it evicts (see
    /// [`eagerio_core::residency`]); memory pressure still reclaims them. For benchmarks and
    /// tests that evict on purpose; reads need nothing of it.
    pub fn unmap_resident(&self) {
        // Unmapping waits for the kernel: not under the lock every read takes.
        let sources = self.files.lock().expect("open files").sources();
        sources.iter().for_each(|s| s.unmap_resident());
    }

    /// `location`'s file: its absolute path (checked by `LocalFileSystem`'s path rules) and its
    /// path relative to the root.
    fn paths(&self, location: &ObjectPath) -> object_store::Result<(PathBuf, PathBuf)> {
        let full = self.fs.path_to_filesystem(location)?;
        let rel = full.strip_prefix(self.root.path()).map_err(|_| object_store::Error::InvalidPath {
            source: object_store::path::Error::InvalidPath { path: full.clone() },
        })?;
        let rel = if rel.as_os_str().is_empty() { PathBuf::from(".") } else { rel.to_path_buf() };
        Ok((full, rel))
    }

    /// `location`'s paths, after checking that the directory it goes in resolves beneath the
    /// root: a write never follows a symlink out of it.
    fn write_paths(&self, location: &ObjectPath) -> object_store::Result<(PathBuf, PathBuf)> {
        let (full, rel) = self.paths(location)?;
        let dir = rel.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        self.root.check_dir(dir, location)?;
        Ok((full, rel))
    }

    /// Checks that `from` is a file beneath the root and that `to` goes beneath it, before a
    /// copy or rename, which `LocalFileSystem` does by path.
    fn check_move(&self, from: &ObjectPath, to: &ObjectPath) -> object_store::Result<()> {
        let (_, rel) = self.paths(from)?;
        self.root.resolve(&rel, from)?;
        self.write_paths(to).map(drop)
    }

    fn forget(&self, location: &ObjectPath) {
        if let Ok((_, rel)) = self.paths(location) {
            self.files.lock().expect("open files").forget(&rel);
        }
    }
}

impl fmt::Display for EagerLocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EagerLocalStore({})", self.root.path().display())
    }
}

impl fmt::Debug for EagerLocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EagerLocalStore")
            .field("root", &self.root.path())
            .field("open_files", &self.open_files())
            .finish()
    }
}

fn refuse_attributes(what: &str, attributes_empty: bool) -> object_store::Result<()> {
    if attributes_empty {
        Ok(())
    } else {
        Err(object_store::Error::NotImplemented {
            operation: format!("`{what}` with `opts.attributes` specified"),
            implementer: STORE.to_string(),
        })
    }
}

#[async_trait]
impl ObjectStore for EagerLocalStore {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let how = match opts.mode {
            PutMode::Overwrite => Publish::Overwrite,
            PutMode::Create => Publish::Create,
            PutMode::Update(_) => {
                return Err(object_store::Error::NotImplemented {
                    operation: "`put_opts` with mode `PutMode::Update`".into(),
                    implementer: STORE.to_string(),
                })
            }
        };
        refuse_attributes("put_opts", opts.attributes.is_empty())?;
        let (full, rel) = self.write_paths(location)?;
        let staged = Staged::create(full, rel, self.root.path()).await?;
        futures::future::try_join_all(write::write_payload(&staged, 0, &payload)).await?;
        staged.publish(how, &self.files).await
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        refuse_attributes("put_multipart_opts", opts.attributes.is_empty())?;
        let (full, rel) = self.write_paths(location)?;
        let staged = Staged::create(full, rel, self.root.path()).await?;
        Ok(Box::new(Upload::new(staged, self.files.clone())))
    }

    async fn get_opts(&self, location: &ObjectPath, options: GetOptions) -> object_store::Result<GetResult> {
        let (_, rel) = self.paths(location)?;
        let resolved = self.root.resolve(&rel, location)?;
        let meta = resolved.meta(location);
        options.check_preconditions(&meta)?;
        let range = match &options.range {
            Some(r) => r.as_range(meta.size).map_err(generic)?,
            None => 0..meta.size,
        };
        let payload = if options.head || range.is_empty() {
            futures::stream::empty().boxed()
        } else {
            let source = read::source(&self.files, &rel, &resolved, location).await?;
            if range.end - range.start <= GET_CHUNK {
                let one = read::start_ranges(&source, std::slice::from_ref(&range), location)?;
                futures::stream::once(async move { one.await.map(|mut v| v.pop().expect("one range")) }).boxed()
            } else {
                Chunks::start(source, location.clone(), range.clone())?.boxed()
            }
        };
        Ok(GetResult {
            payload: GetResultPayload::Stream(payload),
            meta,
            range,
            attributes: Default::default(),
            extensions: Default::default(),
        })
    }

    async fn get_ranges(&self, location: &ObjectPath, ranges: &[Range<u64>]) -> object_store::Result<Vec<Bytes>> {
        let (_, rel) = self.paths(location)?;
        let resolved = self.root.resolve(&rel, location)?;
        read::check_ranges(location, ranges, resolved.size())?;
        if ranges.iter().all(|r| r.is_empty()) {
            return Ok(vec![Bytes::new(); ranges.len()]);
        }
        let source = read::source(&self.files, &rel, &resolved, location).await?;
        read::start_ranges(&source, ranges, location)?.await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        let files = self.files.clone();
        self.fs
            .delete_stream(locations)
            .inspect(move |r| {
                if let Ok(p) = r {
                    let rel: PathBuf = p.parts().map(|part| part.as_ref().to_string()).collect();
                    files.lock().expect("open files").forget(&rel);
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&ObjectPath>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.fs.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&ObjectPath>,
        offset: &ObjectPath,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.fs.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&ObjectPath>) -> object_store::Result<ListResult> {
        self.fs.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &ObjectPath, to: &ObjectPath, options: CopyOptions) -> object_store::Result<()> {
        self.check_move(from, to)?;
        self.fs.copy_opts(from, to, options).await?;
        self.forget(to);
        Ok(())
    }

    async fn rename_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.check_move(from, to)?;
        self.fs.rename_opts(from, to, options).await?;
        self.forget(from);
        self.forget(to);
        Ok(())
    }
}
