//! Randomized fault schedules, shared by every backend's `tests/reliability_faults.rs`
//! (included with `#[path = "../../../tests/support/fault_schedule.rs"] mod fault_schedule;`).
//!
//! A schedule is a seeded stream of batches. A batch mixes gathers (row and range, two plan
//! shapes over one engine), sink writes (`write_at` into a rewritable area, `append` after it;
//! each future awaited at once, at the batch's end, or dropped) and flushes, and ends with a
//! flush or a sync once every gather has resolved. Before each operation is issued the schedule
//! picks the faults it will meet and registers them in a [`FaultTable`] keyed by the exact
//! `(kind, offset, len)` the backend passes to its hook: `EIO`, `EINTR`, `EAGAIN` (and `ENOSPC`
//! for writes) as [`Action::Fail`], short reads that cut a row and short reads that cut only
//! slack, short writes, and panics in copy-out. Because the planner is pure, the schedule plans
//! each gather itself ([`Plan::new`] with the source's options) and so knows the outcome in
//! advance: which gathers must succeed, and for the others, the exact errors (kind, errno, row or
//! range) that may be reported. A fault is only registered on a key no earlier operation of the
//! batch uses, so registering it cannot change an outcome already predicted.
//!
//! Checks, for every operation:
//! - a gather predicted clean returns exactly the file's bytes; a faulted one fails with one of
//!   its predicted errors, whose message names the row (`row N`) or range (`range #i`);
//! - staging is full after every batch (`Backend::staging_full`);
//! - a write's future reports exactly its predicted outcome, naming its offset;
//! - every flush reports exactly the `(offset, len)` of the writes that failed since the previous
//!   report (`Error::WriteFailed`), and `Ok` when none did;
//! - at checkpoints and at the end, the sink's file holds every acknowledged write's bytes
//!   (compared region by region against a byte model where failed writes are "unknown").
//!
//! The seed is printed at the start and again on failure; `EAGERIO_SEED=<seed>` replays it.

#![allow(dead_code)]

use std::{
    collections::{HashMap, HashSet},
    fmt,
    future::Future,
    io,
    path::Path,
    pin::Pin,
    sync::{Arc, Mutex, Once},
    time::{Duration, Instant},
};

use bytes::Bytes;
use eagerio_core::{
    backend::Plan,
    conformance::Backend,
    fault::{self, Action, Hook, IoKind, IoPoint},
    DataSink, Error, Op, RowLayout, Sink, SinkOptions, Source, Target,
};

/// `EAGERIO_TRACE=1` prints every step of a schedule (to find where a replayed seed hangs).
fn tracing_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("EAGERIO_TRACE").is_some())
}

macro_rules! trace {
    ($($t:tt)*) => {
        if tracing_on() {
            eprintln!($($t)*);
        }
    };
}

/// SplitMix64: small, seedable, and enough for schedules.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo)
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.fill(&mut v);
        v
    }
}

/// The schedule's seed: `EAGERIO_SEED` if set, else the clock. Printed with how to replay it.
pub fn seed(test: &str) -> u64 {
    let s = std::env::var("EAGERIO_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    });
    eprintln!("{test}: seed {s} (replay with EAGERIO_SEED={s})");
    s
}

/// Prints the seed again if the test fails while it is alive.
pub struct SeedGuard {
    pub test: String,
    pub seed: u64,
}

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{} FAILED with seed {}: replay with EAGERIO_SEED={}", self.test, self.seed, self.seed);
        }
    }
}

/// Keeps the test output readable: injected panics (expected by the thousand) are not printed;
/// every other panic goes to the default hook.
pub fn quiet_injected_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("");
            if !msg.starts_with("injected panic") {
                default(info);
            }
        }));
    });
}

/// A fault the schedule injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `Action::Fail(io::Error::from_raw_os_error(errno))`.
    Errno(i32),
    /// `Action::Short(n)`: at most `n` bytes transferred.
    Short(usize),
    /// `Action::Panic` (registered on `IoKind::CopyOut`).
    Panic,
}

