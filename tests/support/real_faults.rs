//! Real faults (not injected), shared by every backend's `tests/reliability_real.rs`
//! (included next to `fault_schedule.rs`, whose [`FaultBackend`] it uses):
//!
//! - [`truncated_while_gathers_run`]: the table file is cut short by `ftruncate` from inside the
//!   read seam, while a gather's reads are in flight;
//! - [`disk_full`]: appends into a small ext4 filesystem on a loop device made by the test (root
//!   only; skipped with the reason otherwise) until it is full;
//! - [`read_only_sink`] and [`read_only_filesystem`]: a sink on an immutable (or mode 0444) file,
//!   and on a filesystem mounted read-only;
//! - [`replaced_under_open_source`]: a new file renamed over the path of an open source.

#![allow(dead_code)]

/// One `#[test]` per check, each running it on `$backend` inside `$block_on`. With no list, every
/// check; with `@tests`, the named `test_name => check` pairs (a backend that covers a check
/// elsewhere leaves it out). Include this file with `#[macro_use]`.
macro_rules! real_fault_tests {
    ($backend:expr, $block_on:path) => {
        real_fault_tests!(@tests $backend, $block_on,
            real_truncated_while_gathers_run => truncated_while_gathers_run,
            real_disk_full_reports_enospc_and_keeps_acknowledged_writes => disk_full,
            real_read_only_file_refuses_the_sink => read_only_sink,
            real_read_only_filesystem_refuses_the_sink => read_only_filesystem,
            real_file_replaced_under_open_source_reads_the_old_inode => replaced_under_open_source);
    };
    (@tests $backend:expr, $block_on:path, $($test:ident => $check:ident),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                $block_on(real_faults::$check(&$backend));
            }
        )*
    };
}

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
};

use bytes::Bytes;
use eagerio_core::{
    fault::{self, Action, Hook, IoKind},
    DataSink, Error, Op, RowLayout, SinkOptions, Target,
};

use super::fault_schedule::{seed, wait_staging_full, FaultBackend, Rng, SeedGuard};

fn is_root() -> bool {
    // SAFETY: no arguments, no memory.
    unsafe { libc::geteuid() == 0 }
}

fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd).args(args).output().map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`{cmd} {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// A small ext4 filesystem on a loop device, mounted on a temporary directory; unmounted (and
/// its image deleted) on drop.
pub struct LoopMount {
    dir: tempfile::TempDir,
    img: PathBuf,
    mnt: PathBuf,
    read_only: bool,
}

impl LoopMount {
    /// `truncate -s <mb>M img; mkfs.ext4 -q img; mount -o loop[,ro] img mnt`. Err says why it
    /// cannot be done here (not root, no loop devices, no mkfs.ext4).
    pub fn new(mb: u32, read_only: bool) -> Result<LoopMount, String> {
        if !is_root() {
            return Err("not root: mounting a loop filesystem needs root".into());
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let img = dir.path().join("fs.img");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).map_err(|e| e.to_string())?;
        let p = |p: &Path| p.to_str().expect("utf-8 temp path").to_owned();
        run("truncate", &["-s", &format!("{mb}M"), &p(&img)])?;
        run("mkfs.ext4", &["-q", "-F", &p(&img)])?;
        let opts = if read_only { "loop,ro" } else { "loop" };
        run("mount", &["-o", opts, &p(&img), &p(&mnt)])?;
        Ok(LoopMount { dir, img, mnt, read_only })
    }

    pub fn path(&self) -> &Path {
        &self.mnt
    }

    /// Unmounts and mounts again, so that what is read afterwards comes from the disk image, not
    /// from the page cache of the first mount. Retries the unmount for up to 5 s, yielding to the
    /// executor, while the backend still holds the file (EBUSY): a tokio worker that just
    /// completed the last write, or glommio closing its files asynchronously on the executor.
    pub async fn remount<B: FaultBackend>(&self, b: &B) -> Result<(), String> {
        let p = |p: &Path| p.to_str().expect("utf-8 temp path").to_owned();
        let mut tries = 0;
        while let Err(e) = run("umount", &[&p(&self.mnt)]) {
            tries += 1;
            if tries == 50 {
                return Err(e);
            }
            for _ in 0..100 {
                b.pause().await;
            }
        }
        let opts = if self.read_only { "loop,ro" } else { "loop" };
        run("mount", &["-o", opts, &p(&self.img), &p(&self.mnt)])
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        let m = self.mnt.to_str().expect("utf-8").to_owned();
        if run("umount", &[&m]).is_err() {
            // Something still holds it (a failing test's open file): detach lazily.
            let _ = run("umount", &["-l", &m]);
        }
        let _ = &self.dir;
    }
}

fn table(len: usize, rng: &mut Rng) -> (tempfile::TempDir, PathBuf, Vec<u8>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("table.bin");
    let bytes = rng.bytes(len);
    std::fs::write(&path, &bytes).expect("write the table");
    // Cold: reads reach the backend (an adaptive source would copy resident pages instead).
    eagerio_core::sys::evict(&path).expect("evict");
    (dir, path, bytes)
}

fn rows_of(file: &[u8], row: u64, ids: &[u64]) -> Vec<u8> {
    ids.iter().flat_map(|&i| file[(i * row) as usize..((i + 1) * row) as usize].iter().copied()).collect()
}

/// The file is truncated (to `cut` rows) at the `n`-th read, while that gather's other reads
/// are in flight. Every gather is then either whole and right, or a short read naming a row at
/// or past the cut and the file; afterwards staging is full and rows before the cut are right.
pub async fn truncated_while_gathers_run<B: FaultBackend>(b: &B) {
    const ROW: u64 = 4096;
    const ROWS: u64 = 2048;
    let s = seed(&format!("{} truncated_while_gathers_run", B::NAME));
    let _g = SeedGuard { test: "truncated_while_gathers_run".into(), seed: s };
    let mut rng = Rng::new(s);
    let (_d, path, file) = table((ROW * ROWS) as usize, &mut rng);
    let cut = rng.range(200, 1800);
    let at = rng.range(5, 40) as usize;
    let reads = Arc::new(AtomicUsize::new(0));
    let (r, p) = (reads.clone(), path.clone());
    let hook = Hook::new(move |pt| {
        if pt.kind == IoKind::Read && r.fetch_add(1, Ordering::SeqCst) == at {
            std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(cut * ROW).unwrap();
        }
        Action::Proceed
    });
    let _faults = fault::inject(&path, hook);
    let src = b.open(&path).await.expect("open");
    let t = src.clone().with_max_gap(0).rows(RowLayout { base: 0, row_size: ROW, rows: Some(ROWS) }).unwrap();
    let (mut ok, mut short) = (0, 0);
    for round in 0..12 {
        let ids: Vec<u64> = (0..rng.range(50, 300)).map(|_| rng.below(ROWS)).collect();
        match t.gather(&ids).unwrap().await {
            Ok(got) => {
                assert!(got == rows_of(&file, ROW, &ids), "seed {s}: round {round}: a whole gather has wrong bytes");
                ok += 1;
            }
            Err(e) => {
                match &e {
                    Error::ShortRead { target: Target::Row(r), path: ep, offset, .. } => {
                        assert!(*r >= cut, "seed {s}: row {r} is before the cut at row {cut}: {e}");
                        assert_eq!(*offset, r * ROW);
                        assert_eq!(ep, &path);
                        assert!(e.to_string().contains(&format!("row {r}")), "{e}");
                    }
                    other => panic!("seed {s}: round {round}: expected a short read, got {other}"),
                }
                short += 1;
            }
        }
        wait_staging_full(b, &src, &format!("round {round}")).await;
    }
    eprintln!("{}: file cut to {cut} rows at read {at}: {ok} gathers whole, {short} short reads", B::NAME);
    assert!(short > 0, "seed {s}: the truncation must have cut some gather");
    let ids: Vec<u64> = (0..500).map(|_| rng.below(cut)).collect();
    let got = t.gather(&ids).unwrap().await.expect("rows before the cut");
    assert!(got == rows_of(&file, ROW, &ids), "seed {s}: rows before the cut are right afterwards");
    wait_staging_full(b, &src, "the end").await;
}

/// Appends 64 KiB chunks into an 8 MiB ext4 filesystem until it is full. Every failed append
/// reports ENOSPC with its offset, from its future and again, all of them, from the flush; after
/// a remount, every acknowledged append is intact on disk.
pub async fn disk_full<B: FaultBackend>(b: &B) {
    let m = match LoopMount::new(8, false) {
        Ok(m) => m,
        Err(why) => {
            eprintln!("{}: disk_full skipped: {why}", B::NAME);
            return;
        }
    };
    let path = m.path().join("out.bin");
    const CHUNK: usize = 64 << 10;
    const N: usize = 160; // 10 MiB into 8 MiB
    let sink = b.create(&path, SinkOptions::default().max_in_flight_bytes(1 << 20).append_from(0)).await.unwrap();
    let chunk = |i: usize| Bytes::from((0..CHUNK).map(|j| (i * 31 + j / 512) as u8).collect::<Vec<u8>>());
    let futs: Vec<_> = (0..N).map(|i| sink.append(chunk(i))).collect();
    let mut acked = Vec::new();
    let mut failed = Vec::new();
    for (i, f) in futs.into_iter().enumerate() {
        let off = f.offset();
        assert_eq!(off, (i * CHUNK) as u64);
        match f.await {
            Ok(()) => acked.push(i),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "append {i} at {off}: {e}");
                assert!(
                    matches!(e, Error::Io { op: Op::Write, offset: Some(o), .. } if o == off),
                    "the error names the write's offset: {e:?}"
                );
                assert!(e.to_string().contains(&format!("offset {off}")), "{e}");
                failed.push((off, CHUNK));
            }
        }
    }
    eprintln!("{}: disk full after {} of {N} appends of 64 KiB; {} failed", B::NAME, acked.len(), failed.len());
    assert!(!failed.is_empty() && !acked.is_empty(), "an 8 MiB filesystem takes some but not all of 10 MiB");
    match sink.flush().await {
        Err(Error::WriteFailed { failures, path: p }) => {
            assert_eq!(p, path);
            let mut got: Vec<_> = failures.iter().map(|f| (f.offset, f.len)).collect();
            got.sort_unstable();
            assert_eq!(got, failed, "the flush lists every failed append, exactly");
            assert!(failures.iter().all(|f| f.error.raw_os_error() == Some(libc::ENOSPC)));
        }
        other => panic!("expected WriteFailed from the flush, got {other:?}"),
    }
    match sink.close().await {
        Ok(()) => {}
        Err(e) => eprintln!("{}: close on a full filesystem: {e}", B::NAME),
    }
    drop(sink);
    m.remount(b).await.expect("remount");
    let disk = std::fs::read(&path).expect("read back");
    for &i in &acked {
        let want = chunk(i);
        let got = disk.get(i * CHUNK..(i + 1) * CHUNK);
        assert!(got == Some(&want[..]), "acknowledged append {i} (offset {}) is not intact on disk", i * CHUNK);
    }
}

/// Makes `path` unwritable even for root (`chattr +i`), or mode 0444 for other users; undone on
/// drop so the temporary directory can go.
struct Unwritable(PathBuf, bool);

impl Unwritable {
    fn new(path: &Path) -> Result<Unwritable, String> {
        if is_root() {
            run("chattr", &["+i", path.to_str().unwrap()])?;
            Ok(Unwritable(path.to_path_buf(), true))
        } else {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o444)).map_err(|e| e.to_string())?;
            Ok(Unwritable(path.to_path_buf(), false))
        }
    }
}

impl Drop for Unwritable {
    fn drop(&mut self) {
        if self.1 {
            let _ = run("chattr", &["-i", self.0.to_str().unwrap()]);
        }
    }
}

/// The sink's open is refused with a clear error naming the path and the OS error.
async fn assert_open_refused<B: FaultBackend>(b: &B, path: &Path, codes: &[i32]) {
    match b.create(path, SinkOptions::default()).await {
        Err(e) => {
            let text = e.to_string();
            eprintln!("{}: sink on an unwritable file: {text}", B::NAME);
            assert!(matches!(&e, Error::Io { op: Op::Open, path: p, .. } if p == path), "{e:?}");
            assert!(text.contains(path.to_str().unwrap()), "the error names the path: {text}");
            assert!(codes.contains(&e.raw_os_error().unwrap_or(0)), "errno is one of {codes:?}: {e:?}");
        }
        Ok(sink) => {
            // Not refused at open: then every write must fail, and the flush must say so.
            let w = sink.append(Bytes::from_static(b"x")).await;
            let f = sink.flush().await;
            panic!("{}: a sink on an unwritable file was created; write: {w:?}, flush: {f:?}", B::NAME);
        }
    }
}

/// A sink on an existing file nobody may write (immutable for root, 0444 otherwise).
pub async fn read_only_sink<B: FaultBackend>(b: &B) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ro.bin");
    std::fs::write(&path, b"keep me").unwrap();
    let guard = match Unwritable::new(&path) {
        Ok(g) => g,
        Err(why) => {
            eprintln!("{}: read_only_sink skipped: {why}", B::NAME);
            return;
        }
    };
    assert_open_refused(b, &path, &[libc::EPERM, libc::EACCES]).await;
    drop(guard);
    assert_eq!(std::fs::read(&path).unwrap(), b"keep me", "the refused sink did not truncate the file");
}

/// A sink on a filesystem mounted read-only: EROFS at open, naming the path.
pub async fn read_only_filesystem<B: FaultBackend>(b: &B) {
    let m = match LoopMount::new(4, true) {
        Ok(m) => m,
        Err(why) => {
            eprintln!("{}: read_only_filesystem skipped: {why}", B::NAME);
            return;
        }
    };
    assert_open_refused(b, &m.path().join("out.bin"), &[libc::EROFS]).await;
}

/// A new file renamed over the path of an open source: the source keeps reading the inode it
/// opened (documented: a source serves the file as opened, by descriptor), so it returns the old
/// file's bytes; a source opened afterwards reads the new file.
pub async fn replaced_under_open_source<B: FaultBackend>(b: &B) {
    const ROW: u64 = 4096;
    let s = seed(&format!("{} replaced_under_open_source", B::NAME));
    let mut rng = Rng::new(s);
    let (dir, path, old) = table((ROW * 256) as usize, &mut rng);
    let layout = RowLayout { base: 0, row_size: ROW, rows: None };
    let t = b.open(&path).await.unwrap().rows(layout).unwrap();
    let ids: Vec<u64> = (0..100).map(|_| rng.below(256)).collect();
    assert!(t.gather(&ids).unwrap().await.unwrap() == rows_of(&old, ROW, &ids));
    let new = rng.bytes((ROW * 512) as usize);
    let tmp = dir.path().join("table.bin.new");
    std::fs::write(&tmp, &new).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    let ids: Vec<u64> = (0..200).map(|_| rng.below(256)).collect();
    let got = t.gather(&ids).unwrap().await.expect("the open source still reads");
    assert!(got == rows_of(&old, ROW, &ids), "seed {s}: the open source must keep reading the old file");
    assert_eq!(t.rows(), 256, "the row count is the old file's");
    let t2 = b.open(&path).await.unwrap().rows(layout).unwrap();
    assert_eq!(t2.rows(), 512);
    let ids: Vec<u64> = (0..200).map(|_| rng.below(512)).collect();
    assert!(t2.gather(&ids).unwrap().await.unwrap() == rows_of(&new, ROW, &ids), "a new source reads the new file");
    wait_staging_full(b, t.source(), "the replaced-file gathers").await;
}
