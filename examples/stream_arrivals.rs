//! When the rows of a streamed gather arrive, against the same gather awaited as a future.
//!
//! ```text
//! cargo run --release --example stream_arrivals            # 2 GiB table under target/, 40,000 rows
//! EAGERIO_STREAM_MB=256 EAGERIO_STREAM_RUNS=3 cargo run --release --example stream_arrivals
//! ```
//!
//! For each backend (io_uring, tokio) and row size (90 B, 4 KiB), each run draws fresh row ids
//! and gathers them twice, cold both times (the source's mapping dropped and the file evicted
//! first): once as a future (`gather`, time to the whole output) and once as a stream
//! (`gather_stream`, the time each row arrives after the call). The two alternate which goes
//! first from run to run, so the disk's drift falls on both alike. Every row is checked against
//! the table's fill function before its time counts. Printed per backend and row size, the
//! medians over the runs: the future's time; the stream's time until its reads were handed to
//! the engine (`GatherStats::submit`: checking, planning, submitting), its first, median and last
//! arrival; and the ratios median / last and stream / future.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use eagerio::tokio::{TokioEngine, TokioOptions};
use eagerio::uring::{UringEngine, UringOptions};
use eagerio::{RowLayout, RowTable};

#[path = "support/table.rs"]
mod table;

type AnyResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// One streamed gather: when its reads were handed to the engine, and when the first row, the
/// median row and the last row arrived.
struct Arrivals {
    submitted: Duration,
    first: Duration,
    median: Duration,
    last: Duration,
}

fn env(name: &str, default: u64) -> AnyResult<u64> {
    Ok(match std::env::var(name) {
        Ok(s) => s.trim().parse().map_err(|e| format!("{name}={s:?}: {e}"))?,
        Err(_) => default,
    })
}

fn cold<E: eagerio::core::backend::ReadEngine>(table: &RowTable<E>, path: &Path) -> AnyResult<()> {
    table.source().unmap_resident();
    eagerio::core::sys::evict(path)?;
    Ok(())
}

async fn future_time<E: eagerio::core::backend::ReadEngine>(
    table: &RowTable<E>,
    path: &Path,
    ids: &[u64],
) -> AnyResult<Duration> {
    cold(table, path)?;
    let t = Instant::now();
    let out = table.gather(ids)?.await?;
    let dt = t.elapsed();
    table::verify_rows(&out, ids, table.row_size())?;
    Ok(dt)
}

async fn stream_times<E: eagerio::core::backend::ReadEngine>(
    table: &RowTable<E>,
    path: &Path,
    ids: &[u64],
) -> AnyResult<Arrivals> {
    cold(table, path)?;
    let row = table.row_size();
    let t = Instant::now();
    let mut stream = table.gather_stream(ids)?;
    let mut at = Vec::with_capacity(ids.len());
    let mut rows = Vec::with_capacity(ids.len());
    while let Some(landed) = stream.next().await {
        let (i, bytes) = landed?;
        at.push(t.elapsed());
        rows.push((i, bytes));
    }
    for (i, bytes) in &rows {
        table::check_at(bytes, ids[*i] * row).map_err(|k| format!("row {} byte {k} is wrong", ids[*i]))?;
    }
    if at.len() != ids.len() {
        return Err(format!("{} of {} rows arrived", at.len(), ids.len()).into());
    }
    let submitted = stream.stats().submit;
    Ok(Arrivals { submitted, first: at[0], median: at[at.len() / 2], last: at[at.len() - 1] })
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Runs `runs` interleaved rounds on `table` and prints one line.
async fn measure<E: eagerio::core::backend::ReadEngine>(
    name: &str,
    table: &RowTable<E>,
    path: &Path,
    n: usize,
    runs: u64,
) -> AnyResult<()> {
    let (mut fut, mut sub, mut first, mut mid, mut last) = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in 0..runs {
        let ids = table::ids(r * 7919 + table.row_size() + n as u64, n, table.rows());
        let (f, s) = if r % 2 == 0 {
            let f = future_time(table, path, &ids).await?;
            (f, stream_times(table, path, &ids).await?)
        } else {
            let s = stream_times(table, path, &ids).await?;
            (future_time(table, path, &ids).await?, s)
        };
        fut.push(f);
        sub.push(s.submitted);
        first.push(s.first);
        mid.push(s.median);
        last.push(s.last);
    }
    let (f, h, a, m, l) = (median(fut), median(sub), median(first), median(mid), median(last));
    println!(
        "{name:<8} {:>6} B {:>9.1} {:>9.2} {:>9.2} {:>9.1} {:>9.1} {:>11.2} {:>11.2}",
        table.row_size(),
        ms(f),
        ms(h),
        ms(a),
        ms(m),
        ms(l),
        m.as_secs_f64() / l.as_secs_f64(),
        l.as_secs_f64() / f.as_secs_f64()
    );
    Ok(())
}

fn main() -> AnyResult<()> {
    let mb = env("EAGERIO_STREAM_MB", 2048)?;
    let runs = env("EAGERIO_STREAM_RUNS", 5)?.max(1);
    let n = env("EAGERIO_STREAM_ROWS", 40_000)? as usize;
    let path = table::in_target("eagerio-stream", mb << 20)?;
    println!("{n} rows from a {mb} MiB table, cold, median of {runs} interleaved runs (ms)");
    println!(
        "{:<8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>11} {:>11}",
        "backend", "row", "future", "submitted", "first", "median", "last", "median/last", "last/future"
    );
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    for row_size in [90u64, 4096] {
        let layout = RowLayout { base: 0, row_size, rows: None };
        let uring = UringEngine::open_rows_blocking(&path, layout, UringOptions::default())?;
        futures::executor::block_on(measure("uring", &uring, &path, n, runs))?;
        rt.block_on(async {
            let tokio = TokioEngine::open(&path, TokioOptions::default()).await?.rows(layout)?;
            measure("tokio", &tokio, &path, n, runs).await
        })?;
    }
    Ok(())
}
