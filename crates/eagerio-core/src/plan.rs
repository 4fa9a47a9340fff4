//! The planner: pure code that turns requested byte ranges into the reads that serve them.
//!
//! A request is a list of `(offset, len)` pairs whose bytes are laid out back to back, in request
//! order, in one output buffer. The planner
//! 1. sorts the requests by offset (duplicates become neighbours),
//! 2. coalesces neighbours into one *extent* while the hole between them is at most
//!    [`PlanOptions::max_gap`] bytes: an explicit bound on read amplification,
//! 3. aligns every extent to [`PlanOptions::align`] (the device's logical block, for `O_DIRECT`),
//! 4. splits at [`PlanOptions::max_read`], so an extent always fits one staging slot,
//! 5. and records, for every extent, the *pieces* it serves: where in the extent the bytes are,
//!    where in the output they go, and which request they belong to. A duplicated row is one read
//!    and two pieces.
//!
//! Executing a plan is "for every extent, read `len` bytes at `offset` into a buffer and copy each
//! piece out": [`Plan::execute_from`] does it over memory and is the reference the property tests
//! compare against.
//!
//! About 420 lines of code and 210 of tests, the property tests among them, kept beside the pure
//! code they check.

use crate::error::{Error, Result};

/// How to plan a gather.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanOptions {
    /// Largest hole, in bytes, that may be read to join two neighbouring extents. `0` joins only
    /// touching or overlapping ones. Each join reads at most this many useless bytes.
    pub max_gap: u64,
    /// Alignment of every extent's offset and length (a power of two; `1` for none).
    pub align: u64,
    /// Largest single read, a multiple of `align`. Larger requests are split.
    pub max_read: u64,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions { max_gap: 4096, align: 4096, max_read: 64 * 1024 }
    }
}

impl PlanOptions {
    /// Checks the options, naming the first that makes no sense.
    ///
    /// # Errors
    /// [`Error::InvalidOptions`] when `align` is not a power of two, `max_read` is zero, not a
    /// multiple of `align`, or does not fit in `u32`.
    pub fn validate(&self) -> Result<()> {
        if !self.align.is_power_of_two() {
            return Err(Error::invalid_option("align", format!("{} is not a power of two", self.align)));
        }
        if self.max_read == 0 || self.max_read % self.align != 0 {
            return Err(Error::invalid_option(
                "max_read",
                format!("{} must be a non-zero multiple of align ({})", self.max_read, self.align),
            ));
        }
        if self.max_read > u32::MAX as u64 / 2 {
            return Err(Error::invalid_option("max_read", format!("{} is larger than 2 GiB", self.max_read)));
        }
        Ok(())
    }
}

/// One read of a plan: `len` bytes at file offset `offset`, serving `pieces`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// File offset, a multiple of the plan's alignment.
    pub offset: u64,
    /// Bytes to read, a multiple of the alignment and at most `max_read`.
    pub len: u32,
    /// Bytes of the extent that some piece needs; a read shorter than this is a short read.
    pub needed: u32,
    first_piece: u32,
    end_piece: u32,
}

/// One copy from an extent's buffer into the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Start of the bytes within the extent.
    pub extent_offset: u32,
    /// Length of the copy.
    pub len: u32,
    /// Where they go in the output.
    pub out_offset: u64,
    /// Index of the request they belong to.
    pub request: u32,
}

/// A planned gather.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    extents: Vec<Extent>,
    pieces: Vec<Piece>,
    out_len: u64,
    unique: usize,
    requests: usize,
    useful_bytes: u64,
}

/// A request while planning: its bytes, where they go in the output, and its index.
#[derive(Debug, Clone, Copy)]
struct Req {
    off: u64,
    len: u64,
    out: u64,
    idx: u32,
}

