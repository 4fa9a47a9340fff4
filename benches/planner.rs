//! The planner microbench: `Plan::new` over random 90 B rows of a 2 GiB table, 40k and 1M rows
//! per plan, with the options the tokio backend uses on a 512 B direct-I/O device. Criterion
//! reports the throughput in rows/s; ns per row is printed at the end (target: 50 ns/row at 40k,
//! reported, not asserted).
//!
//! ```text
//! cargo bench --bench planner
//! ```

use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use eagerio::core::backend::{Plan, PlanOptions};

const ROW: u64 = 90;
const TABLE: u64 = 2 << 30;

fn requests(n: usize) -> Vec<(u64, u64)> {
    let rows = TABLE / ROW;
    let mut s = 0x5EEDu64;
    (0..n)
        .map(|_| {
            // splitmix64
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            let row = ((z as u128 * rows as u128) >> 64) as u64;
            (row * ROW, ROW)
        })
        .collect()
}

fn opts() -> PlanOptions {
    PlanOptions { max_gap: eagerio::core::DEFAULT_MAX_GAP, align: 512, max_read: 64 << 10 }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("plan");
    for n in [40_000usize, 1_000_000] {
        let reqs = requests(n);
        g.throughput(Throughput::Elements(n as u64));
        if n >= 1_000_000 {
            g.sample_size(10);
        }
        g.bench_with_input(BenchmarkId::new("Plan::new 90 B rows", n), &reqs, |b, reqs| {
            b.iter(|| Plan::new(std::hint::black_box(reqs), &opts()).expect("valid options"))
        });
    }
    g.finish();
}

/// A plain timing of the same plans, printed as ns/row next to criterion's numbers.
fn ns_per_row() {
    for n in [40_000usize, 1_000_000] {
        let reqs = requests(n);
        let iters = if n >= 1_000_000 { 5 } else { 50 };
        let mut best = Duration::MAX;
        for _ in 0..iters {
            let t = Instant::now();
            std::hint::black_box(Plan::new(&reqs, &opts()).expect("valid options"));
            best = best.min(t.elapsed());
        }
        let target = if n == 40_000 { " (target 50 ns/row)" } else { "" };
        println!("planner: {n} rows: {:.1} ns/row, best of {iters}{target}", best.as_nanos() as f64 / n as f64);
    }
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // `cargo bench --bench planner -- --test` (CI) only checks that the benches run.
    if !std::env::args().any(|a| a == "--test") {
        ns_per_row();
    }
}
