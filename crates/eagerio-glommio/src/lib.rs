//! eagerio's glommio backend: thread-per-core gathers and sinks over glommio's `DmaFile`.
//!
//! glommio runs one executor per thread, each with its own io_uring rings, and no work ever
//! migrates between them. This crate keeps to that model: a [`GlommioEngine`] (and its
//! [`Source`](eagerio_core::Source) / [`RowTable`](eagerio_core::RowTable)) and a
//! [`GlommioWriter`] sink are `Rc`-based, `!Send` and `!Sync`, and belong to the executor that
//! opened them. To serve one table from N cores, open it once per executor and route each
//! request to one of them (`examples/glommio_shards.rs` in the workspace root splits a request
//! stream by row over 2 executors).
//!
//! # When the I/O starts
//! A gather is planned by the core planner (sorted, deduplicated, coalesced within `max_gap`,
//! aligned to the device's logical block, split at `max_read`) and, *before the call returns*,
//! the engine creates one `DmaFile::read_at_aligned` future per extent for every free slot (up to
//! [`GlommioOptions::depth`] across the file's gathers) and polls each once. That first poll is
//! what puts the read on the executor's io_uring submission queue; without it a glommio future
//! does nothing at all.
//!
//! **Large gathers leave the executor's thread.** From
//! [`PREPARE_ELSEWHERE`](eagerio_core::prepare::PREPARE_ELSEWHERE) (2,048) requests, the call
//! only checks the requests and hands them to an `eagerio-prepare` thread, which plans them and
//! copies the rows the page cache holds (milliseconds for tens of thousands of rows, which would
//! otherwise stall every task of the executor). The planned job comes back to this executor
//! through a channel; sending it wakes the executor, and a pumped future queues its reads as
//! above. So a 40,000-row call returns in well under a millisecond, and its reads are queued
//! when the executor next runs after the preparing thread is done, still without a poll of the
//! gather future. Until then [`GlommioEngine::is_idle`] is false.
//!
//! **When the SQEs reach the kernel.** glommio hands queued requests to the kernel
//! (`io_uring_enter`) when the executor polls its reactor, and it does that between task runs:
//! as soon as the task that called `gather` returns control to the executor, by awaiting
//! anything that is not ready (the gather's own future, a timer, another I/O, a channel), or at
//! the latest when the task queue's preemption timer fires and the task yields
//! (`glommio::yield_if_needed`). There is no public glommio call that submits from inside a task,
//! and on a thread-per-core executor no other thread may do it, so a caller that computes for
//! 10 ms after `gather` without yielding delays the reads by 10 ms. Everything else is eager: the
//! reads never wait for the gather future to be polled. A detached local task (the *driver*)
//! polls the reads as they complete, copies their rows out, refills the freed slots with the
//! next extents, and settles the job. `tests/eager_start.rs` checks that the reads are queued
//! when `gather` returns and complete while the caller awaits something else, never having
//! polled the gather future. Writes and syncs of a [`GlommioWriter`] are queued the same way.
//!
//! # What dropping a future does, and deadlines
//! A dropped gather, or one past its deadline
//! ([`GatherFuture::with_timeout`](eagerio_core::GatherFuture::with_timeout)), stops issuing
//! extents; a timed-out future resolves at its deadline with
//! [`Error::TimedOut`](eagerio_core::Error::TimedOut), on the executor, which must be free to
//! poll it. Its reads already queued keep their slots (and the
//! job keeps its output buffer) until their completions arrive; only then are the slots given
//! to the next extent. A gather also settles only after every read issued before its last one,
//! by any gather of the same file, has completed: once a gather has resolved, no read of an
//! earlier (possibly dropped) gather is still holding memory. A dropped write still runs; its
//! failure is reported by the next `flush`, `sync` or `close`.
//!
//! # Staging
//! The bytes land in glommio's DMA buffers: glommio allocates one per read when it dispatches
//! it, from the executor's registered `io_memory` (10 MiB by default, `LocalExecutorBuilder::
//! io_memory`), else from the heap. The buffer belongs to the read's `ReadResult`; the engine
//! drops it after copying the rows out. A buffer the kernel still writes is never freed: the
//! engine keeps every read until its completion, and glommio itself keeps a dispatched request's
//! buffer until its completion even if the future is dropped (executor shutdown).
//!
//! # Running where users are
//! glommio needs a soft `RLIMIT_MEMLOCK` of at least 512 KiB and Linux 5.8 or later. Build
//! executors with [`executor`] (or check first with [`check_environment`]) to get an
//! [`Error::Unavailable`](eagerio_core::Error::Unavailable) that names the limit and how to raise
//! it, instead of glommio's `MemLockLimit(262144/524288)`.
//!
//! # Examples
//! ```no_run
//! use bytes::Bytes;
//! use eagerio_core::{DataSink, RowLayout};
//! use eagerio_glommio::{GlommioEngine, GlommioOptions, GlommioWriter};
//!
//! # fn main() -> eagerio_core::Result<()> {
//! let ex = eagerio_glommio::executor(glommio::LocalExecutorBuilder::default())?;
//! ex.run(async {
//!     let table = GlommioEngine::open("table.bin", GlommioOptions::default()).await?
//!         .rows(RowLayout { base: 0, row_size: 4096, rows: None })?;
//!     let rows = table.gather(&[9, 1, 9])?.await?;
//!
//!     let sink = GlommioWriter::create("out.bin", Default::default()).await?;
//!     let a = sink.append(rows.clone()); // queued now
//!     let b = sink.append(Bytes::from_static(b"trailer"));
//!     a.await?;
//!     b.await?;
//!     sink.close().await
//! })
//! # }
//! ```

#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

mod env;
mod gather;
mod pump;
mod sink;

pub use env::{block_on, check_environment, executor, Environment, MIN_KERNEL, MIN_MEMLOCK_BYTES};
pub use gather::{GlommioEngine, GlommioOptions};
pub use glommio;
pub use sink::{GlommioWriter, WriterOptions, WriterStats};
