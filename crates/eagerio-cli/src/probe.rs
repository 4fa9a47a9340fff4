//! `eagerio probe FILE`: what eagerio finds on this file and what it would pick.

use std::{
    ffi::CString,
    fs::File,
    os::unix::{ffi::OsStrExt, fs::MetadataExt},
    path::{Path, PathBuf},
};

use eagerio::core::sys::{self, DirectIo};
use eagerio::uring::{default_staging, memlock_limit, Driver, DriverOptions, Mode};

use crate::Failure;

pub fn run(file: &str) -> Result<(), Failure> {
    let path = Path::new(file);
    let f = File::open(path).map_err(|e| format!("cannot open {file}: {e}"))?;
    let meta = f.metadata()?;
    println!("file        {} ({} bytes)", path.display(), meta.len());
    println!("filesystem  {}", filesystem(path));
    println!("device      {}", device(meta.dev()));

    let dio = sys::dio_alignment(&f);
    let opened = sys::open_for_gather(path, DirectIo::Auto)?;
    match (dio, opened.direct) {
        (Some(a), true) => println!("O_DIRECT    used; STATX_DIOALIGN says offsets and buffers aligned to {a} bytes"),
        (None, true) => println!("O_DIRECT    used; alignment not reported by statx, {} bytes assumed", opened.align),
        (_, false) => println!("O_DIRECT    refused by this filesystem: buffered reads with POSIX_FADV_RANDOM"),
    }

    let opts = DriverOptions::default();
    let want = opts.lanes * opts.depth * opts.max_read;
    let staging = default_staging(opts.lanes, opts.depth, opts.max_read);
    let limit = memlock_limit();
    let limit_text = if limit == libc::RLIM_INFINITY { "unlimited".to_string() } else { format!("{limit} bytes") };
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    println!(
        "memlock     RLIMIT_MEMLOCK {limit_text}{}; registered staging {staging} bytes ({})",
        if root { " (root: not enforced)" } else { "" },
        if staging == want {
            format!("the full {} slots of {} KiB", opts.depth, opts.max_read >> 10)
        } else {
            format!("lowered from {want} to fit: {} reads in flight at most", staging / opts.max_read)
        }
    );

    let uring = Driver::new(opts.clone());
    match &uring {
        Ok(d) if d.mode() == Mode::Registered => println!("io_uring    available: registered buffers (READ_FIXED)"),
        Ok(d) => println!("io_uring    available, unregistered buffers: {}", d.fallback_reason().unwrap_or("-")),
        Err(e) => println!("io_uring    unavailable: {e}"),
    }
    let gap = eagerio::core::DEFAULT_MAX_GAP;
    match uring {
        Ok(_) => println!(
            "choice      io_uring lanes (the process-wide driver: 1 lane, depth {}), gap {gap} bytes: \
             io_uring works here, and its lane refills each read as the last completes",
            opts.depth
        ),
        Err(_) => println!(
            "choice      tokio backend (depth 64 reads on the blocking pool), gap {gap} bytes: io_uring is refused"
        ),
    }
    println!(
        "            the gap starts at {gap} bytes and is tuned to the device's price (below) as gathers \
         run; `eagerio bench` on this file measures rows/s"
    );
    price(path, meta.len())
}

/// Cold gathers of random ranges of the file (evicted before each), 4, 16 and 48 KiB long in
/// turn so that the reads' sizes differ, fed to a tuner of the probe's own; prints each gather
/// and the price fitted to them.
fn price(path: &Path, len: u64) -> Result<(), Failure> {
    use eagerio::core::tune::{GapTuner, MIN_FIT_READS};
    const PAGE: u64 = 4096;
    const LENGTHS: [u64; 3] = [4 << 10, 16 << 10, 48 << 10];
    let ranges = (len / (256 << 10)).min(2000);
    if ranges < MIN_FIT_READS {
        println!(
            "price       not measured: a price needs gathers of {MIN_FIT_READS} sparse reads, and this file has room for {ranges}"
        );
        return Ok(());
    }
    let rt = crate::runtime()?;
    let _guard = rt.enter();
    let opts = eagerio::uring::UringOptions::default().adaptive(false);
    let tuner = std::sync::Arc::new(GapTuner::new());
    let source = eagerio::uring::UringEngine::open_blocking(path, opts)?.with_gap_tuner(tuner.clone(), 4096, 32 << 10);
    let mut rng = crate::rng::XorShift::new(len);
    for i in 0..9 {
        let l = LENGTHS[i % LENGTHS.len()];
        let wanted: Vec<std::ops::Range<u64>> = (0..ranges)
            .map(|_| {
                let at = rng.below((len - l) / PAGE) * PAGE;
                at..at + l
            })
            .collect();
        eagerio::core::sys::evict(path)?;
        let mut fut = source.gather_ranges(&wanted)?;
        rt.block_on(&mut fut)?;
        let s = fut.stats();
        println!(
            "gather {}     {:>2} KiB ranges: {:>5} reads, {:>6.1} MB, {:>6.1} ms",
            i + 1,
            l >> 10,
            s.reads_issued,
            s.bytes_read as f64 / 1e6,
            s.wait.as_secs_f64() * 1e3
        );
    }
    match tuner.price() {
        Some(p) => println!(
            "price       {p} at depth, fitted from these gathers: joining two reads pays while the hole is \
             under {} bytes, the gap a tuned source plans with (within its limit)",
            p.gap()
        ),
        None => println!(
            "price       not fitted: the gathers' reads and bytes were too alike to tell a read's cost from a KiB's"
        ),
    }
    Ok(())
}
/// The filesystem type, by `statfs(2)`'s magic number.
fn filesystem(path: &Path) -> String {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else { return "unknown".into() };
    // SAFETY: statfs is plain old data; all-zero is a valid value.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `s` a valid out-pointer.
    if unsafe { libc::statfs(c.as_ptr(), &mut s) } != 0 {
        return format!("unknown ({})", std::io::Error::last_os_error());
    }
    let magic = s.f_type as u64;
    let name = match magic {
        0xEF53 => "ext4 (or ext2/ext3)",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x0102_1994 => "tmpfs",
        0x2FC1_2FC1 => "zfs",
        0xF2F5_2010 => "f2fs",
        0x794C_7630 => "overlayfs",
        0x6969 => "nfs",
        0x6573_5546 => "fuse",
        _ => "other",
    };
    format!("{name} (statfs magic {magic:#x})")
}

/// The block device behind `dev`, from sysfs: name, rotational or not, request queue size,
/// logical block size.
fn device(dev: u64) -> String {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let base = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    let Ok(target) = std::fs::canonicalize(&base) else {
        return format!("{major}:{minor} (no block device in sysfs: a virtual or network filesystem)");
    };
    let name = target.file_name().map_or("?".into(), |n| n.to_string_lossy().into_owned());
    // A partition's queue is its disk's.
    let queue = [target.join("queue"), target.join("../queue")].into_iter().find(|q| q.is_dir());
    let read = |file: &str| {
        queue.as_ref().and_then(|q| std::fs::read_to_string(q.join(file)).ok()).map(|s| s.trim().to_string())
    };
    let kind = match read("rotational").as_deref() {
        Some("0") => "solid state",
        Some("1") => "rotational",
        _ => "unknown kind",
    };
    format!(
        "{name} ({major}:{minor}), {kind}, queue of {} requests, logical block {} bytes",
        read("nr_requests").unwrap_or_else(|| "?".into()),
        read("logical_block_size").unwrap_or_else(|| "?".into())
    )
}
