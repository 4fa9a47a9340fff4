//! DataFusion over `LocalFileSystem` and over eagerio's `EagerLocalStore`: the same SQL on the
//! same local Parquet file, cold and warm, results checked row for row (issue 30).
//!
//! ```text
//! cd clients/datafusion && cargo run --release            # 1M rows x 121 columns, 3 rounds
//! EAGERIO_DF_ROWS=20000 EAGERIO_DF_RUNS=1 cargo run        # a smoke run
//! EAGERIO_DF_QUERIES="full scan" cargo run --release     # only the queries named (comma-separated)
//! cargo run --release -- --warm-loop EagerLocalStore selective 50   # for a profiler, below
//! ```
//!
//! `EAGERIO_DF_TRACE=1` wraps each store in a tracer (`src/trace.rs`): a child logs every read
//! with its time and ranges, and each query's start and end, on standard error (run one with
//! `--child STORE` to read it), and the table gains each cold query's split into the time a read
//! was in flight and the rest, with fio's bandwidth for the file (when fio is installed).
//!
//! `--warm-loop STORE QUERY N` runs one query warm N times, each on a fresh store and
//! `SessionContext` (so each run is a first warm run, as in the table), and prints the median:
//! run it under `perf record -g` to see where a store's warm time goes.
//!
//! Each round runs every store in its own child process (so each has its own peak RSS), the
//! stores in turn: interleaved, so the disk's drift falls on both. A child makes a fresh
//! `SessionContext` with the store registered for `file://`, and for each query evicts the
//! file (`POSIX_FADV_DONTNEED`), runs it cold, reads the whole file through the page cache,
//! then runs it again warm. It prints each time and
//! a hash of the sorted, formatted result; the parent checks that both stores' results agree.

mod compat;
mod trace;

use std::{
    collections::hash_map::DefaultHasher,
    hash::{Hash, Hasher},
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
    time::Instant,
};

use eagerio::local_store::EagerLocalStore;

use datafusion::{
    arrow::{
        array::{ArrayRef, Float64Array, Int64Array, StringArray},
        datatypes::{DataType, Field, Schema},
        record_batch::RecordBatch,
        util::pretty::pretty_format_batches,
    },
    parquet::{arrow::ArrowWriter, basic::Compression, file::properties::WriterProperties},
    prelude::{ParquetReadOptions, SessionContext},
};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const COLUMNS: usize = 120;
const STORES: [&str; 2] = ["LocalFileSystem", "EagerLocalStore"];

fn env_or(name: &str, default: u64) -> Res<u64> {
    match std::env::var(name) {
        Ok(s) => Ok(s.trim().parse().map_err(|e| format!("{name}={s:?}: {e}"))?),
        Err(_) => Ok(default),
    }
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// The queries: a selective filter on the sorted `id` (a few pages of two columns), a
/// projection of 3 of the 120 value columns, and a scan of every column.
fn queries(rows: u64) -> Vec<(&'static str, String)> {
    let lo = rows / 2;
    // avg, never min/max/count alone: DataFusion answers those from the footer's statistics
    // without reading a page.
    let all: Vec<String> = (0..COLUMNS).map(|c| format!("avg(c{c})")).collect();
    let only = std::env::var("EAGERIO_DF_QUERIES").ok();
    let wanted = |name: &str| only.as_deref().is_none_or(|o| o.split(',').any(|q| q.trim() == name));
    let queries = vec![
        ("selective", format!("SELECT id, c7, s FROM t WHERE id BETWEEN {lo} AND {} ORDER BY id", lo + 999)),
        ("projection", "SELECT avg(c1), avg(c40), avg(c81) FROM t".to_string()),
        ("full scan", format!("SELECT count(*), {} FROM t", all.join(", "))),
    ];
    queries.into_iter().filter(|(name, _)| wanted(name)).collect()
}

/// `rows` rows: `id` ascending, 120 value columns (int64 and float64 in turn, spread values
/// that compress little) and one short string; row groups of 128Ki rows.
fn write_dataset(path: &Path, rows: u64) -> Res<()> {
    let mut fields = vec![Field::new("id", DataType::Int64, false)];
    for c in 0..COLUMNS {
        let t = if c % 2 == 0 { DataType::Int64 } else { DataType::Float64 };
        fields.push(Field::new(format!("c{c}"), t, false));
    }
    fields.push(Field::new("s", DataType::Utf8, false));
    let schema = Arc::new(Schema::new(fields));
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(128 << 10))
        .build();
    let tmp = path.with_extension("tmp");
    let mut w = ArrowWriter::try_new(std::fs::File::create(&tmp)?, schema.clone(), Some(props))?;
    let batch = 16_384u64;
    let mut start = 0;
    while start < rows {
        let n = batch.min(rows - start);
        let ids: Vec<i64> = (start..start + n).map(|i| i as i64).collect();
        let mut cols: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(ids))];
        for c in 0..COLUMNS as u64 {
            let v = (start..start + n).map(move |i| mix(i * 131 + c));
            if c % 2 == 0 {
                cols.push(Arc::new(Int64Array::from_iter_values(v.map(|x| (x >> 20) as i64))));
            } else {
                cols.push(Arc::new(Float64Array::from_iter_values(v.map(|x| (x >> 11) as f64 / 1e6))));
            }
        }
        cols.push(Arc::new(StringArray::from_iter_values(
            (start..start + n).map(|i| format!("row-{}", mix(i) % 1000)),
        )));
        w.write(&RecordBatch::try_new(schema.clone(), cols)?)?;
        start += n;
    }
    w.close()?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

