//! `eagerio bench FILE`: eagerio against mmap and a serial pread loop on the user's own file,
//! cold and warm, runs interleaved across methods on the same fresh row ids.

use std::{
    fs::File,
    io::Write,
    os::unix::fs::FileExt,
    path::Path,
    time::{Duration, Instant},
};

use crate::{args::BenchArgs, Failure};

const METHODS: [&str; 3] = ["eagerio", "mmap + memcpy", "serial pread"];

/// `n` row ids drawn with replacement from `0..rows` (seeded: the same ids for every
/// method of a run, fresh ones for the next run).
fn ids(seed: u64, n: usize, rows: u64) -> Vec<u64> {
    let mut rng = crate::rng::XorShift::new(seed);
    (0..n).map(|_| rng.below(rows)).collect()
}

/// Reads `ids` through every page cache path the warm runs need (buffered preads).
fn warm_up(file: &File, ids: &[u64], row: u64) -> std::io::Result<()> {
    let mut buf = vec![0u8; row as usize];
    for &id in ids {
        file.read_exact_at(&mut buf, id * row)?;
    }
    Ok(())
}

fn mmap_rows(file: &File, ids: &[u64], row: u64) -> std::io::Result<Vec<u8>> {
    // SAFETY: the mapping is read-only and dropped before this returns; the bench does not
    // truncate the file while it runs (a truncation by someone else would be a SIGBUS, as with
    // any mmap reader).
    let map = unsafe { memmap2::Mmap::map(file)? };
    let mut out = Vec::with_capacity(ids.len() * row as usize);
    for &id in ids {
        let at = (id * row) as usize;
        out.extend_from_slice(&map[at..at + row as usize]);
    }
    Ok(out)
}

fn pread_rows(file: &File, ids: &[u64], row: u64) -> std::io::Result<Vec<u8>> {
    let mut out = vec![0u8; ids.len() * row as usize];
    for (k, &id) in ids.iter().enumerate() {
        file.read_exact_at(&mut out[k * row as usize..(k + 1) * row as usize], id * row)?;
    }
    Ok(out)
}

/// A progress bar on stderr, redrawn in place.
struct Progress {
    done: usize,
    total: usize,
}

