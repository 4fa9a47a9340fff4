//! The fault seam: a hook every backend calls just before each syscall or submission, so tests
//! can inject errors, short transfers, delays and panics exactly where real ones happen.
//!
//! A hook is not an option of any backend: a test installs it for a path with [`inject`], and
//! every backend takes the hook installed for a file's path when it opens or creates the file
//! ([`injected`]), so faults reach the same code a user's open reaches, `eagerio::open` included.
//!
//! Production code pays one `Option` check per I/O when no hook is set, and one atomic load per
//! open while no hook is installed anywhere.

use std::{
    fmt, io,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex, PoisonError,
    },
};

/// What kind of I/O is about to happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoKind {
    /// A gather extent's read.
    Read,
    /// A sink's write.
    Write,
    /// A sink's `fdatasync`.
    Sync,
    /// The `fsync` of a directory, which makes a new file's name durable
    /// ([`sys::sync_parent`](crate::sys::sync_parent)).
    SyncDir,
    /// Copying a completed read's rows into the output.
    CopyOut,
}

/// The I/O about to happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoPoint {
    /// Its kind.
    pub kind: IoKind,
    /// File offset.
    pub offset: u64,
    /// Bytes.
    pub len: usize,
}

/// What the hook wants done.
#[derive(Debug)]
pub enum Action {
    /// Do the I/O as usual.
    Proceed,
    /// Skip the I/O and report this error as its result.
    Fail(io::Error),
    /// Do the I/O but report at most this many bytes transferred (a short read or write).
    Short(usize),
    /// Panic at this point (the backend's worker or completion handler panics).
    Panic,
}

/// A fault hook. It may also sleep, to simulate a slow device.
#[derive(Clone)]
pub struct Hook(Arc<dyn Fn(&IoPoint) -> Action + Send + Sync>);

impl fmt::Debug for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Hook")
    }
}

impl Hook {
    /// A hook calling `f` before every I/O.
    pub fn new(f: impl Fn(&IoPoint) -> Action + Send + Sync + 'static) -> Hook {
        Hook(Arc::new(f))
    }

    /// A hook that sleeps `latency` before every write and sync: a slow sink, for benchmarks.
    pub fn write_latency(latency: std::time::Duration) -> Hook {
        Hook::new(move |p| {
            if matches!(p.kind, IoKind::Write | IoKind::Sync) {
                std::thread::sleep(latency);
            }
            Action::Proceed
        })
    }

    /// Asks the hook about `point`; panics here if it says [`Action::Panic`].
    ///
    /// Call this only where a panic is caught and reported as the operation's failure (inside a
    /// read's `catch_unwind`); everywhere else, use [`ask`].
    pub fn check(&self, point: IoPoint) -> Action {
        match (self.0)(&point) {
            Action::Panic => panic!("injected panic at {:?} offset {}", point.kind, point.offset),
            a => a,
        }
    }
}

/// Asks `hook` (if any) about `point`, catching a panic inside it (an injected
/// [`Action::Panic`] included): `Err` carries the panic's payload, for
/// `JobHandle::fail_panicked` or [`failure`]. Without a hook: `Ok(Action::Proceed)`.
///
/// Every backend asks its hook through this (or through [`failure`]), so a panicking hook fails
/// the one operation and never unwinds through a worker, a lane or an executor.
pub fn ask(hook: Option<&Hook>, point: IoPoint) -> std::thread::Result<Action> {
    match hook {
        None => Ok(Action::Proceed),
        Some(h) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.check(point))),
    }
}

/// A hook's verdict on a write or sync: `Ok(cap)`, the most bytes the write may report done
/// (`usize::MAX` for no cap), or the error the operation fails with: the injected one, or the
/// hook's panic as an error that names it.
///
/// # Errors
/// As above: [`Action::Fail`]'s error, or `Other` for a panic.
pub fn failure(hook: Option<&Hook>, point: IoPoint) -> io::Result<usize> {
    match ask(hook, point) {
        Ok(Action::Fail(e)) => Err(e),
        Ok(Action::Short(n)) => Ok(n),
        Ok(Action::Proceed | Action::Panic) => Ok(usize::MAX),
        Err(payload) => Err(io::Error::other(format!(
            "the {:?} hook panicked: {}",
            point.kind,
            crate::error::panic_message(&*payload)
        ))),
    }
}

/// Runs `io` unless `hook` says otherwise, applying a `Short` cap to its result.
pub fn with_hook(hook: Option<&Hook>, point: IoPoint, io: impl FnOnce() -> io::Result<usize>) -> io::Result<usize> {
    match hook.map(|h| h.check(point)) {
        None | Some(Action::Proceed) => io(),
        Some(Action::Fail(e)) => Err(e),
        Some(Action::Short(n)) => io().map(|got| got.min(n)),
        Some(Action::Panic) => unreachable!("check panics"),
    }
}

/// Hooks installed with [`inject`]: path, installation number, hook. Plain `std` types, also
/// under loom: the registry is read at open, outside every model.
static INSTALLED: Mutex<Vec<(PathBuf, u64, Hook)>> = Mutex::new(Vec::new());
/// Entries of [`INSTALLED`], so that an open with nothing installed takes no lock.
static COUNT: AtomicUsize = AtomicUsize::new(0);
static NEXT: AtomicU64 = AtomicU64::new(0);

/// Installs `hook` for every file or object opened or created at `path` while the returned guard
/// lives. Files opened before keep the hook they had (none, or an earlier one); files opened after
/// the guard drops get none. The latest installation for a path wins.
///
/// The path is matched as given, without canonicalising: open the file by the same path. Object
/// stores match the object's name as errors show it (`ObjectStoreOptions::name`, by default
/// `<store>/<location>`).
///
/// ```
/// use eagerio_core::fault::{inject, injected, Action, Hook, IoKind};
/// let path = std::path::Path::new("/data/t.bin");
/// let guard = inject(path, Hook::new(|p| match p.kind {
///     IoKind::Read => Action::Fail(std::io::Error::from_raw_os_error(libc::EIO)),
///     _ => Action::Proceed,
/// }));
/// assert!(injected(path).is_some());
/// drop(guard);
/// assert!(injected(path).is_none());
/// ```
#[must_use = "the hook is removed when the guard drops"]
pub fn inject(path: impl Into<PathBuf>, hook: Hook) -> Injected {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut installed = INSTALLED.lock().unwrap_or_else(PoisonError::into_inner);
    installed.push((path.into(), id, hook));
    COUNT.store(installed.len(), Ordering::Release);
    Injected { id }
}

/// The hook installed for `path` now, if any: what a backend's open keeps for the file's I/O.
pub fn injected(path: &Path) -> Option<Hook> {
    if COUNT.load(Ordering::Acquire) == 0 {
        return None;
    }
    let installed = INSTALLED.lock().unwrap_or_else(PoisonError::into_inner);
    installed.iter().rev().find(|(p, _, _)| p == path).map(|(_, _, h)| h.clone())
}

/// Keeps a hook installed by [`inject`]; dropping it uninstalls the hook.
#[derive(Debug)]
pub struct Injected {
    id: u64,
}

impl Drop for Injected {
    fn drop(&mut self) {
        let mut installed = INSTALLED.lock().unwrap_or_else(PoisonError::into_inner);
        installed.retain(|(_, id, _)| *id != self.id);
        COUNT.store(installed.len(), Ordering::Release);
    }
}