fn evict(path: &Path) -> Res<()> {
    eagerio::core::sys::evict(path)?;
    Ok(())
}

/// Warm: the whole file read through the page cache first (eagerio's cold reads are direct and
/// leave nothing cached, so a plain repeat would be a second cold run for it).
fn cache(path: &Path) -> Res<()> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 4 << 20];
    while f.read(&mut buf)? > 0 {}
    Ok(())
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(|l| l.to_string()))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// A fresh `SessionContext` with `store` registered for `file://` and the file as table `t`,
/// and the eagerio store if it is that one.
async fn context(store: &str, file: &Path) -> Res<(SessionContext, Option<Arc<EagerLocalStore>>)> {
    let ctx = SessionContext::new();
    let file_url = url::Url::parse("file://")?;
    let mut eager = None;
    let os: Arc<dyn object_store_013::ObjectStore> = match store {
        "LocalFileSystem" => Arc::new(object_store_013::local::LocalFileSystem::new()),
        "EagerLocalStore" => {
            let s = Arc::new(EagerLocalStore::new("/")?);
            eager = Some(s.clone());
            Arc::new(compat::Compat(s))
        }
        other => return Err(format!("unknown store {other}").into()),
    };
    let os: Arc<dyn object_store_013::ObjectStore> = if trace::enabled() { Arc::new(trace::Traced(os)) } else { os };
    ctx.register_object_store(&file_url, os);
    ctx.register_parquet("t", file.to_str().ok_or("path")?, ParquetReadOptions::default()).await?;
    Ok((ctx, eager))
}

