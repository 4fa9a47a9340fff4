//! The gather methods: eagerio backends and the baselines, behind one small trait.
//!
//! A method is prepared once per row size (untimed: open files, start executors), readied before
//! every timed run (untimed: evict when cold, map afresh), then run. The harness times `run`
//! whole and checks its output against the fill function before the time counts.
//!
//! Adding an eagerio backend is a few lines: wrap its `RowTable` in [`Eager`] with an opener
//! (see [`eager_tokio`] and the slots in [`eagerio_backends`]).

use std::{
    fs::File,
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
    sync::{mpsc, Arc, Mutex},
    thread::JoinHandle,
};

use bytes::Bytes;
use eagerio::core::{backend::ReadEngine, RowLayout, RowTable};
use eagerio::tokio::{TokioEngine, TokioOptions};

use crate::probe;

pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// What every method can use.
pub struct Env {
    pub path: PathBuf,
    pub rt: tokio::runtime::Runtime,
}

impl Env {
    /// Evicts the table's pages (drop_caches or fadvise).
    pub fn evict(&self) -> Res<()> {
        probe::evict(&self.path)?;
        Ok(())
    }
}

/// Whether a method is one of eagerio's backends or a baseline (ratios are against the best
/// baseline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Eagerio,
    Baseline,
}

/// One timed run's result.
pub struct RunOut {
    /// The rows, back to back in request order.
    pub bytes: Bytes,
    /// Reads the method issued (syscalls or submissions), where it knows.
    pub reads: Option<u64>,
    /// Time inside the gather call, before its future is awaited (eagerio's planning, residency
    /// probe and submission on the caller's thread); `None` for methods that are one call.
    pub call: Option<std::time::Duration>,
    /// The gap the gather was planned with (eagerio's backends).
    pub gap: Option<u64>,
}

/// A gather method.
pub trait Method {
    fn name(&self) -> String;
    fn family(&self) -> Family;
    /// Untimed, once per row size.
    fn prepare(&mut self, env: &Env, row_size: u64) -> Res<()>;
    /// Untimed, before every run (timed or warm-up): evict when `cold`.
    fn ready(&mut self, env: &Env, cold: bool) -> Res<()> {
        if cold {
            env.evict()?;
        }
        Ok(())
    }
    /// The gather: timed by the caller.
    fn run(&mut self, env: &Env, ids: &[u64]) -> Res<RunOut>;
    /// Untimed, after every sample: drop whatever would keep the table's pages resident (a
    /// live mapping), so the next method's cold run starts cold.
    fn finish(&mut self) {}
    /// How the prepared method reads, for the report's notes.
    fn detail(&self) -> Option<String> {
        None
    }
}

/// What a baseline opens in `prepare` and reads in `run`: the table file and its row size.
#[derive(Default)]
struct Opened(Option<(Arc<File>, u64)>);

impl Opened {
    fn open(&mut self, env: &Env, row_size: u64) -> Res<()> {
        self.0 = Some((Arc::new(File::open(&env.path)?), row_size));
        Ok(())
    }

    fn get(&self) -> Res<(&Arc<File>, u64)> {
        self.0.as_ref().map(|(f, rs)| (f, *rs)).ok_or_else(|| "method used before prepare".into())
    }
}

// ---------------------------------------------------------------------------------------------
// eagerio backends

type Opener<E> = Box<dyn Fn(&Env, RowLayout) -> Res<RowTable<E>>>;

/// Any eagerio backend whose gather futures can be awaited from the bench's tokio runtime.
pub struct Eager<E> {
    name: String,
    open: Opener<E>,
    describe: fn(&RowTable<E>) -> String,
    table: Option<RowTable<E>>,
}

impl<E: ReadEngine> Eager<E> {
    /// `open` makes the table (untimed); `describe` says how the opened engine reads (for the
    /// report's notes: direct or buffered, fallbacks).
    pub fn new(
        name: impl Into<String>,
        open: impl Fn(&Env, RowLayout) -> Res<RowTable<E>> + 'static,
        describe: fn(&RowTable<E>) -> String,
    ) -> Eager<E> {
        Eager { name: name.into(), open: Box::new(open), describe, table: None }
    }
}

impl<E: ReadEngine> Method for Eager<E> {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn family(&self) -> Family {
        Family::Eagerio
    }

