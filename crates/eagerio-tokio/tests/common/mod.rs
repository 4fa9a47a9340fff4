//! The tokio backend as the shared suites see it: the conformance suite (`Backend`) and the
//! reliability schedules (`FaultBackend`). One copy for every test binary of this crate.

#![allow(dead_code)] // each test binary uses its own part of this module

#[path = "../../../../tests/support/fault_schedule.rs"]
pub mod fault_schedule;

use std::path::Path;

use eagerio_core::{conformance::Backend, Result, Sink, SinkOptions, Source};
use eagerio_tokio::{TokioEngine, TokioOptions, TokioWriter, WriterOptions};
use fault_schedule::FaultBackend;

/// Opens sources with `opts()`.
pub struct Tokio {
    pub opts: fn() -> TokioOptions,
}

impl Default for Tokio {
    fn default() -> Self {
        Tokio { opts: TokioOptions::default }
    }
}

impl Backend for Tokio {
    type Engine = TokioEngine;
    type Writer = TokioWriter;

    async fn open(&self, path: &Path) -> Result<Source<TokioEngine>> {
        TokioEngine::open(path, (self.opts)()).await
    }

    async fn create(&self, path: &Path, sink: SinkOptions) -> Result<Sink<TokioWriter>> {
        TokioWriter::create(path, WriterOptions::default().sink(sink)).await
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

/// A fresh two-worker runtime per call, as a service would run.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap().block_on(f)
}
