//! Loom for users: the column writer of `examples/loom_writer/model.rs`, model-checked with the
//! core's in-memory backend under loom. Two orderings hold in every interleaving; their broken
//! twins pass ordinary runs, and loom finds the interleaving that breaks them.
//!
//! Run with (about a second each on 2 cores):
//! `RUSTFLAGS="--cfg eagerio_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
//!  cargo test -p eagerio-core --release --test loom_users`
#![cfg(eagerio_loom)]

#[path = "../examples/loom_writer/model.rs"]
mod model;

use eagerio_core::loom::explore;
use model::{footer_implies_data, offsets_are_reserved, OffsetSource, Ordering};

/// The writer awaits every chunk before it writes the footer: whenever the footer is on disk,
/// so is every chunk it names.
#[test]
fn loom_users_footer_after_every_chunk_holds() {
    explore(|| footer_implies_data(Ordering::FooterAfterChunks));
}

/// Writing the footer before awaiting the chunks: every write succeeds and the final file is
/// right, but in some interleaving the footer lands while a chunk is not written yet.
#[test]
#[should_panic(expected = "is not on disk")]
fn loom_users_catch_a_footer_written_before_its_chunks() {
    explore(|| footer_implies_data(Ordering::FooterBeforeChunksDone));
}

/// Concurrent producers record the offset their append reserved: the footer names where every
/// chunk really is.
#[test]
fn loom_users_offsets_from_the_append_hold() {
    explore(|| offsets_are_reserved(OffsetSource::Reserved));
}

/// Reading `append_offset()` and then appending: another producer can append in between, and
/// the footer names the wrong offset.
#[test]
#[should_panic(expected = "is not on disk")]
fn loom_users_catch_an_offset_peeked_before_the_append() {
    explore(|| offsets_are_reserved(OffsetSource::PeekedBefore));
}
