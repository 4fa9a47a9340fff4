//! The uring backend runs the whole conformance suite: with registered staging, with plain
//! reads into unregistered staging, and with gathers split over two lanes.

use std::path::Path;

use eagerio_core::{conformance::Backend, fault::Hook, Result, Sink, SinkOptions, Source};
use eagerio_uring::{Fallback, Mode, UringEngine, UringOptions, UringWriter, UringWriterOptions};

struct Uring {
    opts: fn() -> UringOptions,
    mode: Mode,
}

impl Backend for Uring {
    type Engine = UringEngine;
    type Writer = UringWriter;

    async fn open(&self, path: &Path, hook: Option<Hook>) -> Result<Source<UringEngine>> {
        let src = UringEngine::open(path, UringOptions { hook, ..(self.opts)() }).await?;
        assert_eq!(src.engine().mode(), self.mode, "{:?}", src.engine().fallback_reason());
        Ok(src)
    }

    async fn create(&self, path: &Path, sink: SinkOptions, hook: Option<Hook>) -> Result<Sink<UringWriter>> {
        UringWriter::create(path, UringWriterOptions { sink, hook, ..Default::default() })
    }

    fn staging_full(&self, source: &Source<UringEngine>) -> bool {
        source.engine().staging_full()
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}

/// What default options give here: registration needs CAP_IPC_LOCK (root) or a memlock limit
/// above the lane's 8 MiB of staging.
fn registered_mode() -> Mode {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root || eagerio_uring::memlock_limit() > 8 << 20 {
        Mode::Registered
    } else {
        Mode::Unregistered
    }
}

/// The uring backend needs no runtime: the suite runs on `futures`' executor. Registered
/// staging needs RLIMIT_MEMLOCK of at least 8 MiB (root, or the default limit).
mod registered {
    eagerio_core::conformance_suite!(
        super::Uring { opts: || super::UringOptions::default(), mode: super::registered_mode() },
        super::block_on
    );
}

mod unregistered {
    eagerio_core::conformance_suite!(
        super::Uring {
            opts: || super::UringOptions { fallback: super::Fallback::Unregistered, ..Default::default() },
            mode: super::Mode::Unregistered,
        },
        super::block_on
    );
}

mod two_lanes_split {
    eagerio_core::conformance_suite!(
        super::Uring {
            opts: || super::UringOptions { lanes: 2, split_threshold: 2, depth: 8, ..Default::default() },
            mode: super::registered_mode(),
        },
        super::block_on
    );
}

/// The forced tokio fallback runs the suite too (inside a tokio runtime, which it needs).
mod tokio_fallback {
    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap().block_on(f)
    }
    eagerio_core::conformance_suite!(
        super::Uring {
            opts: || super::UringOptions { fallback: super::Fallback::Tokio, ..Default::default() },
            mode: super::Mode::Tokio,
        },
        block_on
    );
}
