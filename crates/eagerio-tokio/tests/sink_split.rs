//! The tokio sink's split: a write of whole aligned blocks from an aligned buffer goes through
//! `O_DIRECT` (it leaves nothing in the page cache, and the closing `fdatasync` nothing to write
//! back); an unaligned length, offset or buffer goes through the page cache. Either way the
//! file holds what was written.

use bytes::Bytes;
use eagerio_core::{sys, DataSink};
use eagerio_tokio::{TokioWriter, WriterOptions};

/// `len` bytes of `fill` whose first byte is at an address `skew` past a multiple of `align`.
fn buffer(len: usize, align: usize, skew: usize, fill: u8) -> Bytes {
    let mut v = vec![fill; len + 2 * align];
    let start = v.as_ptr().align_offset(align) + skew;
    v.truncate(start + len);
    Bytes::from(v).slice(start..)
}

fn cached(path: &std::path::Path) -> u64 {
    sys::resident_bytes(&std::fs::File::open(path).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aligned_blocks_go_direct_and_the_rest_buffered() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("split.bin");
    let sink = TokioWriter::create(&path, WriterOptions::default()).await.unwrap();
    let a = sink.engine().direct_alignment().expect("the project's filesystem supports O_DIRECT") as usize;
    let block = 64 * a;

    sink.write_at(0, buffer(block, a, 0, 1)).await.unwrap();
    sink.flush().await.unwrap();
    assert_eq!(cached(&path), 0, "an aligned block went direct");

    // An unaligned tail, then an aligned range from a misaligned buffer: both buffered.
    sink.write_at(block as u64, buffer(100, a, 0, 2)).await.unwrap();
    sink.write_at(2 * block as u64, buffer(block, a, 1, 3)).await.unwrap();
    sink.close().await.unwrap();
    let cached = cached(&path);
    assert!(cached >= block as u64 && cached < 2 * block as u64, "the buffered writes are cached: {cached}");

    let got = std::fs::read(&path).unwrap();
    assert_eq!(got.len(), 3 * block);
    assert!(got[..block].iter().all(|&b| b == 1));
    assert!(got[block..block + 100].iter().all(|&b| b == 2));
    assert!(got[block + 100..2 * block].iter().all(|&b| b == 0), "the hole reads as zeros");
    assert!(got[2 * block..].iter().all(|&b| b == 3));
}
