//! # eagerio-uring: io_uring lanes
//!
//! A **lane** is a thread that owns one io_uring ring, its share of the driver's staging (one
//! fixed buffer covering the lane's [`Staging`](eagerio_core::backend::Staging) pool, read with
//! `READ_FIXED`) and a sparse registered file table. A [`Driver`] is a set of lanes shared by
//! every table ([`UringEngine`]) and sink ([`UringWriter`]) opened on it: opening a file adds it
//! to each lane's file table, not a thread. [`Driver::shared`], the process-wide driver (one lane),
//! starts with the first open that names no driver and stops when the last table, sink or handle
//! on it is dropped.
//!
//! # When the I/O starts
//! `gather()` plans the request and hands the job to a lane's inbox, then writes the lane's
//! eventfd; the lane, asleep in `io_uring_enter` with a read of that eventfd queued, wakes and
//! submits the first window of reads. The future only waits. The lane keeps its window full: each
//! reaped completion is followed by the next read of the plan, up to `depth` in flight. A sink's
//! `write_at`/`append` queue the write the same way ([`UringWriter`]).
//!
//! # Depth, lanes and fairness
//! `depth` is the operations in flight on one lane, whatever number of files and gathers share
//! it (default 128); more lanes add depth. A lane serves the gathers it holds round robin, one
//! read each in turn, so a gather of a million rows and one of a hundred progress side by side.
//! A gather alone takes the whole window. While gathers overlap (and for 512 completions after)
//! each takes at most `depth / (gathers + room)`, where `room` is 3 newcomers if a small gather
//! was in the overlap and 1 if only large ones were: beside small gathers a large one holds a
//! quarter of the window, so a small gather's reads find free slots and a device queue that is
//! not full of the large one's reads; two large gathers still keep most of the window busy. A
//! gather with no more than `depth` reads left to claim (a small one) is not held to its share:
//! it takes the slots it needs at once. Measured with `cargo run --release --example
//! uring_lanes -- fairness` (2 GiB table, cold 90 B rows, 2026-12-04, two runs): 100-row
//! gathers beside a 1,000,000-row one had p99 2.09-2.18 ms against 0.97-1.32 ms alone
//! (1.7-2.2x), where room for one newcomer gave 3.08-3.18 ms (2.7-3.5x); the 1,000,000-row
//! gather took 3.6-3.9 s instead of 2.6-2.7 s while the small ones ran beside it.
//! A gather runs on the least loaded lane unless it has at least `split_threshold` reads, in
//! which case every lane pulls reads from it.
//!
//! # Cancellation and deadlines
//! A gather whose future is dropped, or whose deadline passes
//! ([`GatherFuture::with_timeout`](eagerio_core::GatherFuture::with_timeout)), stops claiming
//! reads at once, and the lane sends `IORING_OP_ASYNC_CANCEL` for each of its reads in flight
//! (the ring's probe must offer the opcode; without it they run to completion). A timed-out
//! future resolves at the deadline with [`Error::TimedOut`](eagerio_core::Error::TimedOut), not
//! when the reads end. A cancelled read still completes, with `ECANCELED` or, if it won the race,
//! with its bytes, and only that completion frees its slot. `tests/loom_lane.rs` models a cancel
//! racing the completion, then the next gather on the slot.
//!
//! # Staging and `RLIMIT_MEMLOCK`
//! Staging is one budget per driver, split evenly between its lanes. By default it is
//! `lanes * depth * max_read` (8 MiB for one lane), lowered to three quarters of the soft
//! `RLIMIT_MEMLOCK` for a process that is not root ([`default_staging`]): registered buffers
//! count against that limit, and at the common 8 MiB a full 8 MiB registration is refused. Fewer
//! slots than the depth then bound the reads in flight (96 at 8 MiB), and the driver logs it.
//!
//! # Drain before reuse
//! Every read's staging slot stays leased in the lane's in-flight table until its completion is
//! reaped, whatever happens: a completion error, a short read, a panic while copying rows out, a
//! dropped future. A file's table entry is cleared, and its index reused, only after the last
//! operation on the file completed. When a lane stops, it waits for every operation the kernel
//! owns before its staging or ring is freed; it never relies on closing the ring.
//!
//! # Fallbacks
//! If `register_buffers` is refused (`ENOMEM` under `RLIMIT_MEMLOCK`), the lanes read with plain
//! `READ` into the same staging ([`Mode::Unregistered`]). If the ring cannot be set up at all
//! (`EPERM`, `ENOSYS`, seccomp) or lacks an opcode, tables opened on the shared driver run on
//! the tokio backend ([`Mode::Tokio`]) and [`UringWriter::create`] says to use the tokio sink.
//! Each fallback is logged with `tracing` and reported by [`UringEngine::fallback_reason`].

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
//! - **One lane by default.** The shared driver has one lane: on a machine of a few cores a
//!   second lane thread competes with the application's own; a driver built with
//!   [`DriverOptions::lanes`] adds lanes where cores and the device allow.
//! - **Split threshold.** A gather is spread over every lane from 4,096 reads up. Below about
//!   1,000 reads, splitting costs more (two wake-ups, two partial windows) than it gains; from a
//!   few thousand up, two lanes were 1.2-1.6x one lane.
//!
//! # Hooks
//! A fault hook (installed for the file's path with [`eagerio_core::fault::inject`]) belongs to
//! the file opened while it is installed, and runs on the lane thread when a completion of that file
//! is reaped (so "the Nth completion is EIO" is exact). A hook that sleeps stalls the whole lane,
//! every file on it included: it is a test seam, not a latency simulator.

mod driver;
mod gather;
pub mod lane;
mod ring;
mod sink;

pub use driver::{default_staging, Driver, DriverOptions};
pub use gather::{Fallback, UringEngine, UringOptions};
pub use ring::{memlock_limit, Mode, SetupFlags};
pub use sink::{UringWriter, WriterOptions};

/// Runs `open`, a blocking open-like step of `path`, on tokio's blocking pool inside a tokio
/// runtime, so the caller's task only waits; on any other executor (the lanes need none) in the
/// poll itself.
async fn unblock<T: Send + 'static>(
    path: &std::path::Path,
    open: impl FnOnce(&std::path::Path) -> eagerio_core::Result<T> + Send + 'static,
) -> eagerio_core::Result<T> {
    if tokio::runtime::Handle::try_current().is_err() {
        return open(path);
    }
    let owned = path.to_path_buf();
    eagerio_tokio::unblock(path, move || open(&owned)).await
}
