//! Reliability: a deterministic reproduction of a lane stall found by the fault schedule
//! (`reliability_faults.rs`, about half of the seeds hang there).
//!
//! The bug (fixed in `LaneCore::fill`: job slots no longer move during a pass, and a pass ends
//! only after visiting every slot without starting a read) was: when the job the
//! loop visits has every extent claimed and completed, `next_extent` says `None`, the job is
//! retired and, being last in `jobs`, popped; `idle_jobs` is still incremented, so with one job
//! left the loop condition `idle_jobs < self.jobs.len()` (1 < 1) ends the pass before the other
//! job, which still has unclaimed extents and nothing in flight, is visited. `run()` then sleeps
//! in `submit_and_wait(true)` with nothing in flight, and that gather never completes unless
//! other work wakes the lane.
//!
//! Here: depth 3; job B (5 extents) then job A (1 extent) reach the lane; the first pass claims
//! B0, A0, B1 (`next_job` = 3), all three complete; the next pass visits A first (3 % 2 = 1),
//! retires it, and stops. B has 3 unclaimed extents and no read in flight.

use std::{
    io,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use eagerio_core::{backend::Staging, FileInfo, Source};
use eagerio_uring::lane::{FileRef, Inbox, LaneConfig, LaneCore, LaneFile, Ring, Sqe, Work};

#[path = "support/lane_rig.rs"]
mod lane_rig;

use lane_rig::{Capture, NoNotify};

const SLOT: usize = 4096;

/// A ring whose "kernel" completes every read at the next reap, copying from `file`.
struct InstantRing {
    file: Arc<Vec<u8>>,
    queued: Vec<(u64, *mut u8, u32, u64)>,
    pushed: Arc<std::sync::atomic::AtomicUsize>,
}

impl Ring for InstantRing {
    fn push(&mut self, sqe: Sqe) -> bool {
        match sqe {
            Sqe::Read { tag, ptr, len, offset, .. } => {
                self.pushed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.queued.push((tag, ptr, len, offset))
            }
            other => panic!("reads only: {other:?}"),
        }
        true
    }

    fn submit_and_wait(&mut self, _wait: bool) -> io::Result<()> {
        Ok(())
    }

    fn reap(&mut self, f: &mut dyn FnMut(u64, i32)) {
        for (tag, ptr, len, offset) in self.queued.drain(..) {
            let src = &self.file[offset as usize..offset as usize + len as usize];
            // SAFETY: `ptr` points into a staging slot of at least `len` bytes whose lease the
            // lane keeps until this completion is handed to it (as a kernel read would write it).
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), ptr, src.len()) };
            f(tag, len as i32);
        }
    }
}

#[test]
fn lane_never_sleeps_with_claimable_extents_and_nothing_in_flight() {
    let file: Arc<Vec<u8>> = Arc::new((0..64 * SLOT).map(|i| (i / 7) as u8).collect());
    let info = FileInfo { path: PathBuf::from("t"), len: file.len() as u64, align: 1, max_read: SLOT as u64 };
    let jobs = Arc::new(Mutex::new(Vec::new()));
    let src = Source::new(Capture(info, jobs.clone())).with_max_gap(0);
    // Rows far apart: one extent each.
    let b = src.gather_ranges(&[0..10, 8192..8202, 16384..16394, 24576..24586, 32768..32778]).unwrap();
    let a = src.gather_ranges(&[std::ops::Range { start: 49152, end: 49162 }]).unwrap();
    let staging = Staging::new(3 * SLOT, SLOT).unwrap();
    let inbox: Arc<Inbox> = Arc::new(Inbox::new(Box::new(NoNotify)));
    let lane_file = Arc::new(LaneFile::new(FileRef { id: None, fd: -1 }, 1, PathBuf::from("t"), None));
    for job in jobs.lock().unwrap().drain(..) {
        inbox.push(Work::Gather(job, lane_file.clone()));
    }
    let cfg = LaneConfig { depth: 3, name: "lane".into() };
    let pushed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let ring = InstantRing { file: file.clone(), queued: Vec::new(), pushed: pushed.clone() };
    let mut lane = LaneCore::new(ring, staging, inbox, cfg);
    for turn in 0..10 {
        let before = pushed.load(std::sync::atomic::Ordering::Relaxed);
        // take_inbox, fill, submit, reap: what one iteration of `run()` does, without sleeping.
        lane.turn(false).unwrap();
        // A pass of `fill` that issued nothing while a gather is unsettled and nothing is in
        // flight is where `run()` goes to sleep for good (no completion will come to wake it).
        if !b.is_settled() && pushed.load(std::sync::atomic::Ordering::Relaxed) == before {
            assert!(
                lane.in_flight() > 0,
                "turn {turn}: the lane would sleep with nothing in flight while gather B ({:?}) still has \
                 extents to claim: it never completes",
                b.stats()
            );
        }
    }
    assert!(a.is_settled() && b.is_settled());
    let got = futures::executor::block_on(b).unwrap();
    assert_eq!(&got[4][..], &file[32768..32778]);
}
