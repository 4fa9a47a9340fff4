//! Counters, per gather and per source, and each source's latency histograms.

use std::{fmt, sync::atomic::AtomicU64 as StdAtomicU64, time::Duration};

use crate::loom::{AtomicU64, Ordering};

/// What one gather did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GatherStats {
    /// Rows (or ranges) requested, duplicates included.
    pub requested: u64,
    /// Distinct rows (or ranges). Rows copied from pages the adaptive mode's mapping already
    /// maps are not planned, so they are not deduplicated: each counts here.
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
    /// Distinct requested bytes (the bytes of rows copied without a plan each count, as for
    /// [`unique`](Self::unique)).
    pub useful_bytes: u64,
    /// Time from the `gather` call until the reads were handed to the backend: validating,
    /// planning, copying page-cache-resident rows and submitting. Spent in the call, or, for a
    /// large gather prepared off the caller's thread ([`crate::prepare`]), mostly on a
    /// preparing thread.
    pub submit: Duration,
    /// Time from the hand-off (the end of [`submit`](Self::submit)) until the last read settled
    /// (zero while running).
    pub wait: Duration,
    /// The largest hole the plan read to join two extents: the source's fixed gap, or the one
    /// its device's fitted price called for (see [`crate::tune`]), or a probe's.
    pub gap: u64,
    /// The device's price as fitted when the gather was planned (tuned sources, once fitted).
    pub price: Option<crate::tune::DevicePrice>,
}

impl GatherStats {
    /// One gather's counters over two of its jobs, `self` started first (a large streamed
    /// gather's head and the rest): counts add up; `submit` runs until the last job's reads
    /// were handed off and `wait` until the last read settled (zero while either runs); the gap
    /// and price are the later job's.
    pub(crate) fn joined(self, later: GatherStats) -> GatherStats {
        let submit = self.submit.max(later.submit);
        let running = self.wait.is_zero() || later.wait.is_zero();
        let settled = (self.submit + self.wait).max(later.submit + later.wait);
        GatherStats {
            requested: self.requested + later.requested,
            unique: self.unique + later.unique,
            resident: self.resident + later.resident,
            resident_faults: self.resident_faults + later.resident_faults,
            reads_planned: self.reads_planned + later.reads_planned,
            reads_issued: self.reads_issued + later.reads_issued,
            bytes_read: self.bytes_read + later.bytes_read,
            useful_bytes: self.useful_bytes + later.useful_bytes,
            submit,
            wait: if running { Duration::ZERO } else { settled - submit },
            gap: later.gap,
            price: later.price.or(self.price),
        }
    }
}

/// Totals over every gather of one source, and its latency histograms. All counters are
/// monotonic.
#[derive(Debug, Default)]
pub struct SourceStats {
    latency: Latencies,
    #[cfg(feature = "metrics")]
    exported: Option<export::Handles>,
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
    /// Gathers settled (a large streamed gather counts as two: its head and the rest).
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
    /// Distinct requested bytes (the bytes of rows copied without a plan each count, as for
    /// [`unique`](Self::unique)).
    pub useful_bytes: u64,
    /// Total of the gathers' [`GatherStats::submit`] times (calls, and preparation off the
    /// caller's thread).
    pub submit: Duration,
    /// Total time waiting for reads.
    pub wait: Duration,
}

impl SourceStats {
    /// The statistics of the source named `path`; with the `metrics` feature, the histograms
    /// are also exported through the `metrics` facade, labelled with the path (the recorder
    /// installed when the source is opened gets them).
    pub fn new(path: &std::path::Path) -> SourceStats {
        #[cfg(not(feature = "metrics"))]
        let _ = path;
        SourceStats {
            #[cfg(feature = "metrics")]
            exported: Some(export::Handles::new(path)),
            ..SourceStats::default()
        }
    }

    /// The latency histograms so far.
    pub fn latencies(&self) -> SourceLatencies {
        let l = &self.latency;
        SourceLatencies {
            call: l.call.snapshot(),
            queue: l.queue.snapshot(),
            read: l.read.snapshot(),
            gather: l.gather.snapshot(),
        }
    }

    /// One read's time, from its claim by the backend to its completion.
    pub(crate) fn record_read(&self, d: Duration) {
        self.latency.read.record(d);
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.exported {
            h.read.record(d.as_secs_f64());
        }
    }

