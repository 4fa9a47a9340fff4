//! What a sink reports, and to whom: a failed `fdatasync` whose sync future was dropped unread is
//! reported by the next flush, once. (Write failures of dropped flushes: the conformance check
//! `sink_dropped_flush_keeps_its_report`, on every backend.)
#![cfg(not(eagerio_loom))]

use std::{
    io,
    path::{Path, PathBuf},
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