    fn prepare(&mut self, env: &Env, row_size: u64) -> Res<()> {
        self.table = None;
        self.table = Some((self.open)(env, RowLayout { base: 0, row_size, rows: None })?);
        Ok(())
    }

    fn detail(&self) -> Option<String> {
        self.table.as_ref().map(self.describe)
    }

    /// Cold: the adaptive mode's mapping keeps the pages it copied mapped, and eviction skips
    /// mapped pages, so unmap them first (as mmap methods drop their mapping).
    fn ready(&mut self, env: &Env, cold: bool) -> Res<()> {
        if cold {
            if let Some(t) = &self.table {
                t.source().unmap_resident();
            }
            env.evict()?;
        }
        Ok(())
    }

    fn finish(&mut self) {
        if let Some(t) = &self.table {
            t.source().unmap_resident();
        }
    }

    fn run(&mut self, env: &Env, ids: &[u64]) -> Res<RunOut> {
        let table = self.table.as_ref().ok_or("method used before prepare")?;
        let before = table.stats().reads;
        let t = std::time::Instant::now();
        let mut fut = table.gather(ids)?; // the reads are in flight from here
        let call = t.elapsed();
        let bytes = env.rt.block_on(&mut fut)?;
        let gap = Some(fut.stats().gap);
        Ok(RunOut { bytes, reads: Some(table.stats().reads - before), call: Some(call), gap })
    }
}

/// eagerio's tokio backend with `depth` blocking workers per gather (default options otherwise).
pub fn eager_tokio(depth: usize) -> Eager<TokioEngine> {
    let name = if depth == TokioOptions::default().depth {
        "eagerio tokio".to_string()
    } else {
        format!("eagerio tokio d{depth}")
    };
    Eager::new(
        name,
        move |env, layout| {
            let _guard = env.rt.enter();
            let opts = TokioOptions::default().depth(depth);
            Ok(TokioEngine::open_blocking(&env.path, opts)?.rows(layout)?)
        },
        |t| format!("O_DIRECT {}", t.source().engine().is_direct()),
    )
}

/// eagerio's io_uring backend: `lanes` rings of `depth` reads each (default options otherwise).
#[cfg(feature = "uring")]
pub fn eager_uring(lanes: usize, depth: usize) -> Eager<eagerio::uring::UringEngine> {
    use eagerio::uring::{Driver, DriverOptions, UringEngine, UringOptions};
    let d = DriverOptions::default();
    let shared = (lanes, depth) == (d.lanes, d.depth);
    let name = if shared { "eagerio uring".to_string() } else { format!("eagerio uring l{lanes} d{depth}") };
    Eager::new(
        name,
        move |env, layout| {
            // Inside the runtime, so the tokio fallback (if io_uring is refused) can start.
            let _guard = env.rt.enter();
            // The process-wide driver at the defaults, else a driver of this shape for the table.
            let driver = match shared {
                true => None,
                false => Some(Driver::new(DriverOptions::default().lanes(lanes).depth(depth))?),
            };
            let opts = match driver {
                Some(d) => UringOptions::default().driver(d),
                None => UringOptions::default(),
            };
            Ok(UringEngine::open_blocking(&env.path, opts)?.rows(layout)?)
        },
        |t| {
            let e = t.source().engine();
            let why = e.fallback_reason().map(|r| format!(" ({r})")).unwrap_or_default();
            format!("mode {:?}{why}, {} lane(s), O_DIRECT {}", e.mode(), e.lanes(), e.is_direct())
        },
    )
}

/// Every eagerio backend at its default depth, for W1/W2 and the W4 size sweep. A new backend
/// is one more line here (and in [`eagerio_at_depth`]).
#[allow(clippy::vec_init_then_push)] // the pushes depend on the backend features
pub fn eagerio_backends() -> Vec<Box<dyn Method>> {
    let mut v: Vec<Box<dyn Method>> = Vec::new();
    v.push(Box::new(eager_tokio(TokioOptions::default().depth)));
    #[cfg(feature = "uring")]
    v.push(Box::new(eager_uring(1, 128)));
    #[cfg(feature = "glommio")]
    v.push(Box::new(OnGlommio::eager(128)));
    v
}

