//! Parquet writers timed to durable: eagerio's `EagerArrowWriter` on each local sink against
//! what a user would otherwise pick, with the disk's own floor beside them.
//!
//! ```sh
//! cargo bench -p eagerio-parquet --bench writer                       # 455 MB, 5 rounds
//! EAGERIO_PQW_ROWS=4700000 EAGERIO_PQW_RUNS=1 EAGERIO_PQW_CONFIGS=65536 \
//!     cargo bench -p eagerio-parquet --bench writer                   # 2 GiB, batches made as it goes
//! EAGERIO_BENCH_SMOKE=1 cargo test -p eagerio-parquet --bench writer  # CI: tiny, one round
//! ```
//!
//! **Workload.** 64 columns (int64, float64, dictionary strings, plain strings, 16 of each),
//! `EAGERIO_PQW_ROWS` rows (default 1,000,000: a 455 MB file), written in batches of 8,192
//! rows; parquet's default writer properties plus snappy. Two row-group settings
//! (`EAGERIO_PQW_CONFIGS`, default `default,65536`): parquet's default (1,048,576 rows: one row
//! group here) and 65,536 rows.
//!
//! Other knobs: `EAGERIO_PQW_RUNS` (rounds, default 5), `EAGERIO_PQW_METHODS` (a comma list),
//! `EAGERIO_PQW_DIR` (default: cargo's target tmp dir, on the project's disk),
//! `EAGERIO_PQW_REPORT` (also write the report there), `EAGERIO_PQW_BLOCK_MB` and
//! `EAGERIO_PQW_INFLIGHT_MB` (eagerio's block size and the sinks' in-flight bound).
//!
//! **Methods** (each run in its own child process, so its CPU time and peak RSS are its own):
//! - `arrow`: `ArrowWriter` on a `std::fs::File`, then `sync_all` (the reference, 1.00x);
//! - `async-tokio`: `AsyncArrowWriter` on a `tokio::fs::File`, then `sync_all`;
//! - `async-objstore`: `AsyncArrowWriter` over object_store's `LocalFileSystem::with_fsync(true)`;
//! - `parallel`: the careful parallel peer: parquet's `ArrowColumnWriter`s spread over one thread
//!   per core, each row group's chunks appended in order, then `sync_all`;
//! - `eager-tokio`, `eager-uring`, `eager-glommio`: `EagerArrowWriter` on eagerio's sinks;
//! - references: `encode-arrow` and `encode-parallel` (the two encoders into a `Vec`, no I/O),
//!   `floor` (`write_all` of the already-encoded bytes, then `sync_all`) and fio (sequential 1 MiB
//!   psync writes with `end_fsync`, the process's wall time).
//!
//! **Timing.** From the first batch handed over until the file is durable. Batches are made
//! before the clock starts (past 2,000,000 rows they are made as the writer goes, inside the
//! span, the same for every method). Rounds are interleaved: round r runs every method, then
//! round r+1. Before each run the parent `sync`s so no earlier write-back runs inside it.
//!
//! **Checks.** Every output is hashed; the first output of each distinct content is read back
//! with parquet's reader (row count and the sum of the first column, against the generator's),
//! and by pyarrow when it is installed. The writers that promise it (all but the floor) must
//! produce identical bytes.

use std::{
    collections::HashMap,
    fs::File,
    hash::Hasher,
    io::Write,
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
    time::Instant,
};

