//! The engine's read budget: `depth` bounds the reads in flight for the whole engine, however
//! many gathers run at once (issue 15: ten gathers used to queue ten times `depth` blocking tasks,
//! past tokio's pool, starving `tokio::fs` and DNS lookups).

use std::{
    io::Write,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use eagerio_core::{
    fault::{self, Action, Hook, IoKind},
    RowLayout,
};
use eagerio_tokio::{TokioEngine, TokioOptions};

const ROW: u64 = 4096;
const ROWS: u64 = 4096;

/// Counts the reads inside the syscall seam right now, and the most ever at once.
#[derive(Default)]
struct InFlight {
    now: AtomicUsize,
    peak: AtomicUsize,
}

/// A directory with `t.bin`, a table of `ROWS` rows of `ROW` bytes, and its bytes.
fn table_file() -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..ROWS * ROW).map(|i| (i % 251) as u8).collect();
    std::fs::File::create(dir.path().join("t.bin")).and_then(|mut f| f.write_all(&data)).unwrap();
    (dir, data)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gather_budget_bounds_reads_across_concurrent_gathers() {
    let (dir, data) = table_file();
    let path = dir.path().join("t.bin");
    let counter = Arc::new(InFlight::default());
    let c = counter.clone();
    let hook = Hook::new(move |p| {
        if p.kind == IoKind::Read {
            let now = c.now.fetch_add(1, Ordering::SeqCst) + 1;
            c.peak.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(1));
            c.now.fetch_sub(1, Ordering::SeqCst);
        }
        Action::Proceed
    });
    const DEPTH: usize = 8;
    let _faults = fault::inject(&path, hook);
    let opts = TokioOptions::default().depth(DEPTH).adaptive(false);
    let table = TokioEngine::open_rows(&path, RowLayout { base: 0, row_size: ROW, rows: None }, opts).await.unwrap();

    // 64 gathers started before any is awaited, each of 40 rows far apart (40 reads each).
    let gathers: Vec<_> = (0..64u64)
        .map(|g| {
            let ids: Vec<u64> = (0..40u64).map(|k| (g * 97 + k * 101) % ROWS).collect();
            let fut = table.gather(&ids).unwrap();
            (ids, fut)
        })
        .collect();
    for (ids, fut) in gathers {
        let got = fut.await.unwrap();
        for (k, &r) in ids.iter().enumerate() {
            let want = &data[(r * ROW) as usize..((r + 1) * ROW) as usize];
            assert_eq!(&got[k * ROW as usize..(k + 1) * ROW as usize], want, "row {r}");
        }
    }
    let peak = counter.peak.load(Ordering::SeqCst);
    assert!(peak <= DEPTH, "{peak} reads in flight at once; the engine's depth is {DEPTH}");
    assert!(table.source().engine().staging().is_full());
}

/// Workers take turns between the queued gathers, one extent each: a one-row gather that arrives
/// while the engine's only worker serves a 1,000-extent gather is read next, not after the large
/// one's remaining extents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gather_budget_takes_turns_with_a_gather_that_arrives_later() {
    let (dir, data) = table_file();
    let path = dir.path().join("t.bin");
    // The large gather's first read waits until the small gather is queued; every read of the
    // large one (its rows are the even ones below 2,000) is counted.
    let (queued, wait) = std::sync::mpsc::channel::<()>();
    let (started, first_read) = std::sync::mpsc::channel::<()>();
    let (wait, started) = (std::sync::Mutex::new(wait), std::sync::Mutex::new(started));
    let large_reads = Arc::new(AtomicUsize::new(0));
    let at_small = Arc::new(AtomicUsize::new(usize::MAX));
    let (counted, seen) = (large_reads.clone(), at_small.clone());
    let hook = Hook::new(move |p| {
        if p.kind == IoKind::Read && p.offset < 2000 * ROW {
            if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                started.lock().unwrap().send(()).unwrap();
                wait.lock().unwrap().recv_timeout(Duration::from_secs(20)).unwrap();
            }
        } else if p.kind == IoKind::Read {
            seen.store(counted.load(Ordering::SeqCst), Ordering::SeqCst);
        }
        Action::Proceed
    });
    let _faults = fault::inject(&path, hook);
    let opts = TokioOptions::default().depth(1).adaptive(false).max_gap(0).tune_gap(false);
    let table = TokioEngine::open_rows(&path, RowLayout { base: 0, row_size: ROW, rows: None }, opts).await.unwrap();

    let large_ids: Vec<u64> = (0..1000u64).map(|k| 2 * k).collect();
    let large = table.gather(&large_ids).unwrap();
    // The worker is inside the large gather's first read (a blocking wait, in a short test).
    first_read.recv_timeout(Duration::from_secs(20)).unwrap();
    let small = table.gather(&[ROWS - 1]).unwrap();
    queued.send(()).unwrap();
    let got = small.await.unwrap();
    // Its read came right after the large one's first two (the first, then the one claimed when
    // that read returned, as the worker found the small gather queued).
    let before = at_small.load(Ordering::SeqCst);
    assert!(before <= 2, "the small gather's read waited for {before} of the large one's 1000 reads");
    assert_eq!(&got[..], &data[((ROWS - 1) * ROW) as usize..]);
    let got = large.await.unwrap();
    for (k, &r) in large_ids.iter().enumerate() {
        assert_eq!(&got[k * ROW as usize..(k + 1) * ROW as usize], &data[(r * ROW) as usize..((r + 1) * ROW) as usize]);
    }
    assert_eq!(large_reads.load(Ordering::SeqCst), 1000);
}