/// eagerio backends at a given in-flight depth (per lane for uring, lanes 1 to 4), for the W4
/// depth sweep.
#[allow(clippy::vec_init_then_push)] // the pushes depend on the backend features
pub fn eagerio_at_depth(depth: usize) -> Vec<Box<dyn Method>> {
    let mut v: Vec<Box<dyn Method>> = Vec::new();
    v.push(Box::new(eager_tokio(depth)));
    #[cfg(feature = "uring")]
    for lanes in 1..=4 {
        v.push(Box::new(eager_uring(lanes, depth)));
    }
    #[cfg(feature = "glommio")]
    v.push(Box::new(OnGlommio::eager(depth)));
    v
}

// ---------------------------------------------------------------------------------------------
// baselines

/// `mmap` + `memcpy` of each row, with the kernel's default advice or `MADV_RANDOM`.
pub struct Mmap {
    random: bool,
    opened: Opened,
    map: Option<memmap2::Mmap>,
}

impl Mmap {
    pub fn new(random: bool) -> Mmap {
        Mmap { random, opened: Opened::default(), map: None }
    }
}

impl Method for Mmap {
    fn name(&self) -> String {
        if self.random { "mmap + MADV_RANDOM" } else { "mmap + memcpy" }.into()
    }

    fn family(&self) -> Family {
        Family::Baseline
    }

    fn prepare(&mut self, env: &Env, row_size: u64) -> Res<()> {
        self.map = None;
        self.opened.open(env, row_size)
    }

    /// A fresh mapping for every sample (dropped in `finish`): the kernel does not evict pages a
    /// live mapping holds. A warm sample keeps its mapping from the untimed pass.
    fn ready(&mut self, env: &Env, cold: bool) -> Res<()> {
        if cold {
            self.map = None;
            env.evict()?;
        }
        if self.map.is_none() {
            let (file, _) = self.opened.get()?;
            // SAFETY: the bench owns the table and nothing truncates or writes it while mapped.
            let map = unsafe { memmap2::Mmap::map(&**file)? };
            if self.random {
                map.advise(memmap2::Advice::Random)?;
            }
            self.map = Some(map);
        }
        Ok(())
    }

    fn finish(&mut self) {
        self.map = None;
    }

    fn run(&mut self, _env: &Env, ids: &[u64]) -> Res<RunOut> {
        let rs = self.opened.get()?.1 as usize;
        let map = self.map.as_ref().ok_or("mmap method run before ready")?;
        let mut out = Vec::with_capacity(ids.len() * rs);
        for &id in ids {
            let o = id as usize * rs;
            out.extend_from_slice(&map[o..o + rs]);
        }
        Ok(RunOut { bytes: out.into(), reads: None, call: None, gap: None })
    }
}

/// One buffered `pread` per row, in request order, on the calling thread.
pub struct SerialPread {
    opened: Opened,
}

impl SerialPread {
    pub fn new() -> SerialPread {
        SerialPread { opened: Opened::default() }
    }
}

impl Method for SerialPread {
    fn name(&self) -> String {
        "serial pread".into()
    }

    fn family(&self) -> Family {
        Family::Baseline
    }

    fn prepare(&mut self, env: &Env, row_size: u64) -> Res<()> {
        self.opened.open(env, row_size)
    }

    fn run(&mut self, _env: &Env, ids: &[u64]) -> Res<RunOut> {
        let (file, rs) = self.opened.get()?;
        let mut out = vec![0u8; ids.len() * rs as usize];
        for (chunk, &id) in out.chunks_exact_mut(rs as usize).zip(ids) {
            file.read_exact_at(chunk, id * rs)?;
        }
        Ok(RunOut { bytes: out.into(), reads: Some(ids.len() as u64), call: None, gap: None })
    }
}

/// A request list's distinct rows in file order, and where each lands in the output (rows back
/// to back in request order). A peer reads each distinct row once, straight into the slot of
/// its first request, and [`Distinct::fill_repeats`] copies it to the requests that repeat it:
/// one copy of every row, as a careful user writes it.
pub(crate) struct Distinct {
    /// The distinct rows, ascending.
    pub unique: Vec<u64>,
    /// For each distinct row, the index of its first request.
    pub first: Vec<u32>,
    /// (first request, repeating request) pairs.
    repeats: Vec<(u32, u32)>,
}

