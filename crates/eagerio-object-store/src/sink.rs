//! A sink over a multipart upload.
//!
//! # How appends become parts
//! The sink's bytes form one stream, in append order. [`ObjectStoreWriter`] cuts the stream
//! into parts of exactly [`WriterOptions::part_size`] bytes (the last one may be shorter) and
//! calls `put_part` and spawns its future the moment a part is full, inside the `append` call
//! that filled it. Parts upload concurrently; object_store numbers them in call order, so the
//! object assembles in stream order.
//!
//! # When a write's future resolves
//! When every part holding its bytes has been uploaded, except the bytes still in the part being
//! filled, which count as accepted: an append that does not fill a part resolves at once (its
//! bytes go up with a later part, or with the last part at `sync`/`close`), one that fills parts
//! resolves when their uploads finish and reports their failure. So `append(x).await` never waits
//! for a later write, and the sink's in-flight bound covers the parts being uploaded.
//!
//! # Flush, sync and close
//! - `flush` waits for every earlier write as above and reports every failure.
//! - `sync` and `close` *complete* the upload: the last part goes up, `complete()` publishes the
//!   object. An object store makes nothing durable or visible before that, and cannot append to
//!   a published object: after `sync`, further writes fail with a message saying so.
//! - After any part fails (object_store's retries exhausted), the upload cannot be completed:
//!   it is aborted (`abort()`) as soon as the parts still in flight settle, later writes fail at
//!   once with the first failure, and `close` reports it. Nothing partial is ever published.
//!
//! # What dropping the sink does
//! If the upload was neither completed nor aborted, the last handle's drop aborts it on the
//! runtime the sink was created on (best effort; configure a lifecycle rule for uploads that a
//! crash leaves behind).

use std::{
    collections::{BTreeMap, HashMap},
    fmt, io,
    path::{Path as FsPath, PathBuf},
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex, MutexGuard,
    },
};

use bytes::Bytes;
use eagerio_core::{
    backend::{SyncOp, WriteEngine, WriteOp},
    fault::{self, Hook, IoKind, IoPoint},
    DataSink, Error, FlushFuture, ReadyFuture, Result, Sink, SinkOptions, SinkStats, WriteFuture,
};
use object_store::{path::Path, MultipartUpload, ObjectStore, ObjectStoreExt, PutPayload};
use tokio::task::JoinHandle;

use crate::error::to_io;

/// Default part size: 8 MiB (S3 and GCS need at least 5 MiB for every part but the last).
pub const DEFAULT_PART_SIZE: usize = 8 << 20;

/// Options of an [`ObjectStoreWriter`]: `WriterOptions::default().part_size(16 << 20)`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WriterOptions {
    /// Sink options: the in-flight bound (bytes of writes whose parts are uploading).
    /// `append_from` must be 0: an object store cannot write after a hole.
    pub sink: SinkOptions,
    /// Bytes per part, every part but the last. S3 and GCS refuse parts under 5 MiB at
    /// `complete` (the error is reported by `close`); memory and local stores take any size.
    /// Default [`DEFAULT_PART_SIZE`].
    pub part_size: usize,
    /// The name used for the object in errors, and the one a fault hook is installed for
    /// ([`fault::inject`]). Default `<store>/<path>`.
    pub name: Option<PathBuf>,
}

eagerio_core::options_setters!(WriterOptions { sink: SinkOptions, part_size: usize } some { name: PathBuf });

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions { sink: SinkOptions::default(), part_size: DEFAULT_PART_SIZE, name: None }
    }
}

/// A failure shared by every write and sync that reports it.
#[derive(Debug, Clone)]
struct Failure {
    kind: io::ErrorKind,
    message: String,
}

impl Failure {
    fn io(&self) -> io::Error {
        io::Error::new(self.kind, self.message.clone())
    }
}

enum Phase {
    /// Taking writes.
    Open,
    /// `sync`/`close` started completing the upload.
    Finishing,
    /// Published.
    Completed,
    /// A part or the completion failed; the upload is (being) aborted.
    Failed,
}

