//! Reliability: the shared randomized fault schedule (10,000 operations: gathers, writes,
//! flushes, syncs, with injected EIO/EINTR/EAGAIN/ENOSPC, short reads and writes, copy-out
//! panics) against the tokio backend. `EAGERIO_SEED=<seed>` replays a schedule.

#[path = "../../../tests/support/fault_schedule.rs"]
mod fault_schedule;

use std::path::Path;

use eagerio_core::{conformance::Backend, fault::Hook, Result, Sink, SinkOptions, Source};
use eagerio_tokio::{TokioEngine, TokioOptions, TokioWriter, WriterOptions};
use fault_schedule::{Config, FaultBackend};

struct Tokio;

impl Backend for Tokio {
    type Engine = TokioEngine;
    type Writer = TokioWriter;

    async fn open(&self, path: &Path, hook: Option<Hook>) -> Result<Source<TokioEngine>> {
        TokioEngine::open(path, TokioOptions { hook, depth: 16, ..Default::default() }).await
    }

    async fn create(&self, path: &Path, sink: SinkOptions, hook: Option<Hook>) -> Result<Sink<TokioWriter>> {
        TokioWriter::create(path, WriterOptions { sink, hook, ..Default::default() }).await
    }

    fn staging_full(&self, source: &Source<TokioEngine>) -> bool {
        source.engine().staging().is_full()
    }
}

impl FaultBackend for Tokio {
    const NAME: &'static str = "tokio";

    async fn pause(&self) {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}

#[test]
fn faults_random_schedule_10k_ops() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let rep = rt.block_on(fault_schedule::run(&Tokio, Config::default()));
    assert!(rep.ops >= 10_000);
    assert!(rep.gathers_failed > 0 && rep.writes_failed > 0, "the schedule injected faults: {rep}");
}
