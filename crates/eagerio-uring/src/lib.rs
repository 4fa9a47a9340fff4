//! # eagerio-uring: io_uring lanes
//!
//! A **lane** is a thread that owns one io_uring ring, its registered staging (one fixed buffer
//! covering the lane's [`Staging`](eagerio_core::Staging) pool, read with `READ_FIXED`) and a
//! registered file table. A [`UringEngine`] serves one file with one or more lanes.
//!
//! # When the I/O starts
//! `gather()` plans the request and hands the job to a lane's inbox, then writes the lane's
//! eventfd; the lane, asleep in `io_uring_enter` with a read of that eventfd queued, wakes and
//! submits the first window of reads. The future only waits. The lane keeps its window full: each
//! reaped completion is followed by the next read of the plan, up to `depth` in flight. A sink's
//! `write_at`/`append` queue the write the same way ([`UringWriter`]).
//!
//! # Depth and lanes
//! Each lane's ring has the full `depth` (default 128); more lanes add depth, never divide it. A
//! gather runs on the least loaded lane unless it has at least `split_threshold` reads, in which
//! case every lane pulls reads from it.
//!
//! # Drain before reuse
//! Every read's staging slot stays leased in the lane's in-flight table until its completion is
//! reaped, whatever happens: a completion error, a short read, a panic while copying rows out, a
//! dropped future. When a lane stops, it waits for every operation the kernel owns before its
//! staging or ring is freed; it never relies on closing the ring.
//!
//! # Fallbacks
//! If `register_buffers` is refused (`ENOMEM` under `RLIMIT_MEMLOCK`), the lane reads with plain
//! `READ` into the same staging ([`Mode::Unregistered`]). If the ring cannot be set up at all
//! (`EPERM`, `ENOSYS`, seccomp) or lacks an opcode, gathers run on the tokio backend
//! ([`Mode::Tokio`]). Each fallback is logged with `tracing` and reported by
//! [`UringEngine::fallback_reason`].

mod engine;
pub mod lane;
mod ring;
mod sink;

pub use engine::{Fallback, UringEngine, UringOptions};
pub use ring::{memlock_limit, Mode, SetupFlags};
pub use sink::{UringWriter, UringWriterOptions};
