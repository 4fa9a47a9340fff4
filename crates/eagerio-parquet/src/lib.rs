//! Parquet over eagerio: an [`AsyncFileReader`] whose byte ranges are one eager gather, and an
//! [`AsyncFileWriter`] over any [`DataSink`].
//!
//! # Why
//! parquet's default [`AsyncFileReader::get_byte_ranges`] calls `get_bytes` once per range, one
//! after the other: a row group of 50 column chunks is 50 sequential reads. [`EagerReader`]
//! hands all of a call's ranges to [`Source::gather_ranges`], which sorts, coalesces (within the
//! source's gap bound), aligns and submits them *before the call returns*; the returned future
//! only waits. On the write side, [`EagerWriter::write`] appends through the sink at call time.
//!
//! # When the I/O starts
//! - [`EagerReader::get_bytes`] / [`EagerReader::get_byte_ranges`]: the gather is submitted
//!   inside the call, before the `BoxFuture` is returned. Dropping that future cancels the reads
//!   not yet issued; reads already in flight finish into their own buffers (see
//!   [`eagerio_core::gather`]).
//! - [`EagerReader::get_metadata`]: the footer is read by one gather of the file's last
//!   [`EagerReader::with_footer_prefetch`] bytes (a second gather only if the footer is larger),
//!   then parsed with [`ParquetMetaDataReader`].
//! - [`EagerWriter::write`]: the chunk is appended (offset reserved, write started) inside the
//!   call. Dropping the returned future does not cancel the write.
//!
//! # Errors
//! Every eagerio error becomes [`ParquetError::External`] holding the [`eagerio_core::Error`]
//! itself, so its message (operation, file, offset, range) reaches the user and
//! `err.source().downcast_ref::<eagerio_core::Error>()` recovers it.
//!
//! # Examples
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use eagerio_parquet::{EagerReader, EagerWriter};
//! use futures::TryStreamExt;
//! use parquet::arrow::{AsyncArrowWriter, ParquetRecordBatchStreamBuilder};
//!
//! # let batch: arrow_array::RecordBatch = todo!();
//! let sink = eagerio_tokio::TokioWriter::create("t.parquet", Default::default()).await?;
//! let mut w = AsyncArrowWriter::try_new(EagerWriter::new(sink), batch.schema(), None)?;
//! w.write(&batch).await?;
//! w.close().await?; // waits for every write, then closes (fdatasync) the sink
//!
//! let source = eagerio_tokio::TokioEngine::open("t.parquet", Default::default()).await?;
//! let stream = ParquetRecordBatchStreamBuilder::new(EagerReader::new(source)).await?.build()?;
//! let batches: Vec<_> = stream.try_collect().await?;
//! # Ok(()) }
//! ```

#![deny(unsafe_code)]
#![warn(missing_docs)]

use std::{
    ops::Range,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};

use bytes::Bytes;
use eagerio_core::{backend::ReadEngine, DataSink, Source, WriteFuture};
use futures::{future::BoxFuture, FutureExt};
use parquet::{
    arrow::{arrow_reader::ArrowReaderOptions, async_reader::AsyncFileReader, async_writer::AsyncFileWriter},
    errors::{ParquetError, Result},
    file::metadata::{ParquetMetaData, ParquetMetaDataReader},
};

/// Bytes read from the end of the file for the footer by default: enough for the metadata of
/// a few hundred column chunks in one gather.
pub const DEFAULT_FOOTER_PREFETCH: usize = 512 * 1024;

/// Wraps an eagerio error for parquet, keeping it as the source.
fn to_parquet(e: eagerio_core::Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}

/// What an [`EagerReader`] asked of its source.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReaderStats {
    /// Calls of `get_bytes` and `get_byte_ranges` (including the footer's), each one gather
    /// (a call whose ranges are all empty makes none).
    pub calls: u64,
    /// Non-empty ranges requested over those calls.
    pub ranges: u64,
    /// Bytes requested.
    pub bytes: u64,
}

#[derive(Debug, Default)]
struct Counters {
    calls: AtomicU64,
    ranges: AtomicU64,
    bytes: AtomicU64,
}

/// A parquet [`AsyncFileReader`] over an eagerio [`Source`]: every `get_byte_ranges` call is
/// one eager, coalesced gather.
///
/// Works with any [`ReadEngine`] that is `Send` (the tokio and io_uring engines are). The file's
/// length is the one the source saw at open.
///
/// Cloning shares the source, its staging and the counters.
#[derive(Debug)]
pub struct EagerReader<E> {
    source: Arc<Source<E>>,
    footer_prefetch: usize,
    counters: Arc<Counters>,
}

