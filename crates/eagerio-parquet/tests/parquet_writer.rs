//! EagerArrowWriter: the same bytes as parquet's ArrowWriter on every sink, its memory bounds,
//! bad input refused before any I/O, every failure reported (and never turned into an `Ok`), a
//! dropped writer leaving nothing a reader takes for complete, atomic commits made durable.

use std::{
    io,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
};

use arrow_array::{
    builder::{ListBuilder, StringDictionaryBuilder},
    types::Int32Type,
    ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray, StructArray,
};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};
use bytes::Bytes;
use eagerio_core::{
    fault::{self, Action, Hook, IoKind},
    DataSink, FlushFuture, ReadyFuture, SinkStats, WriteFuture,
};
use eagerio_parquet::{AtomicFile, EagerArrowWriter, EagerWriterOptions, WriterFailed};
use eagerio_tokio::{TokioWriter, WriterOptions};
use parquet::{
    arrow::{arrow_reader::ParquetRecordBatchReaderBuilder, ArrowWriter},
    basic::Compression,
    errors::ParquetError,
    file::properties::WriterProperties,
};

/// Ten columns of every shape the encoders treat apart: plain and nullable primitives, strings,
/// a dictionary, a list and a struct (two leaves).
fn batch(rows: usize, seed: usize) -> RecordBatch {
    let n = |i: usize| (i + seed) as i64;
    let id: ArrayRef = Arc::new(Int64Array::from_iter_values((0..rows).map(|i| n(i) * 7 - 3)));
    let small: ArrayRef = Arc::new(Int32Array::from_iter((0..rows).map(|i| {
        if (i + seed).is_multiple_of(5) {
            None
        } else {
            Some((n(i) % 1000) as i32)
        }
    })));
    let value: ArrayRef = Arc::new(Float64Array::from_iter_values((0..rows).map(|i| n(i) as f64 * 0.25)));
    let name: ArrayRef = Arc::new(StringArray::from_iter_values((0..rows).map(|i| format!("row-{}", n(i)))));
    let mut dict = StringDictionaryBuilder::<Int32Type>::new();
    for i in 0..rows {
        dict.append_value(["red", "green", "blue", "cyan"][(i + seed) % 4]);
    }
    let color: ArrayRef = Arc::new(dict.finish());
    let mut list = ListBuilder::new(arrow_array::builder::Int64Builder::new());
    for i in 0..rows {
        for k in 0..(i + seed) % 3 {
            list.values().append_value(n(i) + k as i64);
        }
        list.append(!(i + seed).is_multiple_of(7));
    }
    let tags: ArrayRef = Arc::new(list.finish());
    let point: ArrayRef = Arc::new(StructArray::from(vec![
        (
            Arc::new(Field::new("x", DataType::Float64, false)),
            Arc::new(Float64Array::from_iter_values((0..rows).map(|i| n(i) as f64))) as ArrayRef,
        ),
        (
            Arc::new(Field::new("y", DataType::Int32, true)),
            Arc::new(Int32Array::from_iter((0..rows).map(|i| (i % 2 == 0).then_some(i as i32)))) as ArrayRef,
        ),
    ]));
    RecordBatch::try_new(schema(), vec![id, small, value, name, color, tags, point]).unwrap()
}

fn schema() -> SchemaRef {
    let point = Fields::from(vec![Field::new("x", DataType::Float64, false), Field::new("y", DataType::Int32, true)]);
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("small", DataType::Int32, true),
        Field::new("value", DataType::Float64, false),
        Field::new("name", DataType::Utf8, false),
        Field::new_dictionary("color", DataType::Int32, DataType::Utf8, false),
        Field::new_list("tags", Field::new_list_field(DataType::Int64, true), true),
        Field::new_struct("point", point, false),
    ]))
}

fn props(row_group: Option<usize>) -> WriterProperties {
    WriterProperties::builder().set_max_row_group_row_count(row_group).set_compression(Compression::SNAPPY).build()
}

/// Batches of uneven sizes, so that row groups are cut inside batches.
fn batches() -> Vec<RecordBatch> {
    [1500, 700, 2300, 1, 999, 4500]
        .iter()
        .scan(0, |at, &n| {
            let b = batch(n, *at);
            *at += n;
            Some(b)
        })
        .collect()
}

