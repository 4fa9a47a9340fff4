//! Tuning the io_uring lanes: cold random-row gathers swept over ring setup flags, depth, lanes
//! and gather size, so the defaults of `eagerio-uring` rest on measurements made side by side.
//!
//! ```text
//! cargo run --release --example uring_lanes                  # 2 GiB table under target/
//! EAGERIO_LANES_MB=512 cargo run --release --example uring_lanes -- flags depth
//! EAGERIO_LANES_DIR=/dev/shm cargo run --release --example uring_lanes -- gap   # on tmpfs
//! ```
//!
//! Sections (all by default, or name them): `flags`, `depth`, `split`, `gap`, `wake`,
//! `fairness`, `threads`. Cold means the file's pages are evicted before every timed gather
//! (`posix_fadvise(DONTNEED)`), and every gather's bytes are checked against the fill function
//! before its time counts.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use eagerio::core::sys::DirectIo;
use eagerio::uring::{Driver, DriverOptions, SetupFlags, UringEngine, UringOptions};
use eagerio::RowLayout;

#[path = "support/table.rs"]
mod table;

const TABLE_DIR: &str = "eagerio-lanes";

type AnyResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Median cold gather time of `runs` gathers of `n` rows of `row` bytes.
fn cold(path: &Path, opts: &UringOptions, row: u64, n: usize, runs: usize) -> AnyResult<Duration> {
    let table = UringEngine::open_rows_blocking(path, RowLayout { base: 0, row_size: row, rows: None }, opts.clone())?;
    let rows = table.rows();
    let mut times = Vec::new();
    for r in 0..runs {
        let ids = table::ids(r as u64 * 7919 + row, n, rows);
        eagerio::core::sys::evict(path)?;
        let t = Instant::now();
        let got = futures::executor::block_on(table.gather(&ids)?)?;
        let dt = t.elapsed();
        table::verify_rows(&got, &ids, row).map_err(|e| format!("wrong bytes with {opts:?}: {e}"))?;
        times.push(dt);
    }
    times.sort();
    Ok(times[runs / 2])
}

/// Options opening tables on a driver of their own, built with `opts`.
fn on(opts: DriverOptions) -> AnyResult<UringOptions> {
    Ok(UringOptions::default().driver(Driver::new(opts)?))
}

fn rate(n: usize, d: Duration) -> String {
    format!("{:.0}k rows/s", n as f64 / d.as_secs_f64() / 1e3)
}

