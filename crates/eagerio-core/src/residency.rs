//! The adaptive gather's residency path: serve the extents whose pages are already in the page
//! cache by copying them from a read-only mapping, and send only the misses to the direct-read
//! engine.
//!
//! # How
//! At open, the file is mapped read-only (`MAP_SHARED`, default advice: a `MADV_RANDOM` mapping
//! loses the kernel's fault-around and made warm copies slower). A bitmap remembers which pages
//! this mapping maps because a copy read them. Before planning, each request is looked up in
//! it (one lookup per page): the requests whose pages are all mapped (a warm table's rows asked
//! for again) are copied in request order, as a loop over an mmap would
//! ([`Residency::copy_in_order`]; on a preparing thread, a copy of at least 8,192 requests is
//! shared with the other preparing threads: on two cores, a warm gather of 40,000 random 4 KiB
//! rows took half its time, one of 90 B rows 10-30% less), and only the others are planned. Sorting 40,000 requests
//! costs more than copying them when they are resident, so a gather whose every page is mapped
//! has no read planned and settles when the copy ends (in the call, or on a preparing thread for
//! a large gather). When more than half of the requests are not mapped, the whole gather is
//! planned. Then, before the engine sees the job:
//! 0. A cold table skips everything below: the first pages of up to 16 extents spread over the
//!    plan are probed with `mincore` (a warm table answers at the first), and when none is
//!    cached, one `cachestat(2)` (Linux 6.5) says whether any page of the file is.
//! 1. Extents whose pages this mapping already maps (the bitmap says so) are resident without
//!    a check: eviction skips mapped pages. For the others, `mincore` reports which pages are
//!    resident. Extents close together share one call (a window of up to [`WINDOW_PAGES`]
//!    pages), so a 40,000-row gather costs a few hundred calls, not one per row. An extent counts as resident when its pieces' pages are: the hole
//!    a coalesced read joins across is never copied, so its pages do not matter.
//! 2. Right after each window's check, while its page tables are still in the CPU's caches,
//!    the pieces of its resident extents are copied into the output with a plain memory copy
//!    from the mapping that survives `SIGBUS` (`recover::copy`), prefetching a few extents
//!    ahead: if the file was truncated under us, the copy stops at the lost page, and that
//!    extent goes to the engine like any miss (and then fails with a short read, naming the
//!    row). A run of resident reads that is one stretch of the file landing in one stretch of
//!    the output (a large request, or requests back to back in the file asked in file order),
//!    of at least [`PREAD_MIN`] bytes and not all mapped yet, is copied with one
//!    `preadv2(RWF_NOWAIT)` instead: as fast as a first touch of the mapping there, and it maps
//!    no page, so a warm scan adds nothing to the process's resident memory; a cut file or a
//!    page evicted since the check is a short read, and the run goes to the engine. Where
//!    `recover::copy` is not available (only x86_64 has it), runs are not read this way, and
//!    the pieces go through
//!    `process_vm_readv` on our own address space, up to 1024 pieces per call, which reports
//!    the lost page as `EFAULT` instead.
//! 3. The engine reads only the misses. Direct reads do not populate the page cache, so a cold
//!    table never grows it.
//!
//! # Faults
//! A page can be evicted between `mincore` and the copy, and memory pressure can reclaim a page
//! the bitmap says is mapped. The copy then faults it in (one synchronous read per evicted
//! page, never the whole gather) and the gather counts it in
//! [`GatherStats::resident_faults`](crate::GatherStats::resident_faults), measured as the
//! copying thread's major faults during the copy; a gather that took one (or whose copy the
//! file cut short) clears the bitmap, so the next gathers check every page again. A run read
//! with `preadv2(RWF_NOWAIT)` never waits: a page evicted under it makes the read short, and
//! the whole run goes to the engine (no fault is counted; the bitmap does not hold its pages).
//!
//! # Eviction
//! Pages the copy touched stay mapped by the source's mapping, and the kernel skips mapped pages
//! in `posix_fadvise(DONTNEED)` and `drop_caches` (reclaim under memory pressure still takes
//! them). To evict a table on purpose, call [`Source::unmap_resident`](crate::Source::unmap_resident)
//! first.
//!
//! # Why not `memcpy`
//! A `memcpy` from the mapping is as fast, but a file truncated between the length check and
//! the copy would kill the process with `SIGBUS`. The library must survive a file cut under it
//! (it reports a short read naming the row), so the copy is one whose fault the library's
//! `SIGBUS` handler turns into an early return. The handler passes every other `SIGBUS` on to
//! the handler installed before it (by default, the process ends as it would have). Copying
//! through `process_vm_readv` survives too, but it pins every page it copies: it took 4-5 times
//! a memory copy's time on warm 90-byte rows.
//!
//! # Where it does not win
//! On a file that is never resident (nothing else reads it buffered), the sampled probe and one
//! `cachestat(2)` call find no cached page and the gather skips the `mincore` pass and the copy;
//! on older kernels the pass runs and is pure overhead: about 1-2% of a cold gather's time. The
//! `mincore` pass costs about the same per page of the span it covers whether or not the page
//! is cached (a 40,000-row gather over a 2 GiB table checks every page of it: 6-20 ms), so
//! rows a table serves for the first time cost that much more than rows it served before. Files on
//! filesystems without `O_DIRECT` are read buffered anyway, so their misses populate the page
//! cache.
//!
//! # Why one file
//! About 780 lines of code and 345 of tests: one mechanism (the mapping, its bitmap, the
//! `mincore` windows and the two copy paths, with the fault recovery they share) that every
//! local backend uses through [`Source`](crate::Source); its parts change together.

use std::{
    fs::File,
    io,
    ops::Range,
    os::fd::AsRawFd,
    sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed},
};

use crate::plan::{Extent, Piece, Plan};
use crate::recover;

/// Largest `mincore` window, in pages.
pub const WINDOW_PAGES: u64 = 1024;
/// Largest file, in pages, whose mapped pages [`Residency`] remembers (64 GiB of 4 KiB pages:
/// a 2 MiB bitmap).
const MEMO_MAX_PAGES: u64 = 16 << 20;
/// How many extents ahead of the copy [`Residency::prefetch`] runs.
const AHEAD: usize = 8;
/// How many requests ahead of [`Residency::copy_in_order`] its prefetch runs.
const AHEAD_ROWS: usize = 16;
/// A gather's output, written by the parts of a shared copy, each to bytes of its own.
struct SharedOut(*mut u8);

// SAFETY: the parts of a copy write disjoint bytes of the output, which the caller of
// `copy_in_order` lends it whole for the call (its safety contract); the pointer is not used
// after the call returns.
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// The output `offset` bytes in (a method, so closures take the whole `Sync` wrapper).
    fn at(&self, offset: usize) -> *mut u8 {
        self.0.wrapping_add(offset)
    }
}

/// Requests a part of a shared [`Residency::copy_in_order`] copies: about 150 µs of random
/// 90-byte rows, 20-50 times the cost of handing a part to another thread.
pub const SHARE_ROWS: usize = 4096;
/// Requests not mapped that [`Residency::split_mapped`] takes before it may give up on a gather
/// whose requests are mostly not mapped.
const SPLIT_PROBE: usize = 32;
/// Extents whose first page is probed before a gather asks `cachestat` whether the file is cold.
const SAMPLES: usize = 16;
/// Pages between two extents still checked in one window (the bytes between cost a page-table
/// walk, not I/O).
const JOIN_PAGES: u64 = 64;
/// Runs of resident reads of at least this many bytes, back to back in the file and in the
/// output (see [`Residency::serve`]) and not all mapped yet, are copied with one `preadv2`
/// instead of through the mapping. A first touch of the mapping faults each page in (the
/// fault maps 16 pages at a time); over a large piece that costs about as much as `pread`'s
/// copy (a scratch loop on warm 64 KiB-1 MiB ranges of a 2 GiB file: 4-5 GB/s either way), and
/// every page mapped counts in the process's resident memory: a query engine's warm scan of a
/// 1.2 GB file through the mapping showed 1 GiB more RSS than a `pread` loop's. Smaller runs
/// stay mapped, so the next gathers of the same rows copy them without a system call.
pub const PREAD_MIN: u32 = 128 << 10;
/// `IOV_MAX` on Linux.
const IOV_MAX: usize = 1024;

