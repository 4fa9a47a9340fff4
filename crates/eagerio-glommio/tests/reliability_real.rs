//! Reliability: real faults on the glommio backend: a file truncated while gathers run, a full
//! disk (an 8 MiB loop-mounted ext4, root only), a read-only file and filesystem for the sink,
//! and a file replaced under an open source. The checks live in `tests/support/real_faults.rs`.

#[path = "../../../tests/support/fault_schedule.rs"]
mod fault_schedule;
#[path = "../../../tests/support/real_faults.rs"]
mod real_faults;

use std::path::Path;

use eagerio_core::{conformance::Backend, fault::Hook, Result, Sink, SinkOptions, Source};
use eagerio_glommio::{GlommioEngine, GlommioOptions, GlommioWriter, WriterOptions};
use fault_schedule::FaultBackend;

struct Glommio;

impl Backend for Glommio {
    type Engine = GlommioEngine;
    type Writer = GlommioWriter;

    async fn open(&self, path: &Path, hook: Option<Hook>) -> Result<Source<GlommioEngine>> {
        GlommioEngine::open(path, GlommioOptions { hook, ..Default::default() }).await
    }

    async fn create(&self, path: &Path, sink: SinkOptions, hook: Option<Hook>) -> Result<Sink<GlommioWriter>> {
        GlommioWriter::create(path, WriterOptions { sink, hook, ..Default::default() }).await
    }

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

fn block_on<F: std::future::Future>(f: F) {
    if let Err(e) = eagerio_glommio::block_on(f) {
        eprintln!("skipped: glommio cannot run here: {e}");
    }
}

#[test]
fn real_truncated_while_gathers_run() {
    block_on(real_faults::truncated_while_gathers_run(&Glommio));
}

#[test]
fn real_disk_full_reports_enospc_and_keeps_acknowledged_writes() {
    block_on(real_faults::disk_full(&Glommio));
}

#[test]
fn real_read_only_file_refuses_the_sink() {
    block_on(real_faults::read_only_sink(&Glommio));
}

#[test]
fn real_read_only_filesystem_refuses_the_sink() {
    block_on(real_faults::read_only_filesystem(&Glommio));
}

#[test]
fn real_file_replaced_under_open_source_reads_the_old_inode() {
    block_on(real_faults::replaced_under_open_source(&Glommio));
}