/// One accepted write, completed once every part holding its bytes has settled.
struct OpSlot {
    op: Mutex<Option<WriteOp<ObjectStoreWriter>>>,
    /// Parts still uploading, plus one while the write is being cut into parts.
    remaining: AtomicUsize,
    error: Mutex<Option<io::Error>>,
}

impl OpSlot {
    /// Drops one reference; the last completes the write.
    fn release(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            let op = lock(&self.op).take();
            let err = lock(&self.error).take();
            if let Some(op) = op {
                op.complete(err.map_or(Ok(()), Err));
            }
        }
    }
}

struct State {
    phase: Phase,
    upload: Option<Box<dyn MultipartUpload>>,
    /// Bytes of the stream accepted so far: where the next write must start.
    pos: u64,
    /// Writes that arrived ahead of `pos` (concurrent appends reach the engine in any order).
    pending: BTreeMap<u64, WriteOp<ObjectStoreWriter>>,
    /// The part being filled, and where it starts in the stream.
    part: Vec<Bytes>,
    part_len: usize,
    part_start: u64,
    parts_started: usize,
    /// Part uploads not yet reaped.
    tasks: Vec<JoinHandle<()>>,
    /// Writes the [`ObjectSink`] refused, by their buffer's address, with the reason.
    rejects: HashMap<usize, String>,
    failure: Option<Failure>,
    finish_waiters: Vec<SyncOp<ObjectStoreWriter>>,
}

struct Inner {
    store: Arc<dyn ObjectStore>,
    location: Path,
    name: PathBuf,
    part_size: usize,
    hook: Option<Hook>,
    rt: tokio::runtime::Handle,
    state: Mutex<State>,
    parts_uploaded: AtomicU64,
    bytes_uploaded: AtomicU64,
    requests: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes one object through a multipart upload; the engine of the [`Sink`] inside an
/// [`ObjectSink`]. Cloning shares the upload.
///
/// Used directly as `Sink<ObjectStoreWriter>` (see [`ObjectSink::into_sink`]) it takes appends
/// only: a `write_at` behind the append position fails, and one ahead of it waits until appends
/// reach it (possibly forever). [`ObjectSink`] refuses such writes at call time.
#[derive(Clone)]
pub struct ObjectStoreWriter {
    inner: Arc<Inner>,
}

impl fmt::Debug for ObjectStoreWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectStoreWriter")
            .field("object", &self.inner.name)
            .field("parts_uploaded", &self.parts_uploaded())
            .finish()
    }
}

impl ObjectStoreWriter {
    /// Starts a multipart upload of `location` in `store` (one request) and returns its sink.
    /// Nothing is visible at `location` until `close` (or `sync`) completes the upload.
    ///
    /// # Errors
    /// [`Error::Io`] (op `Open`) if the store refuses to start the upload, with the HTTP status
    /// in the message; [`Error::InvalidOptions`] for a zero part size or in-flight bound;
    /// [`Error::Unavailable`] outside a tokio runtime.
    pub async fn create(store: Arc<dyn ObjectStore>, location: Path, opts: WriterOptions) -> Result<ObjectSink> {
        let rt = crate::runtime("creating an object")?;
        if opts.part_size == 0 {
            return Err(Error::invalid_option("WriterOptions::part_size", "parts need at least one byte"));
        }
        if opts.sink.append_from != 0 {
            return Err(Error::invalid_option(
                "append_from",
                "an object is written from its first byte: object stores cannot leave a hole",
            ));
        }
        let name = opts.name.clone().unwrap_or_else(|| PathBuf::from(format!("{store}/{location}")));
        let hook = fault::injected(&name);
        let upload = store
            .put_multipart(&location)
            .await
            .map_err(|e| Error::open(&name, to_io(&format!("starting the multipart upload of {location}"), &e)))?;
        let writer = ObjectStoreWriter {
            inner: Arc::new(Inner {
                store,
                location,
                name,
                part_size: opts.part_size,
                hook,
                rt,
                state: Mutex::new(State {
                    phase: Phase::Open,
                    upload: Some(upload),
                    pos: opts.sink.append_from,
                    pending: BTreeMap::new(),
                    part: Vec::new(),
                    part_len: 0,
                    part_start: opts.sink.append_from,
                    parts_started: 0,
                    tasks: Vec::new(),
                    rejects: HashMap::new(),
                    failure: None,
                    finish_waiters: Vec::new(),
                }),
                parts_uploaded: AtomicU64::new(0),
                bytes_uploaded: AtomicU64::new(0),
                requests: AtomicU64::new(1),
            }),
        };
        Ok(ObjectSink { sink: Sink::new(writer, opts.sink)?, gate: Arc::new(Mutex::new(())) })
    }

