//! The file syscalls every backend shares: opening for direct or buffered gathers, positional
//! reads and writes that finish what they start, and page-cache advice.
//!
//! # References
//! `open(2)` (`O_DIRECT`), `statx(2)` (`STATX_DIOALIGN`), `pread(2)`, `pwrite(2)`,
//! `posix_fadvise(2)`, `fdatasync(2)`.

use std::{
    fs::File,
    io::{self, Seek},
    os::unix::{
        fs::{FileExt, FileTypeExt, OpenOptionsExt},
        io::AsRawFd,
    },
    path::Path,
};

use crate::error::{Error, Result};

/// Alignment of the staging memory and of every slot ([`crate::staging`]), and the largest
/// logical block a direct read is aligned to: a page.
pub const STAGING_ALIGN: usize = 4096;

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

/// Refuses a path that exists and is neither a regular file nor a block device, naming what it
/// is, before anything opens it: a FIFO's `open` would wait for a writer (forever, and blocking
/// the runtime's shutdown), and a directory would open and fail only at the first read. Block
/// devices are allowed: a table may be a raw partition. A path that does not exist passes (the
/// open that follows reports it, or a sink creates it).
///
/// # Errors
/// [`Error::Io`] ([`Op::Open`](crate::Op::Open), kind `InvalidInput`) naming the path and its
/// file type; the `stat` error if the path cannot be examined.
pub fn check_kind(path: &Path) -> Result<()> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::open(path, e)),
    };
    let t = meta.file_type();
    let what = if t.is_file() || t.is_block_device() {
        return Ok(());
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else {
        "not a regular file"
    };
    let why = format!("it is {what}; eagerio reads and writes regular files and block devices");
    Err(Error::open(path, io::Error::new(io::ErrorKind::InvalidInput, why)))
}

/// The length of an open file: its size, or a block device's capacity.
fn file_len(file: &File) -> io::Result<u64> {
    let meta = file.metadata()?;
    if meta.file_type().is_block_device() {
        let mut f: &File = file;
        return f.seek(io::SeekFrom::End(0));
    }
    Ok(meta.len())
}

/// Opens `path` for a sink: created if missing, truncated unless `keep`, refused at once if it
/// is neither a regular file nor a block device ([`check_kind`]). Returns the file and where
/// appends start: its length with `keep`, else 0.
///
/// # Errors
/// As [`check_kind`]; [`Error::Io`] ([`Op::Open`](crate::Op::Open)) if it cannot be opened for
/// writing (a read-only file or filesystem, a missing directory).
pub fn open_sink_file(path: &Path, keep: bool) -> Result<(File, u64)> {
    check_kind(path)?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(!keep)
        .open(path)
        .map_err(|e| Error::open(path, e))?;
    let end = if keep { file_len(&file).map_err(|e| Error::open(path, e))? } else { 0 };
    Ok((file, end))
}

/// Makes `path`'s name durable: `fsync` of the directory that holds it. A file's data is durable
/// after its own `fdatasync`; its directory entry (a new file, a rename) only after this. The
/// fault hook, if any, sees it as [`IoKind::SyncDir`](crate::fault::IoKind::SyncDir).
///
/// # Errors
/// [`Error::Io`] ([`Op::Sync`](crate::Op::Sync), naming the directory) if the directory cannot
/// be opened or its `fsync` fails.
pub fn sync_parent(path: &Path, hook: Option<&crate::fault::Hook>) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let point = crate::fault::IoPoint { kind: crate::fault::IoKind::SyncDir, offset: 0, len: 0 };
    crate::fault::with_hook(hook, point, || File::open(dir)?.sync_all().map(|()| 0)).map(drop).map_err(|source| {
        Error::Io { op: crate::Op::Sync, path: dir.to_path_buf(), offset: None, target: None, source }
    })
}

/// The name of a file a sink is about to create, until a directory `fsync` has made it durable.
///
/// A new file's data is durable after its `fdatasync`, but its name only after an `fsync` of its
/// directory: without one, a crash can leave the data with no name. A sink takes one of these
/// before it opens its file ([`NewName::before_open`]) and calls [`sync`](NewName::sync) after
/// each successful `fdatasync`: the first such call `fsync`s the directory, later ones cost
/// nothing. A file that existed before the open owes nothing.
///
/// A failed directory `fsync` is never retried into an `Ok`: every later call reports it.
#[derive(Debug)]
pub struct NewName {
    state: std::sync::Mutex<NameState>,
}

#[derive(Debug)]
enum NameState {
    /// Created by this sink; the directory entry is not durable yet.
    Owed(std::path::PathBuf),
    /// Durable (or the file existed before the open).
    Durable,
    /// The directory's `fsync` failed with this message.
    Failed(String),
}

