//! Tuning the io_uring lanes: cold random-row gathers swept over ring setup flags, depth, lanes
//! and gather size, so the defaults of `eagerio-uring` rest on measurements made side by side.
//!
//! ```text
//! cargo run --release --example uring_lanes                  # 2 GiB table under target/
//! EAGERIO_LANES_MB=512 cargo run --release --example uring_lanes -- flags depth
//! ```
//!
//! Sections (all by default, or name them): `flags`, `depth`, `split`, `wake`. Cold means the
//! file's pages are evicted before every timed gather (`posix_fadvise(DONTNEED)`), and every
//! gather's bytes are checked against the fill function before its time counts.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use eagerio::core::sys::DirectIo;
use eagerio::uring::{SetupFlags, UringEngine, UringOptions};
use eagerio::RowLayout;

#[path = "support/table.rs"]
mod table;

const TABLE_DIR: &str = "eagerio-lanes";

type AnyResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Median cold gather time of `runs` gathers of `n` rows of `row` bytes.
fn cold(path: &Path, opts: &UringOptions, row: u64, n: usize, runs: usize) -> AnyResult<Duration> {
    let table = UringEngine::open_rows(path, RowLayout { base: 0, row_size: row, rows: None }, opts.clone())?;
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

fn rate(n: usize, d: Duration) -> String {
    format!("{:.0}k rows/s", n as f64 / d.as_secs_f64() / 1e3)
}

fn main() -> AnyResult<()> {
    let mb: u64 = std::env::var("EAGERIO_LANES_MB").ok().and_then(|s| s.parse().ok()).unwrap_or(2048);
    let runs: usize = std::env::var("EAGERIO_LANES_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let want = |s: &str| args.is_empty() || args.iter().any(|a| a == s);
    let path = table::in_target(TABLE_DIR, mb << 20)?;
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
            let opts = UringOptions { setup, ..Default::default() };
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
                let opts = UringOptions { lanes, depth, split_threshold: 1, ..Default::default() };
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
            let two =
                cold(&path, &UringOptions { lanes: 2, split_threshold: 1, ..Default::default() }, 4096, rows, runs)?;
            println!("| {rows} | {:.2} ms | {:.2} ms ({:.2}x) |", ms(one), ms(two), ms(one) / ms(two));
        }
        println!();
    }
    if want("wake") {
        // The cost of waking a sleeping lane: warm single-row gathers, one at a time. Buffered
        // reads of cached pages isolate the round trip (eventfd write, lane wake-up, completion,
        // future wake-up); O_DIRECT adds the device's latency.
        for (name, direct) in [("buffered, cached", DirectIo::Off), ("O_DIRECT", DirectIo::Auto)] {
            let opts = UringOptions { direct, ..Default::default() };
            let table = UringEngine::open_rows(&path, RowLayout { base: 0, row_size: 4096, rows: None }, opts)?;
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
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
