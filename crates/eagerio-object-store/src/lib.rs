//! eagerio over [`object_store`]: eager, coalesced, parallel range GETs for gathers, and a
//! multipart-upload sink, for S3 (feature `aws`, default), GCS (`gcp`), Azure (`azure`), the
//! local filesystem and memory.
//!
//! # When the I/O starts
//! [`Source::gather_ranges`](eagerio_core::Source::gather_ranges) and
//! [`RowTable::gather`](eagerio_core::RowTable::gather) over an [`ObjectStoreEngine`] plan the
//! request (sorted, deduplicated, holes joined up to the gap the GETs' measured cost calls for,
//! see [`ObjectStoreOptions::tune_gap`], split at [`ObjectStoreOptions::max_read`]) and spawn
//! up to [`ObjectStoreOptions::depth`] tokio tasks *before they return*. Each task issues
//! one range GET at a time and takes the next extent as soon as its GET is back, so the window
//! stays full. The rows come back in request order.
//!
//! # Depth
//! `concurrency` is the GETs in flight for the engine as a whole, however many gathers run on it:
//! every GET waits for a permit of the engine's [`RequestLimit`] (a fair semaphore, so gathers
//! take turns). Pass one [`RequestLimit`] to several engines to cap the GETs to a store across
//! all of its objects.
//!
//! [`ObjectSink::append`](eagerio_core::DataSink::append) cuts the byte stream into parts of
//! [`WriterOptions::part_size`] and spawns each part's `put_part` the moment the part is full:
//! uploads start at call time, never at `await`. See [`ObjectSink`] for what flush, sync and close
//! mean on an object store.
//!
//! # What dropping does
//! A dropped gather, or one past its deadline
//! ([`GatherFuture::with_timeout`](eagerio_core::GatherFuture::with_timeout), resolving then with
//! [`Error::TimedOut`]), issues no further GET; the GETs already in flight finish in their tasks and
//! are discarded. A dropped write future changes nothing: the write goes on and a failure is
//! reported by the next flush or close. A sink dropped before `close` aborts its multipart upload
//! (best effort, on the runtime it was created on): nothing is published.
//!
//! # Errors
//! Every failure is an [`eagerio_core::Error`]. A GET that fails is an [`Error::Io`] naming the
//! row (or range) and offset, whose message carries the HTTP status when the store gave one
//! (`HTTP 503 Service Unavailable: ...`); a GET that comes back short (the object shrank) is an
//! [`Error::ShortRead`]. Bad rows and ranges are refused before any request.
//!
//! # Retries and timeouts
//! They are object_store's own, set on the store when it is built: [`object_store::RetryConfig`]
//! (`max_retries`, default 10; `retry_timeout`, default 3 min; exponential
//! [`object_store::BackoffConfig`]) through e.g. `AmazonS3Builder::with_retry`, and
//! [`object_store::ClientOptions`] (`with_timeout`, default 30 s per request;
//! `with_connect_timeout`, default 5 s; `with_pool_max_idle_per_host`; `with_allow_http`) through
//! `with_client_options`. Server errors (5xx), 429 and timeouts are retried there; the error that
//! reaches a gather is the one left after the retries, so set `max_retries` low for fail-fast
//! services. This crate adds no retry layer of its own.
//!
//! # Examples
//! ```no_run
//! # async fn f() -> eagerio_core::Result<()> {
//! use std::sync::Arc;
//! use eagerio_core::{DataSink, RowLayout};
//! use eagerio_object_store::{ObjectStoreEngine, ObjectStoreOptions, ObjectStoreWriter, WriterOptions};
//! use object_store::{memory::InMemory, path::Path, ObjectStore};
//!
//! let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
//! let sink = ObjectStoreWriter::create(store.clone(), Path::from("t.bin"), WriterOptions::default()).await?;
//! sink.append(vec![7u8; 90 * 1000].into()).await?;
//! sink.close().await?;                                  // the object exists from here on
//!
//! let table = ObjectStoreEngine::open(store, Path::from("t.bin"), ObjectStoreOptions::default())
//!     .await?
//!     .rows(RowLayout { base: 0, row_size: 90, rows: None })?;
//! let rows = table.gather(&[42, 7, 42])?.await?;        // GETs in flight before this await
//! assert_eq!(rows.len(), 270);
//! # Ok(()) }
//! ```
//!
//! [`Error::Io`]: eagerio_core::Error::Io
//! [`Error::ShortRead`]: eagerio_core::Error::ShortRead

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod gather;
mod sink;

pub use error::http_status;
pub use gather::{
    store_for_url, ObjectStoreEngine, ObjectStoreOptions, RequestLimit, DEFAULT_MAX_GAP, DEFAULT_MAX_READ,
    TUNED_GAP_RANGE,
};
pub use sink::{ObjectSink, ObjectStoreWriter, WriterOptions, DEFAULT_PART_SIZE};

use eagerio_core::{Error, Result};

/// The handle of the tokio runtime the caller is on.
fn runtime(what: &str) -> Result<tokio::runtime::Handle> {
    tokio::runtime::Handle::try_current().map_err(|e| Error::Unavailable {
        backend: "eagerio-object-store",
        reason: format!("{what} needs a tokio runtime: {e}"),
        source: None,
    })
}
