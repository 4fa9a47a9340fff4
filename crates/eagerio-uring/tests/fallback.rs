//! Registered staging under `RLIMIT_MEMLOCK`, reached for real: the test re-runs itself as an
//! unprivileged user (`nobody`) under a lowered limit. With default options the driver sizes its
//! staging to fit the limit and registers it, and 48 tables opened with defaults share its one
//! lane; a driver asked for more staging than the limit allows is refused `register_buffers`
//! (`ENOMEM`) and reads unregistered, saying why. Every gather returns correct bytes. Needs root
//! (to switch users); skipped with a printed reason otherwise.

use std::{
    fs::File,
    io::Write,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
};

use eagerio_core::{RowLayout, RowTable};
use eagerio_uring::{memlock_limit, Driver, DriverOptions, Mode, UringEngine, UringOptions};

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

fn check(table: &RowTable<UringEngine>, data: &[u8]) {
    let ids: Vec<u64> = (0..1000).map(|i| (i * 7919) % 512).collect();
    let got = futures::executor::block_on(table.gather(&ids).unwrap()).unwrap();
    for (k, &id) in ids.iter().enumerate() {
        assert_eq!(&got[k * 4096..(k + 1) * 4096], &data[id as usize * 4096..(id as usize + 1) * 4096]);
    }
}

/// The child's side: runs as `nobody`, with `EAGERIO_EXPECT` telling which case to run.
#[test]
#[ignore = "run as an unprivileged child by `memlock_limits_as_non_root_user`"]
fn child_under_memlock_limit() {
    let expect = std::env::var("EAGERIO_EXPECT").expect("run by memlock_limits_as_non_root_user");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.bin");
    let data: Vec<u8> = (0..(4096u32 * 512)).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    File::create(&path).unwrap().write_all(&data).unwrap();
    let layout = RowLayout { base: 0, row_size: 4096, rows: None };
    let limit = memlock_limit();
    match expect.as_str() {
        "fits" => {
            let before = threads();
            let tables: Vec<_> = (0..48)
                .map(|_| UringEngine::open_rows_blocking(&path, layout, UringOptions::default()).unwrap())
                .collect();
            let added = threads() - before;
            let engine = tables[0].source().engine();
            let driver = engine.driver().unwrap();
            println!(
                "limit {limit} bytes: 48 tables, {added} thread(s) added, mode {:?}, staging {} bytes",
                engine.mode(),
                driver.staging_bytes()
            );
            assert_eq!(added, driver.lanes(), "48 tables on the shared driver start only its lanes");
            assert!(tables.iter().all(|t| t.source().engine().driver().unwrap().same(driver)));
            assert_eq!(engine.mode(), Mode::Registered, "{:?}", engine.fallback_reason());
            assert!(driver.staging_bytes() as u64 <= limit, "registered staging within the limit");
            for t in &tables {
                check(t, &data);
            }
        }
        "refused" => {
            let driver = Driver::new(DriverOptions::default().staging_bytes(8 << 20)).unwrap();
            let opts = UringOptions::default().driver(driver);
            let table = UringEngine::open_rows_blocking(&path, layout, opts).unwrap();
            let engine = table.source().engine();
            println!(
                "limit {limit} bytes, 8 MiB asked: mode {:?}, reason {:?}",
                engine.mode(),
                engine.fallback_reason()
            );
            assert_eq!(engine.mode(), Mode::Unregistered);
            let why = engine.fallback_reason().unwrap();
            assert!(why.contains("RLIMIT_MEMLOCK") && why.contains("ulimit -l"), "{why}");
            check(&table, &data);
        }
        other => panic!("unknown case {other}"),
    }
    println!("CHILD-OK");
}

/// A world-executable copy of this test binary (the build tree may sit in a private directory).
fn public_copy() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new().prefix("eagerio-fallback").tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.path().join("fallback-test");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, exe)
}

fn run_as_nobody(exe: &Path, kib: u64, expect: &str) -> std::process::Output {
    let script = format!(
        "ulimit -Sl {kib} && cd /tmp && exec env EAGERIO_EXPECT={expect} {} --exact child_under_memlock_limit \
         --ignored --nocapture --test-threads 1",
        exe.display()
    );
    Command::new("runuser").args(["-u", "nobody", "--", "sh", "-c", &script]).output().expect("runuser")
}

#[test]
fn memlock_limits_as_non_root_user() {
    if !is_root() {
        eprintln!("skipped: switching to an unprivileged user needs root");
        return;
    }
    if Command::new("runuser").arg("--help").output().is_err() {
        eprintln!("skipped: runuser is not installed");
        return;
    }
    let (_dir, exe) = public_copy();
    // 8 MiB (a common default for non-root users) and 256 KiB: the default staging fits and
    // registers. 256 KiB with 8 MiB asked for: refused, read unregistered, and explained.
    for (kib, expect) in [(8192, "fits"), (256, "fits"), (256, "refused")] {
        let out = run_as_nobody(&exe, kib, expect);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!("memlock {kib} KiB as nobody, {expect}:\n{stdout}");
        assert!(out.status.success() && stdout.contains("CHILD-OK"), "child failed:\n{stdout}\n{stderr}");
    }
}
