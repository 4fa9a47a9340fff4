//! The conformance suite: one set of async checks that every backend runs whole.
//!
//! A backend implements [`Backend`] (how to open a file for gathers and for writing; the checks
//! install their fault [`Hook`]s with [`fault::inject`]) and expands
//! [`conformance_suite!`](crate::conformance_suite) with it and its executor's `block_on`. Every
//! check compares against `pread` on the same file, so the suite needs a real filesystem: it
//! works in a fresh temporary directory.
//!
//! Long by design: one function per check, and every backend runs them all; it grows with the
//! checks, not with any one mechanism.

#![allow(clippy::missing_panics_doc)]

use std::{
    fs::File,
    io::{self, Write},
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Condvar, Mutex,
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use rand::{rngs::StdRng, Rng, SeedableRng};

use crate::{
    backend::{ReadEngine, WriteEngine},
    fault::{self, Action, Hook, IoKind},
    DataSink, Error, Result, RowLayout, Sink, SinkOptions, Source, Target,
};

/// What the suite needs from a backend.
#[allow(async_fn_in_trait)]
pub trait Backend {
    /// The gather engine.
    type Engine: ReadEngine + Clone + std::fmt::Debug;
    /// The sink engine.
    type Writer: WriteEngine;
    /// Opens `path` for gathers (with the hook [`fault::inject`] installed for it, if any).
    async fn open(&self, path: &Path) -> Result<Source<Self::Engine>>;
    /// Creates `path` for writing, truncating it (with the hook installed for it, if any).
    async fn create(&self, path: &Path, opts: SinkOptions) -> Result<Sink<Self::Writer>>;
    /// Whether every staging slot of `source` is back in its pool.
    fn staging_full(&self, source: &Source<Self::Engine>) -> bool;
    /// Whether sources open in adaptive mode by default (local files: yes; object stores, which
    /// have no page cache to serve from: no).
    fn adaptive(&self) -> bool {
        true
    }
}

/// Expands to one `#[test]` per conformance check, running each with `$block_on`.
#[macro_export]
macro_rules! conformance_suite {
    ($backend:expr, $block_on:expr) => {
        $crate::conformance_suite!(@tests $backend, $block_on,
            rows_roundtrip, large_gather_roundtrip, ranges_roundtrip, output_buffer_reuse, edge_requests, bad_input_is_refused_before_io,
            truncated_file_then_recovery, read_error_names_the_row, read_panic_names_the_row, drop_mid_flight_then_reuse,
            sink_offsets_and_order, sink_overlapping_writes_in_call_order, sink_write_error_reported,
            sink_dropped_flush_keeps_its_report, sink_flush_after_dropped_futures,
            sink_closed_refuses_writes, sink_backpressure_bound, sink_created_file_syncs_its_directory,
            adaptive_resident_and_missing_rows,
            adaptive_mapped_rows_skip_the_plan, adaptive_eviction_races_the_copy, adaptive_cold_gather_adds_no_page_cache,
            stream_yields_every_request_once, stream_dropped_midway_then_reuse, stream_error_after_the_rows_that_landed,
            tune_learns_from_whole_gathers_only);
    };
    (@tests $backend:expr, $block_on:expr, $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                let backend = $backend;
                ($block_on)($crate::conformance::$name(&backend));
            }
        )*
    };
}

