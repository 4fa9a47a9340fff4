//! The `eagerio` command as a user runs it: probe, gather and bench on a real file, and the
//! errors for bad arguments (status 2, with the usage) and a missing file (status 1, with the
//! reason).

use std::{path::Path, process::Command};

const ROW: usize = 64;
const ROWS: usize = 512;

fn row(r: usize) -> Vec<u8> {
    (0..ROW).map(|i| (r * 31 + i * 7) as u8).collect()
}

fn table(dir: &Path) -> String {
    let path = dir.join("t.bin");
    std::fs::write(&path, (0..ROWS).flat_map(row).collect::<Vec<u8>>()).unwrap();
    path.display().to_string()
}

fn eagerio(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_eagerio")).args(args).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

#[test]
fn cli_probe_reports_each_finding() {
    let dir = tempfile::tempdir().unwrap();
    let file = table(dir.path());
    let (code, out, err) = eagerio(&["probe", &file]);
    assert_eq!(code, 0, "{err}");
    for line in ["filesystem ", "device ", "O_DIRECT ", "memlock ", "io_uring ", "choice ", "price "] {
        assert!(out.contains(line), "no {line:?} line in:\n{out}");
    }
    assert!(out.contains(&format!("({} bytes)", ROW * ROWS)), "{out}");
}

#[test]
fn cli_gather_prints_the_rows_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let file = table(dir.path());
    let (code, out, err) = eagerio(&["gather", &file, "--row-size", "64", "--hex", "7", "0", "7"]);
    assert_eq!(code, 0, "{err}");
    let hex = |r: usize| row(r).iter().map(|b| format!("{b:02x}")).collect::<String>();
    assert_eq!(out, format!("7: {}\n0: {}\n7: {}\n", hex(7), hex(0), hex(7)));
    let raw = Command::new(env!("CARGO_BIN_EXE_eagerio"))
        .args(["gather", &file, "--row-size", "64", "511", "3"])
        .output()
        .unwrap();
    assert!(raw.status.success());
    assert_eq!(raw.stdout, [row(511), row(3)].concat());
    let (code, _, err) = eagerio(&["gather", &file, "--row-size", "64", "512"]);
    assert_eq!(code, 1);
    assert!(err.contains("row 512 is past the end"), "{err}");
}

#[test]
fn cli_bench_prints_ratios_and_a_chart() {
    let dir = tempfile::tempdir().unwrap();
    let file = table(dir.path());
    let svg = dir.path().join("chart.svg");
    let svg_arg = svg.display().to_string();
    let (code, out, err) =
        eagerio(&["bench", &file, "--row-size", "64", "--rows", "200", "--runs", "1", "--svg", &svg_arg]);
    assert_eq!(code, 0, "{err}");
    for method in ["| eagerio |", "| mmap + memcpy |", "| serial pread |"] {
        assert!(out.contains(method), "no {method} row in:\n{out}");
    }
    assert!(out.contains("x |") && out.contains("gather call"), "{out}");
    assert!(err.contains("[##############################] 6/6"), "no finished progress bar: {err}");
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
}

#[test]
fn cli_refuses_bad_arguments_and_missing_files() {
    for args in [
        &[][..],
        &["frobnicate"],
        &["probe"],
        &["gather", "t.bin", "1"],
        &["gather", "t.bin", "--row-size", "x", "1"],
        &["bench", "t.bin", "--row-size", "64", "--rows", "0"],
    ] {
        let (code, _, err) = eagerio(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("usage:"), "{args:?}: {err}");
    }
    for args in [
        &["probe", "/nonexistent/t.bin"][..],
        &["gather", "/nonexistent/t.bin", "--row-size", "8", "1"],
        &["bench", "/nonexistent/t.bin", "--row-size", "8"],
    ] {
        let (code, _, err) = eagerio(args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains("No such file"), "{args:?}: {err}");
    }
}