use arrow_array::{
    builder::StringDictionaryBuilder, types::Int32Type, Array, ArrayRef, Float64Array, Int64Array, RecordBatch,
    StringArray,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use eagerio_core::DataSink;
use eagerio_parquet::{EagerArrowWriter, EagerWriterOptions};
use parquet::{
    arrow::{
        arrow_reader::ParquetRecordBatchReaderBuilder, arrow_writer::compute_leaves, ArrowWriter, AsyncArrowWriter,
    },
    basic::Compression,
    file::properties::WriterProperties,
};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const COLUMNS: usize = 64;
const BATCH: usize = 8192;
const METHODS: &[&str] = &[
    "arrow",
    "async-tokio",
    "async-objstore",
    "parallel",
    "eager-tokio",
    "eager-uring",
    "eager-glommio",
    "encode-arrow",
    "encode-parallel",
    "floor",
];

#[derive(Debug, Clone, Copy)]
struct Config {
    rows: usize,
    /// `None`: parquet's default row-group size.
    row_group: Option<usize>,
}

impl Config {
    fn label(&self) -> String {
        match self.row_group {
            None => "default row groups".into(),
            Some(n) => format!("{n}-row groups"),
        }
    }
    fn arg(&self) -> String {
        self.row_group.map_or("default".into(), |n| n.to_string())
    }
    fn streamed(&self) -> bool {
        self.rows > 2_000_000
    }
}

fn schema() -> SchemaRef {
    let fields: Vec<Field> = (0..COLUMNS)
        .map(|c| match c % 4 {
            0 => Field::new(format!("i{c}"), DataType::Int64, false),
            1 => Field::new(format!("f{c}"), DataType::Float64, false),
            2 => Field::new_dictionary(format!("d{c}"), DataType::Int32, DataType::Utf8, false),
            _ => Field::new(format!("s{c}"), DataType::Utf8, false),
        })
        .collect();
    Arc::new(Schema::new(fields))
}

/// A deterministic pseudo-random value of (row, column): splitmix64.
fn value(row: usize, col: usize) -> u64 {
    let mut z = (row as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (col as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Rows `start..start + rows` of the table.
fn batch(start: usize, rows: usize) -> RecordBatch {
    let cols: Vec<ArrayRef> = (0..COLUMNS)
        .map(|c| -> ArrayRef {
            let vals = (start..start + rows).map(|r| value(r, c));
            match c % 4 {
                // Values in a range of 2^40: what ids and timestamps look like, not pure noise.
                0 => Arc::new(Int64Array::from_iter_values(vals.map(|v| (v >> 24) as i64))),
                1 => Arc::new(Float64Array::from_iter_values(vals.map(|v| (v >> 11) as f64 / (1u64 << 53) as f64))),
                2 => {
                    let mut b = StringDictionaryBuilder::<Int32Type>::new();
                    for v in vals {
                        b.append_value(format!("category-{}", v % 500));
                    }
                    Arc::new(b.finish())
                }
                _ => Arc::new(StringArray::from_iter_values(vals.map(|v| format!("{:x}", v >> 24)))),
            }
        })
        .collect();
    RecordBatch::try_new(schema(), cols).expect("the batch matches the schema")
}

/// The sum of column 0 over the table: what a read-back must find.
fn expected_sum(rows: usize) -> i64 {
    (0..rows).map(|r| (value(r, 0) >> 24) as i64).fold(0i64, i64::wrapping_add)
}

fn props(cfg: Config) -> WriterProperties {
    let b = WriterProperties::builder().set_compression(Compression::SNAPPY);
    match cfg.row_group {
        Some(n) => b.set_max_row_group_row_count(Some(n)).build(),
        None => b.build(),
    }
}

/// When the writer asked for a batch past the last: the start of its tail (last row group,
/// footer, durability).
static INPUT_DONE: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);

/// The table's batches: made up front, or as they are taken (streamed). Running out records
/// the time in [`INPUT_DONE`].
fn batches(cfg: Config) -> Box<dyn Iterator<Item = RecordBatch>> {
    let starts = (0..cfg.rows).step_by(BATCH);
    let rows = cfg.rows;
    let made: Box<dyn Iterator<Item = RecordBatch>> = if cfg.streamed() {
        Box::new(starts.map(move |s| batch(s, BATCH.min(rows - s))))
    } else {
        let made: Vec<RecordBatch> = starts.map(|s| batch(s, BATCH.min(rows - s))).collect();
        Box::new(made.into_iter())
    };
    Box::new(made.chain(std::iter::from_fn(|| {
        INPUT_DONE.lock().unwrap().get_or_insert_with(Instant::now);
        None
    })))
}

/// What a child measured.
struct Measured {
    secs: f64,
    /// From running out of input to durable.
    tail_secs: f64,
    cpu_secs: f64,
    bytes: u64,
    peak_in_flight: Option<u64>,
}

/// This process's CPU time (every thread) and its peak resident set (`VmHWM`: unlike
/// `getrusage`'s `ru_maxrss`, it starts afresh at `execve`, so a child does not inherit the
/// parent's peak).
fn cpu_and_rss() -> (f64, u64) {
    // SAFETY: `getrusage` fills the zeroed struct it is given; RUSAGE_SELF counts every thread.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    let hwm_kb = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("VmHWM:")?.trim().strip_suffix("kB")?.trim().parse().ok()))
        .unwrap_or(0u64);
    (t(ru.ru_utime) + t(ru.ru_stime), hwm_kb * 1024)
}

fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime")
}

/// The careful parallel peer: per row group, the column writers spread round robin over one
/// thread per core, each batch sent to every thread; the chunks appended in column order after
/// the row group's last batch. Returns the writer it was given, the footer written.
fn parallel_peer<W: Write + Send>(out: W, cfg: Config, input: Box<dyn Iterator<Item = RecordBatch>>) -> Res<W> {
    let schema = schema();
    let props = props(cfg);
    let max_rows = props.max_row_group_row_count().unwrap_or(usize::MAX);
    let threads = std::thread::available_parallelism().map_or(2, usize::from);
    let (mut file, factory) = ArrowWriter::try_new(out, schema.clone(), Some(props))?.into_serialized_writer()?;
    let mut input = input.peekable();
    let mut carry: Option<RecordBatch> = None;
    for group in 0.. {
        if carry.is_none() && input.peek().is_none() {
            break;
        }
        let writers = factory.create_column_writers(group)?;
        let mut mine: Vec<Vec<(usize, _)>> = (0..threads).map(|_| Vec::new()).collect();
        for (c, w) in writers.into_iter().enumerate() {
            mine[c % threads].push((c, w));
        }
        let mut chunks = std::thread::scope(|s| -> Res<Vec<(usize, _)>> {
            let mut senders = Vec::new();
            let mut handles = Vec::new();
            for cols in mine {
                let (tx, rx) = std::sync::mpsc::sync_channel::<RecordBatch>(4);
                senders.push(tx);
                let schema = schema.clone();
                handles.push(s.spawn(move || -> Res<Vec<(usize, _)>> {
                    let mut cols = cols;
                    for b in rx {
                        for (c, w) in &mut cols {
                            for leaf in compute_leaves(schema.field(*c), b.column(*c))? {
                                w.write(&leaf)?;
                            }
                        }
                    }
                    Ok(cols.into_iter().map(|(c, w)| w.close().map(|chunk| (c, chunk))).collect::<Result<_, _>>()?)
                }));
            }
            let mut rows = 0;
            while rows < max_rows {
                let Some(b) = carry.take().or_else(|| input.next()) else { break };
                let n = b.num_rows().min(max_rows - rows);
                if n < b.num_rows() {
                    carry = Some(b.slice(n, b.num_rows() - n));
                }
                let b = b.slice(0, n);
                for tx in &senders {
                    tx.send(b.clone())?;
                }
                rows += n;
            }
            drop(senders);
            let mut all = Vec::new();
            for h in handles {
                all.extend(h.join().expect("an encoder thread panicked")?);
            }
            Ok(all)
        })?;
        chunks.sort_by_key(|(c, _)| *c);
        let mut rg = file.next_row_group()?;
        for (_, chunk) in chunks {
            chunk.append_to_row_group(&mut rg)?;
        }
        rg.close()?;
    }
    Ok(file.into_inner()?)
}

/// The number in environment variable `key`, or `default`.
fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn eager_opts() -> EagerWriterOptions {
    let mb = env_usize("EAGERIO_PQW_BLOCK_MB", 4);
    EagerWriterOptions::default().block_bytes(mb << 20)
}

fn sink_opts() -> eagerio_core::SinkOptions {
    let mb = env_usize("EAGERIO_PQW_INFLIGHT_MB", 64);
    eagerio_core::SinkOptions::default().max_in_flight_bytes(mb << 20)
}

/// Runs `method` once, writing `out`; the timed span is inside.
fn run_method(method: &str, cfg: Config, out: &Path) -> Res<Measured> {
    let schema = schema();
    let input = batches(cfg);
    let mut peak_in_flight = None;
    let (cpu0, _) = cpu_and_rss();
    let t0 = Instant::now();
    match method {
        "arrow" => {
            let mut w = ArrowWriter::try_new(File::create(out)?, schema, Some(props(cfg)))?;
            for b in input {
                w.write(&b)?;
            }
            w.into_inner()?.sync_all()?;
        }
        "async-tokio" => tokio_rt().block_on(async {
            let f = tokio::fs::File::create(out).await?;
            let mut w = AsyncArrowWriter::try_new(f, schema, Some(props(cfg)))?;
            for b in input {
                w.write(&b).await?;
            }
            w.finish().await?;
            w.into_inner().sync_all().await?;
            Res::Ok(())
        })?,
        "async-objstore" => tokio_rt().block_on(async {
            let dir = out.parent().expect("a directory");
            let store = object_store::local::LocalFileSystem::new_with_prefix(dir)?.with_fsync(true);
            let name = out.file_name().expect("a file name").to_string_lossy().into_owned();
            let writer = object_store::buffered::BufWriter::new(Arc::new(store), object_store::path::Path::from(name));
            let mut w = AsyncArrowWriter::try_new(writer, schema, Some(props(cfg)))?;
            for b in input {
                w.write(&b).await?;
            }
            w.close().await?;
            Res::Ok(())
        })?,
        "parallel" => parallel_peer(File::create(out)?, cfg, input)?.sync_all()?,
        "eager-tokio" => {
            let rt = tokio_rt();
            peak_in_flight = Some(rt.block_on(async {
                let sink =
                    eagerio_tokio::TokioWriter::create(out, eagerio_tokio::WriterOptions::default().sink(sink_opts()))
                        .await?;
                let mut w =
                    EagerArrowWriter::try_new_with_options(sink.clone(), schema, Some(props(cfg)), eager_opts())?;
                for b in input {
                    w.write_async(&b).await?;
                }
                w.close_async().await?;
                Res::Ok(sink.stats().peak_in_flight_bytes)
            })?);
        }
        "eager-uring" => {
            let sink = eagerio_uring::UringWriter::create_blocking(
                out,
                eagerio_uring::WriterOptions::default().sink(sink_opts()),
            )?;
            let mut w = EagerArrowWriter::try_new_with_options(sink.clone(), schema, Some(props(cfg)), eager_opts())?;
            for b in input {
                w.write(&b)?;
            }
            w.close()?;
            peak_in_flight = Some(sink.stats().peak_in_flight_bytes);
        }
        "eager-glommio" => {
            let out = out.to_path_buf();
            peak_in_flight = Some(eagerio_glommio::block_on(async move {
                let sink = eagerio_glommio::GlommioWriter::create(&out, Default::default()).await?;
                let mut w = EagerArrowWriter::try_new_local(sink.clone(), schema, Some(props(cfg)), eager_opts())?;
                for b in input {
                    w.write_async(&b).await?;
                }
                w.close_async().await?;
                Res::Ok(sink.stats().peak_in_flight_bytes)
            })??);
        }
        "encode-arrow" => {
            let mut w = ArrowWriter::try_new(Vec::new(), schema, Some(props(cfg)))?;
            for b in input {
                w.write(&b)?;
            }
            let bytes = w.into_inner()?;
            return Ok(measured(t0, cpu0, bytes.len() as u64, None));
        }
        "encode-parallel" => {
            let bytes = parallel_peer(Vec::new(), cfg, input)?;
            return Ok(measured(t0, cpu0, bytes.len() as u64, None));
        }
        "floor" => {
            drop(input);
            let mut w = ArrowWriter::try_new(Vec::new(), schema, Some(props(cfg)))?;
            for b in batches(cfg) {
                w.write(&b)?;
            }
            let bytes = w.into_inner()?;
            let (cpu0, _) = cpu_and_rss();
            let t0 = Instant::now();
            let mut f = File::create(out)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            return Ok(measured(t0, cpu0, bytes.len() as u64, None));
        }
        other => return Err(format!("unknown method {other:?}").into()),
    }
    Ok(measured(t0, cpu0, std::fs::metadata(out)?.len(), peak_in_flight))
}

fn measured(t0: Instant, cpu0: f64, bytes: u64, peak_in_flight: Option<u64>) -> Measured {
    let secs = t0.elapsed().as_secs_f64();
    let done = INPUT_DONE.lock().unwrap().map_or(0.0, |d| d.max(t0).elapsed().as_secs_f64());
    let (cpu1, _) = cpu_and_rss();
    Measured { secs, tail_secs: done, cpu_secs: cpu1 - cpu0, bytes, peak_in_flight }
}

/// One run's figures, as the parent reads them from a child.
#[derive(Debug, Clone, Copy)]
struct Run {
    secs: f64,
    tail: f64,
    cpu: f64,
    rss: u64,
    bytes: u64,
    in_flight: Option<u64>,
}

fn child(args: &[String]) -> Res<()> {
    let get = |flag: &str| -> Res<&String> {
        let i = args.iter().position(|a| a == flag).ok_or_else(|| format!("missing {flag}"))?;
        args.get(i + 1).ok_or_else(|| format!("{flag} needs a value").into())
    };
    let method = get("--child")?;
    let rows: usize = get("--rows")?.parse()?;
    let row_group = match get("--row-group")?.as_str() {
        "default" => None,
        n => Some(n.parse()?),
    };
    let out = PathBuf::from(get("--out")?);
    let m = run_method(method, Config { rows, row_group }, &out)?;
    let (_, rss) = cpu_and_rss();
    println!(
        "RESULT {} {} {} {} {} {}",
        m.secs,
        m.tail_secs,
        m.cpu_secs,
        rss,
        m.bytes,
        m.peak_in_flight.map_or("-".into(), |b| b.to_string())
    );
    Ok(())
}

fn spawn_child(method: &str, cfg: Config, out: &Path) -> Res<Run> {
    let exe = std::env::current_exe()?;
    let o = Command::new(exe)
        .args(["--child", method, "--rows", &cfg.rows.to_string(), "--row-group", &cfg.arg(), "--out"])
        .arg(out)
        .output()?;
    let stdout = String::from_utf8_lossy(&o.stdout);
    let Some(line) = stdout.lines().find_map(|l| l.strip_prefix("RESULT ")) else {
        return Err(format!("{method} failed: {}{}", stdout, String::from_utf8_lossy(&o.stderr)).into());
    };
    let f: Vec<&str> = line.split(' ').collect();
    Ok(Run {
        secs: f[0].parse()?,
        tail: f[1].parse()?,
        cpu: f[2].parse()?,
        rss: f[3].parse()?,
        bytes: f[4].parse()?,
        in_flight: f[5].parse().ok(),
    })
}

/// A hash of a file's bytes, to tell identical outputs apart from different ones; read in
/// pieces, so the parent stays small (its children start from its size).
fn file_hash(path: &Path) -> Res<u64> {
    use std::io::Read;
    let mut f = File::open(path)?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(h.finish());
        }
        h.write(&buf[..n]);
    }
}

