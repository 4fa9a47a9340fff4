//! # eagerio: I/O that starts when you ask for it
//!
//! A **gather** reads a batch of scattered rows or byte ranges of a file: planned (sorted,
//! deduplicated, coalesced, aligned, split) and submitted before the call returns. A **sink**
//! starts every write at call time. The futures only wait.
//!
//! This facade re-exports the core ([`core`]) and one module per backend feature:
//! - `tokio` (default): [`tokio`], reads and writes on tokio's blocking pool.
//! - `uring` (default): [`uring`], io_uring lanes with registered staging.
//! - `glommio` (default): [`glommio`], thread-per-core over glommio's `DmaFile`.
//! - `local-store` (default): [`local_store`], an `object_store::ObjectStore` over a local
//!   directory whose reads are gathers and whose writes are eager sinks, for DataFusion and
//!   anything else that reads through object_store.
//! - `object-store` (off by default: it brings an HTTP client): [`object_store`], range GETs
//!   and multipart uploads on any `object_store::ObjectStore` (S3, GCS, Azure, local, memory).
//!
//! ```no_run
//! # #[cfg(feature = "tokio")]
//! # async fn demo() -> eagerio::Result<()> {
//! use eagerio::RowLayout;
//! let table = eagerio::tokio::TokioEngine::open("table.bin", Default::default()).await?.rows(RowLayout { base: 0, row_size: 90, rows: None })?;
//! let fut = table.gather(&[42, 7, 42])?; // the reads are in flight now
//! let rows = fut.await?;                 // 270 bytes: rows 42, 7, 42
//! # Ok(()) }
//! ```

mod open;

/// An `object_store::ObjectStore` over local files whose reads are eagerio gathers.
#[cfg(feature = "local-store")]
pub mod local_store;

pub use eagerio_core as core;
pub use eagerio_core::{
    DataSink, Error, Gather, GatherFuture, GatherRows, GatherStats, GatherStream, Result, RowLayout, RowTable,
    SinkOptions, SinkStats, Source, SourceTotals, Target, WriteFuture,
};
pub use open::{open, open_rows, OpenOptions};

/// The tokio backend: gathers and writes on tokio's blocking pool.
#[cfg(feature = "tokio")]
pub use eagerio_tokio as tokio;

/// The glommio backend: thread-per-core gathers and sinks over `DmaFile`, one executor each.
#[cfg(feature = "glommio")]
pub use eagerio_glommio as glommio;

/// The io_uring backend: lanes, each owning a ring, registered staging and a file table.
#[cfg(feature = "uring")]
pub use eagerio_uring as uring;

/// Remote gathers and sinks: range GETs and multipart uploads on any `object_store` store.
#[cfg(feature = "object-store")]
pub use eagerio_object_store as object_store;

/// The README's Rust snippets, compiled as doctests so that they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