/// A read-only mapping of a table file, for residency checks and copies.
#[derive(Debug)]
pub struct Residency {
    base: *mut libc::c_void,
    len: usize,
    page: u64,
    file: File,
    /// Whether `cachestat(2)` answered here (Linux 6.5); cleared at its first refusal.
    cachestat: AtomicBool,
    /// The pages this mapping maps because a copy read them, a bit each (empty for a file over
    /// [`MEMO_MAX_PAGES`]): see [`is_mapped`](Self::is_mapped).
    mapped: Box<[AtomicU64]>,
}

// SAFETY: the mapping is read-only and only read through syscalls (`mincore`,
// `process_vm_readv`) and `recover::copy`, which tolerate concurrent changes to the file;
// nothing is tied to a thread.
unsafe impl Send for Residency {}
// SAFETY: as above: shared use only issues those syscalls.
unsafe impl Sync for Residency {}

impl Drop for Residency {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are the mapping made in `map`, unmapped once here.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// The outcome of serving a plan's resident extents.
#[derive(Debug, Default)]
pub struct Served {
    /// Per extent: served from the cache (its pieces are in the output).
    pub resident: Vec<bool>,
    /// Pieces copied.
    pub pieces: u64,
    /// Requests whose every piece was served from the cache.
    pub rows: u64,
    /// Extents served.
    pub extents: usize,
    /// Major faults taken while copying (pages evicted after the check).
    pub faults: u64,
    /// A copy stopped short: the file lost a page after the check.
    pub stopped: bool,
}

impl Served {
    /// This outcome with the rows and faults of `copied` (rows served before planning) added.
    pub fn and(mut self, copied: Served) -> Served {
        self.rows += copied.rows;
        self.faults += copied.faults;
        self
    }
}

impl Residency {
    /// Maps `file` (opened read-only, any mode) of length `len`.
    ///
    /// # Errors
    /// The `mmap` error (for example `ENODEV` on filesystems that cannot map).
    pub fn map(file: &File, len: u64) -> io::Result<Residency> {
        let file = file.try_clone()?;
        let page = crate::sys::page_size() as u64;
        let len = len.max(1) as usize;
        // SAFETY: a fresh read-only shared mapping of a file we hold open; checked below.
        let base =
            unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0) };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let pages = (len as u64).div_ceil(page);
        let words = if pages <= MEMO_MAX_PAGES { pages.div_ceil(64) as usize } else { 0 };
        let mapped = (0..words).map(|_| AtomicU64::new(0)).collect();
        Ok(Residency { base, len, page, file, cachestat: AtomicBool::new(true), mapped })
    }

    /// Drops this mapping's page-table entries (the pages stay in the page cache). Pages the
    /// adaptive mode copied stay mapped by it, and mapped pages are skipped by
    /// `posix_fadvise(DONTNEED)` and `drop_caches` (memory pressure still reclaims them); call
    /// this before evicting a table on purpose, as a cold benchmark does.
    pub fn unmap_pages(&self) {
        // SAFETY: our own read-only shared mapping: MADV_DONTNEED only drops its page-table
        // entries; later accesses fault the pages back in from the cache or the file.
        unsafe { libc::madvise(self.base, self.len, libc::MADV_DONTNEED) };
        self.forget();
    }

    /// Whether every page of extent `k`'s pieces is mapped by this mapping since a copy read it
    /// (and the extent lies within `file_len`). Such a page stays in the page cache: eviction
    /// (`posix_fadvise(DONTNEED)`, `drop_caches`) skips mapped pages, and only memory pressure
    /// (or a truncation) takes one; a copy that then faults is counted, and the gather forgets
    /// every page ([`forget`](Self::forget)). So a warm table's repeated rows skip `mincore`,
    /// which costs about 40 ns for every page of the span it checks, cached or not.
    fn is_mapped(&self, plan: &Plan, k: usize, file_len: u64) -> bool {
        let e = &plan.extents()[k];
        if self.mapped.is_empty() || e.offset + u64::from(e.needed) > file_len {
            return false;
        }
        plan.pieces(k).iter().all(|p| piece_pages(e, p, self.page).all(|pg| self.page_mapped(pg)))
    }

    /// Whether page `pg` is in the bitmap of mapped pages (which must not be empty).
    fn page_mapped(&self, pg: u64) -> bool {
        self.mapped[(pg / 64) as usize].load(Relaxed) & (1 << (pg % 64)) != 0
    }

    /// Sorts checked `requests` into those whose every byte lies on a page this mapping maps
    /// since a copy read it, within the file's current length, and the others: returns the
    /// output length and the others (each a request's index and where its bytes land in the
    /// output), in request order. [`copy_in_order`](Self::copy_in_order) then copies the
    /// first kind without a plan, and only the others are planned. `None` when the bitmap is
    /// off, or when more than half of the requests are not mapped (a cold table: the plan path
    /// checks those with `mincore` instead). One bitmap lookup per page of each request.
    pub fn split_mapped(&self, requests: &[(u64, u64)]) -> Option<(u64, Vec<(u32, u64)>)> {
        if self.mapped.is_empty() {
            return None;
        }
        let file_len = self.current_len();
        // Pages are a power of two: a shift, not a division, per request (a third of the pass).
        let shift = self.page.trailing_zeros();
        let mut missing = Vec::new();
        let mut out = 0u64;
        for (i, &(off, len)) in requests.iter().enumerate() {
            let mapped = off
                .checked_add(len)
                .filter(|&end| len > 0 && end <= file_len)
                .is_some_and(|end| (off >> shift..=(end - 1) >> shift).all(|pg| self.page_mapped(pg)));
            if !mapped {
                missing.push((i as u32, out));
                if missing.len() > SPLIT_PROBE && missing.len() * 2 > i + 1 {
                    return None;
                }
            }
            out = out.checked_add(len)?;
        }
        (missing.len() < requests.len()).then_some((out, missing))
    }

    /// Copies the bytes of every request but the `missing` ones (as
    /// [`split_mapped`](Self::split_mapped) returned them) from the mapping to `out`, in
    /// request order, as a loop over an mmap does: no plan, no sort. With `shared` (the caller
    /// is a preparing thread), a copy of at least two [`SHARE_ROWS`] parts is shared with the
    /// other preparing threads (`prepare::share`). Returns the rows
    /// copied and the major faults taken (pages reclaimed since a copy mapped them, read back
    /// in), or `None` when a copy stopped short because the file was cut: `out` then holds a
    /// partial copy, and the whole gather must be planned (every byte of `out` is written
    /// again). Either a fault or a cut clears the bitmap. `None` also where this architecture
    /// has no copy that survives a cut file (the plan path serves those gathers).
    ///
    /// # Safety
    /// `out` must point at the requests' total length in writable bytes that nothing else
    /// accesses during the call, and every request not in `missing` must end within this
    /// mapping (as [`split_mapped`](Self::split_mapped) checks).
    pub unsafe fn copy_in_order(
        &self,
        requests: &[(u64, u64)],
        missing: &[(u32, u64)],
        out: *mut u8,
        shared: bool,
    ) -> Option<Served> {
        if !recover::install() {
            return None;
        }
        let per = if shared && requests.len() >= 2 * SHARE_ROWS { SHARE_ROWS } else { requests.len().max(1) };
        // Where each part's bytes start in the output (a pass over the requests only when the
        // copy is shared: a copy of one part starts at 0).
        let starts: Vec<usize> = if per >= requests.len() {
            vec![0]
        } else {
            requests
                .chunks(per)
                .scan(0usize, |at, part| {
                    let start = *at;
                    *at += part.iter().map(|&(_, len)| len as usize).sum::<usize>();
                    Some(start)
                })
                .collect()
        };
        let (cut, faults) = (AtomicBool::new(false), AtomicU64::new(0));
        let out = SharedOut(out);
        let part = |k: usize| {
            let rows = k * per..((k + 1) * per).min(requests.len());
            let skip = &missing[missing.partition_point(|m| (m.0 as usize) < rows.start)..];
            let before = major_faults();
            // SAFETY: the part's requests land in `out` from `starts[k]` on, before the next
            // part's start: bytes no other part writes, inside the caller's exclusive `out`; the
            // rest is the caller's contract.
            let whole = unsafe { self.copy_rows(requests, rows, skip, out.at(starts[k])) };
            faults.fetch_add(major_faults().saturating_sub(before), Relaxed);
            if !whole {
                cut.store(true, Relaxed);
            }
        };
        crate::prepare::share(starts.len(), &part);
        let (cut, faults) = (cut.into_inner(), faults.into_inner());
        if cut || faults > 0 {
            self.forget();
        }
        let rows = (requests.len() - missing.len()) as u64;
        (!cut).then_some(Served { rows, faults, ..Served::default() })
    }

    /// Copies `requests[rows]` but those `skip` names (the missing ones from this part's on, in
    /// request order) to `out` back to back, from the part's first request on. `false` if a
    /// copy stopped short (the file was cut).
    ///
    /// # Safety
    /// As [`copy_in_order`](Self::copy_in_order), for `out` pointing at this part's bytes.
    unsafe fn copy_rows(&self, requests: &[(u64, u64)], rows: Range<usize>, skip: &[(u32, u64)], out: *mut u8) -> bool {
        let mut at = 0usize;
        let mut skip = skip.iter().map(|&(i, _)| i as usize).peekable();
        for i in rows.clone() {
            let (off, len) = requests[i];
            if let Some(&(ahead, _)) = requests[..rows.end].get(i + AHEAD_ROWS) {
                self.prefetch_at(self.base as usize + ahead as usize);
            }
            if skip.next_if_eq(&i).is_none() {
                // SAFETY: `at + len` is within the part's bytes, inside the caller's exclusive
                // `out`; the source lies inside our mapping (the caller's contract), which lives
                // as long as `self`; a page the file lost since is the fault `copy` survives.
                let whole =
                    unsafe { recover::copy(out.add(at), self.base.cast::<u8>().add(off as usize), len as usize) };
                if !whole {
                    return false;
                }
            }
            at += len as usize;
        }
        true
    }

    /// Records piece `p` of extent `e`'s pages as mapped: a copy just read them through the
    /// mapping.
    fn mark_mapped(&self, e: &Extent, p: &Piece) {
        if self.mapped.is_empty() {
            return;
        }
        for pg in piece_pages(e, p, self.page) {
            let (word, bit) = (&self.mapped[(pg / 64) as usize], 1u64 << (pg % 64));
            if word.load(Relaxed) & bit == 0 {
                word.fetch_or(bit, Relaxed);
            }
        }
    }

    /// Copies `len` bytes at `offset` of the file from the page cache into `dst`, with
    /// `preadv2(RWF_NOWAIT)`: never waiting for the disk, so a page evicted since the check
    /// makes the read short instead of a synchronous read on this thread (the caller's, for a
    /// small gather). `false` if the read comes up short for that reason, because the file ends
    /// first (it was cut after the check), or on an error; the caller then sends the bytes to
    /// the engine. Where the file's filesystem refuses `RWF_NOWAIT`, a plain `pread`.
    ///
    /// # Safety
    /// `dst` must point at `len` writable bytes that nothing else accesses during the call.
    unsafe fn pread_exact(&self, dst: *mut u8, len: usize, offset: u64) -> bool {
        let mut done = 0usize;
        let mut flags = libc::RWF_NOWAIT;
        while done < len {
            let iov = libc::iovec { iov_base: dst.wrapping_add(done).cast(), iov_len: len - done };
            // SAFETY: `iov` covers `dst + done .. dst + len`, inside the caller's exclusive `len`
            // bytes; the descriptor is ours and open.
            let n =
                unsafe { libc::preadv2(self.file.as_raw_fd(), &iov, 1, (offset + done as u64) as libc::off_t, flags) };
            if n > 0 {
                done += n as usize;
                continue;
            }
            match (n, io::Error::last_os_error().raw_os_error()) {
                (-1, Some(libc::EINTR)) => {}
                (-1, Some(libc::EOPNOTSUPP)) if flags != 0 => flags = 0,
                _ => return false,
            }
        }
        true
    }

    /// Forgets every mapped page: the next gathers check with `mincore` again.
    fn forget(&self) {
        for word in self.mapped.iter() {
            word.store(0, Relaxed);
        }
    }

    /// The file's current length (it may have shrunk since the mapping was made).
    fn current_len(&self) -> u64 {
        self.file.metadata().map(|m| m.len()).unwrap_or(0).min(self.len as u64)
    }

    /// Finds the plan's fully resident extents and copies their pieces to `out` (which must
    /// have room for the plan's output). Extents past the file's current end are never served.
    ///
    /// # Safety
    /// `out` must point at `plan.out_len()` writable bytes that nothing else accesses during
    /// the call.
    pub unsafe fn serve(&self, plan: &Plan, out: *mut u8) -> Served {
        let extents = plan.extents();
        if !self.sample_cached(plan) && self.nothing_cached() {
            // A cold table: no page to find, so no `mincore` pass and no copy.
            return Served::default();
        }
        let mut served = Served { resident: vec![false; extents.len()], ..Served::default() };
        let file_len = self.current_len();
        let faults_before = major_faults();
        if recover::install() {
            // Each window's resident extents are copied right after its check, while its page
            // tables are still in the CPU's caches.
            let mut vec = Vec::new();
            let mut i = 0;
            while i < extents.len() {
                let j = self.classify_window(plan, file_len, i, &mut served.resident, &mut vec);
                // Extents before `mapped_to` belong to a run already turned down (small, or
                // mapped): copied through the mapping without asking again.
                let (mut k, mut mapped_to) = (i, i);
                while k < j {
                    if k >= mapped_to {
                        match self.run_from(plan, k, j, &served.resident) {
                            Some(run) if self.worth_reading(plan, &run, file_len) => {
                                // SAFETY: forwarded from the caller.
                                unsafe { self.read_run(run, out, &mut served) };
                                k = run.end;
                                continue;
                            }
                            Some(run) => mapped_to = run.end,
                            None => {}
                        }
                    }
                    if k + AHEAD < j && served.resident[k + AHEAD] {
                        self.prefetch(plan, k + AHEAD, out);
                    }
                    if served.resident[k] {
                        // SAFETY: forwarded from the caller.
                        unsafe { self.copy_extent(plan, k, out, &mut served) };
                    }
                    k += 1;
                }
                i = j;
            }
        } else {
            self.classify(plan, file_len, &mut served.resident);
            let hits: Vec<usize> = (0..extents.len()).filter(|&i| served.resident[i]).collect();
            // SAFETY: forwarded from the caller.
            unsafe { self.copy_through_kernel(plan, &hits, out, &mut served) };
        }
        served.faults = major_faults().saturating_sub(faults_before);
        if served.faults > 0 || served.stopped {
            // A page believed mapped was not (reclaimed, or the file was cut).
            self.forget();
        }
        served.rows = rows_served(plan, &served.resident);
        served
    }

    /// Whether the first page of any of up to [`SAMPLES`] extents spread over the plan is in the
    /// page cache: one single-page `mincore` each, stopping at the first hit. A warm table
    /// answers with its first call, so it never pays for [`nothing_cached`](Self::nothing_cached).
    fn sample_cached(&self, plan: &Plan) -> bool {
        let extents = plan.extents();
        let step = extents.len().div_ceil(SAMPLES).max(1);
        extents.iter().step_by(step).any(|e| self.page_cached(e.offset))
    }

    /// Whether the page holding file offset `offset` is in the page cache: one single-page
    /// `mincore` (`false` past the mapping).
    fn page_cached(&self, offset: u64) -> bool {
        let first = offset / self.page * self.page;
        if first >= self.len as u64 {
            return false;
        }
        let mut vec = [0u8; 1];
        let addr = (self.base as usize + first as usize) as *mut libc::c_void;
        // SAFETY: one page that starts inside our mapping (mincore takes a partial last page);
        // `vec` has its one byte.
        unsafe { libc::mincore(addr, 1, vec.as_mut_ptr()) == 0 && vec[0] & 1 == 1 }
    }

    /// Whether the page cache holds no page of the file, by one `cachestat(2)` over the whole
    /// file (Linux 6.5); `false` where the kernel lacks it (the `mincore` pass then decides).
    /// The count walks every cached page of the file, so it is cheap only for a cold file: a
    /// warm table is told by [`sample_cached`](Self::sample_cached) first.
    fn nothing_cached(&self) -> bool {
        if !self.cachestat.load(Relaxed) {
            return false;
        }
        match cached_pages(&self.file) {
            Some(pages) => pages == 0,
            None => {
                self.cachestat.store(false, Relaxed);
                false
            }
        }
    }

    /// Marks `resident[i]` for every extent whose pieces' pages are all in the page cache. The
    /// pages of the holes a coalesced extent joins do not count: only the pieces are copied, so
    /// rows on cached pages are served even when the hole between them is not cached.
    fn classify(&self, plan: &Plan, file_len: u64, resident: &mut [bool]) {
        let mut vec = Vec::new();
        let mut i = 0;
        while i < plan.extents().len() {
            i = self.classify_window(plan, file_len, i, resident, &mut vec);
        }
    }

    /// [`classify`](Self::classify) for one `mincore` window: the extents from `i` whose pages
    /// lie close together (up to [`WINDOW_PAGES`], joined across at most [`JOIN_PAGES`]).
    /// Returns the end of the window; `vec` is scratch space kept between calls.
    fn classify_window(&self, plan: &Plan, file_len: u64, i: usize, resident: &mut [bool], vec: &mut Vec<u8>) -> usize {
        let extents = plan.extents();
        // A run of extents whose pages this mapping maps needs no check.
        let mut j = i;
        while j < extents.len() && self.is_mapped(plan, j, file_len) {
            resident[j] = true;
            j += 1;
        }
        if j > i {
            return j;
        }
        let page = self.page;
        let span = |e: &Extent| (e.offset / page, (e.offset + u64::from(e.needed.max(1)) - 1) / page);
        let (first, mut last) = span(&extents[i]);
        let mut j = i + 1;
        while j < extents.len() {
            let (s, l) = span(&extents[j]);
            if s > last + JOIN_PAGES || l - first >= WINDOW_PAGES {
                break;
            }
            last = l;
            j += 1;
        }
        if first * page >= self.len as u64 {
            // This window and every later one (extents are in file order) lie past the
            // mapping: a table may declare more rows than its file holds. They go to the
            // engine, which reports the short read.
            return extents.len();
        }
        let pages = (last - first + 1) as usize;
        vec.resize(pages, 0u8);
        let addr = (self.base as usize + (first * page) as usize) as *mut libc::c_void;
        let len = (pages as u64 * page).min(self.len as u64 - first * page) as usize;
        // SAFETY: the range lies inside our mapping (clamped to its length) and `vec` has a
        // byte per page.
        let ok = unsafe { libc::mincore(addr, len, vec.as_mut_ptr()) } == 0;
        if ok {
            for k in i..j {
                let e = &extents[k];
                if e.offset + u64::from(e.needed) > file_len {
                    continue;
                }
                resident[k] = plan
                    .pieces(k)
                    .iter()
                    .all(|p| piece_pages(e, p, page).all(|pg| vec[(pg - first) as usize] & 1 == 1));
            }
        }
        j
    }

    /// Copies the pieces of the hit extents `hits` with `process_vm_readv` on our own address
    /// space, up to `IOV_MAX` pieces per call (where [`recover::copy`] is not available).
    ///
    /// # Safety
    /// As [`serve`](Self::serve).
    unsafe fn copy_through_kernel(&self, plan: &Plan, hits: &[usize], out: *mut u8, served: &mut Served) {
        let extents = plan.extents();
        let mut local: Vec<libc::iovec> = Vec::with_capacity(IOV_MAX);
        let mut remote: Vec<libc::iovec> = Vec::with_capacity(IOV_MAX);
        let mut batch: Vec<usize> = Vec::new();
        for &i in hits {
            let pieces = plan.pieces(i);
            if local.len() + pieces.len() > IOV_MAX && !local.is_empty() {
                // SAFETY: forwarded from the caller.
                unsafe { self.copy_batch(&local, &remote, &batch, served) };
                local.clear();
                remote.clear();
                batch.clear();
            }
            let e = extents[i];
            for p in pieces {
                // SAFETY: `out_offset + len <= out_len` (planner invariant), inside `out`.
                let dst = unsafe { out.add(p.out_offset as usize) };
                local.push(libc::iovec { iov_base: dst.cast(), iov_len: p.len as usize });
                let src = self.base as usize + (e.offset + u64::from(p.extent_offset)) as usize;
                remote.push(libc::iovec { iov_base: src as *mut libc::c_void, iov_len: p.len as usize });
            }
            batch.push(i);
        }
        if !local.is_empty() {
            // SAFETY: forwarded from the caller.
            unsafe { self.copy_batch(&local, &remote, &batch, served) };
        }
    }

    /// Asks the CPU to start loading extent `i`'s pieces (source and destination) so the copy
    /// `AHEAD` extents later finds them in cache: random rows miss the cache and the TLB, and
    /// the copy instruction waits for each miss alone. A prefetch never faults.
    fn prefetch(&self, plan: &Plan, i: usize, out: *mut u8) {
        let e = plan.extents()[i];
        for p in plan.pieces(i) {
            self.prefetch_at(self.base as usize + (e.offset + u64::from(p.extent_offset)) as usize);
            self.prefetch_at(out as usize + p.out_offset as usize);
        }
    }

    /// Asks the CPU to start loading the cache line at `addr` (x86_64; nothing elsewhere).
    fn prefetch_at(&self, addr: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            // SAFETY: a prefetch is a hint: it reads nothing the program sees and never faults,
            // whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(addr as *const i8) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = addr;
    }

    /// The run of resident extents from `k` (before `j`) that is one stretch of the file landing
    /// in one stretch of the output: a large request, which the plan splits into reads of the
    /// engine's largest size, or requests back to back in the file asked in file order (a row
    /// group's column chunks). `None` when extent `k`'s own pieces are not one stretch.
    fn run_from(&self, plan: &Plan, k: usize, j: usize, resident: &[bool]) -> Option<Run> {
        // Extent `x`'s pieces as one run, if they are one stretch.
        let stretch = |x: usize| {
            if !resident[x] {
                return None;
            }
            let e = &plan.extents()[x];
            let (first, rest) = plan.pieces(x).split_first()?;
            let at = e.offset + u64::from(first.extent_offset);
            let mut run = Run { start: x, end: x + 1, at, out_at: first.out_offset, len: 0, pieces: 0 };
            run.extend(at, first.out_offset, u64::from(first.len), 1);
            for p in rest {
                if !run.extend(e.offset + u64::from(p.extent_offset), p.out_offset, u64::from(p.len), 1) {
                    return None;
                }
            }
            Some(run)
        };
        let mut run = stretch(k)?;
        while run.end < j {
            match stretch(run.end) {
                Some(next) if run.extend(next.at, next.out_at, next.len, next.pieces) => run.end += 1,
                _ => break,
            }
        }
        Some(run)
    }

    /// Whether `run` is copied with one `pread` rather than through the mapping: it has at
    /// least [`PREAD_MIN`] bytes, and some of its pages are not mapped by a copy yet (a run the
    /// mapping maps whole copies faster from it).
    fn worth_reading(&self, plan: &Plan, run: &Run, file_len: u64) -> bool {
        run.len >= u64::from(PREAD_MIN) && !(run.start..run.end).all(|x| self.is_mapped(plan, x, file_len))
    }

    /// Copies `run` with one [`pread_exact`](Self::pread_exact); if it stops short (the file
    /// shrank after the check), the run's extents go back to the engine.
    ///
    /// # Safety
    /// As [`serve`](Self::serve).
    unsafe fn read_run(&self, run: Run, out: *mut u8, served: &mut Served) {
        // SAFETY: the run's pieces lie back to back in the output, each within it (planner
        // invariant), so `out_at + len` is within the caller's exclusive `out`.
        if unsafe { self.pread_exact(out.add(run.out_at as usize), run.len as usize, run.at) } {
            served.extents += run.end - run.start;
            served.pieces += run.pieces;
        } else {
            served.resident[run.start..run.end].fill(false);
            served.stopped = true;
        }
    }

    /// Copies extent `i`'s pieces with [`recover::copy`]; if one stops short (the file shrank
    /// after the check), the extent goes back to the engine, which reads it whole (and reports
    /// the short read, naming the row).
    ///
    /// # Safety
    /// As [`serve`](Self::serve); [`recover::install`] returned `true`.
    unsafe fn copy_extent(&self, plan: &Plan, i: usize, out: *mut u8, served: &mut Served) {
        let e = plan.extents()[i];
        let pieces = plan.pieces(i);
        for p in pieces {
            let len = p.len as usize;
            let at = (e.offset + u64::from(p.extent_offset)) as usize;
            // SAFETY: `out_offset + len <= out_len` (planner invariant), inside the caller's
            // exclusive `out`; the source lies inside our mapping (`classify` serves only
            // extents within the file's length at the check, which is within the mapping),
            // which lives as long as `self`; a page the file lost since is the fault `copy`
            // survives.
            let whole = unsafe { recover::copy(out.add(p.out_offset as usize), self.base.cast::<u8>().add(at), len) };
            if !whole {
                served.resident[i] = false;
                served.stopped = true;
                return;
            }
            self.mark_mapped(&e, p);
        }
        served.extents += 1;
        served.pieces += pieces.len() as u64;
    }

    /// Copies one batch; on a short copy (`EFAULT`: the file shrank) the batch's extents are
    /// handed back to the engine.
    ///
    /// # Safety
    /// As [`serve`](Self::serve).
    unsafe fn copy_batch(&self, local: &[libc::iovec], remote: &[libc::iovec], batch: &[usize], served: &mut Served) {
        let want: usize = local.iter().map(|v| v.iov_len).sum();
        // SAFETY: `local` targets the caller's exclusive output, `remote` our own read-only
        // mapping; the kernel reports unreadable remote pages as a short count or EFAULT instead
        // of a signal.
        let got = unsafe {
            libc::process_vm_readv(
                libc::getpid(),
                local.as_ptr(),
                local.len() as libc::c_ulong,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        };
        if got >= 0 && got as usize == want {
            served.extents += batch.len();
            served.pieces += local.len() as u64;
        } else {
            for &i in batch {
                served.resident[i] = false;
            }
        }
    }
}

