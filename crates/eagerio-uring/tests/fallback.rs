//! The registered-buffer fallback, reached for real: the test re-runs itself as an unprivileged
//! user (`nobody`) under a lowered `RLIMIT_MEMLOCK`, where `io_uring_register_buffers` of the
//! lane's 8 MiB staging is refused with `ENOMEM`. The lane must read unregistered, say why, and
//! return correct bytes. Needs root (to switch users); skipped with a printed reason otherwise.

use std::{
    fs::File,
    io::Write,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
};

use eagerio_core::RowLayout;
use eagerio_uring::{memlock_limit, Mode, UringEngine, UringOptions};

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The child's side: runs as `nobody`, with `EAGERIO_EXPECT` telling what the limit implies.
#[test]
#[ignore = "run as an unprivileged child by `memlock_limits_as_non_root_user`"]
fn child_under_memlock_limit() {
    let expect = std::env::var("EAGERIO_EXPECT").expect("run by memlock_limits_as_non_root_user");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.bin");
    let data: Vec<u8> = (0..(4096u32 * 512)).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    File::create(&path).unwrap().write_all(&data).unwrap();
    let table =
        UringEngine::open_rows(&path, RowLayout { base: 0, row_size: 4096, rows: None }, UringOptions::default())
            .unwrap();
    let engine = table.source().engine();
    let mode = engine.mode();
    println!("limit {} bytes: mode {mode:?}, reason {:?}", memlock_limit(), engine.fallback_reason());
    match expect.as_str() {
        "unregistered" => {
            assert_eq!(mode, Mode::Unregistered);
            let why = engine.fallback_reason().unwrap();
            assert!(why.contains("RLIMIT_MEMLOCK") && why.contains("ulimit -l"), "{why}");
        }
        _ => assert!(mode == Mode::Registered || engine.fallback_reason().is_some(), "{mode:?}"),
    }
    let ids: Vec<u64> = (0..1000).map(|i| (i * 7919) % 512).collect();
    let got = futures::executor::block_on(table.gather(&ids).unwrap()).unwrap();
    for (k, &id) in ids.iter().enumerate() {
        assert_eq!(&got[k * 4096..(k + 1) * 4096], &data[id as usize * 4096..(id as usize + 1) * 4096]);
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
    // 256 KiB: registration must be refused. 8 MiB (the machine's default for non-root users):
    // whatever the kernel decides, the gather is correct and a refusal is explained.
    for (kib, expect) in [(256, "unregistered"), (8192, "any")] {
        let out = run_as_nobody(&exe, kib, expect);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!("memlock {kib} KiB as nobody:\n{stdout}");
        assert!(out.status.success() && stdout.contains("CHILD-OK"), "child failed:\n{stdout}\n{stderr}");
    }
}
