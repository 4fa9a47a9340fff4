//! Counters, per gather and per source.

use std::time::Duration;

use crate::loom::{AtomicU64, Ordering};

/// What one gather did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GatherStats {
    /// Rows (or ranges) requested, duplicates included.
    pub requested: u64,
    /// Distinct rows (or ranges).
    pub unique: u64,
    /// Rows served from resident pages without a read (adaptive mode).
    pub resident: u64,
    /// Major faults taken while copying resident rows: pages evicted between the residency
    /// check and the copy, each one synchronous read (adaptive mode).
    pub resident_faults: u64,
    /// Reads the plan needs.
    pub reads_planned: u64,
    /// Reads handed to the backend so far.
    pub reads_issued: u64,
    /// Bytes those reads returned.
    pub bytes_read: u64,
    /// Distinct requested bytes.
    pub useful_bytes: u64,
    /// Time spent in the `gather` call: validating, planning and submitting.
    pub submit: Duration,
    /// Time from the call's return until the last read settled (zero while running).
    pub wait: Duration,
}

/// Totals over every gather of one source. All counters are monotonic.
#[derive(Debug, Default)]
pub struct SourceStats {
    gathers: AtomicU64,
    failed: AtomicU64,
    requested: AtomicU64,
    unique: AtomicU64,
    resident: AtomicU64,
    reads: AtomicU64,
    bytes_read: AtomicU64,
    useful_bytes: AtomicU64,
    submit_ns: AtomicU64,
    wait_ns: AtomicU64,
}

/// A snapshot of [`SourceStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SourceTotals {
    /// Gathers settled.
    pub gathers: u64,
    /// Of which failed.
    pub failed: u64,
    /// Rows or ranges requested.
    pub requested: u64,
    /// Distinct rows or ranges.
    pub unique: u64,
    /// Rows served resident.
    pub resident: u64,
    /// Reads issued.
    pub reads: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Distinct requested bytes.
    pub useful_bytes: u64,
    /// Total time in `gather` calls.
    pub submit: Duration,
    /// Total time waiting for reads.
    pub wait: Duration,
}

impl SourceStats {
    pub(crate) fn record(&self, g: &GatherStats, failed: bool) {
        let add = |c: &AtomicU64, v: u64| {
            c.fetch_add(v, Ordering::Relaxed);
        };
        add(&self.gathers, 1);
        add(&self.failed, failed as u64);
        add(&self.requested, g.requested);
        add(&self.unique, g.unique);
        add(&self.resident, g.resident);
        add(&self.reads, g.reads_issued);
        add(&self.bytes_read, g.bytes_read);
        add(&self.useful_bytes, g.useful_bytes);
        add(&self.submit_ns, g.submit.as_nanos() as u64);
        add(&self.wait_ns, g.wait.as_nanos() as u64);
    }

    /// Reads the totals.
    pub fn snapshot(&self) -> SourceTotals {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SourceTotals {
            gathers: get(&self.gathers),
            failed: get(&self.failed),
            requested: get(&self.requested),
            unique: get(&self.unique),
            resident: get(&self.resident),
            reads: get(&self.reads),
            bytes_read: get(&self.bytes_read),
            useful_bytes: get(&self.useful_bytes),
            submit: Duration::from_nanos(get(&self.submit_ns)),
            wait: Duration::from_nanos(get(&self.wait_ns)),
        }
    }
}
