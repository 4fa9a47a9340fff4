//! Large gathers on an engine that takes jobs from any thread are prepared off the caller's
//! thread: checked in the call, then planned and submitted by an `eagerio-prepare` thread. These
//! tests drive that hand-over with an engine that records where its jobs come from and can hold
//! them back.
#![cfg(not(eagerio_loom))]

use std::{
    path::PathBuf,
    sync::{Arc, Condvar, Mutex},
    task::Poll,
    time::{Duration, Instant},
};

use eagerio_core::{
    backend::{remote, JobHandle, ReadEngine, Remote},
    prepare::PREPARE_ELSEWHERE,
    Error, FileInfo, RowLayout, RowTable, Source,
};

const ROW: u64 = 16;
const ROWS: u64 = 10_000;

/// How the engine treats the jobs it is given.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Reads every extent at once.
    Read,
    /// Keeps the job unread (the test ends it).
    Keep,
    /// Panics in `submit`.
    Panic,
}

struct Inner {
    data: Vec<u8>,
    info: FileInfo,
    mode: Mutex<Mode>,
    /// `submit` waits while this is closed.
    gate: (Mutex<bool>, Condvar),
    /// The thread name of every `submit`, and the jobs kept.
    seen: Mutex<Vec<String>>,
    kept: Mutex<Vec<JobHandle>>,
}

#[derive(Clone)]
struct Engine(Arc<Inner>);

impl Engine {
    fn new() -> Engine {
        Engine::with_len(ROW * ROWS)
    }

    /// An engine over `len` bytes (a pattern, held in memory up to `ROW * ROWS` bytes).
    fn with_len(len: u64) -> Engine {
        let data: Vec<u8> = (0..len.min(ROW * ROWS)).map(|i| (i % 253) as u8).collect();
        let info = FileInfo { path: PathBuf::from("prepare.bin"), len, align: 1, max_read: 4096 };
        Engine(Arc::new(Inner {
            data,
            info,
            mode: Mutex::new(Mode::Read),
            gate: (Mutex::new(true), Condvar::new()),
            seen: Mutex::new(Vec::new()),
            kept: Mutex::new(Vec::new()),
        }))
    }

    fn set_mode(&self, mode: Mode) {
        *self.0.mode.lock().unwrap() = mode;
    }

    fn set_gate(&self, open: bool) {
        *self.0.gate.0.lock().unwrap() = open;
        self.0.gate.1.notify_all();
    }

    fn seen(&self) -> Vec<String> {
        self.0.seen.lock().unwrap().clone()
    }

    /// Waits (up to 10 s) until `submit` has kept `n` jobs, and returns them.
    fn kept(&self, n: usize) -> Vec<JobHandle> {
        eventually(|| self.0.kept.lock().unwrap().len() >= n);
        self.0.kept.lock().unwrap().clone()
    }
}

impl ReadEngine for Engine {
    fn info(&self) -> &FileInfo {
        &self.0.info
    }

    fn submit(&self, job: JobHandle) {
        let name = std::thread::current().name().unwrap_or("").to_string();
        self.0.seen.lock().unwrap().push(name);
        let (open, cv) = &self.0.gate;
        drop(cv.wait_while(open.lock().unwrap(), |open| !*open).unwrap());
        let mode = *self.0.mode.lock().unwrap();
        match mode {
            Mode::Read => {
                while let Some(i) = job.next_extent() {
                    let e = job.plan().extents()[i];
                    let bytes = &self.0.data[e.offset as usize..(e.offset + u64::from(e.len)) as usize];
                    job.complete(i, bytes, Ok(bytes.len()));
                }
            }
            Mode::Keep => self.0.kept.lock().unwrap().push(job),
            Mode::Panic => panic!("the engine broke on purpose"),
        }
    }

    fn remote(&self) -> Option<Remote> {
        Some(remote(self))
    }
}