/// Sorts requests by `(offset, len)`, ties in request order. An LSD radix sort (11 bits a pass)
/// on the offset without its low bits (up to 9: a 512-byte block), so a 2 GiB table takes 2
/// passes, not 3; then the runs of requests in one block, short for scattered rows, are sorted
/// exactly (a stable sort, so ties keep request order).
fn sort_requests(reqs: &mut Vec<Req>) {
    const BITS: u32 = 11;
    const BUCKETS: usize = 1 << BITS;
    const MAX_SKIP: u32 = 9;
    if reqs.len() < 256 {
        reqs.sort_by_key(|r| (r.off, r.len));
        return;
    }
    let max = reqs.iter().map(|r| r.off).max().unwrap_or(0);
    let bits = u64::BITS - max.leading_zeros();
    let passes = bits.saturating_sub(MAX_SKIP).div_ceil(BITS);
    let skip = bits.saturating_sub(passes * BITS);
    let digit = |r: &Req, pass: u32| ((r.off >> (skip + pass * BITS)) as usize) & (BUCKETS - 1);
    // Every pass's counts in one read of the requests.
    let mut counts = vec![[0usize; BUCKETS]; passes as usize];
    for r in reqs.iter() {
        for (pass, c) in counts.iter_mut().enumerate() {
            c[digit(r, pass as u32)] += 1;
        }
    }
    let mut tmp = reqs.clone();
    for (pass, counts) in counts.iter_mut().enumerate() {
        let digit = |r: &Req| digit(r, pass as u32);
        let mut at = 0;
        for c in counts.iter_mut() {
            let n = *c;
            *c = at;
            at += n;
        }
        for r in reqs.iter() {
            let d = digit(r);
            tmp[counts[d]] = *r;
            counts[d] += 1;
        }
        std::mem::swap(reqs, &mut tmp);
    }
    let mut i = 0;
    while i < reqs.len() {
        let block = reqs[i].off >> skip;
        let mut j = i + 1;
        let mut sorted = true;
        while j < reqs.len() && reqs[j].off >> skip == block {
            sorted &= (reqs[j - 1].off, reqs[j - 1].len) <= (reqs[j].off, reqs[j].len);
            j += 1;
        }
        if !sorted {
            reqs[i..j].sort_by_key(|r| (r.off, r.len));
        }
        i = j;
    }
}

/// The options and the request count, checked before anything else.
fn check_count(requests: &[(u64, u64)], opts: &PlanOptions) -> Result<()> {
    opts.validate()?;
    if u32::try_from(requests.len()).is_err() {
        return Err(Error::invalid_option(
            "requests",
            format!("{} requests; one gather takes at most {}", requests.len(), u32::MAX),
        ));
    }
    Ok(())
}

/// Checks request `i` (`len` bytes at `off`, landing at `out_len` in the output; `mask` is the
/// alignment less one) and returns where the next request's bytes land.
fn check_request(i: usize, off: u64, len: u64, mask: u64, out_len: u64) -> Result<u64> {
    let invalid = |reason| Error::InvalidRange {
        index: i,
        start: off,
        end: off.saturating_add(len),
        reason,
        path: Default::default(),
    };
    if len == 0 {
        return Err(invalid("the range is empty"));
    }
    if off.checked_add(len).and_then(|end| end.checked_add(mask)).is_none() {
        return Err(invalid("the range ends past the largest file offset"));
    }
    match out_len.checked_add(len) {
        Some(n) if n <= isize::MAX as u64 => Ok(n),
        _ => Err(invalid("the requests' output would not fit in memory")),
    }
}

impl Plan {
    /// Whether [`Plan::new`] would accept `requests` with `opts`, without planning: the same
    /// errors, in one pass that allocates nothing. A gather prepared on another thread checks
    /// this in the call, so a bad request still fails before any I/O.
    ///
    /// # Errors
    /// As [`Plan::new`].
    pub fn check(requests: &[(u64, u64)], opts: &PlanOptions) -> Result<()> {
        check_count(requests, opts)?;
        let mut out_len = 0u64;
        for (i, &(off, len)) in requests.iter().enumerate() {
            out_len = check_request(i, off, len, opts.align - 1, out_len)?;
        }
        Ok(())
    }