/// Reads a written file back: row count and the first column's sum, and pyarrow's row count
/// when pyarrow is there.
fn verify(path: &Path, cfg: Config) -> Res<String> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path)?)?.build()?;
    let (mut rows, mut sum) = (0usize, 0i64);
    for b in reader {
        let b = b?;
        rows += b.num_rows();
        let col = b.column(0).as_any().downcast_ref::<Int64Array>().ok_or("column 0 is not int64")?;
        sum = col.values().iter().fold(sum, |s, v| s.wrapping_add(*v));
    }
    if rows != cfg.rows || sum != expected_sum(cfg.rows) {
        return Err(format!("{path:?}: read back {rows} rows, sum {sum}; expected {}", cfg.rows).into());
    }
    let py = Command::new("python3")
        .args(["-c", "import sys, pyarrow.parquet as pq; print(pq.ParquetFile(sys.argv[1]).metadata.num_rows)"])
        .arg(path)
        .output();
    Ok(match py {
        Ok(o) if o.status.success() => {
            let n = String::from_utf8_lossy(&o.stdout).trim().to_owned();
            if n != cfg.rows.to_string() {
                return Err(format!("pyarrow reads {n} rows of {path:?}").into());
            }
            "parquet-rs and pyarrow".into()
        }
        _ => "parquet-rs (pyarrow not installed)".into(),
    })
}

