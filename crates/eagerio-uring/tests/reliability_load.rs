//! Reliability: load on the io_uring lanes: 8 tasks x 1,000 gathers on one source with random
//! timeouts (`tests/support/load.rs`): bytes right, staging full after, RSS bounded, p50/p99.

#[path = "../../../tests/support/fault_schedule.rs"]
mod fault_schedule;
#[path = "../../../tests/support/load.rs"]
mod load;

use std::sync::Arc;

use eagerio_core::RowLayout;
use eagerio_uring::{UringEngine, UringOptions};
use fault_schedule::{seed, Rng};

#[test]
fn load_eight_tasks_thousand_gathers_one_source() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let mut rng = Rng::new(seed("uring load table"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        let data = rng.bytes(4096 * 2048);
        std::fs::write(&path, &data).unwrap();
        eagerio_core::sys::evict(&path).unwrap();
        let opts = UringOptions::default().adaptive(false);
        let t =
            UringEngine::open_rows_blocking(&path, RowLayout { base: 0, row_size: 4096, rows: None }, opts).unwrap();
        let engine = t.source().engine().clone();
        load::run("uring", t, Arc::new(data), move || engine.staging_full()).await;
    });
}
