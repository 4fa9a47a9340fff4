//! The in-flight ledger on glommio: dropped gathers, panics and errors never free a slot early,
//! and the file keeps serving.

mod common;

use common::{block_on, pattern, rows, Fixture};

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use eagerio_core::{
    fault::{Action, Hook, IoKind},
    Error, RowLayout, Target,
};
use eagerio_glommio::{GlommioEngine, GlommioOptions};

#[test]
fn dropped_gather_keeps_its_slots_until_its_reads_complete() {
    block_on(async {
        let opts = GlommioOptions::default().depth(16).max_gap(0);
        let Fixture { file, table, dir: _dir } = Fixture::new(1024, opts).await;
        let engine = table.source().engine().clone();
        let big: Vec<u64> = (0..1024).step_by(2).collect();
        drop(table.gather(&big).unwrap());
        // Dropped, but its 16 queued reads still own their slots.
        assert_eq!(engine.in_flight(), 16);
        let ids = [1001u64, 3, 3, 500];
        let got = table.gather(&ids).unwrap().await.unwrap();
        assert_eq!(&got[..], &rows(&file, 4096, &ids)[..]);
        // A gather settles only after every earlier read: the dropped one has drained, and it
        // issued nothing after it was dropped.
        assert!(engine.is_idle(), "{engine:?}");
        let s = table.stats();
        assert_eq!(s.gathers, 2);
        assert!(s.reads <= 16 + 3, "the dropped gather must stop issuing: {s:?}");
    });
}

#[test]
fn a_panicking_hook_fails_the_gather_not_the_caller() {
    block_on(async {
        let armed = Arc::new(AtomicBool::new(true));
        let a = armed.clone();
        let hook = Hook::new(move |p| {
            if a.load(Ordering::SeqCst) && p.offset == 7 * 4096 {
                match p.kind {
                    IoKind::Read => Action::Panic,
                    _ => Action::Proceed,
                }
            } else {
                Action::Proceed
            }
        });
        let opts = GlommioOptions::default().max_gap(0);
        let Fixture { file, table, dir: _dir } = Fixture::hooked(64, opts, Some(hook)).await;
        let e = table.gather(&[1, 7, 30]).unwrap().await.unwrap_err();
        // The error names the row whose read the hook panicked in, and its offset.
        assert!(matches!(e, Error::Panicked { target: Some(Target::Row(7)), offset: Some(28672), .. }), "{e}");
        assert!(e.to_string().contains("injected panic"), "{e}");
        assert!(table.source().engine().is_idle());
        armed.store(false, Ordering::SeqCst);
        let got = table.gather(&[7, 1]).unwrap().await.unwrap();
        assert_eq!(&got[..], &rows(&file, 4096, &[7, 1])[..]);
    });
}

#[test]
fn a_panic_while_copying_out_fails_the_gather_and_frees_the_slot() {
    block_on(async {
        let armed = Arc::new(AtomicBool::new(true));
        let a = armed.clone();
        let hook = Hook::new(move |p| {
            if a.load(Ordering::SeqCst) && p.kind == IoKind::CopyOut && p.offset == 0 {
                Action::Panic
            } else {
                Action::Proceed
            }
        });
        let opts = GlommioOptions::default().max_gap(0);
        let Fixture { file, table, dir: _dir } = Fixture::hooked(64, opts, Some(hook)).await;
        let e = table.gather(&[0, 20]).unwrap().await.unwrap_err();
        assert!(matches!(e, Error::Panicked { .. }), "{e}");
        assert!(table.source().engine().is_idle());
        armed.store(false, Ordering::SeqCst);
        assert_eq!(&table.gather(&[0]).unwrap().await.unwrap()[..], &file[..4096]);
    });
}

#[test]
fn reads_are_aligned_to_the_device() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let file = pattern(90 * 10_000 + 17);
        std::fs::write(&path, &file).unwrap();
        // Evicted, so the adaptive mode serves nothing and every row is read.
        eagerio_core::sys::evict(&path).unwrap();
        let src = GlommioEngine::open(&path, GlommioOptions::default()).await.unwrap();
        let align = src.info().align;
        assert!(align >= 512 && align.is_power_of_two(), "{align}");
        assert_eq!(src.plan_options().align, align);
        let table = src.rows(RowLayout { base: 0, row_size: 90, rows: None }).unwrap();
        let ids: Vec<u64> = (0..2000).map(|i| (i * 7919) % 10_000).chain([9999]).collect();
        let fut = table.gather(&ids).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let got = fut.await.unwrap();
        assert!(Instant::now() < deadline);
        assert_eq!(&got[..], &rows(&file, 90, &ids)[..]);
        let s = table.stats();
        // Whole blocks, except the read that reaches the unaligned end of the file.
        assert!(ids.contains(&9999), "the request reaches the last row");
        assert_eq!(s.bytes_read % align, file.len() as u64 % align, "O_DIRECT reads are whole blocks: {s:?}");
    });
}

#[test]
fn bad_options_are_refused() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, pattern(8192)).unwrap();
        let e = GlommioEngine::open(&path, GlommioOptions::default().depth(0)).await.unwrap_err();
        assert!(e.to_string().contains("depth"), "{e}");
        let e = GlommioEngine::open(&path, GlommioOptions::default().max_read(1000)).await.unwrap_err();
        assert!(e.to_string().contains("max_read") && e.to_string().contains("alignment"), "{e}");
        let e = GlommioEngine::open(dir.path().join("missing"), GlommioOptions::default()).await.unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
    });
}
