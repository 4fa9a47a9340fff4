//! The table file the tuning examples (`adaptive`, `uring_lanes`) share: a deterministic fill,
//! written once under `target/<dir>/` and reused while its size matches.

use std::{
    fs::File,
    io::Write,
    path::{Path, PathBuf},
};

/// splitmix64 of `i`: the table's 8-byte word at index `i`, and the examples' id generator.
pub fn word(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `target/<dir>/table-<mb>m.bin`, filled with [`word`]s (written only if missing or resized).
pub fn table(dir: &str, mb: u64) -> std::io::Result<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target").join(dir);
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("table-{mb}m.bin"));
    let size = mb << 20;
    if std::fs::metadata(&path).map(|m| m.len() == size).unwrap_or(false) {
        return Ok(path);
    }
    eprintln!("writing {} ({mb} MiB)...", path.display());
    let mut f = File::create(&path)?;
    let mut buf = vec![0u8; 8 << 20];
    let mut off = 0;
    while off < size {
        for (i, c) in buf.chunks_exact_mut(8).enumerate() {
            c.copy_from_slice(&word(off / 8 + i as u64).to_le_bytes());
        }
        f.write_all(&buf)?;
        off += buf.len() as u64;
    }
    f.sync_all()?;
    Ok(path)
}