    /// Parts uploaded successfully so far.
    pub fn parts_uploaded(&self) -> u64 {
        self.inner.parts_uploaded.load(Ordering::Relaxed)
    }

    /// Bytes of those parts.
    pub fn bytes_uploaded(&self) -> u64 {
        self.inner.bytes_uploaded.load(Ordering::Relaxed)
    }

    /// Requests issued: the upload's start, every part, the completion or the abort.
    pub fn requests(&self) -> u64 {
        self.inner.requests.load(Ordering::Relaxed)
    }

    /// Whether the upload was completed: the object is published.
    pub fn is_completed(&self) -> bool {
        matches!(lock(&self.inner.state).phase, Phase::Completed)
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.inner.store
    }

    /// The object's path in the store.
    pub fn location(&self) -> &Path {
        &self.inner.location
    }

    fn reject(&self, addr: usize, reason: String) {
        lock(&self.inner.state).rejects.insert(addr, reason);
    }
}

/// Work to do once the state lock is released (completing a write may re-enter the engine).
#[derive(Default)]
struct After {
    done: Vec<(WriteOp<ObjectStoreWriter>, io::Result<()>)>,
    release: Vec<Arc<OpSlot>>,
}

impl After {
    fn run(self) {
        for (op, res) in self.done {
            op.complete(res);
        }
        for s in self.release {
            s.release();
        }
    }
}

impl Inner {
    fn unsupported(message: String) -> io::Error {
        io::Error::new(io::ErrorKind::Unsupported, message)
    }

    /// Takes `op` into the stream at `st.pos`; starts every part it fills.
    fn accept(self: &Arc<Self>, st: &mut State, op: WriteOp<ObjectStoreWriter>, after: &mut After) {
        let len = op.data().len();
        // The stream moves past a refused write too, so the writes behind it are not left
        // waiting for it in `pending`.
        st.pos += len as u64;
        match st.phase {
            Phase::Open => {}
            Phase::Failed => {
                let f = st.failure.as_ref().map_or_else(String::new, |f| f.message.clone());
                let msg = format!("the multipart upload was aborted, nothing more is uploaded: {f}");
                after.done.push((op, Err(io::Error::new(io::ErrorKind::BrokenPipe, msg))));
                return;
            }
            Phase::Finishing | Phase::Completed => {
                let msg = "the object was already completed by sync or close: a published object cannot be appended to";
                after.done.push((op, Err(Self::unsupported(msg.into()))));
                return;
            }
        }
        let data = op.data().clone();
        let slot =
            Arc::new(OpSlot { op: Mutex::new(Some(op)), remaining: AtomicUsize::new(1), error: Mutex::new(None) });
        let mut at = 0;
        while at < len {
            let take = (self.part_size - st.part_len).min(len - at);
            st.part.push(data.slice(at..at + take));
            st.part_len += take;
            at += take;
            if st.part_len == self.part_size {
                self.start_part(st, Some(&slot));
            }
        }
        after.release.push(slot);
    }