fn arrow_writer_bytes(batches: &[RecordBatch], props: WriterProperties) -> Vec<u8> {
    let mut w = ArrowWriter::try_new(Vec::new(), schema(), Some(props)).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.into_inner().unwrap()
}

fn small_opts() -> EagerWriterOptions {
    // Small blocks and queue: many appends, and the bounds in play.
    EagerWriterOptions::default().threads(3).block_bytes(64 << 10).max_queued_bytes(256 << 10)
}

fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn writer_bytes_match_arrow_writer_on_the_tokio_sink() {
    let rt = tokio_rt();
    let _guard = rt.enter();
    let dir = tempfile::tempdir().unwrap();
    for (i, row_group) in [Some(1000), Some(4096), None].into_iter().enumerate() {
        let path = dir.path().join(format!("t{i}.parquet"));
        let sink = TokioWriter::create_blocking(&path, WriterOptions::default()).unwrap();
        let mut w =
            EagerArrowWriter::try_new_with_options(sink, schema(), Some(props(row_group)), small_opts()).unwrap();
        for b in batches() {
            w.write(&b).unwrap();
        }
        let stats = w.stats();
        let meta = w.close().unwrap();
        let want = arrow_writer_bytes(&batches(), props(row_group));
        let got = std::fs::read(&path).unwrap();
        assert!(got == want, "row groups of {row_group:?}: {} bytes written, ArrowWriter's {}", got.len(), want.len());
        let rows: usize = batches().iter().map(RecordBatch::num_rows).sum();
        assert_eq!(meta.file_metadata().num_rows() as usize, rows);
        assert!(stats.peak_row_groups <= 2, "{stats:?}");
    }
}

#[test]
fn writer_bytes_match_arrow_writer_in_async_calls_with_one_row_group_in_flight() {
    let rt = tokio_rt();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.parquet");
        let sink = TokioWriter::create(&path, WriterOptions::default()).await.unwrap();
        let opts = small_opts().row_groups_in_flight(1).threads(2);
        let mut w = EagerArrowWriter::try_new_with_options(sink, schema(), Some(props(Some(1000))), opts).unwrap();
        for b in batches() {
            w.write_async(&b).await.unwrap();
        }
        let stats = w.stats();
        w.close_async().await.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), arrow_writer_bytes(&batches(), props(Some(1000))));
        assert_eq!(stats.peak_row_groups, 1, "one row group at a time: {stats:?}");
    });
}

#[test]
fn writer_memory_stays_within_its_bounds() {
    let rt = tokio_rt();
    let _guard = rt.enter();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.parquet");
    let queue = 128 << 10;
    let opts = EagerWriterOptions::default().threads(2).max_queued_bytes(queue).block_bytes(32 << 10);
    let sink = TokioWriter::create_blocking(&path, WriterOptions::default()).unwrap();
    let mut w = EagerArrowWriter::try_new_with_options(sink, schema(), Some(props(Some(2000))), opts).unwrap();
    let mut largest = 0;
    let mut row_group_bytes = 0;
    for r in 0..40 {
        let b = batch(1000, r * 1000);
        largest = largest.max(b.get_array_memory_size());
        w.write(&b).unwrap();
        row_group_bytes = row_group_bytes.max(w.stats().peak_buffered_bytes);
    }
    let stats = w.stats();
    let meta = w.close().unwrap();
    assert_eq!(meta.num_row_groups(), 20);
    assert!(stats.peak_row_groups <= 2, "{stats:?}");
    // A batch is queued only while the queue is under its bound.
    assert!(stats.peak_queued_bytes <= queue + largest, "{stats:?}, largest batch {largest}");
    // Two row groups' encoders at most, each holding about what ArrowWriter holds for one full
    // row group (measured the same way); far below the 20 row groups written.
    let mut one = ArrowWriter::try_new(Vec::new(), schema(), Some(props(Some(2000)))).unwrap();
    one.write(&batch(1999, 0)).unwrap();
    let one_group = one.memory_size();
    assert!(stats.peak_buffered_bytes <= 2 * one_group * 11 / 10, "{stats:?}, one row group buffers {one_group}");
}

