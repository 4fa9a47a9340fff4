//! The table file the bench (`benches/gather`) and the examples share: a deterministic fill
//! function, creation-once-and-reuse, seeded row ids, and the reference check every method's
//! output goes through.

#![allow(dead_code)] // each example uses its own part of this module

use std::{
    fs::File,
    io::{self, Read, Write},
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
};

/// Written next to the table; the table is reused only if this matches exactly.
const TAG_VERSION: &str = "eagerio-bench table v1: splitmix64 words, little endian, seed 0x5eed7ab1e0000000";

/// splitmix64's finaliser: the fill function and the id generator.
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The 8-byte word at word index `w` (file offset `8 * w`), for the table and the sink's output.
pub fn word(w: u64) -> u64 {
    mix(w ^ 0x5EED_7AB1_E000_0000)
}

/// Fills `buf` with the file's bytes starting at file offset `off`.
pub fn fill_at(buf: &mut [u8], off: u64) {
    let mut p = 0usize;
    while p < buf.len() {
        let at = off + p as u64;
        let w = at / 8;
        let from = (at % 8) as usize;
        let bytes = word(w).to_le_bytes();
        let n = (8 - from).min(buf.len() - p);
        buf[p..p + n].copy_from_slice(&bytes[from..from + n]);
        p += n;
    }
}

/// Checks that `got` holds exactly the file's bytes starting at `off`. Returns the index of the
/// first wrong byte.
pub fn check_at(got: &[u8], off: u64) -> Result<(), usize> {
    let mut want = [0u8; 4096];
    for (k, chunk) in got.chunks(want.len()).enumerate() {
        let at = k * want.len();
        let want = &mut want[..chunk.len()];
        fill_at(want, off + at as u64);
        if let Some(i) = chunk.iter().zip(want.iter()).position(|(a, b)| a != b) {
            return Err(at + i);
        }
    }
    Ok(())
}

/// Checks a row gather's output (rows back to back in request order) against the fill function.
///
/// Caches the pages of rows `ids` of `path` with buffered reads (as an application that also
/// reads the file keeps them), whatever the method under test reads with.
///
/// # Errors
/// The read's error.
#[allow(dead_code)] // not every example that includes this module warms a table
pub fn cache_rows(path: &std::path::Path, ids: &[u64], row_size: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path)?;
    let mut buf = vec![0u8; row_size as usize];
    for &id in ids {
        file.read_exact_at(&mut buf, id * row_size)?;
    }
    Ok(())
}

/// # Errors
/// A message naming the length mismatch or the first wrong byte and its row.
pub fn verify_rows(out: &[u8], ids: &[u64], row_size: u64) -> Result<(), String> {
    let rs = row_size as usize;
    if out.len() != ids.len() * rs {
        return Err(format!("output is {} bytes, expected {}", out.len(), ids.len() * rs));
    }
    for (i, (row, &id)) in out.chunks_exact(rs).zip(ids).enumerate() {
        if let Err(k) = check_at(row, id * row_size) {
            return Err(format!("request #{i} (row {id}): byte {k} of the row is wrong"));
        }
    }
    Ok(())
}

/// The table file for `size` bytes under `dir`: reused when its size and tag match, else
/// (re)written and synced. Returns the path and whether it was written now.
///
/// # Errors
/// I/O errors creating or checking it.
pub fn ensure(dir: &Path, size: u64) -> io::Result<(PathBuf, bool)> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("table-{}MiB.bin", size >> 20));
    let tag_path = path.with_extension("tag");
    let tag = format!("{TAG_VERSION}; size {size}\n");
    let reusable = std::fs::metadata(&path).map(|m| m.len() == size).unwrap_or(false)
        && std::fs::read_to_string(&tag_path).map(|t| t == tag).unwrap_or(false)
        && spot_check(&path, size)?;
    if reusable {
        return Ok((path, false));
    }
    let _ = std::fs::remove_file(&tag_path);
    write_table(&path, size)?;
    std::fs::write(&tag_path, tag)?;
    Ok((path, true))
}

/// Reads 64 spread-out 4 KiB blocks and checks them against the fill function.
fn spot_check(path: &Path, size: u64) -> io::Result<bool> {
    let f = File::open(path)?;
    let mut buf = vec![0u8; 4096];
    for i in 0..64u64 {
        let off = (mix(i) % size.max(1)) & !4095;
        let n = (size - off).min(4096) as usize;
        f.read_exact_at(&mut buf[..n], off)?;
        if check_at(&buf[..n], off).is_err() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Writes `size` bytes of the fill function to `path` and syncs them.
///
/// # Errors
/// I/O errors creating, writing or syncing the file.
pub fn write_table(path: &Path, size: u64) -> io::Result<()> {
    const CHUNK: usize = 8 << 20;
    let mut f = File::create(path)?;
    let mut buf = vec![0u8; CHUNK];
    let mut off = 0u64;
    while off < size {
        let n = (size - off).min(CHUNK as u64) as usize;
        fill_at(&mut buf[..n], off);
        f.write_all(&buf[..n])?;
        off += n as u64;
    }
    f.sync_all()
}

/// Checks a whole file (the sink's output) against the fill function, streaming.
///
/// # Errors
/// A message naming the first wrong byte, or the length mismatch.
pub fn verify_file(path: &Path, len: u64) -> Result<(), String> {
    let mut f = File::open(path).map_err(|e| format!("open {}: {e}", path.display()))?;
    let actual = f.metadata().map_err(|e| e.to_string())?.len();
    if actual != len {
        return Err(format!("file is {actual} bytes, expected {len}"));
    }
    let mut buf = vec![0u8; 4 << 20];
    let mut off = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        check_at(&buf[..n], off).map_err(|k| format!("byte {} is wrong", off + k as u64))?;
        off += n as u64;
    }
    Ok(())
}

/// `n` row ids below `rows`, drawn with replacement from `seed`.
pub fn ids(seed: u64, n: usize, rows: u64) -> Vec<u64> {
    let mut s = mix(seed ^ 0xA11D_5EED);
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            ((mix(s) as u128 * rows as u128) >> 64) as u64
        })
        .collect()
}

/// The examples' reusable table: `target/<name>/`, written on first use (see [`ensure`]).
///
/// # Errors
/// I/O errors creating or checking it.
pub fn in_target(name: &str, size: u64) -> io::Result<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target").join(name);
    if !dir.join(format!("table-{}MiB.bin", size >> 20)).exists() {
        eprintln!("writing the {} MiB table under {}...", size >> 20, dir.display());
    }
    Ok(ensure(&dir, size)?.0)
}