fn seed() -> u64 {
    let s = std::env::var("EAGERIO_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    });
    eprintln!("conformance seed: {s} (replay with EAGERIO_SEED={s})");
    s
}

/// A temporary file of `len` pseudo-random bytes; the directory goes when the guard drops.
pub fn random_file(len: usize, rng: &mut impl Rng) -> (tempfile::TempDir, PathBuf, Vec<u8>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("table.bin");
    let mut bytes = vec![0u8; len];
    rng.fill(&mut bytes[..]);
    File::create(&path).and_then(|mut f| f.write_all(&bytes).and_then(|()| f.sync_all())).expect("write table");
    // Start cold, so the checks exercise the backend's reads even in adaptive mode.
    crate::sys::evict(&path).expect("evict the table");
    (dir, path, bytes)
}

fn reference_rows(file: &[u8], row_size: usize, rows: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(rows.len() * row_size);
    for &r in rows {
        out.extend_from_slice(&file[r as usize * row_size..(r as usize + 1) * row_size]);
    }
    out
}

async fn wait_full<B: Backend>(b: &B, src: &Source<B::Engine>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !b.staging_full(src) {
        assert!(Instant::now() < deadline, "staging did not return to full: a slot leaked");
        // A thread-per-core backend's tasks run on this thread: let them run between checks (a
        // large gather's hand-back channel, closed by its preparing thread, ends only when its
        // task sees it).
        yield_now().await;
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Lets the executor polling this task run its other ready tasks once.
async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if std::mem::replace(&mut yielded, true) {
            std::task::Poll::Ready(())
        } else {
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await
}

/// Random tables and requests (duplicates, out of order) against `pread`, for 90 B, 4 KiB and
/// 5000 B rows.
pub async fn rows_roundtrip<B: Backend>(b: &B) {
    let mut rng = StdRng::seed_from_u64(seed());
    for row_size in [90usize, 4096, 5000] {
        let rows = 3000u64;
        let (_d, path, file) = random_file(row_size * rows as usize, &mut rng);
        let table = b
            .open(&path)
            .await
            .expect("open")
            .rows(RowLayout { base: 0, row_size: row_size as u64, rows: None })
            .unwrap();
        assert_eq!(table.rows(), rows);
        for _ in 0..8 {
            let n = rng.gen_range(1..600);
            let ids: Vec<u64> = (0..n).map(|_| rng.gen_range(0..rows)).collect();
            let got = table.gather(&ids).expect("valid rows").await.expect("gather");
            assert_eq!(&got[..], &reference_rows(&file, row_size, &ids)[..], "row size {row_size}, rows {ids:?}");
        }
        let s = table.stats();
        // Rows served from the page cache (adaptive mode, e.g. after a buffered fallback read
        // them in) are not counted in `bytes_read`.
        assert!(s.reads > 0 && (s.bytes_read >= s.useful_bytes || s.resident > 0), "{s:?}");
        wait_full(b, table.source()).await;
    }
}

/// A gather large enough to be prepared off the caller's thread (on backends that do), then
/// one dropped at once, while it may still be being prepared: the first returns the right
/// bytes, the dropped one leaves nothing held, and the source serves the next.
pub async fn large_gather_roundtrip<B: Backend>(b: &B) {
    let mut rng = StdRng::seed_from_u64(seed());
    let (row_size, rows) = (90usize, 20_000u64);
    let (_d, path, file) = random_file(row_size * rows as usize, &mut rng);
    let table =
        b.open(&path).await.expect("open").rows(RowLayout { base: 0, row_size: row_size as u64, rows: None }).unwrap();
    let n = 3 * crate::prepare::PREPARE_ELSEWHERE;
    let ids: Vec<u64> = (0..n).map(|_| rng.gen_range(0..rows)).collect();
    let got = table.gather(&ids).expect("valid rows").await.expect("gather");
    assert_eq!(&got[..], &reference_rows(&file, row_size, &ids)[..]);
    drop(table.gather(&ids).expect("valid rows"));
    let again = table.gather(&ids).expect("valid rows").await.expect("gather after a drop");
    assert_eq!(again, got);
    wait_full(b, table.source()).await;
}

/// Drains `stream`: every `(index, bytes)` it yields, checking that no index comes twice, and
/// the error it ends with, if any (checking that nothing comes after it).
async fn drain_stream(mut stream: crate::GatherStream, requests: usize) -> (Vec<Option<Bytes>>, Option<Error>) {
    let mut got: Vec<Option<Bytes>> = vec![None; requests];
    while let Some(item) = stream.next().await {
        match item {
            Ok((i, bytes)) => assert!(got[i].replace(bytes).is_none(), "request {i} yielded twice"),
            Err(e) => {
                assert!(stream.next().await.is_none(), "the stream went on after its error {e}");
                return (got, Some(e));
            }
        }
    }
    assert!(stream.next().await.is_none(), "a stream that ended stays ended");
    (got, None)
}

/// Streamed gathers yield every request once, with its index and its bytes: rows of 90 B,
/// 4 KiB and 5000 B with duplicates in any order, cold and then warm (rows the page cache
/// serves land at once), one large enough to be prepared off the caller's thread, and byte
/// ranges long enough to span several reads. Staging is full afterwards.
pub async fn stream_yields_every_request_once<B: Backend>(b: &B) {
    let mut rng = StdRng::seed_from_u64(seed());
    for row_size in [90usize, 4096, 5000] {
        let rows = 3000u64;
        let (_d, path, file) = random_file(row_size * rows as usize, &mut rng);
        let table = b.open(&path).await.expect("open");
        let table = table.rows(RowLayout { base: 0, row_size: row_size as u64, rows: None }).unwrap();
        for round in 0..4 {
            if round == 2 {
                std::fs::read(&path).expect("warm the table");
            }
            let n = if round == 3 { 3 * crate::prepare::PREPARE_ELSEWHERE } else { rng.gen_range(1..600) };
            let ids: Vec<u64> = (0..n).map(|_| rng.gen_range(0..rows)).collect();
            let (got, err) = drain_stream(table.gather_stream(&ids).expect("valid rows"), ids.len()).await;
            assert!(err.is_none(), "row size {row_size}: {err:?}");
            for (i, (&id, bytes)) in ids.iter().zip(&got).enumerate() {
                let bytes = bytes.as_ref().unwrap_or_else(|| panic!("request {i} (row {id}) never came"));
                assert_eq!(&bytes[..], &reference_rows(&file, row_size, &[id])[..], "row size {row_size}, row {id}");
            }
        }
        wait_full(b, table.source()).await;
    }
    let (_d, path, file) = random_file(1 << 20, &mut rng);
    let src = b.open(&path).await.expect("open");
    let ranges: Vec<_> = (0..20)
        .map(|_| {
            let s = rng.gen_range(0..file.len() as u64 - 1);
            s..(s + rng.gen_range(1..300_000)).min(file.len() as u64)
        })
        .collect();
    let (got, err) = drain_stream(src.gather_ranges_stream(&ranges).expect("valid ranges"), ranges.len()).await;
    assert!(err.is_none(), "{err:?}");
    for (r, g) in ranges.iter().zip(&got) {
        assert_eq!(&g.as_ref().expect("every range comes")[..], &file[r.start as usize..r.end as usize]);
    }
    wait_full(b, &src).await;
}

/// A table of 2048 4 KiB rows whose every read is held 200 µs (while the returned guard lives),
/// so gathers still have reads in flight when they are dropped; and the file's bytes.
async fn slow_table<B: Backend>(
    b: &B,
    rng: &mut StdRng,
) -> (crate::RowTable<B::Engine>, Vec<u8>, fault::Injected, tempfile::TempDir) {
    let (dir, path, file) = random_file(4096 * 2048, rng);
    let hook = Hook::new(|p| {
        if p.kind == IoKind::Read {
            std::thread::sleep(Duration::from_micros(200));
        }
        Action::Proceed
    });
    let faults = fault::inject(&path, hook);
    let table = b.open(&path).await.unwrap().rows(RowLayout { base: 0, row_size: 4096, rows: None }).unwrap();
    (table, file, faults, dir)
}

/// The gap tuner takes a whole gather's reads and time, and nothing of a gather dropped with
/// reads in flight, or one that timed out (reads held, a tuner of the check's own).
pub async fn tune_learns_from_whole_gathers_only<B: Backend>(b: &B) {
    let (dir, path, file) = random_file(4096 * 2048, &mut StdRng::seed_from_u64(seed()));
    // Each read is held this many µs: 200 for the whole gather; 5,000 for the dropped and the
    // timed-out ones, so that none can finish all its reads between the call and its drop or
    // deadline, even with the test's thread descheduled for milliseconds (a gather settling
    // while its future is dropped counts or not by a hair, and the check could not say which).
    let hold = Arc::new(std::sync::atomic::AtomicU64::new(200));
    let held = hold.clone();
    let hook = Hook::new(move |p| {
        if p.kind == IoKind::Read {
            std::thread::sleep(Duration::from_micros(held.load(Ordering::Relaxed)));
        }
        Action::Proceed
    });
    let _faults = fault::inject(&path, hook);
    let tuner = Arc::new(crate::tune::GapTuner::new());
    // A 16 KiB limit: rows 32 KiB apart are one read each, whatever the gap.
    let source = b.open(&path).await.unwrap().with_gap_tuner(tuner.clone(), 4096, 16 << 10);
    if source.engine().max_gap().is_some() {
        eprintln!("the engine measures its own gap: the device tuner is not used");
        return;
    }
    let table = source.rows(RowLayout { base: 0, row_size: 4096, rows: None }).unwrap();
    let ids: Vec<u64> = (0..crate::tune::MIN_FIT_READS).map(|i| i * 8).collect();
    // Until the source has settled `n` gathers (a thread-per-core backend's reads run on this
    // thread: let them run between checks).
    let settled = |n: u64| {
        let source = table.source();
        async move {
            let deadline = Instant::now() + Duration::from_secs(20);
            while source.stats().gathers < n {
                assert!(Instant::now() < deadline, "gather {n} never settled");
                yield_now().await;
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    };
    crate::sys::evict(&path).expect("evict the table");
    let mut whole = table.gather(&ids).unwrap();
    let bytes = (&mut whole).await.unwrap();
    assert_eq!(&bytes[..], &reference_rows(&file, 4096, &ids)[..]);
    settled(1).await;
    // Cold, it counts; a page cache that kept the table anyway (valgrind's) served part of it,
    // and then it does not.
    let mut counted = u64::from(whole.stats().resident == 0);
    assert_eq!(tuner.gathers(), counted, "a whole, cold gather of enough reads counts: {:?}", whole.stats());
    // A gather that settled in its call (an engine that waits there for staging slots) was
    // whole when dropped, and counts as one.
    let whole_at = |s: crate::GatherStats| u64::from(s.wait > Duration::ZERO && s.resident == 0);
    hold.store(5000, Ordering::Relaxed);
    crate::sys::evict(&path).expect("evict the table");
    let dropped = table.gather(&ids).unwrap();
    counted += whole_at(dropped.stats());
    drop(dropped);
    settled(2).await;
    // Each read takes 5 ms: none has landed at the deadline, unless the gather settled first.
    crate::sys::evict(&path).expect("evict the table");
    let mut timed = table.gather(&ids).unwrap().with_timeout(Duration::from_micros(100));
    match (&mut timed).await {
        Err(Error::TimedOut { .. }) => {}
        Ok(_) => counted += whole_at(timed.stats()),
        Err(e) => panic!("expected TimedOut, got {e}"),
    }
    settled(3).await;
    assert_eq!(tuner.gathers(), counted, "a dropped or timed-out gather is no measure of the device");
    wait_full(b, table.source()).await;
    drop(dir);
}

/// Streams dropped right after the call and after their first row, with reads still in flight
/// (each read held 200 µs): staging returns to full and the next gathers are right.
pub async fn stream_dropped_midway_then_reuse<B: Backend>(b: &B) {
    let mut rng = StdRng::seed_from_u64(seed());
    let (table, file, _faults, _d) = slow_table(b, &mut rng).await;
    for round in 0..10 {
        let ids: Vec<u64> = (0..500).map(|_| rng.gen_range(0..2048)).collect();
        let mut stream = table.gather_stream(&ids).unwrap();
        if round % 2 == 1 {
            let (i, bytes) = stream.next().await.expect("a first row").expect("no error");
            assert_eq!(&bytes[..], &reference_rows(&file, 4096, &[ids[i]])[..]);
        }
        drop(stream);
    }
    let ids: Vec<u64> = (0..300).map(|_| rng.gen_range(0..2048)).collect();
    let got = table.gather(&ids).unwrap().await.unwrap();
    assert_eq!(&got[..], &reference_rows(&file, 4096, &ids)[..]);
    wait_full(b, table.source()).await;
}

/// A streamed gather that fails (a file cut under it: a row past the cut is a short read)
/// yields only right rows, never the failed one, then the error naming that row, once, then
/// the end; likewise a large one of ranges, the error naming the range by its place in the
/// call; the source serves the next gather.
pub async fn stream_error_after_the_rows_that_landed<B: Backend>(b: &B) {
    let mut rng = StdRng::seed_from_u64(seed());
    let row = 5000u64;
    let (_d, path, file) = random_file(row as usize * 400, &mut rng);
    let table = b.open(&path).await.unwrap().rows(RowLayout { base: 0, row_size: row, rows: Some(400) }).unwrap();
    File::options().write(true).open(&path).unwrap().set_len(row * 300 + 123).unwrap();
    let ids = [3, 350, 7];
    let (got, err) = drain_stream(table.gather_stream(&ids).unwrap(), ids.len()).await;
    assert!(got[1].is_none(), "the row past the cut was yielded");
    for i in [0, 2] {
        if let Some(bytes) = &got[i] {
            assert_eq!(&bytes[..], &reference_rows(&file, row as usize, &[ids[i]])[..]);
        }
    }
    match err {
        Some(Error::ShortRead { target: Target::Row(350), .. }) => {}
        other => panic!("expected a short read of row 350, got {other:?}"),
    }
    // Ranges, enough for a stream of more than one job (see `prepare::STREAM_HEAD`): the error
    // names the failed range by its place in the call.
    let n = crate::prepare::PREPARE_ELSEWHERE + 2 * crate::prepare::STREAM_HEAD;
    let bad = n - 5;
    let ranges: Vec<_> = (0..n as u64)
        .map(|k| {
            if k as usize == bad {
                row * 350..row * 350 + 100
            } else {
                k * 499 % (row * 299)..k * 499 % (row * 299) + 100
            }
        })
        .collect();
    let (got, err) = drain_stream(table.source().gather_ranges_stream(&ranges).unwrap(), n).await;
    assert!(got[bad].is_none(), "the range past the cut was yielded");
    for (r, g) in ranges.iter().zip(&got).filter_map(|(r, g)| Some((r, g.as_ref()?))) {
        assert_eq!(&g[..], &file[r.start as usize..r.end as usize]);
    }
    match err {
        Some(Error::ShortRead { target: Target::Range(i), .. }) if i == bad => {}
        other => panic!("expected a short read of range #{bad}, got {other:?}"),
    }
    let got = table.gather(&[3, 299, 7]).unwrap().await.unwrap();
    assert_eq!(&got[..], &reference_rows(&file, row as usize, &[3, 299, 7])[..]);
    wait_full(b, table.source()).await;
}

/// Byte-range gathers, overlapping and out of order, with a caller's reused buffer.
pub async fn ranges_roundtrip<B: Backend>(b: &B) {
    let mut rng = StdRng::seed_from_u64(seed());
    let (_d, path, file) = random_file(1 << 20, &mut rng);
    let src = b.open(&path).await.expect("open");
    for _ in 0..10 {
        let ranges: Vec<_> = (0..rng.gen_range(1..50))
            .map(|_| {
                let s = rng.gen_range(0..file.len() as u64 - 1);
                s..(s + rng.gen_range(1..200_000)).min(file.len() as u64)
            })
            .collect();
        let got = src.gather_ranges(&ranges).expect("valid ranges").await.expect("gather");
        assert_eq!(got.len(), ranges.len());
        for (r, g) in ranges.iter().zip(&got) {
            assert_eq!(&g[..], &file[r.start as usize..r.end as usize]);
        }
    }
}

/// A caller's output buffer is used for the gather and can be recovered and reused.
pub async fn output_buffer_reuse<B: Backend>(b: &B) {
    let mut rng = StdRng::seed_from_u64(seed());
    let (_d, path, file) = random_file(4096 * 256, &mut rng);
    let table = b.open(&path).await.unwrap().rows(RowLayout { base: 0, row_size: 4096, rows: None }).unwrap();
    let mut buf = bytes::BytesMut::with_capacity(64 * 4096);
    let first_ptr = buf.as_ptr();
    for _ in 0..5 {
        let ids: Vec<u64> = (0..rng.gen_range(1..64)).map(|_| rng.gen_range(0..256)).collect();
        let got = table.gather_into(&ids, buf).unwrap().await.unwrap();
        assert_eq!(&got[..], &reference_rows(&file, 4096, &ids)[..]);
        assert_eq!(got.as_ptr(), first_ptr, "the caller's buffer holds the output");
        buf = got.try_into_mut().expect("the result is the only handle on the buffer");
    }
}

/// The empty request, one row, the last row, every row duplicated.
pub async fn edge_requests<B: Backend>(b: &B) {
    let mut rng = StdRng::seed_from_u64(seed());
    let (_d, path, file) = random_file(90 * 1000 + 37, &mut rng); // a partial trailing row
    let table = b.open(&path).await.unwrap().rows(RowLayout { base: 0, row_size: 90, rows: None }).unwrap();
    assert_eq!(table.rows(), 1000);
    assert!(table.gather(&[]).unwrap().await.unwrap().is_empty());
    for ids in [vec![0u64], vec![999], vec![999, 0, 999], vec![5; 300]] {
        let got = table.gather(&ids).unwrap().await.unwrap();
        assert_eq!(&got[..], &reference_rows(&file, 90, &ids)[..], "{ids:?}");
    }
    let got = b
        .open(&path)
        .await
        .unwrap()
        .gather_ranges(&[std::ops::Range { start: file.len() as u64 - 1, end: file.len() as u64 }])
        .unwrap()
        .await
        .unwrap();
    assert_eq!(got[0][0], file[file.len() - 1]);
}

/// Bad rows, ranges and options are refused before any I/O, with clear messages, and the source
/// keeps serving.
pub async fn bad_input_is_refused_before_io<B: Backend>(b: &B) {
    let mut rng = StdRng::seed_from_u64(seed());
    let (_d, path, file) = random_file(4096 * 10, &mut rng);
    let src = b.open(&path).await.unwrap();
    let table = src.clone().rows(RowLayout { base: 0, row_size: 4096, rows: None }).unwrap();
    let e = table.gather(&[1, 10]).unwrap_err();
    assert!(matches!(e, Error::RowOutOfRange { row: 10, rows: 10, .. }), "{e}");
    assert!(e.to_string().contains("row 10") && e.to_string().contains("10 rows"), "{e}");
    assert!(e.is_bad_input());
    #[allow(clippy::reversed_empty_ranges)]
    let bad = [(5..5, "empty"), (9..3, "inverted"), (0..(file.len() as u64 + 1), "past the end")];
    for (r, why) in bad {
        let e = src.gather_ranges(&[0..1, r]).unwrap_err();
        assert!(e.to_string().contains(why) && e.to_string().contains("range #1"), "{e}");
    }
    let e = src.clone().rows(RowLayout { base: 0, row_size: 0, rows: None }).unwrap_err();
    assert!(e.to_string().contains("row_size"), "{e}");
    assert_eq!(src.stats().reads, 0, "bad input must not issue reads");
    let got = table.gather(&[9, 0]).unwrap().await.unwrap();
    assert_eq!(&got[..], &reference_rows(&file, 4096, &[9, 0])[..]);
    let io: io::Error = e.into();
    assert_eq!(io.kind(), io::ErrorKind::InvalidInput);
}

/// A table whose file is cut short gives a short-read error naming the row, offset and file;
/// the next gather on the same source is correct.
pub async fn truncated_file_then_recovery<B: Backend>(b: &B) {
    let mut rng = StdRng::seed_from_u64(seed());
    let row = 5000u64;
    let (_d, path, file) = random_file(row as usize * 400, &mut rng);
    let table = b.open(&path).await.unwrap().rows(RowLayout { base: 0, row_size: row, rows: Some(400) }).unwrap();
    File::options().write(true).open(&path).unwrap().set_len(row * 300 + 123).unwrap();
    let e = table.gather(&[3, 350, 7]).unwrap().await.unwrap_err();
    match &e {
        Error::ShortRead { target: Target::Row(300..=399), offset, path: p, .. } => {
            assert_eq!(*offset % row, 0);
            assert_eq!(p, &path);
        }
        other => panic!("expected a short read of row 350, got {other}"),
    }
    assert!(e.to_string().contains("row 350") && e.to_string().contains("offset 1750000"), "{e}");
    let got = table.gather(&[3, 299, 7]).unwrap().await.unwrap();
    assert_eq!(&got[..], &reference_rows(&file, row as usize, &[3, 299, 7])[..]);
    wait_full(b, table.source()).await;
}

/// A 64-row table of 4 KiB rows, unjoined (`max_gap` 0), whose reads of row 40 get `action`
/// while `armed` is set, and the error of gathering rows 1, 40 and 2.
async fn gather_with_row_40_faulty<B: Backend>(
    b: &B,
    action: fn() -> Action,
) -> (Error, crate::RowTable<B::Engine>, Vec<u8>, Arc<AtomicBool>, tempfile::TempDir) {
    let mut rng = StdRng::seed_from_u64(seed());
    let (dir, path, file) = random_file(4096 * 64, &mut rng);
    let bad = 40 * 4096;
    let armed = Arc::new(AtomicBool::new(true));
    let hook_armed = armed.clone();
    let hook = Hook::new(move |p| {
        let hit = p.kind == IoKind::Read && p.offset <= bad && bad < p.offset + p.len as u64;
        if hit && hook_armed.load(Ordering::SeqCst) {
            action()
        } else {
            Action::Proceed
        }
    });
    let _faults = fault::inject(&path, hook);
    let src = b.open(&path).await.unwrap();
    let table = src.with_max_gap(0).rows(RowLayout { base: 0, row_size: 4096, rows: None }).unwrap();
    let e = table.gather(&[1, 40, 2]).unwrap().await.unwrap_err();
    (e, table, file, armed, dir)
}

/// An injected `EIO` names the row; later gathers are correct and staging is full again.
pub async fn read_error_names_the_row<B: Backend>(b: &B) {
    let (e, table, file, _armed, _dir) =
        gather_with_row_40_faulty(b, || Action::Fail(io::Error::from_raw_os_error(libc::EIO))).await;
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    assert!(e.to_string().contains("row 40"), "{e}");
    let got = table.gather(&[1, 2, 63]).unwrap().await.unwrap();
    assert_eq!(&got[..], &reference_rows(&file, 4096, &[1, 2, 63])[..]);
    wait_full(b, table.source()).await;
}

/// A panic where a read is done (an injected [`Action::Panic`], as a panicking hook or copy-out
/// would) fails that gather with [`Error::Panicked`] naming the row; the panic unwinds through no
/// worker, lane or executor, and the next gather is right.
pub async fn read_panic_names_the_row<B: Backend>(b: &B) {
    let (e, table, file, armed, _dir) = gather_with_row_40_faulty(b, || Action::Panic).await;
    assert!(matches!(e, Error::Panicked { .. }), "{e}");
    assert!(e.to_string().contains("row 40") && e.to_string().contains("injected panic"), "{e}");
    armed.store(false, Ordering::SeqCst);
    let got = table.gather(&[40, 1, 63]).unwrap().await.unwrap();
    assert_eq!(&got[..], &reference_rows(&file, 4096, &[40, 1, 63])[..]);
    wait_full(b, table.source()).await;
}

/// Gathers dropped right after the call and mid-flight; staging returns to full and the next
/// gathers are correct.
pub async fn drop_mid_flight_then_reuse<B: Backend>(b: &B) {
    let mut rng = StdRng::seed_from_u64(seed());
    let (table, file, _faults, _d) = slow_table(b, &mut rng).await;
    for round in 0..20 {
        let ids: Vec<u64> = (0..500).map(|_| rng.gen_range(0..2048)).collect();
        let fut = table.gather(&ids).unwrap();
        if round % 2 == 1 {
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(fut);
    }
    let ids: Vec<u64> = (0..300).map(|_| rng.gen_range(0..2048)).collect();
    let got = table.gather(&ids).unwrap().await.unwrap();
    assert_eq!(&got[..], &reference_rows(&file, 4096, &ids)[..]);
    wait_full(b, table.source()).await;
}

/// A gather whose deadline passes while one of its reads is held (a hook that blocks the first
/// read until released, like a stuck device) resolves with [`Error::TimedOut`] at its deadline,
/// not when the read ends. Once the read is released every slot comes back, and the next gather
/// is right.
///
/// Not in [`conformance_suite!`](crate::conformance_suite): a hook that blocks runs on the
/// backend's thread, which on a thread-per-core executor is the thread the future needs. Backends
/// whose reads run off the caller's executor call it from a test of their own.
pub async fn deadline_slow_read_then_reuse<B: Backend>(b: &B) {
    let mut rng = StdRng::seed_from_u64(seed());
    let (_d, path, file) = random_file(4096 * 1024, &mut rng);
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let first = Arc::new(AtomicBool::new(true));
    let (hook_gate, hook_first) = (gate.clone(), first.clone());
    let hook = Hook::new(move |p| {
        if p.kind == IoKind::Read && hook_first.swap(false, Ordering::SeqCst) {
            let (open, cv) = &*hook_gate;
            let opened = cv.wait_timeout_while(open.lock().unwrap(), Duration::from_secs(60), |o| !*o);
            drop(opened.unwrap());
        }
        Action::Proceed
    });
    let _faults = fault::inject(&path, hook);
    let table = b.open(&path).await.unwrap().rows(RowLayout { base: 0, row_size: 4096, rows: None }).unwrap();
    let ids: Vec<u64> = (0..64).map(|i| i * 16).collect();
    let began = Instant::now();
    let timeout = Duration::from_millis(200);
    let err = table.gather(&ids).unwrap().with_timeout(timeout).await.expect_err("a read is held past the deadline");
    let took = began.elapsed();
    match &err {
        Error::TimedOut { unread, requested, after, .. } => {
            assert!((1..=64).contains(unread), "{err}");
            assert_eq!((*requested, *after), (64, timeout), "{err}");
        }
        other => panic!("expected TimedOut, got {other}"),
    }
    assert!(took >= timeout, "resolved before its deadline: {took:?}");
    // The held read would keep it for 60 s: resolving long before shows the wait did not.
    assert!(took < Duration::from_secs(30), "the gather waited for the held read: {took:?}");
    assert!(!first.load(Ordering::SeqCst), "the hook held a read");

    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    wait_full(b, table.source()).await;
    let next: Vec<u64> = (0..200).map(|_| rng.gen_range(0..1024)).collect();
    let got = table.gather(&next).unwrap().await.unwrap();
    assert_eq!(&got[..], &reference_rows(&file, 4096, &next)[..]);
}

/// Appends get contiguous offsets in call order; `write_at` lands where asked; the file matches
/// after close.
pub async fn sink_offsets_and_order<B: Backend>(b: &B) {
    let mut rng = StdRng::seed_from_u64(seed());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.bin");
    let sink = b.create(&path, SinkOptions::default()).await.unwrap();
    let mut expect = Vec::new();
    let mut futs = Vec::new();
    for _ in 0..64 {
        let mut chunk = vec![0u8; rng.gen_range(1..70_000)];
        rng.fill(&mut chunk[..]);
        let w = sink.append(Bytes::from(chunk.clone()));
        assert_eq!(w.offset(), expect.len() as u64);
        expect.extend_from_slice(&chunk);
        futs.push(w);
    }
    let header = Bytes::from_static(b"HEAD");
    let w = sink.write_at(0, header.clone());
    expect[..4].copy_from_slice(&header);
    for f in futs {
        f.await.unwrap();
    }
    w.await.unwrap();
    sink.close().await.unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), expect);
    let s = sink.stats();
    assert_eq!((s.writes, s.failed, s.in_flight), (65, 0, 0));
}

/// Overlapping writes land in call order, deterministically: the first write is held back by a
/// slow hook (where the backend runs its hook before the write) and the header that overwrites
/// its start must still win; a write that overlaps nothing is not held.
pub async fn sink_overlapping_writes_in_call_order<B: Backend>(b: &B) {
    const BODY: usize = 8192;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.bin");
    let slow = Hook::new(|p| {
        if p.kind == IoKind::Write && p.offset == 0 && p.len == BODY {
            std::thread::sleep(Duration::from_millis(100));
        }
        Action::Proceed
    });
    let _faults = fault::inject(&path, slow);
    let sink = b.create(&path, SinkOptions::default()).await.unwrap();
    let body = sink.append(Bytes::from(vec![1u8; BODY]));
    let header = sink.write_at(0, Bytes::from_static(b"HEAD"));
    let tail = sink.write_at(BODY as u64, Bytes::from(vec![2u8; 100]));
    header.await.unwrap();
    body.await.unwrap();
    tail.await.unwrap();
    sink.close().await.unwrap();
    let mut expect = vec![1u8; BODY];
    expect[..4].copy_from_slice(b"HEAD");
    expect.extend_from_slice(&[2u8; 100]);
    assert_eq!(std::fs::read(&path).unwrap(), expect, "the header was overwritten by the earlier append");
    assert_eq!(sink.stats().held, 1, "{:?}", sink.stats());
}

fn fail_write_at(offset: u64) -> Hook {
    Hook::new(move |p| {
        if p.kind == IoKind::Write && p.offset == offset {
            Action::Fail(io::Error::from_raw_os_error(libc::EIO))
        } else {
            Action::Proceed
        }
    })
}

/// A sink that created its file `fsync`s the directory after its first successful
/// `fdatasync` (once), so the name survives a crash; a file that already existed owes nothing;
/// a failed directory `fsync` fails that sync and every later one.
pub async fn sink_created_file_syncs_its_directory<B: Backend>(b: &B) {
    let dir = tempfile::tempdir().unwrap();
    let counting = |fail: bool| {
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let s = seen.clone();
        let hook = Hook::new(move |p| {
            if p.kind != IoKind::SyncDir {
                return Action::Proceed;
            }
            s.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if fail {
                Action::Fail(io::Error::from_raw_os_error(libc::EIO))
            } else {
                Action::Proceed
            }
        });
        (seen, hook)
    };
    let path = dir.path().join("new.bin");
    let (seen, hook) = counting(false);
    let _faults = fault::inject(&path, hook);
    let sink = b.create(&path, SinkOptions::default()).await.unwrap();
    sink.append(Bytes::from(vec![1u8; 4096])).await.unwrap();
    assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), 0, "no directory fsync before a sync");
    sink.sync().await.unwrap();
    sink.append(Bytes::from(vec![2u8; 4096])).await.unwrap();
    sink.close().await.unwrap();
    assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), 1, "one directory fsync, at the first sync");

    // The file exists now: a new sink over it owes its directory nothing.
    let again = b.create(&path, SinkOptions::default()).await.unwrap();
    again.append(Bytes::from(vec![3u8; 10])).await.unwrap();
    again.close().await.unwrap();
    assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), 1, "an existing file's name is durable already");

    let path = dir.path().join("eio.bin");
    let (seen, hook) = counting(true);
    let _faults = fault::inject(&path, hook);
    let sink = b.create(&path, SinkOptions::default()).await.unwrap();
    sink.append(Bytes::from(vec![1u8; 100])).await.unwrap();
    let e = sink.sync().await.unwrap_err();
    assert!(e.to_string().contains("Input/output error"), "{e}");
    let e = sink.close().await.unwrap_err();
    assert!(e.to_string().contains("directory fsync failed earlier"), "never retried into an Ok: {e}");
    assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), 1);
}

