//! The board: the one lock every thread of a writer meets at. It holds the row groups being
//! encoded, each column's work queue and encoder, the blocks waiting for a `!Send` sink, and the
//! first failure. Every change is announced on one condition variable (the threads) and one waker
//! (the async caller).

use std::{
    collections::{BTreeSet, VecDeque},
    fmt,
    sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError},
    task::Waker,
};

use arrow_array::ArrayRef;
use bytes::Bytes;
use eagerio_core::WriteFuture;
use parquet::{
    arrow::arrow_writer::{ArrowColumnChunk, ArrowColumnWriter},
    errors::ParquetError,
    file::metadata::ParquetMetaData,
};

use super::WriterStats;

/// The first failure of a writer, shared: every later call reports it again.
#[derive(Debug, Clone)]
pub struct Failed(pub(crate) Arc<ParquetError>);

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the parquet writer failed: {}", self.0)
    }
}

impl std::error::Error for Failed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

impl Failed {
    /// As a parquet error, this failure kept as its source.
    pub(crate) fn to_parquet(&self) -> ParquetError {
        ParquetError::External(Box::new(self.clone()))
    }
}

/// What one top-level field's encoders are doing.
pub(crate) enum Slot {
    /// Waiting for work: its leaf columns' encoders.
    Idle(Vec<ArrowColumnWriter>),
    /// A worker holds the encoders.
    Encoding,
    /// Encoded and closed: the chunks wait for the splicer.
    Closed(Vec<ArrowColumnChunk>),
    /// In the file (or being copied there).
    Spliced,
}

/// Work for one field's encoders, in order.
pub(crate) enum Task {
    /// Encode this column of a batch; `bytes` is its share of the queued-input bound.
    Encode { array: ArrayRef, bytes: usize },
    /// The row group is complete: close the encoders into chunks.
    Close,
}

pub(crate) struct Field {
    pub slot: Slot,
    pub queue: VecDeque<Task>,
    /// The encoders' buffered bytes after their last task (`ArrowColumnWriter::memory_size`).
    pub buffered: usize,
}

/// A row group from its first row until the splicer has copied its last chunk.
pub(crate) struct Group {
    pub index: usize,
    pub rows: usize,
    /// Every row is in; each field's queue ends with [`Task::Close`].
    pub sealed: bool,
    pub fields: Vec<Field>,
}

/// Whether the caller still writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Input {
    Open,
    /// `close` sealed the last row group: the splicer writes the footer after it.
    Closed,
    /// The writer was dropped before `close`: every thread stops, no footer is written.
    Abandoned,
}

pub(crate) struct State {
    /// Row groups not yet wholly spliced, oldest first.
    pub groups: VecDeque<Group>,
    /// Index the next new row group gets.
    pub next_group: usize,
    /// Fields with queued work and idle encoders, as (row group, field): oldest first, so the
    /// chunk the splicer needs next is encoded first.
    pub ready: BTreeSet<(usize, usize)>,
    pub queued_bytes: usize,
    pub buffered_bytes: usize,
    pub input: Input,
    pub failure: Option<Failed>,
    /// The splicer wrote the footer: the file's metadata.
    pub finished: Option<ParquetMetaData>,
    /// Blocks for a sink the caller's thread must append to (a `!Send` sink), in file order.
    pub outbox: VecDeque<Bytes>,
    pub outbox_bytes: usize,
    /// Appends the splicer started on a `Send` sink, until they are seen done.
    pub writes: Vec<WriteFuture>,
    pub stats: WriterStats,
    caller: Option<Waker>,
}

impl State {
    /// Every thread should stop: a failure, an abandoned writer, or the footer written.
    pub fn stopping(&self) -> bool {
        self.failure.is_some() || self.input == Input::Abandoned || self.finished.is_some()
    }

    pub fn group_mut(&mut self, index: usize) -> Option<&mut Group> {
        let first = self.groups.front()?.index;
        self.groups.get_mut(index.checked_sub(first)?)
    }

    /// Records the first failure; later ones are dropped (the first is the cause).
    pub fn fail(&mut self, e: ParquetError) {
        if self.failure.is_none() {
            self.failure = Some(Failed(Arc::new(e)));
        }
    }

    /// Drops the splicer's appends that are done, failing the writer on the first error.
    pub fn reap_writes(&mut self) {
        if let Some(e) = reap(&mut self.writes) {
            self.fail(crate::to_parquet(e));
        }
    }

    pub fn note_queued(&mut self, delta: isize) {
        self.queued_bytes = self.queued_bytes.saturating_add_signed(delta);
        self.stats.peak_queued_bytes = self.stats.peak_queued_bytes.max(self.queued_bytes);
    }

    pub fn note_buffered(&mut self, before: usize, after: usize) {
        self.buffered_bytes = self.buffered_bytes - before + after;
        self.stats.peak_buffered_bytes = self.stats.peak_buffered_bytes.max(self.buffered_bytes);
    }
}

/// Drops the appends in `writes` that are done; returns the first failure among them.
pub(crate) fn reap(writes: &mut Vec<WriteFuture>) -> Option<eagerio_core::Error> {
    let mut first = None;
    writes.retain_mut(|w| match futures::FutureExt::now_or_never(&mut *w) {
        None => true,
        Some(Ok(())) => false,
        Some(Err(e)) => {
            first.get_or_insert(e);
            false
        }
    });
    first
}

pub(crate) struct Board {
    state: Mutex<State>,
    changed: Condvar,
}

impl Board {
    pub fn new() -> Arc<Board> {
        Arc::new(Board {
            state: Mutex::new(State {
                groups: VecDeque::new(),
                next_group: 0,
                ready: BTreeSet::new(),
                queued_bytes: 0,
                buffered_bytes: 0,
                input: Input::Open,
                failure: None,
                finished: None,
                outbox: VecDeque::new(),
                outbox_bytes: 0,
                writes: Vec::new(),
                stats: WriterStats::default(),
                caller: None,
            }),
            changed: Condvar::new(),
        })
    }

    /// The state. A thread that panicked under the lock is caught and becomes the writer's
    /// failure, so the state is still whole: poisoning is ignored.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits on the condition variable (threads only; the async caller registers a waker).
    pub fn wait<'a>(&self, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }

    /// Announces a change to every thread and to the caller.
    pub fn notify(&self, st: &mut State) {
        self.changed.notify_all();
        if let Some(w) = st.caller.take() {
            w.wake();
        }
    }

    /// Registers the caller's waker for the next [`notify`](Self::notify).
    pub fn park_caller(st: &mut State, waker: &Waker) {
        match &mut st.caller {
            Some(w) if w.will_wake(waker) => {}
            w => *w = Some(waker.clone()),
        }
    }
}
