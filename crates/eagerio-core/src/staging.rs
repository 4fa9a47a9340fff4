//! Staging: a bounded pool of aligned buffers that reads land in.
//!
//! Every slot has exactly one owner at a time. A free slot belongs to the pool; an acquired slot
//! belongs to the [`SlotLease`] that acquired it, and the lease goes wherever the read goes: to a
//! worker thread, or into a lane's in-flight table while the kernel writes into it. The slot
//! returns to the pool only when the lease is dropped, and the party that drops it is the one that
//! observed the read's completion. A gather that fails, panics or is dropped therefore cannot free
//! a slot that is still being written: the write's owner still holds the lease.
//!
//! The memory is one allocation aligned to 4096 bytes, with slots of equal size at aligned
//! offsets, so it can be used for `O_DIRECT` and registered with io_uring as one fixed buffer
//! ([`Staging::region`]). The allocation lives until the pool *and* every lease are gone.

use std::{
    alloc::{self, Layout},
    ptr::NonNull,
    task::{Context, Poll, Waker},
};

use crate::error::{Error, Result};
use crate::loom::{lock, wait, Arc, Condvar, Mutex, UnsafeCell};

/// Alignment of the staging memory and of every slot: defined with the syscalls that need it.
pub use crate::sys::STAGING_ALIGN;

/// Default staging per source: 8 MiB.
pub const DEFAULT_STAGING_BYTES: usize = 8 << 20;

