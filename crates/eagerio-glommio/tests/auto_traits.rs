//! Pins the auto traits: the glommio handles are `Rc`-based and belong to one executor, so they
//! must be neither `Send` nor `Sync`; the futures they return are the core's and stay `Send` and
//! `Unpin`. The `!Send` checks are compile-time: if a handle became `Send`, the trait method
//! below would be ambiguous and this file would stop compiling.

use bytes::Bytes;
use eagerio_core::{GatherFuture, RowTable, Sink, Source, WriteFuture};
use eagerio_glommio::{GlommioEngine, GlommioWriter};

/// Implemented twice for `Send` types (ambiguous), once for the others.
trait AmbiguousIfSend<A> {
    fn check() {}
}
impl<T: ?Sized> AmbiguousIfSend<()> for T {}
#[allow(dead_code)]
struct IsSend;
impl<T: ?Sized + Send> AmbiguousIfSend<IsSend> for T {}

/// The same for `Sync`.
trait AmbiguousIfSync<A> {
    fn check() {}
}
impl<T: ?Sized> AmbiguousIfSync<()> for T {}
#[allow(dead_code)]
struct IsSync;
impl<T: ?Sized + Sync> AmbiguousIfSync<IsSync> for T {}

macro_rules! assert_not_send_nor_sync {
    ($($t:ty),* $(,)?) => {$(
        const _: fn() = || {
            <$t as AmbiguousIfSend<_>>::check();
            <$t as AmbiguousIfSync<_>>::check();
        };
    )*};
}

assert_not_send_nor_sync!(
    GlommioEngine,
    Source<GlommioEngine>,
    RowTable<GlommioEngine>,
    GlommioWriter,
    Sink<GlommioWriter>
);

fn send_unpin<T: Send + Unpin>() {}

#[test]
fn handles_belong_to_one_executor() {
    // The compile-time checks above are the test; this names them in the test output.
    assert_not_send_nor_sync!(GlommioEngine);
}

#[test]
fn futures_stay_send_and_unpin() {
    send_unpin::<GatherFuture<Bytes>>();
    send_unpin::<GatherFuture<Vec<Bytes>>>();
    send_unpin::<WriteFuture>();
}
