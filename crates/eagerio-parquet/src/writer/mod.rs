//! [`EagerArrowWriter`]: Parquet encoded on every core, written as it is encoded.
//!
//! # How a file is made
//! - **The caller's thread** checks each batch, cuts it at row-group boundaries (exactly where
//!   [`ArrowWriter`] cuts) and queues one task per top-level column: one slice per batch and one
//!   queue push per column, no encoding.
//! - **Encoder threads** ([`EagerWriterOptions::threads`], default: the available cores) take a
//!   column's queued batches and encode them with parquet's own `ArrowColumnWriter`. A column's
//!   batches are encoded in order on one thread at a time; different columns, and the next row
//!   group's columns, run on any thread.
//! - **One splicer thread** copies each row group's column chunks into the file in column order,
//!   each as soon as it and every chunk before it are done, and writes the footer after the last
//!   row group. Bytes leave in blocks of [`EagerWriterOptions::block_bytes`]; each block is one
//!   sink append, started at once.
//!
//! With the same [`WriterProperties`], the file is byte for byte the one [`ArrowWriter`] writes:
//! the same encoders, the same chunk order, the same footer.
//!
//! # Memory
//! At most [`EagerWriterOptions::row_groups_in_flight`] row groups (default 2) are between their
//! first row and their last spliced chunk; a batch that would start one more waits. Input not yet
//! encoded is bounded by [`EagerWriterOptions::max_queued_bytes`] (a batch waits while the queue
//! is over it; a single larger batch is still taken when the queue is empty). So the writer holds
//! at most
//!
//! `row_groups_in_flight × (encoded size of a row group) + max_queued_bytes + one batch + block_bytes`
//!
//! plus the sink's in-flight bound ([`eagerio_core::SinkOptions::max_in_flight_bytes`]; the
//! splicer waits for [`DataSink::ready`] after each block). [`WriterStats`] reports the peaks.
//! With the defaults and 64 MiB row groups: 2 × 64 + 64 + one batch + 4 MiB, plus the sink's
//! 64 MiB. A writer made with [`try_new_local`](EagerArrowWriter::try_new_local) also holds up to
//! `max_queued_bytes` of blocks waiting for the caller's thread.
//!
//! # Blocking, async, and sinks that are not `Send`
//! - [`write`](EagerArrowWriter::write) and [`close`](EagerArrowWriter::close) block the calling
//!   thread, as [`ArrowWriter`]'s do (only while the bounds above are full, and in `close` until
//!   the file is durable). Inside a tokio runtime they block that worker thread: use the async
//!   methods there, or `spawn_blocking`.
//! - [`write_async`](EagerArrowWriter::write_async) and
//!   [`close_async`](EagerArrowWriter::close_async) wait without blocking; a poll does the
//!   caller's part above and never encodes.
//! - A sink that is not `Send` (glommio's) is written through
//!   [`try_new_local`](EagerArrowWriter::try_new_local): the splicer hands its blocks back and the
//!   writer's async calls append them on the caller's thread while the sink has room under its
//!   in-flight bound, so blocks written while the caller is elsewhere wait for its next call (at
//!   most `max_queued_bytes` of them: past that the splicer waits).
//!
//! # Failures
//! The first failure poisons the writer: an encoder's error or panic, the splicer's, a failed
//! sink write (seen when its append completes), a failed `fdatasync`. Every later call returns it
//! ([`WriterFailed`], with the cause as its source). `write` and `close` wait for the sink's
//! writes to finish before they return a failure, and `close` never retries a failed `fdatasync`
//! into an `Ok`.
//!
//! # Dropping
//! Dropping the writer before `close` stops the encoders and the splicer; the footer is never
//! written, so no Parquet reader takes the file for complete. Writes already started finish into
//! their own buffers (the sink keeps them). With [`commit_to`](EagerArrowWriter::commit_to), the
//! temporary file is removed and the target is untouched.
//!
//! # Durable means durable
//! `close` ends with the sink's [`close`](DataSink::close) (`fdatasync`). A local sink that
//! created its file also `fsync`s the directory then, so the file's name survives a crash; with
//! [`commit_to`](EagerArrowWriter::commit_to) the rename is made durable the same way.

mod board;
mod commit;
mod encode;
mod splice;