fn main() -> AnyResult<()> {
    let mb: u64 = std::env::var("EAGERIO_LANES_MB").ok().and_then(|s| s.parse().ok()).unwrap_or(2048);
    let runs: usize = std::env::var("EAGERIO_LANES_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let want = |s: &str| args.is_empty() || args.iter().any(|a| a == s);
    // EAGERIO_LANES_DIR puts the table elsewhere (say /dev/shm, a tmpfs).
    let path = match std::env::var_os("EAGERIO_LANES_DIR") {
        Some(dir) => table::ensure(Path::new(&dir), mb << 20)?.0,
        None => table::in_target(TABLE_DIR, mb << 20)?,
    };
    let n = 40_000;
    println!("table {} MiB, {n} rows per gather, median of {runs} cold runs\n", mb);

    if want("flags") {
        println!("| setup flags | 4 KiB rows | 90 B rows |\n|---|---|---|");
        let variants = [
            ("plain", SetupFlags::PLAIN),
            ("COOP_TASKRUN", SetupFlags { coop_taskrun: true, ..SetupFlags::PLAIN }),
            (
                "COOP_TASKRUN + SINGLE_ISSUER",
                SetupFlags { coop_taskrun: true, single_issuer: true, defer_taskrun: false },
            ),
            (
                "SINGLE_ISSUER + DEFER_TASKRUN",
                SetupFlags { coop_taskrun: false, single_issuer: true, defer_taskrun: true },
            ),
        ];
        for (name, setup) in variants {
            let opts = on(DriverOptions::default().setup(setup))?;
            let a = cold(&path, &opts, 4096, n, runs)?;
            let b = cold(&path, &opts, 90, n, runs)?;
            println!("| {name} | {:.1} ms ({}) | {:.1} ms ({}) |", ms(a), rate(n, a), ms(b), rate(n, b));
        }
        println!();
    }
    if want("depth") {
        println!("| lanes \\ depth | 32 | 128 | 512 |\n|---|---|---|---|");
        for lanes in [1, 2, 4] {
            let mut line = format!("| {lanes} |");
            for depth in [32, 128, 512] {
                let opts = on(DriverOptions::default().lanes(lanes).depth(depth))?.split_threshold(1);
                let d = cold(&path, &opts, 4096, n, runs)?;
                line += &format!(" {:.1} ms ({}) |", ms(d), rate(n, d));
            }
            println!("{line}");
        }
        println!("(4 KiB rows; with more than one lane every gather is split over all lanes)\n");
    }
    if want("split") {
        println!("| gather rows | 1 lane | 2 lanes, split |\n|---|---|---|");
        for rows in [100, 1_000, 4_000, 10_000, 40_000] {
            let one = cold(&path, &UringOptions::default(), 4096, rows, runs)?;
            let two_lanes = on(DriverOptions::default().lanes(2))?;
            let two = cold(&path, &two_lanes.split_threshold(1), 4096, rows, runs)?;
            println!("| {rows} | {:.2} ms | {:.2} ms ({:.2}x) |", ms(one), ms(two), ms(one) / ms(two));
        }
        println!();
    }
    if want("gap") {
        gap(&path, runs)?;
    }
    if want("wake") {
        // The cost of waking a sleeping lane: warm single-row gathers, one at a time. Buffered
        // reads of cached pages isolate the round trip (eventfd write, lane wake-up, completion,
        // future wake-up); O_DIRECT adds the device's latency.
        for (name, direct) in [("buffered, cached", DirectIo::Off), ("O_DIRECT", DirectIo::Auto)] {
            let opts = UringOptions::default().direct(direct);
            let table =
                UringEngine::open_rows_blocking(&path, RowLayout { base: 0, row_size: 4096, rows: None }, opts)?;
            let ids = table::ids(99, 2000, table.rows());
            for &id in &ids {
                futures::executor::block_on(table.gather(&[id])?)?;
            }
            let t = Instant::now();
            for &id in &ids {
                futures::executor::block_on(table.gather(&[id])?)?;
            }
            let per = t.elapsed() / ids.len() as u32;
            println!("one-row gather round trip, {name}: {:.1} us", per.as_secs_f64() * 1e6);
        }
        println!();
    }
    if want("fairness") {
        fairness(&path, runs)?;
    }
    if want("threads") {
        // Tables opened with defaults share the process-wide driver: its lanes are the only
        // threads they start.
        let layout = RowLayout { base: 0, row_size: 4096, rows: None };
        let tables = (0..48)
            .map(|_| UringEngine::open_rows_blocking(&path, layout, UringOptions::default()))
            .collect::<Result<Vec<_>, _>>()?;
        let driver = tables[0].source().engine().driver().cloned().ok_or("the tables fell back to tokio")?;
        let lanes: Vec<String> = std::fs::read_dir("/proc/self/task")?
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .map(|name| name.trim().to_string())
            .filter(|name| name.starts_with(&format!("{}-", driver.name())))
            .collect();
        println!(
            "48 tables opened with default options: {} lane thread(s) ({}), mode {:?}, staging {} bytes\n",
            lanes.len(),
            lanes.join(", "),
            driver.mode(),
            driver.staging_bytes()
        );
    }
    Ok(())
}

/// The coalescing gap against the device: cold gathers at several pinned gaps and with the gap
/// tuned to the device (after a few untimed gathers that teach the tuner), interleaved (run r of
/// every table on the same fresh rows, then run r+1); the tuned gap against the best pinned one,
/// and the price the tuner fitted. Not adaptive, so that a table on tmpfs (never evicted) is read
/// by the lane too.
fn gap(path: &Path, runs: usize) -> AnyResult<()> {
    const GAPS: [u64; 6] = [0, 4096, 8192, 16384, 24576, 32768];
    const WARMUP: u64 = 8;
    let n = 40_000;
    for row in [90u64, 4096] {
        let layout = RowLayout { base: 0, row_size: row, rows: None };
        let base = UringOptions::default().adaptive(false);
        let open = |opts: UringOptions| UringEngine::open_rows_blocking(path, layout, opts);
        let mut tables =
            GAPS.iter().map(|&g| open(base.clone().tune_gap(false).max_gap(g))).collect::<Result<Vec<_>, _>>()?;
        tables.push(open(base.clone())?);
        let tuned = tables.last().expect("the tuned table");
        for w in 0..WARMUP {
            let ids = table::ids(1_000_003 * (w + 1) + row, n, tuned.rows());
            eagerio::core::sys::evict(path)?;
            futures::executor::block_on(tuned.gather(&ids)?)?;
        }
        // Per table: (seconds, reads, bytes read, gap) of every run.
        let mut samples = vec![Vec::new(); tables.len()];
        for r in 0..runs {
            let ids = table::ids(r as u64 * 7919 + row, n, tables[0].rows());
            for (table, samples) in tables.iter().zip(&mut samples) {
                let before = table.source().stats();
                eagerio::core::sys::evict(path)?;
                let t = Instant::now();
                let mut fut = table.gather(&ids)?;
                let got = futures::executor::block_on(&mut fut)?;
                let dt = t.elapsed();
                table::verify_rows(&got, &ids, row)?;
                let after = table.source().stats();
                let g = fut.stats().gap;
                samples.push((dt.as_secs_f64(), after.reads - before.reads, after.bytes_read - before.bytes_read, g));
            }
        }
        println!("| {row} B rows, gap | median | reads | MiB read |\n|---|---:|---:|---:|");
        let mut medians = Vec::new();
        for (i, s) in samples.iter().enumerate() {
            let mut s = s.clone();
            s.sort_by(|a, b| a.0.total_cmp(&b.0));
            let (secs, reads, bytes, _) = s[s.len() / 2];
            let d = Duration::from_secs_f64(secs);
            medians.push(d);
            let name = match GAPS.get(i) {
                Some(g) => format!("{g} (pinned)"),
                None => {
                    let gaps: Vec<String> = samples[i].iter().map(|x| x.3.to_string()).collect();
                    format!("tuned ({})", gaps.join(", "))
                }
            };
            println!(
                "| {name} | {:.1} ms ({}) | {reads} | {:.1} |",
                ms(d),
                rate(n, d),
                bytes as f64 / (1 << 20) as f64
            );
        }
        let (best, best_d) = GAPS.iter().zip(&medians).min_by_key(|(_, d)| **d).expect("a pinned gap");
        let tuned_d = medians[GAPS.len()];
        let price = tuned.source().gap_tuner().and_then(|t| t.price());
        println!(
            "tuned: {:.2}x the best pinned gap's time ({best} B, {:.1} ms); fitted price {}\n",
            tuned_d.as_secs_f64() / best_d.as_secs_f64(),
            ms(*best_d),
            price.map_or_else(
                || "none yet".to_string(),
                |p| format!(
                    "{:.2} us per read + {:.3} us per KiB (gap {} B)",
                    p.per_read.as_secs_f64() * 1e6,
                    p.per_kib.as_secs_f64() * 1e6,
                    p.gap()
                )
            )
        );
    }
    Ok(())
}

/// Small gathers (100 rows) on one table, timed alone and while a gather of 1,000,000 rows runs
/// on another table of the same driver, in alternating rounds on fresh cold rows: the p99 of the
/// small gathers should stay within a few times its value alone, since the lane serves the
/// gathers it holds round robin, one read each in turn.
fn fairness(path: &Path, runs: usize) -> AnyResult<()> {
    let row = 90;
    let layout = RowLayout { base: 0, row_size: row, rows: None };
    let big_table = UringEngine::open_rows_blocking(path, layout, UringOptions::default())?;
    let small_table = UringEngine::open_rows_blocking(path, layout, UringOptions::default())?;
    let rows = small_table.rows();
    let small = |seed: u64, times: &mut Vec<Duration>| -> AnyResult<()> {
        let ids = table::ids(seed, 100, rows);
        let t = Instant::now();
        let got = futures::executor::block_on(small_table.gather(&ids)?)?;
        times.push(t.elapsed());
        table::verify_rows(&got, &ids, row).map_err(|e| format!("small gather: {e}"))?;
        Ok(())
    };
    let (mut alone, mut loaded) = (Vec::new(), Vec::new());
    let mut big_times = Vec::new();
    for r in 0..runs as u64 {
        eagerio::core::sys::evict(path)?;
        for k in 0..200 {
            small(1_000_000 * r + k, &mut alone)?;
        }
        eagerio::core::sys::evict(path)?;
        let big_ids = table::ids(77 + r, 1_000_000, rows);
        let t = Instant::now();
        let big = big_table.gather(&big_ids)?;
        let mut k = 0;
        while !big.is_settled() {
            small(1_000_000 * r + 500_000 + k, &mut loaded)?;
            k += 1;
        }
        let got = futures::executor::block_on(big)?;
        big_times.push(t.elapsed());
        table::verify_rows(&got, &big_ids, row).map_err(|e| format!("big gather: {e}"))?;
    }
    let pct = |v: &mut Vec<Duration>, p: f64| {
        v.sort();
        v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
    };
    let (a50, a99) = (pct(&mut alone, 0.5), pct(&mut alone, 0.99));
    let (l50, l99) = (pct(&mut loaded, 0.5), pct(&mut loaded, 0.99));
    println!("| 100-row gathers (90 B rows, cold) | n | p50 | p99 |\n|---|---|---|---|");
    println!("| alone | {} | {:.2} ms | {:.2} ms |", alone.len(), ms(a50), ms(a99));
    println!(
        "| beside a 1,000,000-row gather on another table | {} | {:.2} ms | {:.2} ms |",
        loaded.len(),
        ms(l50),
        ms(l99)
    );
    println!(
        "p99 loaded / alone: {:.2}x; the 1,000,000-row gathers took {:?}\n",
        ms(l99) / ms(a99),
        big_times.iter().map(|d| format!("{:.2} s", d.as_secs_f64())).collect::<Vec<_>>()
    );
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
