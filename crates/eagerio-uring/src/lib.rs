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

//! # How lanes are driven, and why
//! Each lane is a thread that waits in `io_uring_enter(GETEVENTS)` with a read of an eventfd
//! queued in its own ring; `gather()` pushes the job to the lane's inbox and writes the eventfd.
//! The alternative, completions delivered into tokio's reactor through `AsyncFd` on an eventfd
//! registered with the ring, was rejected for three reasons:
//! - the lanes must work from any executor (the conformance suite runs them on `futures`'
//!   `block_on`, with no tokio runtime at all), and a thread needs none;
//! - one thread per ring makes the ring single-issuer by construction, so there is no lock around
//!   the submission queue and `SINGLE_ISSUER`/`DEFER_TASKRUN` apply; with `AsyncFd`, whichever
//!   tokio worker calls `gather()` would submit, under a lock, and those flags would be illegal;
//! - the lane refills its window straight from the completion it reaps, without a task wake-up
//!   and a reactor turn between a completion and the next submission.
//!
//! The price is a wake-up per gather: a one-row gather of a cached page (the round trip through
//! the eventfd, the lane, the completion and the future's waker) measured 18.5 us on this
//! 2-core machine with other jobs running (`cargo run --release --example uring_lanes -- wake`),
//! against 230-800 ms for a 40,000-row cold gather.
//!
//! # Measured choices
//! `cargo run --release --example uring_lanes` sweeps them side by side (cold, 40,000 rows of a
//! 2 GiB table, median of 3); the figures are in the README.
//! - **Setup flags.** Default `COOP_TASKRUN | SINGLE_ISSUER`: the lane is the only submitter
//!   and enters the kernel after every batch anyway, so cooperative task running costs nothing
//!   and saves the interrupt. `DEFER_TASKRUN` is available (`SetupFlags`) and was as fast or
//!   faster in some runs, but it runs completion work only inside `io_uring_enter`, which delays
//!   completions when a lane is busy copying rows out, so it is not the default.
//! - **Depth.** 128 per lane; 32 loses a third of the throughput on this disk, 512 gains little.
//! - **Split threshold.** A gather is spread over every lane from 4,096 reads up. Below about
//!   1,000 reads, splitting costs more (two wake-ups, two partial windows) than it gains; from a
//!   few thousand up, two lanes were 1.2-1.6x one lane.
//!
//! # Hooks
//! A fault hook runs on the lane thread when a completion is reaped (so "the Nth completion is
//! EIO" is exact). A hook that sleeps stalls the whole lane: it is a test seam, not a latency
//! simulator.

mod engine;
pub mod lane;
mod ring;
mod sink;

pub use engine::{Fallback, UringEngine, UringOptions};
pub use ring::{memlock_limit, Mode, SetupFlags};
pub use sink::{UringWriter, UringWriterOptions};