/// `--warm-loop`: `query` warm `n` times on `store`, each on a fresh context; prints the median.
fn warm_loop(store: &str, query: &str, n: usize, file: &Path, rows: u64) -> Res<()> {
    let sql = queries(rows).into_iter().find(|(q, _)| *q == query).ok_or(format!("no query {query:?}"))?.1;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let mut times = rt.block_on(async {
        let mut times = Vec::new();
        for _ in 0..n {
            let (ctx, _) = context(store, file).await?;
            cache(file)?;
            let t = Instant::now();
            ctx.sql(&sql).await?.collect().await?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Res::Ok(times)
    })?;
    println!("{store} {query} warm, {n} fresh contexts: median {:.2} ms", median(&mut times));
    Ok(())
}

/// One child: every query on `store`, cold then warm; prints `q <name> <cold ms> <warm ms>
/// <hash> <rows>` lines and `rss <KiB>`.
fn child(store: &str, file: &Path, rows: u64) -> Res<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let (ctx, eager) = context(store, file).await?;
        for (name, sql) in queries(rows) {
            // Pages eagerio copied through its mapping of the file stay mapped, and an eviction
            // skips mapped pages: unmapped first, the cold run is cold.
            if let Some(s) = &eager {
                s.unmap_resident();
            }
            evict(file)?;
            trace::mark(&format!("{name} cold"));
            let (t, from) = (Instant::now(), trace::now());
            let cold = ctx.sql(&sql).await?.collect().await?;
            trace::mark("end");
            let cold_ms = t.elapsed().as_secs_f64() * 1e3;
            let (cold_io, cold_bytes) = trace::io_since(from);
            cache(file)?;
            trace::mark(&format!("{name} warm"));
            let (t, from) = (Instant::now(), trace::now());
            let warm = ctx.sql(&sql).await?.collect().await?;
            trace::mark("end");
            let warm_ms = t.elapsed().as_secs_f64() * 1e3;
            let (warm_io, _) = trace::io_since(from);
            let (hc, n) = digest(&cold)?;
            let (hw, _) = digest(&warm)?;
            if hc != hw {
                let (c, w) = (pretty_format_batches(&cold)?, pretty_format_batches(&warm)?);
                return Err(format!("{store} {name}: the cold and warm results differ:\ncold:\n{c}\nwarm:\n{w}").into());
            }
            println!("q\t{name}\t{cold_ms:.2}\t{warm_ms:.2}\t{hc:016x}\t{n}\t{cold_io:.2}\t{warm_io:.2}\t{cold_bytes}");
        }
        println!("rss\t{}", peak_rss_kib());
        Res::Ok(())
    })
}

/// fio's random direct reads of `file` in 256 KiB blocks at depth 32, read-only, in MB/s.
fn fio_mb_per_s(file: &Path) -> Option<f64> {
    let out = Command::new("fio")
        .args(["--name=bw", "--readonly", "--rw=randread", "--bs=256k", "--iodepth=32", "--ioengine=io_uring"])
        .args(["--direct=1", "--runtime=3", "--time_based", "--output-format=terse"])
        .arg(format!("--filename={}", file.display()))
        .output()
        .ok()?;
    // Terse v3: field 7 is the read bandwidth in KiB/s.
    let text = String::from_utf8(out.stdout).ok()?;
    let kib: f64 = text.lines().last()?.split(';').nth(6)?.parse().ok()?;
    Some(kib * 1024.0 / 1e6)
}