/// Extents `start..end` of a plan whose `pieces` lie back to back in the file (from `at`) and
/// in the output (from `out_at`): `len` bytes in all.
#[derive(Debug, Clone, Copy)]
struct Run {
    start: usize,
    end: usize,
    at: u64,
    out_at: u64,
    len: u64,
    pieces: u64,
}

impl Run {
    /// Adds `len` bytes of `pieces` pieces at file offset `at` and output offset `out_at` if they
    /// carry on where the run ends, in the file and in the output alike.
    fn extend(&mut self, at: u64, out_at: u64, len: u64, pieces: u64) -> bool {
        if at != self.at + self.len || out_at != self.out_at + self.len {
            return false;
        }
        self.len += len;
        self.pieces += pieces;
        true
    }
}

/// The pages piece `p` of extent `e` lies on.
fn piece_pages(e: &Extent, p: &Piece, page: u64) -> std::ops::RangeInclusive<u64> {
    let start = e.offset + u64::from(p.extent_offset);
    let end = start + u64::from(p.len.max(1)) - 1;
    start / page..=end / page
}

/// Requests all of whose pieces lie in served extents.
fn rows_served(plan: &Plan, resident: &[bool]) -> u64 {
    let mut state = vec![0u8; plan.requests()]; // 1: served so far, 2: some piece read
    for (i, &r) in resident.iter().enumerate() {
        for p in plan.pieces(i) {
            let s = &mut state[p.request as usize];
            *s = if r && *s != 2 { 1 } else { 2 };
        }
    }
    state.iter().filter(|&&s| s == 1).count() as u64
}

