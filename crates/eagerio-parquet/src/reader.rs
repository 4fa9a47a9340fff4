//! [`EagerReader`]: parquet's byte ranges as one eager gather.

use std::{
    ops::Range,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};

use bytes::Bytes;
use eagerio_core::{backend::ReadEngine, Source};
use futures::{future::BoxFuture, FutureExt};
use parquet::{
    arrow::{arrow_reader::ArrowReaderOptions, async_reader::AsyncFileReader},
    errors::Result,
    file::metadata::{ParquetMetaData, ParquetMetaDataReader},
};

use crate::to_parquet;

/// Bytes read from the end of the file for the footer by default: enough for the metadata of
/// a few hundred column chunks in one gather.
pub const DEFAULT_FOOTER_PREFETCH: usize = 512 * 1024;

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
///
/// A reader that fetches whole row groups and drops their bytes once decoded gets their buffers
/// recycled with a source made [`with_output_pool`](Source::with_output_pool): large outputs
/// then reuse the memory of dropped ones instead of fresh pages the kernel must zero.
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
    /// I/O error naming the offset. All as [`ParquetError::External`](parquet::errors::ParquetError::External).
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