impl Progress {
    fn step(&mut self, what: &str) {
        self.done += 1;
        let width = 30;
        let filled = self.done * width / self.total;
        eprint!("\r[{}{}] {}/{} {what:<32}", "#".repeat(filled), ".".repeat(width - filled), self.done, self.total);
        if self.done == self.total {
            eprintln!();
        }
        let _ = std::io::stderr().flush();
    }
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

pub fn run(a: &BenchArgs) -> Result<(), Failure> {
    let path = Path::new(&a.file);
    let file = File::open(path).map_err(|e| format!("cannot open {}: {e}", a.file))?;
    let rows = file.metadata()?.len() / a.row_size;
    if rows == 0 {
        return Err(format!("{} holds no whole row of {} bytes", a.file, a.row_size).into());
    }
    let rt = crate::runtime()?;
    let layout = eagerio::RowLayout { base: 0, row_size: a.row_size, rows: None };
    let table = rt.block_on(eagerio::open_rows(&a.file, layout, eagerio::OpenOptions::default()))?;
    println!(
        "{}: {rows} rows of {} bytes; {} random rows per run (with replacement), {} runs per cell, \
         methods interleaved",
        a.file, a.row_size, a.rows, a.runs
    );
    // times[cold as usize][method]
    let mut times: [Vec<Vec<Duration>>; 2] = [vec![Vec::new(); 3], vec![Vec::new(); 3]];
    // eagerio's time inside the gather call: what the caller's thread paid.
    let mut in_call: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let mut progress = Progress { done: 0, total: 2 * a.runs * METHODS.len() };
    for cold in [true, false] {
        for r in 0..a.runs {
            let ids = ids(1 + r as u64 * 2 + u64::from(cold), a.rows, rows);
            if !cold {
                warm_up(&file, &ids, a.row_size)?;
            }
            let mut first: Option<Box<dyn AsRef<[u8]>>> = None;
            for (m, name) in METHODS.iter().enumerate() {
                if cold {
                    eagerio::core::sys::evict(path)?;
                }
                let t = Instant::now();
                // Each method's output as it hands it over (eagerio's `Bytes`, the baselines'
                // `Vec`), timed before any conversion.
                let got: Box<dyn AsRef<[u8]>> = match m {
                    0 => {
                        let fut = table.gather(&ids)?;
                        in_call[usize::from(cold)].push(t.elapsed());
                        Box::new(rt.block_on(fut)?)
                    }
                    1 => Box::new(mmap_rows(&file, &ids, a.row_size)?),
                    _ => Box::new(pread_rows(&file, &ids, a.row_size)?),
                };
                times[usize::from(cold)][m].push(t.elapsed());
                match &first {
                    None => first = Some(got),
                    Some(f) if (**f).as_ref() != (*got).as_ref() => {
                        return Err(format!("{name} returned other bytes than eagerio").into())
                    }
                    Some(_) => {}
                }
                progress.step(&format!("{} run {} {name}", if cold { "cold" } else { "warm" }, r + 1));
            }
        }
    }
    let rate = |d: Duration| a.rows as f64 / d.as_secs_f64();
    let mut med = [[Duration::ZERO; 3]; 2];
    for (c, cell) in times.iter_mut().enumerate() {
        for (m, t) in cell.iter_mut().enumerate() {
            med[c][m] = median(t);
        }
    }
    println!("\n| method | cold rows/s | warm rows/s | eagerio vs it, cold | eagerio vs it, warm |");
    println!("|---|---:|---:|---:|---:|");
    for (m, name) in METHODS.iter().enumerate() {
        let (cold, warm) = (med[1][m], med[0][m]);
        println!(
            "| {name} | {:.0} | {:.0} | {:.2}x | {:.2}x |",
            rate(cold),
            rate(warm),
            cold.as_secs_f64() / med[1][0].as_secs_f64(),
            warm.as_secs_f64() / med[0][0].as_secs_f64()
        );
    }
    println!("(medians; \"eagerio vs it\" above 1 means eagerio is faster; cold = evicted with POSIX_FADV_DONTNEED)");
    println!(
        "eagerio's gather call (the caller's thread): cold {:.2} ms, warm {:.2} ms of {:.2} / {:.2} ms in all",
        median(&mut in_call[1]).as_secs_f64() * 1e3,
        median(&mut in_call[0]).as_secs_f64() * 1e3,
        med[1][0].as_secs_f64() * 1e3,
        med[0][0].as_secs_f64() * 1e3
    );
    if let Some(svg) = &a.svg {
        let values: Vec<(String, f64, f64)> =
            METHODS.iter().enumerate().map(|(m, n)| (n.to_string(), rate(med[1][m]), rate(med[0][m]))).collect();
        std::fs::write(svg, chart(&values, a.row_size)).map_err(|e| format!("cannot write {svg}: {e}"))?;
        println!("chart written to {svg}");
    }
    Ok(())
}

/// A grouped bar chart (cold, warm) of rows/s per method, as a standalone SVG.
fn chart(values: &[(String, f64, f64)], row_size: u64) -> String {
    let (w, h, left, top, bottom) = (640.0, 360.0, 60.0, 40.0, 60.0);
    let most = values.iter().flat_map(|v| [v.1, v.2]).fold(1.0_f64, f64::max);
    let group = (w - left - 20.0) / values.len() as f64;
    let bar = group / 3.0;
    let scale = |v: f64| (h - top - bottom) * v / most;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" \
         font-size=\"12\">\n<text x=\"{left}\" y=\"24\" font-size=\"15\">random rows of {row_size} B: rows/s \
         (cold dark, warm light)</text>\n"
    );
    for (i, (name, cold, warm)) in values.iter().enumerate() {
        let x = left + i as f64 * group;
        for (k, (v, color)) in [(cold, "#1f4e79"), (warm, "#9dc3e6")].into_iter().enumerate() {
            let bh = scale(*v);
            let bx = x + k as f64 * bar + bar / 2.0;
            s += &format!(
                "<rect x=\"{bx:.1}\" y=\"{:.1}\" width=\"{bar:.1}\" height=\"{bh:.1}\" fill=\"{color}\"/>\n\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{v:.0}</text>\n",
                h - bottom - bh,
                bx + bar / 2.0,
                h - bottom - bh - 4.0
            );
        }
        s += &format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{name}</text>\n",
            x + group / 2.0,
            h - bottom + 18.0
        );
    }
    s += &format!(
        "<line x1=\"{left}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"black\"/>\n</svg>\n",
        h - bottom,
        w - 20.0
    );
    s
}
