//! The split of a sink that writes whole aligned blocks through `O_DIRECT` (tokio's and
//! io_uring's): an aligned block from an aligned buffer leaves nothing in the page cache (and the
//! closing `fdatasync` nothing to write back); an unaligned length, offset or buffer goes through
//! the page cache. Either way the file holds what was written. Each backend's
//! `tests/sink_split.rs` runs [`aligned_blocks_go_direct_and_the_rest_buffered`] on its sink.

use std::path::Path;

use bytes::Bytes;
use eagerio_core::{sys, DataSink};

/// `len` bytes of `fill` whose first byte is at an address `skew` past a multiple of `align`.
fn buffer(len: usize, align: usize, skew: usize, fill: u8) -> Bytes {
    let mut v = vec![fill; len + 2 * align];
    let start = v.as_ptr().align_offset(align) + skew;
    v.truncate(start + len);
    Bytes::from(v).slice(start..)
}

fn cached(path: &Path) -> u64 {
    sys::resident_bytes(&std::fs::File::open(path).unwrap()).unwrap()
}

/// `sink` writes the fresh file `path`, going direct at alignment `a`.
pub async fn aligned_blocks_go_direct_and_the_rest_buffered(sink: impl DataSink, path: &Path, a: usize) {
    let block = 64 * a;
    sink.write_at(0, buffer(block, a, 0, 1)).await.unwrap();
    sink.flush().await.unwrap();
    assert_eq!(cached(path), 0, "an aligned block went direct");

    // An unaligned tail, then an aligned range from a misaligned buffer: both buffered.
    sink.write_at(block as u64, buffer(100, a, 0, 2)).await.unwrap();
    sink.write_at(2 * block as u64, buffer(block, a, 1, 3)).await.unwrap();
    sink.close().await.unwrap();
    let cached = cached(path);
    assert!(cached >= block as u64 && cached < 2 * block as u64, "the buffered writes are cached: {cached}");

    let got = std::fs::read(path).unwrap();
    assert_eq!(got.len(), 3 * block);
    assert!(got[..block].iter().all(|&b| b == 1));
    assert!(got[block..block + 100].iter().all(|&b| b == 2));
    assert!(got[block + 100..2 * block].iter().all(|&b| b == 0), "the hole reads as zeros");
    assert!(got[2 * block..].iter().all(|&b| b == 3));
}
