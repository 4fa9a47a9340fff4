//! The tuned gap, seen from a source: which gathers plan with which gap, which gathers teach the
//! device's tuner, and that sources on one device share it. Over the in-memory engine (reads on
//! the caller's thread, in plan order); the fit itself is tested beside it in `tune.rs`.
#![cfg(not(eagerio_loom))]

use std::sync::Arc;

use eagerio_core::{
    mem::{MemEngine, MemFile},
    tune::{GapTuner, MIN_FIT_READS},
    Source, DEFAULT_GAP_LIMIT, DEFAULT_MAX_GAP,
};
use futures::executor::block_on;

/// 64 MiB of bytes that name their offset.
fn file() -> MemFile {
    MemFile::new((0..64u64 << 20).map(|i| (i % 251) as u8).collect())
}

fn source(file: &MemFile, path: &str) -> Source<MemEngine> {
    Source::new(MemEngine::new(file.clone(), path, 1 << 20).unwrap())
}

/// `n` ranges of 90 B, 64 KiB apart: each its own read whatever the gap.
fn sparse(n: u64) -> Vec<std::ops::Range<u64>> {
    (0..n).map(|i| i * (64 << 10)..i * (64 << 10) + 90).collect()
}

#[test]
fn tune_a_pinned_gap_is_every_gathers_gap() {
    let f = file();
    let s = source(&f, "pinned.bin").with_max_gap(8192);
    assert!(s.gap_tuner().is_none());
    for _ in 0..3 {
        let fut = s.gather_ranges(&sparse(300)).unwrap();
        let stats = fut.stats();
        assert_eq!((stats.gap, stats.price), (8192, None));
        block_on(fut).unwrap();
    }
    assert_eq!(s.plan_options().max_gap, 8192);
}

#[test]
fn tune_whole_gathers_of_enough_reads_teach_the_tuner_and_probes_alternate() {
    let f = file();
    let tuner = Arc::new(GapTuner::new());
    let s = source(&f, "taught.bin").with_gap_tuner(tuner.clone(), 4096, 64 << 10);
    assert!(std::ptr::eq(s.gap_tuner().unwrap(), &*tuner));
    // Too few requests to teach the tuner: planned at the start, no probe, not counted.
    for _ in 0..2 {
        let fut = s.gather_ranges(&sparse(MIN_FIT_READS - 1)).unwrap();
        assert_eq!(fut.stats().gap, 4096);
        block_on(fut).unwrap();
    }
    assert_eq!(tuner.gathers(), 0);
    // Enough reads: counted, and the gathers alternate between a probe and the start.
    let mut gaps = Vec::new();
    for n in 1..=4 {
        let fut = s.gather_ranges(&sparse(MIN_FIT_READS)).unwrap();
        gaps.push(fut.stats().gap);
        block_on(fut).unwrap();
        assert_eq!(tuner.gathers(), n);
    }
    assert_eq!(gaps, [16 << 10, 4096, 16 << 10, 4096], "probe, start, probe, start");
    // A failed gather does not count, even with every read issued: the file is cut under the
    // source inside its last range, whose read is the last one issued (reads go in file order).
    f.truncate((MIN_FIT_READS - 1) * (64 << 10) + 10);
    let fut = s.gather_ranges(&sparse(MIN_FIT_READS)).unwrap();
    let stats = fut.stats();
    assert!(block_on(fut).is_err());
    assert_eq!(stats.reads_issued, MIN_FIT_READS, "every read was issued");
    assert_eq!(tuner.gathers(), 4, "a failed gather is no measure of the device");
}

#[test]
fn tune_a_tuned_gap_stays_within_the_sources_limit() {
    let f = file();
    let tuner = Arc::new(GapTuner::new());
    let s = source(&f, "limited.bin").with_gap_tuner(tuner, 4096, 0);
    for _ in 0..4 {
        let fut = s.gather_ranges(&sparse(MIN_FIT_READS)).unwrap();
        assert_eq!(fut.stats().gap, 0, "limit 0: neither the start nor a probe goes past it");
        block_on(fut).unwrap();
    }
    assert_eq!(s.plan_options().max_gap, 0);
}

