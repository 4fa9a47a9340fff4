//! The io_uring sink's split: see `tests/support/sink_split.rs`.

#[path = "../../../tests/support/sink_split.rs"]
mod split;

use eagerio_uring::{UringWriter, WriterOptions};

#[test]
fn aligned_blocks_go_direct_and_the_rest_buffered() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("split.bin");
    let sink = UringWriter::create_blocking(&path, WriterOptions::default()).unwrap();
    let a = sink.engine().direct_alignment().expect("the project's filesystem supports O_DIRECT") as usize;
    futures::executor::block_on(split::aligned_blocks_go_direct_and_the_rest_buffered(sink, &path, a));
}