use std::{
    future::Future,
    sync::Arc,
    task::{Context, Poll},
};

use arrow_array::{Array, RecordBatch};
use arrow_schema::SchemaRef;
use eagerio_core::{DataSink, ReadyFuture, WriteFuture};
use parquet::{
    arrow::{arrow_writer::ArrowRowGroupWriterFactory, ArrowWriter},
    errors::{ParquetError, Result},
    file::{metadata::ParquetMetaData, properties::WriterProperties},
};

pub use board::Failed as WriterFailed;
use board::{Board, Field, Group, Input, Slot, State, Task};
pub use commit::AtomicFile;
use splice::{BlockWriter, Outlet};

/// Options of an [`EagerArrowWriter`]: `EagerWriterOptions::default().threads(4)`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EagerWriterOptions {
    /// Encoder threads. Default: `std::thread::available_parallelism()`.
    pub threads: usize,
    /// Row groups between their first row and their last spliced chunk. Default 2: one encoding
    /// while the previous one is written.
    pub row_groups_in_flight: usize,
    /// Input bytes queued for the encoders before a `write` waits. Default 64 MiB.
    pub max_queued_bytes: usize,
    /// Bytes per sink append: a multiple of 4096 (so that the tokio and io_uring sinks write
    /// the blocks with `O_DIRECT`), at most 1 GiB. Default 4 MiB.
    pub block_bytes: usize,
}

impl Default for EagerWriterOptions {
    fn default() -> Self {
        EagerWriterOptions {
            threads: std::thread::available_parallelism().map_or(2, usize::from),
            row_groups_in_flight: 2,
            max_queued_bytes: 64 << 20,
            block_bytes: 4 << 20,
        }
    }
}

eagerio_core::options_setters!(EagerWriterOptions {
    threads: usize,
    row_groups_in_flight: usize,
    max_queued_bytes: usize,
    block_bytes: usize,
});

/// What an [`EagerArrowWriter`] has done, and the peaks its memory bounds held it to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Row groups wholly written to the sink (started appends).
    pub row_groups: u64,
    /// Rows in those row groups.
    pub rows: u64,
    /// Sink appends started.
    pub blocks: u64,
    /// Bytes in those appends.
    pub bytes_written: u64,
    /// The most input bytes ever queued for the encoders.
    pub peak_queued_bytes: usize,
    /// The most bytes ever buffered by the encoders (encoded pages, dictionaries, chunks not yet
    /// spliced), as parquet's `ArrowColumnWriter::memory_size` counts them.
    pub peak_buffered_bytes: usize,
    /// The most row groups ever in flight at once.
    pub peak_row_groups: usize,
}

/// A Parquet writer that encodes on a pool of threads and writes each column chunk through an
/// eager [`DataSink`] as soon as it is encoded. See the [module docs](self).
///
/// The sink's next append offset must be 0 (a fresh sink): Parquet records absolute offsets.
pub struct EagerArrowWriter<S> {
    sink: Arc<S>,
    board: Arc<Board>,
    schema: SchemaRef,
    factory: ArrowRowGroupWriterFactory,
    /// Leaf columns (encoders) per top-level field.
    leaves: Vec<usize>,
    max_rows: Option<usize>,
    opts: EagerWriterOptions,
    /// Blocks come back to this thread ([`Outlet::Caller`]).
    local: bool,
    local_writes: Vec<WriteFuture>,
    /// Local mode: the wait for room in the sink before the next handed-back block.
    local_ready: Option<ReadyFuture>,
    commit: Option<AtomicFile>,
    closed: bool,
}

impl<S> std::fmt::Debug for EagerArrowWriter<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EagerArrowWriter").field("opts", &self.opts).field("stats", &self.board.lock().stats).finish()
    }
}

fn general(msg: impl Into<String>) -> ParquetError {
    ParquetError::General(msg.into())
}

