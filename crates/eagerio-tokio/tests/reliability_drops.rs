//! Reliability: dropped futures and load on the tokio backend.
//!
//! - 10,000 gathers and writes under `tokio::time::timeout` with random short limits (0-3 ms),
//!   reads and writes slowed by a random 0-300 us in the seam, so futures are dropped before, during and
//!   after their I/O. Afterwards: staging full (no leaked slot), nothing in flight in the sink,
//!   every later gather right, the flush clean, and every write (dropped or not: none failed)
//!   on disk.
//!
//! The load test is `reliability_load.rs` (its own process, so its RSS measure is its own).

#[path = "../../../tests/support/fault_schedule.rs"]
mod fault_schedule;

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use eagerio_core::{
    fault::{self, Action, Hook, IoKind},
    DataSink, RowLayout, SinkOptions,
};
use eagerio_tokio::{TokioEngine, TokioOptions, TokioWriter, WriterOptions};
use fault_schedule::{seed, Rng, SeedGuard};

const ROW: u64 = 4096;
const ROWS: u64 = 2048;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn table_file(rng: &mut Rng) -> (tempfile::TempDir, std::path::PathBuf, Arc<Vec<u8>>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.bin");
    let data = rng.bytes((ROW * ROWS) as usize);
    std::fs::write(&path, &data).unwrap();
    eagerio_core::sys::evict(&path).unwrap();
    (dir, path, Arc::new(data))
}

#[test]
fn drops_ten_thousand_futures_under_random_timeouts() {
    let s = seed("tokio drops");
    let _g = SeedGuard { test: "tokio drops".into(), seed: s };
    rt().block_on(async {
        let mut rng = Rng::new(s);
        let (dir, path, file) = table_file(&mut rng);
        let delay = Arc::new(std::sync::Mutex::new(Rng::new(s ^ 1)));
        let hook = Hook::new(move |p| {
            if matches!(p.kind, IoKind::Read | IoKind::Write) {
                let us = delay.lock().unwrap().below(300);
                std::thread::sleep(Duration::from_micros(us));
            }
            Action::Proceed
        });
        let _faults = fault::inject(&path, hook.clone());
        let opts = TokioOptions::default().depth(8).adaptive(false);
        let t = TokioEngine::open(&path, opts)
            .await
            .unwrap()
            .rows(RowLayout { base: 0, row_size: ROW, rows: None })
            .unwrap();
        let out = dir.path().join("out.bin");
        let _out_faults = fault::inject(&out, hook);
        let sink = TokioWriter::create(
            &out,
            WriterOptions::default().sink(SinkOptions::default().max_in_flight_bytes(128 << 10).append_from(0)),
        )
        .await
        .unwrap();
        let mut expect = Vec::new();
        let (mut gathers_done, mut gathers_dropped, mut writes_done, mut writes_dropped) = (0, 0, 0, 0);
        for i in 0..10_000u32 {
            let limit = Duration::from_micros(rng.below(3000));
            if rng.chance(70) {
                let ids: Vec<u64> = (0..rng.range(1, 40)).map(|_| rng.below(ROWS)).collect();
                match tokio::time::timeout(limit, t.gather(&ids).unwrap()).await {
                    Ok(r) => {
                        let got = r.expect("no faults are injected");
                        let ok = ids.iter().enumerate().all(|(k, &r)| {
                            got[k * ROW as usize..(k + 1) * ROW as usize]
                                == file[(r * ROW) as usize..((r + 1) * ROW) as usize]
                        });
                        assert!(ok, "seed {s}: op {i}: wrong bytes");
                        gathers_done += 1;
                    }
                    Err(_) => gathers_dropped += 1,
                }
            } else {
                let len = rng.range(1, 20_000) as usize;
                let data = Bytes::from(rng.bytes(len));
                expect.extend_from_slice(&data);
                // Half the writes are dropped at their first poll (a zero limit): tokio's timer has
                // a 1 ms grain, longer than most of these writes.
                let limit = if rng.chance(50) { Duration::ZERO } else { limit };
                match tokio::time::timeout(limit, sink.append(data)).await {
                    Ok(r) => {
                        r.expect("no faults are injected");
                        writes_done += 1;
                    }
                    Err(_) => writes_dropped += 1,
                }
            }
            if i % 1000 == 999 {
                sink.flush().await.expect("every write so far succeeded, dropped or not");
            }
        }
        eprintln!(
            "tokio drops: gathers {gathers_done} completed / {gathers_dropped} dropped by timeout; writes \
             {writes_done} completed / {writes_dropped} dropped"
        );
        assert!(gathers_dropped > 100 && writes_dropped > 10, "the timeouts must drop futures mid-flight");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !t.source().engine().staging().is_full() {
            assert!(std::time::Instant::now() < deadline, "seed {s}: a staging slot leaked");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let st = t.source().engine().staging();
        assert_eq!(st.free_slots(), st.slots(), "no leaked slot");
        sink.close().await.expect("the flush is consistent: nothing failed");
        let ss = sink.stats();
        assert_eq!((ss.in_flight, ss.queued, ss.failed), (0, 0, 0), "{ss:?}");
        assert_eq!(std::fs::read(&out).unwrap(), expect, "every append, dropped or not, is on disk in order");
        for _ in 0..200 {
            let ids: Vec<u64> = (0..32).map(|_| rng.below(ROWS)).collect();
            let got = t.gather(&ids).unwrap().await.unwrap();
            assert!(ids.iter().enumerate().all(|(k, &r)| got[k * ROW as usize..(k + 1) * ROW as usize]
                == file[(r * ROW) as usize..((r + 1) * ROW) as usize]));
        }
    });
}
