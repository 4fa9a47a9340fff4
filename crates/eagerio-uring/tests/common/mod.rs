//! The io_uring lanes as the shared suites see them: the conformance suite (`Backend`) and the
//! reliability schedules (`FaultBackend`). One copy for every test binary of this crate.

#![allow(dead_code)] // each test binary uses its own part of this module

#[path = "../../../../tests/support/fault_schedule.rs"]
pub mod fault_schedule;

use std::path::Path;

use eagerio_core::{conformance::Backend, Result, Sink, SinkOptions, Source};
use eagerio_uring::{Mode, UringEngine, UringOptions, UringWriter, WriterOptions};
use fault_schedule::FaultBackend;

/// Opens sources with `opts()`; with `mode` set, every open asserts the
/// engine came up in that mode (so a silent fallback cannot pass as the mode under test).
pub struct Uring {
    pub opts: fn() -> UringOptions,
    pub mode: Option<Mode>,
}

impl Default for Uring {
    fn default() -> Self {
        Uring { opts: UringOptions::default, mode: None }
    }
}

impl Backend for Uring {
    type Engine = UringEngine;
    type Writer = UringWriter;

    async fn open(&self, path: &Path) -> Result<Source<UringEngine>> {
        let src = UringEngine::open(path, (self.opts)()).await?;
        if let Some(mode) = self.mode {
            assert_eq!(src.engine().mode(), mode, "{:?}", src.engine().fallback_reason());
        }
        Ok(src)
    }

    async fn create(&self, path: &Path, sink: SinkOptions) -> Result<Sink<UringWriter>> {
        // On the sources' driver: the sink shares its lanes with the tables.
        let opts = WriterOptions::default().sink(sink);
        let opts = match (self.opts)().driver {
            Some(driver) => opts.driver(driver),
            None => opts,
        };
        UringWriter::create(path, opts).await
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

/// What default options give here: the default staging is sized to register within the memlock
/// limit (at least one 64 KiB slot, which a limit under about 86 KiB cannot hold).
pub fn registered_mode() -> Mode {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root || eagerio_uring::memlock_limit() >= 128 << 10 {
        Mode::Registered
    } else {
        Mode::Unregistered
    }
}

/// A fresh two-worker tokio runtime per call (the tokio fallback and the schedule's pauses need
/// one; the lanes themselves run on any executor).
pub fn tokio_block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap().block_on(f)
}
