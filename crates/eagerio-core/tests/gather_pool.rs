//! Pooled outputs: a source sharing an [`OutputPool`] takes a large gather's output from it and
//! gets it back when the result's last `Bytes` drops, and a recycled buffer's old bytes never
//! show through. Over the in-memory engine.
#![cfg(not(eagerio_loom))]

use std::ops::Range;

use eagerio_core::{
    mem::{MemEngine, MemFile},
    OutputPool, Source,
};
use futures::executor::block_on;

const MIB: u64 = 1 << 20;

fn byte(i: u64) -> u8 {
    (i % 251) as u8 ^ (i >> 16) as u8
}

fn source(pool: &std::sync::Arc<OutputPool>) -> Source<MemEngine> {
    let file = MemFile::new((0..24 * MIB).map(byte).collect());
    Source::new(MemEngine::new(file, "pool.bin", 1 << 20).unwrap()).with_output_pool(pool.clone())
}

fn check(got: &[bytes::Bytes], ranges: &[Range<u64>]) {
    assert_eq!(got.len(), ranges.len());
    for (b, r) in got.iter().zip(ranges) {
        let want: Vec<u8> = r.clone().map(byte).collect();
        assert!(b[..] == want[..], "range {r:?} differs");
    }
}

#[test]
fn pool_recycles_a_large_output_once_its_bytes_are_dropped() {
    let pool = OutputPool::new(64 << 20);
    let s = source(&pool);
    let first = [0..3 * MIB, 10 * MIB..13 * MIB + 5];
    let got = block_on(s.gather_ranges(&first).unwrap()).unwrap();
    check(&got, &first);
    let buffer = got[0].as_ptr();
    let kept = got[1].clone();
    drop(got);
    assert_eq!(pool.held(), 0, "a range of the output is still held");
    drop(kept);
    assert!(pool.held() as u64 >= 6 * MIB, "given back: {}", pool.held());
    // The next gather writes over the recycled buffer: none of the first gather's bytes may
    // show through, wherever its own ranges fall.
    let second = [20 * MIB + 7..23 * MIB, 5 * MIB + 1..6 * MIB, 1..2 * MIB];
    let got = block_on(s.gather_ranges(&second).unwrap()).unwrap();
    check(&got, &second);
    assert_eq!((pool.reused(), pool.held()), (1, 0));
    assert_eq!(got[0].as_ptr(), buffer, "the second gather's output is the first's buffer");
    drop(got);
    // A caller's buffer with room enough is used as it is; the pool keeps what it has.
    let exact = [MIB..4 * MIB, 8 * MIB..10 * MIB];
    let got = block_on(s.gather_ranges_into(&exact, bytes::BytesMut::with_capacity(5 * MIB as usize)).unwrap());
    check(&got.unwrap(), &exact);
    assert_eq!(pool.reused(), 1, "the caller's buffer sufficed");
    // A small gather leaves the pool alone.
    let small = [0..MIB / 2, MIB / 2..MIB];
    check(&block_on(s.gather_ranges(&small).unwrap()).unwrap(), &small);
    assert_eq!(pool.reused(), 1);
}

#[test]
fn pool_gets_back_the_outputs_of_streams_and_of_futures_never_awaited() {
    let pool = OutputPool::new(64 << 20);
    let s = source(&pool);
    // A future dropped unawaited: its job (settled at once on this engine) gives the output back.
    drop(s.gather_ranges(std::slice::from_ref(&(0..5 * MIB))).unwrap());
    assert_eq!(pool.held() as u64, 5 * MIB);
    // A stream takes the kept buffer; its rows are views of it, so it comes back only when the
    // stream and every row yielded are gone.
    let ranges = [MIB..3 * MIB, 7 * MIB..10 * MIB];
    let mut stream = s.gather_ranges_stream(&ranges).unwrap();
    assert_eq!((pool.reused(), pool.held()), (1, 0));
    let mut rows: Vec<(usize, bytes::Bytes)> = Vec::new();
    while let Some(row) = block_on(stream.next()) {
        rows.push(row.unwrap());
    }
    drop(stream);
    assert_eq!(pool.held(), 0, "the rows still hold the output");
    rows.sort_by_key(|r| r.0);
    check(&rows.iter().map(|r| r.1.clone()).collect::<Vec<_>>(), &ranges);
    drop(rows);
    assert_eq!(pool.held() as u64, 5 * MIB);
}
