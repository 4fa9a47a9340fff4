//! Streamed gathers, turn by turn: rows arrive while other reads are still held, a deadline ends
//! the stream at its time (and only then), dropping it stops the reads not yet issued, and the
//! stream answers as a `futures::Stream` with its counters.
//!
//! The engine here reads on a thread of its own, one extent at a time, in plan order: the first
//! extent at once, every later one only once the test opens its gate, like a device that holds
//! those reads. It takes jobs from any thread, so a large gather goes through a preparing thread.
#![cfg(not(eagerio_loom))]

use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Condvar, Mutex,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use eagerio_core::{
    backend::{remote, JobHandle, ReadEngine, Remote},
    Error, FileInfo, GatherStream, RowLayout, RowTable, Source,
};
use futures::{executor::block_on, stream::FusedStream, StreamExt};

const ROW: u64 = 64;
const ROWS: u64 = 1 << 16;

#[derive(Clone)]
struct GatedEngine {
    data: Arc<Vec<u8>>,
    info: FileInfo,
    gate: Arc<(Mutex<bool>, Condvar)>,
    /// Extents read so far, over every gather.
    read: Arc<AtomicUsize>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl GatedEngine {
    fn new() -> GatedEngine {
        let data: Vec<u8> = (0..ROWS * ROW).map(|i| (i % 251) as u8).collect();
        let info = FileInfo { path: PathBuf::from("stream.bin"), len: ROWS * ROW, align: 1, max_read: 4096 };
        GatedEngine { data: Arc::new(data), info, gate: Arc::default(), read: Arc::default(), threads: Arc::default() }
    }

    fn open(&self) {
        *self.gate.0.lock().unwrap() = true;
        self.gate.1.notify_all();
    }

    /// Waits for every reading thread to end.
    fn join(&self) {
        for t in std::mem::take(&mut *self.threads.lock().unwrap()) {
            t.join().unwrap();
        }
    }

    fn row(&self, r: u64) -> &[u8] {
        &self.data[(r * ROW) as usize..((r + 1) * ROW) as usize]
    }
}

impl ReadEngine for GatedEngine {
    fn info(&self) -> &FileInfo {
        &self.info
    }

    fn submit(&self, job: JobHandle) {
        let me = self.clone();
        let t = std::thread::spawn(move || {
            let mut first = true;
            while let Some(i) = job.next_extent() {
                if !std::mem::take(&mut first) {
                    let mut open = me.gate.0.lock().unwrap();
                    while !*open {
                        open = me.gate.1.wait(open).unwrap();
                    }
                }
                let e = job.plan().extents()[i];
                let bytes = &me.data[e.offset as usize..e.offset as usize + e.len as usize];
                job.complete(i, bytes, Ok(bytes.len()));
                me.read.fetch_add(1, Ordering::SeqCst);
            }
        });
        self.threads.lock().unwrap().push(t);
    }

    fn remote(&self) -> Option<Remote> {
        Some(remote(self))
    }
}

/// Rows far enough apart to be one extent each (max_gap 0).
fn table(engine: &GatedEngine) -> RowTable<GatedEngine> {
    Source::new(engine.clone()).with_max_gap(0).rows(RowLayout { base: 0, row_size: ROW, rows: None }).unwrap()
}

/// Every item the stream still yields, through the `futures::Stream` face.
fn rest(stream: &mut GatherStream) -> Vec<eagerio_core::Result<(usize, bytes::Bytes)>> {
    block_on(StreamExt::collect::<Vec<_>>(stream.by_ref()))
}

#[test]
fn stream_yields_a_row_while_later_reads_are_held() {
    let engine = GatedEngine::new();
    let table = table(&engine);
    let rows = [5, 900, 40_000];
    let mut stream = table.gather_stream(&rows).unwrap();
    let t = Instant::now();
    // Opens the gate in 5 s whatever happens, so a stream that waits for the whole gather fails
    // below instead of hanging.
    let opener = {
        let engine = engine.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(5));
            engine.open();
        })
    };
    let (i, bytes) = block_on(stream.next()).expect("a first row").expect("no error");
    assert!(t.elapsed() < Duration::from_secs(4), "the first row waited for the held reads");
    assert_eq!((i, &bytes[..]), (0, engine.row(5)));
    assert!(!stream.is_terminated());
    opener.join().unwrap();
    let got = rest(&mut stream);
    assert!(stream.is_terminated(), "a stream that ended says so");
    let mut got: Vec<(usize, Vec<u8>)> = got.into_iter().map(|x| x.map(|(i, b)| (i, b.to_vec())).unwrap()).collect();
    got.sort();
    assert_eq!(got, vec![(1, engine.row(900).to_vec()), (2, engine.row(40_000).to_vec())]);
    let stats = stream.stats();
    assert_eq!((stats.requested, stats.reads_issued, stats.useful_bytes), (3, 3, 3 * ROW), "{stats:?}");
    engine.join();
}

