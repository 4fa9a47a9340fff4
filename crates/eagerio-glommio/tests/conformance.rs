//! The glommio backend runs the whole conformance suite, each check on a fresh `LocalExecutor`.

mod common;

use common::{block_on, Glommio};

eagerio_core::conformance_suite!(Glommio::default(), block_on);