/// Waits (up to 10 s) until `done` holds; the caller asserts what it needs afterwards.
fn eventually(done: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(10);
    while !done() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn table() -> (Engine, RowTable<Engine>) {
    let engine = Engine::new();
    let table = Source::new(engine.clone()).rows(RowLayout { base: 0, row_size: ROW, rows: None }).unwrap();
    (engine, table)
}

fn ids(n: usize) -> Vec<u64> {
    (0..n as u64).map(|i| (i * 7919) % ROWS).collect()
}

fn expected(ids: &[u64]) -> Vec<u8> {
    ids.iter().flat_map(|&r| (r * ROW..(r + 1) * ROW).map(|i| (i % 253) as u8)).collect()
}

/// Polls `fut` once.
fn poll_once<F: std::future::Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    let waker = futures::task::noop_waker();
    std::pin::Pin::new(fut).poll(&mut std::task::Context::from_waker(&waker))
}

#[test]
fn prepare_large_gather_is_submitted_by_a_preparing_thread() {
    let (engine, table) = table();
    let big = ids(PREPARE_ELSEWHERE);
    let got = futures::executor::block_on(table.gather(&big).unwrap()).unwrap();
    assert_eq!(&got[..], &expected(&big)[..]);
    assert_eq!(table.latencies().call.count(), 1, "a prepared gather's call is recorded once");
    let small = ids(PREPARE_ELSEWHERE - 1);
    let got = futures::executor::block_on(table.gather(&small).unwrap()).unwrap();
    assert_eq!(&got[..], &expected(&small)[..]);
    assert_eq!(table.latencies().call.count(), 2, "and a gather in the call once too");
    let seen = engine.seen();
    assert!(seen[0].starts_with("eagerio-prepare-"), "the large gather came from {:?}", seen[0]);
    assert_eq!(seen[1], std::thread::current().name().unwrap(), "a small gather is submitted in the call");
}

/// The preparing thread starts the reads without the future being polled.
#[test]
fn prepare_reads_start_without_a_poll() {
    let (engine, table) = table();
    engine.set_mode(Mode::Keep);
    let big = ids(3 * PREPARE_ELSEWHERE);
    let fut = table.gather(&big).unwrap();
    let kept = engine.kept(1);
    assert_eq!(kept.len(), 1, "the job reached the engine unpolled");
    assert_eq!(kept[0].plan().requests(), big.len());
    drop(fut);
}

/// A request that planning would refuse fails in the call, before any job reaches the engine.
#[test]
fn prepare_bad_request_fails_in_the_call() {
    // Each range is within this (pretended) file, but together their output cannot fit in
    // memory: only the planner's check sees it.
    let engine = Engine::with_len(u64::MAX / 4);
    let source = Source::new(engine.clone());
    let big: Vec<_> = (0..PREPARE_ELSEWHERE as u64).map(|i| i..i + (1u64 << 60)).collect();
    let err = source.gather_ranges(&big).expect_err("the output cannot fit in memory");
    assert!(matches!(err, Error::InvalidRange { .. }), "{err:?}");
    assert!(engine.seen().is_empty(), "no job reached the engine");
}

/// Dropping the future while the gather is being prepared ends the job when it arrives, and
/// dropping it after the job arrived (but before a poll took it) ends it at once.
#[test]
fn prepare_dropped_future_ends_its_job() {
    let (engine, table) = table();
    engine.set_mode(Mode::Keep);
    engine.set_gate(false);
    let fut = table.gather(&ids(PREPARE_ELSEWHERE)).unwrap();
    // The preparing thread is in the engine's submit, held there.
    eventually(|| !engine.seen().is_empty());
    drop(fut);
    engine.set_gate(true);
    let job = engine.kept(1).pop().expect("the job was submitted");
    eventually(|| !job.is_live());
    assert!(!job.is_live(), "a job whose future was dropped while preparing is ended");

    let fut = table.gather(&ids(PREPARE_ELSEWHERE)).unwrap();
    let job = engine.kept(2).pop().expect("the second job was submitted");
    assert!(job.is_live());
    drop(fut);
    // Submitted is not yet delivered: a job the preparing thread has not handed over yet is
    // ended when it is.
    eventually(|| !job.is_live());
    assert!(!job.is_live(), "a delivered job is ended with its future");
}

