//! A source's latency histograms on a real backend: every read and every gather is counted, and
//! a read the hook holds for 3 ms shows in the read and gather histograms (at least 3 ms).

use std::{io::Write, time::Duration};

use eagerio_core::{
    fault::{self, Action, Hook, IoKind},
    RowLayout,
};
use eagerio_tokio::{TokioEngine, TokioOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_stats_count_every_read_and_gather() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.bin");
    let data: Vec<u8> = (0..64 * 4096u32).map(|i| (i % 251) as u8).collect();
    std::fs::File::create(&path).and_then(|mut f| f.write_all(&data)).unwrap();
    let hold = Duration::from_millis(3);
    let hook = Hook::new(move |p| {
        if p.kind == IoKind::Read {
            std::thread::sleep(hold);
        }
        Action::Proceed
    });
    // Not adaptive: the freshly written rows are resident and would be copied without a read.
    let _faults = fault::inject(&path, hook);
    let opts = TokioOptions::default().adaptive(false).depth(4).tune_gap(false);
    let table = TokioEngine::open_rows(&path, RowLayout { base: 0, row_size: 4096, rows: None }, opts).await.unwrap();
    // Rows 3 apart: a hole of 8 KiB, past the pinned 4 KiB gap, so each row is its own read.
    for g in 0..5u64 {
        let ids: Vec<u64> = (0..4).map(|k| (g + k * 3) % 64).collect();
        table.gather(&ids).unwrap().await.unwrap();
    }
    let totals = table.stats();
    let l = table.latencies();
    eprintln!("{l}");
    assert_eq!((totals.gathers, totals.reads), (5, 20));
    assert_eq!((l.gather.count(), l.call.count(), l.queue.count(), l.read.count()), (5, 5, 5, 20));
    assert!(l.read.quantile(0.0).unwrap() >= hold, "a held read took {:?}", l.read.quantile(0.0));
    assert!(l.gather.quantile(0.0).unwrap() >= hold);
}