struct Region {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the region is plain memory; access to each slot is serialised by the lease protocol
// (one owner per slot), checked by the per-slot `UnsafeCell`s under loom.
unsafe impl Send for Region {}
// SAFETY: as above; `&Region` only hands out raw pointers.
unsafe impl Sync for Region {}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc::alloc_zeroed(self.layout)` and is freed once, here, when
        // the last `Arc<Inner>` (pool or lease) goes away, so no read can still target it.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

struct FreeList {
    free: Vec<u32>,
    wakers: Vec<Waker>,
    /// Threads asleep in [`Staging::acquire_blocking`]: a release notifies the condvar only if
    /// one is (a notify with no waiter still costs a `FUTEX_WAKE` system call per release).
    blocked: usize,
}

struct Inner {
    region: Region,
    slot_size: usize,
    slots: usize,
    /// One cell per slot: under loom, every access to a slot's bytes goes through its cell, so a
    /// slot handed out while its previous owner still writes is a detected data race.
    cells: Box<[UnsafeCell<()>]>,
    free: Mutex<FreeList>,
    freed: Condvar,
}

// SAFETY: a slot's cell (and bytes) are only accessed through the one `SlotLease` that owns the
// slot; the free list, a mutex, hands each index to one lease at a time and takes it back only in
// the lease's drop, so no two threads access a slot's cell concurrently.
unsafe impl Sync for Inner {}
// SAFETY: as above; nothing in `Inner` is tied to a thread.
unsafe impl Send for Inner {}

/// A bounded pool of aligned staging slots. Cloning shares the pool.
#[derive(Clone)]
pub struct Staging {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Staging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staging")
            .field("slots", &self.inner.slots)
            .field("slot_size", &self.inner.slot_size)
            .field("free", &self.free_slots())
            .finish()
    }
}

impl Staging {
    /// A pool of `total_bytes / slot_size` slots of `slot_size` bytes.
    ///
    /// # Errors
    /// [`Error::InvalidOptions`] if `slot_size` is zero, not a multiple of 4096 or over 1 GiB, or
    /// the pool would hold no slot.
    pub fn new(total_bytes: usize, slot_size: usize) -> Result<Staging> {
        Staging::for_options(total_bytes, slot_size, ["staging_bytes", "slot_size"])
    }

    /// [`new`](Self::new) for a backend's options: errors name the options as the user wrote
    /// them, `names = [staging bytes, slot size]` (`["TokioOptions::staging_bytes",
    /// "TokioOptions::max_read"]`).
    ///
    /// # Errors
    /// As [`new`](Self::new); also a slot size over 1 GiB.
    pub fn for_options(total_bytes: usize, slot_size: usize, names: [&'static str; 2]) -> Result<Staging> {
        let slots = Staging::check_options(total_bytes, slot_size, names)?;
        let layout = Layout::from_size_align(slots * slot_size, STAGING_ALIGN)
            .map_err(|e| Error::invalid_option(names[0], e.to_string()))?;
        // SAFETY: the layout has a non-zero size (slots >= 1, slot_size >= 4096).
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        Ok(Staging {
            inner: Arc::new(Inner {
                region: Region { ptr, layout },
                slot_size,
                slots,
                cells: (0..slots).map(|_| UnsafeCell::new(())).collect(),
                free: Mutex::new(FreeList { free: (0..slots as u32).rev().collect(), wakers: Vec::new(), blocked: 0 }),
                freed: Condvar::new(),
            }),
        })
    }

    /// Checks the sizes [`for_options`](Self::for_options) takes, without allocating; returns
    /// the slot count.
    ///
    /// # Errors
    /// As [`for_options`](Self::for_options).
    pub fn check_options(total_bytes: usize, slot_size: usize, names: [&'static str; 2]) -> Result<usize> {
        let [total_name, slot_name] = names;
        if slot_size == 0 || slot_size % STAGING_ALIGN != 0 || slot_size > 1 << 30 {
            return Err(Error::invalid_option(
                slot_name,
                format!("{slot_size} is not a multiple of {STAGING_ALIGN} between {STAGING_ALIGN} and 1 GiB"),
            ));
        }
        let slots = total_bytes / slot_size;
        if slots == 0 || slots > u32::MAX as usize {
            return Err(Error::invalid_option(
                total_name,
                format!("{total_bytes} bytes hold no slot of {slot_size} bytes ({slot_name})"),
            ));
        }
        Ok(slots)
    }

    /// Size of one slot.
    pub fn slot_size(&self) -> usize {
        self.inner.slot_size
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.inner.slots
    }

    /// Slots free right now.
    pub fn free_slots(&self) -> usize {
        lock(&self.inner.free).free.len()
    }

    /// Whether every slot is back in the pool (nothing in flight, nothing leaked).
    pub fn is_full(&self) -> bool {
        self.free_slots() == self.inner.slots
    }

    /// The whole region, for registering with a kernel (`io_uring_register_buffers`).
    pub fn region(&self) -> (*mut u8, usize) {
        (self.inner.region.ptr.as_ptr(), self.inner.region.layout.size())
    }

    /// Runs `f` on slot `idx`'s bytes as the party a lease handed the slot to (a kernel or a
    /// worker writing into it), through the slot's tracked cell. Exists so loom models can show
    /// that a kernel write racing a reused slot is caught.
    ///
    /// # Safety
    /// A lease of slot `idx` must be alive for the whole call and must not be used meanwhile.
    #[doc(hidden)]
    pub unsafe fn access_as_owner<R>(&self, idx: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
        assert!(idx < self.inner.slots, "slot {idx} out of range");
        // SAFETY: `idx < slots`, so the offset stays inside the region's allocation.
        let ptr = unsafe { self.inner.region.ptr.as_ptr().add(idx * self.inner.slot_size) };
        let len = self.inner.slot_size;
        self.inner.cells[idx].with_mut(|_| {
            // SAFETY: the caller guarantees a live, unused lease of this slot, so this is the
            // slot's only access.
            f(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
        })
    }

    /// Takes a free slot, if any.
    pub fn try_acquire(&self) -> Option<SlotLease> {
        let idx = lock(&self.inner.free).free.pop()?;
        Some(SlotLease { inner: self.inner.clone(), idx })
    }

    /// Takes a free slot, blocking the thread until one is released. For worker threads.
    pub fn acquire_blocking(&self) -> SlotLease {
        let mut g = lock(&self.inner.free);
        loop {
            if let Some(idx) = g.free.pop() {
                return SlotLease { inner: self.inner.clone(), idx };
            }
            g.blocked += 1;
            g = wait(&self.inner.freed, g);
            g.blocked -= 1;
        }
    }

    /// Takes a free slot, or registers `cx`'s waker to be woken when one is released.
    pub fn poll_acquire(&self, cx: &mut Context<'_>) -> Poll<SlotLease> {
        let mut g = lock(&self.inner.free);
        if let Some(idx) = g.free.pop() {
            return Poll::Ready(SlotLease { inner: self.inner.clone(), idx });
        }
        if !g.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            g.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// Exclusive ownership of one staging slot. Dropping it returns the slot to the pool, so drop it
/// only once the read into it has completed (see the module docs).
pub struct SlotLease {
    inner: Arc<Inner>,
    idx: u32,
}

impl std::fmt::Debug for SlotLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotLease").field("slot", &self.idx).finish()
    }
}

impl SlotLease {
    /// The slot's index in the pool.
    pub fn index(&self) -> usize {
        self.idx as usize
    }

    /// The slot's size in bytes.
    pub fn len(&self) -> usize {
        self.inner.slot_size
    }

    /// Never true: slots have a non-zero size.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The slot's address, for handing to a kernel. The lease must outlive the kernel's use of
    /// it: keep the lease with the in-flight operation until its completion is reaped.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        // SAFETY: `idx < slots`, so the offset stays inside the region's allocation.
        unsafe { self.inner.region.ptr.as_ptr().add(self.idx as usize * self.inner.slot_size) }
    }

    /// Runs `f` on the slot's bytes, mutably. Under loom this is a tracked write access.
    pub fn with_mut<R>(&mut self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let ptr = self.as_mut_ptr();
        let len = self.inner.slot_size;
        self.inner.cells[self.idx as usize].with_mut(|_| {
            // SAFETY: this lease is the slot's only owner (the free list hands each index to one
            // lease at a time), `&mut self` excludes other uses through it, and the range lies in
            // the live region.
            f(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
        })
    }

    /// Runs `f` on the slot's bytes. Under loom this is a tracked read access.
    pub fn with<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        // SAFETY: `idx < slots`, so the offset stays inside the region's allocation.
        let ptr = unsafe { self.inner.region.ptr.as_ptr().add(self.idx as usize * self.inner.slot_size) };
        let len = self.inner.slot_size;
        self.inner.cells[self.idx as usize].with(|_| {
            // SAFETY: as in `with_mut`; shared access through `&self` only.
            f(unsafe { std::slice::from_raw_parts(ptr, len) })
        })
    }
}

impl Drop for SlotLease {
    fn drop(&mut self) {
        let (wakers, blocked) = {
            let mut g = lock(&self.inner.free);
            debug_assert!(!g.free.contains(&self.idx), "slot {} freed twice", self.idx);
            g.free.push(self.idx);
            (std::mem::take(&mut g.wakers), g.blocked > 0)
        };
        if blocked {
            self.inner.freed.notify_one();
        }
        for w in wakers {
            crate::loom::wake(w);
        }
    }
}

#[cfg(all(test, not(eagerio_loom)))]
mod tests {
    use super::*;

    #[test]
    fn slots_are_aligned_and_bounded() {
        let s = Staging::new(64 * 1024, 16 * 1024).unwrap();
        assert_eq!((s.slots(), s.slot_size()), (4, 16 * 1024));
        let (base, len) = s.region();
        assert_eq!(len, 64 * 1024, "the region holds every slot");
        let mut leases: Vec<_> = (0..4).map(|_| s.try_acquire().unwrap()).collect();
        assert!(s.try_acquire().is_none());
        assert!(!s.is_full());
        let mut seen = std::collections::BTreeSet::new();
        for l in &mut leases {
            assert!(l.index() < 4 && seen.insert(l.index()), "slot {} handed out twice", l.index());
            assert_eq!((l.len(), l.is_empty()), (16 * 1024, false));
            let at = l.as_mut_ptr() as usize - base as usize;
            assert_eq!(at, l.index() * 16 * 1024, "slot {} is not at its offset", l.index());
        }
        drop(leases);
        assert!(s.is_full());
    }

    /// Each lease reads and writes its own slot's bytes, not another's.
    #[test]
    fn leases_see_their_own_bytes() {
        let s = Staging::new(3 * 4096, 4096).unwrap();
        let mut leases: Vec<_> = (0..3).map(|_| s.try_acquire().unwrap()).collect();
        for l in &mut leases {
            let v = l.index() as u8 + 1;
            l.with_mut(|b| b.fill(v));
        }
        for l in &leases {
            let v = l.index() as u8 + 1;
            assert!(l.with(|b| b.len() == 4096 && b.iter().all(|&x| x == v)), "slot {}", l.index());
        }
    }

    /// An async acquirer of an exhausted pool waits, and a released slot wakes it.
    #[test]
    fn poll_acquire_waits_and_is_woken() {
        let s = Staging::new(4096, 4096).unwrap();
        let held = s.try_acquire().unwrap();
        let (waker, count) = futures_test::task::new_count_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(s.poll_acquire(&mut cx).is_pending());
        assert!(s.poll_acquire(&mut cx).is_pending(), "polled twice, registered once");
        drop(held);
        assert_eq!(count.get(), 1, "the release woke the waiter once");
        assert!(matches!(s.poll_acquire(&mut cx), Poll::Ready(_)));
    }

    /// The size limits, checked without allocating.
    #[test]
    fn size_limits_are_exact() {
        let names = ["total", "slot"];
        assert_eq!(Staging::check_options(1 << 30, 1 << 30, names).unwrap(), 1);
        assert!(Staging::check_options(2 << 30, (1 << 30) + 4096, names).is_err());
        let most = u32::MAX as usize;
        assert_eq!(Staging::check_options(most * 4096, 4096, names).unwrap(), most);
        let e = Staging::check_options((most + 1) * 4096, 4096, names).unwrap_err();
        assert!(e.to_string().contains("`total`"), "{e}");
        assert_eq!(DEFAULT_STAGING_BYTES, 8 << 20, "the documented default");
    }

    #[test]
    fn memory_outlives_the_pool_while_leased() {
        let s = Staging::new(8192, 4096).unwrap();
        let mut l = s.try_acquire().unwrap();
        drop(s);
        l.with_mut(|b| b.fill(7));
        assert!(l.with(|b| b.iter().all(|&x| x == 7)));
    }

    /// A thread asleep in `acquire_blocking` on an exhausted pool is woken by the next release
    /// (a release notifies only when a thread sleeps: the count of sleepers must be right).
    #[test]
    fn acquire_blocking_wakes_on_release() {
        let s = Staging::new(4096, 4096).unwrap();
        for _ in 0..3 {
            let held = s.try_acquire().unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            let pool = s.clone();
            let t = std::thread::spawn(move || tx.send(pool.acquire_blocking().index()).unwrap());
            // Give the thread time to fall asleep (if it has not, it takes the slot without
            // sleeping, and the test passes without testing the wake-up).
            std::thread::sleep(std::time::Duration::from_millis(50));
            drop(held);
            let got = rx.recv_timeout(std::time::Duration::from_secs(30));
            assert_eq!(got.expect("the sleeping thread was never woken"), 0);
            t.join().unwrap();
        }
    }

    #[test]
    fn bad_sizes_are_refused() {
        assert!(Staging::new(4096, 1000).is_err());
        assert!(Staging::new(100, 4096).is_err());
    }
}
