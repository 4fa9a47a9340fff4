//! Parquet through eagerio: a multi-row-group file written with `EagerArrowWriter` through an
//! eager sink, read back with `ParquetRecordBatchStreamBuilder` through an eager gather reader,
//! batch by batch; validated by pyarrow as an independent reader; errors keep eagerio's message.

use std::{io, path::Path, process::Command, sync::Arc};

use arrow_array::{ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use eagerio_core::{
    backend::ReadEngine,
    fault::{self, Action, Hook, IoKind},
    mem::{MemEngine, MemFile},
    DataSink, Sink, SinkOptions, Source,
};
use eagerio_parquet::{EagerArrowWriter, EagerReader};
use eagerio_tokio::{TokioEngine, TokioOptions, TokioWriter, WriterOptions};
use futures::TryStreamExt;
use parquet::{arrow::ParquetRecordBatchStreamBuilder, basic::Compression, file::properties::WriterProperties};

const ROWS: usize = 10_000;
const ROW_GROUP: usize = 1_000;
const WRITE_BATCH: usize = 1_500;

/// A table with an int64 id, a nullable int32, a float and a string column.
fn table() -> RecordBatch {
    let id: ArrayRef = Arc::new(Int64Array::from_iter_values((0..ROWS as i64).map(|i| i * 7 - 3)));
    let small: ArrayRef =
        Arc::new(Int32Array::from_iter((0..ROWS as i32).map(|i| if i % 5 == 0 { None } else { Some(i % 1000) })));
    let value: ArrayRef = Arc::new(Float64Array::from_iter_values((0..ROWS).map(|i| i as f64 * 0.25)));
    let name: ArrayRef = Arc::new(StringArray::from_iter_values((0..ROWS).map(|i| format!("row-{i}"))));
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("small", DataType::Int32, true),
        Field::new("value", DataType::Float64, false),
        Field::new("name", DataType::Utf8, false),
    ]);
    RecordBatch::try_new(Arc::new(schema), vec![id, small, value, name]).unwrap()
}

fn props() -> WriterProperties {
    WriterProperties::builder()
        .set_max_row_group_row_count(Some(ROW_GROUP))
        .set_compression(Compression::SNAPPY)
        .build()
}

/// Writes `table()` to `sink` in batches that straddle row groups, in 16 KiB appends.
async fn write_table<S: DataSink + Send + Sync + 'static>(sink: S) -> parquet::file::metadata::ParquetMetaData {
    let t = table();
    let opts = eagerio_parquet::EagerWriterOptions::default().block_bytes(16 << 10);
    let mut w = EagerArrowWriter::try_new_with_options(sink, t.schema(), Some(props()), opts).unwrap();
    let mut at = 0;
    while at < ROWS {
        let n = WRITE_BATCH.min(ROWS - at);
        w.write_async(&t.slice(at, n)).await.unwrap();
        at += n;
    }
    w.close_async().await.unwrap()
}

/// Reads the file back through the eager reader and compares every batch with the matching
/// slice of the table. Returns the reader's counters.
async fn read_and_compare<E: ReadEngine + Send + Sync + 'static>(source: Source<E>) -> eagerio_parquet::ReaderStats {
    let reader = EagerReader::new(source);
    let probe = reader.clone();
    let builder = ParquetRecordBatchStreamBuilder::new(reader).await.unwrap();
    assert_eq!(builder.metadata().num_row_groups(), ROWS / ROW_GROUP);
    let stream = builder.with_batch_size(700).build().unwrap();
    let batches: Vec<RecordBatch> = stream.try_collect().await.unwrap();
    let t = table();
    let mut at = 0;
    for (i, b) in batches.iter().enumerate() {
        assert_eq!(b, &t.slice(at, b.num_rows()), "batch {i} (rows {at}..) differs");
        at += b.num_rows();
    }
    assert_eq!(at, ROWS, "rows read back");
    let stats = probe.stats();
    // Every call was exactly one gather: nothing fell back to sequential `get_bytes`.
    assert_eq!(probe.source().stats().gathers, stats.calls, "gathers vs reader calls: {stats:?}");
    stats
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_roundtrip_tokio_sink_and_gather() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.parquet");
    let sink = TokioWriter::create(&path, WriterOptions::default()).await.unwrap();
    let meta = write_table(sink.clone()).await;
    assert_eq!(meta.num_row_groups(), ROWS / ROW_GROUP);
    // The sink wrote every byte and was closed by `close_async`.
    assert_eq!(sink.stats().bytes, std::fs::metadata(&path).unwrap().len());
    assert!(sink.append(bytes::Bytes::from_static(b"x")).await.is_err(), "close_async closes the sink");

    let source = TokioEngine::open(&path, TokioOptions::default()).await.unwrap();
    let stats = read_and_compare(source).await;
    // One gather for the footer (it fits the prefetch) and one per row group.
    assert_eq!(stats.calls, 1 + (ROWS / ROW_GROUP) as u64, "{stats:?}");
    // The footer's one range, and each row-group gather carried all four column chunks.
    assert_eq!(stats.ranges, 1 + 4 * (ROWS / ROW_GROUP) as u64, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_roundtrip_slow_sink_small_in_flight_bound() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wb.parquet");
    let _slow = fault::inject(&path, Hook::write_latency(std::time::Duration::from_millis(3)));
    let opts = WriterOptions::default().sink(SinkOptions::default().max_in_flight_bytes(64 << 10));
    let sink = TokioWriter::create(&path, opts).await.unwrap();
    write_table(sink.clone()).await;
    let st = sink.stats();
    assert_eq!((st.in_flight, st.queued, st.failed), (0, 0, 0), "close waited for every write");
    assert!(st.writes > 4, "{st:?}");
    assert!(st.peak_in_flight_bytes <= 64 << 10, "the splicer kept to the sink's bound: {st:?}");
    assert_eq!(st.bytes, std::fs::metadata(&path).unwrap().len());
    read_and_compare(TokioEngine::open(&path, TokioOptions::default()).await.unwrap()).await;
}

