//! The main demo: random-row gathers from a table file, eagerio's tokio backend against
//! `mmap` + `memcpy` and serial `pread`, measured the same way for each method in three states:
//! cold (page cache evicted before every timed gather); warm with a fresh mapping (the rows'
//! pages cached by a buffered read, and both eagerio's mapping and mmap's new, so each gather
//! maps the pages it copies); and warm and mapped (after one untimed pass of the method itself
//! over the same ids, so both mappings already map them).
//!
//! ```text
//! cargo run --release --example demo            # 1 GiB table
//! EAGERIO_DEMO_MB=256 cargo run --release --example demo
//! ```
//!
//! Every method's output is checked against a reference before its time counts: the bytes the
//! table was written with, regenerated from the fill function (and cross-checked against
//! `pread`). A mismatch prints `FAILED` instead of a time.

use std::{
    fs::File,
    os::unix::fs::FileExt,
    path::Path,
    time::{Duration, Instant},
};

use eagerio::tokio::{TokioEngine, TokioOptions};
use eagerio::RowLayout;

#[path = "support/table.rs"]
mod table;

/// Rows gathered per timed run.
const ROWS: usize = 40_000;
/// Timed runs per cell (the median is reported).
const RUNS: usize = 3;
/// Row sizes compared.
const ROW_SIZES: [u64; 2] = [90, 4096];
/// A baseline cold run slower than this makes its remaining runs use fewer rows.
const SLOW_RUN: Duration = Duration::from_secs(6);

type AnyResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn gather_mmap(map: &[u8], ids: &[u64], row_size: u64) -> Vec<u8> {
    let rs = row_size as usize;
    let mut out = Vec::with_capacity(ids.len() * rs);
    for &id in ids {
        let o = id as usize * rs;
        out.extend_from_slice(&map[o..o + rs]);
    }
    out
}

fn gather_pread(file: &File, ids: &[u64], row_size: u64) -> std::io::Result<Vec<u8>> {
    let rs = row_size as usize;
    let mut out = vec![0u8; ids.len() * rs];
    for (chunk, &id) in out.chunks_exact_mut(rs).zip(ids) {
        file.read_exact_at(chunk, id * row_size)?;
    }
    Ok(out)
}

/// What the page cache and the mappings hold when a timed gather starts.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Cache {
    /// Nothing: the file evicted, eagerio's mapping dropped.
    Cold,
    /// The rows' pages cached (a buffered read of them); eagerio's mapping dropped and mmap's
    /// made anew, so each method maps the pages it copies.
    WarmFresh,
    /// The rows' pages cached and mapped: the method's own untimed pass over the same ids ran
    /// first, on the same mapping.
    WarmMapped,
}

impl Cache {
    const ALL: [Cache; 3] = [Cache::Cold, Cache::WarmFresh, Cache::WarmMapped];
    fn name(self) -> &'static str {
        match self {
            Cache::Cold => "cold",
            Cache::WarmFresh => "warm, fresh mapping",
            Cache::WarmMapped => "warm, mapped",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Method {
    Eager,
    Mmap,
    Pread,
}

impl Method {
    const ALL: [Method; 3] = [Method::Eager, Method::Mmap, Method::Pread];
    fn name(self) -> &'static str {
        match self {
            Method::Eager => "eagerio tokio",
            Method::Mmap => "mmap + memcpy",
            Method::Pread => "serial pread",
        }
    }
}

/// One cell's timed runs: (elapsed, rows) of each verified run; `failed` if any differed.
#[derive(Default)]
struct Cell {
    runs: Vec<(Duration, usize)>,
    failed: bool,
    reduced: Option<usize>,
}

impl Cell {
    /// Median run (by rows/s; equal row counts make it the median time).
    fn median(&self) -> Option<(Duration, usize)> {
        let mut r = self.runs.clone();
        r.sort_by(|a, b| (a.0.as_secs_f64() / a.1 as f64).total_cmp(&(b.0.as_secs_f64() / b.1 as f64)));
        r.get(r.len() / 2).copied()
    }
}

struct Ctx<'a> {
    path: &'a Path,
    file: File,
    table: eagerio::RowTable<TokioEngine>,
    row_size: u64,
}