    /// Cuts the part being filled and spawns its upload, which `waiter` (if any) waits for.
    fn start_part(self: &Arc<Self>, st: &mut State, waiter: Option<&Arc<OpSlot>>) {
        let payload: PutPayload = std::mem::take(&mut st.part).into_iter().collect();
        let len = std::mem::take(&mut st.part_len);
        let start = st.part_start;
        st.part_start += len as u64;
        let no = st.parts_started;
        st.parts_started += 1;
        let upload = st.upload.as_mut().expect("an open upload holds its MultipartUpload");
        let fut = upload.put_part(payload);
        let waiters: Vec<Arc<OpSlot>> = waiter
            .map(|w| {
                w.remaining.fetch_add(1, Ordering::AcqRel);
                w.clone()
            })
            .into_iter()
            .collect();
        self.requests.fetch_add(1, Ordering::Relaxed);
        let inner = self.clone();
        st.tasks.retain(|t| !t.is_finished());
        st.tasks.push(self.rt.spawn(async move {
            let what = format!("uploading part #{no} (bytes {start}..{} of the stream)", start + len as u64);
            let point = IoPoint { kind: IoKind::Write, offset: start, len };
            let res = match inner.check(point) {
                Err(e) => Err(io::Error::new(e.kind(), format!("{what} failed: {e}"))),
                Ok(()) => fut.await.map_err(|e| to_io(&what, &e)),
            };
            inner.part_done(len, waiters, res);
        }));
    }

    /// Asks the hook about `point`, catching an injected panic as a failure.
    fn check(&self, point: IoPoint) -> io::Result<()> {
        fault::failure(self.hook.as_ref(), point).map(|_| ())
    }

    fn part_done(self: &Arc<Self>, len: usize, waiters: Vec<Arc<OpSlot>>, res: io::Result<()>) {
        match &res {
            Ok(()) => {
                self.parts_uploaded.fetch_add(1, Ordering::Relaxed);
                self.bytes_uploaded.fetch_add(len as u64, Ordering::Relaxed);
            }
            Err(e) => self.fail(Failure { kind: e.kind(), message: e.to_string() }),
        }
        for w in waiters {
            if let Err(e) = &res {
                lock(&w.error).get_or_insert_with(|| io::Error::new(e.kind(), e.to_string()));
            }
            w.release();
        }
    }

    /// Records the first failure; aborts an open upload once its other parts settle.
    fn fail(self: &Arc<Self>, failure: Failure) {
        let mut st = lock(&self.state);
        if st.failure.is_none() {
            st.failure = Some(failure);
        }
        match st.phase {
            Phase::Open => {
                st.phase = Phase::Failed;
                let tasks = std::mem::take(&mut st.tasks);
                if let Some(upload) = st.upload.take() {
                    let inner = self.clone();
                    drop(self.rt.spawn(async move {
                        for t in tasks {
                            let _ = t.await;
                        }
                        if let Err(e) = inner.abort(upload).await {
                            tracing::warn!(object = ?inner.name, "aborting the failed multipart upload: {e}");
                        }
                    }));
                }
            }
            // The finishing task sees the failure after the parts settle and aborts.
            Phase::Finishing => st.phase = Phase::Failed,
            Phase::Failed | Phase::Completed => {}
        }
    }

