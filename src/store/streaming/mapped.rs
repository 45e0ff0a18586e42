//! `--io mmap` at its best: records are faulted in and dropped on the IO threads,
//! so the compute thread takes no major fault for a record the store has read, and
//! the device reads about the bytes asked for (see `docs/io.md`, "mmap").
//!
//! Two ways of faulting a record `[start, end)` in, by kind:
//! - **Trunk ranges** (≥ [`HUGE_MIN`] bytes): the whole 2 MiB folios inside the
//!   range carry `MADV_HUGEPAGE` + `MADV_RANDOM` ([`prepare`]); `MADV_POPULATE_READ`
//!   faults them in, each fault reading exactly the naturally aligned folio holding
//!   the page (`do_sync_mmap_readahead` in `mm/filemap.c`: the huge-page branch, no
//!   second folio and no async read-ahead under `VM_RAND_READ`), so nothing outside
//!   the range. The head and tail (less than a folio each) are read like the other
//!   ranges. Large folios cost the kernel ~30× less CPU per byte than 4 KiB pages
//!   (measured: 0.005 s vs 0.14 s of system time per 200 MiB), which on a 2-core
//!   machine is compute time given back. (`MADV_RANDOM` alone, on 4 KiB pages,
//!   reads one page per fault: measured 10× slower.)
//! - **Other ranges** (experts, pinned tensors): `posix_fadvise(POSIX_FADV_WILLNEED)`
//!   on exactly the range's pages, in chunks the kernel reads whole (one call reads
//!   at most max(`read_ahead_kb`, `max_sectors_kb`): `force_page_cache_ra` in
//!   `mm/readahead.c`), then `MADV_POPULATE_READ` (Linux ≥ 5.14; one touch per page
//!   before) maps them. The pages are cached by then, so the fault path's read-around
//!   (`read_ahead_kb` around a missing page, 8 MiB on the test machine) never runs.
//!
//! Dropping a record: `MADV_DONTNEED` (page-table entries) then
//! `POSIX_FADV_DONTNEED` (page cache) on the record widened to whole 2 MiB folios,
//! minus every live record and pinned tensor ([`subtract`]), so a neighbour's pages
//! stay. The store queues the drops of evicted records; an IO thread does them in a
//! batch before its next read.

use std::path::Path;

use anyhow::{Context, Result};

use crate::io::ShardFile;

/// Trunk ranges of at least this many bytes are faulted in through 2 MiB folios
/// (a shorter one holds at most one whole folio).
pub(crate) const HUGE_MIN: u64 = 4 << 20;

/// Size of the largest page-cache folio, bytes: the PMD size
/// (`/sys/kernel/mm/transparent_hugepage/hpage_pmd_size`, 2 MiB on x86-64).
pub(crate) fn folio_max() -> u64 {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(2 << 20)
}

/// The whole folios of `folio` bytes inside `[start, end)`: `(a, b)` with `a` the
/// first folio boundary at or after `start` and `b` the last at or before `end`
/// (`a >= b` when the range holds no whole folio).
pub(crate) fn whole_folios(start: u64, end: u64, folio: u64) -> (u64, u64) {
    (start.div_ceil(folio) * folio, end / folio * folio)
}

/// Marks the whole folios inside `[start, end)` of `f`'s mapping `MADV_HUGEPAGE` +
/// `MADV_RANDOM` (a trunk range; see the module doc): a fault there reads exactly
/// the folio holding it, which lies inside the range. Without transparent huge
/// pages for files the advice has no effect on the reads beyond `MADV_RANDOM`'s.
pub(crate) fn prepare(f: &ShardFile, start: u64, end: u64, folio: u64) {
    let Some(map) = f.map() else { return };
    let (a, b) = whole_folios(start, end.min(map.len() as u64), folio);
    if b > a {
        for adv in [memmap2::Advice::HugePage, memmap2::Advice::Random] {
            let _ = map.advise_range(adv, a as usize, (b - a) as usize);
        }
    }
}

/// The parts of `[lo, hi)` outside every interval of `keep` (each widened to whole
/// pages of `ps` bytes), as page-aligned ranges in order. `lo`, `hi` are
/// page-aligned. `keep` is sorted in place.
pub(crate) fn subtract(lo: u64, hi: u64, keep: &mut [(u64, u64)], ps: u64) -> Vec<(u64, u64)> {
    keep.sort_unstable();
    let mut out = Vec::new();
    let mut p = lo;
    for &(s, e) in keep.iter() {
        let (s, e) = (s / ps * ps, e.div_ceil(ps) * ps);
        if e <= p || s >= hi {
            continue;
        }
        if s > p {
            out.push((p, s));
        }
        p = p.max(e);
    }
    if p < hi {
        out.push((p, hi));
    }
    out
}

/// Smallest chunk of one `WILLNEED` call, bytes (the kernel's default `read_ahead_kb`).
const MIN_CHUNK: u64 = 128 << 10;
/// Largest chunk of one `WILLNEED` call, bytes (the kernel's own chunk in
/// `force_page_cache_ra`).
const MAX_CHUNK: u64 = 2 << 20;

