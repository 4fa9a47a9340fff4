//! The file syscalls every backend shares: opening for direct or buffered gathers, positional
//! reads and writes that finish what they start, and page-cache advice.
//!
//! # References
//! `open(2)` (`O_DIRECT`), `statx(2)` (`STATX_DIOALIGN`), `pread(2)`, `pwrite(2)`,
//! `posix_fadvise(2)`, `fdatasync(2)`.

use std::{
    fs::File,
    io,
    os::unix::{
        fs::{FileExt, OpenOptionsExt},
        io::AsRawFd,
    },
    path::Path,
};

use crate::error::{Error, Op, Result};
use crate::staging::STAGING_ALIGN;

/// Whether gathers bypass the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DirectIo {
    /// `O_DIRECT` where the filesystem supports it, else buffered reads with
    /// `POSIX_FADV_RANDOM`. The default.
    #[default]
    Auto,
    /// `O_DIRECT`, or [`Error::DirectIoUnsupported`] at open.
    On,
    /// Buffered reads with `POSIX_FADV_RANDOM`.
    Off,
}

/// A file opened for gathers.
#[derive(Debug)]
pub struct GatherFile {
    /// The open file.
    pub file: File,
    /// Whether it was opened with `O_DIRECT`.
    pub direct: bool,
    /// Offset and length alignment reads need (1 when buffered).
    pub align: u64,
    /// Its length at open.
    pub len: u64,
}

fn io_err(op: Op, path: &Path, source: io::Error) -> Error {
    Error::Io { op, path: path.to_path_buf(), offset: None, target: None, source }
}

/// The direct-I/O offset alignment the filesystem reports for `file` (`STATX_DIOALIGN`), or
/// `None` if it reports none.
pub fn dio_alignment(file: &File) -> Option<u64> {
    const STATX_DIOALIGN: u32 = 0x2000;
    // SAFETY: `statx` is plain old data; all-zero is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let empty = b"\0";
    // SAFETY: the fd is open for the call's duration, the path is a NUL-terminated empty string
    // used with AT_EMPTY_PATH, and `stx` is a valid out-pointer.
    let rc =
        unsafe { libc::statx(file.as_raw_fd(), empty.as_ptr().cast(), libc::AT_EMPTY_PATH, STATX_DIOALIGN, &mut stx) };
    if rc != 0 || stx.stx_mask & STATX_DIOALIGN == 0 || stx.stx_dio_offset_align == 0 {
        return None;
    }
    Some(u64::from(stx.stx_dio_offset_align).max(u64::from(stx.stx_dio_mem_align)))
}

/// Opens `path` read-only for gathers, with `O_DIRECT` per `mode`.
///
/// With [`DirectIo::Auto`], a filesystem that refuses `O_DIRECT` (at open, in `statx`, or on a
/// probe read) falls back to buffered reads with `POSIX_FADV_RANDOM`, logged at debug level.
///
/// # Errors
/// [`Error::Io`] if the file cannot be opened; [`Error::DirectIoUnsupported`] if `mode` is
/// [`DirectIo::On`] and the filesystem refuses it.
pub fn open_for_gather(path: &Path, mode: DirectIo) -> Result<GatherFile> {
    if mode != DirectIo::Off {
        match open_direct(path) {
            Ok(f) => return Ok(f),
            Err(source) if mode == DirectIo::On => {
                return Err(Error::DirectIoUnsupported { path: path.to_path_buf(), source })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.kind() == io::ErrorKind::PermissionDenied => {
                return Err(io_err(Op::Open, path, e));
            }
            Err(e) => tracing::debug!(?path, error = %e, "O_DIRECT refused; using buffered reads"),
        }
    }
    let file = File::open(path).map_err(|e| io_err(Op::Open, path, e))?;
    let len = file.metadata().map_err(|e| io_err(Op::Open, path, e))?.len();
    advise(&file, libc::POSIX_FADV_RANDOM);
    Ok(GatherFile { file, direct: false, align: 1, len })
}

fn open_direct(path: &Path) -> io::Result<GatherFile> {
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path)?;
    let len = file.metadata()?.len();
    let align = dio_alignment(&file).unwrap_or(512);
    if align > STAGING_ALIGN as u64 {
        return Err(io::Error::new(io::ErrorKind::Unsupported, format!("direct I/O alignment {align} exceeds 4096")));
    }
    // Probe: some filesystems accept the flag and refuse the reads.
    if len > 0 {
        let layout = std::alloc::Layout::from_size_align(STAGING_ALIGN, STAGING_ALIGN).expect("valid layout");
        // SAFETY: non-zero size.
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: `p` is a live allocation of 4096 bytes.
        let buf = unsafe { std::slice::from_raw_parts_mut(p, STAGING_ALIGN) };
        let r = file.read_at(buf, 0);
        // SAFETY: allocated above with the same layout; `buf` is not used after this.
        unsafe { std::alloc::dealloc(p, layout) };
        r?;
    }
    Ok(GatherFile { file, direct: true, align, len })
}

/// `posix_fadvise(advice)` over the whole file; failures are ignored (advice is advice).
pub fn advise(file: &File, advice: libc::c_int) {
    // SAFETY: plain syscall on an open fd.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, advice) };
}

/// Evicts `path`'s clean pages from the page cache (`POSIX_FADV_DONTNEED`), without root.
///
/// # Errors
/// If the file cannot be opened or synced.
pub fn evict(path: &Path) -> io::Result<()> {
    let f = File::open(path)?;
    f.sync_data()?;
    advise(&f, libc::POSIX_FADV_DONTNEED);
    Ok(())
}

/// Reads up to `buf.len()` bytes at `offset`, retrying short reads until end of file. With
/// `direct_align > 1` it stops at a short read whose end is unaligned (that is end of file under
/// `O_DIRECT`). Returns the bytes read.
///
/// # Errors
/// The first `pread` error other than `EINTR`.
pub fn pread_full(file: &File, buf: &mut [u8], offset: u64, direct_align: u64) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], offset + n as u64) {
            Ok(0) => break,
            Ok(r) => {
                n += r;
                if direct_align > 1 && (offset + n as u64) % direct_align != 0 {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Writes all of `data` at `offset`, retrying short writes and `EINTR`.
///
/// # Errors
/// The first `pwrite` error, or `WriteZero` if the kernel accepts nothing.
pub fn pwrite_all(file: &File, data: &[u8], offset: u64) -> io::Result<()> {
    file.write_all_at(data, offset)
}
