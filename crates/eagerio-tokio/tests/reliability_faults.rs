//! Reliability: the shared randomized fault schedule (10,000 operations: gathers, writes,
//! flushes, syncs, with injected EIO/EINTR/EAGAIN/ENOSPC, short reads and writes, copy-out
//! panics) against the tokio backend. `EAGERIO_SEED=<seed>` replays a schedule.

mod common;

use common::{fault_schedule, fault_schedule::Config, Tokio};
use eagerio_tokio::TokioOptions;

/// A small depth (16 reads in flight), so the schedule's gathers queue behind one another.
const TOKIO: Tokio = Tokio { opts: || TokioOptions::default().depth(16) };

#[test]
fn faults_random_schedule_10k_ops() {
    let rep = common::block_on(fault_schedule::run(&TOKIO, Config::default()));
    assert!(rep.ops >= 10_000);
    assert!(rep.gathers_failed > 0 && rep.writes_failed > 0, "the schedule injected faults: {rep}");
}