/// A failed write reports its offset from its future and again from the flush.
pub async fn sink_write_error_reported<B: Backend>(b: &B) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.bin");
    let _faults = fault::inject(&path, fail_write_at(100));
    let sink = b.create(&path, SinkOptions::default()).await.unwrap();
    let a = sink.append(Bytes::from(vec![1u8; 100]));
    let bad = sink.append(Bytes::from(vec![2u8; 50]));
    a.await.unwrap();
    let e = bad.await.unwrap_err();
    assert!(e.to_string().contains("offset 100"), "{e}");
    match sink.flush().await.unwrap_err() {
        Error::WriteFailed { failures, .. } => {
            assert_eq!(failures.len(), 1);
            assert_eq!((failures[0].offset, failures[0].len), (100, 50));
        }
        other => panic!("expected WriteFailed, got {other}"),
    }
    sink.flush().await.expect("failures are reported once");
}

/// A flush future dropped unread gives its report back: the next flush reports the failure,
/// whether the dropped flush had fired already (its result waiting, untaken) or was still
/// waiting on the slow failing write when dropped.
pub async fn sink_dropped_flush_keeps_its_report<B: Backend>(b: &B) {
    let dir = tempfile::tempdir().unwrap();
    let slow_failure = || {
        Hook::new(|p| {
            if p.kind == IoKind::Write && p.offset == 100 {
                std::thread::sleep(Duration::from_millis(50));
                Action::Fail(io::Error::from_raw_os_error(libc::EIO))
            } else {
                Action::Proceed
            }
        })
    };
    for fired in [true, false] {
        let path = dir.path().join(format!("out-{fired}.bin"));
        let _faults = fault::inject(&path, slow_failure());
        let sink = b.create(&path, SinkOptions::default()).await.unwrap();
        sink.append(Bytes::from(vec![1u8; 100])).await.unwrap();
        let bad = sink.append(Bytes::from(vec![2u8; 100]));
        if fired {
            // The write failed before the flush was called: its result waits, untaken.
            bad.await.unwrap_err();
            drop(sink.flush());
        } else {
            // Dropped while the failing write still sleeps in its hook.
            drop(sink.flush());
            bad.await.unwrap_err();
        }
        match sink.flush().await.expect_err(&format!("the dropped flush's report is lost (fired: {fired})")) {
            Error::WriteFailed { failures, .. } => {
                let got: Vec<_> = failures.iter().map(|f| (f.offset, f.len)).collect();
                assert_eq!(got, [(100, 100)], "the dropped flush's failure, once (fired: {fired})");
            }
            other => panic!("expected WriteFailed, got {other}"),
        }
        sink.flush().await.expect("reported once");
    }
}