impl Fault {
    fn action(self) -> Action {
        match self {
            Fault::Errno(e) => Action::Fail(io::Error::from_raw_os_error(e)),
            Fault::Short(n) => Action::Short(n),
            Fault::Panic => Action::Panic,
        }
    }
}

fn kind_code(k: IoKind) -> u8 {
    match k {
        IoKind::Read => 0,
        IoKind::Write => 1,
        IoKind::Sync => 2,
        IoKind::CopyOut => 3,
        IoKind::SyncDir => 4,
    }
}

type Key = (u8, u64, usize);

/// Faults by the exact I/O point they hit; the hook looks each point up.
#[derive(Clone, Default)]
pub struct FaultTable {
    map: Arc<Mutex<HashMap<Key, Fault>>>,
    hits: Arc<Mutex<HashMap<Key, u64>>>,
}

impl FaultTable {
    pub fn hook(&self) -> Hook {
        let me = self.clone();
        Hook::new(move |p: &IoPoint| {
            let key = (kind_code(p.kind), p.offset, p.len);
            let f = me.map.lock().unwrap().get(&key).copied();
            match f {
                Some(f) => {
                    *me.hits.lock().unwrap().entry(key).or_default() += 1;
                    f.action()
                }
                None => Action::Proceed,
            }
        })
    }

    pub fn set(&self, kind: IoKind, offset: u64, len: usize, f: Fault) {
        self.map.lock().unwrap().insert((kind_code(kind), offset, len), f);
    }

    pub fn get(&self, kind: IoKind, offset: u64, len: usize) -> Option<Fault> {
        self.map.lock().unwrap().get(&(kind_code(kind), offset, len)).copied()
    }

    /// Forgets every fault; call only when nothing is in flight.
    pub fn clear(&self) {
        self.map.lock().unwrap().clear();
    }

    /// How many times the hook returned a fault.
    pub fn hits(&self) -> u64 {
        self.hits.lock().unwrap().values().sum()
    }
}

/// A backend under the schedule: the conformance suite's [`Backend`], plus how to wait a moment
/// on its executor (a glommio executor must not be blocked with `thread::sleep`).
#[allow(async_fn_in_trait)]
pub trait FaultBackend: Backend {
    /// For messages.
    const NAME: &'static str;
    /// Yields to the executor for about a millisecond.
    async fn pause(&self);
}

/// Waits (up to 20 s) until every staging slot of `src` is free; panics naming the leak.
pub async fn wait_staging_full<B: FaultBackend>(b: &B, src: &Source<B::Engine>, what: &str) -> bool {
    if b.staging_full(src) {
        return true;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while !b.staging_full(src) {
        assert!(Instant::now() < deadline, "{}: staging did not return to full after {what}: a slot leaked", B::NAME);
        b.pause().await;
    }
    false
}

/// What a faulted gather may report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expected {
    Io { errno: i32, target: Target },
    Short { target: Target },
    Panic { offset: u64, target: Target },
}

impl Expected {
    fn matches(&self, e: &Error) -> bool {
        let text = e.to_string();
        match (*self, e) {
            (Expected::Io { errno, target }, Error::Io { op: Op::Read, target: Some(t), source, .. }) => {
                *t == target && source.raw_os_error() == Some(errno) && text.contains(&target.to_string())
            }
            (Expected::Short { target }, Error::ShortRead { target: t, .. }) => {
                *t == target && text.contains(&target.to_string())
            }
            (
                Expected::Panic { offset, target },
                Error::Panicked { op: Op::Read, message, offset: o, target: t, .. },
            ) => {
                message.contains(&format!("injected panic at CopyOut offset {offset}"))
                    && *o == Some(offset)
                    && *t == Some(target)
                    && text.contains(&target.to_string())
            }
            _ => false,
        }
    }
}

