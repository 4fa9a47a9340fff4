//! Reliability: real faults on the tokio backend: a file truncated while gathers run, a full
//! disk (an 8 MiB loop-mounted ext4, root only), a read-only file and filesystem for the sink,
//! and a file replaced under an open source. The checks live in `tests/support/real_faults.rs`.

mod common;
#[macro_use]
#[path = "../../../tests/support/real_faults.rs"]
mod real_faults;

use common::{block_on, fault_schedule, Tokio};

real_fault_tests!(Tokio::default(), block_on);
