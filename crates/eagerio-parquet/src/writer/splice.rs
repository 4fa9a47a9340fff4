//! The splicer: one thread that copies each row group's chunks into the file in column order as
//! soon as each is closed, then writes the footer. Bytes leave in blocks of
//! [`EagerWriterOptions::block_bytes`](super::EagerWriterOptions::block_bytes), each one sink
//! append started at once ([`Outlet::Sink`]) or handed to the caller's thread
//! ([`Outlet::Caller`], for sinks that are not `Send`).

use std::{
    io::{self, Write},
    panic::{catch_unwind, AssertUnwindSafe},
    sync::Arc,
};

use bytes::Bytes;
use eagerio_core::DataSink;
use parquet::{
    errors::{ParquetError, Result},
    file::{metadata::ParquetMetaData, writer::SerializedFileWriter},
};

use super::board::{Board, Input, Slot};

/// Where the splicer's blocks go.
pub(crate) enum Outlet {
    /// Appended to the sink on the splicer's thread; the splicer then waits for the sink's
    /// in-flight bound ([`DataSink::ready`]).
    Sink(Arc<dyn DataSink + Send + Sync>),
    /// Queued for the caller's thread, which appends them in its next call; the splicer waits
    /// while more than this many bytes are queued.
    Caller { max_queued: usize },
}

/// The memory alignment of a block's first byte: what `O_DIRECT` asks of a buffer on the
/// filesystems in use (4 KiB covers 512-byte and 4 KiB logical blocks).
const BLOCK_ALIGN: usize = 4096;

/// The `Write` the parquet file writer writes into: fills a block, hands it to the outlet.
///
/// Each block starts at a file offset that is a multiple of the block size and, in memory, at a
/// [`BLOCK_ALIGN`]ed address: a sink that writes aligned blocks with `O_DIRECT` (tokio's,
/// glommio's) sends every block but the last straight to the device.
pub(crate) struct BlockWriter {
    board: Arc<Board>,
    outlet: Outlet,
    /// The block: `block[start..]` is filled, `start` puts it on an aligned address.
    block: Vec<u8>,
    start: usize,
    block_bytes: usize,
}

impl BlockWriter {
    pub fn new(board: Arc<Board>, outlet: Outlet, block_bytes: usize) -> BlockWriter {
        BlockWriter { board, outlet, block: Vec::new(), start: 0, block_bytes }
    }

    fn filled(&self) -> usize {
        self.block.len().saturating_sub(self.start)
    }

    /// Hands the filled part of the block to the outlet.
    fn emit(&mut self) -> io::Result<()> {
        if self.filled() == 0 {
            return Ok(());
        }
        // The allocation moves into `Bytes` as it is: the aligned start stays where it was.
        let block = Bytes::from(std::mem::take(&mut self.block)).slice(self.start..);
        let len = block.len();
        match &self.outlet {
            Outlet::Sink(sink) => {
                let write = sink.append(block);
                let mut st = self.board.lock();
                st.writes.push(write);
                st.stats.blocks += 1;
                st.stats.bytes_written += len as u64;
                drop(st);
                // Backpressure: the sink's in-flight bound holds the splicer, and with it the
                // encoders, once a row group waits to be spliced.
                futures::executor::block_on(sink.ready());
                let mut st = self.board.lock();
                st.reap_writes();
                if st.failure.is_some() || st.input == Input::Abandoned {
                    return Err(stopped(&st.failure));
                }
            }
            Outlet::Caller { max_queued } => {
                let mut st = self.board.lock();
                st.outbox.push_back(block);
                st.outbox_bytes += len;
                st.stats.blocks += 1;
                st.stats.bytes_written += len as u64;
                self.board.notify(&mut st);
                while st.outbox_bytes > *max_queued && !st.stopping() {
                    st = self.board.wait(st);
                }
                if st.stopping() {
                    return Err(stopped(&st.failure));
                }
            }
        }
        Ok(())
    }
}