/// fio's sequential psync writes of `bytes` with `end_fsync`: the process's wall time.
fn fio(dir: &Path, bytes: u64) -> Option<f64> {
    let file = dir.join("fio.bin");
    let t0 = Instant::now();
    let o = Command::new("fio")
        .args(["--name=floor", "--rw=write", "--bs=1M", "--ioengine=psync", "--end_fsync=1", "--fallocate=none"])
        .arg(format!("--filename={}", file.display()))
        .arg(format!("--size={}", bytes.max(1 << 20)))
        .arg("--output-format=terse")
        .output()
        .ok()?;
    let secs = t0.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&file);
    o.status.success().then_some(secs)
}

fn sync_all_filesystems() {
    // SAFETY: `sync` takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--child") {
        return child(&args);
    }
    let smoke = std::env::var_os("EAGERIO_BENCH_SMOKE").is_some();
    let rows = env_usize("EAGERIO_PQW_ROWS", if smoke { 20_000 } else { 1_000_000 });
    let runs = env_usize("EAGERIO_PQW_RUNS", if smoke { 1 } else { 5 });
    let dir = std::env::var_os("EAGERIO_PQW_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pqw"));
    std::fs::create_dir_all(&dir)?;
    let small = if smoke { 4096 } else { 65_536 };
    let configs: Vec<Config> = std::env::var("EAGERIO_PQW_CONFIGS")
        .unwrap_or_else(|_| format!("default,{small}"))
        .split(',')
        .map(|c| Config { rows, row_group: c.parse().ok() })
        .collect();
    let only = std::env::var("EAGERIO_PQW_METHODS").ok();
    let methods: Vec<&str> =
        METHODS.iter().copied().filter(|m| only.as_deref().is_none_or(|o| o.split(',').any(|x| x == *m))).collect();
    let mut report = String::new();
    let date = Command::new("date").arg("-u").arg("+%Y-%m-%d %H:%M UTC").output()?;
    report += &format!(
        "# Parquet writers to durable\n\n{} rows x {COLUMNS} columns, {runs} interleaved rounds, {}; `{}`\n\n",
        rows,
        String::from_utf8_lossy(&date.stdout).trim(),
        "cargo bench -p eagerio-parquet --bench writer",
    );
    for cfg in configs {
        let mut times: HashMap<&str, Vec<Run>> = HashMap::new();
        let mut fio_secs = Vec::new();
        let mut seen: HashMap<u64, String> = HashMap::new();
        let mut identical: Option<u64> = None;
        for round in 0..runs {
            for &method in &methods {
                let out = dir.join(format!("{method}.parquet"));
                let _ = std::fs::remove_file(&out);
                sync_all_filesystems();
                let run = spawn_child(method, cfg, &out)?;
                if !method.starts_with("encode") {
                    let h = file_hash(&out)?;
                    if let std::collections::hash_map::Entry::Vacant(e) = seen.entry(h) {
                        e.insert(verify(&out, cfg)?);
                    }
                    if method != "floor" {
                        match identical {
                            None => identical = Some(h),
                            Some(want) if want != h => {
                                return Err(format!("{method} wrote different bytes than the other writers").into())
                            }
                            Some(_) => {}
                        }
                    }
                    let _ = std::fs::remove_file(&out);
                }
                eprintln!("{} round {round}: {method} {:.3} s", cfg.label(), run.secs);
                times.entry(method).or_default().push(run);
            }
            let bytes = times.values().next().map_or(0, |r| r[0].bytes);
            sync_all_filesystems();
            if let Some(s) = fio(&dir, bytes) {
                fio_secs.push(s);
            }
        }
        report += &table(cfg, &methods, &times, &fio_secs, &seen);
    }
    println!("{report}");
    if let Ok(path) = std::env::var("EAGERIO_PQW_REPORT") {
        std::fs::write(&path, &report)?;
        eprintln!("report written to {path}");
    }
    Ok(())
}