/// A deadline that passes while the gather is still being prepared resolves the future with
/// `TimedOut`, every row unread, and the job is ended when it arrives.
#[test]
fn prepare_deadline_passed_while_preparing_times_out() {
    let (engine, table) = table();
    let table = table.with_timeout(Duration::from_secs(3600));
    engine.set_mode(Mode::Keep);
    engine.set_gate(false);
    let n = PREPARE_ELSEWHERE;
    let fut = table.gather(&ids(n)).unwrap();
    // The preparing thread is in the engine's submit, held there.
    eventually(|| !engine.seen().is_empty());
    // The gather's own deadline replaces the source's timeout.
    let mut fut = fut.with_deadline(Instant::now());
    let Poll::Ready(Err(err)) = poll_once(&mut fut) else { panic!("the deadline has passed") };
    assert!(
        matches!(err, Error::TimedOut { unread, requested, what: "rows", .. } if unread == n as u64 && requested == n as u64),
        "{err:?}"
    );
    engine.set_gate(true);
    let job = engine.kept(1).pop().expect("the job was submitted");
    eventually(|| !job.is_live());
    assert!(!job.is_live());
    drop(fut);
}

/// A panic while preparing is the gather's error; the preparing threads go on serving.
#[test]
fn prepare_panic_is_reported_and_the_next_gather_works() {
    let (engine, table) = table();
    engine.set_mode(Mode::Panic);
    let err = futures::executor::block_on(table.gather(&ids(PREPARE_ELSEWHERE)).unwrap()).unwrap_err();
    assert!(matches!(err, Error::Panicked { .. }), "{err:?}");
    assert!(err.to_string().contains("broke on purpose"), "{err}");
    engine.set_mode(Mode::Read);
    let big = ids(PREPARE_ELSEWHERE);
    let got = futures::executor::block_on(table.gather(&big).unwrap()).unwrap();
    assert_eq!(&got[..], &expected(&big)[..]);
}

/// A deadline given while the gather is being prepared is armed when the job arrives: the
/// gather, whose reads never finish here, times out with every row unread.
#[test]
fn prepare_deadline_given_while_preparing_is_armed_on_arrival() {
    let (engine, table) = table();
    engine.set_mode(Mode::Keep);
    engine.set_gate(false);
    let n = PREPARE_ELSEWHERE;
    let fut = table.gather(&ids(n)).unwrap().with_timeout(Duration::from_millis(50));
    engine.set_gate(true);
    let err = futures::executor::block_on(fut).unwrap_err();
    assert!(matches!(err, Error::TimedOut { unread, .. } if unread == n as u64), "{err:?}");
}

/// The source's timeout applies to a prepared gather too.
#[test]
fn prepare_source_timeout_applies() {
    let (engine, table) = table();
    let table = table.with_timeout(Duration::from_millis(50));
    engine.set_mode(Mode::Keep);
    let err = futures::executor::block_on(table.gather(&ids(PREPARE_ELSEWHERE)).unwrap()).unwrap_err();
    assert!(matches!(err, Error::TimedOut { .. }), "{err:?}");
}

/// While the gather is being prepared its statistics are zero and it is not settled; once the
/// job has arrived they are the job's, before any poll.
#[test]
fn prepare_stats_follow_the_job() {
    let (engine, table) = table();
    engine.set_mode(Mode::Keep);
    engine.set_gate(false);
    let n = PREPARE_ELSEWHERE;
    let fut = table.gather(&ids(n)).unwrap();
    assert!(!fut.is_settled());
    assert_eq!(fut.stats().requested, 0);
    engine.set_gate(true);
    engine.kept(1);
    eventually(|| fut.stats().requested != 0);
    assert_eq!(fut.stats().requested, n as u64);
    assert!(!fut.is_settled(), "the engine holds the job");
    // The engine lets go of the job without reading it: it settles, and the gather fails.
    engine.0.kept.lock().unwrap().clear();
    assert!(fut.is_settled());
    assert!(futures::executor::block_on(fut).is_err());
}

