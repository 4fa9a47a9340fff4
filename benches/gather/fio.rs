//! fio as the ceiling and the price: random direct reads with io_uring on the same table file,
//! and the device's cost per read and per KiB fitted to them.

use std::{path::Path, process::Command, time::Duration};

/// One fio job's result.
#[derive(Debug, Clone)]
pub struct FioResult {
    pub bs: u64,
    pub depth: u32,
    pub iops: f64,
    pub bytes_per_s: f64,
}

/// Whether fio runs here.
pub fn available() -> bool {
    Command::new("fio").arg("--version").output().map(|o| o.status.success()).unwrap_or(false)
}

/// `fio --name=ceil --filename=<table> --direct=1 --ioengine=io_uring --rw=randread --bs=<bs>
/// --iodepth=<depth> --runtime=<secs> --time_based --output-format=json`, parsed.
///
/// # Errors
/// If fio fails or its JSON lacks `jobs[0].read.iops`.
pub fn run(table: &Path, bs: u64, depth: u32, secs: u32) -> Result<FioResult, String> {
    let out = Command::new("fio")
        .arg("--name=ceil")
        .arg(format!("--filename={}", table.display()))
        .args(["--direct=1", "--ioengine=io_uring", "--rw=randread"])
        .arg(format!("--bs={bs}"))
        .arg(format!("--iodepth={depth}"))
        .arg(format!("--runtime={secs}"))
        .args(["--time_based", "--output-format=json"])
        .output()
        .map_err(|e| format!("fio: {e}"))?;
    if !out.status.success() {
        return Err(format!("fio exited with {}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()));
    }
    parse(&String::from_utf8_lossy(&out.stdout), bs, depth)
}

fn parse(json: &str, bs: u64, depth: u32) -> Result<FioResult, String> {
    // fio may print notes before the JSON object.
    let start = json.find('{').ok_or("fio printed no JSON")?;
    let v: serde_json::Value = serde_json::from_str(&json[start..]).map_err(|e| format!("fio JSON: {e}"))?;
    let read = &v["jobs"][0]["read"];
    let iops = read["iops"].as_f64().ok_or("fio JSON has no jobs[0].read.iops")?;
    let bytes_per_s = read["bw_bytes"].as_f64().unwrap_or(iops * bs as f64);
    Ok(FioResult { bs, depth, iops, bytes_per_s })
}

/// The device's price for a plan: `per_read_us` for each read and `per_kib_us` for each KiB,
/// fitted by least squares to fio's random-read IOPS at one depth and several block sizes (at
/// depth, one read of `bs` costs the device 1/IOPS of its time).
#[derive(Debug, Clone, Copy)]
pub struct Price {
    pub per_read_us: f64,
    pub per_kib_us: f64,
}

impl Price {
    /// Fits `1/IOPS = per_read + per_kib x KiB` to the results at `depth`; `None` with fewer than
    /// two block sizes.
    pub fn fit(results: &[FioResult], depth: u32) -> Option<Price> {
        let pts: Vec<(f64, f64)> = results
            .iter()
            .filter(|r| r.depth == depth && r.iops > 0.0)
            .map(|r| (r.bs as f64 / 1024.0, 1e6 / r.iops))
            .collect();
        let n = pts.len() as f64;
        let (sx, sy) = pts.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
        let (sxx, sxy) = pts.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x * x, b + x * y));
        let den = n * sxx - sx * sx;
        if pts.len() < 2 || den.abs() < 1e-9 {
            return None;
        }
        let per_kib_us = (n * sxy - sx * sy) / den;
        Some(Price { per_read_us: (sy - per_kib_us * sx) / n, per_kib_us })
    }

    /// What the device needs for `reads` reads of `bytes` in all.
    pub fn of(&self, reads: u64, bytes: u64) -> Duration {
        let us = reads as f64 * self.per_read_us + bytes as f64 / 1024.0 * self.per_kib_us;
        Duration::from_secs_f64(us.max(0.0) / 1e6)
    }

    pub fn describe(&self) -> String {
        format!("{:.2} µs per read + {:.3} µs per KiB", self.per_read_us, self.per_kib_us)
    }
}