impl Ctx<'_> {
    /// Runs `m` over `ids` once from the state `cache`, returning the elapsed time and the
    /// output.
    async fn run(&self, m: Method, ids: &[u64], cache: Cache) -> AnyResult<(Duration, Vec<u8>)> {
        let rs = self.row_size;
        if cache == Cache::Cold {
            // The adaptive mode's mapping keeps the pages it copied mapped, and eviction skips
            // mapped pages: unmap them first.
            self.table.source().unmap_resident();
            eagerio::core::sys::evict(self.path)?;
        } else {
            // The same pages cached for every method: a buffered read of the rows (eagerio's
            // direct reads would not cache them).
            std::hint::black_box(gather_pread(&self.file, ids, rs)?);
        }
        Ok(match m {
            Method::Eager => {
                match cache {
                    Cache::Cold => {}
                    Cache::WarmFresh => self.table.source().unmap_resident(),
                    Cache::WarmMapped => drop(std::hint::black_box(self.table.gather(ids)?.await?)),
                }
                let t = Instant::now();
                let out = self.table.gather(ids)?.await?;
                let el = t.elapsed();
                (el, out.to_vec())
            }
            Method::Mmap => {
                // A fresh mapping per run: pages mapped by an earlier one could not be evicted.
                // SAFETY: the demo owns the file and nothing truncates it while mapped.
                let map = unsafe { memmap2::Mmap::map(&self.file)? };
                if cache == Cache::WarmMapped {
                    std::hint::black_box(gather_mmap(&map, ids, rs));
                }
                let t = Instant::now();
                let out = gather_mmap(&map, ids, rs);
                (t.elapsed(), out)
            }
            Method::Pread => {
                let t = Instant::now();
                let out = gather_pread(&self.file, ids, rs)?;
                (t.elapsed(), out)
            }
        })
    }
}

fn main() -> AnyResult<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(demo())
}

