//! The eager contract, after the known defect of lazy write futures (docs/background.md): the I/O
//! is in flight before anything is awaited. Asserted on counters, never on time.

use std::{
    sync::{Arc, Condvar, Mutex},
    time::Duration,
};

use bytes::Bytes;
use eagerio_core::{
    fault::{self, Action, Hook, IoKind},
    DataSink, RowLayout,
};
use eagerio_tokio::{TokioEngine, TokioOptions, TokioWriter, WriterOptions};

/// Counts I/Os that have started (entered the syscall seam) and lets a test wait for a count.
#[derive(Clone, Default)]
struct Started(Arc<(Mutex<usize>, Condvar)>);

impl Started {
    fn hook(&self, kind: IoKind, hold: Duration) -> Hook {
        let me = self.clone();
        Hook::new(move |p| {
            if p.kind == kind {
                let (m, cv) = &*me.0;
                *m.lock().unwrap() += 1;
                cv.notify_all();
                std::thread::sleep(hold);
            }
            Action::Proceed
        })
    }

    /// Waits (up to 20 s, generous for a loaded machine) until `n` I/Os have started; returns the
    /// count reached.
    fn wait_for(&self, n: usize) -> usize {
        let (m, cv) = &*self.0;
        let g = m.lock().unwrap();
        let (g, _) = cv.wait_timeout_while(g, Duration::from_secs(20), |c| *c < n).unwrap();
        *g
    }
}

/// Writes a table and evicts it, so its rows are read (not served from the page cache by the
/// adaptive mode).
fn cold_file(path: &std::path::Path, bytes: &[u8]) {
    let f = std::fs::File::create(path).unwrap();
    std::io::Write::write_all(&mut &f, bytes).unwrap();
    f.sync_all().unwrap();
    eagerio_core::sys::evict(path).unwrap();
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn sink_four_slow_writes_in_flight_before_any_await() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let started = Started::default();
        let path = dir.path().join("out");
        let _faults = fault::inject(&path, started.hook(IoKind::Write, Duration::from_millis(100)));
        let sink = TokioWriter::create(&path, WriterOptions::default()).await.unwrap();
        let futs: Vec<_> = (0..4u8).map(|i| sink.append(Bytes::from(vec![i; 4096]))).collect();
        assert_eq!(started.wait_for(4), 4, "all 4 writes must be in flight before the first await");
        assert_eq!(sink.stats().in_flight, 4);
        for f in futs {
            f.await.unwrap();
        }
        sink.close().await.unwrap();
    });
}

#[test]
fn gather_four_slow_gathers_in_flight_before_any_await() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        cold_file(&path, &vec![7u8; 4096 * 64]);
        let started = Started::default();
        let _faults = fault::inject(&path, started.hook(IoKind::Read, Duration::from_millis(100)));
        let table = TokioEngine::open(&path, TokioOptions::default())
            .await
            .unwrap()
            .rows(RowLayout { base: 0, row_size: 4096, rows: None })
            .unwrap();
        // Four gathers of one row each: one read per gather.
        let futs: Vec<_> = (0..4u64).map(|i| table.gather(&[i * 10]).unwrap()).collect();
        assert_eq!(started.wait_for(4), 4, "all 4 gathers' reads must be in flight before the first await");
        for f in futs {
            assert_eq!(f.await.unwrap().len(), 4096);
        }
    });
}

#[test]
fn gather_reads_issued_before_first_poll() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        cold_file(&path, &(0..4096u32 * 16).map(|i| i as u8).collect::<Vec<_>>());
        let started = Started::default();
        let _faults = fault::inject(&path, started.hook(IoKind::Read, Duration::ZERO));
        let opts = TokioOptions::default().max_gap(0);
        let table = TokioEngine::open(&path, opts)
            .await
            .unwrap()
            .rows(RowLayout { base: 0, row_size: 4096, rows: None })
            .unwrap();
        let mut fut = tokio_test::task::spawn(table.gather(&[3, 9, 15]).unwrap());
        // Not polled yet, and the three reads reach the syscall seam.
        assert_eq!(started.wait_for(3), 3);
        assert_eq!(fut.stats().reads_issued, 3);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !fut.is_settled() {
            assert!(std::time::Instant::now() < deadline, "reads never completed");
            std::thread::sleep(Duration::from_millis(1));
        }
        // The first poll finds the work done.
        let bytes = tokio_test::assert_ready_ok!(fut.poll());
        assert_eq!(&bytes[..4], &[0, 1, 2, 3]);
        assert!(!fut.is_woken(), "nothing to wake: the reads ran without the future");
        assert_eq!(fut.stats().reads_issued, 3, "counters stay readable after completion");
    });
}