    async fn abort(&self, mut upload: Box<dyn MultipartUpload>) -> io::Result<()> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        upload.abort().await.map_err(|e| to_io("aborting the multipart upload", &e))
    }

    /// Uploads the last part, waits for every part, completes (or aborts) the upload, and
    /// reports to every waiting sync.
    async fn finish(self: Arc<Self>, tasks: Vec<JoinHandle<()>>) {
        for t in tasks {
            if let Err(e) = t.await {
                let message = format!("a part's upload task ended abnormally: {e}");
                self.fail(Failure { kind: io::ErrorKind::Other, message });
            }
        }
        let (upload, failed) = {
            let mut st = lock(&self.state);
            (st.upload.take(), matches!(st.phase, Phase::Failed))
        };
        let result = match (upload, failed) {
            (None, _) => Err(self.failure_or("the upload was already settled")),
            (Some(upload), true) => {
                let mut f = self.failure_or("a part failed");
                if let Err(e) = self.abort(upload).await {
                    f.message = format!("{}; aborting the upload also failed: {e}", f.message);
                }
                Err(f)
            }
            (Some(mut upload), false) => {
                let done = match self.check(IoPoint { kind: IoKind::Sync, offset: 0, len: 0 }) {
                    Err(e) => Err(io::Error::new(e.kind(), format!("completing the multipart upload failed: {e}"))),
                    Ok(()) => {
                        self.requests.fetch_add(1, Ordering::Relaxed);
                        upload.complete().await.map(drop).map_err(|e| to_io("completing the multipart upload", &e))
                    }
                };
                match done {
                    Ok(()) => Ok(()),
                    Err(e) => {
                        let mut f = Failure { kind: e.kind(), message: e.to_string() };
                        if let Err(a) = self.abort(upload).await {
                            f.message = format!("{}; aborting the upload also failed: {a}", f.message);
                        }
                        Err(f)
                    }
                }
            }
        };
        let waiters = {
            let mut st = lock(&self.state);
            match &result {
                Ok(()) => st.phase = Phase::Completed,
                Err(f) => {
                    st.phase = Phase::Failed;
                    st.failure.get_or_insert_with(|| f.clone());
                }
            }
            std::mem::take(&mut st.finish_waiters)
        };
        for w in waiters {
            w.complete(result.as_ref().map(|_| ()).map_err(Failure::io));
        }
    }

    fn failure_or(&self, fallback: &str) -> Failure {
        lock(&self.state)
            .failure
            .clone()
            .unwrap_or_else(|| Failure { kind: io::ErrorKind::Other, message: fallback.to_owned() })
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(mut upload) = st.upload.take() {
            let name = self.name.clone();
            drop(self.rt.spawn(async move {
                if let Err(e) = upload.abort().await {
                    tracing::warn!(object = ?name, "aborting an unfinished multipart upload on drop: {e}");
                }
            }));
        }
    }
}

impl WriteEngine for ObjectStoreWriter {
    fn path(&self) -> &FsPath {
        &self.inner.name
    }

    fn submit_write(&self, op: WriteOp<Self>) {
        let len = op.data().len();
        if len == 0 {
            return op.complete(Ok(()));
        }
        let inner = &self.inner;
        let mut after = After::default();
        {
            let mut st = lock(&inner.state);
            let offset = op.offset();
            if let Some(reason) = st.rejects.remove(&(op.data().as_ptr() as usize)) {
                after.done.push((op, Err(Inner::unsupported(reason))));
            } else if offset < st.pos
                || st
                    .pending
                    .range(..offset + len as u64)
                    .next_back()
                    .is_some_and(|(&o, p)| o + p.data().len() as u64 > offset)
            {
                let msg = format!(
                    "object stores take appends only: bytes {offset}..{} overlap bytes already written (the stream is at {})",
                    offset + len as u64,
                    st.pos
                );
                after.done.push((op, Err(Inner::unsupported(msg))));
            } else if offset > st.pos {
                st.pending.insert(offset, op);
            } else {
                inner.accept(&mut st, op, &mut after);
                while st.pending.first_key_value().is_some_and(|(&o, _)| o == st.pos) {
                    let (_, op) = st.pending.pop_first().expect("checked above");
                    inner.accept(&mut st, op, &mut after);
                }
            }
        }
        after.run();
    }

    fn submit_sync(&self, op: SyncOp<Self>) {
        let inner = &self.inner;
        let mut st = lock(&inner.state);
        match st.phase {
            Phase::Completed => {
                drop(st);
                op.complete(Ok(()));
            }
            Phase::Failed => {
                let f = st.failure.clone();
                drop(st);
                let msg = f.map_or_else(|| "the upload failed".to_owned(), |f| f.message);
                op.complete(Err(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    format!("the multipart upload was aborted: {msg}"),
                )));
            }
            Phase::Finishing => st.finish_waiters.push(op),
            Phase::Open => {
                st.phase = Phase::Finishing;
                st.finish_waiters.push(op);
                if st.part_len > 0 {
                    inner.start_part(&mut st, None);
                }
                let tasks = std::mem::take(&mut st.tasks);
                drop(st);
                drop(inner.rt.spawn(inner.clone().finish(tasks)));
            }
        }
    }
}

