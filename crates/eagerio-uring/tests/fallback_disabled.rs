//! The ring-refused fallback, reached for real: `kernel.io_uring_disabled = 2` makes every
//! `io_uring_setup` fail with `EPERM`, as seccomp or a hardened kernel would. Inside a tokio
//! runtime the engine and the sink fall back to the tokio backend; outside one they return a
//! clear error. Needs root to flip the sysctl (restored at once);
//! skipped with a printed reason otherwise. Its own test binary, so nothing else runs meanwhile.

use std::{fs::File, io::Write};

use eagerio_core::{DataSink, Error, RowLayout};
use eagerio_uring::{Mode, UringEngine, UringOptions, UringWriter};

const SYSCTL: &str = "/proc/sys/kernel/io_uring_disabled";

struct Restore(String);

impl Drop for Restore {
    fn drop(&mut self) {
        std::fs::write(SYSCTL, &self.0).expect("restore io_uring_disabled");
    }
}

#[test]
fn ring_refused_falls_back_to_tokio_or_errors_clearly() {
    let Ok(old) = std::fs::read_to_string(SYSCTL) else {
        eprintln!("skipped: this kernel has no {SYSCTL}");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.bin");
    let data: Vec<u8> = (0..(4096u32 * 64)).map(|i| (i % 251) as u8).collect();
    File::create(&path).unwrap().write_all(&data).unwrap();
    let layout = RowLayout { base: 0, row_size: 4096, rows: None };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();

    let (outside, inside, sink, inside_sink) = {
        if std::fs::write(SYSCTL, "2").is_err() {
            eprintln!("skipped: cannot write {SYSCTL} (needs root)");
            return;
        }
        let _restore = Restore(old.trim().to_string());
        let outside = UringEngine::open_rows_blocking(&path, layout, UringOptions::default()).map(|_| ());
        let inside = rt.block_on(async { UringEngine::open_rows_blocking(&path, layout, UringOptions::default()) });
        let sink = UringWriter::create_blocking(dir.path().join("out"), Default::default()).map(|_| ());
        let inside_sink =
            rt.block_on(async { UringWriter::create_blocking(dir.path().join("out2"), Default::default()) });
        (outside, inside, sink, inside_sink)
    };

    match outside.unwrap_err() {
        Error::Unavailable { reason, .. } => {
            assert!(reason.contains("io_uring refused") && reason.contains("tokio runtime"), "{reason}")
        }
        other => panic!("expected Unavailable, got {other}"),
    }
    let table = inside.unwrap();
    assert_eq!(table.source().engine().mode(), Mode::Tokio);
    let why = table.source().engine().fallback_reason().unwrap().to_string();
    assert!(why.contains("io_uring_setup"), "{why}");
    let got = rt.block_on(async { table.gather(&[5, 1, 63]).unwrap().await.unwrap() });
    assert_eq!(&got[..4096], &data[5 * 4096..6 * 4096]);
    assert_eq!(&got[8192..], &data[63 * 4096..]);
    match sink.unwrap_err() {
        Error::Unavailable { reason, .. } => {
            assert!(reason.contains("io_uring_setup") && reason.contains("TokioWriter"), "{reason}")
        }
        other => panic!("expected Unavailable, got {other}"),
    }
    // Inside a runtime the sink falls back to the blocking pool, and its writes land.
    let sink = inside_sink.unwrap();
    assert_eq!(sink.engine().mode(), Mode::Tokio);
    rt.block_on(async {
        let a = sink.append(bytes::Bytes::from_static(b"hello, "));
        let b = sink.append(bytes::Bytes::from_static(b"fallback"));
        a.await.unwrap();
        b.await.unwrap();
        sink.close().await.unwrap();
    });
    assert_eq!(std::fs::read(dir.path().join("out2")).unwrap(), b"hello, fallback");
}
