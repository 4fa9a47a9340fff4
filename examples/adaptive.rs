//! The adaptive gather against its two pure modes and mmap: warm (table resident), cold (table
//! evicted) and half-warm (the first half of the table resident), 40,000 random rows of 90 B and
//! 4 KiB, median of 3, every output checked. Also reports how much of the table is in the page
//! cache after a cold gather (direct reads must not grow it).
//!
//! ```text
//! cargo run --release --example adaptive                    # 2 GiB table under target/
//! EAGERIO_ADAPTIVE_MB=512 cargo run --release --example adaptive
//! ```

use std::{
    fs::File,
    io::{Read, Seek, SeekFrom},
    os::unix::fs::FileExt,
    path::Path,
    time::{Duration, Instant},
};

use eagerio::core::sys::evict;
use eagerio::uring::{UringEngine, UringOptions};
use eagerio::RowLayout;

#[path = "support/table.rs"]
mod table;

const TABLE_DIR: &str = "eagerio-adaptive";

type AnyResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const ROWS: usize = 40_000;
const RUNS: usize = 3;

fn ids(seed: u64, rows: u64) -> Vec<u64> {
    table::ids(seed ^ 0xADA, ROWS, rows)
}

/// Pages of `path` in the page cache, and its pages in all.
fn resident_pages(path: &Path) -> AnyResult<(u64, u64)> {
    let f = File::open(path)?;
    let pages = f.metadata()?.len().div_ceil(4096);
    Ok((eagerio::core::sys::resident_bytes(&f)? / 4096, pages))
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Warm,
    Cold,
    HalfWarm,
}

/// Puts the table in `state`: fully read (warm), evicted (cold), or evicted then its first half
/// read (half-warm).
fn prepare(path: &Path, state: State) -> AnyResult<()> {
    evict(path)?;
    let len = std::fs::metadata(path)?.len();
    let upto = match state {
        State::Cold => return Ok(()),
        State::Warm => len,
        State::HalfWarm => len / 2,
    };
    let mut f = File::open(path)?;
    f.seek(SeekFrom::Start(0))?;
    let mut buf = vec![0u8; 8 << 20];
    let mut done = 0;
    while done < upto {
        let want = (upto - done).min(buf.len() as u64) as usize;
        let n = f.read(&mut buf[..want])?;
        if n == 0 {
            break;
        }
        done += n as u64;
    }
    Ok(())
}

fn check(got: &[u8], reference: &[u8]) -> AnyResult<()> {
    if got != reference {
        return Err("FAILED: wrong bytes".into());
    }
    Ok(())
}

fn main() -> AnyResult<()> {
    let mb: u64 = std::env::var("EAGERIO_ADAPTIVE_MB").ok().and_then(|s| s.parse().ok()).unwrap_or(2048);
    let path = table::in_target(TABLE_DIR, mb << 20)?;
    let file = File::open(&path)?;
    println!("table {mb} MiB, {ROWS} rows per gather, median of {RUNS}\n");
    println!("| rows | state | mmap + memcpy | direct only | adaptive | adaptive vs mmap | adaptive vs direct | served resident |");
    println!("|---|---|---|---|---|---|---|---|");
    for row in [90u64, 4096] {
        let layout = RowLayout { base: 0, row_size: row, rows: None };
        let direct = UringEngine::open_rows_blocking(&path, layout, UringOptions::default().adaptive(false))?;
        let adaptive = UringEngine::open_rows_blocking(&path, layout, UringOptions::default())?;
        let rows = direct.rows();
        for state in [State::Warm, State::Cold, State::HalfWarm] {
            let mut times = [Vec::new(), Vec::new(), Vec::new()];
            let mut resident = 0;
            for run in 0..RUNS {
                let ids = ids(run as u64 * 31 + row, rows);
                let mut reference = vec![0u8; ids.len() * row as usize];
                for (k, &id) in ids.iter().enumerate() {
                    file.read_exact_at(&mut reference[k * row as usize..(k + 1) * row as usize], id * row)?;
                }
                for (m, t) in times.iter_mut().enumerate() {
                    adaptive.source().unmap_resident();
                    prepare(&path, state)?;
                    let start = Instant::now();
                    let got = match m {
                        0 => {
                            // SAFETY: the table is not modified while this example runs.
                            let map = unsafe { memmap2::Mmap::map(&file)? };
                            let mut out = Vec::with_capacity(reference.len());
                            for &id in &ids {
                                out.extend_from_slice(&map[(id * row) as usize..((id + 1) * row) as usize]);
                            }
                            out
                        }
                        1 => futures::executor::block_on(direct.gather(&ids)?)?.to_vec(),
                        _ => {
                            let before = adaptive.stats().resident;
                            let fut = adaptive.gather(&ids)?;
                            let got = futures::executor::block_on(fut)?.to_vec();
                            resident = adaptive.stats().resident - before;
                            got
                        }
                    };
                    t.push(start.elapsed());
                    check(&got, &reference)?;
                }
            }
            let med = |v: &mut Vec<Duration>| {
                v.sort();
                v[v.len() / 2].as_secs_f64() * 1e3
            };
            let [mut a, mut b, mut c] = times;
            let (mm, di, ad) = (med(&mut a), med(&mut b), med(&mut c));
            println!(
                "| {row} B | {state:?} | {mm:.1} ms | {di:.1} ms | {ad:.1} ms | {:.2}x | {:.2}x | {resident} of {ROWS} |",
                mm / ad,
                di / ad
            );
        }
        // Page-cache growth after a cold adaptive gather.
        adaptive.source().unmap_resident();
        prepare(&path, State::Cold)?;
        let (before, pages) = resident_pages(&path)?;
        let ids = ids(7, rows);
        let bytes = futures::executor::block_on(adaptive.gather(&ids)?)?.len();
        let (after, _) = resident_pages(&path)?;
        println!(
            "|  | page cache after a cold gather of {row} B rows: {} of {pages} pages resident before, {} after ({:.3}% of the {} bytes read) | | | | | | |",
            before,
            after,
            (after.saturating_sub(before) * 4096) as f64 * 100.0 / adaptive.stats().bytes_read.max(1) as f64,
            bytes
        );
    }
    Ok(())
}
