//! The tokio backend runs the whole conformance suite.

mod common;

use common::{block_on, Tokio};

eagerio_core::conformance_suite!(Tokio::default(), block_on);
