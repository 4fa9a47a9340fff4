//! The uring backend runs the whole conformance suite: with registered staging, with plain
//! reads into unregistered staging, and with gathers split over two lanes.

mod common;

use common::{registered_mode, Uring};
use eagerio_uring::{Fallback, Mode, UringOptions};

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}

/// The uring backend needs no runtime: the suite runs on `futures`' executor. Registered
/// staging needs RLIMIT_MEMLOCK of at least 8 MiB (root, or the default limit).
mod registered {
    eagerio_core::conformance_suite!(
        super::Uring { opts: || super::UringOptions::default(), mode: Some(super::registered_mode()) },
        super::block_on
    );
}

mod unregistered {
    eagerio_core::conformance_suite!(
        super::Uring {
            opts: || super::UringOptions { fallback: super::Fallback::Unregistered, ..Default::default() },
            mode: Some(super::Mode::Unregistered),
        },
        super::block_on
    );
}

mod two_lanes_split {
    eagerio_core::conformance_suite!(
        super::Uring {
            opts: || super::UringOptions { lanes: 2, split_threshold: 2, depth: 8, ..Default::default() },
            mode: Some(super::registered_mode()),
        },
        super::block_on
    );
}

/// The forced tokio fallback runs the suite too (inside a tokio runtime, which it needs).
mod tokio_fallback {
    use super::common::tokio_block_on as block_on;
    eagerio_core::conformance_suite!(
        super::Uring {
            opts: || super::UringOptions { fallback: super::Fallback::Tokio, ..Default::default() },
            mode: Some(super::Mode::Tokio),
        },
        block_on
    );
}
