//! Finding an object's file beneath the store's root, and describing it as object_store does.
//!
//! Every read resolves its path with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` from a
//! descriptor of the root opened once: a `..`, an absolute symlink or a relative one that
//! climbs out is refused by the kernel (`EXDEV`), whatever the tree looks like at that moment,
//! so no byte from outside the root is ever read. The descriptor is `O_PATH`: resolving a FIFO
//! or a device opens nothing and cannot block; its type is checked before any read.

use std::{
    ffi::CString,
    io,
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::{Path, PathBuf},
};

use chrono::{DateTime, Utc};
use object_store::{path::Path as ObjectPath, ObjectMeta};

use super::STORE;

/// The store's root, held open.
#[derive(Debug)]
pub(super) struct Root {
    dir: OwnedFd,
    path: PathBuf,
}

/// What identifies one version of a file: a cached source is reused only while this is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ident {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

/// A regular file found beneath the root, with its `fstat`.
pub(super) struct Resolved {
    fd: OwnedFd,
    ident: Ident,
}

impl Root {
    /// Opens `path` (a directory) as the root, and checks that `openat2` works here.
    pub(super) fn open(path: &Path) -> io::Result<Root> {
        let c = cstring(path)?;
        // SAFETY: `c` is a NUL-terminated path that lives across the call.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `open` returned a descriptor that nothing else owns.
        let dir = unsafe { OwnedFd::from_raw_fd(fd) };
        let root = Root { dir, path: path.to_path_buf() };
        // `.` always resolves; ENOSYS here means a kernel older than 5.6.
        root.openat2(Path::new(".")).map_err(|e| {
            if e.raw_os_error() == Some(libc::ENOSYS) {
                io::Error::new(io::ErrorKind::Unsupported, "EagerLocalStore needs openat2 (Linux 5.6 or later)")
            } else {
                e
            }
        })?;
        Ok(root)
    }

    /// The root's path, as given.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// `openat2` beneath the root, as `O_PATH`. Retried on `EAGAIN`, which `RESOLVE_BENEATH`
    /// returns when a `..` is resolved while a rename runs anywhere on the system.
    fn openat2(&self, rel: &Path) -> io::Result<OwnedFd> {
        let mut tries = 0;
        loop {
            match self.openat2_once(rel) {
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && tries < 16 => tries += 1,
                r => return r,
            }
        }
    }

    fn openat2_once(&self, rel: &Path) -> io::Result<OwnedFd> {
        let c = cstring(rel)?;
        // SAFETY: `open_how` is plain data; all-zero is a valid value, then filled in.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
        how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
        // SAFETY: the directory descriptor is open, `c` and `how` live across the call, and the
        // size passed is `how`'s own.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                self.dir.as_raw_fd(),
                c.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `openat2` returned a descriptor that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
    }

    /// Resolves `rel` (relative to the root) to a regular file. `location` names the object in
    /// errors.
    ///
    /// # Errors
    /// `NotFound` for a missing path or a directory (as `LocalFileSystem`), `PermissionDenied`
    /// for a path that resolves outside the root, `Generic` for anything that is not a regular
    /// file (a FIFO, a socket, a device) and for other failures.
    pub(super) fn resolve(&self, rel: &Path, location: &ObjectPath) -> object_store::Result<Resolved> {
        let fd = self.openat2(rel).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT | libc::ENOTDIR) => not_found(location, e),
            Some(libc::EXDEV) => self.outside(location),
            _ => generic(io::Error::new(e.kind(), format!("{location}: {e}"))),
        })?;
        let st = fstat(&fd).map_err(|e| generic(io::Error::new(e.kind(), format!("{location}: {e}"))))?;
        match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => {}
            libc::S_IFDIR => return Err(not_found(location, io::Error::new(io::ErrorKind::NotFound, "is directory"))),
            other => {
                let kind = match other {
                    libc::S_IFIFO => "a FIFO",
                    libc::S_IFSOCK => "a socket",
                    libc::S_IFCHR => "a character device",
                    libc::S_IFBLK => "a block device",
                    _ => "not a regular file",
                };
                return Err(generic(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{location} is {kind}, not a regular file: refused before any read"),
                )));
            }
        }
        let ident = Ident {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size as u64,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        };
        Ok(Resolved { fd, ident })
    }
}