impl Distinct {
    pub fn of(ids: &[u64]) -> Distinct {
        let mut order: Vec<(u64, u32)> = ids.iter().enumerate().map(|(i, &id)| (id, i as u32)).collect();
        order.sort_unstable();
        let mut d = Distinct { unique: Vec::with_capacity(ids.len()), first: Vec::new(), repeats: Vec::new() };
        for (id, i) in order {
            if d.unique.last() == Some(&id) {
                d.repeats.push((*d.first.last().expect("a row before its repeat"), i));
            } else {
                d.unique.push(id);
                d.first.push(i);
            }
        }
        d
    }

    /// The output's bytes of distinct row `k`.
    pub fn slot<'a>(&self, out: &'a mut [u8], k: usize, rs: usize) -> &'a mut [u8] {
        let at = self.first[k] as usize * rs;
        &mut out[at..at + rs]
    }

    /// Copies each repeated row from its first request's slot.
    pub fn fill_repeats(&self, out: &mut [u8], rs: usize) {
        for &(from, to) in &self.repeats {
            out.copy_within(from as usize * rs..(from as usize + 1) * rs, to as usize * rs);
        }
    }
}

/// Sorted, deduplicated buffered `pread`s on `threads` std threads (the pool the field's reader
/// used), then a copy into request order.
pub struct PoolPread {
    threads: usize,
    opened: Opened,
}

impl PoolPread {
    pub fn new(threads: usize) -> PoolPread {
        PoolPread { threads, opened: Opened::default() }
    }
}

impl Method for PoolPread {
    fn name(&self) -> String {
        format!("sorted pread x{} threads", self.threads)
    }

    fn family(&self) -> Family {
        Family::Baseline
    }

    fn prepare(&mut self, env: &Env, row_size: u64) -> Res<()> {
        self.opened.open(env, row_size)
    }

    fn run(&mut self, _env: &Env, ids: &[u64]) -> Res<RunOut> {
        const BATCH: usize = 16;
        let (file, rs) = self.opened.get()?;
        let rs = rs as usize;
        let d = Distinct::of(ids);
        let mut out = vec![0u8; ids.len() * rs];
        {
            // Each distinct row's slot in the output, in file order, handed out BATCH at a time.
            let mut slots: Vec<Option<&mut [u8]>> = out.chunks_exact_mut(rs).map(Some).collect();
            let mut batches: Vec<Vec<(u64, &mut [u8])>> = Vec::with_capacity(d.unique.len().div_ceil(BATCH));
            for (&id, &first) in d.unique.iter().zip(&d.first) {
                if batches.last().is_none_or(|b| b.len() == BATCH) {
                    batches.push(Vec::with_capacity(BATCH));
                }
                let slot = slots[first as usize].take().expect("one first request per row");
                batches.last_mut().expect("pushed above").push((id, slot));
            }
            let work = Mutex::new(batches.into_iter());
            let failed: Mutex<Option<std::io::Error>> = Mutex::new(None);
            std::thread::scope(|s| {
                for _ in 0..self.threads {
                    s.spawn(|| loop {
                        let next = work.lock().expect("work lock").next();
                        let Some(batch) = next else { return };
                        for (id, b) in batch {
                            if let Err(e) = file.read_exact_at(b, id * rs as u64) {
                                failed.lock().expect("error lock").get_or_insert(e);
                                return;
                            }
                        }
                    });
                }
            });
            if let Some(e) = failed.into_inner().expect("error lock") {
                return Err(e.into());
            }
        }
        d.fill_repeats(&mut out, rs);
        Ok(RunOut { bytes: out.into(), reads: Some(d.unique.len() as u64), call: None, gap: None })
    }
}

/// What a tokio user writes today: `join_all` of one `spawn_blocking(pread)` per row.
pub struct TokioJoinAll {
    opened: Opened,
}

impl TokioJoinAll {
    pub fn new() -> TokioJoinAll {
        TokioJoinAll { opened: Opened::default() }
    }
}

impl Method for TokioJoinAll {
    fn name(&self) -> String {
        "tokio join_all(spawn_blocking pread)".into()
    }

    fn family(&self) -> Family {
        Family::Baseline
    }

    fn prepare(&mut self, env: &Env, row_size: u64) -> Res<()> {
        self.opened.open(env, row_size)
    }