/// Counts of everything the schedule did, printed at the end.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub ops: u64,
    pub batches: u64,
    pub gathers: u64,
    pub range_gathers: u64,
    pub gathers_ok: u64,
    pub gathers_failed: u64,
    pub reads_planned: u64,
    pub read_eio: u64,
    pub read_eintr: u64,
    pub read_eagain: u64,
    pub read_short_cut: u64,
    pub read_short_benign: u64,
    pub copyout_panic: u64,
    pub writes: u64,
    pub appends: u64,
    pub writes_dropped: u64,
    pub writes_acked: u64,
    pub writes_failed: u64,
    pub write_eio: u64,
    pub write_eintr: u64,
    pub write_eagain: u64,
    pub write_enospc: u64,
    pub write_short: u64,
    pub flushes: u64,
    pub flushes_reporting: u64,
    pub syncs: u64,
    pub sync_eio: u64,
    pub staging_waits: u64,
    pub disk_checks: u64,
    pub bytes_checked: u64,
    pub hook_hits: u64,
    pub served_resident: u64,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ops in {} batches\n  gathers {} ({} by range): {} ok, {} failed as predicted; {} reads planned\n  \
             read faults: EIO {}, EINTR {}, EAGAIN {}, short (cuts a row) {}, short (slack only, must succeed) {}, \
             copy-out panic {}\n  writes {} ({} appends, {} futures dropped): {} acknowledged, {} failed as predicted\n  \
             write faults: EIO {}, EINTR {}, EAGAIN {}, ENOSPC {}, short {}\n  flushes {} ({} reported failures), \
             syncs {} ({} with injected EIO)\n  staging not yet full at a batch end: {}; disk checks {} ({} bytes \
             compared); hook returned a fault {} times; requests served resident (adaptive mode, \
             faults not met) {}",
            self.ops,
            self.batches,
            self.gathers,
            self.range_gathers,
            self.gathers_ok,
            self.gathers_failed,
            self.reads_planned,
            self.read_eio,
            self.read_eintr,
            self.read_eagain,
            self.read_short_cut,
            self.read_short_benign,
            self.copyout_panic,
            self.writes,
            self.appends,
            self.writes_dropped,
            self.writes_acked,
            self.writes_failed,
            self.write_eio,
            self.write_eintr,
            self.write_eagain,
            self.write_enospc,
            self.write_short,
            self.flushes,
            self.flushes_reporting,
            self.syncs,
            self.sync_eio,
            self.staging_waits,
            self.disk_checks,
            self.bytes_checked,
            self.hook_hits,
            self.served_resident,
        )
    }
}

/// Schedule size.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Operations (gathers + writes + flushes/syncs); the schedule stops at the first batch end
    /// at or past it.
    pub ops: u64,
    /// Rows of the gathered table.
    pub rows: u64,
    /// Bytes per row (not a multiple of any alignment, so rows straddle blocks).
    pub row_size: u64,
    /// Most rows in one gather.
    pub max_rows: u64,
    /// Compare the sink's file against the model every this many operations.
    pub checkpoint_every: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config { ops: 10_000, rows: 3000, row_size: 700, max_rows: 48, checkpoint_every: 1000 }
    }
}

/// The sink file's expected contents: `None` where no acknowledged write is known to be.
struct DiskModel {
    bytes: Vec<Option<u8>>,
    /// Which write put each known byte there (for messages).
    by: Vec<u32>,
}

impl DiskModel {
    fn apply(&mut self, w: &WriteRec, acked: bool) {
        let end = w.offset as usize + w.data.len();
        if self.bytes.len() < end {
            self.bytes.resize(end, None);
            self.by.resize(end, u32::MAX);
        }
        for (i, &b) in w.data.iter().enumerate() {
            self.bytes[w.offset as usize + i] = if acked { Some(b) } else { None };
            self.by[w.offset as usize + i] = w.id;
        }
    }