/// Pages of `file` in the page cache, by `cachestat(2)`; `None` where the kernel (before 6.5)
/// or the architecture lacks it.
fn cached_pages(file: &File) -> Option<u64> {
    #[repr(C)]
    struct Range {
        off: u64,
        /// 0: to the end of the file.
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    // The generic syscall table's number, shared by x86_64 and aarch64.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    const SYS_CACHESTAT: libc::c_long = 451;
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    return None;
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        let range = Range { off: 0, len: 0 };
        let mut stat = Stat::default();
        // SAFETY: `cachestat(fd, range, stat, flags)` reads `range` and writes `stat`, both valid
        // for the call; the descriptor is open (we own it).
        let rc = unsafe {
            libc::syscall(SYS_CACHESTAT, file.as_raw_fd(), &range as *const Range, &mut stat as *mut Stat, 0u32)
        };
        (rc == 0).then_some(stat.nr_cache)
    }
}

fn major_faults() -> u64 {
    // SAFETY: an all-zero rusage is a valid out-parameter.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid out-pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) } == 0 {
        u.ru_majflt as u64
    } else {
        0
    }
}

#[cfg(all(test, not(eagerio_loom)))]
mod tests {
    use super::*;
    use crate::plan::PlanOptions;
    use rand::{rngs::StdRng, Rng, SeedableRng};
    use std::io::Write;