#[test]
fn stream_deadline_ends_it_while_a_read_is_held() {
    let engine = GatedEngine::new();
    let table = table(&engine).with_timeout(Duration::from_secs(1));
    let mut stream = table.gather_stream(&[5, 900]).unwrap();
    let (i, _) = block_on(stream.next()).expect("a first row").expect("no error");
    assert_eq!(i, 0);
    let t = Instant::now();
    match block_on(stream.next()) {
        Some(Err(Error::TimedOut { unread: 1, requested: 2, .. })) => {}
        other => panic!("expected a timeout with one row unread, got {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(30), "the deadline waited for the held read");
    assert!(block_on(stream.next()).is_none(), "nothing after the error");
    engine.open();
    engine.join();
}

#[test]
fn stream_deadline_still_ahead_changes_nothing() {
    // A small gather (started in the call) and a large one (prepared on another thread), both
    // under a deadline far ahead: every row comes, with no error.
    let engine = GatedEngine::new();
    let table = table(&engine).with_timeout(Duration::from_secs(60));
    let small: Vec<u64> = vec![5, 900, 40_000];
    let large: Vec<u64> = (0..3000u64).map(|i| i * 17 % ROWS).collect();
    for rows in [small, large] {
        let mut stream = table.gather_stream(&rows).unwrap();
        let opener = {
            let engine = engine.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                engine.open();
            })
        };
        let got = rest(&mut stream);
        opener.join().unwrap();
        assert_eq!(got.len(), rows.len(), "every row comes once");
        for item in got {
            let (i, bytes) = item.expect("no error before the deadline");
            assert_eq!(&bytes[..], engine.row(rows[i]));
        }
        *engine.gate.0.lock().unwrap() = false;
    }
    engine.join();
}