    /// Compares every known byte; names the first region that differs.
    fn check(&self, path: &Path, seed: u64) -> u64 {
        let disk = std::fs::read(path).expect("read the sink's file back");
        let mut checked = 0;
        let mut i = 0;
        while i < self.bytes.len() {
            let Some(want) = self.bytes[i] else {
                i += 1;
                continue;
            };
            let got = disk.get(i).copied();
            if got != Some(want) {
                let id = self.by[i];
                let start = (0..=i).rev().take_while(|&j| self.by[j] == id).last().unwrap_or(i);
                panic!(
                    "seed {seed}: acknowledged write #{id} (region starting at offset {start}) differs on disk at \
                     offset {i}: want {want:#04x}, file has {got:?} (file length {})",
                    disk.len()
                );
            }
            checked += 1;
            i += 1;
        }
        checked
    }
}

struct WriteRec {
    id: u32,
    offset: u64,
    data: Bytes,
    fault: Option<Fault>,
    /// The outcome as the future reported it, if awaited.
    seen: Option<bool>,
}

impl WriteRec {
    fn fails(&self) -> bool {
        match self.fault {
            None => false,
            Some(Fault::Errno(_)) => true,
            Some(Fault::Short(n)) => n < self.data.len(),
            Some(Fault::Panic) => unreachable!("writes are not panicked"),
        }
    }

    fn check_error(&self, e: &Error, seed: u64) {
        let text = e.to_string();
        assert!(
            matches!(e, Error::Io { op: Op::Write, offset: Some(o), .. } if *o == self.offset),
            "seed {seed}: write #{} at {}: wrong error {e:?}",
            self.id,
            self.offset
        );
        assert!(text.contains(&format!("offset {}", self.offset)), "seed {seed}: {text}");
        check_write_errno(self.fault, e.raw_os_error(), e.kind(), seed);
    }
}

fn check_write_errno(fault: Option<Fault>, raw: Option<i32>, kind: io::ErrorKind, seed: u64) {
    match fault {
        Some(Fault::Errno(code)) => assert_eq!(raw, Some(code), "seed {seed}: the injected errno is reported"),
        Some(Fault::Short(_)) => assert_eq!(kind, io::ErrorKind::WriteZero, "seed {seed}: a short write is WriteZero"),
        _ => unreachable!(),
    }
}

/// A gather's outcome and how many of its requests were served resident (adaptive mode).
type Gathered = Pin<Box<dyn Future<Output = (eagerio_core::Result<Vec<u8>>, u64)>>>;

struct GatherRec {
    fut: Gathered,
    expect_bytes: Vec<u8>,
    expected: Vec<Expected>,
    what: String,
}

const ERRNOS_READ: [i32; 3] = [libc::EIO, libc::EINTR, libc::EAGAIN];
const ERRNOS_WRITE: [i32; 4] = [libc::EIO, libc::EINTR, libc::EAGAIN, libc::ENOSPC];

/// The rewritable area of the sink's file; appends start after it.
const AREA: u64 = 2 << 20;

struct Batch {
    /// `(offset, len)` of every I/O point used in the batch, whatever its kind.
    used: HashSet<(u64, usize)>,
    /// Write ranges of the batch (kept disjoint: concurrent overlapping writes have no order).
    ranges: Vec<(u64, u64)>,
}