    fn run(&mut self, env: &Env, ids: &[u64]) -> Res<RunOut> {
        let (file, rs) = self.opened.get()?;
        let file = file.clone();
        let rows = env.rt.block_on(async {
            futures::future::join_all(ids.iter().map(|&id| {
                let file = file.clone();
                tokio::task::spawn_blocking(move || {
                    let mut row = vec![0u8; rs as usize];
                    file.read_exact_at(&mut row, id * rs).map(|()| row)
                })
            }))
            .await
        });
        let mut out = Vec::with_capacity(ids.len() * rs as usize);
        for r in rows {
            out.extend_from_slice(&r??);
        }
        Ok(RunOut { bytes: out.into(), reads: Some(ids.len() as u64), call: None, gap: None })
    }
}

// ---------------------------------------------------------------------------------------------
// methods on a glommio executor

/// What runs on the glommio executor thread.
#[derive(Debug, Clone, Copy)]
enum OnGlommioKind {
    /// glommio's own `DmaFile::read_many` (a baseline), joining rows at most `amplification`
    /// bytes apart (0: glommio's default, no amplification).
    ReadMany { concurrency: usize, amplification: usize },
    /// eagerio's glommio backend.
    #[cfg(feature = "glommio")]
    Eager { depth: usize },
}

/// A method whose I/O lives on a glommio `LocalExecutor`: the executor and the open file stay
/// on one thread for the method's lifetime (prepare starts it), and each gather is sent there.
/// The round trip through the channel is inside the timing (microseconds).
///
/// As a baseline: `DmaFile::read_many` (O_DIRECT, io_uring) over the sorted distinct rows, as
/// glommio's docs show it, each row copied once into its place in the output.
pub struct OnGlommio {
    kind: OnGlommioKind,
    worker: Option<GlommioWorker>,
}

/// What the glommio thread is asked to do.
type GlommioReply = Result<(Bytes, u64, Option<std::time::Duration>), String>;

enum GlommioJob {
    /// Gather these ids; send the rows, the reads issued and the time inside the gather call
    /// (eagerio only).
    Gather(Arc<Vec<u64>>, mpsc::Sender<GlommioReply>),
    /// Drop what keeps the table's pages resident (eagerio's adaptive mapping), then answer.
    Unmap(mpsc::Sender<()>),
}

