//! glommio's requirements are detected before an executor is built, with an error that names the
//! limit and how to raise it. The refusal is tested as a real non-root user: the test re-runs
//! this test binary as `nobody` with a 256 KiB soft `RLIMIT_MEMLOCK`.

use std::{path::Path, process::Command};

use eagerio_core::Error;
use eagerio_glommio::{check_environment, Environment, MIN_MEMLOCK_BYTES};

/// Selects the inner mode of `memlock_inner` (set only by `memlock_refused_as_non_root`).
const INNER: &str = "EAGERIO_GLOMMIO_INNER";

#[test]
fn this_machine_can_run_glommio() {
    let env = Environment::detect().unwrap();
    eprintln!("{env:?}");
    check_environment().expect("the test machine itself must be able to run glommio");
    assert!(env.memlock_soft >= MIN_MEMLOCK_BYTES);
}

#[test]
fn memlock_refused_as_non_root() {
    // SAFETY: `geteuid` has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        eprintln!("skipped: not root (euid {euid}), so this test cannot switch to `nobody`");
        return;
    }
    if !Path::new("/usr/sbin/runuser").exists() && !Path::new("/sbin/runuser").exists() {
        eprintln!("skipped: no runuser(1) to switch to `nobody`");
        return;
    }
    let bin = std::env::current_exe().unwrap();
    let out = Command::new("runuser")
        .args([
            "-u",
            "nobody",
            "--",
            "sh",
            "-c",
            r#"ulimit -Sl 256 && exec "$0" --exact memlock_inner --ignored --nocapture"#,
        ])
        .arg(&bin)
        .env(INNER, "1")
        .output()
        .expect("runuser");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("Permission denied") && !stdout.contains("INNER") {
        eprintln!("skipped: `nobody` cannot execute {bin:?}: {stderr}");
        return;
    }
    assert!(out.status.success(), "inner run failed:\n{stdout}\n{stderr}");
    let line = stdout.lines().find(|l| l.contains("INNER-OK"));
    assert!(
        line.is_some_and(|l| l.contains("uid 65534")),
        "the inner test must have run as nobody:\n{stdout}\n{stderr}"
    );
    eprintln!("{}", line.unwrap_or_default());
}

/// Runs only inside `memlock_refused_as_non_root`, as `nobody` with `ulimit -Sl 256`.
#[test]
#[ignore = "inner mode of memlock_refused_as_non_root"]
fn memlock_inner() {
    if std::env::var_os(INNER).is_none() {
        eprintln!("nothing to do: this is the inner half of memlock_refused_as_non_root");
        return;
    }
    let env = Environment::detect().unwrap();
    assert_eq!(env.memlock_soft, 256 * 1024, "{env:?}");
    // Our check refuses, naming the limit and the fix.
    let e = check_environment().unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Unavailable { backend: "eagerio-glommio", .. }), "{e:?}");
    assert!(msg.contains("RLIMIT_MEMLOCK") && msg.contains("256 KiB") && msg.contains("512 KiB"), "{msg}");
    assert!(msg.contains("ulimit -l 512"), "{msg}");
    // So does the executor helper, before glommio is asked.
    let e = eagerio_glommio::executor(glommio::LocalExecutorBuilder::default()).unwrap_err();
    assert!(e.to_string().contains("RLIMIT_MEMLOCK"), "{e}");
    // And glommio agrees: asked directly, it refuses with its own terse error.
    let raw = glommio::LocalExecutorBuilder::default().make().map(|_| ()).unwrap_err();
    let raw = format!("{raw:?}");
    assert!(raw.contains("MemLockLimit(262144/524288)"), "{raw}");
    // SAFETY: `getuid` has no preconditions.
    println!("INNER-OK uid {} : {msg}", unsafe { libc::getuid() });
}
