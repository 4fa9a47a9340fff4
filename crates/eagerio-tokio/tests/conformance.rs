//! The tokio backend runs the whole conformance suite.

use std::path::Path;

use eagerio_core::{conformance::Backend, fault::Hook, Result, Sink, SinkOptions, Source};
use eagerio_tokio::{TokioEngine, TokioOptions, TokioWriter, WriterOptions};

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

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap().block_on(f)
}

eagerio_core::conformance_suite!(Tokio, block_on);