impl<S: DataSink + Send + Sync + 'static> EagerArrowWriter<S> {
    /// A writer of `schema` to `sink` with parquet's `props` (default if `None`) and default
    /// [`EagerWriterOptions`]. Starts the encoder and splicer threads; writes nothing yet.
    ///
    /// # Errors
    /// A schema parquet cannot represent; properties this writer does not support (a
    /// `max_row_group_bytes` bound or content-defined chunking: both decide row groups from
    /// encoded sizes, which only a single-threaded writer knows at each batch); invalid options;
    /// a thread that could not be started. All before any I/O.
    pub fn try_new(sink: S, schema: SchemaRef, props: Option<WriterProperties>) -> Result<Self> {
        Self::try_new_with_options(sink, schema, props, EagerWriterOptions::default())
    }

    /// [`try_new`](Self::try_new) with options.
    ///
    /// # Errors
    /// As [`try_new`](Self::try_new).
    pub fn try_new_with_options(
        sink: S,
        schema: SchemaRef,
        props: Option<WriterProperties>,
        opts: EagerWriterOptions,
    ) -> Result<Self> {
        let sink = Arc::new(sink);
        let outlet = Outlet::Sink(sink.clone());
        Self::start(sink, outlet, schema, props, opts)
    }

    /// Queues `batch` for encoding, blocking while the memory bounds are full (see the module
    /// docs). Rows go to row groups exactly as [`ArrowWriter::write`] puts them.
    ///
    /// # Errors
    /// As [`write_async`](Self::write_async).
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        futures::executor::block_on(self.write_async(batch))
    }

    /// Finishes the file and makes it durable, blocking; returns its metadata.
    ///
    /// # Errors
    /// As [`close_async`](Self::close_async).
    pub fn close(self) -> Result<ParquetMetaData> {
        futures::executor::block_on(self.close_async())
    }
}

