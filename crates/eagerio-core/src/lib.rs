//! The eager core of eagerio.
//!
//! eagerio's contract: **the I/O is submitted before the call returns; the future only waits.**
//! This crate holds everything that contract needs that is not a syscall, written once and used
//! by every backend:
//!
//! - [`plan`]: the pure planner that sorts, deduplicates, coalesces, aligns and splits a request
//!   into reads, and maps every read back to its output positions;
//! - [`staging`]: the bounded pool of aligned buffers reads land in, where every slot has one
//!   owner and returns to the pool only once its read has completed;
//! - [`gather`]: the job ledger shared by a [`GatherFuture`] and the backend parties serving it,
//!   and the [`Source`] / [`RowTable`] that validate, plan and submit;
//! - [`sink`]: the eager [`DataSink`], its offset reservation, backpressure and error ledger;
//! - [`tune`]: the device's price per read and per KiB, fitted from whole gathers, and the gap
//!   it calls for;
//! - [`error`]: the one error type, with the operation, file, row and offset;
//! - [`mem`]: an in-memory backend, the smallest complete one, which also runs under loom;
//! - `conformance` (feature `conformance`): the suite every backend passes whole.
//!
//! A backend implements two small traits, [`ReadEngine`](backend::ReadEngine) and
//! [`WriteEngine`](backend::WriteEngine), found with the rest of what backends use in [`backend`].
//!
//! # The invariant
//! A buffer that the kernel or a worker still owns is never reused or freed. After an error, a
//! panic or a dropped future, in-flight reads keep their staging slots until their completion is
//! observed; only then can a slot serve the next gather. `tests/loom_ledger.rs` model-checks it
//! (`RUSTFLAGS="--cfg eagerio_loom" cargo test -p eagerio-core --release --test loom_ledger`).

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

mod deadline;
pub mod error;
pub mod fault;
pub mod gather;
#[doc(hidden)]
pub mod loom;
pub mod mem;
mod options;
pub mod plan;
pub mod prepare;
mod recover;
pub mod residency;
pub mod sink;
pub mod staging;
pub mod stats;
pub mod sys;
pub mod tune;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use error::{Error, Op, Result, Target, WriteFailure};
pub use gather::{
    FileInfo, Gather, GatherFuture, GatherRows, GatherStream, OutputPool, RowLayout, RowTable, Source,
    DEFAULT_GAP_LIMIT, DEFAULT_MAX_GAP,
};
pub use sink::{DataSink, FlushFuture, ReadyFuture, Sink, SinkOptions, SinkStats, WriteFuture};
pub use stats::{GatherStats, HistogramSnapshot, SourceLatencies, SourceTotals};
pub use tune::DevicePrice;

/// What a backend implements and uses, apart from the user's API at the crate root: the engine
/// traits ([`ReadEngine`](backend::ReadEngine), [`WriteEngine`](backend::WriteEngine)), the
/// job's handle, the planner's types, the staging pool and the per-source statistics. The
/// modules [`sys`], [`residency`], [`fault`] and [`mem`] are for backends (and tests) too.
pub mod backend {
    pub use crate::gather::{remote, ClaimPhase, JobClaims, JobHandle, ReadEngine, Remote};
    pub use crate::plan::{Extent, Piece, Plan, PlanOptions};
    pub use crate::sink::{SyncOp, WriteEngine, WriteOp};
    pub use crate::staging::{SlotLease, Staging, DEFAULT_STAGING_BYTES, STAGING_ALIGN};
    pub use crate::stats::{Histogram, SourceStats};
}
