//! The gap tuner on a real backend: a gather that ended early (dropped, or past its deadline)
//! teaches it nothing even when every read was issued, and a whole one does. The last row's read
//! is held by a gate, so the gather ends with all its reads in flight or done.

use std::{
    io::Write,
    sync::{Arc, Condvar, Mutex},
    time::{Duration, Instant},
};

use eagerio_core::{
    fault::{self, Action, Hook, IoKind},
    tune::{GapTuner, MIN_FIT_READS},
    Error, RowLayout,
};
use eagerio_tokio::{TokioEngine, TokioOptions};

const ROW: u64 = 4096;

type Gate = Arc<(Mutex<bool>, Condvar)>;

fn set(gate: &Gate, open: bool) {
    *gate.0.lock().unwrap() = open;
    gate.1.notify_all();
}

/// Waits until `ready` holds, for at most 20 s.
async fn until(what: &str, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tune_a_gather_ended_early_teaches_nothing_even_with_every_read_issued() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.bin");
    // Rows 32 KiB apart, one read each under the 16 KiB limit; the last one's read is gated.
    let n = MIN_FIT_READS + 1;
    let ids: Vec<u64> = (0..n).map(|i| i * 8).collect();
    let data: Vec<u8> = (0..(n * 8 * ROW) as u32).map(|i| (i % 251) as u8).collect();
    std::fs::File::create(&path).and_then(|mut f| f.write_all(&data)).unwrap();
    let held = (n - 1) * 8 * ROW;
    let gate: Gate = Arc::new((Mutex::new(true), Condvar::new()));
    let g = gate.clone();
    let _faults = fault::inject(
        &path,
        Hook::new(move |p| {
            if p.kind == IoKind::Read && p.offset <= held && held < p.offset + p.len as u64 {
                let open = g.0.lock().unwrap();
                drop(g.1.wait_timeout_while(open, Duration::from_secs(20), |o| !*o).unwrap());
            }
            Action::Proceed
        }),
    );
    let opts = TokioOptions::default().adaptive(false);
    let source = TokioEngine::open(&path, opts).await.unwrap();
    let tuner = Arc::new(GapTuner::new());
    let table = source
        .with_gap_tuner(tuner.clone(), 4096, 16 << 10)
        .rows(RowLayout { base: 0, row_size: ROW, rows: None })
        .unwrap();
    let settled = |k: u64| {
        let t = &table;
        async move { until("the gather settled", || t.source().stats().gathers >= k).await }
    };

    // Dropped with every read issued, the last still held.
    set(&gate, false);
    let fut = table.gather(&ids).unwrap();
    until("every read was issued", || fut.stats().reads_issued == n).await;
    drop(fut);
    set(&gate, true);
    settled(1).await;
    assert_eq!(tuner.gathers(), 0, "a dropped gather is no measure of the device");

    // Past its deadline with every read issued.
    set(&gate, false);
    let res = table.gather(&ids).unwrap().with_timeout(Duration::from_millis(300)).await;
    assert!(matches!(res, Err(Error::TimedOut { .. })), "{res:?}");
    set(&gate, true);
    settled(2).await;
    assert_eq!(table.stats().reads, 2 * n, "every read of both gathers was issued");
    assert_eq!(tuner.gathers(), 0, "a timed-out gather is no measure of the device");

    // Whole: counted.
    let bytes = table.gather(&ids).unwrap().await.unwrap();
    assert_eq!(bytes.len() as u64, n * ROW);
    settled(3).await;
    assert_eq!(tuner.gathers(), 1, "a whole gather of enough reads counts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tune_a_gather_served_partly_from_the_page_cache_teaches_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.bin");
    // Two halves of rows 32 KiB apart; the first half cached by buffered reads, the second cold.
    let n = MIN_FIT_READS + 1;
    let ids: Vec<u64> = (0..2 * n).map(|i| i * 8).collect();
    let data: Vec<u8> = (0..(2 * n * 8 * ROW) as u32).map(|i| (i % 251) as u8).collect();
    std::fs::File::create(&path).and_then(|mut f| f.write_all(&data).and_then(|()| f.sync_all())).unwrap();
    eagerio_core::sys::evict(&path).unwrap();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open(&path).unwrap();
        let mut row = vec![0u8; ROW as usize];
        for &id in &ids[..n as usize] {
            f.read_exact_at(&mut row, id * ROW).unwrap();
        }
    }
    let source = TokioEngine::open(&path, TokioOptions::default()).await.unwrap();
    assert!(source.is_adaptive());
    let tuner = Arc::new(GapTuner::new());
    let table = source
        .with_gap_tuner(tuner.clone(), 4096, 16 << 10)
        .rows(RowLayout { base: 0, row_size: ROW, rows: None })
        .unwrap();
    let fut = table.gather(&ids).unwrap();
    let bytes = fut.await.unwrap();
    assert_eq!(&bytes[..ROW as usize], &data[..ROW as usize]);
    until("the gather settled", || table.stats().gathers == 1).await;
    let totals = table.stats();
    assert!(totals.resident > 0 && totals.reads >= MIN_FIT_READS, "{totals:?}");
    assert_eq!(tuner.gathers(), 0, "a gather the page cache served in part is no measure of the device");
}
