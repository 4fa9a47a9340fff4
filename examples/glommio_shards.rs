//! One table served by two glommio executors, one per core, each gathering its own rows of a
//! shared request stream.
//!
//! ```sh
//! cargo run --release --features glommio --example glommio_shards [TABLE]
//! ```
//!
//! Without `TABLE`, a 64 MiB table of 90-byte rows is created under `target/eagerio-examples/`.
//! The request stream is a seeded sequence of batches of random rows that every shard sees; row
//! `r` belongs to shard `r % 2`. Each executor opens the table itself (a glommio source is
//! `!Send`: it belongs to its executor), keeps up to 4 of its gathers in flight (each is queued
//! to that executor's ring at the call), and sends its half of every batch to the main thread,
//! which puts each batch back in request order and checks every byte against `pread`.

use std::{
    collections::{HashMap, VecDeque},
    fs::File,
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
    sync::{mpsc, Arc},
    time::Instant,
};

use eagerio::glommio::{glommio as gl, GlommioEngine, GlommioOptions};
use eagerio::RowLayout;

const SHARDS: usize = 2;
const ROW: u64 = 90;
const BATCHES: usize = 200;
const BATCH: usize = 2000;
const WINDOW: usize = 4;

/// Half of one batch, gathered by one shard: the batch, the positions its rows had in the batch,
/// and the rows, back to back.
struct Part {
    batch: usize,
    positions: Vec<usize>,
    rows: bytes::Bytes,
}

fn table(arg: Option<String>) -> std::io::Result<PathBuf> {
    if let Some(p) = arg {
        return Ok(PathBuf::from(p));
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/eagerio-examples");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("shards-90b.bin");
    let len = 64u64 << 20;
    if std::fs::metadata(&path).map(|m| m.len()).ok() != Some(len) {
        let mut data = vec![0u8; len as usize];
        rand::RngCore::fill_bytes(&mut <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(1), &mut data);
        std::fs::write(&path, data)?;
    }
    Ok(path)
}

/// The shared request stream: the same seeded batches for everyone.
fn stream(rows: u64) -> Arc<Vec<Vec<u64>>> {
    let mut x = 42u64;
    let mut next = move || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        x >> 33
    };
    Arc::new((0..BATCHES).map(|_| (0..BATCH).map(|_| next() % rows).collect()).collect())
}

async fn shard(id: usize, path: PathBuf, batches: Arc<Vec<Vec<u64>>>, out: mpsc::Sender<Part>) -> eagerio::Result<()> {
    let table =
        GlommioEngine::open_rows(&path, RowLayout { base: 0, row_size: ROW, rows: None }, GlommioOptions::default())
            .await?;
    let mut window = VecDeque::new();
    for (b, batch) in batches.iter().enumerate() {
        let (positions, mine): (Vec<usize>, Vec<u64>) =
            batch.iter().enumerate().filter(|(_, &r)| r as usize % SHARDS == id).map(|(i, &r)| (i, r)).unzip();
        // Queued to this executor's ring now; awaited later.
        window.push_back((b, positions, table.gather(&mine)?));
        if window.len() == WINDOW {
            let (batch, positions, fut) = window.pop_front().expect("full window");
            let rows = fut.await?;
            out.send(Part { batch, positions, rows }).expect("the main thread is listening");
        }
    }
    while let Some((batch, positions, fut)) = window.pop_front() {
        let rows = fut.await?;
        out.send(Part { batch, positions, rows }).expect("the main thread is listening");
    }
    let s = table.stats();
    println!(
        "shard {id}: {} gathers, {} rows, {} reads, {:.1} MiB read for {:.1} MiB useful",
        s.gathers,
        s.requested,
        s.reads,
        s.bytes_read as f64 / (1 << 20) as f64,
        s.useful_bytes as f64 / (1 << 20) as f64
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    eagerio::glommio::check_environment()?;
    let path = table(std::env::args().nth(1))?;
    let rows = std::fs::metadata(&path)?.len() / ROW;
    let batches = stream(rows);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (tx, rx) = mpsc::channel::<Part>();
    let started = Instant::now();
    let handles: Vec<_> = (0..SHARDS)
        .map(|id| {
            let (path, batches, tx) = (path.clone(), batches.clone(), tx.clone());
            std::thread::spawn(move || -> eagerio::Result<()> {
                // One executor per core where there are enough cores.
                let placement = if cores >= SHARDS { gl::Placement::Fixed(id) } else { gl::Placement::Unbound };
                let ex = eagerio::glommio::executor(gl::LocalExecutorBuilder::new(placement).name("shard"))?;
                ex.run(shard(id, path, batches, tx))
            })
        })
        .collect();
    drop(tx);

    // Reassemble every batch in request order and check it against pread.
    let file = File::open(&path)?;
    let mut pending: HashMap<usize, Vec<Part>> = HashMap::new();
    let mut checked = 0usize;
    for part in rx {
        let b = part.batch;
        let parts = pending.entry(b).or_default();
        parts.push(part);
        if parts.len() < SHARDS {
            continue;
        }
        let parts = pending.remove(&b).expect("just filled");
        let mut out = vec![0u8; BATCH * ROW as usize];
        for p in &parts {
            for (k, &pos) in p.positions.iter().enumerate() {
                out[pos * ROW as usize..(pos + 1) * ROW as usize]
                    .copy_from_slice(&p.rows[k * ROW as usize..(k + 1) * ROW as usize]);
            }
        }
        let mut want = vec![0u8; ROW as usize];
        for (pos, &r) in batches[b].iter().enumerate() {
            file.read_exact_at(&mut want, r * ROW)?;
            if out[pos * ROW as usize..(pos + 1) * ROW as usize] != want[..] {
                return Err(format!("batch {b}, position {pos}: row {r} has wrong bytes").into());
            }
        }
        checked += 1;
    }
    for h in handles {
        h.join().expect("a shard thread panicked")?;
    }
    if checked != BATCHES {
        return Err(format!("only {checked} of {BATCHES} batches came back whole").into());
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{SHARDS} executors, {BATCHES} batches of {BATCH} rows from {path:?}: every byte checked, {:.0} rows/s (warm or cold, as the page cache was)",
        (BATCHES * BATCH) as f64 / secs
    );
    Ok(())
}
