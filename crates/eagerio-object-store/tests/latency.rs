//! Injected latency through object_store's `ThrottledStore`: the GETs of a gather start at call
//! time, run concurrently, and one request is issued per planned extent.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use eagerio_core::RowLayout;
use eagerio_object_store::{ObjectStoreEngine, ObjectStoreOptions};
use object_store::{
    memory::InMemory,
    path::Path,
    throttle::{ThrottleConfig, ThrottledStore},
    ObjectStore, ObjectStoreExt, PutPayload,
};

#[test]
fn throttled_gather_starts_at_call_time_and_runs_concurrently() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let row = 4096usize;
        let file: Vec<u8> = (0..row * 1000).map(|i| (i * 7 % 251) as u8).collect();
        let mem = InMemory::new();
        let loc = Path::from("t.bin");
        mem.put(&loc, PutPayload::from(file.clone())).await.unwrap();
        let latency = Duration::from_millis(20);
        let cfg = ThrottleConfig { wait_get_per_call: latency, ..Default::default() };
        let store: Arc<dyn ObjectStore> = Arc::new(ThrottledStore::new(mem, cfg));
        let opts = ObjectStoreOptions::default().depth(50).max_gap(0);
        let table = ObjectStoreEngine::with_len(store, loc, file.len() as u64, opts)
            .unwrap()
            .rows(RowLayout { base: 0, row_size: row as u64, rows: None })
            .unwrap();
        // 200 rows, 5 apart: 200 extents with no gap joining.
        let ids: Vec<u64> = (0..200u64).rev().map(|i| i * 5).collect();

        let t0 = Instant::now();
        let fut = table.gather(&ids).unwrap();
        // Not polled: the first wave of GETs must already be in flight.
        tokio::time::sleep(latency * 3).await;
        let engine = table.source().engine();
        assert!(engine.requests() >= 50, "only {} GETs started without polling", engine.requests());
        let got = fut.await.unwrap();
        let elapsed = t0.elapsed();

        let want: Vec<u8> = ids.iter().flat_map(|&r| file[r as usize * row..(r as usize + 1) * row].to_vec()).collect();
        assert_eq!(&got[..], &want[..]);
        assert_eq!(engine.requests(), 200);
        assert_eq!(engine.bytes_fetched(), 200 * row as u64);
        let s = table.stats();
        assert_eq!((s.reads, s.bytes_read), (200, 200 * row as u64));
        // 200 requests of 20 ms: 4 s one at a time, 80 ms at 50 in flight.
        assert!(elapsed < Duration::from_millis(1500), "{elapsed:?}: the GETs did not overlap");
        assert_eq!(engine.workers(), 0);
    });
}

/// With 20 ms per GET and 10 ns per byte (100 MB/s per stream), the tuned gap settles near the
/// bytes one request's latency could carry (2 MB), and the next gather is planned with it.
#[test]
fn tuned_gap_follows_latency_times_bandwidth() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let file: Vec<u8> = (0..64usize << 20).map(|i| (i * 13 % 251) as u8).collect();
        let mem = InMemory::new();
        let loc = Path::from("t.bin");
        mem.put(&loc, PutPayload::from(file.clone())).await.unwrap();
        let cfg = ThrottleConfig {
            wait_get_per_call: Duration::from_millis(20),
            wait_get_per_byte: Duration::from_nanos(10),
            ..Default::default()
        };
        let store: Arc<dyn ObjectStore> = Arc::new(ThrottledStore::new(mem, cfg));
        let opts = ObjectStoreOptions::default().max_gap(0).max_read(1 << 20);
        let table = ObjectStoreEngine::with_len(store, loc, file.len() as u64, opts)
            .unwrap()
            .rows(RowLayout { base: 0, row_size: 4096, rows: None })
            .unwrap();
        let engine = table.source().engine().clone();
        assert_eq!(engine.tuned_gap(), None, "nothing measured yet");
        assert_eq!(table.source().plan_options().max_gap, 0, "the starting gap is the configured one");
        // GETs of differing sizes: single rows, and runs of rows cut at 1 MiB.
        let mut ids: Vec<u64> = (0..40u64).map(|i| i * 300).collect();
        ids.extend((0..10u64).flat_map(|k| (0..(k + 1) * 25).map(move |r| 13_000 + k * 300 + r)));
        let got = table.gather(&ids).unwrap().await.unwrap();
        let want: Vec<u8> =
            ids.iter().flat_map(|&r| file[r as usize * 4096..(r as usize + 1) * 4096].to_vec()).collect();
        assert_eq!(&got[..], &want[..]);
        let gap = engine.tuned_gap().expect("enough GETs of differing sizes were measured");
        // Timer granularity adds to the latency (tokio sleeps round up to the millisecond).
        assert!((1_000_000..=8_000_000).contains(&gap), "tuned gap {gap}, expected about 2 MB");
        assert_eq!(table.source().plan_options().max_gap, gap, "the next plan uses the tuned gap");
    });
}
