//! [`OutputPool`]: large gather outputs kept for the next gather, so that a caller who hands each
//! gather's bytes away (an `ObjectStore::get_ranges`, a Parquet reader fetching row groups) does
//! not pay the kernel to zero fresh memory for every gather.
//!
//! glibc's `malloc` serves every block above 32 MiB with a fresh `mmap` and returns it with
//! `munmap` when freed, so a 150 MB output costs its 150 MB of page faults and zeroing each time;
//! a loop of `pread`s into per-range buffers below that size gets recycled heap memory instead.
//! With a pool, a pooled source's output of at least [`OutputPool::MIN`] bytes is a
//! `Bytes::from_owner` whose owner gives the buffer back to the pool when the last `Bytes` of the
//! gather drops, and the next large gather of any source sharing the pool takes it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};

/// Gather outputs nobody holds any more, kept for the next gather of a source that shares the
/// pool ([`Source::with_output_pool`](super::Source::with_output_pool)).
///
/// # Memory
/// The pool keeps at most its budget of free buffers (outputs still held by the caller do not
/// count): a buffer given back past the budget first frees the oldest kept ones, and one larger
/// than the budget is freed at once. Kept buffers stay resident until a gather takes them,
/// [`clear`](Self::clear) frees them, or the pool and every output of it are dropped.
///
/// # Which buffer a gather takes
/// The smallest kept buffer with room for its output, or else the largest kept one, grown by the
/// allocator to fit (a block the allocator maps, as glibc does above 32 MiB, keeps the pages it
/// had; a smaller one may be copied). Outputs below [`MIN`](Self::MIN) bytes never touch the
/// pool. The pool only ever holds buffers no gather and no `Bytes` refers
/// to: a buffer comes back when the last `Bytes` sharing it drops, after its job settled.
#[derive(Debug)]
pub struct OutputPool {
    budget: usize,
    free: Mutex<Free>,
}

#[derive(Debug, Default)]
struct Free {
    /// Oldest first.
    bufs: VecDeque<BytesMut>,
    /// Their capacities' sum.
    bytes: usize,
    /// Gathers that took a kept buffer.
    reused: u64,
}

impl OutputPool {
    /// The smallest output that comes from and goes back to a pool; the allocator recycles
    /// smaller ones well.
    pub const MIN: usize = 4 << 20;

    /// A pool keeping at most `budget` bytes of free buffers (0 keeps none).
    pub fn new(budget: usize) -> Arc<OutputPool> {
        Arc::new(OutputPool { budget, free: Mutex::new(Free::default()) })
    }

    /// Bytes of free buffers kept now.
    pub fn held(&self) -> usize {
        self.lock().bytes
    }

    /// How many gathers took a kept buffer so far.
    pub fn reused(&self) -> u64 {
        self.lock().reused
    }

