//! The gather benchmark: every eagerio backend against every baseline, in one run, on one table
//! file, with a markdown report and SVG charts under `target/eagerio-bench/`.
//!
//! ```text
//! cargo bench --bench gather                     # the full run: 2 GiB table, 2 rounds of 3 runs
//! cargo bench --bench gather -- --smoke          # small table, one run (CI); or EAGERIO_BENCH_SMOKE=1
//! ```
//!
//! Environment overrides: `EAGERIO_BENCH_MB` (table size), `EAGERIO_BENCH_ROUNDS`,
//! `EAGERIO_BENCH_RUNS` (per round), `EAGERIO_BENCH_WARM_SAMPLES` (timed warm gathers per run),
//! `EAGERIO_BENCH_ONLY` (comma list of `fio,w1,w3,w4`),
//! `EAGERIO_BENCH_METHODS` (comma list; W1 runs the methods whose name contains one of them),
//! `EAGERIO_BENCH_ROW_SIZES` (comma list of W1's row sizes in bytes),
//! `EAGERIO_BENCH_DIR` (output folder), `EAGERIO_BENCH_EVICT=fadvise` (never drop_caches, which
//! empties every process's page cache). `benches/setup.sh` installs fio, the ceiling.
//!
//! The disk's price: each W1 round starts with fio random reads at 1, 4, 8 and 16 KiB (QD128),
//! fitted by least squares to a cost per read plus a cost per KiB. A method's plan (the device
//! reads and bytes of its run, from `/sys/block/*/stat`) is priced with it: a cold gather at
//! 1.00x of its price runs its plan at the disk's limit.
//!
//! Workloads:
//! - W1 cold: random rows (drawn with replacement, fresh ids every run), the table's pages
//!   evicted before every timed gather; rounds one after the other, and within a round, run r of
//!   every method on the same ids before run r + 1 (the disk drifts by minutes);
//! - W2 warm: the same gathers after one untimed pass, timed 5 times a run (a warm gather takes
//!   3-200 ms, where one scheduling hiccup moves a median of 3 by 20-50%);
//! - W3: a fan-out of 228 chunk writes, lazy deferred futures against the eager sink, with and
//!   without 2 ms injected per write;
//! - W4: scaling with gather size and with depth.
//!
//! Every output is checked against the fill function before its time counts: a wrong byte makes
//! the cell FAILED.

mod fio;
mod methods;
mod probe;
mod report;
mod sink;
#[path = "../../examples/support/table.rs"]
mod table;

