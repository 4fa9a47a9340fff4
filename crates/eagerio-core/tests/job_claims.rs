//! `JobClaims`, one party's account of a job it serves (the io_uring and glommio lanes keep one
//! per job): claiming, completing, draining and cancelling, driven by hand over a real job.
#![cfg(not(eagerio_loom))]

use std::{
    path::PathBuf,
    sync::{Arc, Mutex},
};

use eagerio_core::{
    backend::{ClaimPhase, JobClaims, JobHandle, ReadEngine},
    Error, FileInfo, RowLayout, RowTable, Source,
};

const ROW: u64 = 64;

/// Keeps each submitted job for the test to serve.
#[derive(Clone)]
struct HandEngine {
    info: FileInfo,
    jobs: Arc<Mutex<Vec<JobHandle>>>,
}

impl ReadEngine for HandEngine {
    fn info(&self) -> &FileInfo {
        &self.info
    }

    fn submit(&self, job: JobHandle) {
        self.jobs.lock().unwrap().push(job);
    }
}

fn table() -> (RowTable<HandEngine>, Arc<Mutex<Vec<JobHandle>>>) {
    let info = FileInfo { path: PathBuf::from("claims.bin"), len: 1 << 20, align: 1, max_read: 4096 };
    let jobs = Arc::new(Mutex::new(Vec::new()));
    let engine = HandEngine { info, jobs: jobs.clone() };
    (Source::new(engine).rows(RowLayout { base: 0, row_size: ROW, rows: None }).unwrap(), jobs)
}

fn read(job: &JobHandle, extent: usize) {
    let len = job.plan().extents()[extent].len as usize;
    job.complete(extent, &vec![7u8; len], Ok(len));
}

#[test]
fn job_claims_claim_complete_then_drain() {
    let (t, jobs) = table();
    let fut = t.gather(&[0, 100, 200]).unwrap();
    let job = jobs.lock().unwrap().pop().unwrap();
    let mut c = JobClaims::default();
    assert_eq!((c.phase(), c.is_claiming(), c.is_drained()), (ClaimPhase::Claiming, true, false));
    assert_eq!((c.in_flight(), c.unclaimed(&job), c.claimed()), (0, 3, 0));

    let a = c.claim(&job).expect("three extents to claim");
    assert_eq!(c.claimed(), 1, "the first claim");
    let b = c.claim(&job).expect("two left");
    assert_ne!(a, b);
    assert_eq!((c.in_flight(), c.unclaimed(&job), c.claimed()), (2, 1, 2));
    read(&job, a);
    c.completed(&job);
    assert_eq!((c.in_flight(), c.phase()), (1, ClaimPhase::Claiming), "a live job keeps claiming");

    let last = c.claim(&job).expect("one left");
    assert_eq!((c.in_flight(), c.unclaimed(&job)), (2, 0));
    assert_eq!(c.claim(&job), None);
    assert_eq!(c.claimed(), 3, "completions do not uncount a claim, and nothing left is none");
    assert_eq!((c.phase(), c.is_claiming(), c.is_drained()), (ClaimPhase::Draining, false, false));
    read(&job, b);
    c.completed(&job);
    assert!(!c.is_drained(), "one read still in flight");
    read(&job, last);
    c.completed(&job);
    assert_eq!((c.in_flight(), c.is_drained()), (0, true));
    drop(job);
    assert_eq!(futures::executor::block_on(fut).unwrap().len(), 3 * ROW as usize);
}

#[test]
fn job_claims_failed_job_stops_claiming() {
    let (t, jobs) = table();
    let fut = t.gather(&[0, 100, 200]).unwrap();
    let job = jobs.lock().unwrap().pop().unwrap();
    let mut c = JobClaims::default();
    let a = c.claim(&job).unwrap();
    job.complete(a, &[], Err(std::io::Error::from_raw_os_error(libc::EIO)));
    c.completed(&job);
    assert_eq!((c.phase(), c.in_flight(), c.is_drained()), (ClaimPhase::Draining, 0, true));
    assert_eq!(c.claim(&job), None, "a failed job hands out nothing more");
    drop(job);
    assert!(matches!(futures::executor::block_on(fut), Err(Error::Io { .. })));
}

#[test]
fn job_claims_cancel_once_then_drain() {
    let (t, jobs) = table();
    let fut = t.gather(&[0, 100]).unwrap();
    let job = jobs.lock().unwrap().pop().unwrap();
    let mut c = JobClaims::default();
    let a = c.claim(&job).unwrap();
    drop(fut);
    assert!(c.cancel(), "the first cancel asks for the reads in flight to be cancelled");
    assert!(!c.cancel(), "the second does not");
    assert_eq!((c.phase(), c.is_claiming(), c.is_drained()), (ClaimPhase::Cancelling, false, false));
    assert_eq!(c.claim(&job), None, "a cancelled party claims nothing");
    job.complete(a, &[], Err(std::io::Error::from_raw_os_error(libc::ECANCELED)));
    c.completed(&job);
    assert_eq!((c.phase(), c.in_flight(), c.is_drained()), (ClaimPhase::Cancelling, 0, true));
}