/// Bytes one `posix_fadvise(WILLNEED)` call reads in whole for `path`'s device:
/// max(`read_ahead_kb`, `max_sectors_kb`) × 1024 from `/sys/dev/block/MAJ:MIN/queue`
/// (the parent's queue for a partition), clamped to [128 KiB, 2 MiB]; 128 KiB when
/// sysfs does not say (tmpfs, overlay without a block device).
pub(crate) fn willneed_chunk(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return MIN_CHUNK;
    };
    let dev = meta.dev();
    let (maj, min) = (libc::major(dev), libc::minor(dev));
    let base = std::path::PathBuf::from(format!("/sys/dev/block/{maj}:{min}"));
    let kb = |q: &Path, f: &str| -> Option<u64> {
        std::fs::read_to_string(q.join(f)).ok()?.trim().parse().ok()
    };
    for q in [base.join("queue"), base.join("../queue")] {
        let ra = kb(&q, "read_ahead_kb");
        let io = kb(&q, "max_sectors_kb");
        if ra.is_some() || io.is_some() {
            let b = ra.unwrap_or(0).max(io.unwrap_or(0)) * 1024;
            return b.clamp(MIN_CHUNK, MAX_CHUNK);
        }
    }
    MIN_CHUNK
}

/// Faults bytes `[start, end)` of `f`'s mapping in (see the module doc): `WILLNEED`
/// on exactly the range's pages (`chunk` bytes per call, [`willneed_chunk`]) except,
/// for a range marked by [`prepare`] (`huge` = its folio size), the whole folios
/// inside it, which the faults of `MADV_POPULATE_READ` read one folio each.
///
/// Errors: `f` has no mapping; the range lies beyond the end of the file (it was
/// truncated after it was mapped; [`crate::io::mmap_guard::fault_in`]).
pub(crate) fn fault_in(
    f: &ShardFile,
    start: u64,
    end: u64,
    chunk: u64,
    huge: Option<u64>,
) -> Result<()> {
    let map = f.map().context("internal: no mapping")?;
    let ps = crate::io::pagecache::page_size() as u64;
    let end = end.min(map.len() as u64);
    if end <= start {
        return Ok(());
    }
    let first = start / ps * ps;
    // Pages to read ahead with WILLNEED: all, or the head and tail around whole folios.
    let (a, b) = match huge {
        Some(folio) => whole_folios(start, end, folio),
        None => (end, end),
    };
    let spans = if b > a {
        [(first, a), (b, end)]
    } else {
        [(first, end), (end, end)]
    };
    for (lo, hi) in spans {
        let mut p = lo;
        while p < hi {
            let n = chunk.min(hi - p);
            let _ = rustix::fs::fadvise(
                f.file(),
                p,
                std::num::NonZeroU64::new(n),
                rustix::fs::Advice::WillNeed,
            );
            p += n;
        }
    }
    // MADV_POPULATE_READ, with a truncated shard reported as an error (mmap_guard).
    crate::io::mmap_guard::fault_in(map, &f.path, start as usize, end as usize)
}

/// Drops the page-aligned range `[lo, hi)` of `f` from this process's page tables
/// and from the page cache (the drop step of the module doc; the caller has taken
/// live ranges out with [`subtract`]).
pub(crate) fn release(f: &ShardFile, lo: u64, hi: u64) {
    if hi <= lo {
        return;
    }
    if let Some(map) = f.map() {
        let hi = hi.min(map.len() as u64);
        if hi > lo {
            // SAFETY: DONTNEED on a read-only shared file mapping only drops page-table
            // entries; later accesses re-read the file. No live record or pinned tensor
            // lies in the range (the caller subtracted them), and no `&mut` exists.
            let _ = unsafe {
                map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    lo as usize,
                    (hi - lo) as usize,
                )
            };
        }
    }
    crate::io::pagecache::evict_range(f.file(), lo, hi - lo);
}

#[cfg(test)]
mod tests {
    use super::{subtract, whole_folios};

    #[test]
    fn whole_folios_lie_inside_the_range() {
        // Folios of 8: [3, 30) holds [8, 24); [8, 16) is one folio; [9, 15) none.
        assert_eq!(whole_folios(3, 30, 8), (8, 24));
        assert_eq!(whole_folios(8, 16, 8), (8, 16));
        let (a, b) = whole_folios(9, 15, 8);
        assert!(a >= b);
    }

    /// Hand-derived: [0, 40) minus [5, 9) and [20, 21) on pages of 4 keeps
    /// [4, 12) and [20, 24) (widened to pages) and drops the rest.
    #[test]
    fn subtract_keeps_live_pages() {
        let mut keep = vec![(20, 21), (5, 9)];
        assert_eq!(
            subtract(0, 40, &mut keep, 4),
            vec![(0, 4), (12, 20), (24, 40)]
        );
        // A keep interval covering everything leaves nothing; disjoint ones are ignored.
        assert_eq!(subtract(8, 16, &mut [(0, 100)], 4), vec![]);
        assert_eq!(subtract(8, 16, &mut [(0, 8), (16, 20)], 4), vec![(8, 16)]);
        // Overlapping keep intervals.
        assert_eq!(
            subtract(0, 32, &mut [(4, 12), (8, 16)], 4),
            vec![(0, 4), (16, 32)]
        );
    }
}