#[test]
fn parquet_roundtrip_in_memory_backend() {
    let file = MemFile::default();
    let sink =
        Sink::new(MemEngine::new(file.clone(), "mem.parquet", 1 << 20).unwrap(), SinkOptions::default()).unwrap();
    futures::executor::block_on(write_table(sink));
    assert_eq!(&file.contents()[..4], b"PAR1");
    let source = Source::new(MemEngine::new(file, "mem.parquet", 1 << 20).unwrap());
    futures::executor::block_on(read_and_compare(source));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_reader_short_file_reports_eagerio_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.parquet");
    write_table(TokioWriter::create(&path, WriterOptions::default()).await.unwrap()).await;
    let source = TokioEngine::open(&path, TokioOptions::default()).await.unwrap();
    // The file shrinks after the source saw its length: the footer read comes back short.
    let len = source.info().len;
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len / 2).unwrap();
    let err = ParquetRecordBatchStreamBuilder::new(EagerReader::new(source)).await.err().expect("a short read");
    let msg = err.to_string();
    assert!(msg.contains("short read of range #0"), "{msg}");
    assert!(msg.contains("cut.parquet"), "{msg}");
    let inner = std::error::Error::source(&err).and_then(|s| s.downcast_ref::<eagerio_core::Error>());
    assert!(matches!(inner, Some(eagerio_core::Error::ShortRead { .. })), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_reader_refuses_ranges_past_the_end_before_io() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("small.parquet");
    write_table(TokioWriter::create(&path, WriterOptions::default()).await.unwrap()).await;
    let mut reader = EagerReader::new(TokioEngine::open(&path, TokioOptions::default()).await.unwrap());
    let len = reader.source().info().len;
    let err = parquet::arrow::async_reader::AsyncFileReader::get_byte_ranges(&mut reader, vec![0..4, len - 2..len + 5])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("range #1"), "{err}");
    assert!(err.to_string().contains("past the end of the file"), "{err}");
    assert_eq!(reader.source().stats().gathers, 0, "refused before any I/O");
    // Empty ranges need no I/O and come back empty, in place.
    let got = parquet::arrow::async_reader::AsyncFileReader::get_byte_ranges(&mut reader, vec![4..4, 0..4, 9..9])
        .await
        .unwrap();
    assert_eq!(got, vec![bytes::Bytes::new(), bytes::Bytes::from_static(b"PAR1"), bytes::Bytes::new()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_writer_failure_carries_eagerio_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("eio.parquet");
    let hook = Hook::new(|p| {
        if p.kind == IoKind::Write && p.offset > 0 {
            Action::Fail(io::Error::from_raw_os_error(libc::EIO))
        } else {
            Action::Proceed
        }
    });
    let _faults = fault::inject(&path, hook);
    let sink = TokioWriter::create(&path, WriterOptions::default()).await.unwrap();
    let t = table();
    let opts = eagerio_parquet::EagerWriterOptions::default().block_bytes(16 << 10);
    let mut w = EagerArrowWriter::try_new_with_options(sink, t.schema(), Some(props()), opts).unwrap();
    let mut failed = None;
    for at in (0..ROWS).step_by(WRITE_BATCH) {
        if let Err(e) = w.write_async(&t.slice(at, WRITE_BATCH.min(ROWS - at))).await {
            failed = Some(e);
            break;
        }
    }
    let err = match failed {
        Some(e) => e,
        None => w.close_async().await.expect_err("the writes failed"),
    };
    let msg = err.to_string();
    assert!(msg.contains("writing") && msg.contains("eio.parquet"), "{msg}");
    assert!(msg.contains("Input/output error"), "{msg}");
    // The eagerio error is still reachable through the chain.
    let mut source = std::error::Error::source(&err);
    while let Some(s) = source {
        if s.is::<eagerio_core::Error>() {
            return;
        }
        source = s.source();
    }
    panic!("no eagerio_core::Error in the chain of {err:?}");
}

/// Whether pyarrow is usable. Without it the test skips with a reason, unless `CI` is set.
fn pyarrow_available() -> bool {
    let ok = Command::new("python3").args(["-c", "import pyarrow.parquet"]).output().is_ok_and(|o| o.status.success());
    if !ok {
        if std::env::var_os("CI").is_some() {
            panic!("pyarrow is required in CI (pip install pyarrow)");
        }
        eprintln!("SKIPPED parquet_pyarrow_reads_row_count_and_checksum: python3 with pyarrow not found");
    }
    ok
}

fn pyarrow_summary(path: &Path) -> String {
    let script = r#"
import sys, pyarrow.parquet as pq, pyarrow.compute as pc
f = pq.ParquetFile(sys.argv[1])
t = f.read()
print(t.num_rows, f.num_row_groups, pc.sum(t.column("id")).as_py(), pc.count(t.column("small")).as_py())
"#;
    let out = Command::new("python3").arg("-c").arg(script).arg(path).output().unwrap();
    assert!(out.status.success(), "pyarrow failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_pyarrow_reads_row_count_and_checksum() {
    if !pyarrow_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("py.parquet");
    write_table(TokioWriter::create(&path, WriterOptions::default()).await.unwrap()).await;
    let t = table();
    let ids = t.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
    let sum: i64 = ids.values().iter().sum();
    let non_null = ROWS - t.column(1).null_count();
    assert_eq!(pyarrow_summary(&path), format!("{ROWS} {} {sum} {non_null}", ROWS / ROW_GROUP));
}
