//! The user-facing gather traits: a `RowTable` behind `Arc<dyn GatherRows>`, and a row cache of a
//! user's own that answers hits with `GatherFuture::ready` and forwards only its misses to the
//! table underneath, merging with `GatherFuture::from_future`. Code written against the trait
//! cannot tell the two apart.
#![cfg(not(eagerio_loom))]

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use bytes::{Bytes, BytesMut};
use eagerio_core::{
    mem::{MemEngine, MemFile},
    Error, Gather, GatherFuture, GatherRows, Result, RowLayout, Source, SourceTotals,
};

const ROW: u64 = 64;
const ROWS: u64 = 100;

fn row_bytes(r: u64) -> Vec<u8> {
    (0..ROW).map(|i| (r * 7 + i) as u8).collect()
}

fn table() -> Arc<dyn GatherRows + Send + Sync> {
    let data: Vec<u8> = (0..ROWS).flat_map(row_bytes).collect();
    let engine = MemEngine::new(MemFile::new(data), "/mem/t.bin", 64 << 10).unwrap();
    Arc::new(Source::new(engine).rows(RowLayout { base: 0, row_size: ROW, rows: None }).unwrap())
}

/// Rows kept after their first read; a gather of only cached rows does no I/O.
struct Cache {
    inner: Arc<dyn GatherRows + Send + Sync>,
    rows: Arc<Mutex<HashMap<u64, Bytes>>>,
}

impl GatherRows for Cache {
    fn gather(&self, rows: &[u64]) -> Result<GatherFuture<Bytes>> {
        let cached = self.rows.lock().unwrap().clone();
        let misses: Vec<u64> = rows.iter().copied().filter(|r| !cached.contains_key(r)).collect();
        if misses.is_empty() {
            let mut out = BytesMut::new();
            rows.iter().for_each(|r| out.extend_from_slice(&cached[r]));
            return Ok(GatherFuture::ready(Ok(out.freeze())));
        }
        // The misses' reads start here, before this returns.
        let fetch = self.inner.gather(&misses)?;
        let (rows, store, size) = (rows.to_vec(), self.rows.clone(), self.row_size() as usize);
        Ok(GatherFuture::from_future(async move {
            let got = fetch.await?;
            let mut store = store.lock().unwrap();
            for (k, r) in misses.iter().enumerate() {
                store.insert(*r, got.slice(k * size..(k + 1) * size));
            }
            let mut out = BytesMut::new();
            rows.iter().for_each(|r| out.extend_from_slice(&store[r]));
            Ok(out.freeze())
        }))
    }

    fn row_size(&self) -> u64 {
        self.inner.row_size()
    }

    fn rows(&self) -> u64 {
        self.inner.rows()
    }

    fn totals(&self) -> SourceTotals {
        self.inner.totals()
    }
}

/// What a service does with any gatherer: one gather, checked row by row.
fn serve(g: &dyn GatherRows, rows: &[u64]) -> Result<()> {
    let got = futures::executor::block_on(g.gather(rows)?)?;
    assert_eq!(got.len() as u64, rows.len() as u64 * g.row_size());
    for (k, &r) in rows.iter().enumerate() {
        assert_eq!(&got[k * ROW as usize..(k + 1) * ROW as usize], &row_bytes(r)[..], "row {r}");
    }
    Ok(())
}

#[test]
fn gather_dyn_table_and_cache_serve_the_same_rows() {
    let plain = table();
    let cache = Cache { inner: table(), rows: Arc::default() };
    let gatherers: [&dyn GatherRows; 2] = [&*plain, &cache];
    for g in gatherers {
        serve(g, &[5, 99, 5, 0]).unwrap();
        serve(g, &[0, 5]).unwrap();
        serve(g, &[7, 5]).unwrap();
    }
    // The cache read each row once: 4 rows (5, 99, 0, then 7), in 2 gathers of the table.
    assert_eq!(cache.totals().gathers, 2);
    assert_eq!(plain.totals().gathers, 3);
}

#[test]
fn gather_dyn_ready_future_is_settled_and_yields_once() {
    let f = GatherFuture::ready(Ok(Bytes::from_static(b"row")));
    assert!(f.is_settled());
    assert_eq!(f.stats().reads_issued, 0);
    assert_eq!(&futures::executor::block_on(f).unwrap()[..], b"row");
    let e = futures::executor::block_on(GatherFuture::<Bytes>::ready(Err(Error::invalid_option("x", "y"))));
    assert!(e.is_err());
}

#[test]
fn gather_dyn_bad_rows_are_refused_before_any_io() {
    let t = table();
    let e = t.gather(&[1, ROWS]).map(|_| ()).unwrap_err();
    assert!(matches!(e, Error::RowOutOfRange { row: ROWS, rows: ROWS, .. }), "{e}");
    assert_eq!(t.totals().gathers, 0);
    // The byte-range face of a table, through the trait object too.
    let data: Vec<u8> = (0..ROWS).flat_map(row_bytes).collect();
    let engine = MemEngine::new(MemFile::new(data.clone()), "/mem/t.bin", 64 << 10).unwrap();
    let ranges: Arc<dyn Gather + Send + Sync> = Arc::new(Source::new(engine));
    let got = futures::executor::block_on(ranges.gather_ranges(&[10..20, 0..5]).unwrap()).unwrap();
    assert_eq!((&got[0][..], &got[1][..]), (&data[10..20], &data[0..5]));
    assert_eq!(ranges.info().len, data.len() as u64);
    assert!(ranges.gather_ranges(&[0..1, 5..5]).is_err());
}