/// A long source timeout does not fire while the gather is prepared, nor once the job has
/// arrived: the reads finish and the gather returns its rows.
#[test]
fn prepare_long_timeout_lets_the_gather_finish() {
    let (engine, table) = table();
    let table = table.with_timeout(Duration::from_secs(3600));
    engine.set_mode(Mode::Keep);
    engine.set_gate(false);
    let big = ids(PREPARE_ELSEWHERE);
    let mut fut = table.gather(&big).unwrap();
    assert!(poll_once(&mut fut).is_pending(), "nothing has arrived and the deadline is far");
    engine.set_gate(true);
    let job = engine.kept(1).pop().expect("the job was submitted");
    engine.0.kept.lock().unwrap().clear();
    while let Some(i) = job.next_extent() {
        let e = job.plan().extents()[i];
        let bytes = &engine.0.data[e.offset as usize..(e.offset + u64::from(e.len)) as usize];
        job.complete(i, bytes, Ok(bytes.len()));
    }
    drop(job);
    let got = futures::executor::block_on(fut).unwrap();
    assert_eq!(&got[..], &expected(&big)[..]);
}

/// A deadline that passes while the gather is being prepared wakes the future at once (the
/// engine holds the preparing thread here), and the gather counts as failed in the totals.
#[test]
fn prepare_deadline_wakes_the_future_while_preparing() {
    let (engine, table) = table();
    engine.set_mode(Mode::Keep);
    engine.set_gate(false);
    let fut = table.gather(&ids(PREPARE_ELSEWHERE)).unwrap().with_timeout(Duration::from_millis(50));
    eventually(|| !engine.seen().is_empty());
    // Opens the gate after 5 s if the future is not woken by then.
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let opener = {
        let engine = engine.clone();
        std::thread::spawn(move || {
            let _ = wait.recv_timeout(Duration::from_secs(5));
            engine.set_gate(true);
        })
    };
    let t = Instant::now();
    let err = futures::executor::block_on(fut).unwrap_err();
    let took = t.elapsed();
    drop(done);
    opener.join().unwrap();
    assert!(matches!(err, Error::TimedOut { .. }), "{err:?}");
    assert!(took < Duration::from_secs(4), "woken by the deadline, not by the job's arrival: {took:?}");
    // The job arrives ended; once the engine lets go of it, it is counted.
    engine.kept(1);
    engine.0.kept.lock().unwrap().clear();
    eventually(|| table.stats().gathers == 1);
    assert_eq!(table.stats().failed, 1, "a gather that timed out while preparing failed");
}

/// A gather whose future is gone before a preparing thread takes it up is never started: no job
/// reaches the engine, and the totals count it (dropped, so not failed).
#[test]
fn prepare_gather_dropped_before_its_turn_is_not_started() {
    let (engine, table) = table();
    engine.set_gate(false);
    // Four gathers ahead of it hold every preparing thread (there are at most four) in the
    // engine's submit, so the fifth waits in the queue until the gate opens.
    let held: Vec<_> = (0..4).map(|_| table.gather(&ids(PREPARE_ELSEWHERE)).unwrap()).collect();
    drop(table.gather(&ids(PREPARE_ELSEWHERE)).unwrap());
    engine.set_gate(true);
    for fut in held {
        futures::executor::block_on(fut).unwrap();
    }
    eventually(|| table.stats().gathers == 5);
    let totals = table.stats();
    assert_eq!((totals.gathers, totals.failed), (5, 0));
    assert_eq!(totals.requested, 5 * PREPARE_ELSEWHERE as u64);
    assert_eq!(engine.seen().len(), 4, "the dropped gather never reached the engine");
}

/// A gather's own deadline replaces the source's timeout while it is prepared, as after: here
/// the source's 20 ms pass during the preparation and the gather still returns its rows.
#[test]
fn prepare_own_deadline_replaces_the_source_timeout() {
    let (engine, table) = table();
    let table = table.with_timeout(Duration::from_millis(20));
    engine.set_gate(false);
    let big = ids(PREPARE_ELSEWHERE);
    let fut = table.gather(&big).unwrap().with_deadline(Instant::now() + Duration::from_secs(3600));
    std::thread::sleep(Duration::from_millis(100));
    engine.set_gate(true);
    let got = futures::executor::block_on(fut).unwrap();
    assert_eq!(&got[..], &expected(&big)[..]);
}