/// Runs the schedule against `b`. Panics (with the seed) on the first broken check.
pub async fn run<B: FaultBackend>(b: &B, cfg: Config) -> Report {
    quiet_injected_panics();
    let test = format!("{} fault schedule", B::NAME);
    let seed = seed(&test);
    let _guard = SeedGuard { test, seed };
    let mut rng = Rng::new(seed);
    let mut rep = Report::default();

    let dir = tempfile::tempdir().expect("tempdir");
    let table_path = dir.path().join("table.bin");
    let table_bytes = rng.bytes((cfg.rows * cfg.row_size) as usize);
    std::fs::write(&table_path, &table_bytes).expect("write the table");
    // Cold, so that an adaptive source (which copies resident pages without reading) still sends
    // every extent to the backend, where the faults are.
    eagerio_core::sys::evict(&table_path).expect("evict the table");
    let faults = FaultTable::default();
    let _table_faults = fault::inject(&table_path, faults.hook());
    let src = b.open(&table_path).await.expect("open the table");
    let layout = RowLayout { base: 0, row_size: cfg.row_size, rows: None };
    // Two plan shapes over one engine and one staging pool, each gap pinned: the schedule
    // predicts every gather's extents from its source's plan options, which a tuned gap's probes
    // would leave.
    let tables = [
        src.clone().with_max_gap(eagerio_core::DEFAULT_MAX_GAP).rows(layout).unwrap(),
        src.clone().with_max_gap(0).rows(layout).unwrap(),
    ];

    let sink_path = dir.path().join("sink.bin");
    let opts = SinkOptions::default().max_in_flight_bytes(256 << 10).append_from(AREA);
    let _sink_faults = fault::inject(&sink_path, faults.hook());
    let sink = b.create(&sink_path, opts).await.expect("create the sink");
    let mut model = DiskModel { bytes: Vec::new(), by: Vec::new() };
    let mut unreported: Vec<WriteRec> = Vec::new();
    let mut next_write_id = 0u32;
    let mut next_checkpoint = cfg.checkpoint_every;

    while rep.ops < cfg.ops {
        rep.batches += 1;
        faults.clear();
        let mut batch = Batch { used: HashSet::new(), ranges: Vec::new() };
        let mut gathers: Vec<GatherRec> = Vec::new();
        let mut later_writes: Vec<(usize, eagerio_core::WriteFuture)> = Vec::new();
        let n = rng.range(1, 9);
        for _ in 0..n {
            rep.ops += 1;
            match rng.below(100) {
                0..=51 => {
                    let g = start_gather(&mut rng, &mut rep, &faults, &mut batch, &tables, &table_bytes, &cfg);
                    if rng.chance(30) {
                        finish_gather(g, &mut rep, seed).await;
                    } else {
                        gathers.push(g);
                    }
                }
                52..=93 => {
                    let id = next_write_id;
                    next_write_id += 1;
                    let (rec, fut) = start_write(&mut rng, &mut rep, &faults, &mut batch, &sink, id);
                    let idx = unreported.len();
                    unreported.push(rec);
                    match rng.below(10) {
                        0..=2 => {
                            trace!("await write now");
                            let r = fut.await;
                            note_write(&mut unreported[idx], r, seed);
                        }
                        3..=5 => later_writes.push((idx, fut)),
                        _ => {
                            rep.writes_dropped += 1;
                            drop(fut);
                        }
                    }
                }
                _ => {
                    // A flush mid-batch, awaited at once so its report is exact.
                    for (idx, fut) in later_writes.drain(..) {
                        let r = fut.await;
                        note_write(&mut unreported[idx], r, seed);
                    }
                    flush(&sink, &mut unreported, &mut model, &mut rep, None, seed).await;
                }
            }
        }
        // Resolve in a random order.
        while !gathers.is_empty() {
            let g = gathers.swap_remove(rng.below(gathers.len() as u64) as usize);
            finish_gather(g, &mut rep, seed).await;
        }
        for (idx, fut) in later_writes.drain(..) {
            let r = fut.await;
            note_write(&mut unreported[idx], r, seed);
        }
        // End of batch: a flush, or sometimes a sync (with an injected EIO a quarter of the time).
        rep.ops += 1;
        let sync_fault = if rng.chance(8) {
            let f = rng.chance(25).then_some(Fault::Errno(libc::EIO));
            if let Some(f) = f {
                faults.set(IoKind::Sync, 0, 0, f);
            }
            Some(f)
        } else {
            None
        };
        flush(&sink, &mut unreported, &mut model, &mut rep, sync_fault, seed).await;
        trace!("batch {} done; staging check", rep.batches);
        if !wait_staging_full(b, &src, &format!("batch {}", rep.batches)).await {
            rep.staging_waits += 1;
        }
        if rep.ops >= next_checkpoint {
            next_checkpoint += cfg.checkpoint_every;
            rep.disk_checks += 1;
            rep.bytes_checked += model.check(&sink_path, seed);
        }
    }
    // The last batch may have ended with an injected sync error, reported by its flush: the
    // faults are cleared only when a batch starts, so clear them before the closing sync.
    faults.clear();
    sink.close().await.expect("close after the last report");
    rep.disk_checks += 1;
    rep.bytes_checked += model.check(&sink_path, seed);
    rep.hook_hits = faults.hits();
    assert!(b.staging_full(&src), "staging full at the end");
    let s = sink.stats();
    assert_eq!((s.in_flight, s.queued), (0, 0), "nothing left in flight: {s:?}");
    assert_eq!(s.failed, rep.writes_failed, "the sink counted every failure");
    eprintln!("{}: seed {seed}\n{rep}", B::NAME);
    rep
}