impl Root {
    fn outside(&self, location: &ObjectPath) -> object_store::Error {
        object_store::Error::PermissionDenied {
            path: location.to_string(),
            source: Box::new(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{location} resolves outside the store's root {}", self.path.display()),
            )),
        }
    }

    /// Checks that the directory `rel_dir` (relative to the root), where `location` is about to
    /// be written, resolves beneath the root. A missing directory passes (it is created, and
    /// the kernel reports an escape before a missing component); other failures are left to
    /// the write, which reports them.
    ///
    /// # Errors
    /// `PermissionDenied` if it resolves outside the root.
    pub(super) fn check_dir(&self, rel_dir: &Path, location: &ObjectPath) -> object_store::Result<()> {
        match self.openat2(rel_dir) {
            Err(e) if e.raw_os_error() == Some(libc::EXDEV) => Err(self.outside(location)),
            _ => Ok(()),
        }
    }
}

impl Resolved {
    pub(super) fn ident(&self) -> Ident {
        self.ident
    }

    pub(super) fn size(&self) -> u64 {
        self.ident.size
    }

    /// A second descriptor of the resolved file, to keep [`reopen_path`](Self::reopen_path)
    /// valid for as long as an open through it may run.
    pub(super) fn keep(&self) -> io::Result<OwnedFd> {
        self.fd.try_clone()
    }

    /// A path that opens this very file (the `/proc/self/fd` link of the resolved descriptor),
    /// valid while `self` lives. The engines open files by path; reopening through the link
    /// keeps the file the one resolved beneath the root, even if the tree changes meanwhile.
    pub(super) fn reopen_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }

    /// The object's metadata, as `LocalFileSystem` gives it (the same ETag scheme).
    pub(super) fn meta(&self, location: &ObjectPath) -> ObjectMeta {
        let (secs, nanos) = self.ident.mtime;
        ObjectMeta {
            location: location.clone(),
            last_modified: DateTime::<Utc>::from_timestamp(secs, nanos as u32).unwrap_or_default(),
            size: self.ident.size,
            e_tag: Some(etag(self.ident.ino, self.ident.mtime, self.ident.size)),
            version: None,
        }
    }
}

/// The ETag `LocalFileSystem` gives a file: inode, modification time in microseconds and size,
/// in hex, quoted.
pub(super) fn etag(ino: u64, (secs, nanos): (i64, i64), size: u64) -> String {
    // Before 1970 counts as 0, as `LocalFileSystem` does.
    let micros = if secs < 0 { 0 } else { (secs as u128) * 1_000_000 + (nanos.max(0) as u128) / 1_000 };
    format!("\"{ino:x}-{micros:x}-{size:x}\"")
}

/// The ETag of the file at `path` (a staged upload about to be published).
pub(super) fn etag_of(path: &Path) -> io::Result<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path)?;
    Ok(etag(m.ino(), (m.mtime(), m.mtime_nsec()), m.size()))
}

fn fstat(fd: &OwnedFd) -> io::Result<libc::stat> {
    // SAFETY: `stat` is plain data, filled in by the call.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: the descriptor is open and `st` is a valid out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

fn cstring(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("{}: a NUL byte in the path", p.display())))
}

pub(super) fn not_found(location: &ObjectPath, source: io::Error) -> object_store::Error {
    object_store::Error::NotFound { path: location.to_string(), source: Box::new(source) }
}

pub(super) fn generic(source: impl std::error::Error + Send + Sync + 'static) -> object_store::Error {
    object_store::Error::Generic { store: STORE, source: Box::new(source) }
}