#[test]
fn stream_dropped_stops_the_reads_not_yet_issued() {
    let engine = GatedEngine::new();
    let table = table(&engine);
    let mut stream = table.gather_stream(&[5, 900, 40_000]).unwrap();
    block_on(stream.next()).expect("a first row").expect("no error");
    // Wait until the engine's thread holds the second extent, claimed; the third is not claimed.
    let t = Instant::now();
    while stream.stats().reads_issued < 2 {
        assert!(t.elapsed() < Duration::from_secs(5), "the second extent was never claimed");
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(stream);
    engine.open();
    engine.join();
    assert_eq!(engine.read.load(Ordering::SeqCst), 2, "a read was issued after the stream was dropped");
}

/// A large streamed gather: `n` distinct rows, far apart (one extent each).
fn large(n: u64) -> Vec<u64> {
    (0..n).map(|i| i * 17 % ROWS).collect()
}

#[test]
fn stream_large_submits_its_head_in_the_call() {
    use eagerio_core::prepare::{PREPARE_ELSEWHERE, STREAM_HEAD};
    let engine = GatedEngine::new();
    let table = table(&engine);
    // One request fewer is one job, prepared elsewhere whole: nothing is planned in the call.
    let one = table.gather_stream(&large((PREPARE_ELSEWHERE + STREAM_HEAD - 1) as u64)).unwrap();
    assert_eq!(one.stats().requested, 0, "{:?}", one.stats());
    drop(one);
    let rows = large((PREPARE_ELSEWHERE + STREAM_HEAD) as u64);
    let mut stream = table.gather_stream(&rows).unwrap();
    // Before any poll: the head was planned and handed to the engine by the call; the rest is
    // still with the preparing thread (its counters come once the stream takes its job).
    let head = stream.stats();
    assert_eq!((head.requested, head.reads_planned), (STREAM_HEAD as u64, STREAM_HEAD as u64), "{head:?}");
    engine.open();
    let got = rest(&mut stream);
    assert_eq!(got.len(), rows.len(), "every row comes once");
    let mut seen = vec![false; rows.len()];
    for item in got {
        let (i, bytes) = item.expect("no error");
        assert!(!std::mem::replace(&mut seen[i], true), "row {i} came twice");
        assert_eq!(&bytes[..], engine.row(rows[i]), "request {i}");
    }
    let all = stream.stats();
    assert_eq!((all.requested, all.reads_issued), (rows.len() as u64, rows.len() as u64), "{all:?}");
    assert!(all.wait > Duration::ZERO && all.submit >= head.submit, "{all:?}");
    engine.join();
}

/// A large stream runs as two jobs, but a request of the second job that no plan accepts is still
/// the call's error, before the first job reads anything.
#[test]
fn stream_large_checks_every_request_before_any_io() {
    use eagerio_core::prepare::{PREPARE_ELSEWHERE, STREAM_HEAD};
    let mut engine = GatedEngine::new();
    // A file as large as offsets go, so that only the plan's own check can refuse.
    engine.info.len = u64::MAX;
    let source = Source::new(engine.clone());
    let n = (PREPARE_ELSEWHERE + STREAM_HEAD) as u64;
    let mut ranges: Vec<std::ops::Range<u64>> = (0..n - 2).map(|i| i * ROW..(i + 1) * ROW).collect();
    // Two ranges of 4 EiB: an output past what memory can hold.
    ranges.extend([0..1 << 62, 1 << 62..1 << 63]);
    let err = source.gather_ranges_stream(&ranges).expect_err("an output past isize::MAX");
    assert!(
        matches!(&err, Error::InvalidRange { index, reason, .. } if *index == ranges.len() - 1 && reason.contains("fit in memory")),
        "{err:?}"
    );
    engine.open();
    engine.join();
    assert_eq!(engine.read.load(Ordering::SeqCst), 0, "nothing was read");
}

#[test]
fn stream_large_deadline_counts_every_request_not_yielded() {
    use eagerio_core::prepare::{PREPARE_ELSEWHERE, STREAM_HEAD};
    let engine = GatedEngine::new();
    let table = table(&engine).with_timeout(Duration::from_millis(300));
    let rows = large((PREPARE_ELSEWHERE + 2 * STREAM_HEAD) as u64);
    let mut stream = table.gather_stream(&rows).unwrap();
    let mut yielded = 0;
    let err = loop {
        match block_on(stream.next()) {
            Some(Ok(_)) => yielded += 1,
            Some(Err(e)) => break e,
            None => panic!("the stream ended without its deadline's error"),
        }
    };
    // Each job reads its first extent at once and holds the others.
    assert!(yielded <= 2, "{yielded} rows came while the reads were held");
    match err {
        Error::TimedOut { unread, requested, .. } => {
            assert_eq!((unread, requested), (rows.len() as u64 - yielded, rows.len() as u64));
        }
        e => panic!("expected a timeout, got {e}"),
    }
    assert!(block_on(stream.next()).is_none(), "nothing after the error");
    engine.open();
    engine.join();
}

#[test]
fn stream_rows_are_views_of_the_output_that_outlive_the_stream() {
    let engine = GatedEngine::new();
    let table = table(&engine);
    let rows = [5, 900, 40_000, 7];
    let mut stream = table.gather_stream(&rows).unwrap();
    // Opens the gate when told, or in 5 s whatever happens, so a first row that waited for it
    // fails below instead of hanging.
    let (go, told) = std::sync::mpsc::channel::<()>();
    let opener = {
        let engine = engine.clone();
        std::thread::spawn(move || {
            let _ = told.recv_timeout(Duration::from_secs(5));
            engine.open();
        })
    };
    let t = Instant::now();
    // The first row lands while the others are held; the stream is then dropped, which cancels
    // them. The row stays readable: it keeps the gather's output.
    let (i, first) = block_on(stream.next()).expect("a first row").expect("no error");
    assert!(t.elapsed() < Duration::from_secs(4), "the first row waited for the held reads");
    assert_eq!((i, &first[..]), (0, engine.row(5)));
    drop(stream);
    let _ = go.send(());
    opener.join().unwrap();
    engine.join();
    assert_eq!(&first[..], engine.row(5), "a yielded row outlives its stream");
    // Every row of a whole stream lies in one buffer, at its place in request order: no copy.
    let got = rest(&mut table.gather_stream(&rows).unwrap());
    engine.join();
    let mut base = None;
    for (i, b) in got.into_iter().map(Result::unwrap) {
        assert_eq!(&b[..], engine.row(rows[i]));
        let at = b.as_ptr() as usize - i * ROW as usize;
        assert_eq!(*base.get_or_insert(at), at, "row {i} is not a view of the output");
    }
}