    /// A cold file is told by `cachestat` alone: after eviction nothing is cached and `serve`
    /// returns at once with no extent served; after a buffered read of one page, the `mincore`
    /// pass runs again and serves the extent on that page.
    #[test]
    fn residency_cold_file_is_told_by_cachestat() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&vec![5u8; 64 * 4096]).unwrap();
        f.as_file().sync_all().unwrap();
        let file = File::open(f.path()).unwrap();
        let r = Residency::map(&file, 64 * 4096).unwrap();
        let Some(_) = cached_pages(&file) else {
            eprintln!("cachestat(2) is not available on this kernel: the mincore pass decides alone");
            return;
        };
        crate::sys::evict(f.path()).unwrap();
        if cached_pages(&file) != Some(0) {
            eprintln!("this filesystem keeps the pages after POSIX_FADV_DONTNEED (tmpfs?): nothing to check");
            return;
        }
        assert!(r.nothing_cached());
        let plan = Plan::new(&[(8192, 100)], &PlanOptions { max_gap: 0, align: 1, max_read: 65536 }).unwrap();
        let mut out = vec![0u8; 100];
        // SAFETY: `out` holds the plan's 100 output bytes and nothing else touches it.
        let served = unsafe { r.serve(&plan, out.as_mut_ptr()) };
        assert_eq!(served.extents, 0);
        let mut page = vec![0u8; 4096];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut page, 8192).unwrap();
        assert!(cached_pages(&file).unwrap() > 0 && !r.nothing_cached());
        // SAFETY: as above.
        let served = unsafe { r.serve(&plan, out.as_mut_ptr()) };
        assert_eq!(served.extents, 1);
        assert_eq!(out, vec![5u8; 100]);
    }

    /// Issue 16 (4): an extent past the end of the mapping (a layout declaring more rows than the
    /// file holds) is a miss for the engine, not an underflow.
    #[test]
    fn residency_extents_past_the_mapping_are_misses() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&[7u8; 8192]).unwrap();
        let file = File::open(f.path()).unwrap();
        let r = Residency::map(&file, 8192).unwrap();
        let plan =
            Plan::new(&[(0, 100), (1 << 20, 100)], &PlanOptions { max_gap: 0, align: 4096, max_read: 65536 }).unwrap();
        let mut out = vec![0u8; plan.out_len() as usize];
        // SAFETY: `out` holds the plan's output and nothing else touches it.
        let served = unsafe { r.serve(&plan, out.as_mut_ptr()) };
        assert!(!served.resident[1], "an extent past the mapping cannot be resident");
        if served.resident[0] {
            assert_eq!(&out[..100], &[7u8; 100][..]);
        }
    }

    /// A file of `pages` pages of byte `page index + 1`, with only `cached` pages in the page
    /// cache (read with readahead off); `None` where eviction does not work here (tmpfs).
    fn partly_cached(pages: u64, cached: &[u64]) -> Option<(tempfile::NamedTempFile, File)> {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        for p in 0..pages {
            f.write_all(&[p as u8 + 1; 4096]).unwrap();
        }
        f.as_file().sync_all().unwrap();
        crate::sys::evict(f.path()).unwrap();
        let file = File::open(f.path()).unwrap();
        // SAFETY: fadvise on an open descriptor; RANDOM turns readahead off for it.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        let mut page = vec![0u8; 4096];
        for &p in cached {
            std::os::unix::fs::FileExt::read_exact_at(&file, &mut page, p * 4096).unwrap();
        }
        let map = Residency::map(&file, pages * 4096).unwrap();
        let mut resident = vec![false; 1];
        let plan = Plan::new(&[(4096, 1)], &PlanOptions { max_gap: 0, align: 1, max_read: 4096 }).unwrap();
        map.classify(&plan, pages * 4096, &mut resident);
        if resident[0] != cached.contains(&1) {
            eprintln!("this filesystem keeps evicted pages (tmpfs?): nothing to check");
            return None;
        }
        Some((f, file))
    }

    /// Issue 30: a resident request of at least `PREAD_MIN` bytes (several of the plan's reads)
    /// is copied with one `pread`, not through the mapping: the right bytes, no page of it
    /// mapped (so none in the process's resident memory) and none in the bitmap; a small request
    /// beside it is copied through the mapping and remembered. A file cut under a large request
    /// stops its read, as a cut under a mapped copy does.
    #[test]
    fn residency_large_pieces_are_read_not_mapped() {
        let big = u64::from(PREAD_MIN) / 4096 + 2;
        let pages = big + 2;
        let Some((f, file)) = partly_cached(pages, &(0..pages).collect::<Vec<_>>()) else { return };
        assert!(recover::install());
        let r = Residency::map(&file, pages * 4096).unwrap();
        let len = PREAD_MIN as u64 + 4096;
        let small = (big + 1) * 4096;
        let plan = Plan::new(&[(10, len), (small + 5, 90)], &PlanOptions { max_gap: 0, align: 1, max_read: 64 << 10 })
            .unwrap();
        let mut out = vec![0u8; plan.out_len() as usize];
        // SAFETY: `out` holds the plan's output and nothing else touches it.
        let served = unsafe { r.serve(&plan, out.as_mut_ptr()) };
        let n = plan.extents().len();
        assert!(n > 3, "the large request is several reads");
        assert_eq!((served.extents, served.pieces, served.rows, served.stopped), (n, n as u64, 2, false));
        for (k, b) in out[..len as usize].iter().enumerate() {
            assert_eq!(u64::from(*b), (10 + k as u64) / 4096 + 1, "byte {k} of the large request");
        }
        assert_eq!(&out[len as usize..], &[big as u8 + 2; 90][..]);
        assert!(!r.is_mapped(&plan, 0, pages * 4096), "the large request is not remembered as mapped");
        assert!(r.is_mapped(&plan, n - 1, pages * 4096), "the small one is");
        // Which pages this process maps: /proc/self/pagemap is root-only for frame numbers but
        // tells presence to anyone.
        let mapped = |pg: u64| {
            use std::os::unix::fs::FileExt;
            let mut e = [0u8; 8];
            let pm = File::open("/proc/self/pagemap").unwrap();
            pm.read_exact_at(&mut e, (r.base as u64 / 4096 + pg) * 8).unwrap();
            u64::from_le_bytes(e) >> 63 == 1
        };
        // The small request's fault maps the 64 KiB-aligned window of addresses around it.
        let window = ((r.base as u64 + (big + 1) * 4096) & !0xffff).saturating_sub(r.base as u64) / 4096;
        assert!(window >= 16 && (0..window).all(|pg| !mapped(pg)), "no page of the large request is mapped");
        assert!(mapped(big + 1), "the small request's page is");

        // The file cut to one page: the large request's read stops short, and each of its
        // plan's reads (here of 64 KiB) goes back to the engine.
        r.forget();
        f.as_file().set_len(4096).unwrap();
        let plan = Plan::new(&[(0, len)], &PlanOptions { max_gap: 0, align: 1, max_read: 64 << 10 }).unwrap();
        let mut out = vec![0u8; len as usize];
        let resident = vec![true; plan.extents().len()];
        let run = r.run_from(&plan, 0, resident.len(), &resident).expect("one run");
        assert_eq!((run.end, run.len), (resident.len(), len));
        let mut served = Served { resident, ..Served::default() };
        // SAFETY: as above.
        unsafe { r.read_run(run, out.as_mut_ptr(), &mut served) };
        assert!(served.stopped && served.resident.iter().all(|&r| !r), "a cut file stops the read");
    }

    /// Requests back to back in the file, asked in file order (a row group's column chunks),
    /// make one run across the read they share, though each is under `PREAD_MIN`; asked in the
    /// other order they land apart in the output, so no run spans them.
    #[test]
    fn residency_back_to_back_requests_are_one_run() {
        let pages = 2 * u64::from(PREAD_MIN) / 4096;
        let Some((_f, file)) = partly_cached(pages, &(0..pages).collect::<Vec<_>>()) else { return };
        assert!(recover::install());
        let r = Residency::map(&file, pages * 4096).unwrap();
        let half = u64::from(PREAD_MIN) * 5 / 8;
        let opts = PlanOptions { max_gap: 0, align: 4096, max_read: 64 << 10 };
        let plan = Plan::new(&[(0, half), (half, half)], &opts).unwrap();
        let all = vec![true; plan.extents().len()];
        assert!(plan.extents().iter().enumerate().any(|(x, _)| plan.pieces(x).len() == 2), "the requests share a read");
        let run = r.run_from(&plan, 0, all.len(), &all).expect("one run");
        assert!(r.worth_reading(&plan, &run, pages * 4096));
        assert_eq!((run.end, run.len, run.pieces), (all.len(), 2 * half, all.len() as u64 + 1));
        let mut out = vec![0u8; plan.out_len() as usize];
        // SAFETY: `out` holds the plan's output and nothing else touches it.
        let served = unsafe { r.serve(&plan, out.as_mut_ptr()) };
        assert_eq!((served.extents, served.pieces, served.rows), (all.len(), run.pieces, 2));
        for (k, b) in out.iter().enumerate() {
            assert_eq!(u64::from(*b), k as u64 / 4096 + 1, "byte {k}");
        }
        assert!((0..all.len()).all(|x| !r.is_mapped(&plan, x, pages * 4096)), "nothing went through the mapping");

        let reversed = Plan::new(&[(half, half), (0, half)], &opts).unwrap();
        let all = vec![true; reversed.extents().len()];
        for k in 0..all.len() {
            let run = r.run_from(&reversed, k, all.len(), &all);
            assert!(run.is_none_or(|run| run.len < u64::from(PREAD_MIN)), "extent {k}: the requests land apart");
        }
    }

    /// Issue 14: an extent that joins two rows across a page that is not cached is served when
    /// the rows' own pages are cached (only the rows are copied, not the hole).
    #[test]
    fn residency_is_per_piece_not_per_extent() {
        let Some((_f, file)) = partly_cached(3, &[0, 2]) else { return };
        let r = Residency::map(&file, 3 * 4096).unwrap();
        let plan =
            Plan::new(&[(100, 90), (2 * 4096 + 10, 90)], &PlanOptions { max_gap: 8192, align: 1, max_read: 65536 })
                .unwrap();
        assert_eq!(plan.extents().len(), 1, "the two rows share one read across page 1");
        let mut out = vec![0u8; 180];
        // SAFETY: `out` holds the plan's output and nothing else touches it.
        let served = unsafe { r.serve(&plan, out.as_mut_ptr()) };
        assert_eq!((served.extents, served.rows), (1, 2));
        assert_eq!(&out[..90], &[1u8; 90][..]);
        assert_eq!(&out[90..], &[3u8; 90][..]);
        let plan = Plan::new(&[(100, 90), (4096 + 10, 90)], &PlanOptions { max_gap: 8192, align: 1, max_read: 65536 })
            .unwrap();
        // SAFETY: as above.
        let served = unsafe { r.serve(&plan, out.as_mut_ptr()) };
        assert_eq!(served.extents, 0, "a row on an uncached page is read by the engine");
    }

    /// A warm table is told by sampling the plan's own pages, before `cachestat` (which walks
    /// every cached page of the file) is asked; a plan none of whose sampled pages is cached
    /// falls through to it.
    #[test]
    fn residency_warm_table_is_told_by_sampling_its_rows() {
        let Some((_f, file)) = partly_cached(4, &[2]) else { return };
        let r = Residency::map(&file, 4 * 4096).unwrap();
        let opts = PlanOptions { max_gap: 0, align: 1, max_read: 65536 };
        // Page 1 is the one `partly_cached` saw evicted.
        let on_cached = Plan::new(&[(4096 + 10, 90), (2 * 4096 + 10, 90)], &opts).unwrap();
        assert!(r.sample_cached(&on_cached));
        let elsewhere = Plan::new(&[(4096 + 10, 90), (4096 + 200, 90)], &opts).unwrap();
        assert!(!r.sample_cached(&elsewhere));
    }

    /// Pages a copy read are remembered as mapped, so the next gather of them skips `mincore`;
    /// when one of them is nevertheless gone (here: unmapped behind the memo's back, as reclaim
    /// would, then evicted), the copy reads it back from the file, the right bytes, and the
    /// fault makes the mapping forget every page. `unmap_pages` forgets them too.
    #[test]
    fn residency_mapped_pages_skip_the_check_until_a_fault() {
        let Some((f, file)) = partly_cached(4, &[0, 2]) else { return };
        assert!(recover::install());
        let r = Residency::map(&file, 4 * 4096).unwrap();
        let plan = Plan::new(&[(10, 90), (2 * 4096 + 10, 90)], &PlanOptions { max_gap: 0, align: 1, max_read: 65536 })
            .unwrap();
        assert!(!r.is_mapped(&plan, 0, 4 * 4096), "nothing is mapped before a copy");
        let mut out = vec![0u8; 180];
        // SAFETY: `out` holds the plan's output and nothing else touches it.
        let served = unsafe { r.serve(&plan, out.as_mut_ptr()) };
        assert_eq!(served.extents, 2);
        assert!(r.is_mapped(&plan, 0, 4 * 4096) && r.is_mapped(&plan, 1, 4 * 4096));
        assert!(!r.is_mapped(&plan, 1, 2 * 4096), "an extent past the file's end never counts");

        // SAFETY: our own read-only mapping: drops its page-table entries only.
        unsafe { libc::madvise(r.base, r.len, libc::MADV_DONTNEED) };
        crate::sys::evict(f.path()).unwrap();
        // Another page of the file is cached, so the table does not look cold.
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut [0u8; 4096], 4096).unwrap();
        out.fill(0);
        // SAFETY: as above.
        let served = unsafe { r.serve(&plan, out.as_mut_ptr()) };
        assert_eq!(served.extents, 2, "the memo skipped the check");
        assert_eq!(&out[..90], &[1u8; 90][..]);
        assert_eq!(&out[90..], &[3u8; 90][..]);
        assert!(served.faults > 0, "the evicted pages were read back: {served:?}");
        assert!(!r.is_mapped(&plan, 0, 4 * 4096), "a fault forgets every page");

        // SAFETY: as above.
        unsafe { r.serve(&plan, out.as_mut_ptr()) };
        assert!(r.is_mapped(&plan, 0, 4 * 4096));
        r.unmap_pages();
        assert!(!r.is_mapped(&plan, 0, 4 * 4096), "unmapping forgets every page");
    }

    /// Requests on mapped pages are copied in request order without a plan; those on a page not
    /// mapped or past the file's end are left for the planner, each with its place in the
    /// output; a file cut during the copy stops it and forgets every page.
    #[test]
    fn residency_mapped_requests_are_copied_in_request_order() {
        let Some((f, file)) = partly_cached(4, &[0, 2]) else { return };
        assert!(recover::install());
        let r = Residency::map(&file, 4 * 4096).unwrap();
        let requests = [(2 * 4096 + 5, 10), (10, 90), (4050, 96), (10, 90)];
        assert_eq!(r.split_mapped(&requests), None, "nothing is mapped before a copy");
        let plan = Plan::new(&requests, &PlanOptions { max_gap: 0, align: 1, max_read: 65536 }).unwrap();
        let mut out = vec![0u8; plan.out_len() as usize];
        // SAFETY: `out` holds the plan's output and nothing else touches it.
        let served = unsafe { r.serve(&plan, out.as_mut_ptr()) };
        assert_eq!(served.rows, 3, "the row across pages 0 and 1 is a miss: {served:?}");

        let (len, missing) = r.split_mapped(&requests).expect("three of four are mapped");
        assert_eq!((len, &missing[..]), (286, &[(2, 100)][..]), "page 1 is not mapped");
        let mut out = vec![0u8; 286];
        // SAFETY: `out` has the requests' 286 bytes; the others lie within the mapping.
        let copied = unsafe { r.copy_in_order(&requests, &missing, out.as_mut_ptr(), false) }.unwrap();
        assert_eq!((copied.rows, copied.faults), (3, 0));
        let both = Served { rows: 1, faults: 2, ..Served::default() }.and(Served { rows: 3, faults: 4, ..copied });
        assert_eq!((both.rows, both.faults), (4, 6), "the copied rows and faults count with the served");
        assert_eq!(&out[..10], &[3u8; 10][..]);
        assert_eq!(&out[10..100], &[1u8; 90][..]);
        assert_eq!(&out[100..196], &[0u8; 96][..], "the missing request is left to the planner");
        assert_eq!(&out[196..], &[1u8; 90][..]);
        let far = [(2 * 4096 + 4090, 10), (10, 90), (10, 90)];
        assert_eq!(r.split_mapped(&far).unwrap().1, [(0, 0)], "page 3 is not mapped");
        let cold: Vec<(u64, u64)> = (0..100).map(|i| (4096 + i, 1)).collect();
        assert_eq!(r.split_mapped(&cold), None, "mostly not mapped: all planned");

        f.as_file().set_len(2 * 4096).unwrap();
        assert_eq!(r.split_mapped(&requests).unwrap().1, [(0, 0), (2, 100)], "the file ends before page 2 now");
        out.fill(0);
        // SAFETY: as above; the first request's page is gone, the fault `copy` survives.
        assert!(unsafe { r.copy_in_order(&requests, &[(2, 100)], out.as_mut_ptr(), false) }.is_none());
        assert_eq!(r.split_mapped(&requests[1..2]), None, "a cut copy forgets every page");
    }

    /// A copy of more than two parts, shared with a preparing thread, puts every request that is
    /// not missing where the request order says, and leaves the missing ones' bytes alone, in
    /// every part and at the parts' edges (requests of many lengths, so each part starts at its
    /// own output offset).
    #[test]
    fn residency_shared_copy_in_order_lands_every_part_in_place() {
        let len = 16 * 4096u64;
        let byte = |at: u64| (at * 7 + at / 251) as u8;
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&(0..len).map(byte).collect::<Vec<u8>>()).unwrap();
        let r = Residency::map(f.as_file(), len).unwrap();
        let n = 3 * SHARE_ROWS + 7;
        let mut rng = StdRng::seed_from_u64(7);
        let requests: Vec<(u64, u64)> = (0..n)
            .map(|_| {
                let l = rng.gen_range(1..=200);
                (rng.gen_range(0..len - l), l)
            })
            .collect();
        let total: u64 = requests.iter().map(|r| r.1).sum();
        // Missing requests inside each part, and at the first and last rows of parts.
        let edges = [0, SHARE_ROWS - 1, SHARE_ROWS, 2 * SHARE_ROWS - 1, 2 * SHARE_ROWS, n - 1];
        let is_missing = |i: usize| i % 1000 == 999 || edges.contains(&i);
        let mut missing = Vec::new();
        let mut at = 0;
        for (i, &(_, l)) in requests.iter().enumerate() {
            if is_missing(i) {
                missing.push((i as u32, at));
            }
            at += l;
        }
        let mut out = vec![0xEEu8; total as usize];
        // SAFETY: `out` has the requests' total length; every request lies within the mapping.
        let copied = unsafe { r.copy_in_order(&requests, &missing, out.as_mut_ptr(), true) }.unwrap();
        assert_eq!(copied.rows as usize, n - missing.len());
        let mut at = 0usize;
        for (i, &(off, l)) in requests.iter().enumerate() {
            let got = &out[at..at + l as usize];
            if is_missing(i) {
                assert!(got.iter().all(|&b| b == 0xEE), "missing request #{i} was written");
            } else {
                let want: Vec<u8> = (off..off + l).map(byte).collect();
                assert_eq!(got, &want[..], "request #{i} (part {}) is not in place", i / SHARE_ROWS);
            }
            at += l as usize;
        }
    }

    /// A cached 4-page file of `byte`s, mapped, and a two-row plan (pages 0 and 3) found resident
    /// by the check; the caller cuts the file before copying.
    fn checked_then_cut(byte: u8) -> (tempfile::NamedTempFile, Residency, Plan, Served) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&[byte; 4 * 4096]).unwrap();
        let file = File::open(f.path()).unwrap();
        let mut all = vec![0u8; 4 * 4096];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut all, 0).unwrap();
        let r = Residency::map(&file, 4 * 4096).unwrap();
        let plan = Plan::new(&[(10, 90), (3 * 4096 + 10, 90)], &PlanOptions { max_gap: 0, align: 1, max_read: 65536 })
            .unwrap();
        let mut served = Served { resident: vec![false; 2], ..Served::default() };
        r.classify(&plan, 4 * 4096, &mut served.resident);
        assert_eq!(served.resident, [true, true]);
        (f, r, plan, served)
    }

    /// Issue 14: a file cut between the residency check and the copy: the copy stops at the
    /// lost page instead of killing the process with SIGBUS, and the extent goes back to the
    /// engine (which then reports the short read, naming the row); the others are served.
    #[test]
    fn residency_cut_after_the_check_is_a_miss() {
        let (f, r, plan, mut served) = checked_then_cut(4);
        assert!(recover::install());
        f.as_file().set_len(4096).unwrap();
        let mut out = vec![0u8; 180];
        for i in 0..2 {
            // SAFETY: `out` holds the plan's output; the mapping covers both extents.
            unsafe { r.copy_extent(&plan, i, out.as_mut_ptr(), &mut served) };
        }
        assert_eq!(served.resident, [true, false]);
        assert_eq!((served.extents, served.pieces), (1, 1));
        assert_eq!(&out[..90], &[4u8; 90][..]);
    }

    /// The `process_vm_readv` copy (where `recover::copy` is not available) serves resident
    /// extents and hands a batch back to the engine when the file was cut after the check.
    #[test]
    fn residency_kernel_copy_serves_and_survives_a_cut() {
        let (f, r, plan, mut served) = checked_then_cut(6);
        let mut out = vec![0u8; 180];
        // SAFETY: `out` holds the plan's output; the mapping covers both extents.
        unsafe { r.copy_through_kernel(&plan, &[0], out.as_mut_ptr(), &mut served) };
        assert_eq!((served.extents, served.pieces), (1, 1));
        assert_eq!(&out[..90], &[6u8; 90][..]);
        f.as_file().set_len(4096).unwrap();
        // SAFETY: as above; the second extent's page is gone, which the kernel reports.
        unsafe { r.copy_through_kernel(&plan, &[1], out.as_mut_ptr(), &mut served) };
        assert_eq!(served.resident, [true, false]);
        assert_eq!(served.extents, 1);
    }
}
