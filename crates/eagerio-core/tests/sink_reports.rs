//! What a sink reports, and to whom: a failed `fdatasync` whose sync future was dropped unread is
//! reported by the next flush, once; an operation a backend drops without completing it fails
//! and is reported; the in-flight bound admits a write that fills it exactly. (Write failures of
//! dropped flushes: the conformance check `sink_dropped_flush_keeps_its_report`, on every
//! backend.)
#![cfg(not(eagerio_loom))]

use std::{
    io,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use bytes::Bytes;
use eagerio_core::{
    backend::{SyncOp, WriteEngine, WriteOp},
    DataSink, Error, Op, Sink, SinkOptions,
};
use futures::executor::block_on;

/// Writes succeed at once; every sync fails with `EIO`.
struct FailingSync(PathBuf);

impl WriteEngine for FailingSync {
    fn path(&self) -> &Path {
        &self.0
    }

    fn submit_write(&self, op: WriteOp<Self>) {
        op.complete(Ok(()));
    }

    fn submit_sync(&self, op: SyncOp<Self>) {
        op.complete(Err(io::Error::from_raw_os_error(libc::EIO)));
    }
}

#[test]
fn sink_reports_a_failed_sync_dropped_unread_at_the_next_flush() {
    let sink = Sink::new(FailingSync(PathBuf::from("sync.bin")), SinkOptions::default()).unwrap();
    block_on(sink.append(Bytes::from_static(b"abc"))).unwrap();
    drop(sink.sync());
    match block_on(sink.flush()) {
        Err(Error::Io { op: Op::Sync, source, .. }) => assert_eq!(source.raw_os_error(), Some(libc::EIO)),
        other => panic!("expected the dropped sync's failure, got {other:?}"),
    }
    block_on(sink.flush()).expect("reported once");
    // A sync that is awaited reports its own failure, as before.
    assert!(matches!(block_on(sink.sync()), Err(Error::Io { op: Op::Sync, .. })));
    block_on(sink.flush()).expect("an awaited sync's failure is not reported again");
}

/// Keeps every write and sync it is handed, for the test to complete or drop.
#[derive(Clone, Default)]
struct Holding {
    writes: Arc<Mutex<Vec<WriteOp<Holding>>>>,
    syncs: Arc<Mutex<Vec<SyncOp<Holding>>>>,
}

impl WriteEngine for Holding {
    fn path(&self) -> &Path {
        Path::new("held.bin")
    }

    fn submit_write(&self, op: WriteOp<Self>) {
        self.writes.lock().unwrap().push(op);
    }

    fn submit_sync(&self, op: SyncOp<Self>) {
        self.syncs.lock().unwrap().push(op);
    }
}

fn holding(max_in_flight_bytes: usize) -> (Sink<Holding>, Holding) {
    let engine = Holding::default();
    let opts = SinkOptions::default().max_in_flight_bytes(max_in_flight_bytes);
    (Sink::new(engine.clone(), opts).unwrap(), engine)
}

#[test]
fn sink_reports_operations_the_backend_dropped() {
    let (sink, engine) = holding(1 << 20);
    let w = sink.append(Bytes::from_static(b"lost"));
    drop(engine.writes.lock().unwrap().pop().expect("the write was handed over at call time"));
    let e = block_on(w).unwrap_err();
    assert!(e.to_string().contains("the backend dropped the write"), "{e}");
    assert_eq!((sink.stats().failed, sink.stats().in_flight), (1, 0));
    assert!(matches!(block_on(sink.flush()), Err(Error::WriteFailed { .. })));

    let s = sink.sync();
    drop(engine.syncs.lock().unwrap().pop().expect("the sync was handed over"));
    assert!(matches!(block_on(s), Err(Error::Abandoned { op: Op::Sync, .. })));
}

#[test]
fn sink_reports_the_bound_admits_a_write_that_fills_it_exactly() {
    let (sink, engine) = holding(100);
    let first = sink.append(Bytes::from(vec![1u8; 60]));
    let fills = sink.append(Bytes::from(vec![2u8; 40]));
    assert_eq!(engine.writes.lock().unwrap().len(), 2, "60 + 40 bytes fit a 100-byte bound");
    let over = sink.append(Bytes::from(vec![3u8; 1]));
    assert_eq!((engine.writes.lock().unwrap().len(), sink.stats().queued), (2, 1), "a 101st byte waits");
    // Completing the first write lets the waiting one start.
    let op = engine.writes.lock().unwrap().remove(0);
    op.complete(Ok(()));
    block_on(first).unwrap();
    assert_eq!((engine.writes.lock().unwrap().len(), sink.stats().queued), (2, 0));
    for op in engine.writes.lock().unwrap().drain(..) {
        op.complete(Ok(()));
    }
    block_on(fills).unwrap();
    block_on(over).unwrap();
}

/// Whether `fut` is still pending after one poll.
fn pending<F: std::future::Future + Unpin>(fut: &mut F) -> bool {
    futures::FutureExt::now_or_never(fut).is_none()
}

fn complete_all(engine: &Holding) {
    let ops: Vec<_> = engine.writes.lock().unwrap().drain(..).collect();
    for op in ops {
        op.complete(Ok(()));
    }
}

#[test]
fn sink_reports_a_flush_waits_for_the_writes_before_it() {
    let (sink, engine) = holding(1 << 20);
    let w = sink.append(Bytes::from_static(b"first"));
    let mut flush = sink.flush();
    assert!(pending(&mut flush), "the write is still in the backend's hands");
    let later = sink.append(Bytes::from_static(b"later"));
    assert_eq!((sink.stats().writes, sink.stats().bytes, sink.stats().in_flight), (2, 10, 2));
    let first = engine.writes.lock().unwrap().remove(0);
    first.complete(Ok(()));
    block_on(flush).expect("every write before the flush is done");
    block_on(w).unwrap();
    complete_all(&engine);
    block_on(later).unwrap();
}

#[test]
fn sink_reports_ready_means_under_the_bound_with_nothing_queued() {
    let (sink, engine) = holding(100);
    block_on(sink.ready()); // nothing in flight
    let a = sink.append(Bytes::from(vec![1u8; 50]));
    let b = sink.append(Bytes::from(vec![2u8; 50]));
    let mut full = sink.ready();
    assert!(pending(&mut full), "100 of 100 bytes in flight");
    let c = sink.append(Bytes::from(vec![3u8; 50])); // queued behind the bound
                                                     // A barrier's pass must not wake it: 100 bytes in flight, one write queued.
    let flush = sink.flush();
    assert!(pending(&mut full));
    // The first completes and the queued one starts: 100 bytes in flight again.
    let first = engine.writes.lock().unwrap().remove(0);
    first.complete(Ok(()));
    assert_eq!((sink.stats().in_flight_bytes, sink.stats().queued), (100, 0));
    assert!(pending(&mut full), "still at the bound");
    let second = engine.writes.lock().unwrap().remove(0);
    second.complete(Ok(()));
    block_on(full); // 50 of 100
    let mut again = sink.ready();
    assert!(!pending(&mut again), "under the bound with nothing queued: ready at once");
    // Under the bound but a write queued: not ready.
    let (sink2, engine2) = holding(100);
    let d = sink2.append(Bytes::from(vec![4u8; 60]));
    let e = sink2.append(Bytes::from(vec![5u8; 50]));
    assert_eq!((sink2.stats().in_flight_bytes, sink2.stats().queued), (60, 1));
    let mut queued = sink2.ready();
    assert!(pending(&mut queued), "a write is queued");
    complete_all(&engine2);
    complete_all(&engine2);
    block_on(queued);
    for w in [a, b, c, d, e] {
        complete_all(&engine);
        block_on(w).unwrap();
    }
    block_on(flush).unwrap();
}

#[test]
fn sink_reports_only_shared_bytes_hold_a_write() {
    let (sink, engine) = holding(1 << 20);
    let a = sink.write_at(100, Bytes::from(vec![1u8; 100])); // [100, 200) in flight
    let b = sink.write_at(100, Bytes::from(vec![2u8; 50])); // shares [100, 150): held
    assert_eq!((engine.writes.lock().unwrap().len(), sink.stats().held), (1, 1));
    let c = sink.write_at(0, Bytes::from(vec![3u8; 100])); // [0, 100) ends where both start
    assert_eq!((engine.writes.lock().unwrap().len(), sink.stats().held), (2, 1), "touching is not overlapping");
    let d = sink.write_at(120, Bytes::new()); // empty, inside both: never held
    assert_eq!((engine.writes.lock().unwrap().len(), sink.stats().held), (3, 1));
    complete_all(&engine); // a, c, d; then b starts
    complete_all(&engine);
    for w in [a, b, c, d] {
        block_on(w).unwrap();
    }
}
