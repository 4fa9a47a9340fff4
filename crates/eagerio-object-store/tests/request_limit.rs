//! The request cap is the engine's (or a shared `RequestLimit`'s), not each gather's: 20 gathers
//! of 40 extents at once on an engine of `concurrency` 8 keep at most 8 GETs at the store, and
//! two engines sharing one limit keep at most its 8 between them. Each GET sleeps a little at the
//! store, so GETs that may overlap do.

use std::{
    sync::{atomic::Ordering, Arc},
    time::Duration,
};

use eagerio_core::{RowLayout, RowTable};
use eagerio_object_store::{ObjectStoreEngine, ObjectStoreOptions, RequestLimit};
use object_store::{memory::InMemory, path::Path, ObjectStore, ObjectStoreExt, PutPayload};

#[path = "support/counting.rs"]
mod counting;

use counting::Counting;

const ROW: usize = 1024;
const ROWS: usize = 2000;

async fn store() -> (Arc<Counting>, Vec<u8>) {
    let data: Vec<u8> = (0..ROW * ROWS).map(|i| (i * 13 % 251) as u8).collect();
    let peak = Arc::new(Counting::new(Arc::new(InMemory::new()), Duration::from_millis(2)));
    for name in ["a.bin", "b.bin"] {
        peak.put(&Path::from(name), PutPayload::from(data.clone())).await.unwrap();
    }
    (peak, data)
}

fn table(store: &Arc<Counting>, name: &str, opts: ObjectStoreOptions) -> RowTable<ObjectStoreEngine> {
    let store: Arc<dyn ObjectStore> = store.clone();
    let len = (ROW * ROWS) as u64;
    let source = ObjectStoreEngine::with_len(store, Path::from(name), len, opts).unwrap();
    source.rows(RowLayout { base: 0, row_size: ROW as u64, rows: None }).unwrap()
}

/// 20 gathers of 40 rows 3 apart (40 extents each: the gap bound joins none), on `tables` in
/// turn, all started before any is awaited; every result checked.
async fn run(tables: &[RowTable<ObjectStoreEngine>], data: &[u8]) {
    let batches: Vec<Vec<u64>> =
        (0..20u64).map(|g| (0..40u64).map(|k| (g * 97 + k * 3) % ROWS as u64).collect()).collect();
    let gathers: Vec<_> =
        batches.iter().enumerate().map(|(g, ids)| tables[g % tables.len()].gather(ids).unwrap()).collect();
    for (ids, gather) in batches.iter().zip(gathers) {
        let got = gather.await.unwrap();
        for (k, &id) in ids.iter().enumerate() {
            assert_eq!(&got[k * ROW..(k + 1) * ROW], &data[id as usize * ROW..(id as usize + 1) * ROW]);
        }
    }
}

fn opts(depth: usize, limit: Option<RequestLimit>) -> ObjectStoreOptions {
    let opts = ObjectStoreOptions::default().depth(depth).max_gap(0).tune_gap(false);
    match limit {
        Some(limit) => opts.limit(limit),
        None => opts,
    }
}

#[test]
fn request_limit_bounds_gets_across_gathers() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let (peak, data) = store().await;
        let t = table(&peak, "a.bin", opts(8, None));
        run(std::slice::from_ref(&t), &data).await;
        let most = peak.peak.load(Ordering::SeqCst);
        eprintln!("20 gathers at concurrency 8: at most {most} GETs at the store");
        assert!(most <= 8, "{most} GETs in flight: the cap is per gather, not per engine");
        assert_eq!(t.source().engine().requests(), 800);
    });
}

#[test]
fn request_limit_shared_by_two_engines() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let (peak, data) = store().await;
        let limit = RequestLimit::new(8).unwrap();
        let a = table(&peak, "a.bin", opts(64, Some(limit.clone())));
        let b = table(&peak, "b.bin", opts(64, Some(limit.clone())));
        run(&[a, b], &data).await;
        let most = peak.peak.load(Ordering::SeqCst);
        eprintln!("20 gathers on two engines sharing a limit of 8: at most {most} GETs at the store");
        assert!(most <= 8, "{most} GETs in flight: the shared limit was not shared");
        assert_eq!(limit.in_flight(), 0);
    });
}

#[test]
fn request_limit_zero_is_refused() {
    let e = RequestLimit::new(0).unwrap_err();
    assert!(e.to_string().contains("ObjectStoreOptions::depth"), "{e}");
}
