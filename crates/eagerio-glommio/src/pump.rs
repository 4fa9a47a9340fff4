//! The pump: runs I/O futures on the current executor *without* anyone polling a user-visible
//! future, after polling each one once inside the call that starts it.
//!
//! Glommio's file futures do nothing until polled: `DmaFile::read_at_aligned(..)` only pushes its
//! request onto the executor's submission queue on the first poll. A backend that merely spawned
//! a task would start nothing before the executor next runs that task. So [`Pump::start`] polls
//! the new future right away, in the caller's frame (which queues the request), and parks it in
//! a slot. One detached local task per pump, the *driver*, polls the slots whose wakers fired,
//! until none is left; then it exits, and the next `start` spawns a new one.
//!
//! Every slot has its own waker (an `Arc` holding the slot index), so a completion costs one poll
//! of one future, not a sweep of all of them.

use std::{
    cell::{Cell, RefCell},
    future::Future,
    panic::{catch_unwind, AssertUnwindSafe},
    pin::Pin,
    rc::Rc,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll, Wake, Waker},
};

type LocalFuture = Pin<Box<dyn Future<Output = ()>>>;

enum Slot {
    Free,
    Parked(LocalFuture),
    /// Taken out of the table while it is being polled (re-entrant starts see it as busy).
    Polling,
}

/// What the per-slot wakers share with the driver: the slots that want a poll, and the driver's
/// own waker.
#[derive(Default)]
struct Shared {
    ready: Mutex<Vec<usize>>,
    driver: Mutex<Option<Waker>>,
}

struct SlotWake {
    idx: usize,
    shared: Arc<Shared>,
}

impl Wake for SlotWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.shared.ready.lock().unwrap_or_else(PoisonError::into_inner).push(self.idx);
        let driver = self.shared.driver.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if let Some(w) = driver {
            w.wake();
        }
    }
}

struct Inner {
    slots: RefCell<Vec<Slot>>,
    wakers: RefCell<Vec<Waker>>,
    free: RefCell<Vec<usize>>,
    live: Cell<usize>,
    driver_running: Cell<bool>,
    shared: Arc<Shared>,
}

/// A set of local futures that run to completion without being awaited (see the module docs).
#[derive(Clone)]
pub(crate) struct Pump {
    inner: Rc<Inner>,
}

impl std::fmt::Debug for Pump {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pump").field("live", &self.inner.live.get()).finish()
    }
}

impl Pump {
    pub(crate) fn new() -> Pump {
        Pump {
            inner: Rc::new(Inner {
                slots: RefCell::new(Vec::new()),
                wakers: RefCell::new(Vec::new()),
                free: RefCell::new(Vec::new()),
                live: Cell::new(0),
                driver_running: Cell::new(false),
                shared: Arc::default(),
            }),
        }
    }

    /// Futures not yet finished.
    pub(crate) fn live(&self) -> usize {
        self.inner.live.get()
    }

    /// Polls `fut` once, now, in the caller's frame; if it is not done, keeps it and makes sure
    /// a driver task will poll it again whenever its waker fires.
    ///
    /// # Panics
    /// Outside a glommio executor (spawning the driver needs one).
    pub(crate) fn start(&self, fut: impl Future<Output = ()> + 'static) {
        let inner = &self.inner;
        let idx = match inner.free.borrow_mut().pop() {
            Some(i) => i,
            None => {
                let mut slots = inner.slots.borrow_mut();
                let i = slots.len();
                slots.push(Slot::Free);
                inner
                    .wakers
                    .borrow_mut()
                    .push(Waker::from(Arc::new(SlotWake { idx: i, shared: inner.shared.clone() })));
                i
            }
        };
        inner.slots.borrow_mut()[idx] = Slot::Polling;
        inner.live.set(inner.live.get() + 1);
        self.poll_slot(idx, Box::pin(fut));
        if inner.live.get() > 0 && !inner.driver_running.get() {
            inner.driver_running.set(true);
            let me = self.clone();
            glommio::spawn_local(async move { me.drive().await }).detach();
        }
    }

    /// Polls the future of slot `idx` (already marked `Polling`) and parks or frees it.
    fn poll_slot(&self, idx: usize, mut fut: LocalFuture) {
        let inner = &self.inner;
        let waker = inner.wakers.borrow()[idx].clone();
        let mut cx = Context::from_waker(&waker);
        // The futures catch their own panics around user code (hooks, copies); this is the last
        // line: a panic here must not take the driver, and every other slot, down with it.
        let done = match catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(&mut cx))) {
            Ok(Poll::Pending) => false,
            Ok(Poll::Ready(())) => true,
            Err(payload) => {
                tracing::error!(
                    message = %eagerio_core::error::panic_message(&*payload),
                    "an eagerio-glommio I/O future panicked; dropping it"
                );
                true
            }
        };
        if done {
            // Dropping a glommio I/O future whose request reached the kernel leaves its buffer
            // with glommio's source map until the completion arrives, so this never frees
            // memory the kernel still writes.
            drop(fut);
            inner.slots.borrow_mut()[idx] = Slot::Free;
            inner.free.borrow_mut().push(idx);
            inner.live.set(inner.live.get() - 1);
        } else {
            inner.slots.borrow_mut()[idx] = Slot::Parked(fut);
        }
    }

    /// The driver task: polls woken slots until no future is left.
    async fn drive(self) {
        std::future::poll_fn(|cx| {
            let inner = &self.inner;
            *inner.shared.driver.lock().unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
            loop {
                let ready = std::mem::take(&mut *inner.shared.ready.lock().unwrap_or_else(PoisonError::into_inner));
                if ready.is_empty() {
                    break;
                }
                for idx in ready {
                    let taken = {
                        let mut slots = inner.slots.borrow_mut();
                        match std::mem::replace(&mut slots[idx], Slot::Polling) {
                            Slot::Parked(f) => Some(f),
                            // A stale wake of a finished slot, or a slot being polled further up
                            // this stack: put it back as it was.
                            other => {
                                slots[idx] = other;
                                None
                            }
                        }
                    };
                    if let Some(f) = taken {
                        self.poll_slot(idx, f);
                    }
                }
            }
            if inner.live.get() == 0 {
                inner.driver_running.set(false);
                *inner.shared.driver.lock().unwrap_or_else(PoisonError::into_inner) = None;
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }
}