    /// A settled gather's times: queued before its first read, and call to settled.
    pub(crate) fn record_times(&self, queue: Option<Duration>, total: Duration) {
        let l = &self.latency;
        l.gather.record(total);
        if let Some(q) = queue {
            l.queue.record(q);
        }
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.exported {
            h.gather.record(total.as_secs_f64());
            if let Some(q) = queue {
                h.queue.record(q.as_secs_f64());
            }
        }
    }

    /// Records the time a gather call kept its caller's thread.
    pub(crate) fn record_call(&self, call: Duration) {
        self.latency.call.record(call);
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.exported {
            h.call.record(call.as_secs_f64());
        }
    }

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

/// The latency histograms of one source (see [`SourceLatencies`]).
#[derive(Debug, Default)]
struct Latencies {
    call: Histogram,
    queue: Histogram,
    read: Histogram,
    gather: Histogram,
}

/// Snapshots of a source's latency histograms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceLatencies {
    /// Time inside the gather call (validating, and unless the gather was prepared on a
    /// preparing thread, planning, the adaptive copy and submitting): what the caller's thread
    /// paid, once per gather.
    pub call: HistogramSnapshot,
    /// From the job's hand-off to the backend to the backend claiming its first read: time queued
    /// behind other work, once per gather that read anything.
    pub queue: HistogramSnapshot,
    /// One read, from the backend's claim to its completion (the device and the backend's
    /// queue), once per read.
    pub read: HistogramSnapshot,
    /// From the gather call to the gather settled, once per gather.
    pub gather: HistogramSnapshot,
}

impl fmt::Display for SourceLatencies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "call   {}", self.call)?;
        writeln!(f, "queue  {}", self.queue)?;
        writeln!(f, "read   {}", self.read)?;
        write!(f, "gather {}", self.gather)
    }
}

/// Buckets: 4 per power of two of nanoseconds (values within 25% share a bucket), up to 2^63 ns.
const BUCKETS: usize = 252;

/// A lock-free latency histogram: each record is two relaxed atomic adds.
#[derive(Debug)]
pub struct Histogram {
    counts: Box<[StdAtomicU64]>,
    sum_ns: StdAtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: (0..BUCKETS).map(|_| StdAtomicU64::new(0)).collect(), sum_ns: StdAtomicU64::new(0) }
    }
}

/// The bucket of `ns`: values 0-3 have their own; from 4 up, a bucket per quarter of a power of
/// two (the leading bit's position and the two bits below it).
fn bucket(ns: u64) -> usize {
    if ns < 4 {
        return ns as usize;
    }
    let e = 63 - ns.leading_zeros() as usize;
    (e - 1) * 4 + ((ns >> (e - 2)) & 3) as usize
}

/// The first value past bucket `i`.
fn bucket_end(i: usize) -> u64 {
    if i < 4 {
        return i as u64 + 1;
    }
    let (e, sub) = (i / 4 + 1, (i % 4) as u128);
    u64::try_from((5 + sub) << (e - 2)).unwrap_or(u64::MAX)
}

impl Histogram {
    /// Counts one value.
    pub fn record(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.counts[bucket(ns)].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, std::sync::atomic::Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let counts: Vec<u64> = self.counts.iter().map(|c| c.load(std::sync::atomic::Ordering::Relaxed)).collect();
        HistogramSnapshot {
            count: counts.iter().sum(),
            sum: Duration::from_nanos(self.sum_ns.load(std::sync::atomic::Ordering::Relaxed)),
            counts,
        }
    }
}

/// A histogram's counts at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    counts: Vec<u64>,
    count: u64,
    sum: Duration,
}

impl HistogramSnapshot {
    /// Values counted.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Their mean, if any.
    pub fn mean(&self) -> Option<Duration> {
        (self.count > 0).then(|| Duration::from_nanos((self.sum.as_nanos() / u128::from(self.count)) as u64))
    }

    /// The `q`-quantile (0.0..=1.0), as the upper end of its bucket: at most 25% above the true
    /// value. `None` when nothing was counted.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(Duration::from_nanos(bucket_end(i)));
            }
        }
        None
    }

    /// The non-empty buckets, as (upper end, count), smallest first.
    pub fn buckets(&self) -> impl Iterator<Item = (Duration, u64)> + '_ {
        self.counts.iter().enumerate().filter(|(_, &c)| c > 0).map(|(i, &c)| (Duration::from_nanos(bucket_end(i)), c))
    }
}

