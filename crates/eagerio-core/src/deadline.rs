//! Gather deadlines: one watcher thread per process, `eagerio-deadlines`, started by the first
//! deadline in the future.
//!
//! The watcher keeps the pending deadlines ordered by time and sleeps on a condvar until the
//! earliest. At that instant it calls [`Expire::expire`] on the gather (held weakly: a gather that
//! finished and was dropped costs nothing). A registration is a [`Ticket`]; dropping it removes the
//! entry, so the queue holds only gathers still waited for. A deadline already past
//! when it is set expires on the caller's thread instead, without the watcher.
//!
//! Under loom there is no watcher: models set deadlines that are already past.

use std::time::Instant;

/// Something that ends when its deadline passes.
pub(crate) trait Expire: Send + Sync {
    /// The deadline passed. Called at most once per registration, from the watcher thread.
    fn expire(&self);
}

/// A registered deadline. Dropping it takes the registration off the watcher (nothing if it
/// already fired), so whoever holds it never has to remember to.
#[derive(Debug)]
#[cfg_attr(eagerio_loom, allow(dead_code))]
pub(crate) struct Ticket(Key);

/// A registration's place in the watcher's queue: by time, then by order of registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(eagerio_loom, allow(dead_code))]
struct Key {
    at: Instant,
    id: u64,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        #[cfg(not(eagerio_loom))]
        watch::cancel(self.0);
    }
}

#[cfg(not(eagerio_loom))]
mod watch {
    use std::collections::BTreeMap;
    use std::sync::{Condvar, Mutex, OnceLock, Weak};
    use std::time::Instant;

    use super::{Expire, Key, Ticket};
    use crate::loom::lock;

    #[derive(Default)]
    struct Queue {
        pending: BTreeMap<Key, Weak<dyn Expire>>,
        next_id: u64,
    }

    struct Watcher {
        queue: Mutex<Queue>,
        wake: Condvar,
    }

    fn watcher() -> &'static Watcher {
        static WATCHER: OnceLock<&'static Watcher> = OnceLock::new();
        WATCHER.get_or_init(|| {
            let w: &'static Watcher = Box::leak(Box::new(Watcher { queue: Mutex::default(), wake: Condvar::new() }));
            let spawned = std::thread::Builder::new().name("eagerio-deadlines".into()).spawn(move || w.run());
            if let Err(e) = spawned {
                // Futures still check their deadline whenever they are polled.
                tracing::error!(error = %e, "cannot start the deadline watcher; deadlines are checked only at polls");
            }
            w
        })
    }

    impl Watcher {
        fn run(&self) {
            let mut q = lock(&self.queue);
            loop {
                let now = Instant::now();
                let first = q.pending.first_key_value().map(|(t, _)| *t);
                q = match first {
                    Some(t) if t.at <= now => {
                        let target = q.pending.remove(&t).and_then(|w| w.upgrade());
                        drop(q);
                        if let Some(target) = target {
                            target.expire();
                        }
                        lock(&self.queue)
                    }
                    Some(t) => match self.wake.wait_timeout(q, t.at - now) {
                        Ok((g, _)) => g,
                        Err(poisoned) => poisoned.into_inner().0,
                    },
                    None => crate::loom::wait(&self.wake, q),
                };
            }
        }
    }

    /// Registers `target` to expire at `at`.
    pub(crate) fn register(at: Instant, target: Weak<dyn Expire>) -> Ticket {
        let w = watcher();
        let mut q = lock(&w.queue);
        q.next_id += 1;
        let key = Key { at, id: q.next_id };
        let earliest = q.pending.first_key_value().is_none_or(|(k, _)| key < *k);
        q.pending.insert(key, target);
        drop(q);
        if earliest {
            w.wake.notify_one();
        }
        Ticket(key)
    }

    /// Removes a registration (nothing if it already fired): [`Ticket`]'s drop.
    pub(super) fn cancel(key: Key) {
        lock(&watcher().queue).pending.remove(&key);
    }
}

#[cfg(not(eagerio_loom))]
pub(crate) use watch::register;
