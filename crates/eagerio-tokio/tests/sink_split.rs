//! The tokio sink's split: see `tests/support/sink_split.rs`.

#[path = "../../../tests/support/sink_split.rs"]
mod split;

use eagerio_tokio::{TokioWriter, WriterOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aligned_blocks_go_direct_and_the_rest_buffered() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("split.bin");
    let sink = TokioWriter::create(&path, WriterOptions::default()).await.unwrap();
    let a = sink.engine().direct_alignment().expect("the project's filesystem supports O_DIRECT") as usize;
    split::aligned_blocks_go_direct_and_the_rest_buffered(sink, &path, a).await;
}
