//! The tokio backend runs the whole conformance suite.

mod common;

use common::{block_on, Tokio};

eagerio_core::conformance_suite!(Tokio::default(), block_on);

/// A gather past its deadline while a worker is held in a read's hook (not in the suite: see
/// `deadline_slow_read_then_reuse`).
#[test]
fn deadline_slow_read_then_reuse() {
    block_on(eagerio_core::conformance::deadline_slow_read_then_reuse(&Tokio::default()));
}
