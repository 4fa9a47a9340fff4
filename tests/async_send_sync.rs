//! Pins the auto traits of the public futures and handles: an accidental change fails here.

use eagerio::core::{FlushFuture, GatherFuture, ReadyFuture, Sink, Source, WriteFuture};

fn send_sync<T: Send + Sync>() {}
fn send_unpin<T: Send + Unpin>() {}

#[test]
fn futures_are_send_and_unpin() {
    send_unpin::<GatherFuture<bytes::Bytes>>();
    send_unpin::<GatherFuture<Vec<bytes::Bytes>>>();
    send_unpin::<WriteFuture>();
    send_unpin::<FlushFuture>();
    send_unpin::<ReadyFuture>();
}

#[test]
fn tokio_handles_are_send_and_sync() {
    send_sync::<Source<eagerio::tokio::TokioEngine>>();
    send_sync::<Sink<eagerio::tokio::TokioWriter>>();
    send_sync::<GatherFuture<bytes::Bytes>>();
}