/// Failures of writes whose futures were dropped are reported by the flush, every one.
pub async fn sink_flush_after_dropped_futures<B: Backend>(b: &B) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.bin");
    let hook = Hook::new(|p| {
        if p.kind == IoKind::Write && (p.offset / 1000) % 3 == 1 {
            Action::Fail(io::Error::from_raw_os_error(libc::ENOSPC))
        } else {
            Action::Proceed
        }
    });
    let _faults = fault::inject(&path, hook);
    let sink = b.create(&path, SinkOptions::default()).await.unwrap();
    for i in 0..30u8 {
        drop(sink.append(Bytes::from(vec![i; 1000])));
    }
    match sink.flush().await.unwrap_err() {
        Error::WriteFailed { mut failures, .. } => {
            failures.sort_by_key(|f| f.offset);
            let offsets: Vec<u64> = failures.iter().map(|f| f.offset).collect();
            let expected: Vec<u64> = (0..30).filter(|i| i % 3 == 1).map(|i| i * 1000).collect();
            assert_eq!(offsets, expected);
            assert!(failures.iter().all(|f| f.error.raw_os_error() == Some(libc::ENOSPC)));
        }
        other => panic!("expected WriteFailed, got {other}"),
    }
    let on_disk = std::fs::read(&path).unwrap();
    for i in (0..30usize).filter(|i| i % 3 != 1) {
        assert!(on_disk[i * 1000..(i + 1) * 1000].iter().all(|&x| x == i as u8), "acknowledged write {i} intact");
    }
}

