//! What a backend opens: regular files and block devices, refused at once otherwise, with an
//! error naming the path and what it is; and options named as the user wrote them.

use std::{ffi::CString, os::unix::ffi::OsStrExt, path::Path, sync::mpsc, time::Duration};

use eagerio::{
    tokio::{TokioEngine, TokioOptions, TokioWriter},
    uring::{Driver, DriverOptions, UringEngine, UringOptions, UringWriter, WriterOptions},
    Error,
};

/// Runs `f` on its own thread and waits at most 10 s: today's hang is a failure, not a stall.
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap_or_else(|_| panic!("{what}: still blocked after 10 s"))
}

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// Every way to open `path` (tokio and uring, gathers and sinks) fails at once, naming the path
/// and `what`.
fn refused_everywhere(path: &Path, what: &str) {
    let check = |e: Error, how: &str| {
        let msg = e.to_string();
        assert!(msg.contains(&format!("{path:?}")) && msg.contains(what), "{how}: {msg}");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{how}: {msg}");
    };
    let p = path.to_path_buf();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (a, b) = within("tokio open", move || {
        rt.block_on(async {
            let a = TokioEngine::open(&p, TokioOptions::default()).await.map(|_| ()).unwrap_err();
            let b = TokioWriter::create(&p, Default::default()).await.map(|_| ()).unwrap_err();
            (a, b)
        })
    });
    check(a, "TokioEngine::open");
    check(b, "TokioWriter::create");
    let p = path.to_path_buf();
    let (c, d) = within("uring open", move || {
        let c = UringEngine::open_blocking(&p, UringOptions::default()).map(|_| ()).unwrap_err();
        let d = UringWriter::create_blocking(&p, WriterOptions::default()).map(|_| ()).unwrap_err();
        (c, d)
    });
    check(c, "UringEngine::open_blocking");
    check(d, "UringWriter::create");
}

/// Issue 16 (8): a FIFO used to hang the open forever.
#[test]
fn open_fifo_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe");
    mkfifo(&fifo);
    refused_everywhere(&fifo, "it is a FIFO");
}

/// Issue 16 (8): a directory used to open, and fail only at the first read with `EISDIR`.
#[test]
fn open_directory_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    refused_everywhere(dir.path(), "it is a directory");
}

/// Issue 16 (9): a bad `max_read` names the option of the struct the user filled in.
#[test]
fn open_bad_max_read_names_the_option() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.bin");
    std::fs::write(&path, vec![0u8; 8192]).unwrap();
    let e = Driver::new(DriverOptions::default().max_read(1000)).unwrap_err();
    assert!(e.to_string().starts_with("invalid option `DriverOptions::max_read`: 1000 "), "{e}");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let e = rt.block_on(TokioEngine::open(&path, TokioOptions::default().max_read(1000))).map(|_| ()).unwrap_err();
    assert!(e.to_string().starts_with("invalid option `TokioOptions::max_read`: 1000 "), "{e}");
}
