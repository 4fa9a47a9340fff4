//! Fuzzes the planner: any requests and any valid options give a plan whose invariants hold.
//!
//! - every read is aligned (offset and length multiples of `align`) and at most `max_read`;
//! - reads are in file order and never overlap;
//! - each read's `needed` is within its length and covers its pieces;
//! - the pieces tile the output `0..out_len` exactly (no gap, no overlap);
//! - every request's bytes are covered, and each piece maps to the right file bytes:
//!   `extent.offset + piece.extent_offset == request.offset + (piece.out_offset - request.out)`;
//! - the counters agree (`out_len`, `requests`, `unique_requests`, `useful_bytes <= bytes_to_read`).
//!
//! Invalid options must be refused with `InvalidOptions`, never panic.

#![no_main]

use arbitrary::Arbitrary;
use eagerio_core::{backend::{Plan, PlanOptions}, Error};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    max_gap: u32,
    /// `align = 1 << (align_shift % 13)` (1 B to 4 KiB), or a raw (possibly invalid) value.
    align_shift: u8,
    raw_align: Option<u16>,
    /// `max_read = align * (1 + max_read_blocks % 64)`, or a raw (possibly invalid) value.
    max_read_blocks: u8,
    raw_max_read: Option<u32>,
    /// `(offset, len)`; offsets up to 16 MiB, lengths 1..=65536.
    requests: Vec<(u32, u16)>,
}

fuzz_target!(|input: Input| {
    let align = match input.raw_align {
        Some(a) => u64::from(a),
        None => 1u64 << (input.align_shift % 13),
    };
    let max_read = match input.raw_max_read {
        Some(m) => u64::from(m),
        None => align * (1 + u64::from(input.max_read_blocks % 64)),
    };
    let opts = PlanOptions { max_gap: u64::from(input.max_gap % (1 << 20)), align, max_read };
    let requests: Vec<(u64, u64)> =
        input.requests.iter().take(2000).map(|&(o, l)| (u64::from(o % (16 << 20)), u64::from(l) + 1)).collect();
    let plan = match Plan::new(&requests, &opts) {
        Ok(p) => p,
        Err(Error::InvalidOptions { .. }) => {
            assert!(opts.validate().is_err(), "valid options refused: {opts:?}");
            return;
        }
        Err(e) => panic!("unexpected planner error: {e}"),
    };
    assert!(opts.validate().is_ok());
    check(&plan, &requests, &opts);
});

fn check(plan: &Plan, requests: &[(u64, u64)], opts: &PlanOptions) {
    let out_starts: Vec<u64> = requests
        .iter()
        .scan(0u64, |at, &(_, l)| {
            let s = *at;
            *at += l;
            Some(s)
        })
        .collect();
    let out_len: u64 = requests.iter().map(|&(_, l)| l).sum();
    assert_eq!(plan.out_len(), out_len);
    assert_eq!(plan.requests(), requests.len());
    assert!(plan.unique_requests() <= requests.len());
    assert_eq!(plan.extents().is_empty(), requests.is_empty());

    let mut prev_end = 0u64;
    let mut tiles: Vec<(u64, u64)> = Vec::new();
    let mut covered = vec![0u64; requests.len()];
    for (i, e) in plan.extents().iter().enumerate() {
        assert_eq!(e.offset % opts.align, 0, "unaligned read offset {e:?} ({opts:?})");
        assert_eq!(u64::from(e.len) % opts.align, 0, "unaligned read length {e:?} ({opts:?})");
        assert!(e.len > 0 && u64::from(e.len) <= opts.max_read, "read {e:?} past max_read ({opts:?})");
        assert!(e.needed <= e.len, "needed past the read: {e:?}");
        assert!(i == 0 || e.offset >= prev_end, "reads overlap or are out of order at extent {i}: {e:?}");
        prev_end = e.offset + u64::from(e.len);
        let pieces = plan.pieces(i);
        assert!(!pieces.is_empty(), "a read that serves nothing: {e:?}");
        let mut need = 0u32;
        for p in pieces {
            assert!(p.len > 0);
            assert!(p.extent_offset + p.len <= e.len, "piece past its read: {p:?} in {e:?}");
            need = need.max(p.extent_offset + p.len);
            let r = p.request as usize;
            let (r_off, r_len) = requests[r];
            let within = p.out_offset.checked_sub(out_starts[r]).expect("piece before its request's output");
            assert!(within + u64::from(p.len) <= r_len, "piece past its request: {p:?}");
            assert_eq!(
                e.offset + u64::from(p.extent_offset),
                r_off + within,
                "piece {p:?} of read {e:?} maps to the wrong file bytes for request {r}"
            );
            covered[r] += u64::from(p.len);
            tiles.push((p.out_offset, u64::from(p.len)));
        }
        assert_eq!(e.needed, need, "needed is not the end of the last piece: {e:?}");
    }
    for (r, &(_, l)) in requests.iter().enumerate() {
        assert_eq!(covered[r], l, "request {r} is not covered exactly");
    }
    tiles.sort_unstable();
    let mut at = 0u64;
    for (o, l) in tiles {
        assert_eq!(o, at, "the pieces do not tile the output: gap or overlap at {at}");
        at += l;
    }
    assert_eq!(at, out_len);
    assert!(plan.useful_bytes() <= plan.bytes_to_read());
}