fn digest(batches: &[RecordBatch]) -> Res<(u64, usize)> {
    let text = pretty_format_batches(batches)?.to_string();
    let mut h = DefaultHasher::new();
    text.hash(&mut h);
    Ok((h.finish(), batches.iter().map(|b| b.num_rows()).sum()))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() -> Res<()> {
    trace::start();
    let args: Vec<String> = std::env::args().collect();
    let rows = env_or("EAGERIO_DF_ROWS", 1_000_000)?;
    let dir = std::env::var("EAGERIO_DF_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/data"));
    let file = std::fs::canonicalize(&dir).unwrap_or(dir.clone()).join(format!("wide-{rows}.parquet"));
    if args.len() == 3 && args[1] == "--child" {
        return child(&args[2], &file, rows);
    }
    if args.len() == 5 && args[1] == "--warm-loop" {
        return warm_loop(&args[2], &args[3], args[4].parse()?, &file, rows);
    }
    let runs = env_or("EAGERIO_DF_RUNS", 3)?;
    std::fs::create_dir_all(&dir)?;
    if !file.exists() {
        eprintln!("writing {} ({rows} rows x {} columns)...", file.display(), COLUMNS + 2);
        write_dataset(&file, rows)?;
    }
    let size = std::fs::metadata(&file)?.len();
    println!(
        "DataFusion {}: {} ({:.0} MB), {runs} interleaved rounds",
        datafusion::DATAFUSION_VERSION,
        file.display(),
        size as f64 / 1e6
    );
    let qs = queries(rows);
    // [store][query] -> cold, warm samples; [store] -> peak RSS
    let mut cold = vec![vec![Vec::new(); qs.len()]; STORES.len()];
    let mut warm = vec![vec![Vec::new(); qs.len()]; STORES.len()];
    let mut cold_io = cold.clone();
    let mut cold_bytes = vec![vec![0u64; qs.len()]; STORES.len()];
    let mut rss = vec![0u64; STORES.len()];
    for round in 0..runs {
        let mut hashes: Vec<Vec<String>> = Vec::new();
        for (s, store) in STORES.iter().enumerate() {
            let out = Command::new(&args[0]).args(["--child", store]).output()?;
            if !out.status.success() {
                return Err(format!("{store} round {round}: {}", String::from_utf8_lossy(&out.stderr)).into());
            }
            let text = String::from_utf8(out.stdout)?;
            let mut h = Vec::new();
            for line in text.lines() {
                let f: Vec<&str> = line.split('\t').collect();
                match f.as_slice() {
                    ["q", name, c, w, hash, n, ci, _warm_io, cb] => {
                        let q = qs.iter().position(|(q, _)| q == name).ok_or("query")?;
                        cold[s][q].push(c.parse::<f64>()?);
                        warm[s][q].push(w.parse::<f64>()?);
                        cold_io[s][q].push(ci.parse::<f64>()?);
                        cold_bytes[s][q] = cb.parse::<u64>()?;
                        h.push(format!("{name}:{hash}:{n}"));
                    }
                    ["rss", k] => rss[s] = rss[s].max(k.parse()?),
                    _ => {}
                }
            }
            hashes.push(h);
        }
        if hashes.iter().any(|h| h != &hashes[0]) {
            return Err(format!("round {round}: the stores' results differ: {hashes:?}").into());
        }
        println!("round {round}: results agree ({})", hashes[0].join(", "));
    }
    println!("\n| query | LocalFileSystem cold | EagerLocalStore cold | ratio | LocalFileSystem warm | EagerLocalStore warm | ratio |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (q, (name, _)) in qs.iter().enumerate() {
        let (lc, ec) = (median(&mut cold[0][q]), median(&mut cold[1][q]));
        let (lw, ew) = (median(&mut warm[0][q]), median(&mut warm[1][q]));
        println!("| {name} | {lc:.1} ms | {ec:.1} ms | {:.2}x | {lw:.1} ms | {ew:.1} ms | {:.2}x |", lc / ec, lw / ew);
    }
    println!("\npeak RSS: LocalFileSystem {} MiB, EagerLocalStore {} MiB", rss[0] >> 10, rss[1] >> 10);
    if trace::enabled() {
        // A store can only shorten the time its reads are awaited; the rest is the engine's. The
        // disk's bandwidth for reads of this file bounds how short that can be.
        let disk = fio_mb_per_s(&file);
        println!("\nwhere the cold time goes (medians; I/O = time with a read in flight, EAGERIO_DF_TRACE):\n");
        println!("| query | MB read | LocalFileSystem I/O | rest | EagerLocalStore I/O | rest | eagerio's I/O MB/s | ratio at the disk's bandwidth |");
        println!("|---|---:|---:|---:|---:|---:|---:|---:|");
        for (q, (name, _)) in qs.iter().enumerate() {
            let (lc, ec) = (median(&mut cold[0][q]), median(&mut cold[1][q]));
            let (li, ei) = (median(&mut cold_io[0][q]), median(&mut cold_io[1][q]));
            let mb = cold_bytes[1][q] as f64 / 1e6;
            let bound = disk.map(|d| format!("{:.2}x", lc / (ec - ei + mb / d * 1e3))).unwrap_or("-".into());
            println!(
                "| {name} | {mb:.1} | {li:.1} ms | {:.1} ms | {ei:.1} ms | {:.1} ms | {:.0} | {bound} |",
                lc - li,
                ec - ei,
                mb / ei * 1e3
            );
        }
        match disk {
            Some(d) => println!("\nthe disk: {d:.0} MB/s (fio, 256 KiB random direct reads of the file, QD 32, 3 s)"),
            None => println!("\n(fio not found: no bound)"),
        }
    }
    Ok(())
}
