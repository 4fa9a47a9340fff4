//! Faults on a lane: truncation mid-gather, the Nth completion turned into EIO, a panic while
//! copying rows out, and 10,000 gathers dropped at random points. After each, the same lane
//! serves correct bytes and its staging is back to full.

use std::{
    fs::File,
    io::Write,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use eagerio_core::{
    fault::{self, Action, Hook, IoKind},
    Error, RowLayout, RowTable, Target,
};
use eagerio_uring::{Driver, DriverOptions, UringEngine, UringOptions};
use futures::{executor::block_on, FutureExt};
use rand::{rngs::StdRng, Rng, SeedableRng};

const ROW: u64 = 4096;

fn seed() -> u64 {
    let s = std::env::var("EAGERIO_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    eprintln!("seed {s} (replay with EAGERIO_SEED={s})");
    s
}

fn file(rows: u64, rng: &mut StdRng) -> (tempfile::TempDir, PathBuf, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.bin");
    let mut data = vec![0u8; (rows * ROW) as usize];
    rng.fill(&mut data[..]);
    let mut f = File::create(&path).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    // Cold, so the lane (not the adaptive cache path) serves every row.
    eagerio_core::sys::evict(&path).unwrap();
    (dir, path, data)
}

fn expect(data: &[u8], ids: &[u64]) -> Vec<u8> {
    ids.iter().flat_map(|&i| data[(i * ROW) as usize..((i + 1) * ROW) as usize].iter().copied()).collect()
}

/// Depth 32 over 8 staging slots: more depth than slots, so a read that kept its place in the
/// window but gave its slot back early would let the next read reuse a slot the kernel still
/// writes (with as many slots as depth, the stale read would block reuse anyway). The driver is
/// the table's own, so its whole staging must come back.
fn table(path: &Path, hook: Option<Hook>) -> RowTable<UringEngine> {
    let driver = Driver::new(DriverOptions::default().depth(32).staging_bytes(8 * 64 * 1024));
    let opts = UringOptions::default().driver(driver.unwrap());
    // The hook is taken at open: the guard may go once the table is open.
    let _faults = hook.map(|h| fault::inject(path, h));
    UringEngine::open_rows_blocking(path, RowLayout { base: 0, row_size: ROW, rows: None }, opts).unwrap()
}

fn wait_full(t: &RowTable<UringEngine>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let engine = t.source().engine();
    while !(engine.staging_full() && engine.driver().unwrap().staging_full()) {
        assert!(Instant::now() < deadline, "a staging slot leaked");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn truncated_mid_gather_gives_short_read_then_lane_is_correct() {
    let mut rng = StdRng::seed_from_u64(seed());
    let (_d, path, data) = file(2048, &mut rng);
    let completions = Arc::new(AtomicUsize::new(0));
    let (c, p) = (completions.clone(), path.clone());
    // The 20th completion cuts the file to 1000 rows: later reads past it come back short.
    let hook = Hook::new(move |pt| {
        if pt.kind == IoKind::Read && c.fetch_add(1, Ordering::SeqCst) == 19 {
            File::options().write(true).open(&p).unwrap().set_len(1000 * ROW).unwrap();
        }
        Action::Proceed
    });
    let t = table(&path, Some(hook));
    let ids: Vec<u64> =
        (0..600).map(|i| if i % 2 == 0 { rng.gen_range(0..1000) } else { rng.gen_range(1000..2048) }).collect();
    let e = block_on(t.gather(&ids).unwrap()).unwrap_err();
    match &e {
        Error::ShortRead { target: Target::Row(r), path: ep, .. } => {
            assert!(*r >= 1000, "row {r} was not cut off");
            assert_eq!(ep, &path);
        }
        other => panic!("expected a short read, got {other}"),
    }
    wait_full(&t);
    let ids: Vec<u64> = (0..500).map(|_| rng.gen_range(0..1000)).collect();
    assert_eq!(block_on(t.gather(&ids).unwrap()).unwrap(), expect(&data, &ids));
    wait_full(&t);
}

#[test]
fn nth_completion_eio_then_every_later_byte_is_right() {
    let mut rng = StdRng::seed_from_u64(seed());
    let (_d, path, data) = file(4096, &mut rng);
    let n = rng.gen_range(1..200usize);
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    let hook = Hook::new(move |pt| {
        if pt.kind == IoKind::Read && c.fetch_add(1, Ordering::SeqCst) == n {
            Action::Fail(std::io::Error::from_raw_os_error(libc::EIO))
        } else {
            Action::Proceed
        }
    });
    let t = table(&path, Some(hook));
    let mut failed = 0;
    for round in 0..30 {
        let ids: Vec<u64> = (0..300).map(|_| rng.gen_range(0..4096)).collect();
        match block_on(t.gather(&ids).unwrap()) {
            Ok(got) => assert!(got == expect(&data, &ids), "round {round}: wrong bytes"),
            Err(e) => {
                failed += 1;
                assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
                assert!(e.to_string().contains("row "), "{e}");
            }
        }
        wait_full(&t);
    }
    assert_eq!(failed, 1, "exactly the gather holding completion {n} fails");
}

#[test]
fn panic_in_copy_out_is_an_error_and_the_lane_survives() {
    let mut rng = StdRng::seed_from_u64(seed());
    let (_d, path, data) = file(512, &mut rng);
    let armed = Arc::new(AtomicUsize::new(1));
    let a = armed.clone();
    let hook = Hook::new(move |pt| {
        if pt.kind == IoKind::CopyOut && pt.offset == 77 * ROW && a.swap(0, Ordering::SeqCst) == 1 {
            Action::Panic
        } else {
            Action::Proceed
        }
    });
    let t = table(&path, Some(hook));
    let e = block_on(t.gather(&[3, 77, 5]).unwrap()).unwrap_err();
    assert!(matches!(e, Error::Panicked { target: Some(Target::Row(77)), .. }), "{e}");
    assert!(e.to_string().contains("row 77") && e.to_string().contains("injected panic at CopyOut"), "{e}");
    wait_full(&t);
    let ids: Vec<u64> = (0..400).map(|_| rng.gen_range(0..512)).collect();
    assert_eq!(block_on(t.gather(&ids).unwrap()).unwrap(), expect(&data, &ids));
}

#[test]
fn ten_thousand_gathers_dropped_at_random_points() {
    let mut rng = StdRng::seed_from_u64(seed());
    let (_d, path, data) = file(8192, &mut rng);
    let t = table(&path, None);
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    let mut settled_before_drop = 0;
    let mut checked = 0;
    for _ in 0..10_000 {
        let ids: Vec<u64> = (0..rng.gen_range(1..48)).map(|_| rng.gen_range(0..8192)).collect();
        let mut fut = t.gather(&ids).unwrap();
        match rng.gen_range(0..4) {
            0 => {}
            1 => {
                let _ = fut.poll_unpin(&mut cx);
            }
            2 => std::thread::sleep(Duration::from_micros(rng.gen_range(0..150))),
            _ => {
                for _ in 0..rng.gen_range(0..2000) {
                    std::hint::spin_loop();
                }
                let _ = fut.poll_unpin(&mut cx);
            }
        }
        settled_before_drop += fut.is_settled() as usize;
        drop(fut);
        // A checked gather while the dropped ones' reads may still be in the kernel: it reuses
        // their slots only once those reads completed, or its bytes would be theirs.
        if rng.gen_ratio(1, 8) {
            let ids: Vec<u64> = (0..rng.gen_range(1..64)).map(|_| rng.gen_range(0..8192)).collect();
            assert_eq!(block_on(t.gather(&ids).unwrap()).unwrap(), expect(&data, &ids), "rows {ids:?}");
            checked += 1;
        }
    }
    eprintln!(
        "{settled_before_drop} of 10000 gathers had settled before their drop; {checked} checked gathers between"
    );
    wait_full(&t);
    let ids: Vec<u64> = (0..2000).map(|_| rng.gen_range(0..8192)).collect();
    assert_eq!(block_on(t.gather(&ids).unwrap()).unwrap(), expect(&data, &ids));
    wait_full(&t);
}

#[test]
fn reads_run_before_the_future_is_polled() {
    let mut rng = StdRng::seed_from_u64(seed());
    let (_d, path, data) = file(1024, &mut rng);
    let t = table(&path, None);
    let ids: Vec<u64> = (0..256).map(|_| rng.gen_range(0..1024)).collect();
    let fut = t.gather(&ids).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    // Nobody polls: the lane thread alone must take the gather to completion.
    while !fut.is_settled() {
        assert!(Instant::now() < deadline, "the gather did not run without being polled");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(fut.stats().reads_issued, fut.stats().reads_planned);
    assert_eq!(block_on(fut).unwrap(), expect(&data, &ids));
}