/// After `close`, writes fail with [`Error::Closed`].
pub async fn sink_closed_refuses_writes<B: Backend>(b: &B) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.bin");
    let sink = b.create(&path, SinkOptions::default()).await.unwrap();
    sink.append(Bytes::from_static(b"abc")).await.unwrap();
    sink.close().await.unwrap();
    assert!(matches!(sink.append(Bytes::from_static(b"x")).await, Err(Error::Closed { .. })));
}

/// In-flight bytes never pass the bound; queued writes still complete without being awaited.
pub async fn sink_backpressure_bound<B: Backend>(b: &B) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.bin");
    let hook = Hook::write_latency(Duration::from_millis(2));
    let opts = SinkOptions { max_in_flight_bytes: 64 * 1024, append_from: 0 };
    let _faults = fault::inject(&path, hook);
    let sink = b.create(&path, opts).await.unwrap();
    for i in 0..40u8 {
        drop(sink.append(Bytes::from(vec![i; 16 * 1024])));
        assert!(sink.stats().in_flight_bytes <= 64 * 1024);
    }
    assert!(sink.stats().queued > 0, "the bound must have queued writes");
    sink.ready().await;
    sink.flush().await.unwrap();
    let s = sink.stats();
    assert!(s.peak_in_flight_bytes <= 64 * 1024, "{s:?}");
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(on_disk.len(), 40 * 16 * 1024);
    assert!(on_disk.chunks(16 * 1024).enumerate().all(|(i, c)| c.iter().all(|&x| x == i as u8)));
}

