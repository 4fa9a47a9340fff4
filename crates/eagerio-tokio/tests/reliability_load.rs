//! Reliability: load on the tokio backend: 8 tasks x 1,000 gathers on one source with random
//! timeouts (`tests/support/load.rs`): bytes right, staging full after, RSS bounded, p50/p99.

#[path = "../../../tests/support/fault_schedule.rs"]
mod fault_schedule;
#[path = "../../../tests/support/load.rs"]
mod load;

use std::sync::Arc;

use eagerio_core::RowLayout;
use eagerio_tokio::{TokioEngine, TokioOptions};
use fault_schedule::{seed, Rng};

const ROW: u64 = 4096;

#[test]
fn load_eight_tasks_thousand_gathers_one_source() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let mut rng = Rng::new(seed("tokio load table"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        let file = Arc::new(rng.bytes((ROW * 2048) as usize));
        std::fs::write(&path, &file[..]).unwrap();
        eagerio_core::sys::evict(&path).unwrap();
        let opts = TokioOptions::default().adaptive(false);
        let t = TokioEngine::open(&path, opts)
            .await
            .unwrap()
            .rows(RowLayout { base: 0, row_size: ROW, rows: None })
            .unwrap();
        let engine = t.source().engine().clone();
        load::run("tokio", t, file, move || engine.staging().is_full()).await;
    });
}
