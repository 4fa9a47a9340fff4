//! What a gather counts and names: the gap a source plans with, the row a short read cut, the
//! reads a failed gather still issues, and the latencies and totals its source records. Each
//! check pins a number the ledger computes, over the in-memory engine (reads on the caller's
//! thread, in plan order), so that a changed comparison or sum shows.
#![cfg(not(eagerio_loom))]

use std::time::Duration;

use eagerio_core::{
    backend::{JobHandle, ReadEngine},
    mem::{MemEngine, MemFile},
    Error, FileInfo, Gather, GatherRows, RowLayout, RowTable, Source, Target,
};
use futures::executor::block_on;

const ROW: u64 = 100;

fn file(rows: u64) -> MemFile {
    MemFile::new((0..rows * ROW).map(|i| (i % 251) as u8).collect())
}

fn table(file: &MemFile) -> RowTable<MemEngine> {
    let engine = MemEngine::new(file.clone(), "accounting.bin", 1 << 20).unwrap();
    Source::new(engine).rows(RowLayout { base: 0, row_size: ROW, rows: None }).unwrap()
}

#[test]
fn accounting_source_plans_with_its_own_gap_when_the_engine_measures_none() {
    let engine = MemEngine::new(file(200), "gap.bin", 1 << 20).unwrap();
    let source = Source::new(engine).with_max_gap(8192);
    assert!(!source.is_adaptive(), "a source is adaptive only when asked");
    // A hole of 7,990 bytes: past the default gap (4 KiB), within the source's 8 KiB, so it is
    // read (in two reads: the engine's largest is 4 KiB).
    let fut = source.gather_ranges(&[0..10, 8000..8010]).unwrap();
    assert_eq!(fut.stats().bytes_read, 8010, "{:?}", fut.stats());
    block_on(fut).unwrap();
    let fut = source.gather_ranges(&[0..10, 8300..8310]).unwrap();
    assert_eq!(fut.stats().bytes_read, 20, "a hole past the gap is not read");
    block_on(fut).unwrap();
}

#[test]
fn accounting_short_read_names_the_first_row_it_cut_and_the_bytes_it_got() {
    // Rows 10..13 are one extent at offset 1000. Cut mid-row 12: rows 10 and 11 are whole.
    let f = file(20);
    let t = table(&f);
    f.truncate(1250);
    match block_on(t.gather(&[10, 11, 12]).unwrap()) {
        Err(Error::ShortRead { target, offset, wanted, got, .. }) => {
            assert_eq!((target, offset, wanted, got), (Target::Row(12), 1200, 100, 50));
        }
        other => panic!("expected a short read, got {other:?}"),
    }
    // Cut exactly at the end of row 11: row 12 is the first row with a byte missing.
    let f = file(20);
    let t = table(&f);
    f.truncate(1200);
    match block_on(t.gather(&[10, 11, 12]).unwrap()) {
        Err(Error::ShortRead { target, offset, got, .. }) => {
            assert_eq!((target, offset, got), (Target::Row(12), 1200, 0))
        }
        other => panic!("expected a short read, got {other:?}"),
    }
}

#[test]
fn accounting_failed_gather_claims_no_further_reads() {
    // Eight rows far apart, eight reads in plan order; the first comes back short (the file was
    // cut to nothing), which fails the gather: the engine is refused the seven reads left.
    let f = file(10_000);
    let t = table(&f);
    f.truncate(0);
    let rows: Vec<u64> = (0..8).map(|i| i * 1000).collect();
    let fut = t.gather(&rows).unwrap();
    assert_eq!(fut.stats().reads_planned, 8);
    assert_eq!(fut.stats().reads_issued, 1, "{:?}", fut.stats());
    assert!(matches!(block_on(fut), Err(Error::ShortRead { target: Target::Row(0), .. })));
}

#[test]
fn accounting_source_records_each_gather_once_and_failures_as_failed() {
    let f = file(10_000);
    let t = table(&f);
    block_on(t.gather(&[5, 500, 5000]).unwrap()).unwrap();
    let lat = t.latencies();
    assert_eq!((lat.gather.count(), lat.queue.count(), lat.read.count()), (1, 1, 3), "{lat:?}");
    let slowest = lat.read.quantile(1.0).unwrap();
    assert!(slowest < Duration::from_secs(10), "a read in memory took {slowest:?}");
    assert_eq!((t.stats().gathers, t.stats().failed), (1, 0));
    // A gather of one read: its queue wait is the wait before that read, its first.
    block_on(t.gather(&[7]).unwrap()).unwrap();
    assert_eq!((t.latencies().queue.count(), t.stats().gathers), (2, 2));

    f.truncate(0);
    block_on(t.gather(&[1]).unwrap()).unwrap_err();
    assert_eq!((t.stats().gathers, t.stats().failed), (3, 1), "{:?}", t.stats());
}

#[test]
fn accounting_reads_the_same_through_the_dyn_traits() {
    let f = file(1000);
    let t = table(&f);
    let rows: &dyn GatherRows = &t;
    assert_eq!((rows.row_size(), rows.rows(), t.row_size(), t.rows()), (ROW, 1000, ROW, 1000));
    block_on(rows.gather(&[1, 2, 999]).unwrap()).unwrap();
    assert_eq!((rows.totals().gathers, rows.totals().requested), (1, 3));
    assert_eq!(rows.latencies().gather.count(), 1);
    let ranges: &dyn Gather = t.source();
    block_on(ranges.gather_ranges(&[std::ops::Range { start: 0, end: 10 }]).unwrap()).unwrap();
    assert_eq!((ranges.totals().gathers, ranges.latencies().gather.count()), (2, 2));
    let dyn_table: &dyn Gather = &t;
    assert_eq!((dyn_table.totals().gathers, dyn_table.latencies().gather.count()), (2, 2));
}

/// The in-memory engine with a measured gap, as the object-store engine tunes one.
struct Tuned(MemEngine, u64);

impl ReadEngine for Tuned {
    fn info(&self) -> &FileInfo {
        self.0.info()
    }

    fn submit(&self, job: JobHandle) {
        self.0.submit(job);
    }

    fn max_gap(&self) -> Option<u64> {
        Some(self.1)
    }
}

#[test]
fn accounting_an_engine_that_measures_its_gap_plans_with_it() {
    let engine = MemEngine::new(file(200), "tuned.bin", 1 << 20).unwrap();
    let source = Source::new(Tuned(engine, 8192)).with_max_gap(0);
    assert_eq!(source.plan_options().max_gap, 8192);
    let fut = source.gather_ranges(&[0..10, 8000..8010]).unwrap();
    assert_eq!(fut.stats().bytes_read, 8010, "the engine's gap joined the hole: {:?}", fut.stats());
    block_on(fut).unwrap();
}
