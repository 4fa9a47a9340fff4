//! `get_ranges` through object_store: `LocalFileSystem` against eagerio's `EagerLocalStore`,
//! and eagerio's own gather of the same ranges (issue 30's shape, after tokio#8367: many small
//! ranges of one large file).
//!
//! ```text
//! cargo bench --bench local_store                # 2 GiB table, 20,000 ranges, 5 rounds
//! EAGERIO_BENCH_SMOKE=1 cargo test --bench local_store   # 64 MiB, 2,000 ranges, one round (CI)
//! EAGERIO_LS_SHAPE=chunks cargo bench --bench local_store   # a query engine's row group
//! ```
//!
//! Overrides: `EAGERIO_LS_MB` (table size), `EAGERIO_LS_RANGES`, `EAGERIO_LS_RUNS`,
//! `EAGERIO_LS_DIR` (where the table lives; default `target/eagerio-local-store`),
//! `EAGERIO_LS_SHAPE`: `small` (the default: many small ranges) or `chunks` (120 ranges by
//! default, back to back, of 0.5-2 MiB each from a fresh offset: the column chunks of one
//! Parquet row group, as DataFusion asks for them in one call).
//!
//! Each round draws fresh ranges (`small`: offsets uniform over the file, lengths uniform in
//! 1..=8 KiB) and runs every method on them, in turn, cold (the file's pages evicted with
//! `POSIX_FADV_DONTNEED` first, and each store made anew, so nothing is cached in a store)
//! and then warm (the same call again, after buffered reads of the ranges cached their pages:
//! eagerio's cold reads bypass the page cache and leave nothing there). Each method's output is checked byte for byte against
//! the table's fill function before its time counts. The table reports medians and each
//! method's ratio to `LocalFileSystem` (higher is faster).

#[path = "../examples/support/table.rs"]
mod table;

use std::{
    ops::Range,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use eagerio::local_store::EagerLocalStore;
use object_store::{local::LocalFileSystem, path::Path as ObjectPath, ObjectStore};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn env_or(name: &str, default: usize) -> Res<usize> {
    match std::env::var(name) {
        Ok(s) => Ok(s.trim().parse().map_err(|e| format!("{name}={s:?}: {e}"))?),
        Err(_) => Ok(default),
    }
}

/// One way to run `get_ranges`, made anew for each cold run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    LocalFileSystem,
    EagerLocalStore,
    /// eagerio's own gather on the same engine `EagerLocalStore` uses, the file opened once
    /// outside the timed span: the floor the store's overhead is measured against.
    EagerioGather,
}

const METHODS: [Method; 3] = [Method::LocalFileSystem, Method::EagerLocalStore, Method::EagerioGather];

/// A method ready to time: its store or source, made before the clock starts.
enum Ready {
    Store(Arc<dyn ObjectStore>),
    Gather(eagerio::core::Source<eagerio::uring::UringEngine>),
}

async fn ready(m: Method, dir: &Path, file: &Path) -> Res<Ready> {
    Ok(match m {
        Method::LocalFileSystem => Ready::Store(Arc::new(LocalFileSystem::new_with_prefix(dir)?)),
        Method::EagerLocalStore => Ready::Store(Arc::new(EagerLocalStore::new(dir)?)),
        Method::EagerioGather => Ready::Gather(eagerio::uring::UringEngine::open(file, Default::default()).await?),
    })
}

async fn run(r: &Ready, name: &ObjectPath, ranges: &[Range<u64>]) -> Res<Vec<Bytes>> {
    Ok(match r {
        Ready::Store(s) => s.get_ranges(name, ranges).await?,
        Ready::Gather(g) => g.gather_ranges(ranges)?.await?,
    })
}

fn check(out: &[Bytes], ranges: &[Range<u64>]) -> Res<()> {
    if out.len() != ranges.len() {
        return Err(format!("{} results for {} ranges", out.len(), ranges.len()).into());
    }
    for (b, r) in out.iter().zip(ranges) {
        if b.len() as u64 != r.end - r.start {
            return Err(format!("range {r:?}: {} bytes", b.len()).into());
        }
        table::check_at(b, r.start).map_err(|k| format!("range {r:?}: byte {k} is wrong"))?;
    }
    Ok(())
}

/// Warm: the ranges' pages cached by buffered reads (eagerio's cold reads are direct and leave
/// nothing in the page cache).
fn cache(file: &Path, ranges: &[Range<u64>]) -> Res<()> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(file)?;
    let mut buf = vec![0u8; ranges.iter().map(|r| r.end - r.start).max().unwrap_or(0) as usize];
    for r in ranges {
        f.read_exact_at(&mut buf[..(r.end - r.start) as usize], r.start)?;
    }
    Ok(())
}