#[test]
fn writer_refuses_bad_input_before_any_io_and_keeps_serving() {
    let rt = tokio_rt();
    let _guard = rt.enter();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.parquet");
    let by_bytes = WriterProperties::builder().set_max_row_group_bytes(Some(1 << 20)).build();
    let sink = TokioWriter::create_blocking(&path, WriterOptions::default()).unwrap();
    let err = EagerArrowWriter::try_new(sink.clone(), schema(), Some(by_bytes)).unwrap_err();
    assert!(err.to_string().contains("max_row_group_bytes"), "{err}");
    let err =
        EagerArrowWriter::try_new_with_options(sink.clone(), schema(), None, EagerWriterOptions::default().threads(0))
            .unwrap_err();
    assert!(err.to_string().contains("threads"), "{err}");
    let odd = EagerWriterOptions::default().block_bytes(5000);
    let err = EagerArrowWriter::try_new_with_options(sink.clone(), schema(), None, odd).unwrap_err();
    assert!(err.to_string().contains("multiple of 4096"), "{err}");
    assert_eq!(sink.stats().writes, 0, "refused before any I/O");

    let mut w = EagerArrowWriter::try_new(sink, schema(), Some(props(Some(1000)))).unwrap();
    let wrong = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int32, false)])),
        vec![Arc::new(Int32Array::from(vec![1])) as ArrayRef],
    )
    .unwrap();
    let err = w.write(&wrong).unwrap_err();
    assert!(err.to_string().contains("1 columns"), "{err}");
    // The refusal left the writer whole: the next batches make the same file ArrowWriter does.
    for b in batches() {
        w.write(&b).unwrap();
    }
    w.close().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), arrow_writer_bytes(&batches(), props(Some(1000))));
}

#[test]
fn writer_encoder_error_poisons_every_later_call() {
    let rt = tokio_rt();
    let _guard = rt.enter();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("null.parquet");
    // A null where the schema says non-nullable: the encoder refuses it.
    let strict = Arc::new(Schema::new(vec![Field::new("v", DataType::Int32, false)]));
    let loose = Arc::new(Schema::new(vec![Field::new("v", DataType::Int32, true)]));
    let nulls = RecordBatch::try_new(loose, vec![Arc::new(Int32Array::from(vec![Some(1), None])) as ArrayRef]).unwrap();
    let sink = TokioWriter::create_blocking(&path, WriterOptions::default()).unwrap();
    let mut w = EagerArrowWriter::try_new(sink, strict.clone(), None).unwrap();
    let ok = RecordBatch::try_new(strict, vec![Arc::new(Int32Array::from(vec![3, 4])) as ArrayRef]).unwrap();
    let mut first = w.write(&nulls).err();
    while first.is_none() {
        // The encoder fails on its own thread; a later call reports it.
        std::thread::sleep(std::time::Duration::from_millis(5));
        first = w.write(&ok).err();
    }
    let first = first.unwrap().to_string();
    let again = w.write(&ok).unwrap_err().to_string();
    assert_eq!(first, again, "the same first failure each time");
    let err = w.close().unwrap_err();
    assert!(std::error::Error::source(&err).is_some_and(|s| s.is::<WriterFailed>()), "{err:?}");
}

/// A hook failing every write at or past `from`, or every `fdatasync`.
fn failing(kind: IoKind, from: u64) -> Hook {
    Hook::new(move |p| {
        if p.kind == kind && p.offset >= from {
            Action::Fail(io::Error::from_raw_os_error(if kind == IoKind::Sync { libc::EIO } else { libc::ENOSPC }))
        } else {
            Action::Proceed
        }
    })
}

/// Writes 30 batches of 1,000 rows, then closes: the first error, from a write or the close.
fn write_until_it_fails<S: DataSink + Send + Sync + 'static>(mut w: EagerArrowWriter<S>) -> ParquetError {
    for r in 0..30 {
        if let Err(e) = w.write(&batch(1000, r * 1000)) {
            return e;
        }
    }
    w.close().expect_err("a failure was injected")
}

#[test]
fn writer_failed_write_mid_file_is_reported_and_drained() {
    let rt = tokio_rt();
    let _guard = rt.enter();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("enospc.parquet");
    let _faults = fault::inject(&path, failing(IoKind::Write, 256 << 10));
    let sink = TokioWriter::create_blocking(&path, WriterOptions::default()).unwrap();
    let w =
        EagerArrowWriter::try_new_with_options(sink.clone(), schema(), Some(props(Some(1000))), small_opts()).unwrap();
    let err = write_until_it_fails(w);
    let msg = format!("{err}");
    assert!(msg.contains("No space left on device") && msg.contains("enospc.parquet"), "{msg}");
    let st = sink.stats();
    assert_eq!((st.in_flight, st.queued), (0, 0), "every write finished before the error was returned: {st:?}");
}

