//! W3, the fan-out sink: a columnar writer's chunks written at reserved offsets, lazy deferred
//! futures awaited in order against the eager sink.

use std::{
    fs::File,
    os::unix::fs::FileExt,
    path::Path,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use eagerio::core::fault::{self, Hook};
use eagerio::tokio::{TokioWriter, WriterOptions};
use eagerio::{DataSink, SinkOptions};

use crate::methods::Res;
use crate::table;

/// The chunks: `(offset, bytes)`, back to back from offset 0, holding the fill function's bytes.
pub fn chunks(count: usize, min: usize, max: usize) -> Vec<(u64, Bytes)> {
    let mut off = 0u64;
    (0..count)
        .map(|i| {
            let len = min + (table::mix(0x0C01_u64 << 32 | i as u64) % (max - min + 1) as u64) as usize;
            let mut b = vec![0u8; len];
            table::fill_at(&mut b, off);
            let c = (off, Bytes::from(b));
            off += len as u64;
            c
        })
        .collect()
}

/// One run's measurements.
#[derive(Debug, Clone, Copy)]
pub struct SinkRun {
    pub elapsed: Duration,
    /// Writes started before the wait loop began.
    pub started_before_wait: usize,
    /// The most bytes in flight at once (eager sink only).
    pub peak_in_flight: Option<u64>,
}

/// All runs of one sink method at one latency.
#[derive(Debug, Clone)]
pub struct SinkCell {
    /// `none` or `2 ms`.
    pub latency: String,
    pub method: String,
    /// The median run by time; `None` when a run failed.
    pub median: Option<SinkRun>,
    pub failed: Option<String>,
}

impl SinkCell {
    pub fn is_eager(&self) -> bool {
        self.method.starts_with("eagerio")
    }
}

/// Lazy futures (each write starts only when awaited), awaited in order, then `fdatasync`. With
/// `latency`, every write and the sync sleep that long first, like the eager sink's hook.
pub fn deferred(
    rt: &tokio::runtime::Runtime,
    path: &Path,
    chunks: &[(u64, Bytes)],
    latency: Option<Duration>,
) -> Res<SinkRun> {
    let file = Arc::new(File::create(path)?);
    let started = Arc::new(AtomicUsize::new(0));
    rt.block_on(async {
        let t = Instant::now();
        let futs: Vec<_> = chunks
            .iter()
            .map(|(off, data)| {
                let (file, data, started, off) = (file.clone(), data.clone(), started.clone(), *off);
                async move {
                    tokio::task::spawn_blocking(move || {
                        started.fetch_add(1, Ordering::Relaxed);
                        if let Some(l) = latency {
                            std::thread::sleep(l);
                        }
                        file.write_all_at(&data, off)
                    })
                    .await
                }
            })
            .collect();
        let started_before_wait = started.load(Ordering::Relaxed);
        for f in futs {
            f.await??;
        }
        let f = file.clone();
        tokio::task::spawn_blocking(move || {
            if let Some(l) = latency {
                std::thread::sleep(l);
            }
            f.sync_data()
        })
        .await??;
        Ok(SinkRun { elapsed: t.elapsed(), started_before_wait, peak_in_flight: None })
    })
}

/// The eager sink: `append` starts every write at call time, the futures are awaited in order,
/// then `close` (flush + `fdatasync`). With `latency`, the core's write-latency hook.
pub fn eager(
    rt: &tokio::runtime::Runtime,
    path: &Path,
    chunks: &[(u64, Bytes)],
    latency: Option<Duration>,
    opts: SinkOptions,
) -> Res<SinkRun> {
    rt.block_on(async {
        let _slow = latency.map(|l| fault::inject(path, Hook::write_latency(l)));
        let w = WriterOptions::default().sink(opts);
        let sink = TokioWriter::create(path, w).await?;
        let t = Instant::now();
        let futs: Vec<_> = chunks.iter().map(|(_, data)| sink.append(data.clone())).collect();
        let s = sink.stats();
        let started_before_wait = (s.writes - s.queued) as usize;
        for (f, (off, _)) in futs.into_iter().zip(chunks) {
            if f.offset() != *off {
                return Err(format!("append reserved offset {} for the chunk expected at {off}", f.offset()).into());
            }
            f.await?;
        }
        sink.close().await?;
        let elapsed = t.elapsed();
        Ok(SinkRun { elapsed, started_before_wait, peak_in_flight: Some(sink.stats().peak_in_flight_bytes) })
    })
}