impl fmt::Display for HistogramSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let q = |p| self.quantile(p).map_or("-".to_string(), |d| format!("{d:.1?}"));
        write!(f, "n={} p50<={} p90<={} p99<={} max<={}", self.count, q(0.5), q(0.9), q(0.99), q(1.0))
    }
}

#[cfg(feature = "metrics")]
mod export {
    //! The histograms through the `metrics` facade: handles made once per source.

    /// One handle per histogram, labelled with the source's path.
    #[derive(Debug)]
    pub(super) struct Handles {
        pub(super) call: metrics::Histogram,
        pub(super) queue: metrics::Histogram,
        pub(super) read: metrics::Histogram,
        pub(super) gather: metrics::Histogram,
    }

    impl Handles {
        pub(super) fn new(path: &std::path::Path) -> Handles {
            let path = path.display().to_string();
            Handles {
                call: metrics::histogram!("eagerio_gather_call_seconds", "path" => path.clone()),
                queue: metrics::histogram!("eagerio_gather_queue_seconds", "path" => path.clone()),
                read: metrics::histogram!("eagerio_read_seconds", "path" => path.clone()),
                gather: metrics::histogram!("eagerio_gather_seconds", "path" => path),
            }
        }
    }
}

#[cfg(all(test, not(eagerio_loom)))]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_contiguous_and_within_a_quarter() {
        let mut prev_end = 0;
        for i in 0..BUCKETS - 1 {
            let end = bucket_end(i);
            assert!(end > prev_end, "bucket {i}");
            // The first value of bucket i is prev_end, and it maps back to i; so does end - 1.
            assert_eq!(bucket(prev_end), i, "start of bucket {i}");
            assert_eq!(bucket(end - 1), i, "end of bucket {i}");
            if prev_end >= 4 {
                assert!((end - prev_end) * 4 <= prev_end, "bucket {i} spans more than a quarter");
            }
            prev_end = end;
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn histogram_quantiles_and_mean() {
        let h = Histogram::default();
        assert_eq!(h.snapshot().quantile(0.5), None);
        for us in 1..=100u64 {
            h.record(Duration::from_micros(us));
        }
        let s = h.snapshot();
        assert_eq!(s.count(), 100);
        assert_eq!(s.mean(), Some(Duration::from_nanos(50_500)));
        for (q, true_value) in [(0.5, 50u64), (0.9, 90), (0.99, 99), (1.0, 100)] {
            let got = s.quantile(q).unwrap();
            let t = Duration::from_micros(true_value);
            assert!(got >= t && got <= t * 5 / 4, "q{q}: {got:?} for {t:?}");
        }
        assert_eq!(s.buckets().map(|(_, c)| c).sum::<u64>(), 100);
        assert!(s.to_string().starts_with("n=100 p50<="), "{s}");
    }

    #[test]
    fn gather_stats_joined_over_two_jobs() {
        let ms = Duration::from_millis;
        let job = |k: u64, submit, wait| GatherStats {
            requested: k,
            unique: 2 * k,
            resident: 3 * k,
            resident_faults: 4 * k,
            reads_planned: 5 * k,
            reads_issued: 6 * k,
            bytes_read: 7 * k,
            useful_bytes: 8 * k,
            submit,
            wait,
            gap: k,
            price: None,
        };
        // The head handed off at 1 ms and settled at 5; the rest handed off at 3 and settled at 9.
        let both = job(1, ms(1), ms(4)).joined(job(10, ms(3), ms(6)));
        assert_eq!(both, GatherStats { submit: ms(3), wait: ms(6), gap: 10, ..job(11, ms(0), ms(0)) });
        // The head settling last still ends the wait.
        assert_eq!(job(1, ms(1), ms(20)).joined(job(10, ms(3), ms(6))).wait, ms(18));
        // Either still running: no wait yet.
        assert_eq!(job(1, ms(1), ms(4)).joined(job(10, ms(3), Duration::ZERO)).wait, Duration::ZERO);
        assert_eq!(job(1, ms(1), Duration::ZERO).joined(job(10, ms(3), ms(6))).wait, Duration::ZERO);
    }
}