impl<S: DataSink + 'static> EagerArrowWriter<S> {
    /// A writer whose blocks are appended on the caller's thread, in its async calls: for a
    /// sink that is not `Send`, such as glommio's (see the module docs).
    ///
    /// # Errors
    /// As [`try_new`](Self::try_new).
    pub fn try_new_local(
        sink: S,
        schema: SchemaRef,
        props: Option<WriterProperties>,
        opts: EagerWriterOptions,
    ) -> Result<Self> {
        let outlet = Outlet::Caller { max_queued: opts.max_queued_bytes.max(opts.block_bytes) };
        let mut w = Self::start(Arc::new(sink), outlet, schema, props, opts)?;
        w.local = true;
        Ok(w)
    }

    fn start(
        sink: Arc<S>,
        outlet: Outlet,
        schema: SchemaRef,
        props: Option<WriterProperties>,
        opts: EagerWriterOptions,
    ) -> Result<Self> {
        for (name, value) in [("threads", opts.threads), ("row_groups_in_flight", opts.row_groups_in_flight)] {
            if value == 0 {
                return Err(general(format!("EagerWriterOptions::{name} must be at least 1")));
            }
        }
        if opts.block_bytes == 0 || !opts.block_bytes.is_multiple_of(4096) || opts.block_bytes > 1 << 30 {
            return Err(general(format!(
                "EagerWriterOptions::block_bytes is {}: it must be a multiple of 4096 (so blocks can go \
                 through O_DIRECT) and at most 1 GiB",
                opts.block_bytes
            )));
        }
        let props = props.unwrap_or_default();
        if props.max_row_group_bytes().is_some() {
            return Err(general(
                "EagerArrowWriter does not support max_row_group_bytes: it cuts row groups by encoded size, \
                 known only after encoding; bound row groups with max_row_group_row_count",
            ));
        }
        if props.content_defined_chunking().is_some() {
            return Err(general(
                "EagerArrowWriter does not support content-defined chunking: its chunkers span row groups",
            ));
        }
        let max_rows = props.max_row_group_row_count();
        let board = Board::new();
        let blocks = BlockWriter::new(board.clone(), outlet, opts.block_bytes);
        // ArrowWriter builds the file writer and the encoder factory exactly as it would for
        // itself (schema conversion, embedded Arrow schema): the bytes are then the same.
        let (file, factory) = ArrowWriter::try_new(blocks, schema.clone(), Some(props))?.into_serialized_writer()?;
        let descr = file.schema_descr();
        let mut leaves = vec![0; schema.fields().len()];
        for leaf in 0..descr.num_columns() {
            leaves[descr.get_column_root_idx(leaf)] += 1;
        }
        let w = EagerArrowWriter {
            sink,
            board: board.clone(),
            schema: schema.clone(),
            factory,
            leaves,
            max_rows,
            opts,
            local: false,
            local_writes: Vec::new(),
            local_ready: None,
            commit: None,
            closed: false,
        };
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name)
                .spawn(f)
                .map_err(|e| general(format!("starting a parquet writer thread: {e}")))
        };
        // The threads are not joined: each returns by itself once the board says stop (the
        // footer written, a failure, or the writer dropped), the splicer perhaps after the sink's
        // in-flight writes end. Nothing waits for them on the caller's thread.
        for i in 0..w.opts.threads {
            let (b, s) = (board.clone(), schema.clone());
            spawn(format!("eagerio-encode-{i}"), Box::new(move || encode::run(b, s)))?;
        }
        let b = board.clone();
        spawn("eagerio-splice".into(), Box::new(move || splice::run(b, file)))?;
        Ok(w)
    }

    /// Renames the file into place when `close` succeeds, and removes it otherwise (see
    /// [`AtomicFile`]); the sink must be writing `target.temp_path()`.
    pub fn commit_to(mut self, target: AtomicFile) -> Self {
        self.commit = Some(target);
        self
    }

    /// The sink (for its [`stats`](DataSink::stats)).
    pub fn sink(&self) -> &S {
        &self.sink
    }

    /// What the writer has done so far.
    pub fn stats(&self) -> WriterStats {
        self.board.lock().stats
    }

    /// Queues `batch` for encoding: cut at row-group boundaries as [`ArrowWriter::write`] cuts,
    /// one task per column. Waits (without blocking) while the memory bounds are full; a poll
    /// never encodes.
    ///
    /// # Errors
    /// A batch whose columns do not match the schema (before anything is queued); the writer's
    /// first failure ([`WriterFailed`]), if any, once the sink's writes have finished (as
    /// `close` reports it); a write after `close`.
    ///
    /// # Cancel safety
    /// Dropping the future between row groups loses nothing already queued; the rows of the
    /// batch not yet queued are not written. Drop the writer after cancelling: a file whose
    /// batches were cut short is not the file asked for.
    pub async fn write_async(&mut self, batch: &RecordBatch) -> Result<()> {
        self.check_batch(batch)?;
        let queued = self.queue(batch).await;
        if queued.is_err() {
            self.drain().await;
        }
        queued
    }

    /// [`write_async`](Self::write_async) after its check: queues the batch's row groups.
    async fn queue(&mut self, batch: &RecordBatch) -> Result<()> {
        self.wait(|st| Some(st.failure.as_ref().map_or(Ok(()), |f| Err(f.to_parquet())))).await?;
        let mut remaining = batch.clone();
        while remaining.num_rows() > 0 {
            let (in_flight, queue) = (self.opts.row_groups_in_flight, self.opts.max_queued_bytes);
            let open = self
                .wait(move |st| {
                    if let Some(f) = &st.failure {
                        return Some(Err(f.to_parquet()));
                    }
                    let open = st.groups.back().is_some_and(|g| !g.sealed);
                    let room = open || st.groups.len() < in_flight;
                    (room && (st.queued_bytes == 0 || st.queued_bytes < queue)).then_some(Ok(open))
                })
                .await?;
            let new_group = if open { None } else { Some(self.new_group()?) };
            let mut st = self.board.lock();
            if let Some(g) = new_group {
                st.next_group += 1;
                st.groups.push_back(g);
                st.stats.peak_row_groups = st.stats.peak_row_groups.max(st.groups.len());
            }
            let group = st.groups.back_mut().expect("an open row group");
            let room = self.max_rows.map_or(usize::MAX, |max| max - group.rows);
            let n = room.min(remaining.num_rows());
            let now = remaining.slice(0, n);
            remaining = remaining.slice(n, remaining.num_rows() - n);
            let (index, mut queued) = (group.index, 0);
            for (f, array) in now.columns().iter().enumerate() {
                let bytes = array.to_data().get_slice_memory_size().unwrap_or_else(|_| array.get_array_memory_size());
                queued += bytes;
                group.fields[f].queue.push_back(Task::Encode { array: array.clone(), bytes });
            }
            group.rows += n;
            if self.max_rows.is_some_and(|max| group.rows >= max) {
                seal(group);
            }
            mark_ready(&mut st, index);
            st.note_queued(queued as isize);
            self.board.notify(&mut st);
        }
        Ok(())
    }

    /// Finishes the file: seals the last row group, waits for the footer, closes the sink
    /// (`fdatasync`; a created file's directory too) and, with
    /// [`commit_to`](Self::commit_to), renames the file into place and makes that durable.
    /// Returns the file's metadata.
    ///
    /// # Errors
    /// The writer's first failure ([`WriterFailed`]); the sink's close: every failed write
    /// ([`eagerio_core::Error::WriteFailed`]) or the `fdatasync`'s error; the rename or the
    /// directory's `fsync`. On any failure the sink's writes have finished when this returns,
    /// and an [`AtomicFile`]'s temporary file is removed.
    pub async fn close_async(mut self) -> Result<ParquetMetaData> {
        {
            let mut st = self.board.lock();
            if let Some(g) = st.groups.back_mut().filter(|g| !g.sealed) {
                let index = g.index;
                seal(g);
                mark_ready(&mut st, index);
            }
            st.input = Input::Closed;
            self.board.notify(&mut st);
        }
        let footer = self
            .wait(|st| match &st.failure {
                Some(f) => Some(Err(f.to_parquet())),
                None if st.outbox.is_empty() => st.finished.clone().map(Ok),
                None => None,
            })
            .await;
        self.closed = true;
        let meta = match footer {
            Ok(meta) => meta,
            Err(e) => {
                self.drain().await;
                return Err(e);
            }
        };
        self.sink.close().await.map_err(crate::to_parquet)?;
        if let Some(target) = self.commit.take() {
            let (tx, rx) = futures::channel::oneshot::channel();
            std::thread::Builder::new()
                .name("eagerio-commit".into())
                .spawn(move || drop(tx.send(target.commit())))
                .map_err(|e| general(format!("starting the commit thread: {e}")))?;
            rx.await.map_err(|_| general("the commit thread panicked"))?.map_err(crate::to_parquet)?;
        }
        Ok(meta)
    }

    /// Waits for the sink's writes to finish, before a failure is reported: a caller told the
    /// writer failed finds nothing still writing the file. The writes' own errors are the
    /// failure's, or later ones; the first is what the caller gets.
    async fn drain(&self) {
        let _ = self.sink.flush().await;
    }

    fn check_batch(&self, batch: &RecordBatch) -> Result<()> {
        if self.closed {
            return Err(general("write after close"));
        }
        let fields = self.schema.fields();
        if batch.num_columns() != fields.len() {
            return Err(general(format!(
                "the batch has {} columns, the writer's schema {}",
                batch.num_columns(),
                fields.len()
            )));
        }
        for (i, (field, array)) in fields.iter().zip(batch.columns()).enumerate() {
            if field.data_type() != array.data_type() {
                return Err(general(format!(
                    "column {i} ({:?}) of the batch is {}, the writer's schema says {}",
                    field.name(),
                    array.data_type(),
                    field.data_type()
                )));
            }
        }
        Ok(())
    }

    /// A row group's encoders, made on the caller's thread (no I/O, no encoding).
    fn new_group(&self) -> Result<Group> {
        let index = self.board.lock().next_group;
        let mut writers = self.factory.create_column_writers(index)?.into_iter();
        let fields = self
            .leaves
            .iter()
            .map(|&n| Field {
                slot: Slot::Idle(writers.by_ref().take(n).collect()),
                queue: Default::default(),
                buffered: 0,
            })
            .collect();
        Ok(Group { index, rows: 0, sealed: false, fields })
    }

    /// Waits until `until` returns a value, appending any blocks handed back to this thread.
    fn wait<'a, T: 'a>(
        &'a mut self,
        mut until: impl FnMut(&mut State) -> Option<T> + 'a,
    ) -> impl Future<Output = T> + 'a {
        futures::future::poll_fn(move |cx| self.poll_until(cx, &mut until))
    }

    fn poll_until<T>(&mut self, cx: &mut Context<'_>, until: &mut dyn FnMut(&mut State) -> Option<T>) -> Poll<T> {
        let board = self.board.clone();
        loop {
            if self.local {
                self.append_handed_back(cx);
            }
            let mut st = board.lock();
            if self.local {
                self.reap_local(&mut st);
            }
            if let Some(t) = until(&mut st) {
                return Poll::Ready(t);
            }
            // A block handed back after `append_handed_back` found the outbox empty was announced
            // while no waker was parked (the one before was taken by the wake that began this
            // poll): append it now rather than wait for a notify that already happened. Blocks
            // waiting for the sink's room are not this case: the sink wakes the caller.
            if self.local && self.local_ready.is_none() && !st.outbox.is_empty() {
                continue;
            }
            Board::park_caller(&mut st, cx.waker());
            return Poll::Pending;
        }
    }

    /// Local mode: appends the blocks the splicer handed back, one at a time while the sink has
    /// room under its in-flight bound ([`DataSink::ready`]); the rest wait in the outbox, where
    /// they hold the splicer back.
    fn append_handed_back(&mut self, cx: &mut Context<'_>) {
        loop {
            let ready = self.local_ready.get_or_insert_with(|| self.sink.ready());
            if std::pin::Pin::new(ready).poll(cx).is_pending() {
                return;
            }
            self.local_ready = None;
            let mut st = self.board.lock();
            let Some(block) = st.outbox.pop_front() else { return };
            st.outbox_bytes -= block.len();
            self.board.notify(&mut st);
            drop(st);
            self.local_writes.push(self.sink.append(block));
        }
    }

    /// Drops this thread's appends that are done, failing the writer on the first error.
    fn reap_local(&mut self, st: &mut State) {
        if let Some(e) = board::reap(&mut self.local_writes) {
            st.fail(crate::to_parquet(e));
            self.board.notify(st);
        }
    }
}

