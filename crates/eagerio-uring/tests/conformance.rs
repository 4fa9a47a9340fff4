//! The uring backend runs the whole conformance suite: on the process-wide driver with
//! registered staging, on a driver reading into unregistered staging, and on a driver of two
//! lanes that splits gathers over both. Each driver is shared by every test of its module, which
//! run in parallel: tables (and sinks) of different tests share lanes, staging and file tables.

mod common;

use std::sync::LazyLock;

use common::{registered_mode, Uring};
use eagerio_uring::{Driver, DriverOptions, Fallback, Mode, UringOptions};

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}

static UNREGISTERED: LazyLock<Driver> =
    LazyLock::new(|| Driver::new(DriverOptions::default().register_buffers(false)).unwrap());

static TWO_LANES: LazyLock<Driver> = LazyLock::new(|| Driver::new(DriverOptions::default().lanes(2).depth(8)).unwrap());

/// The uring backend needs no runtime: the suite runs on `futures`' executor. The default
/// staging is sized to register within RLIMIT_MEMLOCK.
mod registered {
    eagerio_core::conformance_suite!(
        super::Uring { opts: || super::UringOptions::default(), mode: Some(super::registered_mode()) },
        super::block_on
    );
}

/// A gather past its deadline while the lane is held in a read's hook (not in the suite: see
/// `deadline_slow_read_then_reuse`), on the shared driver and on two lanes.
#[test]
fn deadline_slow_read_then_reuse() {
    let uring = Uring { opts: UringOptions::default, mode: Some(registered_mode()) };
    block_on(eagerio_core::conformance::deadline_slow_read_then_reuse(&uring));
    let two = || UringOptions::default().driver(TWO_LANES.clone()).split_threshold(2);
    let uring = Uring { opts: two, mode: Some(registered_mode()) };
    block_on(eagerio_core::conformance::deadline_slow_read_then_reuse(&uring));
}

mod unregistered {
    eagerio_core::conformance_suite!(
        super::Uring {
            opts: || super::UringOptions::default().driver(super::UNREGISTERED.clone()),
            mode: Some(super::Mode::Unregistered),
        },
        super::block_on
    );
}

mod two_lanes_split {
    eagerio_core::conformance_suite!(
        super::Uring {
            opts: || super::UringOptions::default().driver(super::TWO_LANES.clone()).split_threshold(2),
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
            opts: || super::UringOptions::default().fallback(super::Fallback::Tokio),
            mode: Some(super::Mode::Tokio),
        },
        block_on
    );
}