    /// Plans `requests`, each an `(offset, len)` pair with `len > 0`. Request `i`'s bytes land in
    /// the output right after request `i - 1`'s.
    ///
    /// # Errors
    /// [`Error::InvalidOptions`] for bad options or more than `u32::MAX` requests;
    /// [`Error::InvalidRange`] (without a file name: the caller, who knows the file, checks
    /// bounds first and names it) for an empty request, one whose end overflows `u64` once
    /// aligned, or requests whose output would not fit in memory.
    pub fn new(requests: &[(u64, u64)], opts: &PlanOptions) -> Result<Plan> {
        check_count(requests, opts)?;
        let mask = opts.align - 1;
        let mut sorted = Vec::with_capacity(requests.len());
        let mut out_len = 0u64;
        for (i, &(off, len)) in requests.iter().enumerate() {
            let next = check_request(i, off, len, mask, out_len)?;
            sorted.push(Req { off, len, out: out_len, idx: i as u32 });
            out_len = next;
        }
        Ok(Plan::build(sorted, requests.len(), out_len, opts))
    }

    /// Plans only the requests `missing` names (each a request's index and where its bytes land
    /// in the output), of `requests`, which [`Plan::check`] accepted: every other request's
    /// bytes were copied into the output already (the adaptive mode's copy of rows on pages it
    /// maps, see [`Residency::copy_in_order`](crate::residency::Residency::copy_in_order)). The
    /// pieces carry the requests' own indices and output offsets; the copied requests count as
    /// distinct, and their bytes as useful.
    pub(crate) fn missing(requests: &[(u64, u64)], missing: &[(u32, u64)], out_len: u64, opts: &PlanOptions) -> Plan {
        let sorted = missing
            .iter()
            .map(|&(idx, out)| {
                let (off, len) = requests[idx as usize];
                Req { off, len, out, idx }
            })
            .collect();
        let mut plan = Plan::build(sorted, requests.len(), out_len, opts);
        let copied = requests.len() - missing.len();
        let missing_bytes: u64 = missing.iter().map(|&(i, _)| requests[i as usize].1).sum();
        plan.unique += copied;
        plan.useful_bytes += out_len - missing_bytes;
        plan
    }

