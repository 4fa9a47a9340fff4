//! Writes: a staged file beside the target, written through eagerio's tokio sink and published
//! by a rename (or, for `PutMode::Create`, a hard link), as `LocalFileSystem` publishes.

use std::{
    fs::OpenOptions,
    io,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use bytes::Bytes;
use eagerio_core::{sys, DataSink, Sink};
use eagerio_tokio::{TokioWriter, WriterOptions};
use futures::{future::BoxFuture, FutureExt};
use object_store::{MultipartUpload, PutPayload, PutResult, UploadPart};

use super::{read::OpenFiles, resolve::etag_of, resolve::generic};

/// How a staged file takes its target's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Publish {
    /// `rename(2)`: replaces any object there.
    Overwrite,
    /// `link(2)`, then the staged name is removed: refuses an existing object.
    Create,
}

/// A file being written under `<target>#<n>` (a name `LocalFileSystem`'s `list` skips and its
/// path rules refuse), removed unless published.
pub(super) struct Staged {
    sink: Sink<TokioWriter>,
    staged: PathBuf,
    target: PathBuf,
    /// The target relative to the root: its cached source is closed once replaced.
    rel: PathBuf,
    /// The staged file is the publish step's now (it removes it if it fails), or published.
    handed_off: bool,
}

impl Staged {
    /// Creates the staged file (and the target's missing directories, made durable) and its
    /// sink, in one blocking-pool task: if the caller's future is dropped meanwhile, the
    /// task's `Staged` is dropped with its result, which removes the file.
    pub(super) async fn create(target: PathBuf, rel: PathBuf, root: &Path) -> object_store::Result<Staged> {
        let root = root.to_path_buf();
        tokio::task::spawn_blocking(move || {
            let staged = claim_staged_name(&target, &root).map_err(generic)?;
            match TokioWriter::create_blocking(&staged, WriterOptions::default().keep(true)) {
                Ok(sink) => Ok(Staged { sink, staged, target, rel, handed_off: false }),
                Err(e) => {
                    let _ = std::fs::remove_file(&staged);
                    Err(generic(e))
                }
            }
        })
        .await
        .map_err(|e| generic(io::Error::other(e)))?
    }

    /// Starts the write of `data` at `offset`, now; the future reports it.
    pub(super) fn write_at(&self, offset: u64, data: Bytes) -> BoxFuture<'static, object_store::Result<()>> {
        self.sink.write_at(offset, data).map(|r| r.map_err(generic)).boxed()
    }

    /// Makes the file durable (`fdatasync`), gives it the target's name, and `fsync`s the
    /// directory. On failure the staged file is removed and the target is left as it was.
    pub(super) async fn publish(mut self, how: Publish, files: &Mutex<OpenFiles>) -> object_store::Result<PutResult> {
        self.sink.close().await.map_err(generic)?;
        let (staged, target) = (self.staged.clone(), self.target.clone());
        // From here the staged name is `publish`'s: it removes the file if it fails, and a
        // second removal by name could hit another upload's file that took the name since.
        self.handed_off = true;
        let e_tag = tokio::task::spawn_blocking(move || publish(&staged, &target, how))
            .await
            .map_err(|e| generic(io::Error::other(e)))??;
        files.lock().expect("open files").forget(&self.rel);
        Ok(PutResult { e_tag: Some(e_tag), version: None, extensions: Default::default() })
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.handed_off {
            // The sink's writes drain on their own; the name goes now.
            let _ = std::fs::remove_file(&self.staged);
        }
    }
}

/// Creates `<target>#<n>` exclusively for the first free `n`, creating the target's missing
/// directories (up to `root`) and `fsync`ing each parent of a new one.
fn claim_staged_name(target: &Path, root: &Path) -> io::Result<PathBuf> {
    let mut n = 1u64;
    loop {
        let mut name = target.as_os_str().to_owned();
        name.push(format!("#{n}"));
        let staged = PathBuf::from(name);
        match OpenOptions::new().write(true).create_new(true).open(&staged) {
            Ok(_) => return Ok(staged),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => n += 1,
            Err(e) if e.kind() == io::ErrorKind::NotFound => create_dirs(target.parent().unwrap_or(root), root)?,
            Err(e) => return Err(io::Error::new(e.kind(), format!("creating {}: {e}", staged.display()))),
        }
    }
}

/// `create_dir_all(dir)`, then an `fsync` of the parent of each directory it made, so the new
/// directories' names are durable.
fn create_dirs(dir: &Path, root: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut d = dir;
    while d.starts_with(root) && d != root && !d.exists() {
        missing.push(d.to_path_buf());
        match d.parent() {
            Some(p) => d = p,
            None => break,
        }
    }
    std::fs::create_dir_all(dir)?;
    for made in missing.iter().rev() {
        sys::sync_parent(made, None).map_err(io::Error::other)?;
    }
    Ok(())
}

/// The rename (or link) of a synced, closed staged file, then the directory's `fsync`; the
/// ETag is the staged file's (the same inode).
fn publish(staged: &Path, target: &Path, how: Publish) -> object_store::Result<String> {
    let result = (|| {
        let e_tag = etag_of(staged).map_err(generic)?;
        match how {
            Publish::Overwrite => std::fs::rename(staged, target).map_err(generic)?,
            Publish::Create => match std::fs::hard_link(staged, target) {
                Ok(()) => {
                    let _ = std::fs::remove_file(staged);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    return Err(object_store::Error::AlreadyExists {
                        path: target.display().to_string(),
                        source: Box::new(e),
                    })
                }
                Err(e) => return Err(generic(e)),
            },
        }
        sys::sync_parent(target, None).map_err(generic)?;
        Ok(e_tag)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(staged);
    }
    result
}

/// `put_multipart`: each part's write starts in `put_part`, at the offset the parts before it
/// end at; `complete` publishes as `put` does. Every method takes `&mut self`, so the staged
/// file needs no lock; the write futures a part returns hold nothing of it.
pub(super) struct Upload {
    /// `None` once completed or aborted.
    staged: Option<Staged>,
    files: Arc<Mutex<OpenFiles>>,
    offset: u64,
}

impl Upload {
    pub(super) fn new(staged: Staged, files: Arc<Mutex<OpenFiles>>) -> Upload {
        Upload { staged: Some(staged), files, offset: 0 }
    }
}

impl std::fmt::Debug for Upload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upload").field("offset", &self.offset).finish_non_exhaustive()
    }
}

/// The writes of `payload` from `offset`, started now, one per chunk.
pub(super) fn write_payload(
    staged: &Staged,
    mut offset: u64,
    payload: &PutPayload,
) -> Vec<BoxFuture<'static, object_store::Result<()>>> {
    payload
        .iter()
        .filter(|b| !b.is_empty())
        .map(|b| {
            let w = staged.write_at(offset, b.clone());
            offset += b.len() as u64;
            w
        })
        .collect()
}

fn aborted() -> object_store::Error {
    generic(io::Error::other("the upload was completed or aborted"))
}

#[async_trait::async_trait]
impl MultipartUpload for Upload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let offset = self.offset;
        self.offset += data.content_length() as u64;
        let writes = self.staged.as_ref().map(|s| write_payload(s, offset, &data));
        async move { futures::future::try_join_all(writes.ok_or_else(aborted)?).await.map(drop) }.boxed()
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let staged = self.staged.take().ok_or_else(aborted)?;
        staged.publish(Publish::Overwrite, &self.files).await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        let staged = self.staged.take().ok_or_else(aborted)?;
        drop(staged); // removes the staged file
        Ok(())
    }
}