#[test]
fn writer_failed_fsync_is_never_an_ok() {
    let rt = tokio_rt();
    let _guard = rt.enter();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("eio.parquet");
    let _faults = fault::inject(&path, failing(IoKind::Sync, 0));
    let sink = TokioWriter::create_blocking(&path, WriterOptions::default()).unwrap();
    let mut w = EagerArrowWriter::try_new(sink, schema(), None).unwrap();
    w.write(&batch(3000, 0)).unwrap();
    let err = w.close().expect_err("the fdatasync failed");
    assert!(err.to_string().contains("Input/output error"), "{err}");
}

/// A sink whose appends panic from the `n`-th on: the panic reaches the splicer's thread.
struct PanickingSink {
    inner: eagerio_core::Sink<eagerio_core::mem::MemEngine>,
    appends: AtomicUsize,
    from: usize,
}

impl DataSink for PanickingSink {
    fn write_at(&self, offset: u64, data: Bytes) -> WriteFuture {
        self.inner.write_at(offset, data)
    }
    fn append(&self, data: Bytes) -> WriteFuture {
        if self.appends.fetch_add(1, Ordering::Relaxed) >= self.from {
            panic!("append {} refused on purpose", self.from);
        }
        self.inner.append(data)
    }
    fn flush(&self) -> FlushFuture {
        self.inner.flush()
    }
    fn sync(&self) -> FlushFuture {
        self.inner.sync()
    }
    fn close(&self) -> FlushFuture {
        self.inner.close()
    }
    fn ready(&self) -> ReadyFuture {
        self.inner.ready()
    }
    fn stats(&self) -> SinkStats {
        self.inner.stats()
    }
}

#[test]
fn writer_panic_on_its_threads_is_an_error_not_a_hang() {
    let engine = eagerio_core::mem::MemEngine::new(Default::default(), "panic.parquet", 1 << 20).unwrap();
    let inner = eagerio_core::Sink::new(engine, Default::default()).unwrap();
    let sink = PanickingSink { inner, appends: AtomicUsize::new(0), from: 3 };
    let w = EagerArrowWriter::try_new_with_options(sink, schema(), Some(props(Some(1000))), small_opts()).unwrap();
    let err = write_until_it_fails(w);
    assert!(err.to_string().contains("panicked") && err.to_string().contains("refused on purpose"), "{err}");
}

#[test]
fn writer_dropped_mid_file_leaves_no_complete_file() {
    let rt = tokio_rt();
    let _guard = rt.enter();
    let dir = tempfile::tempdir().unwrap();
    // Plain: the file has no footer, and a reader refuses it.
    let path = dir.path().join("cut.parquet");
    let sink = TokioWriter::create_blocking(&path, WriterOptions::default()).unwrap();
    let mut w =
        EagerArrowWriter::try_new_with_options(sink.clone(), schema(), Some(props(Some(1000))), small_opts()).unwrap();
    for r in 0..10 {
        w.write(&batch(1000, r * 1000)).unwrap();
    }
    drop(w);
    rt.block_on(sink.flush()).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    assert!(ParquetRecordBatchReaderBuilder::try_new(file).is_err(), "a file without its footer is refused");

    // Atomic: the temporary file is removed and the target never appears.
    let target = AtomicFile::new(dir.path().join("atomic.parquet")).unwrap();
    let temp = target.temp_path().to_path_buf();
    let sink = TokioWriter::create_blocking(&temp, WriterOptions::default()).unwrap();
    let mut w = EagerArrowWriter::try_new_with_options(sink, schema(), Some(props(Some(1000))), small_opts())
        .unwrap()
        .commit_to(target);
    for r in 0..10 {
        w.write(&batch(1000, r * 1000)).unwrap();
    }
    assert!(temp.exists());
    drop(w);
    assert!(!temp.exists(), "the temporary file is removed");
    assert!(!dir.path().join("atomic.parquet").exists(), "the target never appears");
}

