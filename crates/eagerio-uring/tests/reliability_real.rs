//! Reliability: real faults on the io_uring lanes (truncation mid-gather is in `faults.rs`): a full
//! disk (an 8 MiB loop-mounted ext4, root only), a read-only file and filesystem for the sink,
//! and a file replaced under an open source. The checks live in `tests/support/real_faults.rs`.

#[path = "../../../tests/support/fault_schedule.rs"]
mod fault_schedule;
#[path = "../../../tests/support/real_faults.rs"]
mod real_faults;

use std::path::Path;

use eagerio_core::{conformance::Backend, fault::Hook, Result, Sink, SinkOptions, Source};
use eagerio_uring::{UringEngine, UringOptions, UringWriter, UringWriterOptions};
use fault_schedule::FaultBackend;

struct Uring;

impl Backend for Uring {
    type Engine = UringEngine;
    type Writer = UringWriter;

    async fn open(&self, path: &Path, hook: Option<Hook>) -> Result<Source<UringEngine>> {
        UringEngine::open(path, UringOptions { hook, ..Default::default() }).await
    }

    async fn create(&self, path: &Path, sink: SinkOptions, hook: Option<Hook>) -> Result<Sink<UringWriter>> {
        UringWriter::create(path, UringWriterOptions { sink, hook, ..Default::default() })
    }

    fn staging_full(&self, source: &Source<UringEngine>) -> bool {
        source.engine().staging_full()
    }
}

impl FaultBackend for Uring {
    const NAME: &'static str = "uring";

    async fn pause(&self) {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap().block_on(f)
}

#[test]
fn real_disk_full_reports_enospc_and_keeps_acknowledged_writes() {
    block_on(real_faults::disk_full(&Uring));
}

#[test]
fn real_read_only_file_refuses_the_sink() {
    block_on(real_faults::read_only_sink(&Uring));
}

#[test]
fn real_read_only_filesystem_refuses_the_sink() {
    block_on(real_faults::read_only_filesystem(&Uring));
}

#[test]
fn real_file_replaced_under_open_source_reads_the_old_inode() {
    block_on(real_faults::replaced_under_open_source(&Uring));
}
