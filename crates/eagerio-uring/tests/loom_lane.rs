//! Loom models of the io_uring lane's state machine (`eagerio_uring::lane::LaneCore`), the very
//! code the lane thread runs, over a simulated ring whose "kernel" threads take submitted reads
//! in any order, write into the staging slot the read names, and post the completion.
//!
//! The ring takes `ASYNC_CANCEL` as io_uring does at submission: a read no kernel thread has
//! taken yet completes with `ECANCELED` (its slot unwritten), any other is left to finish.
//!
//! Every kernel write goes through the slot's loom-tracked cell, and so does the lane's
//! copy-out, so a slot handed to a new read (or freed) while the kernel still writes it, or a
//! slot given to two reads at once, is reported by loom as a concurrent access.
//!
//! Run with:
//! `RUSTFLAGS="--cfg eagerio_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
//!  cargo test -p eagerio-uring --release --test loom_lane`
#![cfg(eagerio_loom)]

use std::{collections::VecDeque, io, ops::Range, path::PathBuf, sync::Arc};

use bytes::Bytes;
use eagerio_core::{
    backend::{JobHandle, ReadEngine, Staging},
    fault::{Action, Hook, IoKind},
    loom::explore_bounded,
    Error, FileInfo, Source,
};
use eagerio_uring::lane::{FileRef, Inbox, LaneConfig, LaneCore, LaneFile, Notify, Ring, Sqe, Work};
use loom::sync::{Condvar, Mutex};

const SLOT: usize = 4096;
const FILE_LEN: usize = 4 * SLOT;
const FIRST: &[Range<u64>] = &[10..110, 5000..5100];
const SECOND: &[Range<u64>] = &[200..300, 13000..13100];

/// What the simulated kernel does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kernel {
    /// Write the slot, then post the completion (a correct kernel).
    Normal,
    /// Fail the read at this file offset with EIO (after writing the slot).
    EioAt(u64),
    /// BROKEN: post the completion first and write the slot after. Only the negative model uses
    /// it: the lane then copies out and frees a slot the kernel still writes.
    LateWrite,
}

struct Read {
    tag: u64,
    slot: usize,
    len: usize,
    offset: u64,
}

#[derive(Default)]
struct SimState {
    submitted: VecDeque<Read>,
    /// Reads submitted so far.
    issued: usize,
    completions: VecDeque<(u64, i32)>,
    woken: bool,
    stop: bool,
}

struct Sim {
    state: Mutex<SimState>,
    cv: Condvar,
}

struct SimRing {
    sim: Arc<Sim>,
    queued: Vec<Read>,
    /// Queued `ASYNC_CANCEL`s: (its tag, the target's).
    cancels: Vec<(u64, u64)>,
}

impl Ring for SimRing {
    fn push(&mut self, sqe: Sqe) -> bool {
        match sqe {
            Sqe::Read { tag, slot, len, offset, .. } => self.queued.push(Read { tag, slot, len: len as usize, offset }),
            Sqe::Cancel { tag, target } => self.cancels.push((tag, target)),
            other => panic!("the model issues reads and cancels only, got {other:?}"),
        }
        true
    }

    fn submit_and_wait(&mut self, wait: bool) -> io::Result<()> {
        let mut st = self.sim.state.lock().unwrap();
        st.issued += self.queued.len();
        st.submitted.extend(self.queued.drain(..));
        for (tag, target) in self.cancels.drain(..) {
            let res = match st.submitted.iter().position(|r| r.tag == target) {
                Some(i) => {
                    st.submitted.remove(i);
                    st.completions.push_back((target, -libc::ECANCELED));
                    0
                }
                None => -libc::ENOENT,
            };
            st.completions.push_back((tag, res));
        }
        self.sim.cv.notify_all();
        while wait && st.completions.is_empty() && !st.woken {
            st = self.sim.cv.wait(st).unwrap();
        }
        st.woken = false;
        Ok(())
    }

    fn can_cancel(&self) -> bool {
        true
    }

    fn reap(&mut self, f: &mut dyn FnMut(u64, i32)) {
        let done: Vec<_> = self.sim.state.lock().unwrap().completions.drain(..).collect();
        for (tag, res) in done {
            f(tag, res);
        }
    }
}

struct SimNotify(Arc<Sim>);

impl Notify for SimNotify {
    fn notify(&self) {
        self.0.state.lock().unwrap().woken = true;
        self.0.cv.notify_all();
    }
}