fn stopped(failure: &Option<super::board::Failed>) -> io::Error {
    match failure {
        Some(f) => io::Error::other(f.clone()),
        None => io::Error::other("the parquet writer was dropped before close"),
    }
}

impl Write for BlockWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.block.capacity() == 0 {
            self.block.reserve_exact(self.block_bytes + BLOCK_ALIGN);
            self.start = self.block.as_ptr().align_offset(BLOCK_ALIGN);
            self.block.resize(self.start, 0);
        }
        let n = buf.len().min(self.block_bytes - self.filled());
        self.block.extend_from_slice(&buf[..n]);
        if self.filled() == self.block_bytes {
            self.emit()?;
        }
        Ok(n)
    }

    /// Blocks leave when full or at the end of the file, not on `flush`: parquet flushes at
    /// points that would cut them small.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The splicer thread: copies row group after row group, then the footer; the outcome goes on
/// the board (`finished` or `failure`).
pub(crate) fn run(board: Arc<Board>, file: SerializedFileWriter<BlockWriter>) {
    let b = board.clone();
    let outcome = catch_unwind(AssertUnwindSafe(move || splice(&b, file))).unwrap_or_else(|panic| {
        Err(ParquetError::General(format!("the splicer panicked: {}", eagerio_core::error::panic_message(&*panic))))
    });
    let mut st = board.lock();
    match outcome {
        Ok(Some(meta)) => st.finished = Some(meta),
        Ok(None) => {}
        Err(e) => st.fail(e),
    }
    board.notify(&mut st);
}

/// `Ok(None)`: the writer stopped (dropped, or failed elsewhere) before the footer.
fn splice(board: &Board, mut file: SerializedFileWriter<BlockWriter>) -> Result<Option<ParquetMetaData>> {
    for g in 0.. {
        let Some(fields) = wait_group(board, g) else { break };
        let mut row_group = file.next_row_group()?;
        for f in 0..fields {
            let Some((chunks, buffered)) = wait_chunk(board, g, f) else { return Ok(None) };
            for chunk in chunks {
                chunk.append_to_row_group(&mut row_group)?;
            }
            let mut st = board.lock();
            st.note_buffered(buffered, 0);
        }
        row_group.close()?;
        let mut st = board.lock();
        let done = st.groups.pop_front().expect("the spliced row group is on the board");
        debug_assert_eq!(done.index, g);
        st.stats.row_groups += 1;
        st.stats.rows += done.rows as u64;
        board.notify(&mut st);
    }
    if board.lock().stopping() {
        return Ok(None);
    }
    let meta = file.finish()?;
    // The footer is in parquet's buffer and the tail in the last block: both leave now.
    file.flush()?;
    file.inner_mut().emit()?;
    Ok(Some(meta))
}

/// Waits until row group `g` has its first row (returns its field count), or until there will be
/// none (`None`: input closed after `g - 1`, or the writer stopped).
fn wait_group(board: &Board, g: usize) -> Option<usize> {
    let mut st = board.lock();
    loop {
        if st.stopping() {
            return None;
        }
        if let Some(group) = st.group_mut(g) {
            return Some(group.fields.len());
        }
        if st.input == Input::Closed && st.next_group <= g {
            return None;
        }
        st = board.wait(st);
    }
}

/// Waits for field `f` of row group `g` to be closed and takes its chunks (and the bytes they
/// were counted at); `None` if the writer stopped.
fn wait_chunk(
    board: &Board,
    g: usize,
    f: usize,
) -> Option<(Vec<parquet::arrow::arrow_writer::ArrowColumnChunk>, usize)> {
    let mut st = board.lock();
    loop {
        if st.failure.is_some() || st.input == Input::Abandoned {
            return None;
        }
        let field = &mut st.group_mut(g).expect("the row group being spliced is on the board").fields[f];
        if matches!(field.slot, Slot::Closed(_)) {
            let Slot::Closed(chunks) = std::mem::replace(&mut field.slot, Slot::Spliced) else { unreachable!() };
            let buffered = std::mem::take(&mut field.buffered);
            return Some((chunks, buffered));
        }
        st = board.wait(st);
    }
}