#[doc(hidden)]
pub fn pread_reference(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    File::open(path).unwrap().read_exact_at(&mut buf, offset).unwrap();
    buf
}

/// Adaptive mode (when the backend turned it on): a warm table is served from the cache without
/// reads; a half-evicted one mixes resident rows and reads; the bytes are right either way.
pub async fn adaptive_resident_and_missing_rows<B: Backend>(b: &B) {
    let mut rng = StdRng::seed_from_u64(seed());
    let rows = 2048u64;
    let (_d, path, file) = random_file(4096 * rows as usize, &mut rng);
    std::fs::read(&path).expect("warm the table");
    let table = b.open(&path).await.unwrap().rows(RowLayout { base: 0, row_size: 4096, rows: None }).unwrap();
    let ids: Vec<u64> = (0..500).map(|_| rng.gen_range(0..rows)).collect();
    let fut = table.gather(&ids).unwrap();
    let got = fut.await.unwrap();
    assert_eq!(&got[..], &reference_rows(&file, 4096, &ids)[..]);
    let warm = table.stats();
    assert_eq!(table.source().is_adaptive(), b.adaptive(), "the backend's default adaptive mode");
    if !b.adaptive() {
        return;
    }
    assert_eq!(warm.resident, 500, "every row of a warm table is served resident: {warm:?}");
    assert_eq!(warm.reads, 0, "{warm:?}");
    // Evict the second half of the file: those rows must be read. (The source's mapping keeps the
    // pages it copied mapped, and eviction skips mapped pages; memory pressure would not.)
    table.source().unmap_resident();
    let f = File::open(&path).unwrap();
    let half = (rows / 2 * 4096) as libc::off_t;
    // SAFETY: advice on a descriptor we own.
    unsafe { libc::posix_fadvise(std::os::fd::AsRawFd::as_raw_fd(&f), half, half, libc::POSIX_FADV_DONTNEED) };
    let ids: Vec<u64> = (0..500).map(|_| rng.gen_range(0..rows)).collect();
    let got = table.gather(&ids).unwrap().await.unwrap();
    assert_eq!(&got[..], &reference_rows(&file, 4096, &ids)[..]);
    let after = table.stats();
    let resident = after.resident - warm.resident;
    let low = ids.iter().filter(|&&r| r < rows / 2).count() as u64;
    assert!(resident <= low && resident + 20 >= low, "{resident} resident of {low} rows in the warm half");
    assert!(after.reads > 0, "the evicted half is read: {after:?}");
    wait_full(b, table.source()).await;
}

