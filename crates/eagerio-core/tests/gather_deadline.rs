//! Deadlines: a gather past its deadline resolves then with `Error::TimedOut`, asks its backend to
//! cancel, and leaves its reads in flight to finish on their own; the next gather is right.
//!
//! The engine here reads on the caller's thread but can hold the first extent's read "in
//! flight" (claimed, its handle kept) until the test completes it, like a slow device.
#![cfg(not(eagerio_loom))]

use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use eagerio_core::{
    backend::{JobHandle, ReadEngine},
    Error, FileInfo, GatherFuture, RowLayout, Source,
};
use futures::executor::block_on;

const ROW: u64 = 64;

#[derive(Clone)]
struct SlowEngine {
    data: Arc<Vec<u8>>,
    info: FileInfo,
    /// Hold the next gather's first extent in flight.
    hold_next: Arc<Mutex<bool>>,
    held: Arc<Mutex<Option<(JobHandle, usize)>>>,
    cancels: Arc<AtomicUsize>,
}

impl SlowEngine {
    fn new(rows: u64) -> SlowEngine {
        let data: Vec<u8> = (0..rows * ROW).map(|i| (i % 251) as u8).collect();
        let info = FileInfo { path: PathBuf::from("deadline.bin"), len: rows * ROW, align: 1, max_read: 4096 };
        SlowEngine {
            data: Arc::new(data),
            info,
            hold_next: Arc::default(),
            held: Arc::default(),
            cancels: Arc::default(),
        }
    }

    fn read(&self, job: &JobHandle, extent: usize, result: Option<std::io::Error>) {
        let e = job.plan().extents()[extent];
        let bytes = &self.data[e.offset as usize..e.offset as usize + e.len as usize];
        job.complete(extent, bytes, result.map_or(Ok(bytes.len()), Err));
    }

    /// Completes the held read, as the kernel would after a cancel (`ECANCELED`) or not.
    fn release(&self, cancelled: bool) {
        let (job, extent) = self.held.lock().unwrap().take().expect("a read is held");
        self.read(&job, extent, cancelled.then(|| std::io::Error::from_raw_os_error(125)));
    }

    /// Completes the held read but keeps its handle: the job's last party, not yet dropped.
    fn complete_held_keeping_the_handle(&self) -> JobHandle {
        let (job, extent) = self.held.lock().unwrap().take().expect("a read is held");
        self.read(&job, extent, None);
        job
    }

    fn expected(&self, rows: &[u64]) -> Vec<u8> {
        rows.iter().flat_map(|&r| &self.data[(r * ROW) as usize..((r + 1) * ROW) as usize]).copied().collect()
    }
}

impl ReadEngine for SlowEngine {
    fn info(&self) -> &FileInfo {
        &self.info
    }

    fn submit(&self, job: JobHandle) {
        let cancels = self.cancels.clone();
        job.on_cancel(move || {
            cancels.fetch_add(1, Ordering::SeqCst);
        });
        if std::mem::take(&mut *self.hold_next.lock().unwrap()) {
            let first = job.next_extent().expect("a gather has an extent");
            *self.held.lock().unwrap() = Some((job.clone(), first));
        }
        while let Some(i) = job.next_extent() {
            self.read(&job, i, None);
        }
    }
}

/// Rows far enough apart that each is its own extent.
fn spread(n: u64) -> Vec<u64> {
    (0..n).map(|i| i * 100).collect()
}

fn table(engine: &SlowEngine) -> eagerio_core::RowTable<SlowEngine> {
    Source::new(engine.clone()).rows(RowLayout { base: 0, row_size: ROW, rows: None }).unwrap()
}

#[test]
fn deadline_resolves_on_time_while_a_read_is_in_flight() {
    let engine = SlowEngine::new(10_000);
    let table = table(&engine);
    *engine.hold_next.lock().unwrap() = true;
    let rows = spread(20);
    let began = Instant::now();
    let fut = table.gather(&rows).unwrap().with_timeout(Duration::from_millis(100));
    let err = block_on(fut).expect_err("the held read keeps the gather from finishing");
    let took = began.elapsed();
    assert!(took >= Duration::from_millis(100), "resolved before its deadline: {took:?}");
    match &err {
        Error::TimedOut { unread, requested, what, after, .. } => {
            assert_eq!((*unread, *requested, *what), (1, 20, "rows"), "{err}");
            assert_eq!(*after, Duration::from_millis(100));
        }
        other => panic!("expected TimedOut, got {other}"),
    }
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    assert!(err.to_string().contains("timed out after 100ms with 1 of 20 rows unread"), "{err}");
    assert_eq!(engine.cancels.load(Ordering::SeqCst), 1, "the backend was asked to cancel");

    // The read in flight completes later (cancelled by the kernel); the table serves the next gather.
    engine.release(true);
    assert_eq!((table.stats().gathers, table.stats().failed), (1, 1), "a timed-out gather counts as failed");
    let next = spread(30);
    assert_eq!(&block_on(table.gather(&next).unwrap()).unwrap()[..], &engine.expected(&next)[..]);
    assert_eq!(engine.cancels.load(Ordering::SeqCst), 1, "a gather that finished is not cancelled");
    assert_eq!((table.stats().gathers, table.stats().failed), (2, 1), "{:?}", table.stats());
}

