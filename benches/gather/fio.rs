//! fio as the ceiling and the price: random direct reads with io_uring on the same table file,
//! and the device's cost per read and per KiB fitted to them.

use eagerio::core::DevicePrice;
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

/// The device's price (`eagerio_core::DevicePrice`: a cost per read plus a cost per KiB),
/// fitted by least squares to fio's random-read IOPS at `depth` and several block sizes (at
/// depth, one read of `bs` costs the device 1/IOPS of its time); `None` with fewer than two
/// block sizes.
pub fn price(results: &[FioResult], depth: u32) -> Option<DevicePrice> {
    let points = results
        .iter()
        .filter(|r| r.depth == depth && r.iops > 0.0)
        .map(|r| (1.0, r.bs as f64 / 1024.0, Duration::from_secs_f64(1.0 / r.iops)));
    DevicePrice::fit(points)
}