    /// Frees every kept buffer.
    pub fn clear(&self) {
        let bufs = {
            let mut free = self.lock();
            free.bytes = 0;
            std::mem::take(&mut free.bufs)
        };
        drop(bufs);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Free> {
        // A panic cannot leave `Free` half-updated in a way that matters: at worst `bytes`
        // miscounts a buffer until the next `clear`.
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A kept buffer, emptied, for an output of `len` bytes (see the type's docs for which);
    /// `None` for a small output or an empty pool.
    pub(super) fn take(&self, len: usize) -> Option<BytesMut> {
        if len < Self::MIN {
            return None;
        }
        let mut free = self.lock();
        let caps = free.bufs.iter().map(BytesMut::capacity).enumerate();
        let fit = caps.clone().filter(|&(_, c)| c >= len).min_by_key(|&(_, c)| c);
        let (i, cap) = fit.or_else(|| caps.max_by_key(|&(_, c)| c))?;
        let mut buf = free.bufs.remove(i).expect("an index of the deque");
        free.bytes -= cap;
        free.reused += 1;
        drop(free);
        buf.clear();
        if buf.capacity() < len {
            // Grown to exactly `len` (`BytesMut::reserve` would double it): `realloc` of a block
            // the allocator maps moves its pages (`mremap`) rather than copying or zeroing them.
            let mut v = Vec::from(buf);
            v.reserve_exact(len);
            // An unshared, empty `Bytes` becomes a `BytesMut` of the same block, not a copy.
            buf = BytesMut::from(Bytes::from(v));
        }
        Some(buf)
    }

    /// The bytes of a settled gather's output `out`, giving it back to the pool when the last
    /// `Bytes` sharing it drops (a small output is frozen as usual).
    pub(super) fn wrap(self: &Arc<Self>, out: BytesMut) -> Bytes {
        if out.len() < Self::MIN {
            return out.freeze();
        }
        Bytes::from_owner(Owned::new(out, Some(self.clone())))
    }

    /// Keeps `buf`, which nothing else refers to, for a later gather (within the budget).
    pub(super) fn give_back(&self, buf: BytesMut) {
        let cap = buf.capacity();
        if cap < Self::MIN || cap > self.budget {
            return;
        }
        let mut free = self.lock();
        let mut evicted = Vec::new();
        while free.bytes + cap > self.budget {
            let old = free.bufs.pop_front().expect("the kept bytes are the kept buffers' sum");
            free.bytes -= old.capacity();
            evicted.push(old);
        }
        free.bytes += cap;
        free.bufs.push_back(buf);
        drop(free);
        // Freed outside the lock: `munmap` of a large buffer takes a while.
        drop(evicted);
    }
}

/// A gather's output, owned by whatever shares it (every `Bytes` of a future's result, or a
/// stream's job and the rows it yielded): back to its pool, if it has one, when the last owner
/// drops it.
pub(super) struct Owned {
    buf: BytesMut,
    pool: Option<Arc<OutputPool>>,
}

impl Owned {
    pub(super) fn new(buf: BytesMut, pool: Option<Arc<OutputPool>>) -> Owned {
        Owned { buf, pool }
    }
}

impl AsRef<[u8]> for Owned {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            pool.give_back(std::mem::take(&mut self.buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: usize = 1 << 20;

    /// A settled output of `cap` bytes, in a fresh buffer of exactly that capacity.
    fn output(pool: &Arc<OutputPool>, cap: usize, fill: u8) -> Bytes {
        let mut b = BytesMut::with_capacity(cap);
        b.resize(cap, fill);
        pool.wrap(b)
    }

    #[test]
    fn pool_gives_a_buffer_back_when_its_last_bytes_drops() {
        let pool = OutputPool::new(64 * M);
        let out = output(&pool, 8 * M, 7);
        let (a, b) = (out.slice(..10), out.slice(8 * M - 10..));
        drop(out);
        drop(a);
        assert_eq!(pool.held(), 0, "a slice still holds the output");
        assert_eq!(&b[..], &[7u8; 10]);
        drop(b);
        assert!(pool.held() >= 8 * M);
        let again = pool.take(OutputPool::MIN).expect("the kept buffer: MIN itself is pooled");
        assert!(again.capacity() >= 8 * M && again.is_empty());
        assert_eq!((pool.held(), pool.reused()), (0, 1));
    }

    #[test]
    fn pool_takes_the_smallest_that_fits_else_the_largest() {
        let pool = OutputPool::new(64 * M);
        for cap in [16 * M, 8 * M, 12 * M] {
            drop(output(&pool, cap, 0));
        }
        assert_eq!(pool.take(9 * M).map(|b| b.capacity() / M), Some(12));
        assert_eq!(pool.take(20 * M).map(|b| b.capacity() / M), Some(20), "the largest, grown exactly");
        assert_eq!(pool.take(M), None, "below MIN");
        assert_eq!(pool.take(5 * M).map(|b| b.capacity() / M), Some(8));
        assert_eq!(pool.take(5 * M).map(|b| b.capacity()), None);
        assert_eq!(pool.reused(), 3);
    }

    #[test]
    fn pool_keeps_within_its_budget_newest_first() {
        let pool = OutputPool::new(20 * M);
        drop(output(&pool, 8 * M, 0));
        drop(output(&pool, 12 * M, 0));
        assert_eq!(pool.held() / M, 20, "exactly the budget");
        drop(output(&pool, 5 * M, 0));
        assert_eq!(pool.held() / M, 17, "the oldest (8 MiB) went, and only it");
        drop(output(&pool, 21 * M, 0));
        assert_eq!(pool.held() / M, 17, "larger than the budget: freed at once");
        let exact = OutputPool::new(8 * M);
        drop(output(&exact, 8 * M, 0));
        assert_eq!(exact.held() / M, 8, "as large as the budget: kept");
        pool.clear();
        assert_eq!(pool.held(), 0);
        assert_eq!(pool.take(5 * M).map(|b| b.capacity()), None);
        let none = OutputPool::new(0);
        drop(output(&none, 8 * M, 0));
        assert_eq!(none.held(), 0);
    }

    #[test]
    fn pool_leaves_small_outputs_to_the_allocator() {
        let pool = OutputPool::new(64 * M);
        drop(output(&pool, OutputPool::MIN - 1, 1));
        assert_eq!(pool.held(), 0);
        drop(output(&pool, OutputPool::MIN, 1));
        assert_eq!(pool.held(), OutputPool::MIN, "MIN itself is pooled");
    }
}
