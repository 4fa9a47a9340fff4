//! The glommio backend as the shared suites see it: the conformance suite (`Backend`) and the
//! reliability schedules (`FaultBackend`). One copy for every test binary of this crate.

#![allow(dead_code)] // each test binary uses its own part of this module

#[path = "../../../../tests/support/fault_schedule.rs"]
pub mod fault_schedule;

use std::path::Path;

use eagerio_core::{conformance::Backend, Result, Sink, SinkOptions, Source};
use eagerio_glommio::{GlommioEngine, GlommioOptions, GlommioWriter, WriterOptions};
use fault_schedule::FaultBackend;

/// Opens sources with `opts()`.
pub struct Glommio {
    pub opts: fn() -> GlommioOptions,
}

impl Default for Glommio {
    fn default() -> Self {
        Glommio { opts: GlommioOptions::default }
    }
}

impl Backend for Glommio {
    type Engine = GlommioEngine;
    type Writer = GlommioWriter;

    async fn open(&self, path: &Path) -> Result<Source<GlommioEngine>> {
        GlommioEngine::open(path, (self.opts)()).await
    }

    async fn create(&self, path: &Path, sink: SinkOptions) -> Result<Sink<GlommioWriter>> {
        GlommioWriter::create(path, WriterOptions::default().sink(sink)).await
    }

    /// No staging pool of its own (glommio allocates a DMA buffer per read): idle means every
    /// slot is free, no job is queued and no read future is alive.
    fn staging_full(&self, source: &Source<GlommioEngine>) -> bool {
        source.engine().is_idle()
    }
}

impl FaultBackend for Glommio {
    const NAME: &'static str = "glommio";

    async fn pause(&self) {
        glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
    }
}

/// Runs `f` on a fresh `LocalExecutor`; a machine where glommio cannot start fails the test
/// with glommio's reason (the kernel, or the locked-memory limit and how to raise it).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    eagerio_glommio::block_on(f).unwrap_or_else(|e| panic!("glommio cannot run here: {e}"))
}

/// Bytes that differ row to row and within a row, so a misplaced or stale row shows.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(2654435761) >> 7) as u8).collect()
}

/// The bytes of `ids`, in request order, from a table of `size`-byte rows.
pub fn rows(file: &[u8], size: usize, ids: &[u64]) -> Vec<u8> {
    ids.iter().flat_map(|&r| file[r as usize * size..(r as usize + 1) * size].iter().copied()).collect()
}

/// A file of `rows` 4 KiB rows of [`pattern`] in a fresh temp dir, synced and evicted from the
/// page cache (so the adaptive mode serves nothing and every row is read), opened with `opts`.
pub struct Fixture {
    pub file: Vec<u8>,
    pub table: eagerio_core::RowTable<GlommioEngine>,
    /// Removed when dropped: bind it (`dir: _dir`) for as long as the table is used.
    pub dir: tempfile::TempDir,
}

impl Fixture {
    pub async fn new(rows: usize, opts: GlommioOptions) -> Fixture {
        Self::hooked(rows, opts, None).await
    }

    /// [`new`](Self::new), the table opened with `hook` installed for its file.
    pub async fn hooked(rows: usize, opts: GlommioOptions, hook: Option<eagerio_core::fault::Hook>) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let file = pattern(4096 * rows);
        std::fs::write(&path, &file).unwrap();
        eagerio_core::sys::evict(&path).unwrap();
        let layout = eagerio_core::RowLayout { base: 0, row_size: 4096, rows: None };
        let _faults = hook.map(|h| eagerio_core::fault::inject(&path, h));
        let table = GlommioEngine::open(&path, opts).await.unwrap().rows(layout).unwrap();
        Fixture { file, table, dir }
    }
}