impl<E> Clone for EagerReader<E> {
    fn clone(&self) -> Self {
        EagerReader {
            source: self.source.clone(),
            footer_prefetch: self.footer_prefetch,
            counters: self.counters.clone(),
        }
    }
}

impl<E: ReadEngine> EagerReader<E> {
    /// A reader over `source`, with the default footer prefetch.
    pub fn new(source: Source<E>) -> EagerReader<E> {
        EagerReader { source: Arc::new(source), footer_prefetch: DEFAULT_FOOTER_PREFETCH, counters: Arc::default() }
    }

    /// Sets how many bytes at the end of the file [`get_metadata`](AsyncFileReader::get_metadata)
    /// gathers in its first read (at least the 8-byte footer). A footer larger than this costs a
    /// second gather.
    pub fn with_footer_prefetch(mut self, bytes: usize) -> EagerReader<E> {
        self.footer_prefetch = bytes.max(8);
        self
    }

    /// The source: its [`stats`](Source::stats) count the gathers and bytes actually read.
    pub fn source(&self) -> &Source<E> {
        &self.source
    }

    /// What parquet asked for so far.
    pub fn stats(&self) -> ReaderStats {
        ReaderStats {
            calls: self.counters.calls.load(Ordering::Relaxed),
            ranges: self.counters.ranges.load(Ordering::Relaxed),
            bytes: self.counters.bytes.load(Ordering::Relaxed),
        }
    }

    /// Submits one gather of every non-empty range now; the future fills empty ranges with
    /// empty `Bytes` and returns one `Bytes` per range, in order.
    fn gather(&self, ranges: &[Range<u64>]) -> BoxFuture<'static, Result<Vec<Bytes>>> {
        let wanted: Vec<Range<u64>> = ranges.iter().filter(|r| r.start != r.end).cloned().collect();
        if wanted.is_empty() {
            let empty = vec![Bytes::new(); ranges.len()];
            return futures::future::ready(Ok(empty)).boxed();
        }
        self.counters.calls.fetch_add(1, Ordering::Relaxed);
        self.counters.ranges.fetch_add(wanted.len() as u64, Ordering::Relaxed);
        let bytes: u64 = wanted.iter().map(|r| r.end.saturating_sub(r.start)).sum();
        self.counters.bytes.fetch_add(bytes, Ordering::Relaxed);
        // The gather is planned and submitted here, before the future exists.
        let fut = match self.source.gather_ranges(&wanted) {
            Ok(f) => f,
            Err(e) => return futures::future::ready(Err(to_parquet(e))).boxed(),
        };
        let empty_at: Vec<bool> = ranges.iter().map(|r| r.start == r.end).collect();
        async move {
            let got = fut.await.map_err(to_parquet)?;
            if got.len() == empty_at.len() {
                return Ok(got);
            }
            let mut got = got.into_iter();
            Ok(empty_at
                .iter()
                .map(|&empty| if empty { Bytes::new() } else { got.next().expect("one per range") })
                .collect())
        }
        .boxed()
    }
}

impl<E: ReadEngine + Send + Sync + 'static> AsyncFileReader for EagerReader<E> {
    /// One gather of `range`, submitted before this returns.
    ///
    /// # Errors
    /// An inverted range or one past the end of the file, before any I/O; a short read or an
    /// I/O error naming the offset. All as [`ParquetError::External`].
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes>> {
        self.gather(std::slice::from_ref(&range)).map(|r| r.map(|mut v| v.pop().expect("one range"))).boxed()
    }

    /// One gather of every range, submitted before this returns: sorted, coalesced within the
    /// source's gap bound and read concurrently; the result is in request order.
    ///
    /// # Errors
    /// As [`get_bytes`](Self::get_bytes); the first failing range fails the call.
    fn get_byte_ranges(&mut self, ranges: Vec<Range<u64>>) -> BoxFuture<'_, Result<Vec<Bytes>>> {
        self.gather(&ranges)
    }

    /// Gathers the file's last bytes (see [`EagerReader::with_footer_prefetch`]) and parses
    /// the footer with [`ParquetMetaDataReader`], honouring `options` (page index policy,
    /// metadata options).
    ///
    /// # Errors
    /// A file too short or without the `PAR1` magic, a corrupt footer, or an I/O error.
    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, Result<Arc<ParquetMetaData>>> {
        let len = self.source.info().len;
        let prefetch = self.footer_prefetch;
        async move {
            let metadata = ParquetMetaDataReader::new()
                .with_arrow_reader_options(options)
                .with_prefetch_hint(Some(prefetch))
                .load_and_finish(self, len)
                .await?;
            Ok(Arc::new(metadata))
        }
        .boxed()
    }
}

