//! Reliability: the shared randomized fault schedule (10,000 operations: gathers, writes,
//! flushes, syncs, with injected EIO/EINTR/EAGAIN/ENOSPC, short reads and writes, copy-out
//! panics) against the glommio backend, all on one `LocalExecutor`. The hook runs on the
//! executor thread when a read or write is queued and when a read is copied out.
//! `EAGERIO_SEED=<seed>` replays a schedule.

#[path = "../../../tests/support/fault_schedule.rs"]
mod fault_schedule;

use std::path::Path;

use eagerio_core::{conformance::Backend, fault::Hook, Result, Sink, SinkOptions, Source};
use eagerio_glommio::{GlommioEngine, GlommioOptions, GlommioWriter, WriterOptions};
use fault_schedule::{Config, FaultBackend};

struct Glommio;

impl Backend for Glommio {
    type Engine = GlommioEngine;
    type Writer = GlommioWriter;

    async fn open(&self, path: &Path, hook: Option<Hook>) -> Result<Source<GlommioEngine>> {
        GlommioEngine::open(path, GlommioOptions { hook, depth: 32, ..Default::default() }).await
    }

    async fn create(&self, path: &Path, sink: SinkOptions, hook: Option<Hook>) -> Result<Sink<GlommioWriter>> {
        GlommioWriter::create(path, WriterOptions { sink, hook, ..Default::default() }).await
    }

    /// No staging pool of its own (glommio allocates a DMA buffer per read): idle means every
    /// slot is free, no job is queued and no read future is alive.
    fn staging_full(&self, source: &Source<GlommioEngine>) -> bool {
        source.engine().is_idle()
    }
}

impl FaultBackend for Glommio {
    const NAME: &'static str = "glommio";

    async fn pause(&self) {
        glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
    }
}

#[test]
fn faults_random_schedule_10k_ops() {
    let rep = match eagerio_glommio::block_on(fault_schedule::run(&Glommio, Config::default())) {
        Ok(rep) => rep,
        Err(e) => {
            eprintln!("skipped: glommio cannot run here: {e}");
            return;
        }
    };
    assert!(rep.ops >= 10_000);
    assert!(rep.gathers_failed > 0 && rep.writes_failed > 0, "the schedule injected faults: {rep}");
}
