//! A user's column writer and the two orderings it must keep, written once and run two ways:
//! normally (std threads, `futures::executor::block_on`) and under loom (`--cfg eagerio_loom`),
//! where loom runs it in every interleaving of its threads (up to `LOOM_MAX_PREEMPTIONS`).
//!
//! Shared by `examples/loom_writer/main.rs` and `tests/loom_users.rs`; see `docs/loom.md`.
//!
//! The properties:
//! 1. **The footer implies the data.** The writer awaits every chunk before it writes the
//!    footer, so whenever the footer is on disk (a crash right after it landed), every chunk it
//!    names is on disk too. [`Ordering::FooterAfterChunks`] keeps it;
//!    [`Ordering::FooterBeforeChunksDone`] (fan out, write the footer, then await) breaks it,
//!    although every write succeeds and the final file is right.
//! 2. **A chunk's offset is the one its append reserved.** Producers that append concurrently
//!    record [`WriteFuture::offset`](eagerio_core::WriteFuture::offset), fixed when the call
//!    reserved it, before the write starts. [`OffsetSource::Reserved`] keeps it;
//!    [`OffsetSource::PeekedBefore`] (read `append_offset()`, then append) breaks it.

// The example and the test each use part of this file.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use bytes::Bytes;
use eagerio_core::{
    backend::{SyncOp, WriteEngine, WriteOp},
    mem::{MemEngine, MemFile},
    DataSink, Sink, SinkOptions,
};

/// std normally, loom under `--cfg eagerio_loom`: the user's own two-line shim.
#[cfg(eagerio_loom)]
pub mod rt {
    pub use loom::future::block_on;
    pub use loom::sync::Mutex;
    pub use loom::thread;
}
/// std normally, loom under `--cfg eagerio_loom`: the user's own two-line shim.
#[cfg(not(eagerio_loom))]
pub mod rt {
    pub use futures::executor::block_on;
    pub use std::sync::Mutex;
    pub use std::thread;
}

use rt::Mutex;

/// The footer's trailing magic.
pub const MAGIC: &[u8; 4] = b"FTR1";

/// A simulated device over a [`MemFile`]: every write lands and completes on its own thread, in
/// whatever order the scheduler (or loom) picks. When a footer lands it records what the file
/// held at that moment: the state a crash right then would leave.
///
/// [`MemEngine`] completes each write inside the `append` call, which is right for offset
/// properties but cannot reorder completions; this is the few lines a user adds for that.
pub struct Device {
    file: MemFile,
    path: PathBuf,
    threads: Mutex<Vec<rt::thread::JoinHandle<()>>>,
    at_footer: std::sync::Arc<Mutex<Option<Vec<u8>>>>,
}

impl Device {
    /// A device over `file`.
    pub fn new(file: MemFile) -> Device {
        Device {
            file,
            path: PathBuf::from("/model/out.col"),
            threads: Mutex::new(Vec::new()),
            at_footer: Default::default(),
        }
    }

    /// Waits for every write thread.
    pub fn join(&self) {
        let threads = std::mem::take(&mut *self.threads.lock().unwrap());
        for t in threads {
            t.join().unwrap();
        }
    }

    /// The file as it was right after the footer landed.
    pub fn at_footer(&self) -> Option<Vec<u8>> {
        self.at_footer.lock().unwrap().clone()
    }
}

impl WriteEngine for Device {
    fn path(&self) -> &Path {
        &self.path
    }

    fn submit_write(&self, op: WriteOp<Self>) {
        let (file, at_footer) = (self.file.clone(), self.at_footer.clone());
        let t = rt::thread::spawn(move || {
            file.write_at(op.offset(), op.data());
            if op.data().ends_with(MAGIC) {
                *at_footer.lock().unwrap() = Some(file.contents());
            }
            op.complete(Ok(()));
        });
        self.threads.lock().unwrap().push(t);
    }

    fn submit_sync(&self, op: SyncOp<Self>) {
        op.complete(Ok(()));
    }
}

/// Where each chunk is, in chunk order, then the count and [`MAGIC`].
pub fn encode_footer(chunks: &[(u64, u64)]) -> Bytes {
    let mut out = Vec::new();
    for &(offset, len) in chunks {
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
    }
    out.push(chunks.len() as u8);
    out.extend_from_slice(MAGIC);
    out.into()
}

