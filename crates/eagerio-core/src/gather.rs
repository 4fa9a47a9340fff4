//! Gathers: the job ledger shared by a [`GatherFuture`] and the backend serving it, and the
//! sources that create them.
//!
//! # When the I/O starts
//! [`Source::gather_ranges`] and [`RowTable::gather`] validate the request, plan it and hand the
//! job to the backend's [`ReadEngine::submit`] *before they return*; a large gather on a backend
//! that takes jobs from any thread is handed, once validated, to a preparing thread that plans
//! and submits it at once (below). Either way no poll is needed: the returned [`GatherFuture`]
//! never starts anything, it only waits for the job to settle.
//!
//! # What the call costs the caller's thread
//! A gather of fewer than [`PREPARE_ELSEWHERE`](crate::prepare::PREPARE_ELSEWHERE) (2,048)
//! requests is planned (about 40 ns a request), served from the page cache where the adaptive
//! mode finds its rows resident, and submitted in the call. A larger one, on a backend that can
//! take jobs from any thread ([`ReadEngine::remote`]: every local backend; glommio's takes
//! them back on its executor through a channel), is only
//! checked in the call (every error a bad request can cause is returned there, before any I/O:
//! about 1 ns a request, plus copying the requests) and handed to a preparing thread
//! ([`crate::prepare`]), which plans it, copies its resident rows and submits it at once, with
//! no poll needed. A 40,000-row gather's call then takes well under a millisecond, cold or
//! warm, instead of milliseconds. Until the preparing thread is done, the future's
//! [`stats`](GatherFuture::stats) are zero; dropping it ends the job as soon as it is built.
//!
//! # What dropping the future does
//! It cancels the job: no further extent is issued, and a backend that can cancel reads in flight
//! is asked to (the io_uring lanes send `IORING_OP_ASYNC_CANCEL`). Reads already issued keep their
//! staging slots and the output buffer alive (both are owned by the in-flight party, not by the
//! future) until their completions are observed; only then do the slots return to the pool.
//! Nothing the kernel or a worker still writes is ever freed or handed to the next gather.
//!
//! # Deadlines
//! A gather can carry a deadline ([`GatherFuture::with_deadline`], [`GatherFuture::with_timeout`],
//! or [`Source::with_timeout`] for every gather of a source). When it passes, the job is cancelled
//! as if its future were dropped, and the future resolves at once with
//! [`Error::TimedOut`](crate::Error::TimedOut), naming how many rows were not read, without
//! waiting for the reads still in flight: they return their slots when they complete, as above. A process-wide thread, `eagerio-deadlines`,
//! started by the first deadline, wakes the future at its deadline.
//!
//! # The party protocol
//! A job is settled when no [`JobHandle`] is left. The `gather` call holds one while it submits;
//! a backend clones one for every worker or lane that may still touch the job, and drops it when
//! that worker's last read has completed. The last drop records the statistics and wakes the
//! future. The future reads the output only after that, so no backend write can race with it.
//!
//! # Where things are
//! - `engine`: what a backend implements ([`ReadEngine`], [`FileInfo`], [`Remote`]) and the
//!   account a party keeps of the reads it has in flight ([`JobClaims`]);
//! - `ledger`: the in-flight ledger ([`JobHandle`], the job's extents, parties and output); the
//!   drain-before-reuse invariant lives there, beside its loom models;
//! - `future`: [`GatherFuture`] and its states (preparing, armed deadlines, dropped);
//! - `pool`: [`OutputPool`], large outputs kept for the next gather;
//! - `stream`: [`GatherStream`], the same gather yielding each request as it lands, and
//!   `landing`, the job's account of which requests have landed;
//! - `source`: the user's handles ([`Source`], [`RowTable`]), and `traits`, the object-safe
//!   faces they show ([`Gather`], [`GatherRows`]).

mod engine;
mod future;
mod landing;
mod ledger;
mod pool;
mod source;
mod stream;
mod traits;

pub use engine::{remote, ClaimPhase, FileInfo, JobClaims, ReadEngine, Remote};
pub use future::GatherFuture;
pub use ledger::{GatherJob, JobHandle};
pub use pool::OutputPool;
pub use source::{RowLayout, RowTable, Source, DEFAULT_GAP_LIMIT, DEFAULT_MAX_GAP};
pub use stream::GatherStream;
pub use traits::{Gather, GatherRows};
