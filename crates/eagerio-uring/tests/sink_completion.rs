//! The io_uring sink's completion handling: a panic while a completion is handled (in a hook or
//! in the user's waker) fails one write at most and never stops the lane, and a write larger than
//! one SQE can carry is written whole.

use std::{
    path::Path,
    sync::{mpsc, Arc},
    task::{Context, Wake, Waker},
    time::Duration,
};

use std::future::Future as _;

use bytes::Bytes;
use eagerio_core::{
    fault::{self, Action, Hook, IoKind},
    DataSink, Error,
};
use eagerio_uring::{UringWriter, WriterOptions};

/// Runs `f` on its own thread and waits at most `secs` for it: a hang fails the test instead of
/// stalling the run.
fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs)).unwrap_or_else(|_| panic!("{what}: still pending after {secs} s"))
}

fn create(path: &Path, hook: Option<Hook>) -> eagerio_core::Sink<UringWriter> {
    let _faults = hook.map(|h| fault::inject(path, h));
    UringWriter::create_blocking(path, WriterOptions::default()).expect("io_uring sink")
}

/// Issue 16 (1): a hook that panics at one write's completion fails that write; `flush` reports
/// exactly it, the other 31 land, and the sink keeps writing.
#[test]
fn sink_hook_panic_fails_one_write_and_the_lane_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.bin");
    const CHUNK: usize = 4096;
    const BAD: u64 = 7 * CHUNK as u64;
    let hook = Hook::new(|p| if p.kind == IoKind::Write && p.offset == BAD { Action::Panic } else { Action::Proceed });
    let sink = create(&path, Some(hook));
    let err = within(20, "flush after a hook panic", move || {
        let writes: Vec<_> = (0..32u8).map(|i| sink.append(Bytes::from(vec![i; CHUNK]))).collect();
        drop(writes);
        let err = futures::executor::block_on(sink.flush()).expect_err("the write at the panic fails");
        let tail = sink.append(Bytes::from_static(b"after"));
        futures::executor::block_on(tail).expect("the lane still writes");
        futures::executor::block_on(sink.close()).expect("close");
        err
    });
    match &err {
        Error::WriteFailed { failures, .. } => {
            assert_eq!(failures.len(), 1, "{err}");
            assert_eq!(failures[0].offset, BAD);
            assert!(failures[0].error.to_string().contains("hook panicked"), "{err}");
        }
        other => panic!("expected WriteFailed, got {other:?}"),
    }
    let file = std::fs::read(&path).unwrap();
    assert_eq!(file.len(), 32 * CHUNK + 5);
    assert_eq!(file[31 * CHUNK], 31);
    assert_eq!(&file[32 * CHUNK..], b"after");
}

/// A waker that panics when woken: a broken executor.
struct PanickingWaker;

impl Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        panic!("the user's waker panicked");
    }
}

/// Issue 16 (1): the user's waker runs on the lane thread when a write completes; its panic is
/// caught, and the lane serves the writes after it.
#[test]
fn sink_panicking_waker_does_not_stop_the_lane() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.bin");
    let sink = create(&path, Some(Hook::write_latency(Duration::from_millis(20))));
    within(20, "writes after a panicking waker", move || {
        let mut first = sink.append(Bytes::from_static(b"first"));
        let waker = Waker::from(Arc::new(PanickingWaker));
        // Registers the panicking waker while the write is still in flight (the hook holds it).
        assert!(std::pin::Pin::new(&mut first).poll(&mut Context::from_waker(&waker)).is_pending());
        futures::executor::block_on(sink.flush()).expect("the first write landed");
        let second = sink.append(Bytes::from_static(b"second"));
        futures::executor::block_on(second).expect("the lane is still alive");
        futures::executor::block_on(sink.close()).expect("close");
    });
    assert_eq!(std::fs::read(&path).unwrap(), b"firstsecond");
}

/// Issue 16 (2): a write of 4 GiB + 4096 bytes is more than one SQE's 32-bit length; it is written
/// whole, in pieces, not cut to its low 32 bits. On tmpfs where there is one (it holds the file in
/// memory; the source buffer is untouched zero pages but for its last page).
#[test]
fn sink_write_over_4_gib_is_written_whole() {
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() { tempfile::tempdir_in(shm) } else { tempfile::tempdir() }.unwrap();
    let path = dir.path().join("big.bin");
    let len = (4usize << 30) + 4096;
    let mut data = vec![0u8; len];
    data[len - 4096..].fill(0xAB);
    let sink = create(&path, None);
    let p = path.clone();
    within(300, "a 4 GiB write", move || {
        let w = sink.write_at(0, Bytes::from(data));
        futures::executor::block_on(w).expect("the write");
        futures::executor::block_on(sink.close()).expect("close");
        drop(p);
    });
    assert_eq!(std::fs::metadata(&path).unwrap().len(), len as u64, "the write was cut");
    let f = std::fs::File::open(&path).unwrap();
    let mut tail = vec![0u8; 4096];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut tail, (len - 4096) as u64).unwrap();
    assert!(tail.iter().all(|&b| b == 0xAB), "the last page is not the data's");
}
