//! The object-safe faces every backend's sources show users: [`Gather`] for byte ranges and
//! [`GatherRows`] for rows, implemented here for every [`Source`] and [`RowTable`]. Code that
//! serves rows holds an `Arc<dyn GatherRows + Send + Sync>` and never names a backend; an
//! implementation of its own (a cache, a router over shards) starts its I/O in the call, as the
//! sources do. This file only forwards to the sources.

use std::ops::Range;

use bytes::Bytes;

use crate::error::Result;
use crate::stats::{SourceLatencies, SourceTotals};

use super::engine::{FileInfo, ReadEngine};
use super::future::GatherFuture;
use super::source::{RowTable, Source};
#[allow(unused_imports)] // doc links
use crate::Error;

/// Byte ranges of one file or object, gathered eagerly: the face every backend's sources show
/// users. Object-safe: choose a backend at run time and hold an `Arc<dyn Gather + Send + Sync>`.
///
/// Implemented by every [`Source`] and [`RowTable`]. An implementation of your own (a cache, a
/// router over shards) starts its I/O in [`gather_ranges`](Self::gather_ranges), before it
/// returns, and answers with [`GatherFuture::ready`] or [`GatherFuture::from_future`].
pub trait Gather {
    /// Starts reading `ranges`; the future yields one `Bytes` per range, in request order.
    ///
    /// # Errors
    /// Before any I/O: [`Error::InvalidRange`] for an empty or inverted range or one past the
    /// end.
    fn gather_ranges(&self, ranges: &[Range<u64>]) -> Result<GatherFuture<Vec<Bytes>>>;

    /// The file or object: its name in errors and its length.
    fn info(&self) -> &FileInfo;

    /// Totals over every gather so far.
    fn totals(&self) -> SourceTotals;

    /// Latency histograms so far (empty unless the implementation keeps them).
    fn latencies(&self) -> SourceLatencies {
        SourceLatencies::default()
    }
}

/// A table of fixed-size rows, gathered eagerly by row id: the row face of [`Gather`].
/// Object-safe: `Arc<dyn GatherRows + Send + Sync>`.
///
/// Implemented by every [`RowTable`]. An implementation of your own starts its I/O in
/// [`gather`](Self::gather), before it returns.
pub trait GatherRows {
    /// Starts reading `rows` (any order, duplicates allowed); the future yields them back to
    /// back in request order.
    ///
    /// # Errors
    /// Before any I/O: [`Error::RowOutOfRange`] naming the first row past the end.
    fn gather(&self, rows: &[u64]) -> Result<GatherFuture<Bytes>>;

    /// Bytes per row.
    fn row_size(&self) -> u64;

    /// Row count.
    fn rows(&self) -> u64;

    /// Totals over every gather so far.
    fn totals(&self) -> SourceTotals;

    /// Latency histograms so far (empty unless the implementation keeps them).
    fn latencies(&self) -> SourceLatencies {
        SourceLatencies::default()
    }
}

impl<E: ReadEngine> Gather for Source<E> {
    fn gather_ranges(&self, ranges: &[Range<u64>]) -> Result<GatherFuture<Vec<Bytes>>> {
        Source::gather_ranges(self, ranges)
    }

    fn info(&self) -> &FileInfo {
        Source::info(self)
    }

    fn totals(&self) -> SourceTotals {
        self.stats()
    }

    fn latencies(&self) -> SourceLatencies {
        Self::latencies(self)
    }
}

impl<E: ReadEngine> Gather for RowTable<E> {
    fn gather_ranges(&self, ranges: &[Range<u64>]) -> Result<GatherFuture<Vec<Bytes>>> {
        self.source().gather_ranges(ranges)
    }

    fn info(&self) -> &FileInfo {
        self.source().info()
    }

    fn totals(&self) -> SourceTotals {
        self.stats()
    }

    fn latencies(&self) -> SourceLatencies {
        Self::latencies(self)
    }
}

impl<E: ReadEngine> GatherRows for RowTable<E> {
    fn gather(&self, rows: &[u64]) -> Result<GatherFuture<Bytes>> {
        RowTable::gather(self, rows)
    }

    fn row_size(&self) -> u64 {
        RowTable::row_size(self)
    }

    fn rows(&self) -> u64 {
        RowTable::rows(self)
    }

    fn totals(&self) -> SourceTotals {
        self.stats()
    }

    fn latencies(&self) -> SourceLatencies {
        Self::latencies(self)
    }
}