/// The kernel thread: takes submitted reads newest first, so completions come out of order.
fn kernel(sim: Arc<Sim>, staging: Staging, data: Arc<Vec<u8>>, mode: Kernel) {
    loop {
        let read = {
            let mut st = sim.state.lock().unwrap();
            loop {
                // Newest first: reads submitted together complete in reverse order.
                if let Some(r) = st.submitted.pop_back() {
                    break r;
                }
                if st.stop {
                    return;
                }
                st = sim.cv.wait(st).unwrap();
            }
        };
        let start = (read.offset as usize).min(data.len());
        let n = read.len.min(data.len() - start);
        let write = || {
            // SAFETY: the lane keeps the slot's lease in its in-flight table until it reaps this
            // read's completion, posted below; a lane that broke this would race here.
            unsafe { staging.access_as_owner(read.slot, |buf| buf[..n].copy_from_slice(&data[start..start + n])) }
        };
        if mode != Kernel::LateWrite {
            write();
        }
        let res = if mode == Kernel::EioAt(read.offset) { -libc::EIO } else { n as i32 };
        sim.state.lock().unwrap().completions.push_back((read.tag, res));
        sim.cv.notify_all();
        if mode == Kernel::LateWrite {
            write();
        }
    }
}

/// The user side of the model's lane: `submit` hands the job to the inbox.
struct LaneEngine {
    info: FileInfo,
    inbox: Arc<Inbox>,
    file: Arc<LaneFile>,
}

impl ReadEngine for LaneEngine {
    fn info(&self) -> &FileInfo {
        &self.info
    }

    fn submit(&self, job: JobHandle) {
        self.inbox.push(Work::Gather(job, self.file.clone()));
    }
}

struct Model {
    source: Source<LaneEngine>,
    staging: Staging,
    sim: Arc<Sim>,
    threads: Vec<loom::thread::JoinHandle<()>>,
    data: Vec<u8>,
}

fn start(slots: usize, depth: usize, kernels: usize, mode: Kernel, hook: Option<Hook>) -> Model {
    let data: Vec<u8> = (0..FILE_LEN).map(|o| (o % 251) as u8).collect();
    let shared = Arc::new(data.clone());
    let staging = Staging::new(slots * SLOT, SLOT).unwrap();
    let sim = Arc::new(Sim { state: Mutex::new(SimState::default()), cv: Condvar::new() });
    let path = PathBuf::from("/loom/lane");
    let inbox = Arc::new(Inbox::new(Box::new(SimNotify(sim.clone()))));
    let file = Arc::new(LaneFile::new(FileRef { id: None, fd: -1 }, 1, path.clone(), hook));
    let mut threads = Vec::new();
    for _ in 0..kernels {
        let (sim, staging, data) = (sim.clone(), staging.clone(), shared.clone());
        threads.push(loom::thread::spawn(move || kernel(sim, staging, data, mode)));
    }
    let ring = SimRing { sim: sim.clone(), queued: Vec::new(), cancels: Vec::new() };
    let cfg = LaneConfig { depth, name: "loom-lane".into() };
    let (lane_inbox, lane_staging, lane_sim) = (inbox.clone(), staging.clone(), sim.clone());
    threads.push(loom::thread::spawn(move || {
        let mut lane = LaneCore::new(ring, lane_staging, lane_inbox, cfg);
        lane.run().unwrap();
        drop(lane);
        lane_sim.state.lock().unwrap().stop = true;
        lane_sim.cv.notify_all();
    }));
    let info = FileInfo { path, len: FILE_LEN as u64, align: 1, max_read: SLOT as u64 };
    let source = Source::new(LaneEngine { info, inbox, file }).with_max_gap(0);
    Model { source, staging, sim, threads, data }
}

impl Model {
    /// Waits until the lane has submitted `n` reads.
    fn wait_issued(&self, n: usize) {
        let mut st = self.sim.state.lock().unwrap();
        while st.issued < n {
            st = self.sim.cv.wait(st).unwrap();
        }
    }

    fn check(&self, ranges: &[Range<u64>], got: Vec<Bytes>) {
        for (r, b) in ranges.iter().zip(&got) {
            assert_eq!(&b[..], &self.data[r.start as usize..r.end as usize], "wrong bytes for {r:?}");
        }
    }

    /// Closes the lane, joins every thread, and checks every slot came back exactly once.
    fn finish(self) {
        let Model { source, staging, sim, threads, .. } = self;
        let file = source.engine().file.clone();
        source.engine().inbox.close();
        drop(source);
        for t in threads {
            t.join().unwrap();
        }
        assert!(sim.state.lock().unwrap().submitted.is_empty());
        assert!(staging.is_full(), "a slot leaked");
        assert_eq!(file.leased(), 0, "the file's count of leased slots is off");
        assert_eq!(staging.free_slots(), staging.slots());
    }
}

/// Keeps the injected copy-out panic (caught by the lane) from printing once per interleaving.
fn quiet_injected_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !info.to_string().contains("injected panic") {
            previous(info);
        }
    }));
}

