//! Model-checking your own I/O ordering with loom: a column writer that must await every chunk
//! before it writes its footer, and producers that must take a chunk's offset from the append
//! that reserved it. The writer and the checks are in `model.rs`; `docs/loom.md` walks through
//! them.
//!
//! ```sh
//! # one ordinary run of each ordering: the broken ones usually pass
//! cargo run -p eagerio-core --example loom_writer
//! # every interleaving: the correct orderings hold, loom finds the broken ones
//! RUSTFLAGS="--cfg eagerio_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
//!   cargo run -p eagerio-core --release --example loom_writer
//! ```
//! The same models run as tests (`tests/loom_users.rs`), the broken ones as
//! `#[should_panic]`.

mod model;

use std::panic::{catch_unwind, AssertUnwindSafe};

use model::{footer_implies_data, offsets_are_reserved, OffsetSource, Ordering};

/// Runs `f` once normally, or in every interleaving under loom; returns the panic message, if
/// any execution panicked.
fn check(f: fn()) -> Option<String> {
    let run = AssertUnwindSafe(move || {
        #[cfg(eagerio_loom)]
        loom::model(f);
        #[cfg(not(eagerio_loom))]
        f();
    });
    catch_unwind(run).err().map(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

fn main() {
    let how = if cfg!(eagerio_loom) { "every interleaving (loom)" } else { "one ordinary run" };
    println!("checking in {how}:");
    let cases: [(&str, fn()); 4] = [
        ("footer after every chunk      ", || footer_implies_data(Ordering::FooterAfterChunks)),
        ("footer before chunks are done ", || footer_implies_data(Ordering::FooterBeforeChunksDone)),
        ("offset from the append        ", || offsets_are_reserved(OffsetSource::Reserved)),
        ("offset peeked before append   ", || offsets_are_reserved(OffsetSource::PeekedBefore)),
    ];
    // Loom prints each failing execution's panic; keep the summary below readable.
    std::panic::set_hook(Box::new(|_| {}));
    for (name, f) in cases {
        match check(f) {
            None => println!("  {name} holds"),
            Some(msg) => println!("  {name} FAILS: {msg}"),
        }
    }
    if !cfg!(eagerio_loom) {
        println!("(a broken ordering can pass one run; run under --cfg eagerio_loom to explore them all)");
    }
}