/// Adaptive mode: rows whose pages the source maps since an earlier copy (a warm table's
/// repeated rows) are copied in request order without a plan: duplicates and any order, ranges
/// too, settled before the call returns. Beside rows not mapped, only those are planned. A file
/// cut since is planned again, and a row past the cut fails with a short read naming it.
pub async fn adaptive_mapped_rows_skip_the_plan<B: Backend>(b: &B) {
    let mut rng = StdRng::seed_from_u64(seed());
    let (rows, rs) = (4096u64, 90u64);
    let (_d, path, file) = random_file((rows * rs) as usize, &mut rng);
    std::fs::read(&path).expect("warm the table");
    let table = b.open(&path).await.unwrap().rows(RowLayout { base: 0, row_size: rs, rows: None }).unwrap();
    if !b.adaptive() {
        return;
    }
    let mut ids: Vec<u64> = (0..300).map(|_| rng.gen_range(0..rows / 2)).collect();
    ids.extend_from_within(..50);
    let got = table.gather(&ids).unwrap().await.unwrap();
    assert_eq!(&got[..], &reference_rows(&file, rs as usize, &ids)[..]);

    let fut = table.gather(&ids).unwrap();
    let s = fut.stats();
    assert!(fut.is_settled(), "served in the call: {s:?}");
    assert_eq!((s.reads_planned, s.resident, s.requested), (0, 350, 350), "{s:?}");
    assert_eq!((s.unique, s.useful_bytes), (350, 350 * rs), "not deduplicated: {s:?}");
    assert_eq!(&fut.await.unwrap()[..], &reference_rows(&file, rs as usize, &ids)[..]);
    let ranges: Vec<std::ops::Range<u64>> = ids.iter().rev().map(|&id| id * rs + 7..id * rs + 61).collect();
    let fut = table.source().gather_ranges(&ranges).unwrap();
    assert_eq!(fut.stats().reads_planned, 0, "{:?}", fut.stats());
    for (r, b) in ranges.iter().zip(fut.await.unwrap()) {
        assert_eq!(&b[..], &file[r.start as usize..r.end as usize]);
    }

    // Rows of the table's second half are cached but not mapped: only they are planned (and
    // served from the cache after a check), the rest copied as before.
    let mut mixed = ids.clone();
    mixed.extend((0..10).map(|_| rng.gen_range(rows / 2 + 50..rows)));
    let fut = table.gather(&mixed).unwrap();
    let s = fut.stats();
    assert!((1..=10).contains(&s.reads_planned) && s.resident == 360, "{s:?}");
    let new_rows = mixed[350..].iter().collect::<std::collections::HashSet<_>>().len() as u64;
    let unique = 350 + new_rows; // the mapped rows were copied, not deduplicated by a plan
    assert_eq!((s.unique, s.useful_bytes), (unique, unique * rs), "{s:?}");
    assert_eq!(&fut.await.unwrap()[..], &reference_rows(&file, rs as usize, &mixed)[..]);

    let cut = rows / 2 * rs + 40;
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(cut).unwrap();
    let kept: Vec<u64> = mixed.iter().copied().filter(|&id| (id + 1) * rs <= cut).collect();
    let got = table.gather(&kept).unwrap().await.unwrap();
    assert_eq!(&got[..], &reference_rows(&file, rs as usize, &kept)[..]);
    match table.gather(&mixed).unwrap().await {
        Err(Error::ShortRead { target: Target::Row(row), .. }) => {
            assert!(mixed.contains(&row) && (row + 1) * rs > cut, "the short read names row {row}, not one cut");
        }
        other => panic!("a row past the cut: {:?}", other.map(|b| b.len())),
    }
    wait_full(b, table.source()).await;
}

