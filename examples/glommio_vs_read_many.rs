//! Cold scattered row gathers on glommio: eagerio-glommio against glommio's own `read_many`.
//!
//! ```sh
//! cargo run --release --features glommio --example glommio_vs_read_many
//! EAGERIO_BENCH_TABLE_BYTES=$((1<<30)) EAGERIO_BENCH_DEPTH=64 cargo run --release --features glommio --example glommio_vs_read_many
//! ```
//!
//! For 4096-byte and 90-byte rows: 40,000 random rows drawn with replacement (fresh ids every
//! run) from a table file (`EAGERIO_BENCH_TABLE_BYTES`, default 2 GiB, created once under
//! `target/eagerio-bench/` and reused). Before every timed run the file is evicted from the page
//! cache (`POSIX_FADV_DONTNEED`; both methods read with `O_DIRECT` anyway). Every method produces
//! the same output, the rows back to back in request order, and every output byte is checked
//! after the run; a wrong byte marks the method FAILED. Median of `EAGERIO_BENCH_RUNS` (3).
//!
//! `read_many` gets its best case: the ids sorted and deduplicated first (inside the timed
//! region, as eagerio's planning is), so its stream-order merging sees neighbours; its results
//! are then copied to every position that asked for the row. Both sides run at the same depth
//! (`EAGERIO_BENCH_DEPTH`, default 128 = glommio's ring depth): eagerio's `depth`, `read_many`'s
//! `with_concurrency`. The variants: no merging (`MergedBufferLimit::NoMerging`), glommio's
//! default merging (`DeviceMaxSingleRequest` with `NoAmplification`), and 16 KiB amplification
//! (`DeviceMaxSingleRequest` with `ReadAmplificationLimit::Custom(16384)`).

use std::{
    path::{Path, PathBuf},
    rc::Rc,
    time::{Duration, Instant},
};

use eagerio::glommio::{glommio as gl, GlommioEngine, GlommioOptions};
use eagerio::RowLayout;
use futures::StreamExt;
use gl::io::{DmaFile, MergedBufferLimit, ReadAmplificationLimit};

const ROWS_PER_GATHER: usize = 40_000;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The table's byte at `offset`: a pure function, so outputs are checked without re-reading.
fn byte_at(offset: u64) -> u8 {
    splitmix(offset / 8).to_le_bytes()[(offset % 8) as usize]
}

fn table(bytes: u64) -> std::io::Result<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/eagerio-bench");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("glommio-table-{bytes}.bin"));
    if std::fs::metadata(&path).map(|m| m.len()).ok() == Some(bytes) {
        return Ok(path);
    }
    eprintln!("creating {path:?} ({} MiB), once", bytes >> 20);
    let tmp = path.with_extension("tmp");
    {
        use std::io::Write;
        let mut f = std::io::BufWriter::with_capacity(8 << 20, std::fs::File::create(&tmp)?);
        let mut chunk = Vec::with_capacity(8 << 20);
        let mut word = 0u64;
        while word * 8 < bytes {
            chunk.clear();
            while chunk.len() < (8 << 20) && word * 8 < bytes {
                chunk.extend_from_slice(&splitmix(word).to_le_bytes());
                word += 1;
            }
            let keep = chunk.len().min((bytes - (word * 8 - chunk.len() as u64)) as usize);
            f.write_all(&chunk[..keep])?;
        }
        f.flush()?;
    }
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// Fresh ids per run: a different seed every time.
fn ids(rows: u64, run: u64, row_size: u64) -> Vec<u64> {
    let seed = splitmix(run ^ (row_size << 32) ^ 0x5eed);
    (0..ROWS_PER_GATHER as u64).map(|i| splitmix(seed ^ i) % rows).collect()
}

fn verify(out: &[u8], ids: &[u64], row_size: u64) -> bool {
    out.len() as u64 == ids.len() as u64 * row_size
        && ids.iter().enumerate().all(|(k, &r)| {
            let row = &out[k * row_size as usize..(k + 1) * row_size as usize];
            row.iter().enumerate().all(|(j, &b)| b == byte_at(r * row_size + j as u64))
        })
}