use std::{
    fmt::Write as _,
    fs::File,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use methods::{Env, Family, Method, Res};
use report::{Cell, Sample};

/// What to run; the full run's values unless smoke or the environment says otherwise.
struct Config {
    smoke: bool,
    table_bytes: u64,
    rounds: usize,
    runs: usize,
    /// Timed warm gathers of each method per run, after its one untimed pass.
    warm_samples: usize,
    rows: usize,
    row_sizes: Vec<u64>,
    w4_sizes: Vec<usize>,
    w4_size_row: u64,
    w4_depths: Vec<usize>,
    w4_depth_rows: usize,
    w4_depth_row: u64,
    sink_chunks: usize,
    sink_min: usize,
    sink_max: usize,
    sink_latency: Duration,
    fio_secs: u32,
    fio_jobs: Vec<(u64, u32)>,
    /// Block sizes of the price's fio jobs (QD [`PRICE_DEPTH`]), run at the start of each round.
    price_bs: Vec<u64>,
    only: Option<Vec<String>>,
    methods: Option<Vec<String>>,
    dir: PathBuf,
}

fn env_parse<T: std::str::FromStr>(name: &str) -> Res<Option<T>>
where
    T::Err: std::fmt::Display,
{
    match std::env::var(name) {
        Ok(s) => Ok(Some(s.trim().parse().map_err(|e| format!("{name}={s:?}: {e}"))?)),
        Err(_) => Ok(None),
    }
}

impl Config {
    fn from_env() -> Res<Config> {
        let smoke = std::env::args().any(|a| a == "--smoke")
            || std::env::var("EAGERIO_BENCH_SMOKE").is_ok_and(|v| !v.is_empty() && v != "0");
        let mb: u64 = env_parse("EAGERIO_BENCH_MB")?.unwrap_or(if smoke { 64 } else { 2048 });
        let runs: usize = env_parse("EAGERIO_BENCH_RUNS")?.unwrap_or(if smoke { 1 } else { 3 });
        let rounds: usize = env_parse("EAGERIO_BENCH_ROUNDS")?.unwrap_or(if smoke { 1 } else { 2 });
        let warm_samples: usize = env_parse("EAGERIO_BENCH_WARM_SAMPLES")?.unwrap_or(if smoke { 1 } else { 5 });
        let list = |name: &str| {
            std::env::var(name).ok().map(|s| {
                s.split(',').map(|x| x.trim().to_lowercase()).filter(|x| !x.is_empty()).collect::<Vec<String>>()
            })
        };
        let (only, methods) = (list("EAGERIO_BENCH_ONLY"), list("EAGERIO_BENCH_METHODS"));
        let row_sizes: Vec<u64> = match list("EAGERIO_BENCH_ROW_SIZES") {
            Some(v) => v
                .iter()
                .map(|x: &String| x.parse().map_err(|e| format!("EAGERIO_BENCH_ROW_SIZES={x:?}: {e}")))
                .collect::<Result<_, _>>()?,
            None => vec![90, 4096, 5120],
        };
        if runs == 0 || rounds == 0 || warm_samples == 0 {
            return Err(
                "EAGERIO_BENCH_RUNS, EAGERIO_BENCH_ROUNDS and EAGERIO_BENCH_WARM_SAMPLES must be at least 1".into()
            );
        }
        // Smoke runs (CI) keep their own table and report, so they never overwrite a full run's.
        let dir = std::env::var_os("EAGERIO_BENCH_DIR").map(PathBuf::from).unwrap_or_else(|| {
            let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/eagerio-bench");
            if smoke {
                d.join("smoke")
            } else {
                d
            }
        });
        let c = if smoke {
            Config {
                smoke,
                table_bytes: mb << 20,
                rounds,
                runs,
                warm_samples,
                rows: 2_000,
                row_sizes: row_sizes.clone(),
                w4_sizes: vec![1_000, 10_000],
                w4_size_row: 90,
                w4_depths: vec![1, 64],
                w4_depth_rows: 2_000,
                w4_depth_row: 4096,
                sink_chunks: 228,
                sink_min: 4 << 10,
                sink_max: 64 << 10,
                sink_latency: Duration::from_millis(2),
                fio_secs: 1,
                fio_jobs: vec![],
                price_bs: vec![4096, 16384],
                only,
                methods,
                dir,
            }
        } else {
            Config {
                smoke,
                table_bytes: mb << 20,
                rounds,
                runs,
                warm_samples,
                rows: 40_000,
                row_sizes,
                w4_sizes: vec![1_000, 10_000, 100_000, 1_000_000],
                w4_size_row: 90,
                w4_depths: vec![1, 4, 16, 64, 128, 256, 512],
                w4_depth_rows: 10_000,
                w4_depth_row: 4096,
                sink_chunks: 228,
                sink_min: 100 << 10,
                sink_max: 2 << 20,
                sink_latency: Duration::from_millis(2),
                fio_secs: 5,
                fio_jobs: vec![(4096, 1), (4096, 32), (4096, 512)],
                price_bs: vec![1024, 4096, 8192, 16384],
                only,
                methods,
                dir,
            }
        };
        if c.table_bytes < 16 << 20 {
            return Err("EAGERIO_BENCH_MB must be at least 16".into());
        }
        Ok(c)
    }

    fn wants(&self, part: &str) -> bool {
        self.only.as_ref().is_none_or(|o| o.iter().any(|x| x == part))
    }

    fn wants_method(&self, name: &str) -> bool {
        let name = name.to_lowercase();
        self.methods.as_ref().is_none_or(|m| m.iter().any(|x| name.contains(x.as_str())))
    }

    fn command(&self) -> String {
        let mut envs = Vec::new();
        for v in [
            "EAGERIO_BENCH_MB",
            "EAGERIO_BENCH_ROUNDS",
            "EAGERIO_BENCH_RUNS",
            "EAGERIO_BENCH_WARM_SAMPLES",
            "EAGERIO_BENCH_ONLY",
            "EAGERIO_BENCH_METHODS",
            "EAGERIO_BENCH_ROW_SIZES",
            "EAGERIO_BENCH_SMOKE",
            "EAGERIO_BENCH_EVICT",
        ] {
            if let Ok(x) = std::env::var(v) {
                envs.push(format!("{v}={x} "));
            }
        }
        let smoke_arg = if std::env::args().any(|a| a == "--smoke") { " -- --smoke" } else { "" };
        format!("{}cargo bench --bench gather{smoke_arg}", envs.concat())
    }
}

/// Takes timed, verified samples of `m`: one cold (after an eviction), or several warm (after one
/// untimed pass).
struct Probe {
    disk: Option<probe::Disk>,
    rss: probe::PeakRss,
    table: File,
}

impl Probe {
    fn sample(&self, env: &Env, m: &mut dyn Method, ids: &[u64], row_size: u64, cold: bool) -> Result<Sample, String> {
        let r = m.ready(env, cold).map_err(|e| e.to_string()).and_then(|()| self.timed(env, m, ids, row_size));
        m.finish();
        r
    }

    /// `n` warm samples: the rows' pages cached, as an application that also reads the file
    /// keeps them (buffered reads first: a method reading with O_DIRECT caches nothing by
    /// itself), then the method's own untimed pass, then `n` timed gathers. An error ends them.
    fn warm(&self, env: &Env, m: &mut dyn Method, ids: &[u64], row_size: u64, n: usize) -> Vec<Result<Sample, String>> {
        let s = |e: Box<dyn std::error::Error>| e.to_string();
        let pass = (|| {
            m.ready(env, false).map_err(s)?;
            table::cache_rows(&env.path, ids, row_size).map_err(|e| format!("caching the rows: {e}"))?;
            let pass = m.run(env, ids).map_err(s)?;
            table::verify_rows(&pass.bytes, ids, row_size).map_err(|e| format!("warm-up pass: {e}"))
        })();
        let mut out = Vec::new();
        if let Err(e) = pass {
            out.push(Err(e));
        }
        while out.len() < n && out.last().is_none_or(Result::is_ok) {
            let r = m.ready(env, false).map_err(s).and_then(|()| self.timed(env, m, ids, row_size));
            out.push(r);
        }
        m.finish();
        out
    }

    /// One timed, verified gather of `ids` by `m`, as the method stands.
    fn timed(&self, env: &Env, m: &mut dyn Method, ids: &[u64], row_size: u64) -> Result<Sample, String> {
        let s = |e: Box<dyn std::error::Error>| e.to_string();
        let resident0 = probe::resident_bytes(&self.table);
        let disk0 = self.disk.as_ref().and_then(probe::Disk::counters);
        let faults0 = probe::major_faults();
        self.rss.reset();
        let t = Instant::now();
        let out = m.run(env, ids);
        let elapsed = t.elapsed();
        let faults = probe::major_faults() - faults0;
        let disk = self.disk.as_ref().and_then(probe::Disk::counters).zip(disk0).map(|(a, b)| a.since(b));
        let peak_rss = self.rss.read();
        let out = out.map_err(s)?;
        let resident1 = probe::resident_bytes(&self.table);
        table::verify_rows(&out.bytes, ids, row_size)?;
        Ok(Sample {
            elapsed,
            rows: ids.len(),
            useful: out.bytes.len() as u64,
            reads: out.reads,
            call: out.call,
            gap: out.gap,
            disk,
            major_faults: faults,
            cache_growth: resident1 as i64 - resident0 as i64,
            peak_rss,
        })
    }
}

/// Records a sample (or the failure) into `cell`, printing progress.
fn record(cell: &mut Cell, r: Result<Sample, String>, what: &str, notes: &mut Vec<String>) {
    match r {
        Ok(s) => {
            let gap = s.gap.map(|g| format!(", gap {g} B")).unwrap_or_default();
            eprintln!("  {what}: {:.1} ms, {:.0} rows/s{gap}", s.elapsed.as_secs_f64() * 1e3, s.rows_per_s());
            cell.samples.push(s);
        }
        Err(e) => {
            eprintln!("  {what}: FAILED: {e}");
            if cell.failed.is_none() {
                notes.push(format!("FAILED: {what}: {e}"));
            }
            cell.failed.get_or_insert(e);
        }
    }
}

/// Prepares `m` for `row_size`; an unavailable method (say glommio without io_uring) is noted
/// and skipped, not failed.
fn prepare(env: &Env, m: &mut dyn Method, row_size: u64, notes: &mut Vec<String>) -> bool {
    match m.prepare(env, row_size) {
        Ok(()) => {
            // One note per distinct detail (the depth sweep opens the same engine many times).
            if let Some(d) = m.detail() {
                if !notes.iter().any(|n| n.ends_with(&format!(": {d}"))) {
                    notes.push(format!("{}: {d}", m.name()));
                }
            }
            true
        }
        Err(e) => {
            let n = format!("{}: not measured at {row_size} B rows: {e}", m.name());
            eprintln!("  {n}");
            if !notes.contains(&n) {
                notes.push(n);
            }
            false
        }
    }
}

/// The depth of the price's fio jobs.
const PRICE_DEPTH: u32 = 128;

/// One fio job, when fio runs here; a failure is noted.
fn run_fio(cfg: &Config, path: &Path, runs: bool, bs: u64, qd: u32, notes: &mut Vec<String>) -> Option<fio::FioResult> {
    if !runs {
        return None;
    }
    eprintln!("fio: {bs} B random direct reads, io_uring, QD {qd}, {} s", cfg.fio_secs);
    match fio::run(path, bs, qd, cfg.fio_secs) {
        Ok(r) => Some(r),
        Err(e) => {
            notes.push(format!("fio {bs} B QD {qd}: {e}"));
            None
        }
    }
}

/// A round's price: fio at each of the price's block sizes, and the fit.
fn price_round(
    cfg: &Config,
    path: &Path,
    runs: bool,
    notes: &mut Vec<String>,
) -> (Vec<fio::FioResult>, Option<eagerio::core::DevicePrice>) {
    let jobs: Vec<fio::FioResult> =
        cfg.price_bs.iter().filter_map(|&bs| run_fio(cfg, path, runs, bs, PRICE_DEPTH, notes)).collect();
    let price = fio::price(&jobs, PRICE_DEPTH);
    if let Some(p) = price {
        eprintln!("price: {p}");
    }
    (jobs, price)
}

fn seed(workload: u64, row_size: u64, size: usize, run: usize) -> u64 {
    table::mix(workload << 56 ^ row_size << 32 ^ (size as u64) << 8 ^ run as u64)
}

fn bytes_label(b: u64) -> String {
    if b >= 1024 && b % 1024 == 0 {
        format!("{} KiB", b / 1024)
    } else {
        format!("{b} B")
    }
}

fn main() -> Res<()> {
    let started = Instant::now();
    let cfg = Config::from_env()?;
    let (path, written) = {
        let t = Instant::now();
        let (p, w) = table::ensure(&cfg.dir, cfg.table_bytes)?;
        if w {
            eprintln!("table: wrote and synced {} in {:.1} s", p.display(), t.elapsed().as_secs_f64());
        } else {
            eprintln!("table: reusing {} (size and tag match)", p.display());
        }
        (p, w)
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let env = Env { path: path.clone(), rt };
    let disk = probe::Disk::of(&path);
    match std::env::var("EAGERIO_BENCH_EVICT").as_deref() {
        Ok("fadvise") => probe::fadvise_only(),
        Ok("drop_caches") | Err(_) => {}
        Ok(other) => return Err(format!("EAGERIO_BENCH_EVICT={other:?}: use fadvise or drop_caches").into()),
    }
    let evict_how = probe::evict(&path)?;
    let pr = Probe { disk: disk.clone(), rss: probe::PeakRss::new(), table: File::open(&path)? };
    let machine = probe::machine(&path, disk.as_ref());
    eprintln!("machine: {machine}");
    let mut notes: Vec<String> = Vec::new();
    let direct = {
        let _g = env.rt.enter();
        eagerio::tokio::TokioEngine::open_blocking(&path, Default::default())
            .map(|s| s.engine().is_direct())
            .unwrap_or(false)
    };

    // fio: the ceiling by depth (once), and the price (at the start of every W1 round).
    let mut fio_results = Vec::new();
    let fio_runs = cfg.wants("fio") && fio::available();
    let fio_note = if !cfg.wants("fio") {
        "fio: not run (EAGERIO_BENCH_ONLY)".to_string()
    } else if !fio_runs {
        "fio: not installed (run benches/setup.sh); no price".to_string()
    } else {
        String::new()
    };
    for &(bs, qd) in &cfg.fio_jobs {
        fio_results.extend(run_fio(&cfg, &path, fio_runs, bs, qd, &mut notes));
    }
    // Each round's price jobs and fit.
    let mut prices: Vec<(Vec<fio::FioResult>, Option<eagerio::core::DevicePrice>)> = Vec::new();

    // W1 cold and W2 warm, in rounds.
    let mut w1: Vec<Cell> = Vec::new();
    if cfg.wants("w1") {
        let mut ms: Vec<Box<dyn methods::Method>> =
            methods::all_methods().into_iter().filter(|m| cfg.wants_method(&m.name())).collect();
        for round in 0..cfg.rounds {
            prices.push(price_round(&cfg, &path, fio_runs, &mut notes));
            let price = prices[round].1;
            for &rs in &cfg.row_sizes {
                let rows = cfg.table_bytes / rs;
                let label = bytes_label(rs);
                eprintln!("W1/W2 round {}: {} rows of {label} per gather, {} runs", round + 1, cfg.rows, cfg.runs);
                let ok: Vec<bool> = ms.iter_mut().map(|m| prepare(&env, m.as_mut(), rs, &mut notes)).collect();
                let mut cells: Vec<[Cell; 2]> = ms
                    .iter()
                    .map(|m| {
                        let cell = |cache: &str| {
                            let params =
                                vec![(round + 1).to_string(), cfg.rows.to_string(), label.clone(), cache.to_string()];
                            Cell::new(params, format!("W1 r{round} {rs} {cache}"), m.name(), m.family()).priced(price)
                        };
                        [cell("cold"), cell("warm")]
                    })
                    .collect();
                for run in 0..cfg.runs {
                    let ids = table::ids(seed(1, rs, cfg.rows, round * cfg.runs + run), cfg.rows, rows);
                    for (mi, m) in ms.iter_mut().enumerate() {
                        if !ok[mi] {
                            continue;
                        }
                        let name = m.name();
                        let what = format!("{label} round {} run {run} {name}", round + 1);
                        let r = pr.sample(&env, m.as_mut(), &ids, rs, true);
                        record(&mut cells[mi][0], r, &format!("{what} cold"), &mut notes);
                        for r in pr.warm(&env, m.as_mut(), &ids, rs, cfg.warm_samples) {
                            record(&mut cells[mi][1], r, &format!("{what} warm"), &mut notes);
                        }
                    }
                }
                let (cold, warm): (Vec<_>, Vec<_>) = cells.into_iter().map(|[c, w]| (c, w)).unzip();
                w1.extend(cold.into_iter().zip(ok.iter()).filter(|(_, &ok)| ok).map(|(c, _)| c));
                w1.extend(warm.into_iter().zip(ok.iter()).filter(|(_, &ok)| ok).map(|(c, _)| c));
            }
        }
    }
    // W4's cells are priced with the last round's fit (or a fit of their own when W1 did not run).
    if prices.is_empty() && cfg.wants("w4") {
        prices.push(price_round(&cfg, &path, fio_runs, &mut notes));
    }
    let w4_price = prices.last().and_then(|(_, p)| *p);

    // W3, the fan-out sink.
    let mut w3: Vec<sink::SinkCell> = Vec::new();
    let sink_opts = eagerio::SinkOptions::default();
    let mut sink_total = 0u64;
    if cfg.wants("w3") {
        let chunks = sink::chunks(cfg.sink_chunks, cfg.sink_min, cfg.sink_max);
        sink_total = chunks.iter().map(|(_, b)| b.len() as u64).sum();
        let out = cfg.dir.join("sink.bin");
        eprintln!("W3: {} chunks, {:.1} MB, {} runs", chunks.len(), sink_total as f64 / 1e6, cfg.runs);
        for latency in [None, Some(cfg.sink_latency)] {
            let lat = latency.map_or_else(|| "none".to_string(), |l| format!("{} ms", l.as_millis()));
            for eager in [false, true] {
                let name =
                    if eager { "eagerio sink (TokioWriter, append)" } else { "deferred futures, awaited in order" };
                let mut runs = Vec::new();
                let mut failed = None;
                for run in 0..cfg.runs {
                    let r = if eager {
                        sink::eager(&env.rt, &out, &chunks, latency, sink_opts)
                    } else {
                        sink::deferred(&env.rt, &out, &chunks, latency)
                    };
                    let r = r.map_err(|e| e.to_string()).and_then(|r| table::verify_file(&out, sink_total).map(|()| r));
                    let _ = std::fs::remove_file(&out);
                    match r {
                        Ok(r) => {
                            eprintln!("  latency {lat} run {run} {name}: {:.1} ms", r.elapsed.as_secs_f64() * 1e3);
                            runs.push(r);
                        }
                        Err(e) => {
                            eprintln!("  latency {lat} run {run} {name}: FAILED: {e}");
                            notes.push(format!("FAILED: W3 {name} latency {lat}: {e}"));
                            failed = Some(e);
                        }
                    }
                }
                let median = if failed.is_some() {
                    None
                } else {
                    let mut v = runs.clone();
                    v.sort_by_key(|r| r.elapsed);
                    v.get(v.len() / 2).copied()
                };
                w3.push(sink::SinkCell { latency: lat.clone(), method: name.to_string(), median, failed });
            }
        }
    }

    // W4, scaling with gather size and depth.
    let mut w4_size: Vec<Cell> = Vec::new();
    let mut w4_depth: Vec<Cell> = Vec::new();
    if cfg.wants("w4") {
        let rs = cfg.w4_size_row;
        let rows = cfg.table_bytes / rs;
        let mut ms = methods::eagerio_backends();
        ms.push(Box::new(methods::PoolPread::new(32)));
        ms.push(Box::new(methods::Mmap::new(false)));
        ms.push(Box::new(methods::OnGlommio::read_many(128, 16 << 10)));
        let ok: Vec<bool> = ms.iter_mut().map(|m| prepare(&env, m.as_mut(), rs, &mut notes)).collect();
        for &n in &cfg.w4_sizes {
            eprintln!("W4 size: {n} rows of {} cold, {} runs", bytes_label(rs), cfg.runs);
            let mut cells: Vec<Cell> = ms
                .iter()
                .map(|m| {
                    let params = vec![n.to_string(), bytes_label(rs)];
                    Cell::new(params, format!("W4 size {n}"), m.name(), m.family()).priced(w4_price)
                })
                .collect();
            for run in 0..cfg.runs {
                let ids = table::ids(seed(4, rs, n, run), n, rows);
                for (mi, m) in ms.iter_mut().enumerate() {
                    if ok[mi] {
                        let name = m.name();
                        let r = pr.sample(&env, m.as_mut(), &ids, rs, true);
                        record(&mut cells[mi], r, &format!("{n} rows run {run} {name}"), &mut notes);
                    }
                }
            }
            w4_size.extend(cells.into_iter().zip(&ok).filter(|(_, &ok)| ok).map(|(c, _)| c));
        }
        drop(ms);

        let rs = cfg.w4_depth_row;
        let rows = cfg.table_bytes / rs;
        let n = cfg.w4_depth_rows;
        for &d in &cfg.w4_depths {
            eprintln!("W4 depth {d}: {n} rows of {} cold, {} runs", bytes_label(rs), cfg.runs);
            let mut ms = methods::eagerio_at_depth(d);
            ms.push(Box::new(methods::OnGlommio::read_many(d, 16 << 10)));
            ms.push(Box::new(methods::PoolPread::new(d)));
            let ok: Vec<bool> = ms.iter_mut().map(|m| prepare(&env, m.as_mut(), rs, &mut notes)).collect();
            let mut cells: Vec<Cell> = ms
                .iter()
                .map(|m| {
                    let params = vec![d.to_string(), n.to_string(), bytes_label(rs)];
                    Cell::new(params, format!("W4 depth {d}"), m.name(), m.family()).priced(w4_price)
                })
                .collect();
            for run in 0..cfg.runs {
                let ids = table::ids(seed(5, rs, n, run), n, rows);
                for (mi, m) in ms.iter_mut().enumerate() {
                    if ok[mi] {
                        let name = m.name();
                        let r = pr.sample(&env, m.as_mut(), &ids, rs, true);
                        record(&mut cells[mi], r, &format!("depth {d} run {run} {name}"), &mut notes);
                    }
                }
            }
            w4_depth.extend(cells.into_iter().zip(&ok).filter(|(_, &ok)| ok).map(|(c, _)| c));
        }
    }

    // The report.
    let mut md = String::new();
    let date = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let _ = writeln!(md, "# eagerio gather benchmark{}\n", if cfg.smoke { " (smoke)" } else { "" });
    let _ = writeln!(md, "`{}`, {date}, {:.0} s in all.\n", cfg.command(), started.elapsed().as_secs_f64());
    let _ = writeln!(md, "- machine: {machine}");
    let _ = writeln!(
        md,
        "- table: `{}`, {} MiB{}",
        path.display(),
        cfg.table_bytes >> 20,
        if written { " (written by this run)" } else { " (reused)" }
    );
    let _ = writeln!(md, "- cold = the table's pages evicted before every timed gather: {}", evict_how.describe());
    let _ = writeln!(
        md,
        "- median of {} run(s) per cold cell, and of {} timed gathers per warm cell ({} a run, after one untimed pass); fresh \
         random row ids (with replacement) every run, the same ids for every method in a run",
        cfg.runs,
        cfg.runs * cfg.warm_samples,
        cfg.warm_samples
    );
    let _ = writeln!(
        md,
        "- eagerio tokio reads with O_DIRECT: {direct} (so its warm runs still go to the device); buffered baselines use the page cache"
    );
    let _ = writeln!(
        md,
        "- every output was checked against the fill function before its time counted; counters are from the median run; \
         device counters are the whole disk's ({}) and include other processes' I/O; page cache +MB is the table's resident \
         growth over the run (mincore); peak RSS is {}",
        disk.as_ref().map_or("not found", |d| d.name.as_str()),
        if pr.rss.is_per_run() {
            "the run's high-water mark over its starting RSS (malloc_trim, then VmHWM reset via /proc/self/clear_refs)"
        } else {
            "process-wide ru_maxrss (monotonic)"
        }
    );
    let _ = writeln!(
        md,
        "- vs best baseline: rows/s over the best baseline's in the same cell; plan price: the median run's device \
         reads and bytes priced with its round's fit (below); vs price: that price over the run's time (1.00x is the \
         disk's limit for that plan)\n"
    );

    let _ = writeln!(md, "## fio and the disk's price (random direct reads, io_uring, {} s each)\n", cfg.fio_secs);
    let all_fio: Vec<(String, &fio::FioResult)> = fio_results
        .iter()
        .map(|r| ("depth sweep".to_string(), r))
        .chain(
            prices
                .iter()
                .enumerate()
                .flat_map(|(i, (jobs, _))| jobs.iter().map(move |r| (format!("price, round {}", i + 1), r))),
        )
        .collect();
    if all_fio.is_empty() {
        let _ = writeln!(md, "{}\n", if fio_note.is_empty() { "fio: no result" } else { &fio_note });
    } else {
        let _ = writeln!(md, "| for | block | iodepth | IOPS | MB/s |\n|---|---:|---:|---:|---:|");
        for (what, r) in &all_fio {
            let _ = writeln!(
                md,
                "| {what} | {} | {} | {:.0} | {:.1} |",
                bytes_label(r.bs),
                r.depth,
                r.iops,
                r.bytes_per_s / 1e6
            );
        }
        let _ = writeln!(md);
        for (i, (_, p)) in prices.iter().enumerate() {
            let fit = p.map_or_else(|| "no fit (fewer than two fio results)".to_string(), |p| p.to_string());
            let _ = writeln!(md, "- round {} price, least squares over 1/IOPS at QD{PRICE_DEPTH}: {fit}", i + 1);
        }
        let _ = writeln!(md);
    }

    if !w1.is_empty() {
        let _ = writeln!(md, "## W1 cold and W2 warm: random-row gathers\n");
        let _ = writeln!(md, "{}", report::gather_table(&["round", "rows", "row size", "cache"], &w1));
    }
    if !w3.is_empty() {
        let _ = writeln!(
            md,
            "## W3: fan-out sink, {} chunks of {}-{} ({:.1} MB) at reserved offsets, then fdatasync\n",
            cfg.sink_chunks,
            bytes_label(cfg.sink_min as u64),
            bytes_label(cfg.sink_max as u64),
            sink_total as f64 / 1e6
        );
        let _ = writeln!(
            md,
            "| injected latency per write | method | median ms | MB/s | writes started before the wait loop | peak in-flight MB | in-flight bound MB | vs deferred |"
        );
        let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|---:|");
        for c in &w3 {
            let (lat, name) = (&c.latency, &c.method);
            let base = w3.iter().find(|x| &x.latency == lat && !x.is_eager()).and_then(|x| x.median);
            match (c.median, &c.failed) {
                (Some(m), None) => {
                    let ratio = base.map_or_else(
                        || "-".into(),
                        |b| format!("{:.2}x", b.elapsed.as_secs_f64() / m.elapsed.as_secs_f64()),
                    );
                    let _ = writeln!(
                        md,
                        "| {lat} | {name} | {:.1} | {:.1} | {} of {} | {} | {} | {ratio} |",
                        m.elapsed.as_secs_f64() * 1e3,
                        sink_total as f64 / 1e6 / m.elapsed.as_secs_f64(),
                        m.started_before_wait,
                        cfg.sink_chunks,
                        m.peak_in_flight.map_or_else(|| "-".into(), |p| format!("{:.1}", p as f64 / 1e6)),
                        if c.is_eager() {
                            format!("{:.1}", sink_opts.max_in_flight_bytes as f64 / 1e6)
                        } else {
                            "-".into()
                        },
                    );
                }
                _ => {
                    let _ = writeln!(md, "| {lat} | {name} | FAILED | FAILED | - | - | - | - |");
                }
            }
        }
        let _ =
            writeln!(md, "\nThe output file was read back and checked against the fill function after every run.\n");
    }
    if !w4_size.is_empty() {
        let _ = writeln!(md, "## W4: gather size (cold)\n");
        let _ = writeln!(md, "{}", report::gather_table(&["rows", "row size"], &w4_size));
    }
    if !w4_depth.is_empty() {
        let _ = writeln!(
            md,
            "## W4: depth (cold; eagerio tokio blocking workers, glommio read_many concurrency, pool threads)\n"
        );
        let _ = writeln!(md, "{}", report::gather_table(&["depth", "rows", "row size"], &w4_depth));
    }

    let _ = writeln!(md, "## Targets (reported, not asserted)\n");
    for t in targets(&w1, &w3) {
        let _ = writeln!(md, "- {t}");
    }
    let _ = writeln!(
        md,
        "- streamed gathers (first row, median row, total against the future): `cargo run --release --example \
         stream_arrivals`, docs/bench/stream.md\n- planner <= 50 ns/row at 40k rows: `cargo bench --bench planner`\n"
    );
    if !notes.is_empty() {
        let _ = writeln!(md, "## Notes\n");
        for n in &notes {
            let _ = writeln!(md, "- {n}");
        }
        let _ = writeln!(md);
    }

    let charts = draw_charts(&cfg.dir, &w1, &w4_size, &w4_depth, &fio_results);
    let _ = writeln!(md, "Charts: {}", charts.join(", "));
    println!("{md}");
    let report_path = cfg.dir.join("report.md");
    std::fs::write(&report_path, &md)?;
    eprintln!("report: {}", report_path.display());
    let failed =
        w1.iter().chain(&w4_size).chain(&w4_depth).any(|c| c.failed.is_some()) || w3.iter().any(|x| x.failed.is_some());
    if failed {
        return Err("some method's output was wrong or it failed (see FAILED above)".into());
    }
    Ok(())
}

/// The performance issue's targets, each with this run's value in every round.
fn targets(w1: &[Cell], w3: &[sink::SinkCell]) -> Vec<String> {
    let distinct = |f: &dyn Fn(&Cell) -> Option<String>| {
        let mut v: Vec<String> = Vec::new();
        for x in w1.iter().filter_map(f) {
            if !v.contains(&x) {
                v.push(x);
            }
        }
        v
    };
    let sizes = distinct(&|c| Some(c.params[2].clone()));
    let rounds = distinct(&|c| Some(c.params[0].clone()));
    let backends = distinct(&|c| (c.family == Family::Eagerio).then(|| c.method.clone()));
    // One line per target and row size: each backend's value in every round, met when every
    // round meets it. `measure` sees the backend's cell and every cell of its group.
    let line = |what: &str,
                size: &str,
                cache: &str,
                unit: &str,
                measure: &dyn Fn(&Cell, &[&Cell]) -> Option<f64>,
                ok: &dyn Fn(f64) -> bool| {
        let parts: Vec<String> = backends
            .iter()
            .filter_map(|b| {
                let values: Vec<Option<f64>> = rounds
                    .iter()
                    .map(|r| {
                        let group: Vec<&Cell> = w1
                            .iter()
                            .filter(|c| &c.params[0] == r && c.params[2] == size && c.params[3] == cache)
                            .collect();
                        measure(group.iter().find(|c| &c.method == b)?, &group)
                    })
                    .collect();
                if values.iter().all(Option::is_none) {
                    return None;
                }
                let met = values.iter().all(|v| v.is_some_and(ok));
                let shown: Vec<String> =
                    values.iter().map(|v| v.map_or_else(|| "-".into(), |x| format!("{x:.2}{unit}"))).collect();
                Some(format!("{b} {} ({})", shown.join(" / "), if met { "met" } else { "not met" }))
            })
            .collect();
        let measured = if parts.is_empty() { "not measured".to_string() } else { parts.join("; ") };
        format!("{cache} {size}, {what} (round {}): {measured}", rounds.join(" / "))
    };
    fn peers<'a>(g: &[&'a Cell]) -> Vec<&'a Cell> {
        g.iter().filter(|x| x.family == Family::Baseline).copied().collect()
    }
    let mut t = Vec::new();
    for size in &sizes {
        t.push(line("every backend >= 0.95x of its own plan's price", size, "cold", "x", &|c, _| c.vs_price(), &|x| {
            x >= 0.95
        }));
        t.push(line(
            "every backend's plan priced <= 1.02x the cheapest peer plan",
            size,
            "cold",
            "x",
            &|c, g| {
                let cheapest = peers(g).iter().filter_map(|x| x.plan_price()).min()?;
                Some(c.plan_price()?.as_secs_f64() / cheapest.as_secs_f64())
            },
            &|x| x <= 1.02,
        ));
        t.push(line(
            "every backend >= 0.97x the best peer's rows/s",
            size,
            "cold",
            "x",
            &|c, g| Some(c.rows_per_s()? / best_baseline_of(&peers(g))?),
            &|x| x >= 0.97,
        ));
        t.push(line(
            "every backend <= 1.2x the faster mmap's time (both mapped by their own untimed pass)",
            size,
            "warm",
            "x",
            &|c, g| {
                let mmap = g
                    .iter()
                    .filter(|x| x.method.starts_with("mmap"))
                    .filter_map(|x| x.median())
                    .min_by_key(|s| s.elapsed)?;
                Some(c.median()?.elapsed.as_secs_f64() / mmap.elapsed.as_secs_f64())
            },
            &|x| x <= 1.2,
        ));
        for cache in ["cold", "warm"] {
            t.push(line(
                "time on the caller's thread inside the gather call, <= 1 ms",
                size,
                cache,
                " ms",
                &|c, _| Some(c.median()?.call?.as_secs_f64() * 1e3),
                &|x| x <= 1.0,
            ));
        }
    }

    let slow: Vec<_> = w3.iter().filter(|x| x.latency != "none").collect();
    let d = slow.iter().find(|x| !x.is_eager()).and_then(|x| x.median);
    let e = slow.iter().find(|x| x.is_eager()).and_then(|x| x.median);
    if let (Some(d), Some(e)) = (d, e) {
        let x = d.elapsed.as_secs_f64() / e.elapsed.as_secs_f64();
        let peak = e.peak_in_flight.unwrap_or(0);
        let bound = eagerio::SinkOptions::default().max_in_flight_bytes as u64;
        t.push(format!(
            "sink at 2 ms per write, >= 8x over deferred with in-flight memory bounded: {x:.2}x ({}), peak in flight \
             {:.1} MB under the {:.1} MB bound: {}",
            if x >= 8.0 { "met" } else { "not met" },
            peak as f64 / 1e6,
            bound as f64 / 1e6,
            if peak <= bound { "bounded" } else { "over the bound (one write larger than the bound may run alone)" }
        ));
    }
    t
}