#[allow(clippy::too_many_arguments)]
fn start_gather<E: eagerio_core::backend::ReadEngine>(
    rng: &mut Rng,
    rep: &mut Report,
    faults: &FaultTable,
    batch: &mut Batch,
    tables: &[eagerio_core::RowTable<E>; 2],
    file: &[u8],
    cfg: &Config,
) -> GatherRec {
    rep.gathers += 1;
    let table = &tables[rng.below(2) as usize];
    let src = table.source();
    let by_range = rng.chance(12);
    let (requests, targets): (Vec<(u64, u64)>, Vec<Target>) = if by_range {
        rep.range_gathers += 1;
        let n = rng.range(1, 12);
        (0..n)
            .map(|i| {
                let start = rng.below(file.len() as u64 - 1);
                let len = rng.range(1, 20_000).min(file.len() as u64 - start);
                ((start, len), Target::Range(i as usize))
            })
            .unzip()
    } else {
        let n = rng.range(1, cfg.max_rows + 1);
        (0..n)
            .map(|_| {
                let r = rng.below(table.rows());
                ((r * cfg.row_size, cfg.row_size), Target::Row(r))
            })
            .unzip()
    };
    let plan = Plan::new(&requests, &src.plan_options()).expect("plan");
    rep.reads_planned += plan.extents().len() as u64;
    // Pick faults on fresh points only (see the module docs).
    if rng.chance(40) {
        let k = if rng.chance(25) { 2 } else { 1 };
        for _ in 0..k {
            let i = rng.below(plan.extents().len() as u64) as usize;
            let e = plan.extents()[i];
            let key = (e.offset, e.len as usize);
            if batch.used.contains(&key) {
                continue;
            }
            let (kind, f) = match rng.below(100) {
                0..=19 => (IoKind::Read, Fault::Errno(libc::EIO)),
                20..=34 => (IoKind::Read, Fault::Errno(libc::EINTR)),
                35..=49 => (IoKind::Read, Fault::Errno(libc::EAGAIN)),
                50..=72 => (IoKind::Read, Fault::Short(rng.below(e.needed as u64) as usize)),
                73..=84 => (IoKind::Read, Fault::Short(rng.range(e.needed as u64, e.len as u64 + 1) as usize)),
                _ => (IoKind::CopyOut, Fault::Panic),
            };
            match f {
                Fault::Errno(c) if c == libc::EIO => rep.read_eio += 1,
                Fault::Errno(c) if c == libc::EINTR => rep.read_eintr += 1,
                Fault::Errno(_) => rep.read_eagain += 1,
                Fault::Short(n) if n < e.needed as usize => rep.read_short_cut += 1,
                Fault::Short(_) => rep.read_short_benign += 1,
                Fault::Panic => rep.copyout_panic += 1,
            }
            faults.set(kind, e.offset, e.len as usize, f);
            batch.used.insert(key);
        }
    }
    // Predict from the table as it stands: everything this gather will meet is registered now.
    let mut expected = Vec::new();
    for (i, e) in plan.extents().iter().enumerate() {
        let key = (e.offset, e.len as usize);
        batch.used.insert(key);
        let first = plan.pieces(i)[0];
        match faults.get(IoKind::Read, e.offset, e.len as usize) {
            Some(Fault::Errno(errno)) => expected.push(Expected::Io { errno, target: targets[first.request as usize] }),
            Some(Fault::Short(n)) if n < e.needed as usize => {
                let p = plan.pieces(i).iter().find(|p| (p.extent_offset + p.len) as usize > n).expect("a cut piece");
                expected.push(Expected::Short { target: targets[p.request as usize] });
            }
            _ => {}
        }
        if faults.get(IoKind::CopyOut, e.offset, e.len as usize) == Some(Fault::Panic) {
            expected.push(Expected::Panic { offset: e.offset, target: targets[first.request as usize] });
        }
    }
    let expect_bytes: Vec<u8> =
        requests.iter().flat_map(|&(o, l)| file[o as usize..(o + l) as usize].iter().copied()).collect();
    let what = format!("{} requests {:?}", if by_range { "range" } else { "row" }, &requests[..requests.len().min(8)]);
    let fut: Gathered = if by_range {
        let ranges: Vec<_> = requests.iter().map(|&(o, l)| o..o + l).collect();
        let f = src.gather_ranges(&ranges).expect("valid ranges");
        Box::pin(async move {
            let mut f = f;
            let r = (&mut f).await;
            (r.map(|parts| parts.concat()), f.stats().resident)
        })
    } else {
        let rows: Vec<u64> = targets.iter().map(|t| if let Target::Row(r) = t { *r } else { unreachable!() }).collect();
        let f = table.gather(&rows).expect("valid rows");
        Box::pin(async move {
            let mut f = f;
            let r = (&mut f).await;
            (r.map(|b| b.to_vec()), f.stats().resident)
        })
    };
    GatherRec { fut, expect_bytes, expected, what }
}