/// The eager sink of one object: appends become multipart-upload parts. Cloning shares it.
///
/// - [`append`](DataSink::append) starts the upload of every part it fills before returning.
/// - [`write_at`](DataSink::write_at) is an append when `offset` is the append position; any
///   other offset fails at once with an `Unsupported` error saying that object stores take
///   appends only (the failure is also reported by the next flush or close).
/// - [`close`](DataSink::close) uploads the last part and completes the upload; an error from
///   any part or from the completion aborts the upload and is reported.
///
/// # How appends become parts
/// The sink's bytes form one stream, in append order. [`ObjectStoreWriter`] cuts the stream
/// into parts of exactly [`WriterOptions::part_size`] bytes (the last one may be shorter) and
/// calls `put_part` and spawns its future the moment a part is full, inside the `append` call
/// that filled it. Parts upload concurrently; object_store numbers them in call order, so the
/// object assembles in stream order.
///
/// # When a write's future resolves
/// When every part holding its bytes has been uploaded, except the bytes still in the part being
/// filled, which count as accepted: an append that does not fill a part resolves at once (its
/// bytes go up with a later part, or with the last part at `sync`/`close`), one that fills parts
/// resolves when their uploads finish and reports their failure. So `append(x).await` never waits
/// for a later write, and the sink's in-flight bound covers the parts being uploaded.
///
/// # Flush, sync and close
/// - `flush` waits for every earlier write as above and reports every failure.
/// - `sync` and `close` *complete* the upload: the last part goes up, `complete()` publishes the
///   object. An object store makes nothing durable or visible before that, and cannot append to
///   a published object: after `sync`, further writes fail with a message saying so.
/// - After any part fails (object_store's retries exhausted), the upload cannot be completed:
///   it is aborted (`abort()`) as soon as the parts still in flight settle, later writes fail at
///   once with the first failure, and `close` reports it. Nothing partial is ever published.
///
/// # What dropping the sink does
/// If the upload was neither completed nor aborted, the last handle's drop aborts it on the
/// runtime the sink was created on (best effort; configure a lifecycle rule for uploads that a
/// crash leaves behind).
#[derive(Clone)]
pub struct ObjectSink {
    sink: Sink<ObjectStoreWriter>,
    /// Makes "is `offset` the append position? then append" one step.
    gate: Arc<Mutex<()>>,
}

impl fmt::Debug for ObjectSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectSink").field("sink", &self.sink).finish()
    }
}

impl ObjectSink {
    /// The engine: upload counters, the store, the object's path.
    pub fn writer(&self) -> &ObjectStoreWriter {
        self.sink.engine()
    }

    /// Where the next append lands.
    pub fn append_offset(&self) -> u64 {
        self.sink.append_offset()
    }

    /// The core sink underneath, for code generic over `Sink<E>`. It takes appends only; see
    /// [`ObjectStoreWriter`] for what its `write_at` does.
    pub fn into_sink(self) -> Sink<ObjectStoreWriter> {
        self.sink
    }
}

impl DataSink for ObjectSink {
    fn write_at(&self, offset: u64, data: Bytes) -> WriteFuture {
        let _gate = lock(&self.gate);
        let at = self.sink.append_offset();
        if offset == at {
            return self.sink.append(data);
        }
        if data.is_empty() {
            return self.sink.write_at(offset, data);
        }
        // A private copy gives the refused write a buffer address no other live write can have.
        let copy = Bytes::copy_from_slice(&data);
        let reason = format!(
            "object stores take appends only: a write at offset {offset} ({} bytes) is not at the append position {at}",
            data.len()
        );
        self.writer().reject(copy.as_ptr() as usize, reason);
        self.sink.write_at(offset, copy)
    }

    fn append(&self, data: Bytes) -> WriteFuture {
        let _gate = lock(&self.gate);
        self.sink.append(data)
    }

    fn flush(&self) -> FlushFuture {
        self.sink.flush()
    }

    fn sync(&self) -> FlushFuture {
        self.sink.sync()
    }

    fn close(&self) -> FlushFuture {
        self.sink.close()
    }

    fn ready(&self) -> ReadyFuture {
        self.sink.ready()
    }

    fn stats(&self) -> SinkStats {
        self.sink.stats()
    }
}