/// The two shapes of call: many small ranges over the whole file, or a row group's column
/// chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Small,
    Chunks,
}

fn ranges(shape: Shape, seed: u64, n: usize, size: u64) -> Vec<Range<u64>> {
    match shape {
        Shape::Small => {
            let starts = table::ids(seed, n, size - 8192);
            starts.iter().enumerate().map(|(i, &s)| s..s + 1 + table::mix(seed ^ i as u64) % 8192).collect()
        }
        Shape::Chunks => {
            let (min, spread) = (512 << 10, 1536 << 10);
            let lens: Vec<u64> = (0..n).map(|i| min + table::mix(seed ^ i as u64) % spread).collect();
            let total: u64 = lens.iter().sum();
            let mut at = table::mix(seed) % size.saturating_sub(total).max(1);
            lens.iter()
                .map(|&len| {
                    at += len;
                    at - len..at
                })
                .collect()
        }
    }
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> Res<()> {
    let smoke = std::env::var("EAGERIO_BENCH_SMOKE").is_ok_and(|v| !v.is_empty() && v != "0");
    let mb = env_or("EAGERIO_LS_MB", if smoke { 64 } else { 2048 })? as u64;
    let shape = match std::env::var("EAGERIO_LS_SHAPE").as_deref() {
        Ok("chunks") => Shape::Chunks,
        Ok("small") | Err(_) => Shape::Small,
        Ok(other) => return Err(format!("EAGERIO_LS_SHAPE={other:?}: small or chunks").into()),
    };
    let n = match shape {
        Shape::Small => env_or("EAGERIO_LS_RANGES", if smoke { 2_000 } else { 20_000 })?,
        Shape::Chunks => env_or("EAGERIO_LS_RANGES", if smoke { 20 } else { 120 })?,
    };
    let runs = env_or("EAGERIO_LS_RUNS", if smoke { 1 } else { 5 })?;
    let dir = std::env::var("EAGERIO_LS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/eagerio-local-store"));
    let (file, written) = table::ensure(&dir, mb << 20)?;
    let name = ObjectPath::from(file.file_name().and_then(|n| n.to_str()).ok_or("table name")?);
    let what = match shape {
        Shape::Small => "ranges of 1..=8192 bytes",
        Shape::Chunks => "back-to-back ranges of 0.5-2 MiB",
    };
    println!(
        "get_ranges: {n} {what} from a {mb} MiB file ({}), {runs} interleaved rounds",
        if written { "written now" } else { "reused" }
    );
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let mut cold: Vec<Vec<Duration>> = vec![Vec::new(); METHODS.len()];
    let mut warm: Vec<Vec<Duration>> = vec![Vec::new(); METHODS.len()];
    rt.block_on(async {
        for round in 0..runs {
            let rs = ranges(shape, 0x5EED_0000 + round as u64, n, mb << 20);
            for (i, &m) in METHODS.iter().enumerate() {
                let r = ready(m, &dir, &file).await?;
                if let Ready::Gather(g) = &r {
                    g.unmap_resident();
                }
                eagerio::core::sys::evict(&file)?;
                let t = Instant::now();
                let out = run(&r, &name, &rs).await?;
                cold[i].push(t.elapsed());
                check(&out, &rs).map_err(|e| format!("{m:?} cold: {e}"))?;
                cache(&file, &rs)?;
                let t = Instant::now();
                let out = run(&r, &name, &rs).await?;
                warm[i].push(t.elapsed());
                check(&out, &rs).map_err(|e| format!("{m:?} warm: {e}"))?;
            }
        }
        Res::Ok(())
    })?;
    let base_cold = median(&mut cold[0].clone());
    let base_warm = median(&mut warm[0].clone());
    println!("\n| method | cold median | cold vs LocalFileSystem | warm median | warm vs LocalFileSystem |");
    println!("|---|---:|---:|---:|---:|");
    for (i, m) in METHODS.iter().enumerate() {
        let (c, w) = (median(&mut cold[i]), median(&mut warm[i]));
        println!(
            "| {m:?} | {:.1} ms | {:.2}x | {:.2} ms | {:.2}x |",
            c.as_secs_f64() * 1e3,
            base_cold.as_secs_f64() / c.as_secs_f64(),
            w.as_secs_f64() * 1e3,
            base_warm.as_secs_f64() / w.as_secs_f64()
        );
    }
    let (store, own) = (median(&mut cold[1]), median(&mut cold[2]));
    println!(
        "\nEagerLocalStore cold / eagerio's own gather cold: {:.2}x the time",
        store.as_secs_f64() / own.as_secs_f64()
    );
    Ok(())
}
