//! The eager contract on glommio: when `gather` or `append` returns, the reads or writes are
//! queued to the executor's ring (their futures were polled once, in the call), and they run to
//! completion while the caller awaits something else, without the returned future ever being
//! polled. Asserted on counters and on completion, never on time.

mod common;

use common::{block_on, Fixture};

use std::{
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use bytes::Bytes;
use eagerio_core::{
    fault::{self, Action, Hook, IoKind},
    DataSink,
};
use eagerio_glommio::{GlommioOptions, GlommioWriter, WriterOptions};

/// Counts I/Os of one kind as they are queued.
fn counter(kind: IoKind) -> (Hook, Arc<AtomicUsize>) {
    let n = Arc::new(AtomicUsize::new(0));
    let c = n.clone();
    let hook = Hook::new(move |p| {
        if p.kind == kind {
            c.fetch_add(1, Ordering::SeqCst);
        }
        Action::Proceed
    });
    (hook, n)
}

/// Yields to the executor (a timer, nothing to do with the I/O) until `done`, for up to 20 s.
async fn await_something_else_until(mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "the I/O never completed while the caller waited elsewhere");
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
}

#[test]
fn gather_reads_queued_at_call_and_completed_without_polling() {
    block_on(async {
        let (hook, queued) = counter(IoKind::Read);
        let opts = GlommioOptions::default().max_gap(0);
        let Fixture { file, table, dir: _dir } = Fixture::hooked(16, opts, Some(hook)).await;
        let mut fut = table.gather(&[3, 9, 15]).unwrap();
        // The call returned: three reads queued to the ring, three slots held.
        assert_eq!(queued.load(Ordering::SeqCst), 3);
        assert_eq!(fut.stats().reads_issued, 3);
        assert_eq!(table.source().engine().in_flight(), 3);
        // glommio submits at the executor's next reactor poll, which needs this task to yield:
        // nothing can have completed yet.
        assert!(!fut.is_settled());
        // Await something else; the gather future is never polled meanwhile.
        await_something_else_until(|| fut.is_settled()).await;
        assert!(table.source().engine().is_idle());
        // The first poll finds the work done and never needs a wake.
        let (waker, wakes) = futures_test::task::new_count_waker();
        let Poll::Ready(got) = Pin::new(&mut fut).poll(&mut Context::from_waker(&waker)) else {
            panic!("a settled gather must be ready at its first poll")
        };
        let got = got.unwrap();
        let mut expect = Vec::new();
        for r in [3usize, 9, 15] {
            expect.extend_from_slice(&file[r * 4096..(r + 1) * 4096]);
        }
        assert_eq!(&got[..], &expect[..]);
        assert_eq!(wakes.get(), 0);
        assert_eq!(fut.stats().reads_issued, 3, "counters stay readable after completion");
    });
}

#[test]
fn four_gathers_in_flight_before_any_await() {
    block_on(async {
        let (hook, queued) = counter(IoKind::Read);
        let Fixture { table, dir: _dir, .. } = Fixture::hooked(64, GlommioOptions::default(), Some(hook)).await;
        // Four gathers of one row each: one read per gather, all queued by the calls.
        let mut futs: Vec<_> = (0..4u64).map(|i| table.gather(&[i * 10]).unwrap()).collect();
        assert_eq!(queued.load(Ordering::SeqCst), 4, "all 4 gathers' reads must be queued before the first await");
        assert_eq!(table.source().engine().in_flight(), 4);
        // Await only the last one: the other three ran meanwhile, unpolled (and a gather
        // settles only after every earlier read, so they are done).
        let last = futs.pop().unwrap();
        assert_eq!(last.await.unwrap().len(), 4096);
        assert!(futs.iter().all(|f| f.is_settled()), "earlier gathers progressed without being polled");
        for f in futs {
            assert_eq!(f.await.unwrap().len(), 4096);
        }
    });
}

#[test]
fn sink_writes_queued_at_call_and_completed_without_polling() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let (hook, queued) = counter(IoKind::Write);
        let _faults = fault::inject(&path, hook);
        let sink = GlommioWriter::create(&path, WriterOptions::default()).await.unwrap();
        let futs: Vec<_> = (0..4u8).map(|i| sink.append(Bytes::from(vec![i; 6000]))).collect();
        assert_eq!(queued.load(Ordering::SeqCst), 4, "all 4 writes must be queued before the first await");
        assert_eq!(sink.stats().in_flight, 4);
        await_something_else_until(|| sink.stats().in_flight == 0).await;
        for f in futs {
            f.await.unwrap();
        }
        sink.close().await.unwrap();
        let on_disk = std::fs::read(&path).unwrap();
        assert_eq!(on_disk.len(), 24_000);
        assert!(on_disk.chunks(6000).enumerate().all(|(i, c)| c.iter().all(|&b| b == i as u8)));
    });
}

#[test]
fn large_gather_prepared_off_the_executor_and_completed_without_polling() {
    block_on(async {
        let (hook, queued) = counter(IoKind::Read);
        let opts = GlommioOptions::default().adaptive(false);
        let Fixture { file, table, dir: _dir } = Fixture::hooked(64, opts, Some(hook)).await;
        let ids: Vec<u64> = (0..eagerio_core::prepare::PREPARE_ELSEWHERE as u64).map(|i| i * 7 % 64).collect();
        let fut = table.gather(&ids).unwrap();
        // Planned on a preparing thread, the job comes back through this executor, which is
        // busy with this task until it yields: nothing can be queued yet, and the engine knows a
        // gather is on its way.
        assert_eq!(queued.load(Ordering::SeqCst), 0, "a large gather must not be planned in the call");
        assert_eq!(table.source().engine().in_flight(), 0);
        assert!(!table.source().engine().is_idle());
        // The preparing thread's hand-over wakes the executor; the gather future is never polled.
        await_something_else_until(|| fut.is_settled()).await;
        assert!(queued.load(Ordering::SeqCst) > 0);
        assert_eq!(&fut.await.unwrap()[..], &common::rows(&file, 4096, &ids)[..]);
        // The channel's pump ends at its next turn once the preparing thread's sender is gone.
        await_something_else_until(|| table.source().engine().is_idle()).await;
    });
}