#[test]
fn tune_sources_of_one_local_device_share_its_tuner() {
    let dir = std::env::temp_dir();
    let a = dir.join(format!("eagerio-tune-a-{}", std::process::id()));
    let b = dir.join(format!("eagerio-tune-b-{}", std::process::id()));
    std::fs::write(&a, b"a").unwrap();
    std::fs::write(&b, b"b").unwrap();
    let f = file();
    let (sa, sb) = (source(&f, a.to_str().unwrap()), source(&f, b.to_str().unwrap()));
    let (ta, tb) = (sa.gap_tuner().expect("a local file is tuned"), sb.gap_tuner().unwrap());
    assert!(std::ptr::eq(ta, tb), "one tuner per device");
    assert!(source(&f, "no-such-file.bin").gap_tuner().is_none(), "nothing to fit without a device");
    let tuned = source(&f, a.to_str().unwrap()).with_tuned_gap(2048, DEFAULT_GAP_LIMIT);
    assert!(std::ptr::eq(tuned.gap_tuner().unwrap(), ta));
    let pinned = sa.with_gap_options(DEFAULT_MAX_GAP, false, DEFAULT_GAP_LIMIT);
    assert!(pinned.gap_tuner().is_none(), "tune_gap off pins the gap");
    let retuned = pinned.with_gap_options(DEFAULT_MAX_GAP, true, DEFAULT_GAP_LIMIT);
    assert!(retuned.gap_tuner().is_some());
    let _ = std::fs::remove_file(a);
    let _ = std::fs::remove_file(b);
}

#[test]
fn tune_each_gather_is_planned_with_the_gap_it_reports() {
    let f = file();
    let tuner = Arc::new(GapTuner::new());
    let s = source(&f, "planned.bin").with_gap_tuner(tuner, 1024, 64 << 10);
    // Ranges of 90 B with a 2 KiB hole between the two of each pair: the first gather probes at
    // 4 KiB and joins each pair, the second plans at the 1 KiB start and joins none.
    let pairs: Vec<std::ops::Range<u64>> = (0..128u64)
        .flat_map(|i| [i * (1 << 18)..i * (1 << 18) + 90, i * (1 << 18) + 2138..i * (1 << 18) + 2228])
        .collect();
    let probe = s.gather_ranges(&pairs).unwrap();
    let start = s.gather_ranges(&pairs).unwrap();
    let (p, q) = (probe.stats(), start.stats());
    block_on(probe).unwrap();
    block_on(start).unwrap();
    assert_eq!((p.gap, q.gap), (4096, 1024));
    assert_eq!((q.reads_issued, q.bytes_read), (256, 256 * 90), "1 KiB: every range its own read");
    assert_eq!((p.reads_issued, p.bytes_read), (128, 128 * 2228), "4 KiB: each pair one read, hole and all");
}

#[test]
fn tune_a_local_source_caps_its_tuned_gap_at_the_default_limit() {
    let path = std::env::temp_dir().join(format!("eagerio-tune-cap-{}", std::process::id()));
    std::fs::write(&path, b"x").unwrap();
    // A tuner of the process's own device, taught that a KiB costs nothing: the price calls for
    // joining any hole, and the source's default limit caps it.
    let s = source(&file(), path.to_str().unwrap());
    let t = s.gap_tuner().expect("a local file is tuned");
    t.record(1000, 1000 << 10, std::time::Duration::from_micros(8030));
    t.record(500, 4000 << 10, std::time::Duration::from_micros(3990));
    assert_eq!(s.plan_options().max_gap, DEFAULT_GAP_LIMIT);
    assert_eq!(DEFAULT_GAP_LIMIT, 32 << 10);
    let _ = std::fs::remove_file(path);
}
