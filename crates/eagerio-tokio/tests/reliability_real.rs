//! Reliability: real faults on the tokio backend: a file truncated while gathers run, a full
//! disk (an 8 MiB loop-mounted ext4, root only), a read-only file and filesystem for the sink,
//! and a file replaced under an open source. The checks live in `tests/support/real_faults.rs`.

#[path = "../../../tests/support/fault_schedule.rs"]
mod fault_schedule;
#[path = "../../../tests/support/real_faults.rs"]
mod real_faults;

use std::path::Path;

use eagerio_core::{conformance::Backend, fault::Hook, Result, Sink, SinkOptions, Source};
use eagerio_tokio::{TokioEngine, TokioOptions, TokioWriter, WriterOptions};
use fault_schedule::FaultBackend;

struct Tokio;

impl Backend for Tokio {
    type Engine = TokioEngine;
    type Writer = TokioWriter;

    async fn open(&self, path: &Path, hook: Option<Hook>) -> Result<Source<TokioEngine>> {
        TokioEngine::open(path, TokioOptions { hook, ..Default::default() }).await
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

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap().block_on(f)
}

#[test]
fn real_truncated_while_gathers_run() {
    block_on(real_faults::truncated_while_gathers_run(&Tokio));
}

#[test]
fn real_disk_full_reports_enospc_and_keeps_acknowledged_writes() {
    block_on(real_faults::disk_full(&Tokio));
}

#[test]
fn real_read_only_file_refuses_the_sink() {
    block_on(real_faults::read_only_sink(&Tokio));
}

#[test]
fn real_read_only_filesystem_refuses_the_sink() {
    block_on(real_faults::read_only_filesystem(&Tokio));
}

#[test]
fn real_file_replaced_under_open_source_reads_the_old_inode() {
    block_on(real_faults::replaced_under_open_source(&Tokio));
}
