//! What the bench reads off the OS: eviction, block-device counters, major faults, peak RSS,
//! page-cache residency of the table, and a description of the machine.

use std::{
    fs::File,
    io,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::atomic::{AtomicU8, Ordering},
};

/// How cold runs evict the table's pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvictHow {
    /// `sync; echo 1 > /proc/sys/vm/drop_caches` (root, writable /proc/sys).
    DropCaches,
    /// `POSIX_FADV_DONTNEED` on the file (`eagerio_core::sys::evict`); `chosen` when
    /// `EAGERIO_BENCH_EVICT=fadvise` asked for it, else drop_caches was not writable.
    Fadvise { chosen: bool },
}

impl EvictHow {
    pub fn describe(self) -> &'static str {
        match self {
            EvictHow::DropCaches => "sync + echo 1 > /proc/sys/vm/drop_caches",
            EvictHow::Fadvise { chosen: true } => {
                "POSIX_FADV_DONTNEED on the file (EAGERIO_BENCH_EVICT=fadvise: drop_caches not used, to spare other processes' caches)"
            }
            EvictHow::Fadvise { chosen: false } => "POSIX_FADV_DONTNEED on the file (drop_caches not writable here)",
        }
    }
}

/// 0: untried, 1: drop_caches works, 2: it does not, 3: not wanted.
static DROP_CACHES: AtomicU8 = AtomicU8::new(0);

/// Uses fadvise only, never drop_caches (which empties every process's page cache; on a shared
/// machine `EAGERIO_BENCH_EVICT=fadvise` spares the neighbours).
pub fn fadvise_only() {
    DROP_CACHES.store(3, Ordering::Relaxed);
}

/// Evicts `path`'s pages from the page cache: drop_caches when it is writable (and then fadvise
/// too, in case a container makes drop_caches a no-op), else fadvise. Mapped pages of a live
/// mapping are evicted by neither, so methods drop their mappings first.
///
/// # Errors
/// If the file cannot be opened or synced.
pub fn evict(path: &Path) -> io::Result<EvictHow> {
    let mut how = EvictHow::Fadvise { chosen: DROP_CACHES.load(Ordering::Relaxed) == 3 };
    if DROP_CACHES.load(Ordering::Relaxed) < 2 {
        // SAFETY: plain syscall without arguments.
        unsafe { libc::sync() };
        match std::fs::write("/proc/sys/vm/drop_caches", "1\n") {
            Ok(()) => {
                DROP_CACHES.store(1, Ordering::Relaxed);
                how = EvictHow::DropCaches;
            }
            Err(_) => DROP_CACHES.store(2, Ordering::Relaxed),
        }
    }
    eagerio::core::sys::evict(path)?;
    Ok(how)
}

/// The block device holding a file, with its counters in `/sys/block/<dev>/stat`.
#[derive(Debug, Clone)]
pub struct Disk {
    pub name: String,
    sys: PathBuf,
}

/// A snapshot of a disk's read counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct DiskCounters {
    pub reads: u64,
    pub sectors: u64,
}

impl DiskCounters {
    pub fn since(self, before: DiskCounters) -> DiskCounters {
        DiskCounters {
            reads: self.reads.saturating_sub(before.reads),
            sectors: self.sectors.saturating_sub(before.sectors),
        }
    }

    pub fn bytes(self) -> u64 {
        self.sectors * 512
    }
}

impl Disk {
    /// The whole disk under `path`: its `st_dev` → `/sys/dev/block/MAJ:MIN`, walking from a
    /// partition to its parent. `None` when sysfs does not show it (tmpfs, overlay, ...).
    pub fn of(path: &Path) -> Option<Disk> {
        let dev = std::fs::metadata(path).ok()?.dev();
        let (maj, min) = (libc::major(dev), libc::minor(dev));
        let mut sys = std::fs::canonicalize(format!("/sys/dev/block/{maj}:{min}")).ok()?;
        if sys.join("partition").exists() {
            sys = sys.parent()?.to_path_buf();
        }
        let name = sys.file_name()?.to_string_lossy().into_owned();
        let disk = Disk { name, sys };
        disk.counters()?;
        Some(disk)
    }