/// The chunk list of the footer at the end of `file`.
pub fn decode_footer(file: &[u8]) -> Vec<(u64, u64)> {
    assert!(file.ends_with(MAGIC), "no footer at the end of the file");
    let n = file[file.len() - 5] as usize;
    let start = file.len() - 5 - 16 * n;
    let word = |at: usize| u64::from_le_bytes(file[at..at + 8].try_into().unwrap());
    (0..n).map(|i| (word(start + 16 * i), word(start + 16 * i + 8))).collect()
}

/// Checks that every chunk the footer names holds its bytes: `chunks[i]` at footer entry `i`.
///
/// # Panics
/// With "chunk {i} at offset {o} is not on disk" when it does not.
pub fn check_footer(file: &[u8], chunks: &[Bytes]) {
    let entries = decode_footer(file);
    assert_eq!(entries.len(), chunks.len(), "footer entries");
    for (i, (&(offset, len), chunk)) in entries.iter().zip(chunks).enumerate() {
        let (o, l) = (offset as usize, len as usize);
        let on_disk = file.get(o..o + l);
        assert!(on_disk == Some(&chunk[..]), "chunk {i} at offset {offset} is not on disk: {on_disk:?}");
    }
}

/// How the writer orders its footer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ordering {
    /// Fan out every chunk, await each, then write the footer. Correct.
    FooterAfterChunks,
    /// Fan out every chunk, write the footer, then await. BROKEN: the footer can land first.
    FooterBeforeChunksDone,
}

/// The user's writer: one row group of `chunks`, then the footer, then a flush.
pub async fn write_file<S: DataSink>(sink: &S, chunks: &[Bytes], ordering: Ordering) -> eagerio_core::Result<()> {
    let writes: Vec<_> = chunks.iter().map(|c| sink.append(c.clone())).collect();
    let entries: Vec<(u64, u64)> = writes.iter().zip(chunks).map(|(w, c)| (w.offset(), c.len() as u64)).collect();
    match ordering {
        Ordering::FooterAfterChunks => {
            for w in writes {
                w.await?;
            }
            sink.append(encode_footer(&entries)).await?;
        }
        Ordering::FooterBeforeChunksDone => {
            let footer = sink.append(encode_footer(&entries));
            for w in writes {
                w.await?;
            }
            footer.await?;
        }
    }
    sink.flush().await
}

/// Property 1, one execution: write two chunks and a footer through a [`Device`]; the final file
/// must be right (it is, either way) and so must the file as it was when the footer landed.
pub fn footer_implies_data(ordering: Ordering) {
    let chunks = [Bytes::from_static(b"aaaa"), Bytes::from_static(b"bbbbbb")];
    let file = MemFile::default();
    let sink = Sink::new(Device::new(file.clone()), SinkOptions::default()).unwrap();
    rt::block_on(write_file(&sink, &chunks, ordering)).unwrap();
    sink.engine().join();
    check_footer(&file.contents(), &chunks);
    let at_footer = sink.engine().at_footer().expect("the footer landed");
    check_footer(&at_footer, &chunks);
}

/// Where a concurrent producer takes its chunk's offset from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSource {
    /// `sink.append(chunk).offset()`: reserved by the call. Correct.
    Reserved,
    /// `sink.append_offset()` read just before `sink.append(chunk)`. BROKEN: another producer
    /// can append in between.
    PeekedBefore,
}

/// Property 2, one execution: two producer threads append a chunk each to one sink (the
/// in-memory backend), recording their offsets; then the footer is written from the records.
pub fn offsets_are_reserved(source: OffsetSource) {
    let chunks = [Bytes::from_static(b"xxx"), Bytes::from_static(b"yyyyy")];
    let file = MemFile::default();
    let sink =
        Sink::new(MemEngine::new(file.clone(), "/model/out.col", 4096).unwrap(), SinkOptions::default()).unwrap();
    let producers: Vec<_> = chunks
        .iter()
        .cloned()
        .map(|chunk| {
            let sink = sink.clone();
            rt::thread::spawn(move || {
                let peeked = sink.append_offset();
                let w = sink.append(chunk.clone());
                let offset = match source {
                    OffsetSource::Reserved => w.offset(),
                    OffsetSource::PeekedBefore => peeked,
                };
                rt::block_on(w).unwrap();
                (offset, chunk.len() as u64)
            })
        })
        .collect();
    let entries: Vec<(u64, u64)> = producers.into_iter().map(|p| p.join().unwrap()).collect();
    rt::block_on(sink.append(encode_footer(&entries))).unwrap();
    rt::block_on(sink.flush()).unwrap();
    check_footer(&file.contents(), &chunks);
}