    /// Plans the checked requests in `sorted` (in request order, sorted here) out of `requests`
    /// in all, whose output is `out_len` bytes.
    fn build(mut sorted: Vec<Req>, requests: usize, out_len: u64, opts: &PlanOptions) -> Plan {
        sort_requests(&mut sorted);
        let mask = opts.align - 1;
        let down = |x: u64| x & !mask;
        let up = |x: u64| (x + mask) & !mask;

        // Phase 1: the covered intervals, joining neighbours within the gap bound, each split
        // into aligned reads of at most `max_read` as it closes.
        let mut extents: Vec<Extent> = Vec::new();
        let split = |extents: &mut Vec<Extent>, (s, e): (u64, u64)| {
            let mut at = s;
            while at < e {
                let len = (e - at).min(opts.max_read);
                extents.push(Extent { offset: at, len: len as u32, needed: 0, first_piece: 0, end_piece: 0 });
                at += len;
            }
        };
        let mut span: Option<(u64, u64)> = None;
        let mut unique = 0usize;
        let mut useful = 0u64;
        let mut covered = 0u64; // end of the bytes the sorted requests so far cover
        let mut prev: Option<(u64, u64)> = None;
        for r in &sorted {
            let end = r.off + r.len;
            if prev != Some((r.off, r.len)) {
                unique += 1;
                // Useful bytes count each distinct byte once, overlaps included.
                useful += end.saturating_sub(r.off.max(covered));
                covered = covered.max(end);
                prev = Some((r.off, r.len));
            }
            match &mut span {
                Some((_, e)) if down(r.off) <= e.saturating_add(opts.max_gap) => *e = (*e).max(up(end)),
                _ => {
                    if let Some(done) = span.replace((down(r.off), up(end))) {
                        split(&mut extents, done);
                    }
                }
            }
        }
        if let Some(done) = span {
            split(&mut extents, done);
        }

        // Phase 2: cut every request into pieces at extent boundaries, in offset order. The first
        // extent a request touches only moves forward, so a cursor finds it. Pieces come out
        // grouped by extent unless a request spans an extent that a later one starts in; only
        // then are they bucketed (a stable counting sort keeps offset order within an extent),
        // by the extent each piece was cut for (`piece_extent`).
        let mut pieces: Vec<Piece> = Vec::with_capacity(sorted.len());
        let mut piece_extent: Vec<u32> = Vec::with_capacity(sorted.len());
        let mut grouped = true;
        let mut cursor = 0usize;
        for r in &sorted {
            let end = r.off + r.len;
            while extents[cursor].offset + extents[cursor].len as u64 <= r.off {
                cursor += 1;
            }
            let (mut pos, mut out, mut k) = (r.off, r.out, cursor);
            while pos < end {
                let e = &mut extents[k];
                let take = end.min(e.offset + e.len as u64) - pos;
                let piece =
                    Piece { extent_offset: (pos - e.offset) as u32, len: take as u32, out_offset: out, request: r.idx };
                e.needed = e.needed.max(piece.extent_offset + piece.len);
                e.end_piece += 1; // a count for now
                grouped &= piece_extent.last().is_none_or(|&last| last as usize <= k);
                piece_extent.push(k as u32);
                pieces.push(piece);
                pos += take;
                out += take;
                k += 1;
            }
        }
        let mut acc = 0u32;
        for e in &mut extents {
            let n = e.end_piece;
            e.first_piece = acc;
            e.end_piece = acc + n;
            acc += n;
        }
        if !grouped {
            let mut fill: Vec<u32> = extents.iter().map(|e| e.first_piece).collect();
            let mut bucketed = vec![Piece { extent_offset: 0, len: 0, out_offset: 0, request: 0 }; pieces.len()];
            for (&k, p) in piece_extent.iter().zip(&pieces) {
                bucketed[fill[k as usize] as usize] = *p;
                fill[k as usize] += 1;
            }
            pieces = bucketed;
        }
        // A split span can leave a read that only holds gap bytes: drop it.
        extents.retain(|e| e.end_piece > e.first_piece);
        Plan { extents, pieces, out_len, unique, requests, useful_bytes: useful }
    }

    /// The reads, in file order.
    pub fn extents(&self) -> &[Extent] {
        &self.extents
    }

    /// The pieces served by extent `extent` (an index into [`extents`](Self::extents)), in file
    /// order.
    pub fn pieces(&self, extent: usize) -> &[Piece] {
        let e = &self.extents[extent];
        &self.pieces[e.first_piece as usize..e.end_piece as usize]
    }

    /// Length of the output: the sum of the requests' lengths.
    pub fn out_len(&self) -> u64 {
        self.out_len
    }

    /// Number of requests planned.
    pub fn requests(&self) -> usize {
        self.requests
    }

    /// Number of distinct `(offset, len)` requests.
    pub fn unique_requests(&self) -> usize {
        self.unique
    }

    /// Bytes the extents read in total.
    pub fn bytes_to_read(&self) -> u64 {
        self.extents.iter().map(|e| e.len as u64).sum()
    }

    /// Distinct requested bytes (what a perfect reader would read).
    pub fn useful_bytes(&self) -> u64 {
        self.useful_bytes
    }

    /// Copies extent `extent`'s pieces from `buf` (the bytes read at its offset) into `out`.
    ///
    /// # Panics
    /// If `buf` is shorter than the extent's `needed` bytes or `out` shorter than the output.
    pub fn copy_out(&self, extent: usize, buf: &[u8], out: &mut [u8]) {
        for p in self.pieces(extent) {
            let src = &buf[p.extent_offset as usize..(p.extent_offset + p.len) as usize];
            out[p.out_offset as usize..p.out_offset as usize + p.len as usize].copy_from_slice(src);
        }
    }

