//! Load on one source, shared by the tokio and uring `tests/reliability_load.rs`: 8 concurrent
//! tasks x 1,000 gathers, a random fraction of them under short `tokio::time::timeout`s (so their
//! futures are dropped mid-flight). Every completed gather must be right; staging must be full
//! afterwards; RSS growth must stay under a bound; p50/p99 latency is printed.
//!
//! # The RSS bound
//! Measured from `/proc/self/statm` after a warm-up that touches every staging slot and lets the
//! allocator reach its working set, and after the run. Live memory during the run is at most
//! 8 tasks x one output buffer (32 rows x 4 KiB = 128 KiB) plus in-flight reads in staging
//! (already touched), so a correct run grows by well under 1 MiB beyond allocator noise. The
//! bound is 32 MiB: generous for glibc arenas on other threads (each can keep a few MiB) and
//! still far below what a leak of any per-gather buffer would cost (8,000 gathers x 64 KiB
//! average output = 500 MiB; even a 4 KiB leak per gather is 32 MiB).

#![allow(dead_code)]

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use eagerio_core::{backend::ReadEngine, RowTable};

use super::fault_schedule::{seed, Rng, SeedGuard};

pub const TASKS: usize = 8;
pub const GATHERS: usize = 1000;
pub const RSS_BOUND: u64 = 32 << 20;

/// Resident set size in bytes (`/proc/self/statm`, second field, in pages).
pub fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = s.split_whitespace().nth(1).and_then(|x| x.parse().ok()).expect("statm resident");
    // SAFETY: no arguments.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// What the load run saw.
#[derive(Debug, Default)]
pub struct LoadReport {
    pub completed: usize,
    pub timed_out: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub rss_growth: i64,
}

/// Runs the load on `table` (4 KiB rows over `file`) from the current tokio runtime.
pub async fn run<E>(name: &str, table: RowTable<E>, file: Arc<Vec<u8>>, staging_full: impl Fn() -> bool) -> LoadReport
where
    E: ReadEngine + Clone + Send + Sync + 'static,
{
    let s = seed(&format!("{name} load"));
    let _g = SeedGuard { test: format!("{name} load"), seed: s };
    let row = table.row_size();
    let rows = table.rows();
    let check = |ids: &[u64], got: &[u8]| {
        ids.iter().enumerate().all(|(k, &i)| {
            got[k * row as usize..(k + 1) * row as usize] == file[(i * row) as usize..((i + 1) * row) as usize]
        })
    };
    // Warm-up: touch every staging slot and the allocator's working set.
    let mut rng = Rng::new(s);
    for _ in 0..64 {
        let ids: Vec<u64> = (0..32).map(|_| rng.below(rows)).collect();
        let got = table.gather(&ids).unwrap().await.unwrap();
        assert!(check(&ids, &got));
    }
    let before = rss_bytes();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let table = table.clone();
        let file = file.clone();
        let mut rng = Rng::new(s ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9));
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(GATHERS);
            let mut timed_out = 0usize;
            for _ in 0..GATHERS {
                let ids: Vec<u64> = (0..rng.range(1, 33)).map(|_| rng.below(rows)).collect();
                // A quarter of the gathers get a timeout short enough to drop some mid-flight.
                let limit =
                    if rng.chance(25) { Duration::from_micros(rng.range(0, 2000)) } else { Duration::from_secs(30) };
                let t0 = Instant::now();
                match tokio::time::timeout(limit, table.gather(&ids).unwrap()).await {
                    Ok(r) => {
                        let got = r.expect("a gather without faults succeeds");
                        lat.push(t0.elapsed());
                        let ok = ids.iter().enumerate().all(|(k, &i)| {
                            got[k * row as usize..(k + 1) * row as usize]
                                == file[(i * row) as usize..((i + 1) * row) as usize]
                        });
                        assert!(ok, "wrong bytes under load, rows {ids:?}");
                    }
                    Err(_) => timed_out += 1,
                }
            }
            (lat, timed_out)
        }));
    }
    let mut lat = Vec::new();
    let mut timed_out = 0;
    for t in tasks {
        let (l, n) = t.await.expect("a load task panicked");
        lat.extend(l);
        timed_out += n;
    }
    let wall = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !staging_full() {
        assert!(Instant::now() < deadline, "{name}: staging did not return to full after the load: a slot leaked");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let after = rss_bytes();
    lat.sort_unstable();
    let rep = LoadReport {
        completed: lat.len(),
        timed_out,
        p50: pct(&lat, 0.50),
        p99: pct(&lat, 0.99),
        rss_growth: after as i64 - before as i64,
    };
    eprintln!(
        "{name} load: {TASKS} tasks x {GATHERS} gathers in {wall:?}: {} completed, {} dropped by their timeout; \
         latency p50 {:?} p99 {:?}; RSS {} -> {} KiB ({:+} KiB)",
        rep.completed,
        rep.timed_out,
        rep.p50,
        rep.p99,
        before / 1024,
        after / 1024,
        rep.rss_growth / 1024
    );
    assert!(rep.rss_growth < RSS_BOUND as i64, "{name}: RSS grew by {} KiB under load", rep.rss_growth / 1024);
    // Every later gather is right.
    for _ in 0..50 {
        let ids: Vec<u64> = (0..32).map(|_| rng.below(rows)).collect();
        let got = table.gather(&ids).unwrap().await.unwrap();
        assert!(check(&ids, &got), "a gather after the load has wrong bytes");
    }
    rep
}