/// Two reads in flight, completed out of order, then the next gather reusing the slots.
#[test]
fn out_of_order_completions_then_next_gather() {
    explore_bounded(2, || {
        let m = start(2, 2, 1, Kernel::Normal, None);
        let got = loom::future::block_on(m.source.gather_ranges(FIRST).unwrap()).unwrap();
        m.check(FIRST, got);
        let got = loom::future::block_on(m.source.gather_ranges(SECOND).unwrap()).unwrap();
        m.check(SECOND, got);
        m.finish();
    });
}

/// An EIO completion mid-gather: the gather fails naming the read, the other read's slot stays
/// owned until reaped, and the next gather (one slot, so it must reuse it) is correct.
#[test]
fn eio_mid_gather_then_next_gather() {
    explore_bounded(2, || {
        let m = start(1, 2, 1, Kernel::EioAt(5000), None);
        let e = loom::future::block_on(m.source.gather_ranges(FIRST).unwrap()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
        let got = loom::future::block_on(m.source.gather_ranges(&SECOND[..1]).unwrap()).unwrap();
        m.check(&SECOND[..1], got);
        m.finish();
    });
}

/// A panic while copying a read's rows out: caught on the lane, reported, slot released after
/// the copy-out; the lane goes on to serve the next gather.
#[test]
fn copy_out_panic_then_next_gather() {
    quiet_injected_panics();
    explore_bounded(2, || {
        let hook =
            Hook::new(|p| if p.kind == IoKind::CopyOut && p.offset == 10 { Action::Panic } else { Action::Proceed });
        let m = start(2, 2, 1, Kernel::Normal, Some(hook));
        let e = loom::future::block_on(m.source.gather_ranges(FIRST).unwrap()).unwrap_err();
        assert!(matches!(e, Error::Panicked { .. }), "{e}");
        let got = loom::future::block_on(m.source.gather_ranges(&SECOND[1..]).unwrap()).unwrap();
        m.check(&SECOND[1..], got);
        m.finish();
    });
}

/// The future dropped right after the call, reads possibly in flight: the next gather, which
/// contends for the single slot, is correct and nothing leaks. Depth 2 over one slot and two
/// kernel threads: a lane that gave a dropped gather's slot back before its completion would
/// have the next read written into it while the first is still being written, and loom would
/// see the two kernel writes race. Four model threads make this the largest model: it runs with
/// one preemption (a race needs none: loom reports two writes unordered by happens-before in
/// any interleaving that performs both), which keeps it to seconds instead of many minutes.
#[test]
fn dropped_future_then_next_gather() {
    explore_bounded(1, || {
        let m = start(1, 2, 2, Kernel::Normal, None);
        drop(m.source.gather_ranges(&FIRST[..1]).unwrap());
        let got = loom::future::block_on(m.source.gather_ranges(&SECOND[..1]).unwrap()).unwrap();
        m.check(&SECOND[..1], got);
        m.finish();
    });
}

/// A gather's deadline passes (set past, once its read is submitted) while the read may still
/// be queued to the kernel: the lane sends `ASYNC_CANCEL`, which either cancels the read (it
/// completes with `ECANCELED`, its slot never written) or finds it taken and lets it finish. The
/// future resolves with `TimedOut` either way without waiting for the read (or with the rows, if
/// the read finished first), and the next gather, which needs the one slot, gets it only after
/// that read's own completion, with the right bytes.
#[test]
fn cancel_races_the_completion_then_next_gather() {
    explore_bounded(2, || {
        let m = start(1, 2, 1, Kernel::Normal, None);
        let fut = m.source.gather_ranges(&FIRST[..1]).unwrap();
        m.wait_issued(1);
        let past = std::time::Instant::now() - std::time::Duration::from_secs(1);
        match loom::future::block_on(fut.with_deadline(past)) {
            Err(Error::TimedOut { unread: 1, requested: 1, .. }) => {}
            Ok(got) => m.check(&FIRST[..1], got),
            Err(e) => panic!("unexpected error: {e}"),
        }
        let got = loom::future::block_on(m.source.gather_ranges(&SECOND[..1]).unwrap()).unwrap();
        m.check(&SECOND[..1], got);
        m.finish();
    });
}

/// Negative control: a ring that posts a completion before its kernel finished writing the
/// slot. The lane copies out and frees the slot while it is still written, and loom reports it.
/// This shows the models above would catch a lane that reused a buffer the kernel owns.
#[test]
#[should_panic(expected = "Causality violation")]
fn late_kernel_write_is_caught() {
    explore_bounded(2, || {
        let m = start(1, 1, 1, Kernel::LateWrite, None);
        let got = loom::future::block_on(m.source.gather_ranges(&FIRST[..1]).unwrap()).unwrap();
        m.check(&FIRST[..1], got);
        m.finish();
    });
}