impl NewName {
    /// Looks at `path` before the sink opens it: a file that is not there yet owes a directory
    /// `fsync` once it is created.
    pub fn before_open(path: &Path) -> NewName {
        // Following links: a dangling link's target is created by the open.
        let state = match std::fs::metadata(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => NameState::Owed(path.to_path_buf()),
            _ => NameState::Durable,
        };
        NewName { state: std::sync::Mutex::new(state) }
    }

    /// Whether the name is durable: [`sync`](Self::sync) then returns `Ok` at once. Otherwise
    /// it blocks on the directory `fsync`, or reports the one that failed.
    pub fn is_durable(&self) -> bool {
        matches!(*self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner), NameState::Durable)
    }

    /// After a successful `fdatasync` of the file: `fsync`s its directory if that is still owed
    /// (blocking), through [`sync_parent`] and its fault hook.
    ///
    /// # Errors
    /// The directory `fsync`'s error, now and at every later call.
    pub fn sync(&self, hook: Option<&crate::fault::Hook>) -> io::Result<()> {
        let mut st = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match &*st {
            NameState::Durable => Ok(()),
            NameState::Failed(why) => Err(io::Error::other(format!("the directory fsync failed earlier: {why}"))),
            // The directory that holds the file itself, past any link to it.
            NameState::Owed(path) => match sync_parent(&std::fs::canonicalize(path).unwrap_or(path.clone()), hook) {
                Ok(()) => {
                    *st = NameState::Durable;
                    Ok(())
                }
                Err(e) => {
                    let kind = e.kind();
                    *st = NameState::Failed(e.to_string());
                    Err(io::Error::new(kind, e))
                }
            },
        }
    }

    /// [`sync`](Self::sync) on a short-lived thread, then `then` with its outcome there: for a
    /// backend whose completions run on a thread that must not block (a ring's lane, an
    /// executor). If no thread can be started, `then` gets that error at once.
    pub fn sync_on_thread(
        self: &std::sync::Arc<Self>,
        hook: Option<crate::fault::Hook>,
        then: impl FnOnce(io::Result<()>) + Send + 'static,
    ) {
        let name = self.clone();
        let then = std::sync::Arc::new(std::sync::Mutex::new(Some(then)));
        let on_thread = then.clone();
        let started = std::thread::Builder::new().name("eagerio-dirsync".into()).spawn(move || {
            let res = name.sync(hook.as_ref());
            if let Some(f) = on_thread.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
                f(res);
            }
        });
        if let Err(e) = started {
            if let Some(f) = then.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
                f(Err(e));
            }
        }
    }
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
/// As [`check_kind`] for what is not a regular file or block device; [`Error::Io`] if the file
/// cannot be opened; [`Error::DirectIoUnsupported`] if `mode` is [`DirectIo::On`] and the
/// filesystem refuses it.
pub fn open_for_gather(path: &Path, mode: DirectIo) -> Result<GatherFile> {
    check_kind(path)?;
    if mode != DirectIo::Off {
        match open_direct(path) {
            Ok(f) => return Ok(f),
            Err(source) if mode == DirectIo::On => {
                return Err(Error::DirectIoUnsupported { path: path.to_path_buf(), source })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.kind() == io::ErrorKind::PermissionDenied => {
                return Err(Error::open(path, e));
            }
            Err(e) => tracing::debug!(?path, error = %e, "O_DIRECT refused; using buffered reads"),
        }
    }
    let file = File::open(path).map_err(|e| Error::open(path, e))?;
    let len = file_len(&file).map_err(|e| Error::open(path, e))?;
    advise(&file, libc::POSIX_FADV_RANDOM);
    Ok(GatherFile { file, direct: false, align: 1, len })
}

fn open_direct(path: &Path) -> io::Result<GatherFile> {
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path)?;
    let len = file_len(&file)?;
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

/// Bytes of `file` in the page cache: `mincore` over a fresh read-only mapping, which is never
/// read (so counting adds no page).
///
/// # Errors
/// If the file cannot be sized or mapped, or `mincore` fails.
pub fn resident_bytes(file: &File) -> io::Result<u64> {
    let len = usize::try_from(file.metadata()?.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    if len == 0 {
        return Ok(0);
    }
    let page = page_size();
    // SAFETY: a new shared read-only mapping of an open file, at an address the kernel picks; it
    // is unmapped below and never read, so a concurrent truncation cannot fault.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0) };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: `p` maps `len` bytes; `vec` has one byte per page of them.
    let rc = unsafe { libc::mincore(p, len, vec.as_mut_ptr()) };
    let err = io::Error::last_os_error();
    // SAFETY: unmaps exactly the mapping made above, which nothing else refers to.
    unsafe { libc::munmap(p, len) };
    if rc != 0 {
        return Err(err);
    }
    Ok(vec.iter().filter(|&&b| b & 1 != 0).count() as u64 * page as u64)
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

/// Whether a write of `data` at `offset` is whole blocks of `align` bytes from an address that
/// is a multiple of `align`: what `O_DIRECT` accepts.
pub fn direct_fits(align: u64, data: &[u8], offset: u64) -> bool {
    !data.is_empty() && offset % align == 0 && data.len() as u64 % align == 0 && data.as_ptr() as u64 % align == 0
}

/// A sink file's second descriptor, opened with `O_DIRECT`: a write whose offset, length and
/// buffer address are all multiples of the filesystem's direct-I/O alignment goes through it,
/// from the caller's bytes straight to the device, with no copy into the page cache and nothing
/// left for the closing `fdatasync` to write back. Other writes stay buffered.
///
/// The two descriptors stay coherent: a direct write's pages are never shared with a buffered
/// write of another range (it covers whole aligned blocks), and the kernel writes back and drops
/// any cached copy of its range first.
#[derive(Debug)]
pub struct DirectWrites {
    file: File,
    align: u64,
}

impl DirectWrites {
    /// Opens `path` (already created) again for direct writes; `None` where the filesystem
    /// refuses `O_DIRECT` or reports no alignment (every write is then buffered).
    pub fn open(path: &Path) -> Option<DirectWrites> {
        let file = std::fs::OpenOptions::new().write(true).custom_flags(libc::O_DIRECT).open(path).ok()?;
        // At least a page: a direct write then never shares a page with a buffered write of a
        // neighbouring range, whatever the device's sector size.
        let align = dio_alignment(&file)?.max(4096);
        Some(DirectWrites { file, align })
    }

    /// The alignment of offset, length and buffer address a direct write needs.
    pub fn alignment(&self) -> u64 {
        self.align
    }

    /// Whether `data` written at `offset` can go direct.
    pub fn fits(&self, data: &[u8], offset: u64) -> bool {
        direct_fits(self.align, data, offset)
    }

    /// The descriptor, for a backend that submits its own writes (a ring).
    pub fn into_file(self) -> File {
        self.file
    }

    /// Writes all of `data` at `offset`: direct when it [`fits`](Self::fits), else (and for
    /// the rest of a short direct write) through `buffered`.
    ///
    /// # Errors
    /// The first `pwrite` error.
    pub fn write_all(&self, buffered: &File, data: &[u8], offset: u64) -> io::Result<()> {
        let mut done = 0;
        if self.fits(data, offset) {
            loop {
                match self.file.write_at(data, offset) {
                    Ok(n) => break done = n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }
        pwrite_all(buffered, &data[done..], offset + done as u64)
    }
}

/// Asks the kernel to back the 2 MiB-aligned interior of `len` bytes at `ptr` with transparent
/// huge pages (`MADV_HUGEPAGE`). A gather's fresh output is first touched by its copies, one
/// page fault per 4 KiB page (zeroing, allocation and accounting each time: about a third of a
/// warm 4 KiB-row gather's time); with huge pages it is one fault per 2 MiB. Only advice: the
/// contents do not change, memory outside the interior is untouched, and a kernel without
/// transparent huge pages (or with them off) ignores it.
pub fn huge_pages(ptr: *mut u8, len: usize) {
    const HUGE: usize = 2 << 20;
    let start = (ptr as usize).next_multiple_of(HUGE);
    let end = (ptr as usize).saturating_add(len) & !(HUGE - 1);
    if end > start {
        // SAFETY: MADV_HUGEPAGE is advice over whole pages: it changes neither the contents nor
        // the protection of any range, mapped or not (an unmapped one is an ENOMEM, ignored),
        // so no argument can make it unsound.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

/// The page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// Faults in, writable, the whole pages of `len` bytes at `ptr` (`MADV_POPULATE_WRITE`, Linux
/// 5.14; nothing on older kernels), without changing a byte: so that later writes there take no
/// page fault. Only pages wholly inside the range are touched. Returns whether it ran.
pub fn populate_write(ptr: *mut u8, len: usize) -> bool {
    let page = page_size();
    let start = (ptr as usize).next_multiple_of(page);
    let end = (ptr as usize).saturating_add(len) / page * page;
    if end <= start {
        return false;
    }
    // SAFETY: MADV_POPULATE_WRITE faults pages in as a write would without writing: no byte of
    // any range changes, mapped or not (an unmapped one is an ENOMEM, a kernel without it an
    // EINVAL, both ignored). The range holds only whole pages of the caller's own buffer, so
    // no other mapping (a shared file's, say) is faulted in writable.
    unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_POPULATE_WRITE) == 0 }
}

/// Puts the calling thread in the `SCHED_BATCH` class, for throughput work that must not take
/// the CPU from the thread that woke it: the kernel never preempts a running thread for a batch
/// thread that wakes up (it waits for the next tick, or runs on an idle CPU), and otherwise
/// schedules it as any other thread of its nice level. Whether the kernel took it.
pub fn batch_scheduling() -> bool {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is valid for the call, and SCHED_BATCH takes
    // priority 0 and needs no privilege.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) == 0 }
}

#[cfg(all(test, not(eagerio_loom), target_os = "linux"))]
mod tests {
    /// Which of the `pages` pages at `base` are resident (`mincore`).
    fn resident(base: *mut u8, pages: usize) -> Vec<bool> {
        let mut v = vec![0u8; pages];
        // SAFETY: `base` maps `pages` pages (the test's own mapping); `v` has one byte per page.
        let rc = unsafe { libc::mincore(base.cast(), pages * super::page_size(), v.as_mut_ptr()) };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        v.iter().map(|b| b & 1 == 1).collect()
    }

    #[test]
    fn populate_faults_in_the_whole_pages_of_its_range_and_no_other() {
        let page = super::page_size();
        assert!(page >= 4096 && page.is_power_of_two(), "{page}");
        // SAFETY: a fresh private anonymous mapping of 6 pages, unmapped at the end.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                6 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        let base = base.cast::<u8>();
        assert_eq!(resident(base, 6), [false; 6], "nothing touched yet");
        // Less than a whole page: nothing.
        // SAFETY: inside the mapping (pointer arithmetic only; nothing is dereferenced).
        assert!(!super::populate_write(unsafe { base.add(100) }, page - 100));
        assert_eq!(resident(base, 6), [false; 6]);
        // From 100 bytes into page 1 to 100 bytes into page 4: pages 2 and 3 only.
        // SAFETY: as above.
        assert!(super::populate_write(unsafe { base.add(page + 100) }, 3 * page));
        assert_eq!(resident(base, 6), [false, false, true, true, false, false]);
        // Aligned: exactly its pages.
        assert!(super::populate_write(base, page));
        assert_eq!(resident(base, 6), [true, false, true, true, false, false]);
        // SAFETY: the mapping made above; nothing refers to it after this.
        unsafe { libc::munmap(base.cast(), 6 * page) };
    }

    /// The `VmFlags` of the mapping that holds `addr`, from `/proc/self/smaps`.
    fn vm_flags(addr: usize) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((a, b)) = range.split_once('-') {
                    if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                        inside = (a..b).contains(&addr);
                        continue;
                    }
                }
            }
            if inside {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    return flags.trim().to_string();
                }
            }
        }
        panic!("no mapping holds {addr:#x}");
    }

    /// A large output buffer gets huge-page advice over its aligned interior, and only there.
    #[test]
    fn sys_huge_pages_advises_the_aligned_interior() {
        const HUGE: usize = 2 << 20;
        let mut buf: Vec<u8> = Vec::with_capacity(5 * HUGE);
        let ptr = buf.as_mut_ptr();
        let interior = (ptr as usize).next_multiple_of(HUGE);
        assert!(!vm_flags(interior).split(' ').any(|f| f == "hg"), "not advised before");
        super::huge_pages(ptr, buf.capacity());
        assert!(vm_flags(interior).split(' ').any(|f| f == "hg"), "{}", vm_flags(interior));
        if interior > ptr as usize {
            assert!(!vm_flags(ptr as usize).split(' ').any(|f| f == "hg"), "the unaligned head is left alone");
        }
        // Too small to hold an aligned 2 MiB: nothing to advise, and no error.
        let mut small = vec![1u8; 4096];
        super::huge_pages(small.as_mut_ptr(), small.len());
        assert_eq!(small, vec![1u8; 4096]);
    }

    /// A thread asking for batch scheduling is in `SCHED_BATCH` after, and only that thread.
    #[test]
    fn sys_batch_scheduling_is_per_thread() {
        // SAFETY: pid 0 is the calling thread.
        let policy = || unsafe { libc::sched_getscheduler(0) };
        let before = policy();
        let inner = std::thread::spawn(move || (super::batch_scheduling(), policy())).join().unwrap();
        assert_eq!(inner, (true, libc::SCHED_BATCH));
        assert_eq!(policy(), before, "the calling thread keeps its class");
    }
}
