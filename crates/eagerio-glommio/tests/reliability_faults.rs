//! Reliability: the shared randomized fault schedule (10,000 operations: gathers, writes,
//! flushes, syncs, with injected EIO/EINTR/EAGAIN/ENOSPC, short reads and writes, copy-out
//! panics) against the glommio backend, all on one `LocalExecutor`. The hook runs on the
//! executor thread when a read or write is queued and when a read is copied out.
//! `EAGERIO_SEED=<seed>` replays a schedule.

mod common;

use common::{fault_schedule, fault_schedule::Config, Glommio};
use eagerio_glommio::GlommioOptions;

/// A small depth (32 reads in flight), so the schedule's gathers queue behind one another.
const GLOMMIO: Glommio = Glommio { opts: || GlommioOptions::default().depth(32) };

#[test]
fn faults_random_schedule_10k_ops() {
    let rep = common::block_on(fault_schedule::run(&GLOMMIO, Config::default()));
    assert!(rep.ops >= 10_000);
    assert!(rep.gathers_failed > 0 && rep.writes_failed > 0, "the schedule injected faults: {rep}");
}