struct GlommioWorker {
    jobs: Option<mpsc::Sender<GlommioJob>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for GlommioWorker {
    fn drop(&mut self) {
        self.jobs = None; // closes the channel: the executor's loop ends
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl OnGlommio {
    /// glommio's `read_many` with `concurrency` reads in flight, joining rows at most
    /// `amplification` bytes apart (0 is glommio's default, `NoAmplification`), merged reads up to
    /// the device's largest single request (glommio's default).
    pub fn read_many(concurrency: usize, amplification: usize) -> OnGlommio {
        OnGlommio { kind: OnGlommioKind::ReadMany { concurrency, amplification }, worker: None }
    }

    /// eagerio's glommio backend with `depth` reads in flight.
    #[cfg(feature = "glommio")]
    pub fn eager(depth: usize) -> OnGlommio {
        OnGlommio { kind: OnGlommioKind::Eager { depth }, worker: None }
    }

    /// Has the glommio thread drop what keeps the table's pages resident, and waits for it.
    fn unmap(&self) {
        if let Some(jobs) = self.worker.as_ref().and_then(|w| w.jobs.as_ref()) {
            let (tx, rx) = mpsc::channel();
            if jobs.send(GlommioJob::Unmap(tx)).is_ok() {
                let _ = rx.recv();
            }
        }
    }

    fn depth(&self) -> usize {
        match self.kind {
            OnGlommioKind::ReadMany { concurrency, .. } => concurrency,
            #[cfg(feature = "glommio")]
            OnGlommioKind::Eager { depth } => depth,
        }
    }
}

impl Method for OnGlommio {
    fn name(&self) -> String {
        let base = match self.kind {
            OnGlommioKind::ReadMany { amplification: 0, .. } => "glommio read_many".to_string(),
            OnGlommioKind::ReadMany { amplification, .. } => {
                format!("glommio read_many {} KiB amplification", amplification >> 10)
            }
            #[cfg(feature = "glommio")]
            OnGlommioKind::Eager { .. } => "eagerio glommio".to_string(),
        };
        match self.depth() {
            128 => base,
            d => format!("{base} d{d}"),
        }
    }

    fn family(&self) -> Family {
        match self.kind {
            OnGlommioKind::ReadMany { .. } => Family::Baseline,
            #[cfg(feature = "glommio")]
            OnGlommioKind::Eager { .. } => Family::Eagerio,
        }
    }

    fn prepare(&mut self, env: &Env, row_size: u64) -> Res<()> {
        self.worker = None;
        let (jobs, rx) = mpsc::channel::<GlommioJob>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
        let (path, kind) = (env.path.clone(), self.kind);
        let thread = std::thread::Builder::new()
            .name("glommio-bench".into())
            .spawn(move || glommio_thread(&path, row_size, kind, rx, ready_tx))?;
        let worker = GlommioWorker { jobs: Some(jobs), thread: Some(thread) };
        match ready_rx.recv() {
            Ok(Ok(())) => {
                self.worker = Some(worker);
                Ok(())
            }
            Ok(Err(e)) => Err(format!("glommio unavailable: {e}").into()),
            Err(_) => Err("the glommio thread exited during setup".into()),
        }
    }

    /// As [`Eager::ready`]: eviction skips the pages eagerio's adaptive mapping maps.
    fn ready(&mut self, env: &Env, cold: bool) -> Res<()> {
        if cold {
            self.unmap();
            env.evict()?;
        }
        Ok(())
    }

    fn finish(&mut self) {
        self.unmap();
    }

    fn run(&mut self, _env: &Env, ids: &[u64]) -> Res<RunOut> {
        let w = self.worker.as_ref().ok_or("method used before prepare")?;
        let (tx, rx) = mpsc::channel();
        let job = GlommioJob::Gather(Arc::new(ids.to_vec()), tx);
        w.jobs.as_ref().expect("open while the worker lives").send(job).map_err(|_| "the glommio thread is gone")?;
        let (bytes, reads, call) = rx.recv()??;
        Ok(RunOut { bytes, reads: Some(reads), call, gap: None })
    }
}

fn glommio_thread(
    path: &Path,
    row_size: u64,
    kind: OnGlommioKind,
    jobs: mpsc::Receiver<GlommioJob>,
    ready: mpsc::Sender<Result<(), String>>,
) {
    let depth = match kind {
        OnGlommioKind::ReadMany { concurrency, .. } => concurrency,
        #[cfg(feature = "glommio")]
        OnGlommioKind::Eager { depth } => depth,
    };
    let builder = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound).ring_depth(depth.max(128));
    let ex = match builder.make() {
        Ok(ex) => ex,
        Err(e) => {
            let _ = ready.send(Err(e.to_string()));
            return;
        }
    };
    // Nothing else runs on this executor, so blocking on the channel between gathers is fine.
    ex.run(async move {
        match kind {
            OnGlommioKind::ReadMany { concurrency, amplification } => {
                read_many_loop(path, row_size, concurrency, amplification, jobs, ready).await
            }
            #[cfg(feature = "glommio")]
            OnGlommioKind::Eager { depth } => eager_glommio_loop(path, row_size, depth, jobs, ready).await,
        }
    });
}

async fn read_many_loop(
    path: &Path,
    row_size: u64,
    concurrency: usize,
    amplification: usize,
    jobs: mpsc::Receiver<GlommioJob>,
    ready: mpsc::Sender<Result<(), String>>,
) {
    use futures::StreamExt;
    use glommio::io::{DmaFile, MergedBufferLimit, ReadAmplificationLimit};

    let file = match DmaFile::open(path).await {
        Ok(f) => std::rc::Rc::new(f),
        Err(e) => {
            let _ = ready.send(Err(e.to_string()));
            return;
        }
    };
    let _ = ready.send(Ok(()));
    let rs = row_size as usize;
    while let Ok(job) = jobs.recv() {
        let (ids, reply) = match job {
            GlommioJob::Gather(ids, reply) => (ids, reply),
            GlommioJob::Unmap(done) => {
                let _ = done.send(()); // nothing mapped here
                continue;
            }
        };
        // The executor's counters are taken (reset) on every read of them.
        let _ = glommio::executor().io_stats();
        let result = async {
            let d = Distinct::of(&ids);
            let iovs = futures::stream::iter(d.unique.iter().map(|&id| (id * row_size, rs)));
            let amp = match amplification {
                0 => ReadAmplificationLimit::NoAmplification,
                n => ReadAmplificationLimit::Custom(n),
            };
            let mut results =
                file.read_many(iovs, MergedBufferLimit::DeviceMaxSingleRequest, amp).with_concurrency(concurrency);
            let mut out = vec![0u8; ids.len() * rs];
            let mut k = 0usize;
            while let Some(r) = results.next().await {
                let ((pos, size), data) = r.map_err(|e| e.to_string())?;
                // read_many yields in submission order.
                if k >= d.unique.len() || pos != d.unique[k] * row_size || size != rs || data.len() != rs {
                    return Err(format!("read_many gave ({pos}, {size}, {} B) for distinct row #{k}", data.len()));
                }
                d.slot(&mut out, k, rs).copy_from_slice(&data);
                k += 1;
            }
            if k != d.unique.len() {
                return Err(format!("read_many gave {k} of {} rows", d.unique.len()));
            }
            d.fill_repeats(&mut out, rs);
            let reads = glommio::executor().io_stats().all_rings().file_reads().0;
            Ok((Bytes::from(out), reads, None))
        }
        .await;
        let _ = reply.send(result);
    }
}

#[cfg(feature = "glommio")]
async fn eager_glommio_loop(
    path: &Path,
    row_size: u64,
    depth: usize,
    jobs: mpsc::Receiver<GlommioJob>,
    ready: mpsc::Sender<Result<(), String>>,
) {
    use eagerio::glommio::{GlommioEngine, GlommioOptions};
    let opts = GlommioOptions::default().depth(depth);
    let layout = RowLayout { base: 0, row_size, rows: None };
    let table = match GlommioEngine::open_rows(path, layout, opts).await {
        Ok(t) => t,
        Err(e) => {
            let _ = ready.send(Err(e.to_string()));
            return;
        }
    };
    let _ = ready.send(Ok(()));
    while let Ok(job) = jobs.recv() {
        let (ids, reply) = match job {
            GlommioJob::Gather(ids, reply) => (ids, reply),
            GlommioJob::Unmap(done) => {
                table.source().unmap_resident();
                let _ = done.send(());
                continue;
            }
        };
        let before = table.stats().reads;
        let t = std::time::Instant::now();
        let result = match table.gather(&ids) {
            Ok(fut) => {
                let call = t.elapsed();
                fut.await.map(|b| (b, call)).map_err(|e| e.to_string())
            }
            Err(e) => Err(e.to_string()),
        };
        let reads = table.stats().reads - before;
        let _ = reply.send(result.map(|(b, call)| (b, reads, Some(call))));
    }
}

/// The W1/W2 method list: eagerio backends, then every baseline.
pub fn all_methods() -> Vec<Box<dyn Method>> {
    let mut m = eagerio_backends();
    m.push(Box::new(Mmap::new(false)));
    m.push(Box::new(Mmap::new(true)));
    m.push(Box::new(SerialPread::new()));
    m.push(Box::new(PoolPread::new(32)));
    m.push(Box::new(TokioJoinAll::new()));
    for amplification in [0, 8 << 10, 16 << 10, 32 << 10] {
        m.push(Box::new(OnGlommio::read_many(128, amplification)));
    }
    m.push(Box::new(UringLoop::new(128)));
    m.push(Box::new(UringLoop::new(512)));
    m
}

// ---------------------------------------------------------------------------------------------
// a hand-written io_uring loop

/// What a user writes by hand with the `io-uring` crate: one ring, the file opened `O_DIRECT`,
/// the distinct rows in file order, each read as the 4 KiB-aligned span around it into a slot of
/// its own, `depth` reads in flight, each row copied once into its place in the output. No
/// coalescing, no registered buffers, no thread: the caller's thread submits and reaps. The ring
/// and the slots are made once, in `prepare`.
pub struct UringLoop {
    depth: usize,
    state: Option<LoopState>,
}

/// The hand-written loop's read alignment: a page, as glommio's DMA reads.
const PAGE: u64 = 4096;

struct LoopState {
    file: File,
    row_size: u64,
    ring: io_uring::IoUring,
    slots: Vec<AlignedBuf>,
}

impl UringLoop {
    pub fn new(depth: usize) -> UringLoop {
        UringLoop { depth, state: None }
    }
}

/// 4 KiB-aligned memory for `O_DIRECT` reads.
struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

impl AlignedBuf {
    fn new(len: usize) -> AlignedBuf {
        let layout = std::alloc::Layout::from_size_align(len.max(4096), 4096).expect("a valid layout");
        // SAFETY: the layout's size is non-zero.
        let ptr = unsafe { std::alloc::alloc(layout) };
        AlignedBuf {
            ptr: std::ptr::NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout)),
            layout,
        }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; no read is in flight into it: `run` reaps
        // every read it submitted before it returns, and a loop's ring is declared before its
        // slots, so it is closed first.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

impl Method for UringLoop {
    fn name(&self) -> String {
        format!("hand-written io_uring loop QD{}", self.depth)
    }

    fn family(&self) -> Family {
        Family::Baseline
    }

    fn prepare(&mut self, env: &Env, row_size: u64) -> Res<()> {
        use std::os::unix::fs::OpenOptionsExt;
        self.state = None;
        let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(&env.path)?;
        let slot_len = (row_size as usize).div_ceil(PAGE as usize) * PAGE as usize + PAGE as usize;
        self.state = Some(LoopState {
            file,
            row_size,
            ring: io_uring::IoUring::new(self.depth.next_power_of_two() as u32)?,
            slots: (0..self.depth).map(|_| AlignedBuf::new(slot_len)).collect(),
        });
        Ok(())
    }

    fn run(&mut self, _env: &Env, ids: &[u64]) -> Res<RunOut> {
        use io_uring::{opcode, types};
        use std::os::fd::AsRawFd;
        let LoopState { file, row_size, ring, slots } = self.state.as_mut().ok_or("method used before prepare")?;
        let rs = *row_size;
        let d = Distinct::of(ids);
        let span = |id: u64| {
            let start = id * rs / PAGE * PAGE;
            (start, ((id * rs + rs).div_ceil(PAGE) * PAGE - start) as usize)
        };
        let mut free: Vec<usize> = (0..self.depth).collect();
        let mut out = vec![0u8; ids.len() * rs as usize];
        let (mut next, mut in_flight, mut done) = (0usize, 0usize, 0usize);
        while done < d.unique.len() {
            while in_flight < self.depth && next < d.unique.len() {
                let b = free.pop().expect("a free slot while under depth");
                let (offset, len) = span(d.unique[next]);
                let read = opcode::Read::new(types::Fd(file.as_raw_fd()), slots[b].ptr.as_ptr(), len as u32)
                    .offset(offset)
                    .build()
                    .user_data(((next as u64) << 16) | b as u64);
                // SAFETY: the slot stays allocated, and is not touched, until this read's
                // completion is reaped below (every submitted read is reaped before `run` ends).
                unsafe { ring.submission().push(&read)? };
                next += 1;
                in_flight += 1;
            }
            ring.submit_and_wait(1)?;
            let reaped: Vec<(u64, i32)> = ring.completion().map(|c| (c.user_data(), c.result())).collect();
            for (data, res) in reaped {
                let (k, b) = ((data >> 16) as usize, (data & 0xffff) as usize);
                in_flight -= 1;
                let (offset, len) = span(d.unique[k]);
                if res < 0 || (res as usize) < (d.unique[k] * rs + rs - offset) as usize {
                    // Reap what is still in flight before the slots can be reused.
                    while in_flight > 0 {
                        ring.submit_and_wait(1)?;
                        in_flight -= ring.completion().count();
                    }
                    return Err(format!("read of {len} bytes at {offset}: result {res}").into());
                }
                let at = (d.unique[k] * rs - offset) as usize;
                // SAFETY: the kernel wrote `res` bytes into this slot and its read is complete.
                let got = unsafe { std::slice::from_raw_parts(slots[b].ptr.as_ptr().add(at), rs as usize) };
                d.slot(&mut out, k, rs as usize).copy_from_slice(got);
                free.push(b);
                done += 1;
            }
        }
        d.fill_repeats(&mut out, rs as usize);
        Ok(RunOut { bytes: out.into(), reads: Some(d.unique.len() as u64), call: None, gap: None })
    }
}
