//! The loom shim: every atomic, `Arc`, `Mutex`, `Condvar`, `UnsafeCell` and thread park that the
//! ledger and the shared copy (`prepare::share`) use is imported from here, so the code loom
//! checks under `--cfg eagerio_loom` is the production code.
//!
//! With the cfg off these are the `std` types; `UnsafeCell` gets loom's closure API
//! (`with`/`with_mut`) so that call sites are the same in both builds. Beside them, the few
//! helpers every ledger uses to lock, wait and wake. This module is the ground floor: it imports
//! nothing of the crate but the error type's panic message.

#[cfg(eagerio_loom)]
pub use loom::{
    cell::UnsafeCell,
    sync::{
        atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering},
        Arc, Condvar, Mutex, MutexGuard,
    },
};

#[cfg(not(eagerio_loom))]
pub use std::sync::{
    atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering},
    Arc, Condvar, Mutex, MutexGuard,
};

/// Parking and waking threads: `std::thread`'s, or loom's model threads.
pub mod thread {
    #[cfg(eagerio_loom)]
    pub use loom::thread::{current, park, Thread};
    #[cfg(not(eagerio_loom))]
    pub use std::thread::{current, park, Thread};
}

use std::task::Waker;

/// Whether the current thread is unwinding from a panic: `std::thread::panicking()`.
///
/// Under loom every model thread runs on one OS thread, so `std::thread::panicking()` would
/// answer for whichever model thread happens to be unwinding, and a drop on another model thread
/// would be charged with its panic. Loom models therefore report panics explicitly (with
/// `JobHandle::fail_panicked`, as every real backend does around its I/O), and this answers
/// `false` under the cfg.
#[cfg(not(eagerio_loom))]
pub fn thread_panicking() -> bool {
    std::thread::panicking()
}

/// Under loom: always `false` (see the std version).
#[cfg(eagerio_loom)]
pub fn thread_panicking() -> bool {
    false
}

/// `std::cell::UnsafeCell` with loom's closure API.
#[cfg(not(eagerio_loom))]
#[derive(Debug, Default)]
pub struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(eagerio_loom))]
impl<T> UnsafeCell<T> {
    pub const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    #[allow(dead_code)]
    pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// Locks a mutex, ignoring poison: the ledger's state stays consistent across a panic because
/// every critical section is a handful of non-panicking field updates.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Waits on a condvar, ignoring poison (see [`lock`]).
pub fn wait<'a, T>(cv: &Condvar, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    match cv.wait(g) {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Wakes `waker`, catching a panic inside it (logged). Wakers run on the thread that completes
/// an operation (a lane, a worker); a panicking one must not unwind through the ledger's
/// bookkeeping and leave other waiters unwoken.
pub(crate) fn wake(waker: Waker) {
    if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| waker.wake())) {
        tracing::error!(panic = %crate::error::panic_message(&*payload), "a waker panicked; the panic was caught");
    }
}

/// Runs the model `f` in every interleaving loom finds with at most 2 preemptions (or
/// `LOOM_MAX_PREEMPTIONS`), and checks that loom explored more than one: a model whose threads
/// never meet explores a single interleaving and proves nothing.
///
/// # Panics
/// When an interleaving fails (a race on an `UnsafeCell`, a deadlock, a failed assertion), or
/// when loom explored a single interleaving.
#[cfg(eagerio_loom)]
pub fn explore(f: impl Fn() + Sync + Send + 'static) {
    explore_with(None, f);
}

/// [`explore`] with at most `bound` preemptions, fewer if `LOOM_MAX_PREEMPTIONS` says so: for a
/// model too large to explore at the default bound.
///
/// # Panics
/// As [`explore`].
#[cfg(eagerio_loom)]
pub fn explore_bounded(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    explore_with(Some(bound), f);
}

#[cfg(eagerio_loom)]
fn explore_with(bound: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    let mut b = loom::model::Builder::new();
    b.preemption_bound = match (b.preemption_bound, bound) {
        (Some(env), Some(bound)) => Some(env.min(bound)),
        (env, bound) => env.or(bound).or(Some(2)),
    };
    let iterations = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = iterations.clone();
    b.check(move || {
        seen.fetch_add(1, Relaxed);
        f();
    });
    let n = iterations.load(Relaxed);
    eprintln!("explored {n} interleavings");
    assert!(n > 1, "the model explored a single interleaving");
}
