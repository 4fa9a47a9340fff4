//! What opening a table on glommio and its first warm gathers cost, executor after executor.
//!
//! ```sh
//! cargo run --release --example glommio_open
//! ```
//!
//! A 256 MiB table of 90 B rows under `target/` is written (so its pages are cached), then three
//! fresh executors in turn each open it (`GlommioEngine::open_rows`, defaults: adaptive, so warm
//! rows are copied from a mapping) and gather 100, 1,000 and 40,000 random rows from the page
//! cache, every row checked. The first open in a process pays glommio's one probe of the device
//! (see the glommio crate's docs on `GlommioEngine::open`); the later ones show an open's own
//! cost.

use std::time::{Duration, Instant};

use eagerio::glommio::{GlommioEngine, GlommioOptions};
use eagerio::RowLayout;

#[path = "support/table.rs"]
mod table;

type AnyResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> AnyResult<()> {
    let path = table::in_target("eagerio-open", 256 << 20)?;
    std::fs::read(&path)?;
    println!("executor  open (ms)  100 rows  1,000 rows  40,000 rows (ms, warm)");
    for run in 0..3u64 {
        let path = path.clone();
        let times = eagerio::glommio::block_on(async move {
            let t = Instant::now();
            let layout = RowLayout { base: 0, row_size: 90, rows: None };
            let table = GlommioEngine::open_rows(&path, layout, GlommioOptions::default()).await?;
            let mut times = vec![t.elapsed()];
            for n in [100usize, 1000, 40_000] {
                let ids = table::ids(run * 31 + n as u64, n, table.rows());
                let t = Instant::now();
                let rows = table.gather(&ids)?.await?;
                times.push(t.elapsed());
                table::verify_rows(&rows, &ids, 90)?;
            }
            Ok::<Vec<Duration>, Box<dyn std::error::Error>>(times)
        })??;
        let ms = |d: &Duration| d.as_secs_f64() * 1e3;
        println!(
            "{:>8} {:>10.3} {:>9.3} {:>11.3} {:>12.2}",
            run + 1,
            ms(&times[0]),
            ms(&times[1]),
            ms(&times[2]),
            ms(&times[3])
        );
    }
    Ok(())
}