async fn demo() -> AnyResult<()> {
    let started = Instant::now();
    let mb: u64 = match std::env::var("EAGERIO_DEMO_MB") {
        Ok(s) => s.trim().parse().map_err(|e| format!("EAGERIO_DEMO_MB={s:?}: {e}"))?,
        Err(_) => 1024,
    };
    let size = mb << 20;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("table.bin");

    let t = Instant::now();
    table::write_table(&path, size)?;
    println!("table: {} ({mb} MiB) written and synced in {:.2} s", path.display(), t.elapsed().as_secs_f64());

    let mut cells: Vec<(u64, Cache, Method, Cell)> = Vec::new();
    let mut stats_lines = Vec::new();
    let mut notes = Vec::new();

    for &row_size in &ROW_SIZES {
        let table = TokioEngine::open(&path, TokioOptions::default()).await?.rows(RowLayout {
            base: 0,
            row_size,
            rows: None,
        })?;
        let ctx = Ctx { path: &path, file: File::open(&path)?, table, row_size };
        let rows = ctx.table.rows();
        if row_size == ROW_SIZES[0] {
            let e = ctx.table.source().engine();
            println!(
                "eagerio tokio engine: O_DIRECT = {} (alignment {} B), adaptive = {}: rows in the page cache are copied \
                 from it, the rest read directly",
                e.is_direct(),
                ctx.table.source().info().align,
                ctx.table.source().is_adaptive()
            );
        }
        println!("row size {row_size} B: {rows} rows in the table");

        for cache in Cache::ALL {
            let cold = cache == Cache::Cold;
            let mut cell: Vec<Cell> = Method::ALL.iter().map(|_| Cell::default()).collect();
            for run in 0..RUNS {
                let seed = row_size * 1_000 + cache as u64 * 100 + run as u64;
                for (mi, &m) in Method::ALL.iter().enumerate() {
                    let n = cell[mi].reduced.unwrap_or(ROWS);
                    let ids = table::ids(seed, n, rows);
                    let before = ctx.table.stats();
                    let (el, out) = ctx.run(m, &ids, cache).await?;
                    let after = ctx.table.stats();
                    if let Err(e) = table::verify_rows(&out, &ids, row_size) {
                        cell[mi].failed = true;
                        notes.push(format!("MISMATCH: {} row {row_size} B {} run {run}: {e}", m.name(), cache.name(),));
                        continue;
                    }
                    if m == Method::Eager && cold && run == 0 {
                        let reads = after.reads - before.reads;
                        let read = after.bytes_read - before.bytes_read;
                        let useful = after.useful_bytes - before.useful_bytes;
                        let unique = after.unique - before.unique;
                        stats_lines.push(format!(
                            "eagerio GatherStats, {row_size} B rows, cold run 0: {} requested, {unique} unique, \
                             {reads} reads issued, {:.1} MiB read for {:.1} MiB useful ({:.2}x), submit {:.2} ms, wait {:.2} ms",
                            after.requested - before.requested,
                            read as f64 / (1u64 << 20) as f64,
                            useful as f64 / (1u64 << 20) as f64,
                            read as f64 / useful.max(1) as f64,
                            (after.submit - before.submit).as_secs_f64() * 1e3,
                            (after.wait - before.wait).as_secs_f64() * 1e3,
                        ));
                    }
                    if m == Method::Eager && !cold && run == 0 {
                        stats_lines.push(format!(
                            "eagerio GatherStats, {row_size} B rows, {} run 0: {} of {} requests served from the page \
                             cache, {} reads issued",
                            cache.name(),
                            after.resident - before.resident,
                            after.requested - before.requested,
                            after.reads - before.reads,
                        ));
                    }
                    cell[mi].runs.push((el, n));
                    if cold && m != Method::Eager && cell[mi].reduced.is_none() && el > SLOW_RUN {
                        let fewer =
                            ((ROWS as f64 * SLOW_RUN.as_secs_f64() / 2.0 / el.as_secs_f64()) as usize).max(1000);
                        cell[mi].reduced = Some(fewer);
                        notes.push(format!(
                            "{} {row_size} B cold took {:.1} s for {ROWS} rows; its remaining runs use {fewer} rows",
                            m.name(),
                            el.as_secs_f64()
                        ));
                    }
                }
            }
            for (m, c) in Method::ALL.iter().zip(cell) {
                cells.push((row_size, cache, *m, c));
            }
        }
        // The source's latency histograms over every eagerio gather of this row size, cold and
        // warm (readable from `latencies()`; exported through `metrics` with that feature).
        stats_lines.push(format!(
            "eagerio latencies, {row_size} B rows, all runs (bucket upper bounds, within 25%):\n{}",
            ctx.table.latencies()
        ));
    }

    println!();
    println!(
        "{ROWS} random row ids per run (drawn with replacement, fresh per run), median of {RUNS} runs; \
         cold = page cache evicted (POSIX_FADV_DONTNEED) before every timed gather; warm = the rows' pages \
         cached by a buffered read, with every method's mapping fresh, or after its own untimed pass (mapped)"
    );
    println!();
    println!("| row size | cache | method | median ms | rows/s | vs mmap |");
    println!("|---:|---|---|---:|---:|---:|");
    for &(row_size, cache, m, ref c) in &cells {
        let mmap = cells.iter().find(|x| x.0 == row_size && x.1 == cache && x.2 == Method::Mmap).and_then(|x| {
            if x.3.failed {
                None
            } else {
                x.3.median()
            }
        });
        let cache = cache.name();
        match c.median() {
            Some((d, n)) if !c.failed => {
                let rps = n as f64 / d.as_secs_f64();
                let ratio = mmap
                    .map(|(md, mn)| format!("{:.2}x", rps / (mn as f64 / md.as_secs_f64())))
                    .unwrap_or_else(|| "n/a".into());
                let rows_note = if n != ROWS { format!(" ({n} rows)") } else { String::new() };
                println!(
                    "| {row_size} B | {cache} | {}{rows_note} | {:.1} | {:.0} | {ratio} |",
                    m.name(),
                    d.as_secs_f64() * 1e3,
                    rps
                );
            }
            _ => println!("| {row_size} B | {cache} | {} | FAILED | FAILED | FAILED |", m.name()),
        }
    }
    println!();
    println!("vs mmap = rows/s relative to mmap + memcpy in the same cell (above 1 is faster).");
    for l in &stats_lines {
        println!("{l}");
    }
    for n in &notes {
        println!("{n}");
    }
    drop(dir);
    println!("temp dir removed; total {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