/// One configuration's table, its targets and how the outputs were checked.
fn table(
    cfg: Config,
    methods: &[&str],
    times: &HashMap<&str, Vec<Run>>,
    fio_secs: &[f64],
    seen: &HashMap<u64, String>,
) -> String {
    let med = |m: &str| times.get(m).map_or(f64::NAN, |r| median(r.iter().map(|r| r.secs).collect()));
    let arrow = med("arrow");
    let mut s = format!("## {}\n\n", cfg.label());
    s += "| method | time to durable, median (min..max) | after the last batch | MB/s | CPU s | peak RSS MiB | peak in flight MiB | vs ArrowWriter |\n";
    s += "|---|---:|---:|---:|---:|---:|---:|---:|\n";
    for &m in methods {
        let runs = &times[m];
        let t = med(m);
        let (lo, hi) = runs.iter().fold((f64::MAX, 0f64), |(lo, hi), r| (lo.min(r.secs), hi.max(r.secs)));
        let bytes = runs[0].bytes as f64;
        let cpu = median(runs.iter().map(|r| r.cpu).collect());
        let tail = median(runs.iter().map(|r| r.tail).collect());
        let rss = runs.iter().map(|r| r.rss).max().unwrap_or(0) as f64 / (1 << 20) as f64;
        let flight = runs
            .iter()
            .filter_map(|r| r.in_flight)
            .max()
            .map_or("".into(), |b| format!("{:.0}", b as f64 / (1 << 20) as f64));
        s += &format!(
            "| {m} | {t:.3} s ({lo:.3}..{hi:.3}) | {tail:.3} s | {:.0} | {cpu:.2} | {rss:.0} | {flight} | {:.2}x |\n",
            bytes / t / 1e6,
            arrow / t
        );
    }
    let fio_med = if fio_secs.is_empty() { None } else { Some(median(fio_secs.to_vec())) };
    match fio_med {
        Some(f) => {
            s += &format!("| fio psync 1 MiB, end_fsync (process wall) | {f:.3} s | | | | | | {:.2}x |\n", arrow / f)
        }
        None => s += "| fio | not installed (benches/setup.sh installs it) | | | | | | |\n",
    }
    let parallel = med("parallel");
    let bound = med("encode-parallel").max(fio_med.unwrap_or(0.0));
    s += "\n| target | measured | met |\n|---|---:|:-:|\n";
    let mut target = |name: String, ratio: f64, want: f64| {
        s += &format!("| {name} | {ratio:.2}x | {} |\n", if ratio >= want { "yes" } else { "no" });
    };
    let default = cfg.row_group.is_none();
    for m in ["eager-tokio", "eager-uring", "eager-glommio"] {
        let want = if m == "eager-glommio" { 1.3 } else { 1.5 };
        target(format!("{m} vs ArrowWriter (>= {want}x)"), arrow / med(m), want);
        let want_peer = if default { 1.0 } else { 1.15 };
        target(format!("{m} vs the parallel peer (>= {want_peer}x)"), parallel / med(m), want_peer);
        target(format!("{m} vs the overlap bound max(encode-parallel, fio) (>= 0.85x)"), bound / med(m), 0.85);
    }
    let mut checks: Vec<&String> = seen.values().collect();
    checks.sort();
    checks.dedup();
    s += &format!(
        "\nEvery writer but the floor wrote the same bytes; {} distinct file(s) read back by {}.\n\n",
        seen.len(),
        checks.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")
    );
    s
}