/// Every row is in: each field's encoders close after their queued batches.
fn seal(group: &mut Group) {
    group.sealed = true;
    for field in &mut group.fields {
        field.queue.push_back(Task::Close);
    }
}

/// Offers the row group's idle fields with queued work to the encoders.
fn mark_ready(st: &mut State, index: usize) {
    let group = st.group_mut(index).expect("the row group is on the board");
    let ready: Vec<usize> = group
        .fields
        .iter()
        .enumerate()
        .filter(|(_, f)| matches!(f.slot, Slot::Idle(_)) && !f.queue.is_empty())
        .map(|(i, _)| i)
        .collect();
    st.ready.extend(ready.into_iter().map(|f| (index, f)));
}

impl<S> Drop for EagerArrowWriter<S> {
    fn drop(&mut self) {
        if !self.closed {
            let mut st = self.board.lock();
            st.input = Input::Abandoned;
            self.board.notify(&mut st);
        }
    }
}

#[cfg(test)]
mod tests {
    use arrow_schema::{DataType, Field, Schema};
    use bytes::Bytes;
    use eagerio_tokio::{TokioWriter, WriterOptions};

    use super::*;

    /// The splicer hands a block back, and announces it, between the caller's look at the
    /// outbox and its lock of the board, while no waker of the caller's is parked (the last one
    /// was taken by the wake that began this poll): the caller must append it in this poll,
    /// since no later notify is coming (the last block of a file: the threads have stopped).
    #[test]
    fn writer_local_block_handed_back_between_the_look_and_the_lock_is_appended() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let _guard = rt.enter();
        let dir = tempfile::tempdir().unwrap();
        let sink = TokioWriter::create_blocking(dir.path().join("race.parquet"), WriterOptions::default()).unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let mut w = EagerArrowWriter::try_new_local(sink, schema, None, EagerWriterOptions::default()).unwrap();
        let (waker, wakes) = futures_test::task::new_count_waker();
        let mut cx = Context::from_waker(&waker);
        let mut handed_back = false;
        let polled = w.poll_until(&mut cx, &mut |st: &mut State| {
            if !std::mem::replace(&mut handed_back, true) {
                // What the splicer does then; its notify finds no waker to wake.
                st.outbox.push_back(Bytes::from(vec![7u8; 4096]));
                st.outbox_bytes += 4096;
                return None;
            }
            st.outbox.is_empty().then_some(())
        });
        assert!(polled.is_ready(), "the block was left in the outbox, and the caller parked ({} wakes)", wakes.get());
        assert!(w.board.lock().outbox.is_empty(), "the block was appended");
    }
}
