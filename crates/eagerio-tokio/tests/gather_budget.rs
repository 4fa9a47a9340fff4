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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gather_budget_bounds_reads_across_concurrent_gathers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.bin");
    let data: Vec<u8> = (0..ROWS * ROW).map(|i| (i % 251) as u8).collect();
    std::fs::File::create(&path).and_then(|mut f| f.write_all(&data)).unwrap();
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