/// Adaptive mode on a cold table: every row is read around the page cache, so gathers (one
/// prepared off the caller's thread, one in the call) leave the file's cached pages at 0.
pub async fn adaptive_cold_gather_adds_no_page_cache<B: Backend>(b: &B) {
    let mut rng = StdRng::seed_from_u64(seed());
    let (rows, rs) = (2048u64, 4096usize);
    let (_d, path, file) = random_file(rs * rows as usize, &mut rng);
    let cached = || crate::sys::resident_bytes(&File::open(&path).unwrap()).expect("count cached pages");
    assert_eq!(cached(), 0, "the table starts evicted");
    let table = b.open(&path).await.unwrap().rows(RowLayout { base: 0, row_size: rs as u64, rows: None }).unwrap();
    for n in [crate::prepare::PREPARE_ELSEWHERE + 100, 300] {
        let ids: Vec<u64> = (0..n).map(|_| rng.gen_range(0..rows)).collect();
        let got = table.gather(&ids).unwrap().await.unwrap();
        assert_eq!(&got[..], &reference_rows(&file, rs, &ids)[..]);
    }
    let s = table.stats();
    assert!(s.reads > 0 && s.resident == 0, "{s:?}");
    assert_eq!(cached(), 0, "a cold gather added pages to the page cache: {s:?}");
    wait_full(b, table.source()).await;
}

/// Adaptive mode: pages evicted (by another thread) between the residency check and the copy
/// never give a wrong byte; the faults they cost are counted.
pub async fn adaptive_eviction_races_the_copy<B: Backend>(b: &B) {
    let mut rng = StdRng::seed_from_u64(seed());
    let rows = 1024u64;
    let (_d, path, file) = random_file(4096 * rows as usize, &mut rng);
    let table = b.open(&path).await.unwrap().rows(RowLayout { base: 0, row_size: 4096, rows: None }).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (p, s) = (path.clone(), stop.clone());
    let churn = std::thread::spawn(move || {
        // Alternately warm and evict the file while gathers run.
        while !s.load(std::sync::atomic::Ordering::Relaxed) {
            let _ = std::fs::read(&p);
            let _ = crate::sys::evict(&p);
        }
    });
    for _ in 0..40 {
        let ids: Vec<u64> = (0..200).map(|_| rng.gen_range(0..rows)).collect();
        let got = table.gather(&ids).unwrap().await.unwrap();
        assert_eq!(&got[..], &reference_rows(&file, 4096, &ids)[..]);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    churn.join().unwrap();
    let s = table.stats();
    eprintln!("under churn: {} rows resident, {} reads", s.resident, s.reads);
    wait_full(b, table.source()).await;
}
