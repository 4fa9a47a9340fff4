//! The encoders: a pool of threads that take a field's queued batches, encode them with that
//! field's `ArrowColumnWriter`s, and close them into chunks when the row group is complete.
//!
//! A field's tasks run in order on one thread at a time (its encoders are in [`Slot::Encoding`]
//! meanwhile); different fields, and different row groups, run on any thread.

use std::{
    panic::{catch_unwind, AssertUnwindSafe},
    sync::Arc,
};

use arrow_schema::SchemaRef;
use parquet::{
    arrow::arrow_writer::{compute_leaves, ArrowColumnChunk, ArrowColumnWriter},
    errors::{ParquetError, Result},
};

use super::board::{Board, Slot, Task};

/// What a field's encoders are after a turn.
enum After {
    Open(Vec<ArrowColumnWriter>),
    Closed(Vec<ArrowColumnChunk>),
}

/// One encoder thread: runs until the writer stops.
pub(crate) fn run(board: Arc<Board>, schema: SchemaRef) {
    let mut st = board.lock();
    loop {
        if st.stopping() {
            return;
        }
        let Some((g, f)) = st.ready.pop_first() else {
            st = board.wait(st);
            continue;
        };
        let group = st.group_mut(g).expect("a ready field's row group is on the board");
        let field = &mut group.fields[f];
        let Slot::Idle(writers) = std::mem::replace(&mut field.slot, Slot::Encoding) else {
            unreachable!("a ready field has idle encoders")
        };
        let tasks: Vec<Task> = field.queue.drain(..).collect();
        let before = field.buffered;
        drop(st);

        let queued: usize = tasks.iter().map(|t| if let Task::Encode { bytes, .. } = t { *bytes } else { 0 }).sum();
        let turn = catch_unwind(AssertUnwindSafe(|| encode(&schema, f, writers, tasks)));

        st = board.lock();
        st.note_queued(-(queued as isize));
        let outcome = match turn {
            Ok(r) => r,
            Err(panic) => Err(ParquetError::General(format!(
                "the encoder of column {:?} (row group {g}) panicked: {}",
                schema.field(f).name(),
                eagerio_core::error::panic_message(&*panic)
            ))),
        };
        match outcome {
            Err(e) => st.fail(e),
            Ok(after) => {
                let buffered = match &after {
                    After::Open(w) => w.iter().map(ArrowColumnWriter::memory_size).sum(),
                    After::Closed(_) => before,
                };
                st.note_buffered(before, buffered);
                let Some(group) = st.group_mut(g) else { continue };
                let field = &mut group.fields[f];
                field.buffered = buffered;
                field.slot = match after {
                    After::Open(w) => Slot::Idle(w),
                    After::Closed(c) => Slot::Closed(c),
                };
                if matches!(field.slot, Slot::Idle(_)) && !field.queue.is_empty() {
                    st.ready.insert((g, f));
                }
            }
        }
        board.notify(&mut st);
    }
}

/// Runs a field's tasks on its encoders.
fn encode(schema: &SchemaRef, f: usize, mut writers: Vec<ArrowColumnWriter>, tasks: Vec<Task>) -> Result<After> {
    let field = schema.field(f);
    for task in tasks {
        match task {
            Task::Encode { array, .. } => {
                let leaves = compute_leaves(field, &array)?;
                debug_assert_eq!(leaves.len(), writers.len(), "one encoder per leaf column");
                for (w, leaf) in writers.iter_mut().zip(&leaves) {
                    w.write(leaf)?;
                }
            }
            Task::Close => {
                let chunks = writers.into_iter().map(ArrowColumnWriter::close).collect::<Result<Vec<_>>>()?;
                return Ok(After::Closed(chunks));
            }
        }
    }
    Ok(After::Open(writers))
}