/// The best median rows/s among `cells`.
fn best_baseline_of(cells: &[&Cell]) -> Option<f64> {
    cells.iter().filter_map(|c| c.rows_per_s()).max_by(f64::total_cmp)
}

/// Writes the SVG charts; returns links to them, relative to the report beside them (so the
/// report keeps working when the directory is copied), or why one failed.
fn draw_charts(dir: &Path, w1: &[Cell], w4_size: &[Cell], w4_depth: &[Cell], fio: &[fio::FioResult]) -> Vec<String> {
    let mut out = Vec::new();
    let mut done = |name: &str, r: Result<(), String>| match r {
        Ok(()) => out.push(format!("[{name}]({name})")),
        Err(e) => out.push(format!("{name} failed: {e}")),
    };
    for (cache, file, title) in [
        ("cold", "w1-cold.svg", "W1 cold random-row gathers: rows/s by row size"),
        ("warm", "w2-warm.svg", "W2 warm random-row gathers: rows/s by row size"),
    ] {
        // The last round's cells.
        let last = w1.last().map(|c| c.params[0].clone()).unwrap_or_default();
        let cells: Vec<&Cell> = w1.iter().filter(|c| c.params[3] == cache && c.params[0] == last).collect();
        if cells.is_empty() {
            continue;
        }
        let mut groups: Vec<String> = Vec::new();
        let mut names: Vec<String> = Vec::new();
        for c in &cells {
            if !groups.contains(&c.params[2]) {
                groups.push(c.params[2].clone());
            }
            if !names.contains(&c.method) {
                names.push(c.method.clone());
            }
        }
        let series: Vec<(String, Vec<Option<f64>>)> = names
            .iter()
            .map(|n| {
                let v = groups
                    .iter()
                    .map(|g| cells.iter().find(|c| &c.method == n && &c.params[2] == g).and_then(|c| c.rows_per_s()))
                    .collect();
                (n.clone(), v)
            })
            .collect();
        done(file, report::bar_chart(&dir.join(file), title, &groups, &series));
    }
    let lines = |cells: &[Cell], x_of: &dyn Fn(&Cell) -> f64| {
        let mut names: Vec<String> = Vec::new();
        for c in cells {
            if !names.contains(&c.method) {
                names.push(c.method.clone());
            }
        }
        names
            .iter()
            .map(|n| {
                let pts = cells
                    .iter()
                    .filter(|c| &c.method == n)
                    .filter_map(|c| c.rows_per_s().map(|r| (x_of(c), r)))
                    .collect();
                (n.clone(), pts)
            })
            .collect::<Vec<(String, Vec<(f64, f64)>)>>()
    };
    if !w4_depth.is_empty() {
        // One series per backend family: strip the depth suffix from the name.
        let renamed: Vec<Cell> = w4_depth
            .iter()
            .map(|c| {
                let mut c = c.clone();
                c.method = family_name(&c.method);
                c
            })
            .collect();
        let mut series = lines(&renamed, &|c| c.params[0].parse().unwrap_or(1.0));
        let fio4k: Vec<(f64, f64)> = fio.iter().filter(|r| r.bs == 4096).map(|r| (r.depth as f64, r.iops)).collect();
        if !fio4k.is_empty() {
            series.push(("fio 4 KiB randread IOPS".into(), fio4k));
        }
        done(
            "w4-depth.svg",
            report::line_chart(
                &dir.join("w4-depth.svg"),
                "W4 cold 4 KiB rows: rows/s by depth",
                "depth (reads in flight)",
                &series,
            ),
        );
    }
    if !w4_size.is_empty() {
        let series = lines(w4_size, &|c| c.params[0].parse().unwrap_or(1.0));
        done(
            "w4-size.svg",
            report::line_chart(
                &dir.join("w4-size.svg"),
                "W4 cold 90 B rows: rows/s by gather size",
                "rows per gather",
                &series,
            ),
        );
    }
    out
}

/// The series a depth-sweep method belongs to: its name without the depth (`eagerio tokio d16` ->
/// `eagerio tokio`, `eagerio uring l2 d16` -> `eagerio uring l2`).
fn family_name(method: &str) -> String {
    if method.starts_with("sorted pread x") {
        return "sorted pread (threads = depth)".into();
    }
    let mut words: Vec<&str> = method.split(' ').collect();
    if words.last().is_some_and(|w| w.len() > 1 && w.starts_with('d') && w[1..].parse::<u32>().is_ok()) {
        words.pop();
    }
    let name = words.join(" ");
    if name == "eagerio uring" {
        "eagerio uring l1".into()
    } else {
        name
    }
}
