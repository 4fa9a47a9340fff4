//! What a backend implements to serve gathers: the [`ReadEngine`] trait, the [`FileInfo`] it
//! describes its file with, and [`Remote`], the way a large gather reaches it from a preparing
//! thread.
//!
//! An engine is handed a job's [`JobHandle`] by [`ReadEngine::submit`] and serves it through the
//! ledger's API (`super::ledger`): claim an extent with [`JobHandle::next_extent`], read it into a
//! staging slot the engine owns, report it with [`JobHandle::complete`] or [`JobHandle::fail`],
//! and drop the handle once its last read has completed. A party that serves several jobs at
//! once (a lane) keeps a [`JobClaims`] per job: its claims and reads in flight, and when it may
//! drop the handle. Everything else (planning, the output, the statistics, the future) is the
//! core's. This file touches nothing but the handle's public API.

use std::{path::PathBuf, sync::Arc as StdArc};

use super::ledger::JobHandle;
#[allow(unused_imports)] // doc links
use super::Source;

/// What a backend tells the core about the file it serves.
#[derive(Debug, Clone)]
pub struct FileInfo {
    /// The file's path, for error messages.
    pub path: PathBuf,
    /// The file's length when it was opened; range gathers past it are refused before any I/O.
    pub len: u64,
    /// Alignment every read must have (the logical block for `O_DIRECT`, `1` when buffered).
    pub align: u64,
    /// Largest single read: the staging slot size.
    pub max_read: u64,
}

/// A backend that executes gather jobs.
///
/// Implementing it right is small: in [`submit`](ReadEngine::submit), start reading. Take extents
/// with [`JobHandle::next_extent`], read each into a staging slot you own, report it with
/// [`JobHandle::complete`], and drop your handle(s) once your last read has completed. Keep a
/// slot's lease until the read into it has completed, whatever happens to the job.
pub trait ReadEngine {
    /// The file this engine reads.
    fn info(&self) -> &FileInfo;

    /// Starts executing `job`. Reads must be in flight (or queued to a party that runs without
    /// being polled) when this returns.
    fn submit(&self, job: JobHandle);

    /// The largest hole to read to join two extents in the next plan, for an engine that
    /// measures what a read costs (a remote store: a request's latency against its bandwidth).
    /// `None`, the default, keeps the source's bound ([`Source::with_max_gap`]).
    fn max_gap(&self) -> Option<u64> {
        None
    }

    /// A way to [`submit`](ReadEngine::submit) from any thread, for an engine that allows it
    /// (build one with [`remote`]). With it, a gather of at least
    /// [`PREPARE_ELSEWHERE`](crate::prepare::PREPARE_ELSEWHERE) requests is planned, served
    /// from the page cache and submitted on a preparing thread, and the gather call returns
    /// after validating it. `None`, the default, does all of it in the call. An engine tied to
    /// its thread (glommio's) returns a sender that hands the job back to that thread.
    fn remote(&self) -> Option<Remote> {
        None
    }
}

/// Submits a job to an engine from any thread: see [`ReadEngine::remote`].
pub type Remote = StdArc<dyn Fn(JobHandle) + Send + Sync>;

/// [`ReadEngine::remote`] for an engine that may be shared across threads: submits through a
/// clone of it.
pub fn remote<E: ReadEngine + Clone + Send + Sync + 'static>(engine: &E) -> Remote {
    let engine = engine.clone();
    StdArc::new(move |job| engine.submit(job))
}

/// Where a party stands with one job: see [`JobClaims`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimPhase {
    /// Claiming extents as slots free up.
    Claiming,
    /// Nothing left to claim (all claimed, or the job failed or ended): waiting for the reads in
    /// flight.
    Draining,
    /// The job ended early and the party asked for its reads in flight to be cancelled; waiting
    /// for them.
    Cancelling,
}

/// One party's account of a job it serves: the extents it claimed and the reads it has in flight,
/// kept by a backend beside the job's [`JobHandle`] (the io_uring lane and the glommio lane keep
/// one per job). The party may drop its handle once [`is_drained`](Self::is_drained).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobClaims {
    phase: ClaimPhase,
    in_flight: usize,
    claimed: usize,
}

impl Default for JobClaims {
    fn default() -> Self {
        JobClaims { phase: ClaimPhase::Claiming, in_flight: 0, claimed: 0 }
    }
}

impl JobClaims {
    /// Claims the next extent of `job` for a read about to be issued ([`JobHandle::next_extent`]),
    /// counting it in flight; `None`, and the phase moves to `Draining`, once there is none.
    pub fn claim(&mut self, job: &JobHandle) -> Option<usize> {
        if self.phase != ClaimPhase::Claiming {
            return None;
        }
        let Some(extent) = job.next_extent() else {
            self.phase = ClaimPhase::Draining;
            return None;
        };
        self.in_flight += 1;
        self.claimed += 1;
        Some(extent)
    }

    /// A read this party claimed has completed (and was reported to `job`). A job that is no
    /// longer live stops claiming.
    pub fn completed(&mut self, job: &JobHandle) {
        self.in_flight -= 1;
        if self.phase == ClaimPhase::Claiming && !job.is_live() {
            self.phase = ClaimPhase::Draining;
        }
    }

    /// The job ended early: stop claiming. Whether this is the first call, i.e. whether the
    /// caller should now cancel the reads in flight.
    pub fn cancel(&mut self) -> bool {
        let first = self.phase != ClaimPhase::Cancelling;
        self.phase = ClaimPhase::Cancelling;
        first
    }

    /// Where the party stands.
    pub fn phase(&self) -> ClaimPhase {
        self.phase
    }

    /// Whether the party may claim more.
    pub fn is_claiming(&self) -> bool {
        self.phase == ClaimPhase::Claiming
    }

    /// Nothing left to claim and no read in flight: the party may drop its handle.
    pub fn is_drained(&self) -> bool {
        self.phase != ClaimPhase::Claiming && self.in_flight == 0
    }

    /// Extents this party has claimed so far (1 just after its first claim).
    pub fn claimed(&self) -> usize {
        self.claimed
    }

    /// Reads this party has in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Extents of `job` this party has not claimed (an upper bound on what is left when several
    /// parties claim from one job).
    pub fn unclaimed(&self, job: &JobHandle) -> usize {
        job.plan().extents().len().saturating_sub(self.claimed)
    }
}
