//! The read protocol between the ledger and a backend, checked against engines that break it.
//!
//! `JobHandle` is a safe public API: a backend written in safe Rust must not be able to make a
//! gather return bytes that no read wrote, whatever order it calls it in. Each engine below breaks
//! the protocol one way; the gather must fail with `Error::Protocol`, never succeed.
#![cfg(not(eagerio_loom))]

use std::{cell::Cell, path::PathBuf};

use eagerio_core::{
    backend::{JobHandle, ReadEngine},
    Error, FileInfo, Source,
};

/// How the engine misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Misuse {
    /// Reads every extent as it should.
    None,
    /// Claims every extent, reports the first twice and never reports the last.
    CompleteTwice,
    /// Reports the last extent without claiming it, after claiming only the first.
    CompleteUnclaimed,
}

struct Engine {
    data: Vec<u8>,
    info: FileInfo,
    misuse: Cell<Misuse>,
}

impl Engine {
    fn new(len: usize) -> Engine {
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let info = FileInfo { path: PathBuf::from("protocol.bin"), len: len as u64, align: 1, max_read: 4096 };
        Engine { data, info, misuse: Cell::new(Misuse::None) }
    }

    fn read(&self, job: &JobHandle, extent: usize) {
        let e = job.plan().extents()[extent];
        let bytes = &self.data[e.offset as usize..e.offset as usize + e.len as usize];
        job.complete(extent, bytes, Ok(bytes.len()));
    }
}

impl ReadEngine for Engine {
    fn info(&self) -> &FileInfo {
        &self.info
    }

    fn submit(&self, job: JobHandle) {
        let last = job.plan().extents().len() - 1;
        match self.misuse.get() {
            Misuse::None => {
                while let Some(i) = job.next_extent() {
                    self.read(&job, i);
                }
            }
            Misuse::CompleteTwice => {
                let claimed: Vec<usize> = std::iter::from_fn(|| job.next_extent()).collect();
                assert_eq!(claimed.len(), last + 1);
                self.read(&job, 0);
                self.read(&job, 0);
            }
            Misuse::CompleteUnclaimed => {
                let first = job.next_extent().expect("an extent");
                self.read(&job, first);
                self.read(&job, last);
            }
        }
    }
}

/// Two ranges far apart: two extents.
const RANGES: &[std::ops::Range<u64>] = &[100..200, 60_000..60_100];

fn gather(misuse: Misuse) -> eagerio_core::Result<Vec<bytes::Bytes>> {
    let source = Source::new(Engine::new(70_000)).with_max_gap(0);
    source.engine().misuse.set(misuse);
    let fut = source.gather_ranges(RANGES).expect("valid ranges");
    assert_eq!(fut.stats().reads_planned, 2);
    futures::executor::block_on(fut)
}

#[test]
fn protocol_kept_gathers_the_bytes() {
    let got = gather(Misuse::None).expect("a correct engine");
    assert_eq!(got[0][0], 100);
    assert_eq!(got[1][0], (60_000 % 251) as u8);
}

#[test]
fn protocol_extent_completed_twice_fails_the_gather() {
    let err = gather(Misuse::CompleteTwice).expect_err("one extent was never read");
    assert!(matches!(err, Error::Protocol { .. }), "{err:?}");
    assert!(err.to_string().contains("completed twice"), "{err}");
}

#[test]
fn protocol_unclaimed_extent_fails_the_gather() {
    let err = gather(Misuse::CompleteUnclaimed).expect_err("the last extent was never claimed");
    assert!(matches!(err, Error::Protocol { .. }), "{err:?}");
    assert!(err.to_string().contains("never claimed"), "{err}");
}
