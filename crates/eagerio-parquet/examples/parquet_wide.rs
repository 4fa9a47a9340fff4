//! Reading a wide Parquet file cold: eagerio's reader (one eager, coalesced gather per row group)
//! vs parquet's own `AsyncFileReader` impl for `tokio::fs::File` (one seek + read per range, in
//! sequence).
//!
//! ```sh
//! cargo run --release -p eagerio-parquet --example parquet_wide
//! EAGERIO_PQ_ROWS=200000 EAGERIO_PQ_DIR=/mnt/data cargo run --release -p eagerio-parquet --example parquet_wide
//! ```
//!
//! The file: 50 int64 columns, 4 row groups, uncompressed and without dictionaries so that the
//! bytes on disk are what is read (`EAGERIO_PQ_ROWS` rows, default 1,000,000: 400 MB). It is
//! written through `EagerArrowWriter` and evicted from the page cache
//! (`POSIX_FADV_DONTNEED`) before every timed read. Two projections: all 50 columns, and every
//! fifth column (10 of 50: the scattered case). Median of 3 runs each; the two readers alternate.

use std::{
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use eagerio_parquet::{EagerArrowWriter, EagerReader};
use eagerio_tokio::{TokioEngine, TokioOptions, TokioWriter, WriterOptions};
use futures::TryStreamExt;
use parquet::{
    arrow::{async_reader::AsyncFileReader, ParquetRecordBatchStreamBuilder, ProjectionMask},
    basic::Compression,
    file::properties::WriterProperties,
};

const COLUMNS: usize = 50;
const ROW_GROUPS: usize = 4;
const RUNS: usize = 3;

type Err = Box<dyn std::error::Error + Send + Sync>;

/// The eagerio engine's options: `EAGERIO_PQ_MAX_READ_KB` (largest read, default 64) and
/// `EAGERIO_PQ_DEPTH` (reads in flight, default 64); staging is 64 reads' worth.
fn engine_options() -> Result<TokioOptions, Err> {
    let env = |k: &str, d: usize| -> Result<usize, Err> {
        Ok(std::env::var(k).ok().map(|s| s.parse()).transpose()?.unwrap_or(d))
    };
    let max_read = env("EAGERIO_PQ_MAX_READ_KB", 64)? << 10;
    let depth = env("EAGERIO_PQ_DEPTH", 64)?;
    Ok(TokioOptions::default().max_read(max_read).depth(depth).staging_bytes(max_read * depth.max(64)))
}

async fn write_file(path: &Path, rows: usize) -> Result<(), Err> {
    let fields: Vec<Field> = (0..COLUMNS).map(|c| Field::new(format!("c{c}"), DataType::Int64, false)).collect();
    let schema = Arc::new(Schema::new(fields));
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(rows.div_ceil(ROW_GROUPS)))
        .set_compression(Compression::UNCOMPRESSED)
        .set_dictionary_enabled(false)
        .build();
    let sink = TokioWriter::create(path, WriterOptions::default()).await?;
    let mut w = EagerArrowWriter::try_new(sink, schema.clone(), Some(props))?;
    let batch = 65_536;
    let mut at = 0usize;
    while at < rows {
        let n = batch.min(rows - at);
        let cols: Vec<ArrayRef> = (0..COLUMNS)
            .map(|c| {
                let vals = (at..at + n).map(move |r| (r as i64).wrapping_mul(0x9E37_79B9 + c as i64) >> 7);
                Arc::new(Int64Array::from_iter_values(vals)) as ArrayRef
            })
            .collect();
        w.write_async(&RecordBatch::try_new(schema.clone(), cols)?).await?;
        at += n;
    }
    w.close_async().await?;
    Ok(())
}

/// Reads the projected columns through `reader`; returns (rows, sum of every value, time).
async fn read<R: AsyncFileReader + Unpin + Send + 'static>(
    reader: R,
    columns: &[usize],
) -> Result<(usize, i64, Duration), Err> {
    let t = Instant::now();
    let builder = ParquetRecordBatchStreamBuilder::new(reader).await?;
    let mask = ProjectionMask::roots(builder.parquet_schema(), columns.iter().copied());
    let mut stream = builder.with_projection(mask).with_batch_size(65_536).build()?;
    let (mut rows, mut sum) = (0usize, 0i64);
    while let Some(b) = stream.try_next().await? {
        rows += b.num_rows();
        for col in b.columns() {
            let a = col.as_any().downcast_ref::<Int64Array>().ok_or("not int64")?;
            sum = a.values().iter().fold(sum, |s, v| s.wrapping_add(*v));
            debug_assert_eq!(a.null_count(), 0);
        }
    }
    Ok((rows, sum, t.elapsed()))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<(), Err> {
    let rows: usize = std::env::var("EAGERIO_PQ_ROWS").ok().map(|s| s.parse()).transpose()?.unwrap_or(1_000_000);
    let dir = match std::env::var_os("EAGERIO_PQ_DIR") {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir_in(".")?,
    };
    let path = dir.path().join("wide.parquet");
    let t = Instant::now();
    write_file(&path, rows).await?;
    let len = std::fs::metadata(&path)?.len();
    println!(
        "wrote {} ({:.1} MB, {rows} rows x {COLUMNS} int64 columns, {ROW_GROUPS} row groups) in {:.2?}",
        path.display(),
        len as f64 / 1e6,
        t.elapsed()
    );
    let direct = TokioEngine::open(&path, engine_options()?).await?.engine().is_direct();
    println!("eagerio reads with O_DIRECT: {direct}; cold = evicted before every run; median of {RUNS}\n");

    println!("| columns | reader | median ms | MB/s | vs tokio::fs::File |");
    println!("|---|---|---:|---:|---:|");
    let all: Vec<usize> = (0..COLUMNS).collect();
    let fifth: Vec<usize> = (0..COLUMNS).step_by(5).collect();
    for cols in [&all, &fifth] {
        let (mut eager, mut plain) = (Vec::new(), Vec::new());
        let mut expect = None;
        let mut calls = 0;
        for run in 0..RUNS {
            for which in if run % 2 == 0 { [0, 1] } else { [1, 0] } {
                eagerio_core::sys::evict(&path)?;
                let got = if which == 0 {
                    let reader = EagerReader::new(TokioEngine::open(&path, engine_options()?).await?);
                    let probe = reader.clone();
                    let r = read(reader, cols).await?;
                    calls = probe.stats().calls;
                    eager.push(r.2);
                    r
                } else {
                    let r = read(tokio::fs::File::open(&path).await?, cols).await?;
                    plain.push(r.2);
                    r
                };
                let key = (got.0, got.1);
                assert_eq!(*expect.get_or_insert(key), key, "the two readers disagree");
            }
        }
        let bytes = len as f64 * cols.len() as f64 / COLUMNS as f64;
        let (e, p) = (median(eager), median(plain));
        let label = format!("{} of {COLUMNS}", cols.len());
        let mbs = |d: Duration| bytes / 1e6 / d.as_secs_f64();
        println!("| {label} | eagerio ({calls} gathers) | {:.1} | {:.0} | {:.2}x |", ms(e), mbs(e), ms(p) / ms(e));
        println!("| {label} | tokio::fs::File | {:.1} | {:.0} | 1.00x |", ms(p), mbs(p));
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