    /// Reads completed and sectors read so far (fields 1 and 3 of the stat file).
    pub fn counters(&self) -> Option<DiskCounters> {
        let s = std::fs::read_to_string(self.sys.join("stat")).ok()?;
        let f: Vec<u64> = s.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        Some(DiskCounters { reads: *f.first()?, sectors: *f.get(2)? })
    }

    fn queue(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.sys.join("queue").join(name)).ok().map(|s| s.trim().to_string())
    }

    /// `vda: rotational 0, read_ahead_kb 8192, logical block 512 B, scheduler [none]`.
    pub fn describe(&self) -> String {
        let q = |n: &str| self.queue(n).unwrap_or_else(|| "?".into());
        format!(
            "{}: rotational {}, read_ahead_kb {}, logical block {} B, scheduler {}",
            self.name,
            q("rotational"),
            q("read_ahead_kb"),
            q("logical_block_size"),
            q("scheduler")
        )
    }
}

/// Major faults of this process so far (`getrusage(RUSAGE_SELF).ru_majflt`).
pub fn major_faults() -> u64 {
    rusage().ru_majflt as u64
}

fn rusage() -> libc::rusage {
    // SAFETY: `rusage` is plain old data; all-zero is valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru
}

/// Peak resident set of one timed run, over the resident set it started with: freed heap is
/// returned first (`malloc_trim`), the high-water mark reset with `/proc/self/clear_refs` (5) and
/// read as `VmHWM`. Where the kernel refuses the reset, the process-wide `ru_maxrss`
/// (monotonic) is reported instead.
pub struct PeakRss {
    resettable: bool,
    start_kib: std::cell::Cell<u64>,
}

impl PeakRss {
    pub fn new() -> PeakRss {
        let resettable = std::fs::write("/proc/self/clear_refs", "5").is_ok() && status_kib("VmHWM:").is_some();
        PeakRss { resettable, start_kib: std::cell::Cell::new(0) }
    }

    pub fn is_per_run(&self) -> bool {
        self.resettable
    }

    /// Starts a measurement window.
    pub fn reset(&self) {
        if self.resettable {
            // SAFETY: plain glibc call; it only returns free heap memory to the kernel.
            unsafe { libc::malloc_trim(0) };
            let _ = std::fs::write("/proc/self/clear_refs", "5");
            self.start_kib.set(status_kib("VmRSS:").unwrap_or(0));
        }
    }

    /// The peak resident set since [`reset`](Self::reset) over the one at the reset, in bytes
    /// (or the process's peak, where it cannot be reset).
    pub fn read(&self) -> u64 {
        match self.resettable.then(|| status_kib("VmHWM:")).flatten() {
            Some(hwm) => hwm.saturating_sub(self.start_kib.get()) * 1024,
            None => rusage().ru_maxrss as u64 * 1024,
        }
    }
}

fn status_kib(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Bytes of `file` resident in the page cache (0 where they cannot be counted).
pub fn resident_bytes(file: &File) -> u64 {
    eagerio::core::sys::resident_bytes(file).unwrap_or(0)
}

/// One line about the machine: CPU, cores, memory, kernel, filesystem and device.
pub fn machine(path: &Path, disk: Option<&Disk>) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| s.lines().next().and_then(|l| l.split_whitespace().nth(1)).and_then(|k| k.parse::<u64>().ok()))
        .map(|kib| kib as f64 / (1u64 << 20) as f64)
        .unwrap_or(0.0);
    let kernel =
        std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_default();
    let fs = fs_type(path).unwrap_or_else(|| "?".into());
    let dev = disk.map(Disk::describe).unwrap_or_else(|| "device not found in sysfs".into());
    format!("{cpu}, {cores} cores, {mem_gib:.0} GiB, Linux {kernel}; {fs} on {dev}")
}

/// The filesystem type of the longest mount point containing `path`, from /proc/mounts.
fn fs_type(path: &Path) -> Option<String> {
    let path = std::fs::canonicalize(path).ok()?;
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, mnt, ty) = (f.next()?, f.next()?, f.next()?);
            path.starts_with(mnt).then(|| (mnt.len(), ty.to_string()))
        })
        .max_by_key(|(n, _)| *n)
        .map(|(_, t)| t)
}
