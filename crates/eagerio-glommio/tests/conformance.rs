//! The glommio backend runs the whole conformance suite, each check on a fresh `LocalExecutor`.

use std::path::Path;

use eagerio_core::{conformance::Backend, fault::Hook, Result, Sink, SinkOptions, Source};
use eagerio_glommio::{GlommioEngine, GlommioOptions, GlommioWriter, WriterOptions};

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

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    eagerio_glommio::block_on(f).expect("glommio executor")
}

eagerio_core::conformance_suite!(Glommio, block_on);
