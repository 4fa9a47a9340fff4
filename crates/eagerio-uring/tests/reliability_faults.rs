//! Reliability: the shared randomized fault schedule (10,000 operations: gathers, writes,
//! flushes, syncs, with injected EIO/EINTR/EAGAIN/ENOSPC, short reads and writes, copy-out
//! panics) against the io_uring lanes. The hook is evaluated on the lane thread at each
//! completion. `EAGERIO_SEED=<seed>` replays a schedule.

mod common;

use common::{fault_schedule, fault_schedule::Config, Uring};
use std::sync::LazyLock;

use eagerio_uring::{Driver, DriverOptions, Mode, UringEngine, UringOptions};

/// A small depth (32 operations in flight on the lane), so the schedule's gathers and writes
/// queue behind one another on the one lane they share.
static DEPTH_32: LazyLock<Driver> = LazyLock::new(|| Driver::new(DriverOptions::default().depth(32)).unwrap());

const URING: Uring = Uring { opts: || UringOptions::default().driver(DEPTH_32.clone()), mode: None };

#[test]
fn faults_random_schedule_10k_ops() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mode = rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("probe");
        std::fs::write(&p, [0u8; 4096]).unwrap();
        UringEngine::open_blocking(&p, UringOptions::default()).unwrap().engine().mode()
    });
    eprintln!("uring mode here: {mode:?}");
    if mode == Mode::Tokio {
        eprintln!("io_uring is refused here: the schedule would test the tokio fallback, which has its own test");
        return;
    }
    // A watchdog turns a stalled gather into a failure instead of a hung test run.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rep = rt.block_on(fault_schedule::run(&URING, Config::default()));
        let _ = tx.send(rep);
    });
    let rep = match rx.recv_timeout(std::time::Duration::from_secs(300)) {
        Ok(rep) => rep,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("the schedule stalled for 300 s (see the seed and EAGERIO_TRACE=1 above): a gather never completed")
        }
        Err(e) => panic!("the schedule failed: {e}"),
    };
    assert!(rep.ops >= 10_000);
    assert!(rep.gathers_failed > 0 && rep.writes_failed > 0, "the schedule injected faults: {rep}");
}