#[test]
fn every_row_read_before_the_deadline_is_ok_though_the_gather_settles_after_it() {
    let engine = SlowEngine::new(10_000);
    let table = table(&engine);
    *engine.hold_next.lock().unwrap() = true;
    let rows = spread(4);
    let fut = table.gather(&rows).unwrap().with_timeout(Duration::from_millis(50));
    // Every read is done; the job's last party still holds it past the deadline.
    let last = engine.complete_held_keeping_the_handle();
    std::thread::sleep(Duration::from_millis(80));
    drop(last);
    assert_eq!(&block_on(fut).unwrap()[..], &engine.expected(&rows)[..], "nothing was left unread");
}

#[test]
fn a_past_deadline_ends_the_gather_before_it_is_polled() {
    let engine = SlowEngine::new(10_000);
    let table = table(&engine);
    *engine.hold_next.lock().unwrap() = true;
    let fut = table.gather(&spread(5)).unwrap().with_deadline(Instant::now() - Duration::from_secs(1));
    assert_eq!(engine.cancels.load(Ordering::SeqCst), 1, "cancelled on the caller's thread");
    assert!(matches!(block_on(fut), Err(Error::TimedOut { unread: 1, requested: 5, .. })));
    // The held read completes normally after the future is gone: nothing is lost or reused.
    engine.release(false);
    let rows = [3, 1, 3];
    assert_eq!(&block_on(table.gather(&rows).unwrap()).unwrap()[..], &engine.expected(&rows)[..]);
}

#[test]
fn a_gather_done_before_its_deadline_yields_its_rows() {
    let engine = SlowEngine::new(10_000);
    let table = table(&engine).with_timeout(Duration::from_secs(60));
    for n in [1, 7, 40] {
        let rows = spread(n);
        let fut = table.gather(&rows).unwrap();
        assert_eq!(&block_on(fut).unwrap()[..], &engine.expected(&rows)[..]);
    }
    // A deadline on a gather that already finished changes nothing.
    let rows = spread(3);
    let fut = table.gather(&rows).unwrap().with_deadline(Instant::now() - Duration::from_secs(1));
    assert_eq!(&block_on(fut).unwrap()[..], &engine.expected(&rows)[..]);
    assert_eq!(engine.cancels.load(Ordering::SeqCst), 0);
    // Deadlines do not apply to futures without a job.
    let ready = GatherFuture::ready(Ok(7u8)).with_timeout(Duration::ZERO);
    assert_eq!(block_on(ready).unwrap(), 7);
}

#[test]
fn a_source_timeout_counts_from_the_gather_call() {
    let engine = SlowEngine::new(10_000);
    let table = table(&engine).with_timeout(Duration::from_secs(60));
    *engine.hold_next.lock().unwrap() = true;
    let rows = spread(3);
    let fut = table.gather(&rows).unwrap();
    let releaser = engine.clone();
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        releaser.release(false);
    });
    assert_eq!(&block_on(fut).unwrap()[..], &engine.expected(&rows)[..], "a minute had not passed");
    release.join().unwrap();
    assert_eq!(engine.cancels.load(Ordering::SeqCst), 0);
}

#[test]
fn a_source_timeout_applies_to_every_gather_and_dropping_cancels() {
    let engine = SlowEngine::new(10_000);
    let source = Source::new(engine.clone()).with_timeout(Duration::from_millis(30));
    *engine.hold_next.lock().unwrap() = true;
    let err = block_on(source.gather_ranges(&[0..10, 64_000..64_100]).unwrap()).unwrap_err();
    assert!(matches!(err, Error::TimedOut { unread: 1, requested: 2, what: "ranges", .. }), "{err}");
    engine.release(true);

    // Dropping a future cancels its job too, once.
    *engine.hold_next.lock().unwrap() = true;
    drop(source.gather_ranges(&[std::ops::Range { start: 0, end: 10 }]).unwrap());
    assert_eq!(engine.cancels.load(Ordering::SeqCst), 2);
    engine.release(false);
    let got = block_on(source.gather_ranges(&[std::ops::Range { start: 5, end: 9 }]).unwrap()).unwrap();
    assert_eq!(&got[0][..], &engine.data[5..9]);
}

/// A gather's own later deadline replaces the source's timeout: the replaced deadline's
/// registration is gone, so it never ends the gather when it passes.
#[test]
fn a_later_deadline_replaces_the_source_timeout() {
    let engine = SlowEngine::new(10_000);
    let table = table(&engine).with_timeout(Duration::from_millis(20));
    *engine.hold_next.lock().unwrap() = true;
    let rows = spread(8);
    let fut = table.gather(&rows).unwrap().with_deadline(Instant::now() + Duration::from_secs(3600));
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(engine.cancels.load(Ordering::SeqCst), 0, "the source's timeout was replaced, not added to");
    engine.release(false);
    assert_eq!(&block_on(fut).unwrap()[..], &engine.expected(&rows)[..]);
}