async fn finish_gather(g: GatherRec, rep: &mut Report, seed: u64) {
    trace!("await gather {} expecting {:?}", g.what, g.expected);
    let (res, resident) = g.fut.await;
    rep.served_resident += resident;
    match (res, g.expected.is_empty()) {
        (Ok(bytes), _) if resident > 0 => {
            // An adaptive source served some rows from the page cache: a fault registered on
            // their extents was never met. The bytes must still be right.
            assert!(bytes == g.expect_bytes, "seed {seed}: a partly resident gather returned wrong bytes ({})", g.what);
            rep.gathers_ok += 1;
        }
        (Ok(bytes), true) => {
            assert!(bytes == g.expect_bytes, "seed {seed}: a clean gather returned wrong bytes ({})", g.what);
            rep.gathers_ok += 1;
        }
        (Ok(_), false) => {
            panic!("seed {seed}: gather ({}) succeeded but must fail with one of {:?}", g.what, g.expected)
        }
        (Err(e), true) => panic!("seed {seed}: a clean gather ({}) failed: {e}", g.what),
        (Err(e), false) => {
            assert!(
                g.expected.iter().any(|x| x.matches(&e)),
                "seed {seed}: gather ({}) failed with `{e}` ({e:?}), not one of {:?}",
                g.what,
                g.expected
            );
            rep.gathers_failed += 1;
        }
    }
}

fn start_write<E: eagerio_core::backend::WriteEngine>(
    rng: &mut Rng,
    rep: &mut Report,
    faults: &FaultTable,
    batch: &mut Batch,
    sink: &Sink<E>,
    id: u32,
) -> (WriteRec, eagerio_core::WriteFuture) {
    rep.writes += 1;
    let len = match rng.below(10) {
        0..=4 => rng.range(1, 512),
        5..=7 => rng.range(512, 8192),
        _ => rng.range(8192, 70_000),
    } as usize;
    // A write_at into the area, disjoint from the batch's other writes; else an append.
    let mut at = None;
    if rng.chance(75) {
        for _ in 0..8 {
            let o = rng.below(AREA - len as u64);
            let r = (o, o + len as u64);
            if batch.ranges.iter().all(|&(s, e)| r.1 <= s || e <= r.0) {
                at = Some(o);
                break;
            }
        }
    }
    let offset = at.unwrap_or_else(|| sink.append_offset());
    batch.ranges.push((offset, offset + len as u64));
    let fault = if rng.chance(15) {
        let f = if rng.chance(80) {
            let c = ERRNOS_WRITE[rng.below(4) as usize];
            match c {
                libc::EIO => rep.write_eio += 1,
                libc::EINTR => rep.write_eintr += 1,
                libc::EAGAIN => rep.write_eagain += 1,
                _ => rep.write_enospc += 1,
            }
            Fault::Errno(c)
        } else {
            rep.write_short += 1;
            Fault::Short(rng.below(len as u64) as usize)
        };
        faults.set(IoKind::Write, offset, len, f);
        Some(f)
    } else {
        None
    };
    batch.used.insert((offset, len));
    let data = Bytes::from(rng.bytes(len));
    let fut = if at.is_some() {
        sink.write_at(offset, data.clone())
    } else {
        rep.appends += 1;
        sink.append(data.clone())
    };
    assert_eq!(fut.offset(), offset, "the write lands where reserved");
    trace!("write #{id} at {offset} len {len} fault {fault:?}");
    (WriteRec { id, offset, data, fault, seen: None }, fut)
}