/// How [`EagerWriter`]'s [`complete`](AsyncFileWriter::complete) ends after every write is done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Finish {
    /// [`DataSink::close`]: refuse further writes, then `fdatasync`. The default: the parquet
    /// file is the sink's whole content.
    #[default]
    Close,
    /// [`DataSink::sync`]: `fdatasync`, the sink stays open for other writes.
    Sync,
    /// [`DataSink::flush`]: wait for the writes only (no durability).
    Flush,
}

/// A parquet [`AsyncFileWriter`] over any eagerio [`DataSink`] (for example
/// `Sink<TokioWriter>`): each `write` appends at call time.
///
/// parquet writes a file from offset 0 and records absolute offsets in its footer, so the sink's
/// next append offset should be 0 (a fresh sink) unless the reader knows where the file starts.
///
/// # Write-behind
/// By default the future of [`write`](AsyncFileWriter::write) resolves when that write is done.
/// [`write_behind`](Self::write_behind) makes it resolve as soon as the sink has room under its
/// in-flight bound ([`DataSink::ready`]), so `AsyncArrowWriter` encodes the next row group while
/// the previous one is still being written; failures then surface at the next `write` or at
/// `complete`.
///
/// # Dropping
/// Dropping the writer does not cancel started writes: they run to completion and the sink
/// reports any failure at its next flush, sync or close.
#[derive(Debug)]
pub struct EagerWriter<S> {
    sink: S,
    write_behind: bool,
    finish: Finish,
    pending: Vec<WriteFuture>,
    completed: bool,
}

impl<S: DataSink> EagerWriter<S> {
    /// A writer appending to `sink`, waiting for each write, closing the sink at the end.
    pub fn new(sink: S) -> EagerWriter<S> {
        EagerWriter { sink, write_behind: false, finish: Finish::Close, pending: Vec::new(), completed: false }
    }

    /// Lets `write` return once the sink has room instead of once the write is done (see the
    /// type docs).
    pub fn write_behind(mut self, on: bool) -> EagerWriter<S> {
        self.write_behind = on;
        self
    }

    /// Sets how `complete` ends (default [`Finish::Close`]).
    pub fn finish(mut self, finish: Finish) -> EagerWriter<S> {
        self.finish = finish;
        self
    }

    /// The sink (for its [`stats`](DataSink::stats)).
    pub fn sink(&self) -> &S {
        &self.sink
    }

    /// The sink, back.
    pub fn into_inner(self) -> S {
        self.sink
    }

    /// Drops the write-behind futures that are done, returning the first failure among them.
    fn reap(&mut self) -> Result<()> {
        let mut first = None;
        self.pending.retain_mut(|w| match w.now_or_never() {
            None => true,
            Some(Ok(())) => false,
            Some(Err(e)) => {
                first.get_or_insert(e);
                false
            }
        });
        first.map_or(Ok(()), |e| Err(to_parquet(e)))
    }
}

impl<S: DataSink + Send> AsyncFileWriter for EagerWriter<S> {
    /// Appends `bs` now (offset reserved, write started, before this returns); the future waits
    /// for the write, or with write-behind only for room under the sink's bound.
    ///
    /// # Errors
    /// The write's [`eagerio_core::Error`] (offset and OS error) as [`ParquetError::External`];
    /// with write-behind, the failure of an earlier write; a write after `complete`.
    fn write(&mut self, bs: Bytes) -> BoxFuture<'_, Result<()>> {
        if self.completed {
            return futures::future::ready(Err(ParquetError::General("write after complete".into()))).boxed();
        }
        let fut = self.sink.append(bs);
        if !self.write_behind {
            return fut.map(|r| r.map_err(to_parquet)).boxed();
        }
        self.pending.push(fut);
        let earlier = self.reap();
        let ready = self.sink.ready();
        async move {
            earlier?;
            ready.await;
            Ok(())
        }
        .boxed()
    }

    /// Waits for every write (in order, reporting the first failure), then closes, syncs or
    /// flushes the sink per [`Finish`].
    ///
    /// # Errors
    /// A failed write, or the sink's [`eagerio_core::Error::WriteFailed`] / `fdatasync` error.
    fn complete(&mut self) -> BoxFuture<'_, Result<()>> {
        self.completed = true;
        let pending = std::mem::take(&mut self.pending);
        let end = match self.finish {
            Finish::Close => self.sink.close(),
            Finish::Sync => self.sink.sync(),
            Finish::Flush => self.sink.flush(),
        };
        async move {
            let mut first = None;
            for w in pending {
                if let Err(e) = w.await {
                    first.get_or_insert(e);
                }
            }
            let ended = end.await;
            match first {
                Some(e) => Err(to_parquet(e)),
                None => ended.map_err(to_parquet),
            }
        }
        .boxed()
    }
}