#[test]
fn writer_atomic_commit_renames_and_syncs_the_directory() {
    let rt = tokio_rt();
    let _guard = rt.enter();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("done.parquet");
    let dir_syncs = Arc::new(AtomicUsize::new(0));
    let seen = dir_syncs.clone();
    let _hook = fault::inject(
        &path,
        Hook::new(move |p| {
            if p.kind == IoKind::SyncDir {
                seen.fetch_add(1, Ordering::Relaxed);
            }
            Action::Proceed
        }),
    );
    let target = AtomicFile::new(&path).unwrap();
    let sink = TokioWriter::create_blocking(target.temp_path(), WriterOptions::default()).unwrap();
    let mut w = EagerArrowWriter::try_new(sink, schema(), Some(props(Some(1000)))).unwrap().commit_to(target);
    for b in batches() {
        w.write(&b).unwrap();
        assert!(!path.exists(), "nothing at the target before close");
    }
    w.close().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), arrow_writer_bytes(&batches(), props(Some(1000))));
    assert_eq!(dir_syncs.load(Ordering::Relaxed), 1, "the rename was made durable");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers, vec![std::ffi::OsString::from("done.parquet")]);
}

#[test]
fn writer_bytes_match_arrow_writer_on_the_uring_sink() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("u.parquet");
    let sink = eagerio_uring::UringWriter::create_blocking(&path, eagerio_uring::WriterOptions::default()).unwrap();
    let mut w = EagerArrowWriter::try_new_with_options(sink, schema(), Some(props(Some(1000))), small_opts()).unwrap();
    for b in batches() {
        w.write(&b).unwrap();
    }
    w.close().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), arrow_writer_bytes(&batches(), props(Some(1000))));
}

#[test]
fn writer_bytes_match_arrow_writer_on_the_glommio_sink() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.parquet");
    let p = path.clone();
    eagerio_glommio::block_on(async move {
        let sink = eagerio_glommio::GlommioWriter::create(&p, eagerio_glommio::WriterOptions::default()).await.unwrap();
        let mut w = EagerArrowWriter::try_new_local(sink, schema(), Some(props(Some(1000))), small_opts()).unwrap();
        for b in batches() {
            w.write_async(&b).await.unwrap();
        }
        let stats = w.stats();
        w.close_async().await.unwrap();
        assert!(stats.blocks > 0, "{stats:?}");
    })
    .unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), arrow_writer_bytes(&batches(), props(Some(1000))));
}

#[test]
fn writer_blocks_are_aligned_so_the_tokio_sink_writes_them_direct() {
    let rt = tokio_rt();
    let _guard = rt.enter();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("direct.parquet");
    let sink = TokioWriter::create_blocking(&path, WriterOptions::default()).unwrap();
    assert!(sink.engine().direct_alignment().is_some(), "the project's filesystem supports O_DIRECT");
    let mut w = EagerArrowWriter::try_new_with_options(sink, schema(), Some(props(Some(1000))), small_opts()).unwrap();
    for r in 0..20 {
        w.write(&batch(1000, r * 1000)).unwrap();
    }
    w.close().unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    let cached = eagerio_core::sys::resident_bytes(&std::fs::File::open(&path).unwrap()).unwrap();
    // Only the last, partial block went through the page cache.
    assert!(len > 8 * (64 << 10), "{len}");
    assert!(cached <= 64 << 10, "{cached} of {len} bytes cached: the blocks were not written direct");
}

#[test]
fn writer_local_mode_appends_only_while_the_sink_has_room() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("room.parquet");
    let _slow = fault::inject(&path, Hook::write_latency(std::time::Duration::from_millis(2)));
    let p = path.clone();
    eagerio_glommio::block_on(async move {
        let opts = eagerio_glommio::WriterOptions::default()
            .sink(eagerio_core::SinkOptions::default().max_in_flight_bytes(32 << 10));
        let sink = eagerio_glommio::GlommioWriter::create(&p, opts).await.unwrap();
        let small = EagerWriterOptions::default().threads(2).block_bytes(16 << 10);
        let mut w = EagerArrowWriter::try_new_local(sink.clone(), schema(), Some(props(Some(1000))), small).unwrap();
        let mut most = 0;
        for r in 0..20 {
            w.write_async(&batch(1000, r * 1000)).await.unwrap();
            most = most.max(sink.stats().queued);
        }
        w.close_async().await.unwrap();
        // Handed-back blocks wait in the writer, not in the sink's queue.
        assert!(most <= 1, "{most} appends queued in the sink at once");
    })
    .unwrap();
}