fn note_write(rec: &mut WriteRec, r: eagerio_core::Result<()>, seed: u64) {
    match (&r, rec.fails()) {
        (Ok(()), false) => {}
        (Err(e), true) => rec.check_error(e, seed),
        (Ok(()), true) => panic!("seed {seed}: write #{} at {} must fail ({:?})", rec.id, rec.offset, rec.fault),
        (Err(e), false) => panic!("seed {seed}: write #{} at {} failed: {e}", rec.id, rec.offset),
    }
    rec.seen = Some(r.is_ok());
}

/// A flush (or, with `sync`, a sync whose fdatasync gets that fault), awaited; checks that it
/// reports exactly the failed writes since the last report and updates the model.
async fn flush<E: eagerio_core::backend::WriteEngine>(
    sink: &Sink<E>,
    unreported: &mut Vec<WriteRec>,
    model: &mut DiskModel,
    rep: &mut Report,
    sync: Option<Option<Fault>>,
    seed: u64,
) {
    trace!("flush (sync: {sync:?}) after {} writes", unreported.len());
    let res = match sync {
        Some(_) => {
            rep.syncs += 1;
            sink.sync().await
        }
        None => {
            rep.flushes += 1;
            sink.flush().await
        }
    };
    let mut want: Vec<(u64, usize)> =
        unreported.iter().filter(|w| w.fails()).map(|w| (w.offset, w.data.len())).collect();
    want.sort_unstable();
    match res {
        Ok(()) => {
            assert!(want.is_empty(), "seed {seed}: the flush reported nothing but these writes failed: {want:?}");
            if let Some(Some(f)) = sync {
                panic!("seed {seed}: the sync succeeded despite an injected {f:?}");
            }
        }
        Err(Error::WriteFailed { failures, .. }) => {
            let mut got: Vec<(u64, usize)> = failures.iter().map(|f| (f.offset, f.len)).collect();
            got.sort_unstable();
            assert_eq!(got, want, "seed {seed}: the flush must list exactly the failed writes");
            for f in &failures {
                let w = unreported.iter().find(|w| w.offset == f.offset && w.data.len() == f.len).expect("listed");
                check_write_errno(w.fault, f.error.raw_os_error(), f.error.kind(), seed);
            }
            rep.flushes_reporting += 1;
        }
        Err(e @ Error::Io { op: Op::Sync, .. }) => {
            assert!(want.is_empty(), "seed {seed}: write failures {want:?} must be reported before a sync error");
            assert_eq!(sync, Some(Some(Fault::Errno(libc::EIO))), "seed {seed}: unexpected sync error {e}");
            assert_eq!(e.raw_os_error(), Some(libc::EIO));
            rep.sync_eio += 1;
        }
        Err(e) => panic!("seed {seed}: flush failed with {e}"),
    }
    for w in unreported.drain(..) {
        let failed = w.fails();
        if let Some(seen_ok) = w.seen {
            assert_eq!(seen_ok, !failed);
        }
        if failed {
            rep.writes_failed += 1;
        } else {
            rep.writes_acked += 1;
        }
        model.apply(&w, !failed);
    }
}