    /// Executes the plan over an in-memory file: the reference semantics of every backend.
    /// Bytes past the end of `file` read as short (the extent gets what exists).
    ///
    /// # Panics
    /// If a piece needs bytes past the end of `file`.
    pub fn execute_from(&self, file: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; self.out_len as usize];
        for (i, e) in self.extents.iter().enumerate() {
            let start = (e.offset as usize).min(file.len());
            let end = (e.offset as usize + e.len as usize).min(file.len());
            self.copy_out(i, &file[start..end], &mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn naive(file: &[u8], requests: &[(u64, u64)]) -> Vec<u8> {
        requests.iter().flat_map(|&(o, l)| file[o as usize..(o + l) as usize].iter().copied()).collect()
    }

    fn opts(max_gap: u64, align: u64, max_read: u64) -> PlanOptions {
        PlanOptions { max_gap, align, max_read }
    }

    #[test]
    fn empty_request_is_empty_plan() {
        let p = Plan::new(&[], &PlanOptions::default()).unwrap();
        assert!(p.extents().is_empty());
        assert_eq!(p.out_len(), 0);
    }

    #[test]
    fn duplicates_are_read_once() {
        let p = Plan::new(&[(100, 10), (100, 10), (100, 10)], &opts(0, 1, 4096)).unwrap();
        assert_eq!(p.extents().len(), 1);
        assert_eq!(p.pieces(0).len(), 3);
        assert_eq!(p.unique_requests(), 1);
        assert_eq!(p.useful_bytes(), 10);
    }

    #[test]
    fn neighbours_within_gap_coalesce() {
        let p = Plan::new(&[(0, 10), (20, 10)], &opts(10, 1, 4096)).unwrap();
        assert_eq!(p.extents().len(), 1);
        assert_eq!(p.extents()[0].len, 30);
        let p = Plan::new(&[(0, 10), (21, 10)], &opts(10, 1, 4096)).unwrap();
        assert_eq!(p.extents().len(), 2);
    }

    #[test]
    fn extents_are_aligned_and_cover_needed() {
        let p = Plan::new(&[(5000, 90)], &opts(0, 4096, 65536)).unwrap();
        let e = p.extents()[0];
        assert_eq!((e.offset, e.len), (4096, 4096));
        assert_eq!(p.bytes_to_read(), 4096);
        assert_eq!(e.needed, 5000 - 4096 + 90);
    }

    #[test]
    fn long_requests_split_at_max_read() {
        let p = Plan::new(&[(100, 10_000)], &opts(0, 512, 4096)).unwrap();
        assert!(p.extents().iter().all(|e| e.len <= 4096 && e.offset % 512 == 0));
        assert_eq!(p.extents().len(), 3);
        let file: Vec<u8> = (0..20_000u32).map(|i| i as u8).collect();
        assert_eq!(p.execute_from(&file), naive(&file, &[(100, 10_000)]));
    }

    /// A span joined across a wide gap and split at `max_read` can leave a read of gap bytes
    /// only: it is dropped, and every read serves a piece.
    #[test]
    fn a_split_span_reads_no_gap_only_extent() {
        let p = Plan::new(&[(0, 10), (10_000, 10)], &opts(20_000, 1, 4096)).unwrap();
        let reads: Vec<(u64, u32)> = p.extents().iter().map(|e| (e.offset, e.len)).collect();
        assert_eq!(reads, [(0, 4096), (8192, 1818)]);
        assert!((0..p.extents().len()).all(|i| !p.pieces(i).is_empty()));
    }

    #[test]
    fn rows_in_one_block_share_a_read() {
        let reqs: Vec<_> = (0..40).map(|r| (r * 90, 90)).collect();
        let p = Plan::new(&reqs, &opts(0, 4096, 65536)).unwrap();
        assert_eq!(p.extents().len(), 1);
    }

    /// Issue 16 (9): empty and overflowing requests, and a gap bound near `u64::MAX`, are errors
    /// naming the request, never panics.
    #[test]
    fn bad_requests_are_errors_not_panics() {
        let e = Plan::new(&[(0, 10), (5, 0)], &opts(0, 1, 4096)).unwrap_err();
        assert!(matches!(e, Error::InvalidRange { index: 1, .. }), "{e:?}");
        assert_eq!(e.to_string(), "range #1 (5..5) is invalid: the range is empty");
        let e = Plan::new(&[(u64::MAX - 10, 20)], &opts(0, 1, 4096)).unwrap_err();
        assert!(e.to_string().contains("largest file offset"), "{e}");
        let e = Plan::new(&[(u64::MAX - 4000, 10)], &opts(0, 4096, 4096)).unwrap_err();
        assert!(matches!(e, Error::InvalidRange { index: 0, .. }), "{e:?}");
        let e = Plan::new(&[(0, u64::MAX / 2), (0, u64::MAX / 2)], &opts(0, 1, 4096)).unwrap_err();
        assert!(e.to_string().contains("fit in memory"), "{e}");
        let p = Plan::new(&[(0, 10), (100_000, 10)], &opts(u64::MAX, 1, 4096)).unwrap();
        assert_eq!(p.out_len(), 20);
    }

    /// Past the small-input threshold the radix sort runs; equal offsets with different lengths
    /// must still come out sorted by length, so duplicates are neighbours and read once.
    #[test]
    fn equal_offsets_with_mixed_lengths_past_the_radix_threshold() {
        // Seven offsets with lengths repeating every 20 requests, and one offset whose first
        // length is unique while a later one repeats (5, 3, 7, 3).
        let mut reqs: Vec<(u64, u64)> = (0..600u64).map(|i| ((i % 7) * 5000, 1 + (i * 37) % 20)).collect();
        reqs.splice(300..300, [5, 3, 7, 3].map(|len| (39_000, len)));
        let p = Plan::new(&reqs, &opts(0, 1, 4096)).unwrap();
        let file: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
        assert_eq!(p.execute_from(&file), naive(&file, &reqs));
        let distinct: std::collections::BTreeSet<_> = reqs.iter().collect();
        assert_eq!(p.unique_requests(), distinct.len(), "duplicates must be neighbours after sorting");
    }

    /// The radix sort agrees with a stable comparison sort, whatever the table size (one, two or
    /// three passes) and however the requests fall in a block: offsets descending inside one
    /// block with equal lengths (only the fix-up pass can order them), equal offsets with
    /// descending lengths, and scattered offsets. The proptest above reaches these cases only by
    /// chance; this reaches them every run.
    #[test]
    fn radix_sort_agrees_with_a_stable_sort() {
        use rand::{rngs::StdRng, Rng, SeedableRng};
        let mut rng = StdRng::seed_from_u64(1);
        let req = |i: usize, off: u64, len: u64| Req { off, len, out: 0, idx: i as u32 };
        let descending_in_a_block: Vec<Req> = (0..400).map(|i| req(i, 1 << 20 | (399 - i as u64), 8)).collect();
        let descending_lengths: Vec<Req> = (0..400).map(|i| req(i, 4096 * (i as u64 % 3), 500 - i as u64)).collect();
        let mut cases = vec![descending_in_a_block, descending_lengths];
        for max in [6000u64, 1 << 31, 1 << 40] {
            cases.push((0..1000).map(|i| req(i, rng.gen_range(0..max), rng.gen_range(1..5))).collect());
        }
        for mut reqs in cases {
            let mut expected = reqs.clone();
            expected.sort_by_key(|r| (r.off, r.len));
            sort_requests(&mut reqs);
            let key = |v: &[Req]| v.iter().map(|r| (r.off, r.len, r.idx)).collect::<Vec<_>>();
            assert_eq!(key(&reqs), key(&expected));
        }
    }

    /// `Plan::check` refuses exactly what `Plan::new` refuses, at the edges of every check: the
    /// aligned end just fitting in `u64` or not, an empty request, an output just too large.
    #[test]
    fn check_agrees_with_new_at_the_edges() {
        let o = opts(0, 4096, 65536);
        let fits = u64::MAX - 4095; // the aligned end is u64::MAX
        let cases: [&[(u64, u64)]; 4] =
            [&[(fits - 10, 10)], &[(fits - 9, 10)], &[(0, 1), (5, 0)], &[(0, 1 << 62), (0, 1 << 62)]];
        for reqs in cases {
            let new = Plan::new(reqs, &o).map(|_| ()).map_err(|e| e.to_string());
            assert_eq!(Plan::check(reqs, &o).map_err(|e| e.to_string()), new, "{reqs:?}");
        }
        assert!(Plan::check(cases[0], &o).is_ok() && Plan::check(cases[1], &o).is_err());
        // An output of exactly isize::MAX bytes is allowed (planning it is not tried here).
        assert!(Plan::check(&[(0, 1 << 62), (0, (1 << 62) - 1)], &o).is_ok());
        assert!(Plan::check(cases[3], &o).is_err());
    }

    /// One read moves at most 2 GiB - 1 (an SQE's length is 32 bits, signed in the kernel).
    #[test]
    fn max_read_bound_is_just_under_2_gib() {
        let at = |max_read| PlanOptions { max_gap: 0, align: 1, max_read }.validate();
        assert!(at((1 << 31) - 1).is_ok());
        assert!(at(1 << 31).is_err());
        assert!(at(u64::from(u32::MAX)).is_err());
    }

    #[test]
    fn bad_options_are_named() {
        let e = Plan::new(&[(0, 1)], &opts(0, 3, 4096)).unwrap_err();
        assert!(e.to_string().contains("align"), "{e}");
        let e = Plan::new(&[(0, 1)], &opts(0, 512, 1000)).unwrap_err();
        assert!(e.to_string().contains("max_read"), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn plan_matches_naive_reference(
            // Up to 600 requests, so both the small-input sort and the radix sort (256 and up) run.
            reqs in prop::collection::vec((0u64..6000, 1u64..700), 0..600),
            gap in 0u64..2000,
            align_pow in 0u32..13,
            reads_per in 1u64..8,
        ) {
            let align = 1u64 << align_pow;
            let max_read = align * reads_per.max((1024 / align).max(1));
            let o = opts(gap, align, max_read);
            let file: Vec<u8> = (0..8192u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
            let plan = Plan::new(&reqs, &o).unwrap();
            prop_assert_eq!(plan.execute_from(&file), naive(&file, &reqs));
            let distinct: std::collections::BTreeSet<_> = reqs.iter().collect();
            prop_assert_eq!(plan.unique_requests(), distinct.len());
            let mut last_end = 0;
            for (i, e) in plan.extents().iter().enumerate() {
                prop_assert_eq!(e.offset % align, 0);
                prop_assert_eq!(e.len as u64 % align, 0);
                prop_assert!(e.len as u64 <= max_read);
                prop_assert!(e.offset >= last_end, "extents overlap");
                prop_assert!(e.needed <= e.len);
                last_end = e.offset + e.len as u64;
                for p in plan.pieces(i) {
                    prop_assert!(p.extent_offset + p.len <= e.len);
                }
            }
            // The pieces tile the output exactly: the gather future relies on it to expose the
            // output as initialised.
            let mut outs: Vec<(u64, u64)> = (0..plan.extents().len())
                .flat_map(|i| plan.pieces(i).iter().map(|p| (p.out_offset, p.len as u64)).collect::<Vec<_>>())
                .collect();
            outs.sort_unstable();
            let mut at = 0;
            for (o, l) in outs {
                prop_assert_eq!(o, at);
                at += l;
            }
            prop_assert_eq!(at, plan.out_len());
            // Read amplification bound: every extent byte is useful, alignment padding, or a
            // bounded gap.
            let bound = plan.useful_bytes() + plan.unique_requests() as u64 * (gap + align) + plan.extents().len() as u64 * 2 * align;
            prop_assert!(plan.bytes_to_read() <= bound);
        }
    }
}