#[derive(Clone, Copy)]
enum Method {
    /// eagerio-glommio with this `max_gap` (`None`: `EAGERIO_BENCH_MAX_GAP`, default 4096).
    Eagerio(Option<u64>),
    ReadMany(&'static str, fn() -> (MergedBufferLimit, ReadAmplificationLimit)),
}

impl Method {
    fn name(&self) -> String {
        match self {
            Method::Eagerio(None) => "eagerio-glommio".into(),
            Method::Eagerio(Some(g)) => format!("eagerio-glommio, max_gap {} KiB", g / 1024),
            Method::ReadMany(n, _) => format!("read_many, {n}"),
        }
    }
}

const METHODS: [Method; 5] = [
    Method::Eagerio(None),
    // The same read amplification as read_many's 16 KiB variant.
    Method::Eagerio(Some(16 * 1024)),
    Method::ReadMany("no merging", || (MergedBufferLimit::NoMerging, ReadAmplificationLimit::NoAmplification)),
    Method::ReadMany("default merging", || {
        (MergedBufferLimit::DeviceMaxSingleRequest, ReadAmplificationLimit::NoAmplification)
    }),
    Method::ReadMany("16 KiB amplification", || {
        (MergedBufferLimit::DeviceMaxSingleRequest, ReadAmplificationLimit::Custom(16 * 1024))
    }),
];

/// `read_many` over the sorted unique rows; each result goes to every position that asked.
async fn read_many(
    file: &Rc<DmaFile>,
    ids: &[u64],
    row_size: u64,
    depth: usize,
    limits: (MergedBufferLimit, ReadAmplificationLimit),
) -> Vec<u8> {
    let mut order: Vec<(u64, u32)> = ids.iter().enumerate().map(|(k, &r)| (r, k as u32)).collect();
    order.sort_unstable();
    let mut unique: Vec<(u64, usize)> = order.iter().map(|&(r, _)| (r * row_size, row_size as usize)).collect();
    unique.dedup();
    let mut out = vec![0u8; ids.len() * row_size as usize];
    let mut results = file.read_many(futures::stream::iter(unique), limits.0, limits.1).with_concurrency(depth);
    let mut at = 0usize;
    while let Some(res) = results.next().await {
        let ((pos, _), bytes) = res.expect("read_many read");
        let row = pos / row_size;
        while at < order.len() && order[at].0 == row {
            let k = order[at].1 as usize;
            out[k * row_size as usize..(k + 1) * row_size as usize].copy_from_slice(&bytes);
            at += 1;
        }
    }
    out
}

/// A method's output, kept as it came (no copy in the timed region).
enum Out {
    Eager(bytes::Bytes),
    Vec(Vec<u8>),
}

impl Out {
    fn bytes(&self) -> &[u8] {
        match self {
            Out::Eager(b) => b,
            Out::Vec(v) => v,
        }
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

async fn bench() -> Result<(), Box<dyn std::error::Error>> {
    let bytes = env_u64("EAGERIO_BENCH_TABLE_BYTES", 2 << 30);
    let depth = env_u64("EAGERIO_BENCH_DEPTH", 128) as usize;
    let runs = env_u64("EAGERIO_BENCH_RUNS", 3).max(1);
    let max_gap = env_u64("EAGERIO_BENCH_MAX_GAP", eagerio::core::DEFAULT_MAX_GAP);
    let path = table(bytes)?;
    let dma = Rc::new(DmaFile::open(&path).await?);
    println!(
        "table {path:?}: {} MiB, {ROWS_PER_GATHER} random rows per gather (with replacement), depth {depth}, \
         eagerio max_gap {max_gap}, cold (evicted before every run), median of {runs}\n",
        bytes >> 20
    );
    println!("| row size | method | median ms | rows/s | vs best read_many |");
    println!("|---:|---|---:|---:|---:|");
    for row_size in [4096u64, 90] {
        let rows = bytes / row_size;
        let layout = RowLayout { base: 0, row_size, rows: None };
        let opts = GlommioOptions::default().depth(depth).max_gap(max_gap);
        let table = GlommioEngine::open_rows(&path, layout, opts).await?;
        let wide =
            GlommioEngine::open_rows(&path, layout, GlommioOptions::default().depth(depth).max_gap(16 * 1024)).await?;
        let mut results: Vec<(String, Option<Duration>)> = Vec::new();
        let only = std::env::var("EAGERIO_BENCH_ONLY").unwrap_or_default();
        for (m, method) in METHODS.iter().enumerate() {
            if !method.name().contains(only.as_str()) {
                continue;
            }
            let mut times = Vec::new();
            let mut ok = true;
            for run in 0..runs {
                let ids = ids(rows, run * 16 + m as u64 + 1, row_size);
                eagerio::core::sys::evict(&path)?;
                let t = Instant::now();
                let out = match method {
                    Method::Eagerio(None) => Out::Eager(table.gather(&ids)?.await?),
                    Method::Eagerio(Some(_)) => Out::Eager(wide.gather(&ids)?.await?),
                    Method::ReadMany(_, limits) => Out::Vec(read_many(&dma, &ids, row_size, depth, limits()).await),
                };
                let dt = t.elapsed();
                ok &= verify(out.bytes(), &ids, row_size);
                times.push(dt);
            }
            results.push((method.name(), ok.then(|| median(times))));
        }
        let best_rm = results.iter().filter(|(n, _)| n.starts_with("read_many")).filter_map(|r| r.1).min();
        for (name, t) in &results {
            match t {
                Some(t) => {
                    let ratio =
                        best_rm.map_or("-".to_string(), |b| format!("{:.2}x", b.as_secs_f64() / t.as_secs_f64()));
                    println!(
                        "| {row_size} B | {name} | {:.1} | {:.0} | {ratio} |",
                        t.as_secs_f64() * 1e3,
                        ROWS_PER_GATHER as f64 / t.as_secs_f64()
                    );
                }
                None => println!("| {row_size} B | {name} | FAILED | FAILED | wrong bytes |"),
            }
        }
        let s = table.stats();
        eprintln!(
            "eagerio {row_size} B: {} reads, {:.1} MiB read for {:.1} MiB useful over {} gathers",
            s.reads,
            s.bytes_read as f64 / (1 << 20) as f64,
            s.useful_bytes as f64 / (1 << 20) as f64,
            s.gathers
        );
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ex = eagerio::glommio::executor(gl::LocalExecutorBuilder::new(gl::Placement::Unbound))?;
    ex.run(bench())
}
