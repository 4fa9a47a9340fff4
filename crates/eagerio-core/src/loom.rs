//! The loom shim: every atomic, `Arc`, `Mutex`, `Condvar` and `UnsafeCell` that the ledger uses is
//! imported from here, so the code loom checks under `--cfg eagerio_loom` is the production code.
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
