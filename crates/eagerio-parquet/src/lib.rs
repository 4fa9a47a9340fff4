//! Parquet over eagerio: an [`AsyncFileReader`]
//! whose byte ranges are one eager gather, and a writer that encodes on every core while its
//! column chunks are written.
//!
//! # Why
//! - **Reading.** parquet's default `AsyncFileReader::get_byte_ranges` calls `get_bytes` once per
//!   range, one after the other: a row group of 50 column chunks is 50 sequential reads.
//!   [`EagerReader`] hands all of a call's ranges to [`Source::gather_ranges`], which sorts,
//!   coalesces (within the source's gap bound), aligns and submits them *before the call
//!   returns*; the returned future only waits.
//! - **Writing.** Encoding, not the disk, bounds a Parquet writer: parquet's `ArrowWriter` keeps
//!   one core busy while the disk could take the bytes several times faster. [`EagerArrowWriter`]
//!   encodes the columns on a pool of threads and writes each column chunk through an eager
//!   [`DataSink`] as soon as it and the chunks before it are done, so the next row group is
//!   encoded while this one is written. The file is byte for byte `ArrowWriter`'s.
//!
//! # When the I/O starts
//! - [`EagerReader::get_bytes`] / [`EagerReader::get_byte_ranges`]: the gather is submitted
//!   inside the call, before the `BoxFuture` is returned. Dropping that future cancels the reads
//!   not yet issued; reads already in flight finish into their own buffers (see
//!   [`eagerio_core::gather`]).
//! - [`EagerReader::get_metadata`]: the footer is read by one gather of the file's last
//!   [`EagerReader::with_footer_prefetch`] bytes (a second gather only if the footer is larger),
//!   then parsed with [`ParquetMetaDataReader`](parquet::file::metadata::ParquetMetaDataReader).
//! - [`EagerArrowWriter`]: each block of the file (4 MiB by default) is appended to the sink as
//!   soon as the splicer has filled it, on the splicer's thread, before any future is polled.
//!   See [`writer`].
//!
//! # Errors
//! Every eagerio error becomes [`ParquetError::External`] holding the [`eagerio_core::Error`]
//! itself, so its message (operation, file, offset, range) reaches the user and
//! `err.source().downcast_ref::<eagerio_core::Error>()` recovers it. A writer's failure is
//! [`WriterFailed`], with the first cause as its source.
//!
//! # Examples
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use eagerio_parquet::{EagerArrowWriter, EagerReader};
//! use futures::TryStreamExt;
//! use parquet::arrow::ParquetRecordBatchStreamBuilder;
//!
//! # let batch: arrow_array::RecordBatch = todo!();
//! let sink = eagerio_tokio::TokioWriter::create("t.parquet", Default::default()).await?;
//! let mut w = EagerArrowWriter::try_new(sink, batch.schema(), None)?;
//! w.write_async(&batch).await?;
//! w.close_async().await?; // the footer, then the sink's fdatasync (and its directory's fsync)
//!
//! let source = eagerio_tokio::TokioEngine::open("t.parquet", Default::default()).await?;
//! let stream = ParquetRecordBatchStreamBuilder::new(EagerReader::new(source)).await?.build()?;
//! let batches: Vec<_> = stream.try_collect().await?;
//! # Ok(()) }
//! ```

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod reader;
pub mod writer;

use parquet::errors::ParquetError;
#[allow(unused_imports)] // for the docs' links
use {
    eagerio_core::{DataSink, Source},
    parquet::arrow::async_reader::AsyncFileReader,
};

pub use reader::{EagerReader, ReaderStats, DEFAULT_FOOTER_PREFETCH};
pub use writer::{AtomicFile, EagerArrowWriter, EagerWriterOptions, WriterFailed, WriterStats};

/// Wraps an eagerio error for parquet, keeping it as the source.
fn to_parquet(e: eagerio_core::Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}
